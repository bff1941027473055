--- kb.connection: the connection parameters every bundled scenario that
-- talks to a server takes (one definition, docs/security.md "Connection
-- parameters"), and what turns them into client options.
--
--   local connection = require "kb.connection"
--   params = connection.params { host = "", request_timeout = 30 }   -- a scenario's declarations
--   local o = connection.kfp_options(p)   -- options for kb.kfp.client (host= resolved)
--   local t = connection.http_options(p)  -- kb.http TLS / proxy options
--   k8s.client(connection.k8s_options(p, server)); argo.client(connection.argo_options(p, host))
--   kb.http.get(url, connection.request_options(p))  -- plain HTTP (http_storm)
--   result.connection = connection.describe(p, url)  -- what result.json records
--   journal target: connection.reach(p)              -- what kbrun report reuses
-- Bad values are usage errors (kb.params.refuse: one message, exit 2).
--
-- The parameters (all strings unless said; "" = not given):
--   ca_file          PEM bundle of the CAs that sign the server's certificate;
--                    default $SSL_CERT_FILE, else $CURL_CA_BUNDLE, else the system's
--   client_cert, client_key   PEM client certificate and key (mutual TLS)
--   insecure         true: no certificate verification (warned on stderr,
--                    recorded in result.json's result.connection)
--   token_file       a file holding a bearer token, re-read when it changes
--   cookie_file      a file holding the session cookie (authservice_session,
--                    oauth2-proxy's _oauth2_proxy): "name=value" lines or a
--                    Netscape cookies.txt (curl -c, browser exports); re-read when it changes
--   header           extra request headers, "Name: value", several separated
--                    by newlines (e.g. "kubeflow-userid: alice"); declared
--                    secret: its value is never written
--   request_timeout  seconds per request (scenario clock)
--   proxy            a proxy URL (http://, https://, socks5://); "" keeps the
--                    *_proxy environment variables
--   namespace        multi-user KFP: the profile namespace
--   insecure_credentials   true: allow token/cookie over plain http:// to a
--                    remote host (a trusted network, e.g. inside the cluster)
--   kubeconfig, context    reach KFP through the Kubernetes API server's
--                    service proxy, with the kubeconfig's credentials
--   kfp_service_namespace, kfp_service   where KFP runs (kubeflow, ml-pipeline:8888)
-- Every credential read from these is registered with kb.secrets before it
-- is sent, so it is scrubbed from everything written.
local fs = require "kb.fs"
local secrets = require "kb.secrets"

local M = {}

--- The declarations (name -> default) of the connection parameters.
M.DEFAULTS = {
  ca_file = "",
  client_cert = "",
  client_key = "",
  insecure = false,
  token_file = "",
  cookie_file = "",
  header = { default = "", secret = true },
  request_timeout = 30,
  proxy = "",
  namespace = "",
  insecure_credentials = false,
  kubeconfig = "",
  context = "",
  kfp_service_namespace = "kubeflow",
  kfp_service = "ml-pipeline:8888",
}

--- connection.params(declared) -> the connection parameters' declarations
-- with the scenario's own (declared, which win) merged in: use as a
-- scenario's `params`. Every scenario takes all of them, so the same
-- names mean the same thing everywhere.
function M.params(declared)
  local out = {}
  for k, v in pairs(M.DEFAULTS) do
    if type(v) == "table" then
      local copy = {}
      for kk, vv in pairs(v) do copy[kk] = vv end
      v = copy
    end
    out[k] = v
  end
  for k, v in pairs(declared or {}) do out[k] = v end
  return out
end

--- connection.protect(p): marks the parameters declared secret (header)
-- of a copy of the parameters, so that writers of that copy (a storm's
-- journal) redact them as kb.params does for the runner's table.
function M.protect(p)
  local names = {}
  for k, v in pairs(M.DEFAULTS) do
    if type(v) == "table" and v.secret and type(p[k]) == "string" and p[k] ~= "" then names[#names + 1] = k end
  end
  if #names > 0 then secrets.protect(p, names) end
  return p
end

local function refuse(fmt, ...)
  require("kb.params").refuse(fmt, ...)
end

local function given(v) return type(v) == "string" and v ~= "" end

local function need_file(p, name)
  local v = p[name]
  if not given(v) then return nil end
  local kind = fs.exists(v)
  if kind ~= "file" then
    refuse("%s='%s' %s (give the path of a PEM file)", name, v,
      kind and "is not a file" or "does not exist")
  end
  return v
end

--- How the CA variables are read (tests replace it).
M.getenv = os.getenv

--- The CA bundle to verify servers with: ca_file=, else $SSL_CERT_FILE,
-- else $CURL_CA_BUNDLE (nil: the system's), and where it came from
-- ("ca_file" or the variable's name). getenv for tests.
function M.ca_file(p, getenv)
  getenv = getenv or M.getenv
  if given(p.ca_file) then return need_file(p, "ca_file"), "ca_file" end
  for _, var in ipairs({ "SSL_CERT_FILE", "CURL_CA_BUNDLE" }) do
    local v = getenv(var)
    if v and v ~= "" then
      if fs.exists(v) ~= "file" then
        refuse("$%s='%s' is not a file: point it at a PEM CA bundle, unset it, or give ca_file=", var, v)
      end
      return v, var
    end
  end
  return nil
end

local function flag(p, name)
  local v = p[name]
  if v == nil or v == false or v == "false" or v == "" then return false end
  if v == true or v == "true" then return true end
  refuse("%s must be true or false, got %s", name, tostring(v))
end

--- connection.http_options(p [, getenv]) -> the kb.http transport options
-- of the parameters: ca_file, cert_file, key_file, insecure, proxy.
-- getenv = false leaves the CA variables out (a kubeconfig's CA comes first).
function M.http_options(p, getenv)
  local o = {}
  if getenv == false then
    o.ca_file = need_file(p, "ca_file")
  else
    o.ca_file = M.ca_file(p, getenv)
  end
  o.cert_file, o.key_file = need_file(p, "client_cert"), need_file(p, "client_key")
  if (o.cert_file ~= nil) ~= (o.key_file ~= nil) then
    refuse("give client_cert= and client_key= together (a client certificate needs its key)")
  end
  if flag(p, "insecure") then
    if given(p.ca_file) then
      refuse("insecure=true and ca_file= are both set; remove one of them")
    end
    o.insecure, o.ca_file = true, nil
  end
  if given(p.proxy) then
    local scheme = p.proxy:match("^(%a[%w+.-]*)://")
    if scheme ~= "http" and scheme ~= "https" and scheme ~= "socks5" and scheme ~= "socks5h" then
      refuse("proxy= must be an http://, https:// or socks5:// URL")
    end
    o.proxy = p.proxy
  end
  return o
end

--- connection.headers(p) -> {name = value} of header= ("Name: value"
-- lines). Values of credential headers are registered with kb.secrets.
function M.headers(p)
  local h = {}
  if not given(p.header) then return h end
  for line in (p.header .. "\n"):gmatch("([^\r\n]*)\r?\n") do
    if line:find("%S") then
      local name, value = line:match("^%s*([%w!#$%%&'*+.^_`|~-]+)%s*:%s*(.-)%s*$")
      if not name then
        refuse("header= takes 'Name: value' (several separated by newlines), e.g. "
          .. "header='kubeflow-userid: alice'; one line is not of that form")
      end
      h[name] = value
      if secrets.credential_header(name) then secrets.register(value) end
    end
  end
  return h
end

local function has_header(h, name)
  for k in pairs(h) do if k:lower() == name then return true end end
  return false
end

--- connection.kubeconfig_target(p) -> url, cfg: the KFP API through the
-- Kubernetes API server's service proxy of the kubeconfig's context
-- (<server>/api/v1/namespaces/<kfp_service_namespace>/services/<kfp_service>/proxy),
-- cfg as kb.k8s.kubeconfig.load returns it. nil without kubeconfig=.
function M.kubeconfig_target(p)
  if not given(p.kubeconfig) then return nil end
  local ok, cfg = pcall(require("kb.k8s.kubeconfig").load,
    { kubeconfig = p.kubeconfig, context = given(p.context) and p.context or nil })
  if not ok then
    refuse("kubeconfig='%s': %s", p.kubeconfig, type(cfg) == "table" and (cfg.message or tostring(cfg)) or tostring(cfg))
  end
  local ns, svc = p.kfp_service_namespace or "kubeflow", p.kfp_service or "ml-pipeline:8888"
  if not given(ns) or ns:find("[/?#%s]") then refuse("kfp_service_namespace must be a namespace name") end
  if not given(svc) or svc:find("[/?#%s]") then
    refuse("kfp_service must be a service name with an optional port, e.g. ml-pipeline:8888")
  end
  return string.format("%s/api/v1/namespaces/%s/services/%s/proxy", cfg.server:gsub("/+$", ""), ns, svc), cfg
end

--- connection.kfp_options(p [, url]) -> options for kb.kfp.client: host
-- (url, or the kubeconfig's service proxy), namespace, token_file,
-- cookie_file, headers, timeout, tls (kb.http options), auth (a kb.k8s.auth
-- provider of the kubeconfig's user) and allow_insecure_credentials.
-- A scenario adds its own (api, metrics_prefix, retry, http).
function M.kfp_options(p, url)
  local o = { host = url, timeout = p.request_timeout }
  local kurl, cfg = M.kubeconfig_target(p)
  local tls = M.http_options(p, not kurl and M.getenv or false)
  if kurl then
    o.host = kurl
    -- the kubeconfig's cluster TLS, unless a parameter says otherwise
    local ca_given, cert_given = tls.ca_file ~= nil, tls.cert_file ~= nil
    for k, v in pairs(cfg.tls or {}) do
      local ca_key = k == "ca_file" or k == "ca_pem" or k == "insecure"
      local cert_key = k == "cert_file" or k == "cert_pem" or k == "key_file" or k == "key_pem"
      if tls[k] == nil and not (ca_given and ca_key) and not (cert_given and cert_key) then tls[k] = v end
    end
    if tls.insecure then
      tls.ca_file, tls.ca_pem = nil, nil
    elseif not tls.ca_file and not tls.ca_pem then
      tls.ca_file = M.ca_file(p) -- no CA in either: $SSL_CERT_FILE / $CURL_CA_BUNDLE
    end
    if cfg.auth and not given(p.token_file) then
      o.auth = require("kb.k8s.auth").new(cfg.auth)
    end
  end
  if given(p.namespace) then o.namespace = p.namespace end
  if given(p.token_file) then o.token_file = p.token_file end
  if given(p.cookie_file) then o.cookie_file = p.cookie_file end
  local h = M.headers(p)
  if next(h) then
    if o.token_file and has_header(h, "authorization") then
      refuse("give token_file= or an Authorization header in header=, not both")
    end
    o.headers = h
  end
  if next(tls) then o.tls = tls end
  if flag(p, "insecure_credentials") then o.allow_insecure_credentials = true end
  return o
end

-- cookie_file and header are Kubeflow's gateway credentials: a client of
-- the Kubernetes API (or argo-server) refuses them instead of dropping them.
local function gateway_only(p, client)
  for _, name in ipairs({ "cookie_file", "header" }) do
    if given(p[name]) then
      refuse("%s= is for KFP behind the Kubeflow gateway; the %s client takes kubeconfig= "
        .. "(or token_file=) for its credentials", name, client)
    end
  end
end

--- connection.k8s_options(p [, server]) -> options for kb.k8s.client:
-- kubeconfig and context (when kubeconfig= is given), else server (the
-- URL), namespace, token_file, tls (the TLS parameters over the
-- kubeconfig's), timeout, allow_insecure_credentials.
function M.k8s_options(p, server)
  gateway_only(p, "Kubernetes")
  local o = { timeout = p.request_timeout }
  if given(p.kubeconfig) then
    o.kubeconfig, o.context = p.kubeconfig, given(p.context) and p.context or nil
  else
    o.server = server
  end
  if given(p.namespace) then o.namespace = p.namespace end
  if given(p.token_file) then o.token_file = p.token_file end
  -- a kubeconfig's certificate-authority comes before the CA variables
  local tls = M.http_options(p, not given(p.kubeconfig) and M.getenv or false)
  if next(tls) then o.tls = tls end
  if flag(p, "insecure_credentials") then o.allow_insecure_credentials = true end
  return o
end

--- connection.argo_options(p, host) -> options for kb.argo.client: host,
-- namespace, token_file, tls, timeout, allow_insecure_credentials.
function M.argo_options(p, host)
  gateway_only(p, "argo-server")
  local o = { host = host, timeout = p.request_timeout }
  if given(p.namespace) then o.namespace = p.namespace end
  if given(p.token_file) then o.token_file = p.token_file end
  local tls = M.http_options(p)
  if next(tls) then o.tls = tls end
  if flag(p, "insecure_credentials") then o.allow_insecure_credentials = true end
  return o
end

--- connection.request_options(p) -> options for kb.http.get/request of a
-- plain HTTP scenario (http_storm): timeout, the TLS and proxy options, and
-- headers (header=, token_file's bearer token and cookie_file's cookie,
-- read once here; every credential registered with kb.secrets).
function M.request_options(p)
  if given(p.kubeconfig) then
    refuse("kubeconfig= is for the KFP, Kubernetes and Argo scenarios; give url= (and token_file=, "
      .. "cookie_file=, header= for credentials)")
  end
  local o = M.http_options(p)
  o.timeout = p.request_timeout
  local h = M.headers(p)
  local function fail(fmt, ...) refuse(fmt, ...) end
  if given(p.token_file) then
    if has_header(h, "authorization") then
      refuse("give token_file= or an Authorization header in header=, not both")
    end
    local token = secrets.read_token(p.token_file, fail)
    secrets.register(token)
    h.Authorization = "Bearer " .. token
  end
  if given(p.cookie_file) then
    h.Cookie = require("kb.kfp").read_cookie_file(p.cookie_file, fail)
  end
  if next(h) then o.headers = h end
  return o
end

-- The parameters a later process may use to reach the same server again
-- (kbrun report's reconcile): paths and flags only, never header= nor a proxy's userinfo.
local REACH = { "ca_file", "client_cert", "client_key", "insecure", "token_file", "cookie_file",
  "namespace", "insecure_credentials", "kubeconfig", "context", "kfp_service_namespace", "kfp_service",
  "request_timeout" }

--- connection.reach(p) -> the connection parameters worth journaling to
-- reach the server again (connection.kfp_options takes them back): paths
-- and flags, never a secret (header= is left out: a reconcile without it
-- may be refused by a multi-user KFP and says so).
function M.reach(p)
  local out = {}
  for _, k in ipairs(REACH) do
    local v = p[k]
    if v ~= nil and v ~= "" and v ~= false then out[k] = v end
  end
  if given(p.proxy) and not p.proxy:find("@", 1, true) then out.proxy = p.proxy end
  return out
end

--- connection.describe(p [, url]) -> what result.json records of the
-- connection (never a secret): url, tls ("verified", "insecure", or
-- "none" for http://), ca_file and where it came from, client_cert,
-- token_file, cookie_file, the header names, proxy (scrubbed), kubeconfig,
-- context, namespace.
function M.describe(p, url)
  local d = {}
  local ok, ca, from = pcall(M.ca_file, p)
  if ok and ca then d.ca_file, d.ca_from = ca, from end
  if flag(p, "insecure") then d.insecure = true end
  if url then
    d.url = secrets.scrub(url)
    d.tls = url:match("^https://") and (d.insecure and "insecure" or "verified") or "none"
  end
  if given(p.client_cert) then d.client_cert = p.client_cert end
  if given(p.token_file) then d.token_file = p.token_file end
  if given(p.cookie_file) then d.cookie_file = p.cookie_file end
  if given(p.header) then
    local names = {}
    local okh, h = pcall(M.headers, p)
    if okh then for k in pairs(h) do names[#names + 1] = k end end
    table.sort(names)
    d.headers = names
  end
  if given(p.proxy) then d.proxy = secrets.scrub(p.proxy) end
  if given(p.kubeconfig) then
    d.kubeconfig = p.kubeconfig
    d.context = given(p.context) and p.context or nil
    d.kfp_service = string.format("%s/%s", p.kfp_service_namespace or "kubeflow", p.kfp_service or "ml-pipeline:8888")
  end
  if given(p.namespace) then d.namespace = p.namespace end
  return d
end

return M
