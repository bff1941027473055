# Shared harness of the e2e drivers that judge the simulator with the real
# kubectl (tests/e2e/kubectl*.sh). Source it; it is not a .sh, which ctest
# would run as a test:
#   . "$(dirname "$0")/kubectl_common.bash"
#   kc_init NAME          without kubectl: SKIP, or FAIL when
#                         KBRUN_REQUIRE_KUBECTL is set (CI). WORK (removed at
#                         exit) holds HOME and KUBECONFIG.
#   kc_start_sim [ARGS]   `kbrun sim --listen 127.0.0.1:0 --profile fast ARGS`
#                         writing $KUBECONFIG; its URL in URL. Stopped at exit
#                         with Ctrl-C, then SIGKILL after 5 s.
#   kc_stop_sim           stops it now (a driver may start another)
#   begin CASE / end / fail MESSAGE   cases, counted in passed and failed
#   k ARGS...             kubectl (timeout 30): output in $WORK/out, exit in CODE
#   expect_code GOT WANT, expect_in FILE REGEX, expect_not_in FILE REGEX,
#   expect_eq GOT WANT [WHAT], expect_has TEXT WHAT (a fixed string in $WORK/out)
#   kc_report             "NAME: N passed, M failed"; exits 1 if any failed
kc_init() {
  KC_NAME=$1
  KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
  if ! command -v kubectl >/dev/null 2>&1; then
    if [ -n "${KBRUN_REQUIRE_KUBECTL:-}" ]; then
      echo "FAIL: kubectl is not installed and KBRUN_REQUIRE_KUBECTL is set" >&2
      exit 1
    fi
    echo "SKIP: kubectl is not installed"
    exit 0
  fi
  # KBRUN_TEST_OUT may not exist yet (without it WORK would be empty and
  # the test would write to /)
  mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
  WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/$KC_NAME.XXXXXX") && [ -d "$WORK" ] ||
    { echo "FAIL: cannot make a work folder" >&2; exit 1; }
  mkdir -p "$WORK/home"
  export HOME="$WORK/home" KUBECONFIG="$WORK/kubeconfig"
  SIM_PID=
  trap kc_cleanup EXIT
  passed=0 failed=0 CASE=$KC_NAME CASE_FAILED=0
}

kc_stop_sim() {
  if [ -n "$SIM_PID" ]; then
    kill -INT "$SIM_PID" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$SIM_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SIM_PID" 2>/dev/null
    wait "$SIM_PID" 2>/dev/null
  fi
  SIM_PID=
  : >"$KUBECONFIG"
}

kc_cleanup() {
  kc_stop_sim
  rm -rf "$WORK"
}

kc_start_sim() {
  "$KBRUN" sim --listen 127.0.0.1:0 --profile fast "$@" --kubeconfig-out "$KUBECONFIG" \
    >"$WORK/sim.out" 2>"$WORK/sim.err" &
  SIM_PID=$!
  URL=
  for _ in $(seq 1 100); do
    URL=$(head -n 1 "$WORK/sim.out" 2>/dev/null)
    [ -n "$URL" ] && [ -s "$KUBECONFIG" ] && break
    sleep 0.1
  done
  case "$URL" in
  http://127.0.0.1:*) ;;
  *)
    echo "FAIL: kbrun sim did not start (first line: '$URL')" >&2
    cat "$WORK/sim.err" >&2
    exit 1
    ;;
  esac
}

fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); CASE_FAILED=1; }
begin() { CASE=$1; CASE_FAILED=0; }
end() { [ "$CASE_FAILED" = 0 ] && passed=$((passed + 1)); }
k() { timeout 30 kubectl "$@" >"$WORK/out" 2>&1; CODE=$?; }
expect_code() { [ "$1" = "$2" ] || { fail "exit code $1, expected $2:"; sed 's/^/    /' "$WORK/out" >&2; }; }
expect_in() { grep -qE -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
expect_not_in() { ! grep -qE -- "$2" "$1" || { fail "'$2' unexpectedly in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
expect_eq() { [ "$1" = "$2" ] || fail "got '$1', expected '$2'${3:+ ($3)}"; }
expect_has() { grep -qF -- "$1" "$WORK/out" || { fail "'$1' not in the output of: $2"; sed 's/^/    /' "$WORK/out" >&2; }; }

kc_report() {
  # a driver without cases (no begin/end) counts only its failures
  [ "$CASE" = "$KC_NAME" ] && [ "$failed" = 0 ] && passed=1
  echo "$KC_NAME: $passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit $?
}
