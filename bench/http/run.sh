#!/usr/bin/env bash
# bench/http/run.sh: kbrun's HTTP client against wrk and Python requests.
#
# Starts a private nginx (one worker, loopback, a small JSON file), then
# runs, interleaved, RUNS times each:
#   wrk      -t1 -c$CONNECTIONS for $DURATION s
#   kbrun    bench/http/kbrun_load.lua: $CONNECTIONS tasks looping kb.http.get
#   python   bench/http/py_client.py: requests + $CONNECTIONS threads
# and prints a markdown table of the median run (by req/s) of each client:
# req/s, p50/p99 latency, client CPU, nginx worker CPU, peak RSS, and the
# ratios kbrun/wrk and kbrun/python. Stops by itself (every command runs
# under `timeout`); nginx and the temporary directory are removed on exit.
#
#   bench/http/run.sh                       # 3 x 10 s each, ~2 minutes
#   DURATION=5 RUNS=1 bench/http/run.sh     # quick look
#   KBRUN=build-asan/kbrun bench/http/run.sh
#
# Environment: DURATION (10), CONNECTIONS (64), RUNS (3), KBRUN (first of
# build/kbrun, build-*/kbrun that exists), WRK (wrk), NGINX (/usr/sbin/nginx),
# PYTHON (/usr/bin/python3, which has python3-requests), PORT (a free one).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
RUNS=${RUNS:-3}
WRK=${WRK:-wrk}
NGINX=${NGINX:-/usr/sbin/nginx}
PYTHON=${PYTHON:-/usr/bin/python3}

if [ -z "${KBRUN:-}" ]; then
  for candidate in "$ROOT/build/kbrun" "$ROOT"/build-*/kbrun; do
    if [ -x "$candidate" ]; then KBRUN=$candidate; break; fi
  done
fi
if [ -z "${KBRUN:-}" ] || [ ! -x "$KBRUN" ]; then
  echo "run.sh: no kbrun binary found; build it or set KBRUN=path/to/kbrun" >&2
  exit 2
fi
for tool in "$WRK" "$NGINX" "$PYTHON" /usr/bin/time curl; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/kb-bench-http.XXXXXX)
NGINX_PID=
cleanup() {
  if [ -n "$NGINX_PID" ]; then
    kill "$NGINX_PID" 2>/dev/null || true
    wait "$NGINX_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=${PORT:-$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
URL="http://127.0.0.1:$PORT/small.json"

# ---- nginx ---------------------------------------------------------------------
mkdir -p "$TMP/www" "$TMP/tmp" "$TMP/out"
printf '%s\n' '{"id":42,"name":"kbrun","ok":true,"tags":["bench","http"],"score":0.97}' \
  > "$TMP/www/small.json"
# nginx started as root serves as nobody: the files must be world-readable.
chmod 755 "$TMP" "$TMP/www"
chmod 644 "$TMP/www/small.json"
sed -e "s#@PORT@#$PORT#g" -e "s#@PREFIX@#$TMP#g" "$HERE/nginx.conf" > "$TMP/nginx.conf"
"$NGINX" -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" > "$TMP/nginx.out" 2>&1 &
NGINX_PID=$!
for _ in $(seq 50); do
  curl -sf -o /dev/null "$URL" && break
  sleep 0.1
done
if ! curl -sf -o /dev/null "$URL"; then
  echo "run.sh: nginx did not come up:" >&2
  tail -n 5 "$TMP/nginx.out" "$TMP/error.log" >&2
  exit 1
fi
WORKER=$(pgrep -P "$NGINX_PID" | head -1)
CLK_TCK=$(getconf CLK_TCK)

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# wrk prints latencies as 812.00us, 1.23ms or 1.01s.
to_ms() {
  awk -v v="$1" 'BEGIN {
    n = v + 0
    if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0; else if (v ~ /s$/) n *= 1000
    printf "%.3f", n }'
}

