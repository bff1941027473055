-- Run by tests/e2e/tls_scenarios.sh: scenarios/taxi_50runs.lua over TLS
-- with each connection parameter (kb.connection) against nginx fronts of
-- a standalone `kbrun sim` (see the script for what each front requires).
-- Every case checks the runs it asked for against result.json and against
-- nginx's access log of that front (ground truth: the requests that really
-- arrived), result.json's connection record, and that the token and the
-- session cookie (and their base64) appear in no output.
local kb = require "kb"
local T = require "kb.testing"
local json = require "kb.json"
local fs = kb.fs
local util = require "kb.k8s.util"

local function env(name) return assert(os.getenv(name), name) end
local DIR = env("TLS_DIR")
local TOKEN, SESSION = env("TLS_TOKEN"), env("TLS_SESSION")
local SCENARIO = fs.join(env("TLS_SCENARIOS"), "taxi_50runs.lua")
local BIN = env("KBRUN_BIN")
local function url(port) return "https://127.0.0.1:" .. env(port) end
local function f(name) return fs.join(DIR, name) end

local NUM_RUNS = 2
-- the embedded simulator is not used: the storm talks to the fronts only
local COMMON = { "num_runs=" .. NUM_RUNS, "run_status_polling_interval_sec=1", "concurrency=2",
  "measure_list=false", "progress=false", "retry=false" }

