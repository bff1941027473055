#!/usr/bin/env bash
# Every connection parameter of the bundled scenarios end to end
# (kb.connection, docs/security.md "Connection parameters"): taxi_50runs
# against a standalone `kbrun sim` behind nginx with a private CA made here
# by openssl. nginx (as this user, its own prefix, pid and logs in a temp
# dir, ephemeral loopback ports) serves four TLS fronts:
#   PLAIN   server certificate of the test CA, nothing else required
#   MTLS    a client certificate of the test CA required (ssl_verify_client on)
#   BEARER  "Authorization: Bearer <token>" required, and only the Kubernetes
#           service-proxy path /api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy/
#           is passed on (with the prefix, to the simulator's proxy route)
#   COOKIE  the authservice_session cookie and "kubeflow-userid: alice" required (401 / 403)
# tests/e2e/tls_scenarios/check.lua runs the scenario against each (the
# kubeconfig cases with a token, an exec plugin and a client-certificate user) and
# checks the runs, nginx's access logs, result.json's connection record,
# the insecure warning, the refusal of the default, and that no token or
# cookie is written. A missing nginx or openssl is a failure: this test is
# the proof that the scenarios reach TLS servers. Everything started is
# stopped by PID on exit, with bounded waits.
set -u
: "${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}"
HERE=$(cd "$(dirname "$0")" && pwd)
die() { echo "FAIL: $*" >&2; exit 1; }
command -v openssl >/dev/null 2>&1 || die "openssl is not installed (.ci/install-deps installs it)"
NGINX=$(command -v nginx 2>/dev/null || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || die "nginx is not installed (.ci/install-deps installs nginx-light)"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/tls_scenarios.XXXXXX")
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

# ---- certificates --------------------------------------------------------------
cd "$WORK" || exit 1
ssl() { openssl "$@" >>"$WORK/openssl.log" 2>&1 || die "openssl $1 failed: $(tail -n 5 "$WORK/openssl.log")"; }
ssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kbrun tls_scenarios CA" \
  -keyout ca.key -out ca.crt
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >server.ext
ssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr
ssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.crt
printf 'extendedKeyUsage=clientAuth\n' >client.ext
ssl req -newkey rsa:2048 -nodes -subj "/CN=kbrun-user" -keyout client.key -out client.csr
ssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile client.ext -out client.crt
# the credentials nginx checks (random per run, so a leak is findable)
TOKEN="tok$(openssl rand -hex 16)"
SESSION="sess$(openssl rand -hex 16)"

# ---- the simulator ---------------------------------------------------------------
"$KBRUN_BIN" sim --listen 127.0.0.1:0 --profile fast --speed 600 >sim.out 2>sim.err &
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
PROXY_PREFIX=/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy/
start_nginx() {
  PLAIN_PORT=$(free_port) MTLS_PORT=$(free_port) BEARER_PORT=$(free_port) COOKIE_PORT=$(free_port)
  local tls="ssl_certificate $WORK/server.crt; ssl_certificate_key $WORK/server.key;"
  local pass="proxy_pass $SIM_URL; proxy_http_version 1.1; proxy_buffering off; proxy_read_timeout 60s;"
  {
    [ "$(id -u)" = 0 ] && echo "user root;"
    cat <<EOF
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/logs/error.log warn;
events { worker_connections 128; }
http {
  client_body_temp_path $WORK/nginx/tmp/body;
  proxy_temp_path $WORK/nginx/tmp/proxy;
  fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
  uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
  scgi_temp_path $WORK/nginx/tmp/scgi;
  log_format line '\$request_method \$uri \$status';
  server {
    listen 127.0.0.1:$PLAIN_PORT ssl; $tls
    access_log $WORK/nginx/logs/plain.log line;
    location / { $pass }
  }
  server {
    listen 127.0.0.1:$MTLS_PORT ssl; $tls
    ssl_client_certificate $WORK/ca.crt;
    ssl_verify_client on;
    access_log $WORK/nginx/logs/mtls.log line;
    location / { $pass }
  }
  server {
    listen 127.0.0.1:$BEARER_PORT ssl; $tls
    access_log $WORK/nginx/logs/bearer.log line;
    location $PROXY_PREFIX {
      if (\$http_authorization != "Bearer $TOKEN") { return 401; }
      $pass
    }
    location / { return 404; }
  }
  server {
    listen 127.0.0.1:$COOKIE_PORT ssl; $tls
    access_log $WORK/nginx/logs/cookie.log line;
    location / {
      if (\$cookie_authservice_session != "$SESSION") { return 401; }
      if (\$http_kubeflow_userid != "alice") { return 403; }
      $pass
    }
  }
}
EOF
  } >nginx/nginx.conf
  "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" -g "daemon off;" \
    >nginx/logs/stdout.log 2>&1 &
  NGINX_PID=$!
  for port in $PLAIN_PORT $MTLS_PORT $BEARER_PORT $COOKIE_PORT; do
    local up=
    for _ in $(seq 1 50); do
      kill -0 "$NGINX_PID" 2>/dev/null || return 1
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
      sleep 0.1
    done
    [ -n "$up" ] || return 1
  done
  return 0
}
started=
for _ in 1 2 3; do # a port taken between the probe and nginx's bind: try another
  if start_nginx; then started=1; break; fi
  stop "$NGINX_PID"
  NGINX_PID=
done
[ -n "$started" ] || die "nginx did not start: $(cat nginx/logs/error.log nginx/logs/stdout.log 2>/dev/null)"

# ---- the checks ---------------------------------------------------------------------
export TLS_DIR="$WORK" TLS_TOKEN="$TOKEN" TLS_SESSION="$SESSION" TLS_SIM_URL="$SIM_URL"
export TLS_PLAIN_PORT="$PLAIN_PORT" TLS_MTLS_PORT="$MTLS_PORT" TLS_BEARER_PORT="$BEARER_PORT"
export TLS_COOKIE_PORT="$COOKIE_PORT" TLS_SCENARIOS="$HERE/../../scenarios"
"$KBRUN_BIN" -q -o "$WORK/check-out" "$HERE/tls_scenarios/check.lua"
code=$?
if [ "$code" != 0 ]; then
  echo "--- nginx error log" >&2
  tail -n 20 nginx/logs/error.log >&2
fi
exit "$code"
