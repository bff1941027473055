#!/usr/bin/env bash
# The suite under valgrind memcheck: the C unit tests, and the Lua tests of
# the core modules run by kbrun. Tests driving the simulator in real time
# at x600 are left out (C: test_sim_server, test_sim_kfp; the simulator's
# model and its Kubernetes store are covered in manual-clock C tests): under valgrind's 20-50x slowdown their real-time budgets (a
# 250 ms request floor is 150 simulated seconds) stop meaning anything.
#
#   cmake -S . -B build-vg -DCMAKE_BUILD_TYPE=Debug && cmake --build build-vg -j2
#   tests/valgrind.sh build-vg            # exit 0 when every run is clean
set -u
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
VG=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --track-fds=no --quiet)
LUA_TESTS=(tasks json yaml hist metrics fs csv log http httpd thresholds process report svg)
out=$(mktemp -d "${TMPDIR:-/tmp}/kbrun-vg.XXXXXX")
trap 'rm -rf "$out"' EXIT
passed=0 failed=0
run() { # run NAME CMD...
  local name=$1; shift
  if (cd "$HERE" && KBRUN_SOURCE_DIR="$HERE/.." KBRUN_BIN="$BUILD/kbrun" KBRUN_TEST_OUT="$out" \
        "${VG[@]}" "$@") >"$out/$name.log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL $name (log below)"; tail -30 "$out/$name.log"
  fi
}
for t in "$BUILD"/tests/test_*; do
  case "$(basename "$t")" in
    test_sim_server|test_sim_kfp) continue ;; # the simulator on a real-time clock at x600
  esac
  [ -x "$t" ] && run "c.$(basename "$t")" "$t"
done
for t in "${LUA_TESTS[@]}"; do
  run "lua.test_$t" "$BUILD/kbrun" -q -o "$out/exp" "$HERE/lua/test_$t.lua"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
