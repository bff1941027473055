--- kb.k8s.kubeconfig: where a Kubernetes client connects and how it
-- authenticates, from kubeconfig files (as kubectl reads them) or from a
-- pod's service account (in-cluster).
--
--   local kc = require "kb.k8s.kubeconfig"
--   local cfg = kc.load{ kubeconfig = "a.yaml:b.yaml", context = "prod" }
--   local cfg = kc.in_cluster{ root = "/tmp/sa", host = "127.0.0.1", port = 6443 }
--
-- Files: kubeconfig= (a path, "a:b" or a list), else $KUBECONFIG (paths
-- separated by ':', missing ones skipped), else ~/.kube/config. Several
-- files merge as client-go merges them: for each named cluster, user and
-- context the first file that defines it wins, and so does the first
-- current-context. Relative paths (certificate-authority,
-- client-certificate, client-key, tokenFile, an exec command containing
-- '/') resolve against the folder of the file that names them.
--
-- The result (a plain table, no secrets printed by tostring of the client):
--   { server, scheme, host, namespace, context, cluster_name, user_name,
--     files = {...},
--     tls = { ca_file | ca_pem, cert_file | cert_pem, key_file | key_pem,
--             insecure },
--     auth = nil | { kind = "token", token } | { kind = "token_file", path }
--          | { kind = "basic", username, password }
--          | { kind = "exec", command, args, env, api_version, install_hint,
--              provide_cluster_info, interactive_mode, cluster_info },
--     compressed = true unless disable-compression }
--
-- Failures raise class "config" with a message naming the file and the
-- entry; secrets never appear in them.
local fs = require "kb.fs"
local yaml = require "kb.yaml"
local json = require "kb.json"
local u = require "kb.k8s.util"

local M = {}

local SA_ROOT = "/var/run/secrets/kubernetes.io/serviceaccount"
M.SERVICE_ACCOUNT_ROOT = SA_ROOT

local function cfg_error(fmt, ...)
  u.raise("config", "kb.k8s: " .. string.format(fmt, ...))
end

local function is_null(v) return v == nil or v == json.null end

local function str(v)
  if is_null(v) then return nil end
  if type(v) == "string" then return v ~= "" and v or nil end
  return tostring(v)
end

local function truthy(v) return v == true or v == "true" end

local function reason_of(err)
  if type(err) == "table" then return err.reason or err.message or tostring(err) end
  return tostring(err)
end

local function resolve(dir, path)
  if not path or path:sub(1, 1) == "/" then return path end
  return fs.abspath(fs.join(dir, path))
end

-- ---- reading and merging files ---------------------------------------------

