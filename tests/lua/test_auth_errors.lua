-- Auth failures of kb.kfp, kb.k8s and kb.argo: a 401 / 403 is class auth
-- at once (not retried), its message names the op, the status, the
-- server's message and what to check; and a server that echoes the
-- credentials it got (the bare token, the whole header, their base64)
-- cannot put them in the error, nor in anything a run writes (stderr,
-- result.json, the journal, the report), whatever the credential's source.
local kb = require "kb"
local T = require "kb.testing"
local json = require "kb.json"
local fs = require "kb.fs"
local u = require "kb.k8s.util"
local kfp = require "kb.kfp"
local k8s = require "kb.k8s"
local argo = require "kb.argo"

-- A server answering `status` to everything, its body echoing the
-- Authorization and Cookie headers it got, the token after the scheme, and
-- the base64 of each. srv.n counts requests.
local function echo_server(status, shape)
  local s = { n = 0 }
  s.srv = kb.httpd.listen { handler = function(req)
    s.n = s.n + 1
    local h = req.headers.authorization or ""
    local bare = h:match("^%S+%s+(.*)$") or h
    local cookie = req.headers.cookie or ""
    local text = string.format("denied: got %s | bare %s | b64 %s | header b64 %s | cookie %s %s",
      h, bare, u.b64encode(bare), u.b64encode(h), cookie, u.b64encode(cookie))
    local body
    if shape == "k8s" then
      body = { kind = "Status", apiVersion = "v1", status = "Failure", message = text,
        reason = status == 401 and "Unauthorized" or "Forbidden", code = status }
    else
      body = { code = status == 401 and 16 or 7, message = text }
    end
    return status, json.encode(body), { ["Content-Type"] = "application/json" }
  end }
  return s
end

