#!/usr/bin/env bash
# kb.k8s over TLS: a test CA, a server certificate for 127.0.0.1 and a
# client certificate (openssl, in a temp dir); nginx on a free loopback port
# terminates TLS (ssl_verify_client optional) and proxies to `kbrun sim`,
# answering with X-Client-Verify and X-Auth so the checks see which
# credential arrived. tests/e2e/k8s_tls/check.lua then loads kubeconfigs
# with a token, a token file, client certificate files and -data, CA file
# and -data, exec plugins returning a token and a certificate,
# insecure-skip-tls-verify, tls-server-name (a second server whose
# certificate names only kbrun-sni.test) and the in-cluster layout, and
# expects a wrong CA to fail with class tls. Every server is stopped by PID on exit.
set -u
: "${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}"
HERE=$(cd "$(dirname "$0")" && pwd)
for tool in openssl nginx; do
  if ! command -v "$tool" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$tool" ]; then
    echo "SKIP: $tool is not installed"
    exit 0
  fi
done
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/k8s_tls.XXXXXX")
SIM_PID= NGINX_PID=
stop() { # stop PID: SIGTERM, then SIGKILL after 5 s
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}
cleanup() {
  stop "$NGINX_PID"
  stop "$SIM_PID"
  rm -rf "$WORK"
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; exit 1; }

# ---- certificates --------------------------------------------------------------
cd "$WORK" || exit 1
ssl() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || die "openssl $1 failed: $(tail -n 5 "$WORK/openssl.log")"; }
ssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kbrun test CA" \
  -keyout ca.key -out ca.crt
ssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kbrun wrong CA" \
  -keyout wrong-ca.key -out wrong-ca.crt
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
ssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
ssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.crt
# A certificate for a name only (no IP): kubeconfig tls-server-name.
printf 'subjectAltName=DNS:kbrun-sni.test\nextendedKeyUsage=serverAuth\n' >sni.ext
ssl req -newkey rsa:2048 -nodes -subj "/CN=kbrun-sni.test" -keyout sni.key -out sni.csr
ssl x509 -req -in sni.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile sni.ext -out sni.crt
printf 'extendedKeyUsage=clientAuth\n' >client.ext
ssl req -newkey rsa:2048 -nodes -subj "/CN=kbrun-user/O=system:masters" -keyout client.key -out client.csr
ssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile client.ext -out client.crt

# ---- the simulator ---------------------------------------------------------------
"$KBRUN_BIN" sim --listen 127.0.0.1:0 --profile fast >sim.out 2>sim.err &
SIM_PID=$!
SIM_URL=
for _ in $(seq 1 100); do
  SIM_URL=$(head -n 1 sim.out 2>/dev/null)
  [ -n "$SIM_URL" ] && break
  sleep 0.1
done
case "$SIM_URL" in
http://127.0.0.1:*) ;;
*) die "kbrun sim did not start: $(cat sim.err)" ;;
esac

# ---- nginx -------------------------------------------------------------------------
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
    2>/dev/null || echo $((20000 + RANDOM % 20000))
}
mkdir -p nginx/logs nginx/tmp
start_nginx() {
  PORT=$(free_port)
  SNI_PORT=$(free_port)
  {
    [ "$(id -u)" = 0 ] && echo "user root;"
    cat <<EOF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/tmp/body;
  proxy_temp_path $WORK/nginx/tmp/proxy;
  fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
  uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
  scgi_temp_path $WORK/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$PORT ssl;
    ssl_certificate $WORK/server.crt;
    ssl_certificate_key $WORK/server.key;
    ssl_client_certificate $WORK/ca.crt;
    ssl_verify_client optional;
    location / {
      proxy_pass $SIM_URL;
      proxy_http_version 1.1;
      proxy_buffering off;
      proxy_read_timeout 120s;
      proxy_set_header X-Client-Verify \$ssl_client_verify;
      add_header X-Client-Verify \$ssl_client_verify always;
      set \$auth \$http_authorization;
      if (\$auth = "") { set \$auth "-"; }
      add_header X-Auth \$auth always;
    }
  }
  server {
    listen 127.0.0.1:$SNI_PORT ssl;
    ssl_certificate $WORK/sni.crt;
    ssl_certificate_key $WORK/sni.key;
    location / {
      proxy_pass $SIM_URL;
      add_header X-Host \$http_host always;
      add_header X-SNI \$ssl_server_name always;
    }
  }
}
EOF
  } >nginx/nginx.conf
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" \
    >nginx/logs/stdout.log 2>&1 &
  NGINX_PID=$!
  for _ in $(seq 1 50); do
    kill -0 "$NGINX_PID" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
started=
for _ in 1 2 3; do # a port taken between the probe and nginx's bind: try another
  if start_nginx; then started=1; break; fi
  stop "$NGINX_PID"
  NGINX_PID=
done
[ -n "$started" ] || die "nginx did not start: $(cat nginx/logs/error.log nginx/logs/stdout.log 2>/dev/null)"

# ---- the checks ---------------------------------------------------------------------
export K8S_TLS_DIR="$WORK" K8S_TLS_URL="https://127.0.0.1:$PORT" K8S_TLS_PORT="$PORT"
export K8S_TLS_SNI_URL="https://127.0.0.1:$SNI_PORT"
export KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT="$PORT"
"$KBRUN_BIN" -q -o "$WORK/out" "$HERE/k8s_tls/check.lua"
code=$?
if [ "$code" != 0 ]; then
  echo "--- nginx error log" >&2
  tail -n 20 nginx/logs/error.log >&2
fi
exit "$code"
