#!/usr/bin/env bash
# bench/http/run.sh: kbrun's HTTP client against wrk and Python requests.
#
# Starts a private nginx (one worker, loopback, a small JSON file), then
# runs, interleaved (round 1 of every client, round 2 of every client...),
# RUNS rounds of each client in $CLIENTS:
#   wrk      -t1 -c$CONNECTIONS for $DURATION s
#   kbrun    bench/http/kbrun_load.lua: $CONNECTIONS tasks looping kb.http.get
#            (plain http:// goes on the client's native HTTP/1.1 path)
#   kbcurl   the same with KBRUN_HTTP=curl: every request on libcurl
#   kb_c     build/bench/http_bench: the same loop in C over kb_http_client,
#            no Lua (the floor of kbrun's client path)
#   kb_ccurl the same C loop with KBRUN_HTTP=curl
#   python   bench/http/py_client.py: requests + $CONNECTIONS threads
#   base     $KBRUN_BASE running kbrun_load.lua (an older kbrun, for A/B)
# and prints a markdown table with, per client, the median over the rounds
# of req/s, p50/p99 latency, CPU per request (user+sys of the client
# process alone, from /usr/bin/time, over the requests it completed),
# client CPU %, nginx worker CPU % and peak RSS, then the ratios against
# wrk. Stops by itself (every command runs under `timeout`); nginx and the
# temporary directory are removed on exit.
#
#   bench/http/run.sh                       # 5 x 10 s each, ~4 minutes
#   DURATION=5 RUNS=1 bench/http/run.sh     # quick look
#   CLIENTS="wrk kbrun base" KBRUN_BASE=/tmp/kbrun-old bench/http/run.sh   # A/B
#
# Environment: DURATION (10), CONNECTIONS (64), RUNS (5), CLIENTS ("wrk
# kbrun kbcurl kb_c kb_ccurl python", plus base when KBRUN_BASE is set),
# KBRUN (first of build/kbrun, build-*/kbrun that exists), KB_C
# (bench/http_bench beside it),
# KBRUN_BASE, WRK (wrk), NGINX (/usr/sbin/nginx), PYTHON (/usr/bin/python3,
# which has python3-requests), PORT (a free one).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
RUNS=${RUNS:-5}
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

# measure NAME RUN COMMAND...: one run; appends "name run rps p50_ms p99_ms
# client_cpu% nginx_cpu% rss_mb requests cpu_us_per_request" to results.
measure() {
  local name=$1 run=$2
  shift 2
  local w0 w1 rps p50 p99 reqs
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
    reqs=$(awk '/ requests in / { print $1 }' "$TMP/out.txt")
    p50=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$TMP/out.txt")")
    p99=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$TMP/out.txt")")
  else
    local line
    line=$(grep -E '^(kbrun_load|py_client|http_bench) ' "$TMP/out.txt" | tail -1)
    rps=$(sed -E 's/.* rps=([0-9.]+).*/\1/' <<< "$line")
    reqs=$(sed -E 's/.* requests=([0-9]+).*/\1/' <<< "$line")
    p50=$(sed -E 's/.* p50_ms=([0-9.]+).*/\1/' <<< "$line")
    p99=$(sed -E 's/.* p99_ms=([0-9.]+).*/\1/' <<< "$line")
  fi
  read -r user sys elapsed rss_kb < "$TMP/time.txt"
  awk -v n="$name" -v r="$run" -v rps="$rps" -v p50="$p50" -v p99="$p99" \
      -v u="$user" -v s="$sys" -v e="$elapsed" -v rss="$rss_kb" -v q="$reqs" \
      -v w="$((w1 - w0))" -v hz="$CLK_TCK" -v d="$DURATION" 'BEGIN {
    printf "%s %s %s %s %s %.0f %.0f %.1f %d %.2f\n", n, r, rps, p50, p99,
      100 * (u + s) / e, 100 * (w / hz) / d, rss / 1024, q, (q > 0 ? 1e6 * (u + s) / q : 0) }' \
    >> "$TMP/results.txt"
  tail -1 "$TMP/results.txt" | awk '{ printf "  %-7s run %s: %8.0f req/s  p50 %7.3f ms  p99 %7.3f ms  %6.2f us CPU/request\n", $1, $2, $3, $4, $5, $10 }' >&2
}

KB_C=${KB_C:-$(dirname "$KBRUN")/bench/http_bench}
if [ -z "${CLIENTS:-}" ]; then
  CLIENTS="wrk kbrun kbcurl kb_c kb_ccurl python"
  [ -n "${KBRUN_BASE:-}" ] && CLIENTS="$CLIENTS base"