local function split_paths(text)
  local list = {}
  for p in text:gmatch("[^:]+") do list[#list + 1] = p end
  return list
end

-- The files to read: list, and whether a missing one is an error.
local function file_list(opts, getenv)
  local k = opts.kubeconfig
  if type(k) == "table" then return k, true end
  if type(k) == "string" and k ~= "" then return split_paths(k), true end
  local env = getenv("KUBECONFIG")
  if env and env ~= "" then return split_paths(env), false end
  local home = getenv("HOME")
  if home and home ~= "" then return { fs.join(home, ".kube", "config") }, false end
  return {}, false
end

local function named_list(doc, field, item, path)
  local out = {}
  local list = doc[field]
  if is_null(list) then return out end
  if type(list) ~= "table" then cfg_error("kubeconfig '%s': %s must be a list", path, field) end
  for i, entry in ipairs(list) do
    local name = type(entry) == "table" and str(entry.name)
    if not name then cfg_error("kubeconfig '%s': %s[%d] has no name", path, field, i) end
    local body = entry[item]
    if is_null(body) then body = {} end
    if type(body) ~= "table" then
      cfg_error("kubeconfig '%s': %s[%d] (%s): %s must be a mapping", path, field, i, name, item)
    end
    out[#out + 1] = { name = name, body = body }
  end
  return out
end

-- Resolves a file's relative paths against its folder, in place.
local function resolve_paths(cluster_list, user_list, dir)
  for _, c in ipairs(cluster_list) do
    local b = c.body
    b["certificate-authority"] = resolve(dir, str(b["certificate-authority"]))
  end
  for _, e in ipairs(user_list) do
    local b = e.body
    b["client-certificate"] = resolve(dir, str(b["client-certificate"]))
    b["client-key"] = resolve(dir, str(b["client-key"]))
    b.tokenFile = resolve(dir, str(b.tokenFile))
    if type(b.exec) == "table" then
      local cmd = str(b.exec.command)
      if cmd and cmd:find("/", 1, true) then b.exec.command = resolve(dir, cmd) end
    end
  end
end

--- The merged kubeconfig of the files: { clusters = {name = body},
-- users, contexts, current_context, files }.
function M.read(opts, getenv)
  opts = opts or {}
  getenv = getenv or os.getenv
  local paths, strict = file_list(opts, getenv)
  local merged = { clusters = {}, users = {}, contexts = {}, files = {} }
  for _, path in ipairs(paths) do
    local exists = fs.exists(path)
    if not exists then
      if strict then cfg_error("cannot read kubeconfig '%s': no such file", path) end
    elseif exists ~= "file" then
      cfg_error("kubeconfig '%s' is not a file", path)
    else
      local ok, text = pcall(fs.read, path)
      if not ok then cfg_error("cannot read kubeconfig '%s': %s", path, reason_of(text)) end
      local okd, doc = pcall(yaml.decode, text)
      if not okd then
        cfg_error("kubeconfig '%s' is not valid YAML: %s", path, reason_of(doc))
      end
      if is_null(doc) then doc = {} end
      if type(doc) ~= "table" or u.is_array(doc) then
        cfg_error("kubeconfig '%s' is not a mapping", path)
      end
      local clusters = named_list(doc, "clusters", "cluster", path)
      local users = named_list(doc, "users", "user", path)
      local contexts = named_list(doc, "contexts", "context", path)
      resolve_paths(clusters, users, fs.dirname(fs.abspath(path)))
      for _, pair in ipairs({ { clusters, merged.clusters }, { users, merged.users },
        { contexts, merged.contexts } }) do
        for _, e in ipairs(pair[1]) do
          if pair[2][e.name] == nil then pair[2][e.name] = e.body end
        end
      end
      if not merged.current_context then merged.current_context = str(doc["current-context"]) end
      merged.files[#merged.files + 1] = path
    end
  end
  return merged
end

local function names(t)
  local list = u.sorted_keys(t)
  return #list > 0 and table.concat(list, ", ") or "none"
end

-- ---- TLS material -----------------------------------------------------------

local function data_field(body, field, what)
  local v = str(body[field])
  if not v then return nil end
  local bytes, why = u.b64decode(v)
  if not bytes then cfg_error("%s: %s is not valid base64 (%s)", what, field, why) end
  return bytes
end

local function file_field(body, field, what)
  local p = str(body[field])
  if not p then return nil end
  local kind = fs.exists(p)
  if kind ~= "file" then
    cfg_error("%s: %s '%s' %s", what, field, p, kind and "is not a file" or "does not exist")
  end
  return p
end

local function cluster_tls(cluster, what, host)
  local tls = {}
  tls.ca_pem = data_field(cluster, "certificate-authority-data", what)
  if not tls.ca_pem then tls.ca_file = file_field(cluster, "certificate-authority", what) end
  if truthy(cluster["insecure-skip-tls-verify"]) then
    if tls.ca_pem or tls.ca_file then
      -- client-go refuses the same combination: one of them is a mistake.
      cfg_error("%s: insecure-skip-tls-verify and a certificate-authority are both set; "
        .. "remove one of them", what)
    end
    tls.insecure = true
  end
  local sni = str(cluster["tls-server-name"])
  if sni and sni:lower() ~= host then tls.tls_server_name = sni end
  local proxy = str(cluster["proxy-url"])
  if proxy then
    -- client-go takes http, https and socks5 proxies; so does libcurl.
    local pscheme = proxy:match("^(%a[%w+.-]*)://")
    if not (pscheme == "http" or pscheme == "https" or pscheme == "socks5") then
      cfg_error("%s: proxy-url '%s' must be an http://, https:// or socks5:// URL", what,
        (proxy:gsub("//[^/@]*@", "//***@")))
    end
    tls.proxy = proxy
  end
  return tls
end

local function user_auth(user, what, tls)
  local cert_pem = data_field(user, "client-certificate-data", what)
  local key_pem = data_field(user, "client-key-data", what)
  local cert_file = not cert_pem and file_field(user, "client-certificate", what) or nil
  local key_file = not key_pem and file_field(user, "client-key", what) or nil
  local has_cert, has_key = cert_pem or cert_file, key_pem or key_file
  if has_cert and not has_key then cfg_error("%s: a client certificate without a client key", what) end
  if has_key and not has_cert then cfg_error("%s: a client key without a client certificate", what) end
  tls.cert_pem, tls.cert_file, tls.key_pem, tls.key_file = cert_pem, cert_file, key_pem, key_file

  if not is_null(user["auth-provider"]) then
    local name = type(user["auth-provider"]) == "table" and str(user["auth-provider"].name) or "?"
    cfg_error("%s: auth-provider '%s' is not supported (client-go removed the built-in "
      .. "providers in 1.26); use an exec plugin, e.g. gke-gcloud-auth-plugin or kubelogin", what,
      name)
  end
  if str(user.as) or not is_null(user["as-groups"]) then
    cfg_error("%s: impersonation (as, as-groups) is not supported", what)
  end
  local token, token_file = str(user.token), str(user.tokenFile)
  local exec = user.exec
  local username, password = str(user.username), str(user.password)
  if not is_null(exec) then
    if type(exec) ~= "table" then cfg_error("%s: exec must be a mapping", what) end
    local command = str(exec.command)
    if not command then cfg_error("%s: exec has no command", what) end
    local api = str(exec.apiVersion)
    if api ~= "client.authentication.k8s.io/v1" and api ~= "client.authentication.k8s.io/v1beta1" then
      cfg_error("%s: exec apiVersion must be client.authentication.k8s.io/v1 or v1beta1, got %s",
        what, api and ("'" .. api .. "'") or "none")
    end
    local mode = str(exec.interactiveMode)
    if api:match("/v1$") and not mode then
      cfg_error("%s: exec: interactiveMode must be set for client.authentication.k8s.io/v1 "
        .. "(Never, IfAvailable or Always)", what)
    end
    mode = mode or "IfAvailable"
    if mode ~= "Never" and mode ~= "IfAvailable" and mode ~= "Always" then
      cfg_error("%s: exec: interactiveMode must be Never, IfAvailable or Always, got '%s'", what, mode)
    end
    local args, env = {}, {}
    if type(exec.args) == "table" then
      for _, a in ipairs(exec.args) do args[#args + 1] = tostring(a) end
    end
    if type(exec.env) == "table" then
      for i, e in ipairs(exec.env) do
        local n = type(e) == "table" and str(e.name)
        if not n then cfg_error("%s: exec env[%d] has no name", what, i) end
        env[n] = is_null(e.value) and "" or tostring(e.value)
      end
    end
    return {
      kind = "exec", command = command, args = args, env = env, api_version = api,
      install_hint = str(exec.installHint), provide_cluster_info = truthy(exec.provideClusterInfo),
      interactive_mode = mode,
    }
  end
  if token then return { kind = "token", token = token } end
  if token_file then
    if not fs.exists(token_file) then cfg_error("%s: tokenFile '%s' does not exist", what, token_file) end
    return { kind = "token_file", path = token_file }
  end
  if username or password then
    return { kind = "basic", username = username or "", password = password or "" }
  end
  return nil
end

-- The cluster as an exec plugin sees it (ExecCredential spec.cluster).
local function cluster_info(cluster, server)
  local info = { server = server }
  local ca = str(cluster["certificate-authority-data"])
  if not ca then
    local path = str(cluster["certificate-authority"])
    if path and fs.exists(path) == "file" then ca = u.b64encode(fs.read(path)) end
  end
  info["certificate-authority-data"] = ca
  info["tls-server-name"] = str(cluster["tls-server-name"])
  if truthy(cluster["insecure-skip-tls-verify"]) then info["insecure-skip-tls-verify"] = true end
  if type(cluster.extensions) == "table" then
    for _, ext in ipairs(cluster.extensions) do
      if type(ext) == "table" and ext.name == "client.authentication.k8s.io/exec" then
        info.config = ext.extension
      end
    end
  end
  return info
end

--- The connection config of a context of the merged kubeconfig.
-- opts: kubeconfig, context, namespace; getenv (tests).
function M.load(opts, getenv)
  opts = opts or {}
  local kc = M.read(opts, getenv)
  if #kc.files == 0 then
    cfg_error("no kubeconfig found: $KUBECONFIG is not set and ~/.kube/config does not exist "
      .. "(give kubeconfig=, or in_cluster = true inside a pod)")
  end
  local where = "kubeconfig " .. table.concat(kc.files, ":")
  local ctx_name = opts.context or kc.current_context
  if not ctx_name then
    cfg_error("%s has no current-context; give context= (contexts: %s)", where, names(kc.contexts))
  end
  local ctx = kc.contexts[ctx_name]
  if not ctx then
    cfg_error("context '%s' not found in %s (contexts: %s)", ctx_name, where, names(kc.contexts))
  end
  local cluster_name, user_name = str(ctx.cluster), str(ctx.user)
  local cluster = cluster_name and kc.clusters[cluster_name]
  if not cluster then
    cfg_error("context '%s' refers to cluster '%s', which is not in %s (clusters: %s)", ctx_name,
      tostring(cluster_name), where, names(kc.clusters))
  end
  local user = {}
  if user_name then
    user = kc.users[user_name]
    if not user then
      cfg_error("context '%s' refers to user '%s', which is not in %s (users: %s)", ctx_name,
        user_name, where, names(kc.users))
    end
  end
  local what = string.format("cluster '%s'", cluster_name)
  local scheme, host, server = u.parse_server(str(cluster.server), what)
  local tls = cluster_tls(cluster, what, host)
  local auth = user_auth(user, string.format("user '%s'", user_name or ""), tls)
  if auth and auth.kind == "exec" and auth.provide_cluster_info then
    auth.cluster_info = cluster_info(cluster, server)
  end
  return {
    server = server, scheme = scheme, host = host,
    namespace = opts.namespace or str(ctx.namespace) or "default",
    context = ctx_name, cluster_name = cluster_name, user_name = user_name,
    files = kc.files, tls = tls, auth = auth,
    compressed = not truthy(cluster["disable-compression"]),
  }
end

--- The connection config of a pod's service account, as
-- rest.InClusterConfig builds it. opts: root (the folder holding token,
-- ca.crt and namespace; default /var/run/secrets/kubernetes.io/serviceaccount),
-- host and port (default $KUBERNETES_SERVICE_HOST/PORT), namespace.
function M.in_cluster(opts, getenv)
  opts = opts or {}
  getenv = getenv or os.getenv
  local root = opts.root or SA_ROOT
  local host = opts.host or getenv("KUBERNETES_SERVICE_HOST")
  local port = opts.port or getenv("KUBERNETES_SERVICE_PORT")
  if not host or host == "" or not port or port == "" then
    cfg_error("in_cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set; "
      .. "is kbrun running inside a pod?")
  end
  local token = fs.join(root, "token")
  if fs.exists(token) ~= "file" then
    cfg_error("in_cluster: no service account token at '%s' (automountServiceAccountToken "
      .. "disabled?)", token)
  end
  local ca = fs.join(root, "ca.crt")
  local tls = {}
  if fs.exists(ca) == "file" then tls.ca_file = ca end
  local ns = opts.namespace
  local ns_file = fs.join(root, "namespace")
  if not ns and fs.exists(ns_file) == "file" then
    ns = fs.read(ns_file):match("^%s*(.-)%s*$")
    if ns == "" then ns = nil end
  end
  host = tostring(host)
  local authority = host:find(":", 1, true) and ("[" .. host .. "]") or host
  local scheme, name, server = u.parse_server("https://" .. authority .. ":" .. tostring(port),
    "in_cluster")
  return {
    server = server, scheme = scheme, host = name, namespace = ns or "default",
    context = "in-cluster", files = {}, tls = tls,
    auth = { kind = "token_file", path = token }, compressed = true,
  }
end

return M
