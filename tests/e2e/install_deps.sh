#!/usr/bin/env bash
# .ci/install-deps with shims for dpkg-query and apt-get on PATH (nothing is
# installed): it must exit 0 after installing what is missing, whether a
# policy-rc.d exists already (every Debian container image has one: the
# script used to end with status 1 there, and the README's chain stopped
# silently) or not (then it adds one for the install and removes it).
set -u
SRC=${KBRUN_SOURCE_DIR:?run by ctest}
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/install_deps.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0
fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); }

mkdir -p "$WORK/bin"
# dpkg-query: every package is missing; apt-get: records its arguments
cat >"$WORK/bin/dpkg-query" <<'SH'
#!/bin/sh
exit 1
SH
cat >"$WORK/bin/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$SHIM_LOG"
exit 0
SH
# npm: records its arguments and the folder it ran in
cat >"$WORK/bin/npm" <<'SH'
#!/bin/sh
echo "npm $* in $PWD" >>"$SHIM_LOG"
mkdir -p node_modules/@kubernetes/client-node && echo '{}' >node_modules/@kubernetes/client-node/package.json
exit 0
SH
chmod +x "$WORK/bin/dpkg-query" "$WORK/bin/apt-get" "$WORK/bin/npm"

run_case() { # run_case NAME: runs install-deps, checks exit 0 and the install
  CASE=$1
  : >"$WORK/apt.log"
  rm -rf "$WORK/js"
  PATH="$WORK/bin:$PATH" SHIM_LOG="$WORK/apt.log" KB_POLICY_RC="$WORK/policy-rc.d" \
    KB_CLIENT_NODE_DIR="$WORK/js" bash "$SRC/.ci/install-deps" >"$WORK/out" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || fail "exit $rc: $(cat "$WORK/out")"
  grep -q "^apt-get update" "$WORK/apt.log" || fail "apt-get update not run"
  grep -q "^apt-get install .* liblua5.4-dev" "$WORK/apt.log" || fail "the missing packages were not installed"
  # the JavaScript client: npm ci of the pinned lock file, outside the checkout
  grep -q "^npm ci .* in $WORK/js$" "$WORK/apt.log" || fail "npm ci did not run in KB_CLIENT_NODE_DIR: $(cat "$WORK/apt.log")"
  cmp -s "$SRC/tests/js/package-lock.json" "$WORK/js/package-lock.json" || fail "the lock file was not copied"
}

printf '#!/bin/sh\nexit 0\n' >"$WORK/policy-rc.d"
run_case policy-exists
[ -f "$WORK/policy-rc.d" ] || fail "the existing policy-rc.d was removed"
grep -q "exit 0" "$WORK/policy-rc.d" 2>/dev/null || fail "the existing policy-rc.d was changed"
[ "$failed" = 0 ] && passed=$((passed + 1))

before=$failed
rm -f "$WORK/policy-rc.d"
run_case no-policy
[ -e "$WORK/policy-rc.d" ] && fail "the policy-rc.d it added was left behind"
[ "$failed" = "$before" ] && passed=$((passed + 1))

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