-- The lines of an nginx access log ("METHOD URI STATUS").
local function log_lines(name)
  local path = f(fs.join("nginx", "logs", name .. ".log"))
  local lines = {}
  if fs.exists(path) then
    for line in fs.read(path):gmatch("[^\n]+") do lines[#lines + 1] = line end
  end
  return lines
end

local FRONTS = { "plain", "mtls", "bearer", "cookie" }

-- Lines of an nginx access log matching a pattern, after line `from` (a
-- run's mark: what the front had logged before it started).
local function log_count(name, pattern, from)
  local count = 0
  for i, line in ipairs(log_lines(name)) do
    if i > (from or 0) and line:match(pattern) then count = count + 1 end
  end
  return count
end

local n = 0
--- Runs the scenario with extra parameters (and env overrides); returns
-- {code, stdout, stderr, dir (the experiment folder), result (result.json)}.
local function taxi(params, envs)
  n = n + 1
  local out = f("out-" .. n)
  local cmd = { BIN, "-o", out, SCENARIO }
  for _, a in ipairs(COMMON) do cmd[#cmd + 1] = a end
  for _, a in ipairs(params) do cmd[#cmd + 1] = a end
  -- the environment's CA variables are set per case; none leaks in from outside
  local e = { SSL_CERT_FILE = false, CURL_CA_BUNDLE = false, https_proxy = false,
    HTTPS_PROXY = false, http_proxy = false, all_proxy = false, ALL_PROXY = false }
  for k, v in pairs(envs or {}) do e[k] = v end
  local marks = {}
  for _, front in ipairs(FRONTS) do marks[front] = #log_lines(front) end
  local r = kb.process.run { cmd = cmd, env = e, timeout = 180 }
  r.out, r.marks = out, marks
  local ids = fs.exists(out) == "dir" and fs.list(out) or {}
  local exps = {}
  for _, id in ipairs(ids) do if fs.exists(fs.join(out, id, "result")) == "dir" then exps[#exps + 1] = id end end
  if #exps == 1 then
    r.dir = fs.join(out, exps[1])
    local path = fs.join(r.dir, "result", "result.json")
    if fs.exists(path) then r.doc = json.decode(fs.read(path)) end
  end
  return r
end

-- Every file under dir, recursively.
local function files(dir, out)
  out = out or {}
  for _, name in ipairs(fs.list(dir)) do
    local p = fs.join(dir, name)
    if fs.exists(p) == "dir" then files(p, out) else out[#out + 1] = p end
  end
  return out
end

-- The token and the cookie, plain and base64, are nowhere in what the run wrote.
local function no_secrets(r)
  local needles = { TOKEN, SESSION, (util.b64encode(TOKEN):gsub("=+$", "")),
    (util.b64encode(SESSION):gsub("=+$", "")) }
  local texts = { stdout = r.stdout, stderr = r.stderr }
  for _, p in ipairs(files(r.out)) do texts[p] = fs.read(p) end
  for where, text in pairs(texts) do
    for _, s in ipairs(needles) do
      T.ok(not text:find(s, 1, true), "a credential is written in " .. where)
    end
  end
end

-- The run passed and made its runs, and the front saw exactly those creates.
local function passed(r, front, prefix)
  T.eq(r.code, 0, "exit code; stderr: " .. r.stderr:sub(-1500))
  T.ok(r.doc, "result.json written")
  local runs = r.doc.result.runs
  T.eq(runs.requested, NUM_RUNS, "runs requested")
  T.eq(runs.created, NUM_RUNS, "runs created")
  T.eq(runs.succeeded, NUM_RUNS, "runs succeeded")
  T.eq(runs.deleted, NUM_RUNS, "runs deleted")
  -- ground truth: what reached the simulator through this front
  local p = "^POST " .. (prefix or ""):gsub("%p", "%%%0") .. "/apis/v1beta1/runs 200$"
  T.eq(log_count(front, p, r.marks[front]), NUM_RUNS, front .. " front: run creates that reached the simulator")
  T.eq(log_count(front, "^DELETE .*/apis/v1beta1/runs/[^ ]+ 200$", r.marks[front]), NUM_RUNS,
    front .. " front: run deletes")
  no_secrets(r)
  return r.doc.result.connection
end

T.case("ca_file: a private CA verifies the server", function()
  local r = taxi { "host=" .. url("TLS_PLAIN_PORT"), "ca_file=" .. f("ca.crt") }
  local c = passed(r, "plain")
  T.eq(c.tls, "verified")
  T.eq(c.ca_file, f("ca.crt"))
  T.eq(c.ca_from, "ca_file")
  T.eq(c.insecure, nil)
  T.ok(not r.stderr:find("verification is OFF", 1, true), "no insecure warning")
end)

T.case("SSL_CERT_FILE and CURL_CA_BUNDLE are honoured", function()
  for _, var in ipairs({ "SSL_CERT_FILE", "CURL_CA_BUNDLE" }) do
    local before = log_count("plain", "^POST /apis/v1beta1/runs 200$")
    local r = taxi({ "host=" .. url("TLS_PLAIN_PORT") }, { [var] = f("ca.crt") })
    T.eq(r.code, 0, var .. ": exit code; stderr: " .. r.stderr:sub(-800))
    T.eq(r.doc.result.runs.succeeded, NUM_RUNS)
    T.eq(log_count("plain", "^POST /apis/v1beta1/runs 200$") - before, NUM_RUNS)
    T.eq(r.doc.result.connection.ca_from, var)
  end
end)

T.case("the default refuses the self-signed server, naming ca_file", function()
  local before = log_count("plain", "^POST")
  local r = taxi { "host=" .. url("TLS_PLAIN_PORT") }
  T.ok(r.code ~= 0, "the run fails without the CA")
  T.contains(r.stderr, "certificate")
  T.contains(r.stderr, "ca_file")
  T.eq(log_count("plain", "^POST") - before, 0, "nothing was created")
end)

T.case("insecure=true: no verification, warned once, recorded", function()
  local r = taxi { "host=" .. url("TLS_PLAIN_PORT"), "insecure=true" }
  local c = passed(r, "plain")
  local warnings = 0
  for _ in r.stderr:gmatch("verification is OFF") do warnings = warnings + 1 end
  T.eq(warnings, 1, "one warning on stderr")
  T.eq(c.insecure, true)
  T.eq(c.tls, "insecure")
  T.eq(r.doc.params.insecure, true)
  -- both at once is a mistake, refused before any request
  local bad = taxi { "host=" .. url("TLS_PLAIN_PORT"), "insecure=true", "ca_file=" .. f("ca.crt") }
  T.eq(bad.code, 2)
  T.contains(bad.stderr, "insecure=true and ca_file= are both set")
end)

T.case("client_cert/client_key: nginx requires a client certificate", function()
  local r = taxi { "host=" .. url("TLS_MTLS_PORT"), "ca_file=" .. f("ca.crt"),
    "client_cert=" .. f("client.crt"), "client_key=" .. f("client.key") }
  local c = passed(r, "mtls")
  T.eq(c.client_cert, f("client.crt"))
  -- without it nginx answers 400 and nothing is created
  local before = log_count("mtls", "^POST")
  local no = taxi { "host=" .. url("TLS_MTLS_PORT"), "ca_file=" .. f("ca.crt") }
  T.ok(no.code ~= 0, "refused without a client certificate")
  T.ok(log_count("mtls", " 400$") >= 1, "nginx answered 400 (no required SSL certificate)")
  T.eq(log_count("mtls", "^POST .* 200$") - before, 0)
  local half = taxi { "host=" .. url("TLS_MTLS_PORT"), "client_cert=" .. f("client.crt") }
  T.eq(half.code, 2)
  T.contains(half.stderr, "client_cert= and client_key= together")
end)

local PROXY = "/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy"

local function kubeconfig(name, token)
  local path = f(name)
  fs.write(path, string.format([[
apiVersion: v1
kind: Config
current-context: other
clusters:
- name: front
  cluster:
    server: %s
    certificate-authority: %s
- name: nowhere
  cluster:
    server: https://127.0.0.1:9
users:
- name: bench
  user:
    token: %s
contexts:
- name: other
  context: {cluster: nowhere, user: bench}
- name: kfp
  context: {cluster: front, user: bench, namespace: default}
]], url("TLS_BEARER_PORT"), f("ca.crt"), token))
  return path
end

T.case("kubeconfig: KFP through the API server's service proxy, bearer token over TLS", function()
  local kc = kubeconfig("kubeconfig.yaml", TOKEN)
  local r = taxi { "kubeconfig=" .. kc, "context=kfp" }
  local c = passed(r, "bearer", PROXY)
  T.eq(c.kubeconfig, kc)
  T.eq(c.context, "kfp")
  T.eq(c.tls, "verified")
  T.eq(c.url, url("TLS_BEARER_PORT") .. PROXY)
  -- the server's /metrics came through the proxy too (scrape before and after)
  T.eq(log_count("bearer", "^GET " .. PROXY:gsub("%p", "%%%0") .. "/metrics 200$", r.marks.bearer), 2)
  -- a wrong token: nginx answers 401, the storm says so and creates nothing
  local before = log_count("bearer", "^POST .* 200$")
  local bad = taxi { "kubeconfig=" .. kubeconfig("kubeconfig-bad.yaml", "not-the-token-xyz"), "context=kfp" }
  T.ok(bad.code ~= 0, "a wrong token fails")
  T.contains(bad.stderr, "401")
  T.eq(log_count("bearer", "^POST .* 200$") - before, 0)
  -- host= and kubeconfig= together are a mistake
  local both = taxi { "kubeconfig=" .. kc, "host=" .. url("TLS_PLAIN_PORT") }
  T.eq(both.code, 2)
  T.contains(both.stderr, "give host= or kubeconfig=, not both")
end)

T.case("kubeconfig: an exec plugin's token, and a client certificate user", function()
  -- an exec credential plugin (client.authentication.k8s.io/v1) printing the token
  local exec = f("exec-token.sh")
  fs.write(exec, "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
    .. "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"" .. TOKEN .. "\"}}'\n")
  kb.process.run { cmd = { "chmod", "+x", exec }, check = true }
  local kc = f("kubeconfig-exec.yaml")
  fs.write(kc, string.format([[
apiVersion: v1
kind: Config
current-context: kfp
clusters:
- name: front
  cluster: {server: "%s", certificate-authority: %s}
users:
- name: plugin
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: %s, interactiveMode: Never}
contexts:
- name: kfp
  context: {cluster: front, user: plugin}
]], url("TLS_BEARER_PORT"), f("ca.crt"), exec))
  passed(taxi { "kubeconfig=" .. kc }, "bearer", PROXY)
  -- a user with a client certificate, against the front that requires one
  local kc2 = f("kubeconfig-cert.yaml")
  fs.write(kc2, string.format([[
apiVersion: v1
kind: Config
current-context: kfp
clusters:
- name: front
  cluster: {server: "%s", certificate-authority: %s}
users:
- name: cert
  user: {client-certificate: %s, client-key: %s}
contexts:
- name: kfp
  context: {cluster: front, user: cert}
]], url("TLS_MTLS_PORT"), f("ca.crt"), f("client.crt"), f("client.key")))
  local r = taxi { "kubeconfig=" .. kc2 }
  passed(r, "mtls", PROXY)
  T.eq(r.doc.result.connection.url, url("TLS_MTLS_PORT") .. PROXY)
end)

T.case("cookie_file and header: the session cookie and kubeflow-userid", function()
  -- a Netscape cookies.txt, as curl -c or a browser export writes it
  local jar = f("cookies.txt")
  fs.write(jar, "# Netscape HTTP Cookie File\n#HttpOnly_127.0.0.1\tFALSE\t/\tTRUE\t0\tauthservice_session\t"
    .. SESSION .. "\n")
  local r = taxi { "host=" .. url("TLS_COOKIE_PORT"), "ca_file=" .. f("ca.crt"), "cookie_file=" .. jar,
    "header=kubeflow-userid: alice" }
  local c = passed(r, "cookie")
  T.eq(c.cookie_file, jar)
  T.same(c.headers, { "kubeflow-userid" })
  -- the declared-secret header's value is in no output file: parameters,
  -- results, report, and the whole journal (the runner journals the
  -- parameters only once the scenario declared them)
  for _, path in ipairs(files(r.dir)) do
    T.ok(not fs.read(path):find("alice", 1, true), "header= value kept out of " .. path)
  end
  local declared, after = false, 0
  for line in fs.read(fs.join(r.dir, "output", "journal.jsonl")):gmatch("[^\n]+") do
    local rec = json.decode(line)
    if declared then
      after = after + 1
      T.ok(not line:find("alice", 1, true), "header= value kept out of the journal's " .. tostring(rec.k or rec.event))
    end
    if rec.k == "params" and rec.params.header == "<redacted>" then declared = true end
  end
  T.ok(declared, "the journal's params record of the declared parameters redacts header=")
  T.ok(after > NUM_RUNS, "the storm journaled its records after it")
  -- a name=value cookie file works too
  local plain = f("cookie.txt")
  fs.write(plain, "authservice_session=" .. SESSION .. "\n")
  local r2 = taxi { "host=" .. url("TLS_COOKIE_PORT"), "ca_file=" .. f("ca.crt"), "cookie_file=" .. plain,
    "header=kubeflow-userid: alice" }
  passed(r2, "cookie")
  -- without the cookie: 401, nothing created, the hint names the options
  local before = log_count("cookie", "^POST .* 200$")
  local no = taxi { "host=" .. url("TLS_COOKIE_PORT"), "ca_file=" .. f("ca.crt"),
    "header=kubeflow-userid: alice" }
  T.ok(no.code ~= 0, "refused without the cookie")
  T.contains(no.stderr, "401")
  T.eq(log_count("cookie", "^POST .* 200$") - before, 0)
  -- the cookie without the user header: 403
  local nouser = taxi { "host=" .. url("TLS_COOKIE_PORT"), "ca_file=" .. f("ca.crt"), "cookie_file=" .. jar }
  T.ok(nouser.code ~= 0, "refused without kubeflow-userid")
  T.contains(nouser.stderr, "403")
end)

-- The other bundled scenarios take the same parameters: job_storm (the
-- Kubernetes API) and argo_storm (argo-server's API) of the same simulator
-- through the PLAIN front, verified with ca_file=.
local function run(scenario, params)
  n = n + 1
  local out = f("out-" .. n)
  local cmd = { BIN, "-o", out, fs.join(env("TLS_SCENARIOS"), scenario) }
  for _, a in ipairs(params) do cmd[#cmd + 1] = a end
  local marks = {}
  for _, front in ipairs(FRONTS) do marks[front] = #log_lines(front) end
  local r = kb.process.run { cmd = cmd, timeout = 180,
    env = { SSL_CERT_FILE = false, CURL_CA_BUNDLE = false, https_proxy = false, HTTPS_PROXY = false } }
  r.marks = marks
  local ids = {}
  for _, id in ipairs(fs.exists(out) == "dir" and fs.list(out) or {}) do
    if fs.exists(fs.join(out, id, "result", "result.json")) then ids[#ids + 1] = id end
  end
  T.eq(#ids, 1, "one experiment folder; stderr: " .. r.stderr:sub(-800))
  r.doc = json.decode(fs.read(fs.join(out, ids[1], "result", "result.json")))
  return r
end

T.case("job_storm and argo_storm: ca_file= over TLS; the default refused", function()
  local j = run("job_storm.lua", { "host=" .. url("TLS_PLAIN_PORT"), "ca_file=" .. f("ca.crt"), "jobs=2",
    "concurrency=2", "timeout=120" })
  T.eq(j.code, 0, "job_storm; stderr: " .. j.stderr:sub(-800))
  T.eq(j.doc.result.created, 2)
  T.eq(j.doc.result.completed, 2)
  T.eq(j.doc.result.connection.tls, "verified")
  T.eq(log_count("plain", "^POST /apis/batch/v1/namespaces/default/jobs 201$", j.marks.plain), 2,
    "the Job creates that reached the simulator")
  local a = run("argo_storm.lua", { "host=" .. url("TLS_PLAIN_PORT"), "ca_file=" .. f("ca.crt"),
    "workflows=2", "concurrency=2", "timeout=120" })
  T.eq(a.code, 0, "argo_storm; stderr: " .. a.stderr:sub(-800))
  T.eq(a.doc.result.submitted, 2)
  T.eq(a.doc.result.succeeded, 2)
  T.eq(a.doc.result.connection.tls, "verified")
  T.eq(log_count("plain", "^POST /api/v1/workflows/default 200$", a.marks.plain), 2,
    "the workflow submissions that reached the simulator")
  local no = run("argo_storm.lua", { "host=" .. url("TLS_PLAIN_PORT"), "workflows=1", "timeout=5" })
  T.ok(no.code ~= 0 or no.doc.result.submitted == 0, "argo_storm without the CA submits nothing")
  T.eq(log_count("plain", "^POST /api/v1/workflows", no.marks.plain), 0)
  T.contains(no.stderr, "certificate")
end)

T.case("kubebench_tf_cnn: ca_file= over TLS", function()
  local r = run("kubebench_tf_cnn.lua", { "host=" .. url("TLS_PLAIN_PORT"), "ca_file=" .. f("ca.crt") })
  T.eq(r.code, 0, "kubebench_tf_cnn; stderr: " .. r.stderr:sub(-800))
  T.eq(r.doc.result.passed, 1)
  T.eq(log_count("plain", "^POST /apis/kubeflow.org/v1/namespaces/[^/ ]+/tfjobs 201$", r.marks.plain), 1,
    "the TFJob create reached the simulator")
end)

T.case("http_storm: ca_file=, cookie_file= and header= against the cookie front", function()
  local jar = f("cookie-http.txt")
  fs.write(jar, "authservice_session=" .. SESSION .. "\n")
  local r = run("http_storm.lua", { "url=" .. url("TLS_COOKIE_PORT") .. "/apis/v1beta1/healthz",
    "ca_file=" .. f("ca.crt"), "cookie_file=" .. jar, "header=kubeflow-userid: alice",
    "requests=6", "concurrency=3" })
  T.eq(r.code, 0, "http_storm; stderr: " .. r.stderr:sub(-800))
  T.eq(r.doc.result.succeeded, 6)
  T.eq(log_count("cookie", "^GET /apis/v1beta1/healthz 200$", r.marks.cookie), 6)
  T.eq(r.doc.result.connection.tls, "verified")
  T.eq(r.doc.result.connection.cookie_file, jar)
  -- without the cookie every request is a 401
  local no = run("http_storm.lua", { "url=" .. url("TLS_COOKIE_PORT") .. "/apis/v1beta1/healthz",
    "ca_file=" .. f("ca.crt"), "header=kubeflow-userid: alice", "requests=2", "concurrency=1" })
  T.eq(no.doc.result.succeeded, 0)
  T.eq(log_count("cookie", "^GET /apis/v1beta1/healthz 401$", no.marks.cookie), 2)
end)

T.run()
