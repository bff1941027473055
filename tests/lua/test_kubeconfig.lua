-- kb.k8s.kubeconfig and kb.k8s.auth: kubeconfig loading and merging,
-- relative paths, every credential kind (token, token file re-read, basic,
-- exec plugins v1/v1beta1 with caching, expiry and 401 refresh), the
-- in-cluster layout, and the messages of every configuration error. A
-- kb.httpd server plays a loopback API server that records the
-- Authorization header it gets. TLS variants are in tests/e2e/k8s_tls.sh.
local kb = require "kb"
local T = require "kb.testing"
local k8s = require "kb.k8s"
local kc = require "kb.k8s.kubeconfig"
local util = require "kb.k8s.util"

local dir = kb.fs.tmpdir("kubeconfig")
local function path(name) return kb.fs.join(dir, name) end
local function write(name, text)
  kb.fs.write(path(name), text)
  return path(name)
end

-- ---- the fake API server ------------------------------------------------------

local seen = {}          -- Authorization headers, in order
local proxied = {}       -- absolute-form targets: the server played a proxy
local rejected = {}      -- tokens answered with 401
local RESOURCES = kb.json.encode({ kind = "APIResourceList", groupVersion = "v1", resources = {
  { name = "nodes", singularName = "node", namespaced = false, kind = "Node", verbs = { "get", "list" } },
} })
local srv = kb.httpd.listen { handler = function(req)
  local auth = req.headers.authorization
  seen[#seen + 1] = auth or "-"
  if req.target:match("^http://") then proxied[#proxied + 1] = req.target end
  if auth and rejected[auth] then
    return 401, '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized",'
      .. '"reason":"Unauthorized","code":401}', { ["Content-Type"] = "application/json" }
  end
  if req.path == "/api/v1" then return 200, RESOURCES end
  if req.path == "/api/v1/nodes/n1" then return 200, '{"kind":"Node","metadata":{"name":"n1"}}' end
  if req.path == "/api/v1/nodes" then
    return 200, '{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"5"},'
      .. '"items":[{"metadata":{"name":"n1"}}]}'
  end
  return 404, '{"kind":"Status","code":404,"reason":"NotFound","message":"nope"}'
end }

local function kubeconfig(user, extra)
  extra = extra or {}
  return string.format([[
apiVersion: v1
kind: Config
current-context: %s
clusters:
- name: fake
  cluster:
    server: %s
%s
users:
- name: me
  user:
%s
contexts:
- name: main
  context: {cluster: fake, user: me, namespace: %s}
]], extra.current or "main", extra.server or srv.url, extra.cluster or "", user,
    extra.namespace or "bench")
end

local function last_auth() return seen[#seen] end

-- ---- files and merging --------------------------------------------------------

T.case("token user: the bearer token reaches the server, never the client's fields", function()
  local file = write("token.yaml", kubeconfig("    token: abc-token-1"))
  local c = k8s.client { kubeconfig = file }
  T.eq(c.namespace, "bench")
  T.eq(c.context, "main")
  T.eq(c.user, "me")
  T.eq(c.cluster, "fake")
  T.eq(c.auth_kind, "token")
  T.eq(#c:list("nodes").items, 1)
  T.eq(last_auth(), "Bearer abc-token-1")
  for k, v in pairs(c) do
    T.ok(not tostring(v):find("abc-token", 1, true), "field " .. k)
  end
  T.ok(not tostring(c):find("abc-token", 1, true), "tostring")
  -- A rejected token: class auth, the token redacted from the message.
  rejected["Bearer abc-token-1"] = true
  local err = T.raises(function() c:list("nodes") end,
    "auth: k8s.list.nodes: GET " .. srv.url .. "/api/v1/nodes -> HTTP 401 Unauthorized: Unauthorized")
  T.ok(not tostring(err):find("abc-token", 1, true), "no token in the error")
  T.contains(err.hint, "the server rejected the credentials of kubeconfig user 'me' (context ")
  T.contains(err.hint, "a bearer token: check that they are current (token expired")
  rejected["Bearer abc-token-1"] = nil
  -- token= overrides the kubeconfig's user.
  k8s.client({ kubeconfig = file, token = "other-token" }):list("nodes")
  T.eq(last_auth(), "Bearer other-token")
end)

T.case("proxy-url: every request goes through the proxy", function()
  -- The target host does not exist: only the proxy can answer for it.
  local file = write("proxy.yaml", kubeconfig("    {}", { server = "http://kube.invalid:8080",
    cluster = "    proxy-url: " .. srv.url }))
  local c = k8s.client { kubeconfig = file }
  local before = #proxied
  T.eq(#c:list("nodes").items, 1)
  T.ok(#proxied > before, "the proxy got the requests")
  T.eq(proxied[#proxied]:match("^[^?]*"), "http://kube.invalid:8080/api/v1/nodes")
end)

T.case("tls-server-name reaches kb.http (the TLS check itself: tests/e2e/k8s_tls.sh)", function()
  local file = write("sni.yaml", kubeconfig("    {}", { server = "https://10.0.0.1:6443",
    cluster = "    tls-server-name: api.internal\n    proxy-url: socks5://127.0.0.1:1080" }))
  local cfg = kc.load { kubeconfig = file }
  T.eq(cfg.tls.tls_server_name, "api.internal")
  T.eq(cfg.tls.proxy, "socks5://127.0.0.1:1080")
  T.eq(cfg.host, "10.0.0.1")
  -- The same name as the URL's host needs nothing.
  file = write("sni2.yaml", kubeconfig("    {}", { server = "https://api.internal:6443",
    cluster = "    tls-server-name: API.internal" }))
  T.eq(kc.load({ kubeconfig = file }).tls.tls_server_name, nil)
end)

T.case("tokenFile: relative to the kubeconfig's folder, re-read when it changes", function()
  kb.fs.mkdir(path("sub"))
  write("sub/token", "file-token-1\n")
  local file = write("sub/tf.yaml", kubeconfig("    tokenFile: token"))
  local c = k8s.client { kubeconfig = file }
  T.eq(c.auth_kind, "token_file")
  c:list("nodes")
  T.eq(last_auth(), "Bearer file-token-1")
  write("sub/token", "file-token-22\n") -- another size: seen even within the same mtime second
  c:list("nodes")
  T.eq(last_auth(), "Bearer file-token-22")
  write("sub/token", "   \n")
  T.raises(function() c:list("nodes") end, "auth: kb.k8s: token file '" .. path("sub/token") .. "' is empty")
  kb.fs.remove(path("sub/token"))
  T.raises(function() k8s.client { kubeconfig = file } end,
    "config: kb.k8s: user 'me': tokenFile '" .. path("sub/token") .. "' does not exist")
end)

T.case("basic auth", function()
  local c = k8s.client { kubeconfig = write("basic.yaml",
    kubeconfig("    username: alice\n    password: wonder")) }
  c:list("nodes")
  T.eq(last_auth(), "Basic " .. util.b64encode("alice:wonder"))
  T.eq(util.b64encode("alice:wonder"), "YWxpY2U6d29uZGVy")
end)

T.case("no user credentials: no Authorization header", function()
  local file = write("anon.yaml", kubeconfig("    {}"))
  local c = k8s.client { kubeconfig = file }
  T.eq(c.auth_kind, nil)
  c:list("nodes")
  T.eq(last_auth(), "-")
end)

T.case("several files merge as kubectl merges them", function()
  local a = write("a.yaml", [[
current-context: ctx-a
clusters:
- {name: shared, cluster: {server: "http://127.0.0.1:1"}}
contexts:
- {name: ctx-a, context: {cluster: shared, namespace: from-a}}
- {name: ctx-both, context: {cluster: shared, namespace: first-wins}}
]])
  local b = write("b.yaml", [[
current-context: ctx-b
clusters:
- {name: shared, cluster: {server: "http://127.0.0.1:2"}}
- {name: only-b, cluster: {server: "http://127.0.0.1:3"}}
contexts:
- {name: ctx-both, context: {cluster: only-b, namespace: second}}
- {name: ctx-b, context: {cluster: only-b}}
]])
  local cfg = kc.load { kubeconfig = a .. ":" .. b }
  T.eq(cfg.context, "ctx-a", "the first current-context wins")
  T.eq(cfg.server, "http://127.0.0.1:1", "the first definition of a cluster wins")
  T.eq(cfg.namespace, "from-a")
  cfg = kc.load { kubeconfig = { b, a } }
  T.eq(cfg.context, "ctx-b")
  T.eq(cfg.server, "http://127.0.0.1:3")
  T.eq(cfg.namespace, "default")
  cfg = kc.load { kubeconfig = a .. ":" .. b, context = "ctx-both" }
  T.eq(cfg.namespace, "first-wins")
  T.eq(kc.load({ kubeconfig = a, namespace = "given" }).namespace, "given")
  -- $KUBECONFIG: missing entries are skipped; else ~/.kube/config.
  local env = { KUBECONFIG = path("missing.yaml") .. ":" .. b }
  cfg = kc.load({}, function(k) return env[k] end)
  T.eq(cfg.context, "ctx-b")
  T.same(cfg.files, { b })
  kb.fs.mkdir(path("home/.kube"))
  kb.fs.write(path("home/.kube/config"), kb.fs.read(a))
  env = { HOME = path("home") }
  T.eq(kc.load({}, function(k) return env[k] end).context, "ctx-a")
  env = { HOME = path("nohome") }
  T.raises(function() kc.load({}, function(k) return env[k] end) end,
    "config: kb.k8s: no kubeconfig found: $KUBECONFIG is not set and ~/.kube/config does not exist")
end)

T.case("relative certificate paths and -data fields", function()
  kb.fs.mkdir(path("certs"))
  write("certs/ca.crt", "CA PEM")
  write("certs/client.crt", "CERT PEM")
  write("certs/client.key", "KEY PEM")
  local file = write("certs/tls.yaml", [[
current-context: c
clusters:
- {name: x, cluster: {server: "https://example.test:6443", certificate-authority: ca.crt}}
- {name: y, cluster: {server: "https://example.test:6443", certificate-authority-data: ]]
    .. util.b64encode("CA DATA") .. [[}}
users:
- {name: files, user: {client-certificate: client.crt, client-key: ./client.key}}
- {name: data, user: {client-certificate-data: ]] .. util.b64encode("CERT DATA")
    .. ", client-key-data: " .. util.b64encode("KEY DATA") .. [[}}
contexts:
- {name: c, context: {cluster: x, user: files}}
- {name: d, context: {cluster: y, user: data}}
]])
  local cfg = kc.load { kubeconfig = file }
  T.eq(cfg.tls.ca_file, path("certs/ca.crt"))
  T.eq(cfg.tls.cert_file, path("certs/client.crt"))
  T.eq(cfg.tls.key_file, path("certs/client.key"))
  T.eq(cfg.auth, nil)
  cfg = kc.load { kubeconfig = file, context = "d" }
  T.eq(cfg.tls.ca_pem, "CA DATA")
  T.eq(cfg.tls.cert_pem, "CERT DATA")
  T.eq(cfg.tls.key_pem, "KEY DATA")
  T.eq(cfg.host, "example.test")
  T.eq(cfg.scheme, "https")
end)

T.case("configuration errors name the file and the entry", function()
  local function fails(text, expected, opts)
    local file = write("bad.yaml", text)
    local o = { kubeconfig = file }
    for k, v in pairs(opts or {}) do o[k] = v end
    local err = T.raises(function() kc.load(o) end, expected)
    T.eq(err.class, "config")
  end
  local f = path("bad.yaml")
  fails(kubeconfig("    {}", { current = "nope" }),
    "kb.k8s: context 'nope' not found in kubeconfig " .. f .. " (contexts: main)")
  fails(kubeconfig("    {}"), "kb.k8s: context 'other' not found", { context = "other" })
  fails("clusters: []\n", "kb.k8s: kubeconfig " .. f .. " has no current-context; give context= "
    .. "(contexts: none)")
  fails([[
current-context: c
contexts: [{name: c, context: {cluster: gone}}]
]], "kb.k8s: context 'c' refers to cluster 'gone', which is not in kubeconfig " .. f
    .. " (clusters: none)")
  fails([[
current-context: c
clusters: [{name: x, cluster: {server: "http://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: x, user: ghost}}]
]], "kb.k8s: context 'c' refers to user 'ghost', which is not in")
  fails(kubeconfig("    {}", { server = "ftp://x" }),
    "kb.k8s: cluster 'fake': server must start with https:// or http://, got \"ftp://x\"")
  fails(kubeconfig("    {}", { cluster = "    certificate-authority-data: '!!!'" }),
    "kb.k8s: cluster 'fake': certificate-authority-data is not valid base64 (invalid base64 character)")
  fails(kubeconfig("    {}", { cluster = "    certificate-authority: nope.crt" }),
    "kb.k8s: cluster 'fake': certificate-authority '" .. path("nope.crt") .. "' does not exist")
  fails(kubeconfig("    {}", { cluster = "    insecure-skip-tls-verify: true\n"
    .. "    certificate-authority-data: " .. util.b64encode("x") }),
    "insecure-skip-tls-verify and a certificate-authority are both set")
  fails(kubeconfig("    {}", { cluster = "    proxy-url: ftp://user:secret@proxy:21" }),
    "kb.k8s: cluster 'fake': proxy-url 'ftp://***@proxy:21' must be an http://, https:// or "
      .. "socks5:// URL")
  fails(kubeconfig("    auth-provider: {name: gcp}"),
    "kb.k8s: user 'me': auth-provider 'gcp' is not supported")
  fails(kubeconfig("    client-certificate-data: " .. util.b64encode("x")),
    "kb.k8s: user 'me': a client certificate without a client key")
  fails(kubeconfig("    exec: {command: x, apiVersion: client.authentication.k8s.io/v1}"),
    "kb.k8s: user 'me': exec: interactiveMode must be set for client.authentication.k8s.io/v1")
  fails(kubeconfig("    exec: {command: x, apiVersion: v2}"),
    "exec apiVersion must be client.authentication.k8s.io/v1 or v1beta1, got 'v2'")
  fails("a: [", "kb.k8s: kubeconfig '" .. f .. "' is not valid YAML")
  fails("- 1\n", "kb.k8s: kubeconfig '" .. f .. "' is not a mapping")
  fails("clusters: 3\n", "kb.k8s: kubeconfig '" .. f .. "': clusters must be a list")
  T.raises(function() kc.load { kubeconfig = path("absent.yaml") } end,
    "config: kb.k8s: cannot read kubeconfig '" .. path("absent.yaml") .. "': no such file")
end)

-- ---- exec plugins ---------------------------------------------------------------

local PLUGIN = [[#!/bin/sh
# A test exec credential plugin: counts its runs, records what it was given.
n=$(cat "$PLUGIN_DIR/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$PLUGIN_DIR/count"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$PLUGIN_DIR/info"
echo "$@" > "$PLUGIN_DIR/args"
case "$MODE" in
fail) echo "plugin: not logged in" >&2; exit 3 ;;
garbage) echo "token=secret-not-json"; exit 0 ;;
wrongapi) echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}'; exit 0 ;;
empty) echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}'; exit 0 ;;
esac
printf '{"apiVersion":"%s","kind":"ExecCredential","status":{"token":"exec-tok-%s"%s}}\n' \
  "${API:-client.authentication.k8s.io/v1}" "$n" "${EXPIRY:+,\"expirationTimestamp\":\"$EXPIRY\"}"
]]

local function plugin_config(name, env, extra)
  local pdir = path(name)
  kb.fs.mkdir(pdir)
  local script = kb.fs.join(pdir, "plugin.sh")
  kb.fs.write(script, PLUGIN)
  kb.process.run { cmd = { "chmod", "+x", script }, check = true }
  local lines = { "        - {name: PLUGIN_DIR, value: '" .. pdir .. "'}" }
  for k, v in pairs(env or {}) do lines[#lines + 1] = "        - {name: " .. k .. ", value: '" .. v .. "'}" end
  local user = string.format([[
    exec:
      apiVersion: %s
      command: ./plugin.sh
      args: [--cluster, fake]
      interactiveMode: %s
      provideClusterInfo: true
      installHint: "install the test plugin"
      env:
%s]], (env and env.API) or "client.authentication.k8s.io/v1", (extra and extra.mode) or "Never",
    table.concat(lines, "\n"))
  local file = kb.fs.join(pdir, "kubeconfig")
  kb.fs.write(file, kubeconfig(user, { cluster = "    extensions:\n    - name: client.authentication.k8s.io/exec\n      extension: {audience: bench}" }))
  return file, pdir
end

local function runs(pdir)
  local ok, text = pcall(kb.fs.read, kb.fs.join(pdir, "count"))
  return ok and tonumber(text) or 0
end

T.case("exec plugin (v1): token cached, cluster info and args passed", function()
  local file, pdir = plugin_config("exec-v1")
  local c = k8s.client { kubeconfig = file }
  T.eq(c.auth_kind, "exec")
  T.eq(runs(pdir), 0, "the plugin runs at the first request, not before")
  c:list("nodes")
  c:list("nodes")
  c:get("nodes", "n1")
  T.eq(runs(pdir), 1, "no expiry: the token is cached")
  T.eq(last_auth(), "Bearer exec-tok-1")
  T.eq(kb.fs.read(kb.fs.join(pdir, "args")), "--cluster fake\n")
  local info = kb.json.decode(kb.fs.read(kb.fs.join(pdir, "info")))
  T.eq(info.kind, "ExecCredential")
  T.eq(info.apiVersion, "client.authentication.k8s.io/v1")
  T.eq(info.spec.interactive, false)
  T.eq(info.spec.cluster.server, srv.url)
  T.eq(info.spec.cluster.config.audience, "bench")
  -- A 401 runs the plugin again and retries once.
  rejected["Bearer exec-tok-1"] = true
  T.eq(#c:list("nodes").items, 1)
  T.eq(runs(pdir), 2)
  T.eq(last_auth(), "Bearer exec-tok-2")
  -- Concurrent first requests run the plugin once.
  local c2 = k8s.client { kubeconfig = file }
  local tasks = {}
  for i = 1, 5 do tasks[i] = kb.spawn(function() return #c2:list("nodes").items end) end
  T.same(kb.all(tasks), { 1, 1, 1, 1, 1 })
  T.eq(runs(pdir), 3)
  rejected["Bearer exec-tok-1"] = nil
end)

T.case("exec plugin: expirationTimestamp, v1beta1", function()
  local past = util.format_time(kb.time() - 3600)
  local file, pdir = plugin_config("exec-expired", { EXPIRY = past })
  local c = k8s.client { kubeconfig = file }
  c:list("nodes") -- discovery, then the list
  c:list("nodes")
  T.eq(runs(pdir), 3, "an expired token is renewed at every request")
  local future = util.format_time(kb.time() + 3600)
  file, pdir = plugin_config("exec-beta", { EXPIRY = future, API = "client.authentication.k8s.io/v1beta1" })
  c = k8s.client { kubeconfig = file }
  c:list("nodes")
  c:list("nodes")
  T.eq(runs(pdir), 1, "valid for an hour: cached")
  T.eq(last_auth(), "Bearer exec-tok-1")
end)

T.case("exec plugin failures", function()
  local function fails(env, expected, mode)
    local file = plugin_config("exec-fail", env, { mode = mode })
    local c = k8s.client { kubeconfig = file }
    local err = T.raises(function() c:list("nodes") end, expected)
    T.eq(err.class, "auth")
    return err
  end
  fails({ MODE = "fail" }, "auth: kb.k8s: exec plugin '" .. path("exec-fail/plugin.sh")
    .. "' failed with exit code 3: plugin: not logged in")
  local err = fails({ MODE = "garbage" }, "did not print an ExecCredential JSON object on stdout")
  T.ok(not tostring(err):find("secret-not-json", 1, true), "stdout is never quoted")
  fails({ MODE = "wrongapi" }, "printed apiVersion 'client.authentication.k8s.io/v1beta1', but the "
    .. "kubeconfig asks for 'client.authentication.k8s.io/v1'")
  fails({ MODE = "empty" }, "printed neither status.token nor status.clientCertificateData")
  fails({}, "requires a terminal (interactiveMode: Always)", "Always")
  local file = write("noplugin.yaml", kubeconfig([[
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kbrun-no-such-plugin
      interactiveMode: IfAvailable
      installHint: "get it from example.test"]]))
  local c = k8s.client { kubeconfig = file }
  err = T.raises(function() c:list("nodes") end, "auth: kb.k8s: exec plugin 'kbrun-no-such-plugin' "
    .. "could not be run: ")
  T.contains(tostring(err), "(get it from example.test)")
end)

-- ---- in-cluster ---------------------------------------------------------------------

T.case("in-cluster service account layout", function()
  local sa = path("sa")
  kb.fs.mkdir(sa)
  kb.fs.write(kb.fs.join(sa, "token"), "sa-token\n")
  kb.fs.write(kb.fs.join(sa, "ca.crt"), "CA")
  kb.fs.write(kb.fs.join(sa, "namespace"), "team-a\n")
  local cfg = kc.in_cluster { root = sa, host = "10.0.0.1", port = 443 }
  T.eq(cfg.server, "https://10.0.0.1:443")
  T.eq(cfg.namespace, "team-a")
  T.eq(cfg.tls.ca_file, kb.fs.join(sa, "ca.crt"))
  T.eq(cfg.auth.kind, "token_file")
  T.eq(cfg.auth.path, kb.fs.join(sa, "token"))
  T.eq(kc.in_cluster({ root = sa, host = "fd00::1", port = "6443" }).server, "https://[fd00::1]:6443")
  local env = { KUBERNETES_SERVICE_HOST = "10.0.0.2", KUBERNETES_SERVICE_PORT = "8443" }
  T.eq(kc.in_cluster({ root = sa }, function(k) return env[k] end).server, "https://10.0.0.2:8443")
  T.raises(function() kc.in_cluster({ root = sa }, function() return nil end) end,
    "config: kb.k8s: in_cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
  T.raises(function() kc.in_cluster { root = path("nosa"), host = "h", port = 1 } end,
    "in_cluster: no service account token at '" .. path("nosa/token") .. "'")
  -- Through the client, with server= pointing at the loopback fake.
  local c = k8s.client { in_cluster = { root = sa, host = "127.0.0.1", port = 1 }, server = srv.url }
  T.eq(c.namespace, "team-a")
  c:list("nodes")
  T.eq(last_auth(), "Bearer sa-token")
end)

T.case("util: base64 and RFC 3339 times", function()
  for _, s in ipairs({ "", "a", "ab", "abc", "abcd", "\0\255\128 binary" }) do
    T.eq(util.b64decode(util.b64encode(s)), s)
  end
  T.eq(util.b64decode("aGVsbG8=\n"), "hello")
  T.eq(util.parse_time("1970-01-01T00:00:00Z"), 0)
  T.eq(util.parse_time("2024-01-01T00:00:05Z"), 1704067205)
  T.eq(util.parse_time("2024-02-29T12:00:00.5Z"), 1709208000.5)
  T.eq(util.parse_time("2024-01-01T02:00:00+02:00"), 1704067200)
  T.eq(util.parse_time("yesterday"), nil)
  T.eq(util.format_time(1704067205), "2024-01-01T00:00:05Z")
end)

T.run()
srv:close()
kb.fs.remove(dir, { recursive = true })
