# Shared set-up of the e2e drivers (source it: . "$(dirname "$0")/common.bash";
# not a .sh: ctest runs every tests/e2e/*.sh as a test):
#   e2e_init NAME   KBRUN (the binary ctest names), WORK (a fresh folder under
#                   $KBRUN_TEST_OUT, removed at exit), PID (a child killed
#                   at exit when set), failed (a count) and fail MESSAGE.
e2e_init() {
  KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
  mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
  WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/$1.XXXXXX") && [ -d "$WORK" ] || {
    echo "cannot make a work folder" >&2
    exit 1
  }
  PID=
  trap e2e_cleanup EXIT
  failed=0
}

e2e_cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  rm -rf "$WORK"
}

fail() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }
