#!/usr/bin/env bash
# Secrets are never written (issue "Secrets never written", docs/security.md).
# A distinct secret is planted in each place a credential can reach kbrun:
#   S_HOST    userinfo of host=               (taxi_50runs; refused by the client)
#   S_PROM    userinfo of prometheus_url=     (taxi_50runs; a closed port)
#   S_QUERY   ?access_token= of pipeline_file_url (taxi_50runs; the echoing server)
#   S_SIG     ?X-Amz-Signature= and S_KEY ?key= of http_storm's url= (echoing server)
#   S_TOKEN   token_file of taxi_50runs       (401 echoing the bearer token, plain and base64)
#   S_ARGO    token_file of argo_storm        (401 echoing it)
#   S_KUBE    a kubeconfig user's token       (job_storm; 401 echoing it)
#   S_HEADER  kfp.client{headers = {Authorization = "Bearer ..."}} (401 echoing it)
#   S_COOKIE  kfp.client{cookies = ...}       (401 echoing the Cookie header)
#   S_PARAM   a parameter declared {secret = true}, logged, raised and returned
#   S_DIRECT  a bare Authorization header of a scenario's own kb.http.get
#             (the 401 body quoting it is logged)
# Every run is verbose (-v), against a failing (closed port) or an echoing
# server. Then every file under the output folders (experiment folders,
# report.csv and the like), stdout and stderr are searched for each secret,
# its base64 (standard and URL-safe, unpadded) and, for the URL ones, the
# base64 of user:secret: none may appear. The journal is 0600, the
# results 0644.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:?}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/secrets-everywhere.XXXXXX") && [ -d "$WORK" ] || exit 1
SERVER_PID=
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
passed=0 failed=0
fail() { echo "FAIL $*" >&2; failed=$((failed + 1)); }

tag="$$x$RANDOM"
S_HOST="hostPw${tag}Q1"
S_PROM="promPw${tag}Q2"
S_QUERY="queryTok${tag}Q3"
S_SIG="amzSig${tag}Q4"
S_KEY="apiKey${tag}Q5"
S_TOKEN="kfpTok${tag}Q6"
S_ARGO="argoTok${tag}Q7"
S_KUBE="kubeTok${tag}Q8"
S_HEADER="hdrTok${tag}Q9"
S_COOKIE="cookieVal${tag}QA"
S_PARAM="paramKey${tag}QB"
S_DIRECT="directTok${tag}QC"
ALL="S_HOST S_PROM S_QUERY S_SIG S_KEY S_TOKEN S_ARGO S_KUBE S_HEADER S_COOKIE S_PARAM S_DIRECT"

# the echoing server, in the background for at most 120 s
"$KBRUN" -q -o "$WORK/server" "$SRC/tests/e2e/secrets_everywhere.lua" \
  port_file="$WORK/url" lifetime=120 >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do [ -s "$WORK/url" ] && break; sleep 0.1; done
[ -s "$WORK/url" ] || { echo "FAIL: the echoing server did not start" >&2; cat "$WORK/server.log" >&2; exit 1; }
URL=$(head -1 "$WORK/url")
PORT=${URL##*:}

OUT="$WORK/out" # every run's experiments (and report.csv files) go here
runs() { # runs NAME [kbrun args...]: -v, stdout and stderr kept
  local name=$1; shift
  "$KBRUN" -v -o "$OUT/$name" "$@" >"$WORK/$name.stdout" 2>"$WORK/$name.stderr"
  echo $? >"$WORK/$name.code"
}

printf '%s\n' "$S_TOKEN" >"$WORK/kfp-token"
printf '%s\n' "$S_ARGO" >"$WORK/argo-token"
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: echo
  cluster: {server: "$URL"}
users:
- name: u
  user: {token: "$S_KUBE"}
contexts:
- name: echo
  context: {cluster: echo, user: u, namespace: bench}
current-context: echo
EOF

runs host "$SRC/scenarios/taxi_50runs.lua" num_runs=2 "host=http://admin:$S_HOST@127.0.0.1:$PORT/"
runs prom "$SRC/scenarios/taxi_50runs.lua" num_runs=2 "prometheus_url=http://u:$S_PROM@127.0.0.1:1/"
runs query "$SRC/scenarios/taxi_50runs.lua" num_runs=2 "pipeline_file_url=$URL/p.yaml?access_token=$S_QUERY&page=2"
runs token "$SRC/scenarios/taxi_50runs.lua" num_runs=2 "host=$URL" token_file="$WORK/kfp-token" retry=false
runs http "$SRC/scenarios/http_storm.lua" requests=5 concurrency=2 \
  "url=$URL/get?X-Amz-Signature=$S_SIG&key=$S_KEY&n=1"
runs argo "$SRC/scenarios/argo_storm.lua" workflows=2 "host=$URL" token_file="$WORK/argo-token" timeout=5
runs jobs "$SRC/scenarios/job_storm.lua" jobs=2 kubeconfig="$WORK/kubeconfig" timeout=5

cat >"$WORK/client.lua" <<LUA
-- kfp.client with a bearer token in headers= and a session cookie, against
-- the echoing server; a parameter declared secret, logged, raised, returned
local kb = require "kb"
local kfp = require "kb.kfp"
return {
  params = { url = "", api_key = { default = "", secret = true } },
  run = function(p)
    local c = kfp.client { host = p.url, headers = { Authorization = "Bearer $S_HEADER" },
      cookies = "authservice_session=$S_COOKIE", retry = false }
    local ok, err = pcall(c.get_run, c, "run-1")
    kb.log.warn("get_run failed: %s", tostring(err))
    kb.log.info("the api key is %s", p.api_key)
    local direct = kb.http.get(p.url .. "/direct", { headers = { Authorization = "$S_DIRECT" }, timeout = 10 })
    kb.log.warn("direct call: HTTP %d %s", direct.status, direct.body)
    kb.report.attach { outcomes = { failed = 1 } }
    kb.metrics.counter("calls", { outcome = "auth" }):inc()
    error("giving up with " .. p.api_key .. " after " .. tostring(err))
  end,
}
LUA
runs client "$WORK/client.lua" "url=$URL" "api_key=$S_PARAM"

kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; SERVER_PID=

# every run reached its server and wrote its results: a leak check over
# nothing would pass for nothing
for name in host prom query token http argo jobs client; do
  code=$(cat "$WORK/$name.code")
  res=$(ls -d "$OUT/$name"/*/result 2>/dev/null | head -1)
  if [ -z "$res" ] || [ ! -s "$res/result.json" ]; then
    fail "$name: no result.json (exit $code)"; sed 's/^/    /' "$WORK/$name.stderr" | tail -5 >&2
  else
    passed=$((passed + 1))
  fi
done
grep -q '401' "$WORK/token.stderr" || fail "token: no 401 from the echoing server on stderr"
grep -q 'unauthenticated' "$WORK/client.stderr" || fail "client: the echoed message is not on stderr"
grep -q 'direct call: HTTP 401' "$WORK/client.stderr" || fail "client: the direct call's answer is not on stderr"
grep -q 'giving up with <redacted>' "$WORK/client.stderr" || fail "client: the scenario error is not scrubbed on stderr"
grep -q '"api_key": "<redacted>"' "$OUT"/client/*/config/params.json || fail "client: params.json does not mark the secret parameter"
grep -q 'http://\*\*\*@127.0.0.1' "$OUT"/host/*/config/params.json || fail "host: userinfo not written as ***"

b64() { printf '%s' "$1" | base64 -w0 | tr -d '='; }
b64url() { b64 "$1" | tr '+/' '-_'; }
for var in $ALL; do
  s=${!var}
  forms=("$s" "$(b64 "$s")" "$(b64url "$s")")
  case $var in
    S_HOST) forms+=("$(b64 "admin:$s")") ;;
    S_PROM) forms+=("$(b64 "u:$s")") ;;
  esac
  leaked=0
  for f in "${forms[@]}"; do
    if grep -rlF -- "$f" "$OUT" "$WORK"/*.stdout "$WORK"/*.stderr >"$WORK/hits" 2>/dev/null; then
      fail "$var ($f) written to:"; sed 's/^/    /' "$WORK/hits" >&2
      leaked=1
    fi
  done
  [ $leaked = 0 ] && passed=$((passed + 1))
done

# permissions: the journal (server answers) is the owner's, results are shared
for j in "$OUT"/*/*/output/journal.jsonl; do
  mode=$(stat -c %a "$j")
  [ "$mode" = 600 ] && passed=$((passed + 1)) || fail "$j is $mode, not 600"
done
for r in "$OUT"/token/*/result/result.json "$OUT"/token/*/config/params.json; do
  mode=$(stat -c %a "$r")
  want=$(printf '%o' $((0666 & ~0$(umask))))
  [ "$mode" = "$want" ] && passed=$((passed + 1)) || fail "$r is $mode, not $want (umask $(umask))"
done

echo "secrets_everywhere: $passed passed, $failed failed"
[ "$failed" = 0 ]
