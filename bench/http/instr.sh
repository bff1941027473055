#!/usr/bin/env bash
# bench/http/instr.sh: user-space instructions per request of kbrun's HTTP
# client, counted by callgrind, for comparing builds on a noisy machine
# where CPU time per request swings by 30% between runs (it depends on
# how many events each epoll_wait returns, i.e. on what else runs).
#
# For each binary: kbrun bench/http/kbrun_load.lua under callgrind against
# a private nginx, once for SHORT and once for LONG seconds; the marginal
# cost (instructions of the long run - of the short run) / (requests of the
# long run - of the short run) leaves start-up out. Binaries alternate so
# that drift hits them alike; ROUNDS rounds, the median reported. Kernel
# time (send, recv, poll) is not counted: builds that change system calls
# need bench/http/run.sh.
#
#   bench/http/instr.sh /tmp/kbrun-before build/kbrun
#   SHORT=2 LONG=6 ROUNDS=3 bench/http/instr.sh A B
#   KB_C=1 bench/http/instr.sh build/bench/http_bench
#   KBRUN_HTTP=curl bench/http/instr.sh build/kbrun     # the libcurl path
#
# Environment: SHORT (2), LONG (6), ROUNDS (3), CONNECTIONS (64), NGINX
# (/usr/sbin/nginx), KB_C (set: the binaries take http_bench's arguments:
# URL connections= duration=), KBRUN_HTTP (curl: every request on libcurl).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SHORT=${SHORT:-2}
LONG=${LONG:-6}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
NGINX=${NGINX:-/usr/sbin/nginx}
[ $# -ge 1 ] || { echo "usage: bench/http/instr.sh KBRUN [KBRUN...]" >&2; exit 2; }
for tool in valgrind "$NGINX" curl python3; do
  command -v "$tool" >/dev/null || { echo "instr.sh: $tool not found" >&2; exit 2; }
done
for b in "$@"; do [ -x "$b" ] || { echo "instr.sh: $b is not an executable" >&2; exit 2; }; done

TMP=$(mktemp -d /tmp/kb-bench-instr.XXXXXX)
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

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL="http://127.0.0.1:$PORT/small.json"
mkdir -p "$TMP/www" "$TMP/tmp" "$TMP/out"
printf '%s\n' '{"id":42,"name":"kbrun","ok":true,"tags":["bench","http"],"score":0.97}' \
  > "$TMP/www/small.json"
chmod 755 "$TMP" "$TMP/www"
chmod 644 "$TMP/www/small.json"
sed -e "s#@PORT@#$PORT#g" -e "s#@PREFIX@#$TMP#g" "$HERE/nginx.conf" > "$TMP/nginx.conf"
"$NGINX" -p "$TMP" -c "$TMP/nginx.conf" -e "$TMP/error.log" > "$TMP/nginx.out" 2>&1 &
NGINX_PID=$!
for _ in $(seq 50); do curl -sf -o /dev/null "$URL" && break; sleep 0.1; done
curl -sf -o /dev/null "$URL" || { echo "instr.sh: nginx did not come up" >&2; exit 1; }

# count BINARY SECONDS -> "instructions requests"
count() {
  local out="$TMP/cg.out" log="$TMP/run.txt"
  if [ -n "${KB_C:-}" ]; then
    timeout $(($2 * 20 + 120)) valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$1" "$URL" connections="$CONNECTIONS" duration="$2" > "$log" 2>&1
  else
    timeout $(($2 * 20 + 120)) valgrind --tool=callgrind --callgrind-out-file="$out" \
      "$1" -q -o "$TMP/out" "$HERE/kbrun_load.lua" url="$URL" connections="$CONNECTIONS" \
      duration="$2" > "$log" 2>&1
  fi || { echo "instr.sh: $1 failed:" >&2; tail -5 "$log" >&2; exit 1; }
  local instr reqs
  instr=$(awk '/^summary:/ { print $2 }' "$out")
  reqs=$(grep -E '^(kbrun_load|http_bench) ' "$log" | sed -E 's/.* requests=([0-9]+).*/\1/')
  echo "$instr $reqs"
}

: > "$TMP/results.txt"
for round in $(seq "$ROUNDS"); do
  for b in "$@"; do
    read -r i1 n1 <<< "$(count "$b" "$SHORT")"
    read -r i2 n2 <<< "$(count "$b" "$LONG")"
    per=$(awk -v a="$i1" -v b="$i2" -v x="$n1" -v y="$n2" 'BEGIN { printf "%.0f", (y > x) ? (b - a) / (y - x) : 0 }')
    echo "$b $round $per $n1 $n2" >> "$TMP/results.txt"
    echo "  $b round $round: $per instructions/request ($n1 and $n2 requests)" >&2
  done
done

echo
echo "| binary | instructions per request (median of $ROUNDS) | vs first |"
echo "|---|---:|---:|"
first=
for b in "$@"; do
  med=$(awk -v b="$b" '$1 == b { print $3 }' "$TMP/results.txt" | sort -n |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  [ -z "$first" ] && first=$med
  awk -v b="$b" -v m="$med" -v f="$first" 'BEGIN { printf "| %s | %d | %+.1f%% |\n", b, m, 100 * (m - f) / f }'
done