# measure NAME RUN COMMAND...: one run; appends
# "name run rps p50_ms p99_ms client_cpu% nginx_cpu% rss_mb" to results.
measure() {
  local name=$1 run=$2
  shift 2
  local w0 w1 rps p50 p99
  w0=$(cpu_ticks "$WORKER")
  if ! /usr/bin/time -f "%U %S %e %M" -o "$TMP/time.txt" \
      timeout $((DURATION + 60)) "$@" > "$TMP/out.txt" 2>&1; then
    echo "run.sh: $name run $run failed:" >&2
    cat "$TMP/out.txt" >&2
    return 0
  fi
  w1=$(cpu_ticks "$WORKER")
  if [ "$name" = wrk ]; then
    rps=$(awk '/^Requests\/sec:/ { print $2 }' "$TMP/out.txt")
    p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$TMP/out.txt")")
    p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$TMP/out.txt")")
  else
    local line
    line=$(grep -E '^(kbrun_load|py_client) ' "$TMP/out.txt" | tail -1)
    rps=$(sed -E 's/.* rps=([0-9.]+).*/\1/' <<< "$line")
    p50=$(sed -E 's/.* p50_ms=([0-9.]+).*/\1/' <<< "$line")
    p99=$(sed -E 's/.* p99_ms=([0-9.]+).*/\1/' <<< "$line")
  fi
  read -r user sys elapsed rss_kb < "$TMP/time.txt"
  awk -v n="$name" -v r="$run" -v rps="$rps" -v p50="$p50" -v p99="$p99" \
      -v u="$user" -v s="$sys" -v e="$elapsed" -v rss="$rss_kb" \
      -v w="$((w1 - w0))" -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {
    printf "%s %s %s %s %s %.0f %.0f %.1f\n", n, r, rps, p50, p99,
      100 * (u + s) / e, 100 * (w / hz) / d, rss / 1024 }' >> "$TMP/results.txt"
  tail -1 "$TMP/results.txt" | awk '{ printf "  %-7s run %s: %8.0f req/s  p50 %7.3f ms  p99 %7.3f ms\n", $1, $2, $3, $4, $5 }' >&2
}

echo "kbrun: $KBRUN" >&2
echo "nginx on $URL (worker pid $WORKER); $RUNS x ${DURATION}s per client, $CONNECTIONS connections" >&2
: > "$TMP/results.txt"
for run in $(seq "$RUNS"); do
  measure wrk "$run" "$WRK" -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$URL"
  measure kbrun "$run" "$KBRUN" -q -o "$TMP/out" "$HERE/kbrun_load.lua" \
    url="$URL" connections="$CONNECTIONS" duration="$DURATION"
  measure python "$run" "$PYTHON" "$HERE/py_client.py" \
    --url "$URL" --threads "$CONNECTIONS" --duration "$DURATION"
done

# ---- report: the median run (by req/s) of each client --------------------------
median() { # NAME -> its median result line
  grep "^$1 " "$TMP/results.txt" | sort -k3,3 -g | awk '{ l[NR] = $0 } END { if (NR) print l[int((NR + 1) / 2)] }'
}
WRK_LINE=$(median wrk)
KB_LINE=$(median kbrun)
PY_LINE=$(median python)

echo
echo "HTTP GET of a small JSON file from nginx (1 worker), $CONNECTIONS connections," \
  "${DURATION}s, median of $RUNS runs by req/s; $(nproc) CPUs: $(uname -srm)"
echo
echo "| client | req/s | p50 ms | p99 ms | client CPU % | nginx CPU % | peak RSS MB |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for line in "$WRK_LINE" "$KB_LINE" "$PY_LINE"; do
  [ -n "$line" ] && awk '{ printf "| %s | %.0f | %.3f | %.3f | %s | %s | %s |\n", $1, $3, $4, $5, $6, $7, $8 }' <<< "$line"
done
echo
awk -v w="$(awk '{ print $3 }' <<< "$WRK_LINE")" -v k="$(awk '{ print $3 }' <<< "$KB_LINE")" \
    -v p="$(awk '{ print $3 }' <<< "$PY_LINE")" 'BEGIN {
  if (w > 0 && k > 0) printf "kbrun/wrk = %.2f (target >= 0.5)\n", k / w
  if (p > 0 && k > 0) printf "kbrun/python = %.1f\n", k / p }'
echo
echo "all runs (client run req/s p50_ms p99_ms client_cpu% nginx_cpu% rss_mb):"
sed 's/^/  /' "$TMP/results.txt"