fi
for name in $CLIENTS; do
  case $name in
    wrk|kbrun|kbcurl|python) ;;
    kb_c|kb_ccurl) [ -x "$KB_C" ] || { echo "run.sh: $KB_C not found (cmake --build BUILD --target http_bench, or set KB_C)" >&2; exit 2; } ;;
    base) [ -x "${KBRUN_BASE:-}" ] || { echo "run.sh: client base needs KBRUN_BASE=path/to/kbrun" >&2; exit 2; } ;;
    *) echo "run.sh: unknown client '$name' (expected wrk, kbrun, kbcurl, kb_c, kb_ccurl, python, base)" >&2; exit 2 ;;
  esac
done

echo "kbrun: $KBRUN${KBRUN_BASE:+, base: $KBRUN_BASE}" >&2
echo "nginx on $URL (worker pid $WORKER); $RUNS x ${DURATION}s per client ($CLIENTS), $CONNECTIONS connections" >&2
: > "$TMP/results.txt"
for run in $(seq "$RUNS"); do
  for name in $CLIENTS; do
    case $name in
      wrk) measure wrk "$run" "$WRK" -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$URL" ;;
      kbrun) measure kbrun "$run" "$KBRUN" -q -o "$TMP/out" "$HERE/kbrun_load.lua" \
          url="$URL" connections="$CONNECTIONS" duration="$DURATION" ;;
      base) measure base "$run" "$KBRUN_BASE" -q -o "$TMP/out" "$HERE/kbrun_load.lua" \
          url="$URL" connections="$CONNECTIONS" duration="$DURATION" ;;
      kbcurl) KBRUN_HTTP=curl measure kbcurl "$run" "$KBRUN" -q -o "$TMP/out" "$HERE/kbrun_load.lua" \
          url="$URL" connections="$CONNECTIONS" duration="$DURATION" ;;
      kb_c) measure kb_c "$run" "$KB_C" "$URL" connections="$CONNECTIONS" duration="$DURATION" ;;
      kb_ccurl) KBRUN_HTTP=curl measure kb_ccurl "$run" "$KB_C" "$URL" connections="$CONNECTIONS" duration="$DURATION" ;;
      python) measure python "$run" "$PYTHON" "$HERE/py_client.py" \
          --url "$URL" --threads "$CONNECTIONS" --duration "$DURATION" ;;
    esac
  done
done

# ---- report: per client, the median over its rounds of each column ---------------
median_of() { # NAME COLUMN -> the median of that column over NAME's runs
  awk -v n="$1" -v c="$2" '$1 == n { print $c }' "$TMP/results.txt" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else if (NR) print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo
echo "HTTP GET of a small JSON file from nginx (1 worker), $CONNECTIONS connections," \
  "${DURATION}s, medians over $RUNS rounds; $(nproc) CPUs: $(uname -srm)"
echo
echo "| client | req/s | p50 ms | p99 ms | CPU µs/request | client CPU % | nginx CPU % | peak RSS MB |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for name in $CLIENTS; do
  grep -q "^$name " "$TMP/results.txt" || continue
  printf '| %s | %.0f | %.3f | %.3f | %.2f | %.0f | %.0f | %.1f |\n' "$name" \
    "$(median_of "$name" 3)" "$(median_of "$name" 4)" "$(median_of "$name" 5)" \
    "$(median_of "$name" 10)" "$(median_of "$name" 6)" "$(median_of "$name" 7)" "$(median_of "$name" 8)"
done
echo
WRK_RPS=$(median_of wrk 3)
WRK_CPU=$(median_of wrk 10)
for name in $CLIENTS; do
  [ "$name" = wrk ] && continue
  grep -q "^$name " "$TMP/results.txt" || continue
  awk -v n="$name" -v wr="${WRK_RPS:-0}" -v wc="${WRK_CPU:-0}" -v r="$(median_of "$name" 3)" \
      -v c="$(median_of "$name" 10)" 'BEGIN {
    if (wr > 0 && wc > 0) printf "%s/wrk: %.2fx the req/s, %.2fx the CPU per request\n", n, r / wr, c / wc }'
done
awk -v p="$(median_of python 3)" -v k="$(median_of kbrun 3)" 'BEGIN {
  if (p > 0 && k > 0) printf "kbrun/python: %.1fx the req/s\n", k / p }'
echo
echo "all runs (client run req/s p50_ms p99_ms client_cpu% nginx_cpu% rss_mb requests cpu_us/request):"
sed 's/^/  /' "$TMP/results.txt"
