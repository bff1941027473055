-- kb.connection: the shared connection parameters and what they turn into
-- (headers, TLS options, the CA environment variables, refusals, the
-- kubeconfig service-proxy URL and TLS merge, result.connection), kb.kfp's
-- cookie files, and the embedded simulator's service-proxy route (KFP and
-- /metrics answered, other services and admin paths not).
-- tests/e2e/tls_scenarios.sh runs the same parameters over real TLS.
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local json = require "kb.json"
local connection = require "kb.connection"
local kfp = require "kb.kfp"
local secrets = require "kb.secrets"
local target = require "kb.target"

local tmp = fs.tmpdir("connection-")
local function f(name, text)
  local p = fs.join(tmp, name)
  if text then fs.write(p, text) end
  return p
end
local CA = f("ca.pem", "-----BEGIN CERTIFICATE-----\nnot parsed here\n-----END CERTIFICATE-----\n")
local function p(t) -- the merged parameters of a scenario: defaults + t
  local out = {}
  for k, v in pairs(connection.params()) do
    out[k] = (type(v) == "table" and v.default ~= nil) and v.default or v
  end
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end
local function refused(fn, part)
  local ok, e = pcall(fn)
  T.ok(not ok, "refused")
  T.eq(e.class, "usage")
  T.contains(e.message, part)
end
local function env(t) return function(name) return t[name] end end
connection.getenv = env {} -- the CA variables of this machine stay out, except where a case sets them

T.case("params: every connection parameter, header declared secret, a scenario's own win", function()
  local d = connection.params { request_timeout = 60, url = "" }
  for _, name in ipairs({ "ca_file", "client_cert", "client_key", "insecure", "token_file", "cookie_file",
    "header", "request_timeout", "proxy", "namespace", "insecure_credentials", "kubeconfig", "context",
    "kfp_service_namespace", "kfp_service" }) do
    T.ok(d[name] ~= nil, name .. " declared")
  end
  T.same(d.header, { default = "", secret = true })
  T.eq(d.request_timeout, 60)
  T.eq(d.url, "")
  -- through kb.params: the header's value is protected, hence never written
  local merged = require("kb.params").merge(d, nil, { header = "X-Api-Key: k3y-V4LUE-123" })
  T.eq(merged.header, "X-Api-Key: k3y-V4LUE-123")
  T.ok(not secrets.encode_json(merged):find("k3y-V4LUE-123", 1, true), "header value never encoded")
end)

T.case("headers: Name: value lines; credential values registered", function()
  local h = connection.headers(p { header = "kubeflow-userid: alice\nX-Auth-Token:  s3cr3t-abcdef \n" })
  T.same(h, { ["kubeflow-userid"] = "alice", ["X-Auth-Token"] = "s3cr3t-abcdef" })
  T.eq(secrets.scrub("echo s3cr3t-abcdef"), "echo <redacted>")
  T.eq(secrets.scrub("user alice"), "user alice", "an identity is not a secret")
  refused(function() connection.headers(p { header = "no colon here" }) end, "header= takes 'Name: value'")
end)

T.case("ca_file: the parameter, then SSL_CERT_FILE, then CURL_CA_BUNDLE", function()
  local other = f("other.pem", "x")
  T.eq(connection.ca_file(p { ca_file = CA }, env { SSL_CERT_FILE = other }), CA)
  local got, from = connection.ca_file(p(), env { SSL_CERT_FILE = other, CURL_CA_BUNDLE = CA })
  T.eq(got, other)
  T.eq(from, "SSL_CERT_FILE")
  got, from = connection.ca_file(p(), env { CURL_CA_BUNDLE = CA })
  T.eq(got, CA)
  T.eq(from, "CURL_CA_BUNDLE")
  T.eq(connection.ca_file(p(), env {}), nil)
  refused(function() connection.ca_file(p(), env { SSL_CERT_FILE = f("missing.pem") }) end,
    "$SSL_CERT_FILE=")
  refused(function() connection.ca_file(p { ca_file = f("nope.pem") }) end, "ca_file=")
end)

T.case("http_options: TLS and proxy options; mistakes refused", function()
  local crt, key = f("c.pem", "c"), f("k.pem", "k")
  local o = connection.http_options(p { ca_file = CA, client_cert = crt, client_key = key,
    proxy = "http://proxy.example:3128" })
  T.same(o, { ca_file = CA, cert_file = crt, key_file = key, proxy = "http://proxy.example:3128" })
  T.same(connection.http_options(p { insecure = true }, env {}), { insecure = true })
  refused(function() connection.http_options(p { insecure = true, ca_file = CA }) end,
    "insecure=true and ca_file= are both set")
  refused(function() connection.http_options(p { client_cert = crt }) end, "client_cert= and client_key= together")
  refused(function() connection.http_options(p { proxy = "proxy:3128" }) end, "proxy= must be")
  refused(function() connection.http_options(p { insecure = "yes" }) end, "insecure must be true or false")
end)