-- Every form of a secret that must not appear.
local function forms(...)
  local out = {}
  for _, v in ipairs({ ... }) do
    out[#out + 1] = v
    out[#out + 1] = u.b64encode(v)
    out[#out + 1] = (u.b64encode(v):gsub("=+$", ""))
  end
  return out
end

local function assert_clean(text, secrets, what)
  for _, sec in ipairs(secrets) do
    T.eq(text:find(sec, 1, true), nil, string.format("%s holds %q", what, sec))
  end
end

local function error_text(err)
  return tostring(err) .. " " .. tostring(err.server_message) .. " " .. tostring(err.body)
    .. " " .. tostring(err.hint) .. " " .. tostring(err.details)
end

-- ---- kb.kfp -------------------------------------------------------------------

T.case("kfp: a 401 echoing an Authorization from headers= is class auth, named, and scrubbed", function()
  local token = "kfpHdrTok3nA1b2C3d4"
  local s = echo_server(401)
  local c = kfp.client { host = s.srv.url, headers = { Authorization = "Bearer " .. token } }
  local err = T.raises(function() c:get_run("r1") end)
  s.srv:close()
  T.eq(s.n, 1, "a 401 is not retried")
  T.eq(err.class, "auth")
  T.eq(err.status, 401)
  T.eq(err.op, "run.get")
  local msg = tostring(err)
  T.contains(msg, "auth: run.get: GET " .. s.srv.url .. "/apis/v2beta1/runs/r1 -> HTTP 401: denied: got ")
  T.contains(msg, "bare <redacted>")
  T.contains(msg, "the server rejected the header Authorization of headers=")
  T.contains(msg, "check that it is current")
  assert_clean(error_text(err), forms(token, "Bearer " .. token), "the error")
end)

T.case("kfp: token_file and cookies: the hint names them; 403 points at RBAC; never in the error", function()
  local dir = fs.tmpdir("authe")
  local path = fs.join(dir, "token")
  local token = "kfpFileTok3nZ9y8X7"
  fs.write(path, token .. "\n")
  local s = echo_server(401)
  local c = kfp.client { host = s.srv.url, token_file = path, cookies = { session = "kfpCookieV4lue" } }
  local err = T.raises(function() c:list_runs() end)
  s.srv:close()
  T.eq(s.n, 1)
  T.eq(err.class, "auth")
  T.contains(tostring(err), "run.list: GET ")
  T.contains(tostring(err), "the token in token_file '" .. path .. "' and the session cookie (cookies=)")
  assert_clean(error_text(err), forms(token, "Bearer " .. token, "kfpCookieV4lue", "session=kfpCookieV4lue"),
    "the error")

  s = echo_server(403)
  c = kfp.client { host = s.srv.url, token_file = path }
  err = T.raises(function() c:get_experiment("e1") end)
  s.srv:close()
  T.eq(s.n, 1, "a 403 is not retried")
  T.eq(err.class, "auth")
  T.eq(err.status, 403)
  T.contains(tostring(err), "experiment.get: GET ")
  T.contains(tostring(err), "-> HTTP 403: denied")
  T.contains(tostring(err), "accepted the token in token_file '" .. path .. "' but refused the call")
  T.contains(tostring(err), "RBAC")
  assert_clean(error_text(err), forms(token), "the error")
  fs.remove(dir, { recursive = true })
end)

-- ---- kb.k8s -------------------------------------------------------------------

local function kubeconfig(dir, url, user)
  local path = fs.join(dir, "kubeconfig")
  fs.write(path, json.encode({
    apiVersion = "v1", kind = "Config", ["current-context"] = "ctx1",
    clusters = { { name = "c1", cluster = { server = url } } },
    users = { { name = "alice", user = user } },
    contexts = { { name = "ctx1", context = { cluster = "c1", user = "alice", namespace = "bench" } } },
  }))
  return path
end

local function k8s_list_pods(c)
  return c:request { verb = "list", resource = "pods", path = "/api/v1/namespaces/bench/pods" }
end

T.case("k8s: a 401 for a kubeconfig token names the user and expiry; 403 names RBAC; both class auth", function()
  local dir = fs.tmpdir("authk")
  local token = "k8sKubeconfigTok3nQ5"
  local s = echo_server(401, "k8s")
  local c = k8s.client { kubeconfig = kubeconfig(dir, s.srv.url, { token = token }) }
  local err = T.raises(function() k8s_list_pods(c) end)
  T.eq(s.n, 1, "a 401 is not retried")
  T.eq(err.class, "auth")
  T.eq(err.status, 401)
  local msg = tostring(err)
  T.contains(msg, "auth: k8s.list.pods: GET " .. s.srv.url .. "/api/v1/namespaces/bench/pods -> HTTP 401 "
    .. "Unauthorized: denied: got ")
  T.contains(msg, "the credentials of kubeconfig user 'alice' (context 'ctx1'), a bearer token")
  T.contains(msg, "token expired or revoked?")
  assert_clean(error_text(err), forms(token, "Bearer " .. token), "the error")
  s.srv:close()

  s = echo_server(403, "k8s")
  c = k8s.client { kubeconfig = kubeconfig(dir, s.srv.url, { token = token }) }
  err = T.raises(function() k8s_list_pods(c) end)
  s.srv:close()
  T.eq(s.n, 1, "a 403 is not retried")
  T.eq(err.class, "auth", "403 is class auth as in kb.kfp")
  T.eq(err.status, 403)
  T.eq(err.reason, "Forbidden")
  T.contains(tostring(err), "HTTP 403 Forbidden: denied")
  T.contains(tostring(err), "kubeconfig user 'alice' (context 'ctx1') is not allowed to list pods in "
    .. "namespace bench: check its RBAC")
  T.contains(tostring(err), "kubectl auth can-i list pods -n bench")
  assert_clean(error_text(err), forms(token), "the error")
  fs.remove(dir, { recursive = true })
end)

T.case("k8s: basic auth and token= echoed back are scrubbed (plain and base64)", function()
  local dir = fs.tmpdir("authb")
  local s = echo_server(401, "k8s")
  local c = k8s.client { kubeconfig = kubeconfig(dir, s.srv.url,
    { username = "bob", password = "k8sBasicPassw0rd" }) }
  local err = T.raises(function() k8s_list_pods(c) end)
  T.eq(err.class, "auth")
  T.contains(tostring(err), "basic auth (user 'bob')")
  assert_clean(error_text(err), forms("k8sBasicPassw0rd", "bob:k8sBasicPassw0rd",
    "Basic " .. u.b64encode("bob:k8sBasicPassw0rd")), "the error")
  local token = "k8sOptionTok3nW2"
  c = k8s.client { server = s.srv.url, token = token }
  err = T.raises(function() k8s_list_pods(c) end)
  s.srv:close()
  T.eq(err.class, "auth")
  assert_clean(error_text(err), forms(token, "Bearer " .. token), "the error")
  fs.remove(dir, { recursive = true })
end)

-- ---- kb.argo ------------------------------------------------------------------

T.case("argo: 401 / 403 are class auth, not retried, hinted; a header token is scrubbed", function()
  local token = "argoHdrTok3nR7s6"
  local s = echo_server(401)
  local c = argo.client { host = s.srv.url, headers = { Authorization = "Bearer " .. token } }
  local err = T.raises(function() c:get("wf1") end)
  s.srv:close()
  T.eq(s.n, 1, "a 401 is not retried")
  T.eq(err.class, "auth")
  T.eq(err.status, 401)
  T.contains(tostring(err), "auth: argo.get: GET " .. s.srv.url .. "/api/v1/workflows/default/wf1 -> HTTP 401: ")
  T.contains(tostring(err), "argo-server rejected the header Authorization of headers=")
  assert_clean(error_text(err), forms(token, "Bearer " .. token), "the error")

  s = echo_server(403)
  c = argo.client { host = s.srv.url, token = token, namespace = "team-a" }
  err = T.raises(function() c:list() end)
  s.srv:close()
  T.eq(s.n, 1, "a 403 is not retried")
  T.eq(err.class, "auth", "403 is class auth as in kb.kfp")
  T.eq(err.status, 403)
  T.contains(tostring(err), "-> HTTP 403: denied")
  T.contains(tostring(err), "lacks RBAC permission on Argo's resources in namespace team-a")
  assert_clean(error_text(err), forms(token), "the error")
end)

-- ---- what a run writes --------------------------------------------------------

T.case("a run failing on an echoed headers= token writes it nowhere (stderr, result.json, journal, report)", function()
  local bin = os.getenv("KBRUN_BIN")
  if not bin then error("KBRUN_BIN is not set (run through ctest)") end
  local dir = fs.tmpdir("authrun")
  local token = "runEchoTok3nK4j5H6"
  fs.write(fs.join(dir, "echo.lua"), string.format([[
local kb = require "kb"
local kfp = require "kb.kfp"
local u = require "kb.k8s.util"
local srv = kb.httpd.listen { handler = function(req)
  local h = req.headers.authorization or ""
  local bare = h:match("^%%S+%%s+(.*)$") or ""
  return 401, '{"code": 16, "message": "bad credentials ' .. bare .. ' ' .. u.b64encode(bare) .. ' '
    .. u.b64encode(h) .. '"}', { ["Content-Type"] = "application/json" }
end }
local c = kfp.client { host = srv.url, headers = { Authorization = "Bearer %s" } }
local ok, err = pcall(c.get_run, c, "r1")
kb.log.warn("kfp failed: %%s (server said: %%s)", tostring(err), tostring(err.server_message))
print(tostring(err), err.body)
kb.metrics.counter("attempted"):inc()
srv:close()
error(err, 0)
]], token))
  local out = fs.join(dir, "out")
  local r = kb.process.run { cmd = { bin, "-v", "-o", out, fs.join(dir, "echo.lua") }, timeout = 120 }
  T.eq(r.code, 1, "the scenario failed on the auth error")
  T.contains(r.stderr, "auth: run.get")
  T.contains(r.stderr, "bad credentials <redacted>")
  local secrets = forms(token, "Bearer " .. token)
  assert_clean(r.stdout, secrets, "stdout")
  assert_clean(r.stderr, secrets, "stderr")
  local ls = kb.process.run { cmd = { "find", out, "-type", "f" }, check = true }
  local seen = {}
  for f in ls.stdout:gmatch("[^\n]+") do
    local text = fs.read(f)
    assert_clean(text, secrets, f)
    local base = fs.basename(f)
    seen[base] = true
    if base == "result.json" then
      T.contains(text, "bad credentials <redacted>", "result.json holds the scrubbed error")
    end
  end
  T.ok(seen["result.json"], "the run wrote result.json")
  T.ok(seen["journal.jsonl"], "the run wrote its journal")
  T.ok(seen["report.html"], "the run wrote its report")
  fs.remove(dir, { recursive = true })
end)

return T.run()
