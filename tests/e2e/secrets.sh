#!/usr/bin/env bash
# A planted secret (bearer token, cookie-like header values, a PEM key in a
# file the run reads) must appear in no output: not in the experiment
# folder, the report, the journal, stdout or stderr, also with -v and when
# requests fail.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:?}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/secrets.XXXXXX") && [ -d "$WORK" ] || exit 1
trap 'rm -rf "$WORK"' EXIT
SECRET="kbrunPlantedSecret$$x9Q"
passed=0 failed=0

check_clean() { # check_clean NAME DIR...
  if grep -rl "$SECRET" "${@:2}" >"$WORK/hits" 2>/dev/null; then
    echo "FAIL $1: the secret leaked into:" >&2; sed 's/^/    /' "$WORK/hits" >&2
    failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
}

printf '%s\n' "$SECRET" >"$WORK/token"

# 1. The KFP storm against the embedded simulator with a bearer token file, verbose.
"$KBRUN" -v -o "$WORK/storm" "$SRC/scenarios/taxi_50runs.lua" num_runs=3 \
  token_file="$WORK/token" >"$WORK/storm.out" 2>"$WORK/storm.err"
code=$?
[ $code = 0 ] || { echo "FAIL storm: exit $code" >&2; sed 's/^/    /' "$WORK/storm.err" | tail -20 >&2; failed=$((failed + 1)); }
check_clean storm "$WORK/storm" "$WORK/storm.out" "$WORK/storm.err"

# 2. Failing requests: the token, a cookie and an Authorization header sent to
#    a closed port and to a server answering 401 with the token echoed back.
cat >"$WORK/leaky.lua" <<LUA
local kb = require "kb"
local kfp = require "kb.kfp"
local secret = "$SECRET"
local srv = kb.httpd.listen { host = "127.0.0.1", port = 0, handler = function(req)
  return 401, '{"code":16,"message":"bad token ' .. secret .. '"}', { ["content-type"] = "application/json" }
end }
local c = kfp.client { host = srv.url, token = secret, cookies = "session=" .. secret }
local ok, err = pcall(c.get_run, c, "x")
kb.log.warn("kfp failed: %s", tostring(err))
kb.log.info("header Authorization: Bearer %s and Cookie: s=%s", secret, secret)
local ok2, err2 = pcall(kb.http.get, "http://user:" .. secret .. "@127.0.0.1:1/x?token=" .. secret,
  { headers = { authorization = "Bearer " .. secret } })
kb.log.warn("http failed: %s", tostring(err2))
kb.metrics.counter("done"):inc()
srv:close()
return { kfp_error = tostring(err), http_error = tostring(err2) }
LUA
"$KBRUN" -v -o "$WORK/leaky" "$WORK/leaky.lua" >"$WORK/leaky.out" 2>"$WORK/leaky.err"
check_clean leaky "$WORK/leaky" "$WORK/leaky.out" "$WORK/leaky.err"
grep -q "REDACTED\|redacted" "$WORK/leaky.err" || { echo "FAIL leaky: no redaction marker in the logs" >&2; failed=$((failed + 1)); }

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