local KUBECONFIG = f("kubeconfig.yaml", string.format([[
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: "https://api.a.example:6443/", certificate-authority: %s}
- name: b
  cluster: {server: "https://api.b.example", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: kubeconfig-token-0123456789}
contexts:
- name: a
  context: {cluster: a, user: u}
- name: b
  context: {cluster: b, user: u}
]], CA))

T.case("kfp_options: host, credentials, TLS; through a kubeconfig the service proxy", function()
  local cookies = f("cookies", "authservice_session=abc-session-value\n")
  local o = connection.kfp_options(p { token_file = f("tok", "t0ken-value-1\n"), cookie_file = cookies,
    header = "kubeflow-userid: alice", namespace = "team-a", request_timeout = 12, ca_file = CA,
    insecure_credentials = true }, "https://kfp.example/pipeline")
  T.eq(o.host, "https://kfp.example/pipeline")
  T.eq(o.token_file, f("tok"))
  T.eq(o.cookie_file, cookies)
  T.same(o.headers, { ["kubeflow-userid"] = "alice" })
  T.eq(o.namespace, "team-a")
  T.eq(o.timeout, 12)
  T.same(o.tls, { ca_file = CA })
  T.eq(o.allow_insecure_credentials, true)
  T.eq(o.auth, nil)

  local k = connection.kfp_options(p { kubeconfig = KUBECONFIG })
  T.eq(k.host, "https://api.a.example:6443/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy")
  T.same(k.tls, { ca_file = CA }, "the cluster's CA")
  T.eq(k.auth:describe(), "a bearer token")
  local h, tls = {}, {}
  k.auth:apply(h, tls)
  T.eq(h.Authorization, "Bearer kubeconfig-token-0123456789")
  -- another context, service and namespace; a parameter wins over the kubeconfig
  local b = connection.kfp_options(p { kubeconfig = KUBECONFIG, context = "b", kfp_service_namespace = "kf",
    kfp_service = "ml-pipeline-ui:80", token_file = f("tok") })
  T.eq(b.host, "https://api.b.example/api/v1/namespaces/kf/services/ml-pipeline-ui:80/proxy")
  T.same(b.tls, { insecure = true })
  T.eq(b.auth, nil, "token_file= instead of the user's token")
  local c = connection.kfp_options(p { kubeconfig = KUBECONFIG, context = "b", ca_file = CA })
  T.same(c.tls, { ca_file = CA }, "ca_file= over insecure-skip-tls-verify")
  -- a parameter's CA or certificate replaces the kubeconfig's data, not beside it
  local data = f("kubeconfig-data.yaml", [[
apiVersion: v1
kind: Config
current-context: d
clusters:
- name: d
  cluster: {server: "https://api.d.example", certificate-authority-data: Q0EtUEVN}
users:
- name: u
  user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}
contexts:
- name: d
  context: {cluster: d, user: u}
]])
  T.same(connection.kfp_options(p { kubeconfig = data }).tls, { ca_pem = "CA-PEM", cert_pem = "CERT", key_pem = "KEY" })
  local crt, key = f("c.pem", "c"), f("k.pem", "k")
  T.same(connection.kfp_options(p { kubeconfig = data, ca_file = CA, client_cert = crt, client_key = key }).tls,
    { ca_file = CA, cert_file = crt, key_file = key })
  -- the CA variables: below the kubeconfig's CA, used when it has none
  local other = f("env-ca.pem", "x")
  connection.getenv = env { SSL_CERT_FILE = other }
  T.same(connection.kfp_options(p { kubeconfig = KUBECONFIG }).tls, { ca_file = CA })
  T.same(connection.kfp_options(p { kubeconfig = KUBECONFIG, context = "b" }).tls, { insecure = true })
  T.same(connection.kfp_options(p(), "https://kfp.example").tls, { ca_file = other })
  connection.getenv = env {}
  refused(function() connection.kfp_options(p { kubeconfig = KUBECONFIG, context = "zzz" }) end,
    "context 'zzz' not found")
  refused(function() connection.kfp_options(p { kubeconfig = KUBECONFIG, kfp_service = "a/b" }) end,
    "kfp_service must be")
  refused(function() connection.kfp_options(p { token_file = f("tok"), header = "Authorization: Bearer x1234" }) end,
    "not both")
