-- Run by tests/e2e/k8s_tls.sh: kubeconfig variants against nginx (TLS,
-- optional client certificates, test CA) proxying to `kbrun sim`. nginx
-- answers with X-Client-Verify ($ssl_client_verify) and X-Auth (the
-- Authorization header it received), so each case checks which credential
-- reached the server. Environment: K8S_TLS_DIR (certificates and scratch
-- space), K8S_TLS_URL (https://127.0.0.1:PORT), K8S_TLS_PORT.
local kb = require "kb"
local T = require "kb.testing"
local k8s = require "kb.k8s"
local util = require "kb.k8s.util"

local DIR = assert(os.getenv("K8S_TLS_DIR"), "K8S_TLS_DIR")
local URL = assert(os.getenv("K8S_TLS_URL"), "K8S_TLS_URL")
local PORT = assert(os.getenv("K8S_TLS_PORT"), "K8S_TLS_PORT")

local function f(name) return kb.fs.join(DIR, name) end
local function b64(name) return util.b64encode(kb.fs.read(f(name))) end

local n = 0
local function kubeconfig(cluster, user, server)
  n = n + 1
  local path = f(string.format("kubeconfig-%d.yaml", n))
  kb.fs.write(path, string.format([[
apiVersion: v1
kind: Config
current-context: tls
clusters:
- name: tls
  cluster:
    server: %s
%s
users:
- name: u
  user:
%s
contexts:
- name: tls
  context: {cluster: tls, user: u, namespace: default}
]], server or URL, cluster, user))
  return path
end

-- Lists nodes with the client and returns what nginx saw.
local function check(c)
  local doc, r = c:request { verb = "list", resource = "nodes", path = "/api/v1/nodes" }
  T.eq(doc.kind, "NodeList")
  T.eq(#doc.items, 6)
  T.eq(#c:list("nodes").items, 6)
  return r.headers["x-client-verify"], r.headers["x-auth"]
end

local CA_FILE = "    certificate-authority: ca.crt"
local CA_DATA = "    certificate-authority-data: " .. b64("ca.crt")

T.case("tls-server-name: SNI and the certificate check use it; Host: stays the URL's", function()
  local sni_url = assert(os.getenv("K8S_TLS_SNI_URL"), "K8S_TLS_SNI_URL")
  local cluster = CA_FILE .. "\n    tls-server-name: kbrun-sni.test"
  local c = k8s.client { kubeconfig = kubeconfig(cluster, "    {}", sni_url) }
  local doc, r = c:request { verb = "list", resource = "nodes", path = "/api/v1/nodes" }
  T.eq(doc.kind, "NodeList")
  T.eq(r.headers["x-sni"], "kbrun-sni.test")
  T.eq(r.headers["x-host"], sni_url:match("^https://(.*)$"))
  T.eq(#c:list("nodes").items, 6) -- a reused connection too
  -- Without it the certificate does not name 127.0.0.1: a tls error.
  local plain = k8s.client { kubeconfig = kubeconfig(CA_FILE, "    {}", sni_url) }
  local err = T.raises(function() plain:list("nodes") end)
  T.eq(err.class, "tls")
end)

T.case("token with a CA file (relative path)", function()
  local verify, auth = check(k8s.client { kubeconfig = kubeconfig(CA_FILE, "    token: tls-token-1") })
  T.eq(verify, "NONE")
  T.eq(auth, "Bearer tls-token-1")
end)

T.case("token file with CA data", function()
  kb.fs.write(f("token"), "tls-token-2\n")
  local verify, auth = check(k8s.client { kubeconfig = kubeconfig(CA_DATA, "    tokenFile: token") })
  T.eq(verify, "NONE")
  T.eq(auth, "Bearer tls-token-2")
end)

T.case("client certificate files", function()
  local verify, auth = check(k8s.client { kubeconfig = kubeconfig(CA_FILE,
    "    client-certificate: client.crt\n    client-key: client.key") })
  T.eq(verify, "SUCCESS")
  T.eq(auth, "-")
end)

T.case("client certificate and key data", function()
  local verify = check(k8s.client { kubeconfig = kubeconfig(CA_DATA,
    "    client-certificate-data: " .. b64("client.crt") .. "\n    client-key-data: " .. b64("client.key")) })
  T.eq(verify, "SUCCESS")
end)

local function plugin(name, body)
  local path = f(name)
  kb.fs.write(path, "#!/bin/sh\n" .. body)
  kb.process.run { cmd = { "chmod", "+x", path }, check = true }
  return path
end

local function json_string(text)
  return kb.json.encode(text)
end

T.case("exec plugin returning a token", function()
  plugin("exec-token.sh", [[
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"exec-tls-token"}}'
]])
  local verify, auth = check(k8s.client { kubeconfig = kubeconfig(CA_FILE, [[
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./exec-token.sh
      interactiveMode: Never]]) })
  T.eq(verify, "NONE")
  T.eq(auth, "Bearer exec-tls-token")
end)

T.case("exec plugin returning a client certificate", function()
  local cred = string.format('{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
    .. '"status":{"clientCertificateData":%s,"clientKeyData":%s}}',
    json_string(kb.fs.read(f("client.crt"))), json_string(kb.fs.read(f("client.key"))))
  kb.fs.write(f("exec-cert.json"), cred)
  plugin("exec-cert.sh", "cat \"$(dirname \"$0\")/exec-cert.json\"\n")
  local verify, auth = check(k8s.client { kubeconfig = kubeconfig(CA_DATA, [[
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: ./exec-cert.sh]]) })
  T.eq(verify, "SUCCESS")
  T.eq(auth, "-")
end)

T.case("insecure-skip-tls-verify", function()
  local verify, auth = check(k8s.client { kubeconfig = kubeconfig("    insecure-skip-tls-verify: true",
    "    token: insecure-token") })
  T.eq(verify, "NONE")
  T.eq(auth, "Bearer insecure-token")
end)

T.case("in-cluster service account layout", function()
  local sa = f("serviceaccount")
  kb.fs.mkdir(sa)
  kb.fs.write(kb.fs.join(sa, "token"), "sa-tls-token\n")
  kb.fs.write(kb.fs.join(sa, "ca.crt"), kb.fs.read(f("ca.crt")))
  kb.fs.write(kb.fs.join(sa, "namespace"), "default\n")
  -- KUBERNETES_SERVICE_HOST/PORT come from the environment (set by the driver).
  local c = k8s.client { in_cluster = { root = sa } }
  T.eq(c.server, "https://127.0.0.1:" .. PORT)
  local verify, auth = check(c)
  T.eq(verify, "NONE")
  T.eq(auth, "Bearer sa-tls-token")
end)

T.case("a wrong CA fails with class tls and a hint", function()
  local c = k8s.client { kubeconfig = kubeconfig("    certificate-authority: wrong-ca.crt",
    "    token: never-sent-token") }
  local err = T.raises(function() c:list("nodes") end, "check certificate-authority(-data) in the kubeconfig")
  T.eq(err.class, "tls")
  T.eq(err.verb, "discovery")
  T.ok(not tostring(err):find("never-sent-token", 1, true), "no token in the error")
end)

T.case("http:// to the TLS port is not a silent success", function()
  local c = k8s.client { server = URL:gsub("^https", "http") }
  local err = T.raises(function() c:list("nodes") end, "HTTP 400")
  T.eq(err.class, "bad_request")
end)

T.run()