end)

T.case("k8s and argo options: TLS and token_file; gateway credentials refused", function()
  local o = connection.k8s_options(p { kubeconfig = KUBECONFIG, context = "b", token_file = f("tok"),
    insecure = true, namespace = "bench" })
  T.same(o, { kubeconfig = KUBECONFIG, context = "b", token_file = f("tok"), tls = { insecure = true },
    namespace = "bench", timeout = 30 })
  local s = connection.k8s_options(p(), "http://127.0.0.1:1")
  T.same(s, { server = "http://127.0.0.1:1", timeout = 30 })
  refused(function() connection.k8s_options(p { cookie_file = f("cookies") }) end, "cookie_file= is for KFP")
  local a = connection.argo_options(p { ca_file = CA, request_timeout = 60 }, "https://argo.example:2746")
  T.same(a, { host = "https://argo.example:2746", tls = { ca_file = CA }, timeout = 60 })
  refused(function() connection.argo_options(p { header = "a: b" }, "https://x") end, "header= is for KFP")
  -- kb.k8s takes them: the token file and the TLS option over the kubeconfig's
  local c = require("kb.k8s").client(o)
  T.eq(c.auth_kind, "token_file")
end)

T.case("request_options: timeout, TLS and the credential headers of a plain HTTP scenario", function()
  local o = connection.request_options(p { request_timeout = 5, token_file = f("tok"),
    cookie_file = f("cookies"), header = "kubeflow-userid: bob", ca_file = CA })
  T.same(o, { timeout = 5, ca_file = CA, headers = { Authorization = "Bearer t0ken-value-1",
    Cookie = "authservice_session=abc-session-value", ["kubeflow-userid"] = "bob" } })
  T.eq(secrets.scrub("t0ken-value-1 abc-session-value"), "<redacted> <redacted>")
  refused(function() connection.request_options(p { kubeconfig = KUBECONFIG }) end, "kubeconfig= is for")
end)

T.case("cookie files: name=value lines, one header line, Netscape cookies.txt", function()
  T.eq(kfp.read_cookie_file(f("c1", "a=1-value\n\nb=2-value\n")), "a=1-value; b=2-value")
  T.eq(kfp.read_cookie_file(f("c2", "Cookie: a=x1; _oauth2_proxy=y2y2\n")), "a=x1; _oauth2_proxy=y2y2")
  T.eq(kfp.read_cookie_file(f("c3", "# Netscape HTTP Cookie File\n"
    .. "#HttpOnly_kf.example\tFALSE\t/\tTRUE\t0\tauthservice_session\tMTYz-sess\n"
    .. "kf.example\tFALSE\t/\tTRUE\t0\tother\tv2\n")), "authservice_session=MTYz-sess; other=v2")
  local e = T.raises(function() kfp.read_cookie_file(f("c4", "# only a comment\n")) end)
  T.contains(e.message, "holds no cookie")
  e = T.raises(function() kfp.read_cookie_file(f("missing-cookie")) end)
  T.contains(e.message, "cannot read cookie_file")
  T.eq(secrets.scrub("MTYz-sess"), "<redacted>")
end)

T.case("kb.kfp with a kubeconfig user: a 401 refreshes the credentials and is sent once more", function()
  local tok = f("rotating-token", "old-token-1111\n")
  local seen = {}
  local srv = kb.httpd.listen { handler = function(req)
    seen[#seen + 1] = req.headers.authorization
    if req.headers.authorization ~= "Bearer new-token-2222" then
      fs.write(tok, "new-token-2222\n") -- the token rotates while the old one is refused
      return 401, '{"code":16,"message":"token expired"}', { ["content-type"] = "application/json" }
    end
    return 200, '{"commit_sha":"x"}', { ["content-type"] = "application/json" }
  end }
  local c = kfp.client { host = srv.url, api = "v2beta1", retry = false,
    auth = require("kb.k8s.auth").new { kind = "token_file", path = tok } }
  c:healthz()
  T.same(seen, { "Bearer old-token-1111", "Bearer new-token-2222" })
  -- a token that stays refused: one more try, then the 401 with the hint naming the source
  fs.write(tok, "wrong-token-3333\n")
  seen = {}
  local srv2 = kb.httpd.listen { handler = function(req)
    seen[#seen + 1] = req.headers.authorization
    return 401, '{"code":16,"message":"no"}', { ["content-type"] = "application/json" }
  end }
  local c2 = kfp.client { host = srv2.url, retry = false,
    auth = require("kb.k8s.auth").new { kind = "token_file", path = tok } }
  local e = T.raises(function() c2:healthz() end)
  T.eq(e.class, "auth")
  T.contains(e.message, "the kubeconfig user's credentials (the token file '" .. tok .. "')")
  T.eq(#seen, 1, "an unchanged token file is not sent twice")
  srv:close()
  srv2:close()
end)

T.case("reach: what the journal keeps to reach the server again (kbrun report), never a secret", function()
  local cp = p { ca_file = CA, client_cert = f("c.pem"), client_key = f("k.pem"), cookie_file = f("cookies"),
    header = "X-Api-Key: k-e-y-5555", proxy = "http://u:pw-5555@proxy:3128", kubeconfig = KUBECONFIG,
    context = "a", insecure_credentials = true }
  local r = connection.reach(cp)
  T.same(r, { ca_file = CA, client_cert = f("c.pem"), client_key = f("k.pem"), cookie_file = f("cookies"),
    kubeconfig = KUBECONFIG, context = "a", insecure_credentials = true, request_timeout = 30,
    kfp_service_namespace = "kubeflow", kfp_service = "ml-pipeline:8888" })
  T.eq(connection.reach(p { proxy = "http://proxy:3128" }).proxy, "http://proxy:3128")
  -- and they give the same client options back
  local again = connection.kfp_options(r)
  T.eq(again.host, "https://api.a.example:6443/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy")
  T.same(again.tls, { ca_file = CA, cert_file = f("c.pem"), key_file = f("k.pem") })
  T.eq(again.cookie_file, f("cookies"))
end)

T.case("describe: what result.json records, never a secret", function()
  local d = connection.describe(p { ca_file = CA, token_file = f("tok"), cookie_file = f("cookies"),
    header = "kubeflow-userid: alice\nX-Api-Key: k-e-y-9876", proxy = "http://u:pw-9876@proxy:3128",
    kubeconfig = KUBECONFIG, context = "a", namespace = "team-a" }, "https://kfp.example")
  T.same(d, { ca_file = CA, ca_from = "ca_file", url = "https://kfp.example", tls = "verified",
    token_file = f("tok"), cookie_file = f("cookies"), headers = { "X-Api-Key", "kubeflow-userid" },
    proxy = "http://***@proxy:3128", kubeconfig = KUBECONFIG, context = "a",
    kfp_service = "kubeflow/ml-pipeline:8888", namespace = "team-a" })
  local i = connection.describe(p { insecure = true }, "https://kfp.example")
  T.eq(i.insecure, true)
  T.eq(i.tls, "insecure")
  T.eq(connection.describe(p(), "http://127.0.0.1:1").tls, "none")
end)

T.case("the simulator serves KFP and /metrics under the service proxy, nothing else", function()
  local sim = target.simulator()
  local base = sim.url .. "/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy"
  local c = kfp.client { host = base, api = "v2beta1" }
  local e = c:create_experiment { name = "through-the-proxy" }
  local direct = kfp.client { host = sim.url, api = "v2beta1" }
  T.eq(direct:get_experiment(e.id).name, "through-the-proxy", "the same KFP behind both paths")
  local other_ns = kfp.client { host = sim.url .. "/api/v1/namespaces/kf/services/http:ml-pipeline/proxy" }
  T.eq(other_ns:get_experiment(e.id).name, "through-the-proxy")
  local m = kb.http.get(base .. "/metrics")
  T.eq(m.status, 200)
  T.contains(m.body, "experiment_server_create_requests")
  for _, path in ipairs({ "/api/v1/namespaces/kubeflow/services/ml-pipeline-ui:80/proxy/apis/v2beta1/experiments",
    "/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy/sim/v1/status",
    "/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy/apis/v3/x" }) do
    T.eq(kb.http.get(sim.url .. path).status, 404, path)
  end
  local doc = json.decode(kb.http.get(sim.url .. "/api/v1/namespaces/kubeflow/services/ml-pipeline:8888/proxy/apis/v1beta1/healthz").body)
  T.ok(doc.commit_sha ~= nil, "v1 healthz through the proxy")
  -- a fault on a KFP path prefix hits the proxied requests too, and only those paths
  target.faults { api = { error_rate = 1, error_status = 503, path_prefix = "/apis/v2beta1/experiments" } }
  T.eq(kb.http.get(base .. "/apis/v2beta1/experiments/" .. e.id).status, 503)
  T.eq(kb.http.get(base .. "/apis/v2beta1/healthz").status, 200)
  target.faults { api = { error_rate = 0 } }
  T.eq(kb.http.get(base .. "/apis/v2beta1/experiments/" .. e.id).status, 200)
end)

T.run()
fs.remove(tmp, { recursive = true })
