--- kb.kubebench.client: the few Kubernetes calls an experiment needs.
--
--   local client = require "kb.kubebench.client"
--   local c = client.new { host = "sim", namespace = "default" }
--   c:create(obj)                                   --> the created object
--   c:get("TFJob", name [, {namespace =}])          --> object, or nil (404)
--   c:list("Pod", {label_selector = "a=b"})         --> list of objects
--   c:delete("TFJob", name, {propagation_policy = "Background"}) --> true, or false (404)
--   c:logs(pod, {container =})                      --> text
--
-- This is the seam to kb.k8s: client.new wraps kb.k8s.client (server = the
-- URL kb.target resolves, or kubeconfig = a file for a real cluster) and
-- only turns its answers into the shapes above (nil / false on 404, the
-- items of a list). Should kb.k8s fail to load, a minimal plain-HTTP
-- adapter (no auth: the embedded simulator or `kubectl proxy`) does the
-- same calls; its failures raise kb errors of class "k8s" with `status`.
local kb = require "kb"
local json = require "kb.json"

local M = {}

local format = string.format

local Error = { __name = "kb.error" }
Error.__index = Error
Error.__tostring = function(e) return e.class .. ": " .. e.message end

--- kind -> {group/version path prefix, plural}; apiVersion in the object
-- overrides the default version.
M.RESOURCES = {
  Pod = { "api/v1", "pods" },
  Job = { "apis/batch/v1", "jobs" },
  TFJob = { "apis/kubeflow.org/v1", "tfjobs" },
  PyTorchJob = { "apis/kubeflow.org/v1", "pytorchjobs" },
  MPIJob = { "apis/kubeflow.org/v1", "mpijobs" },
  Workflow = { "apis/argoproj.io/v1alpha1", "workflows" },
}

local Client = {}
Client.__index = Client

local function resource(kind, api_version)
  local r = M.RESOURCES[kind]
  if not r then error(format("kb.kubebench.client: unknown kind '%s'", tostring(kind)), 3) end
  local prefix = r[1]
  if api_version and api_version ~= "" then
    prefix = api_version:find("/", 1, true) and ("apis/" .. api_version) or ("api/" .. api_version)
  end
  return prefix, r[2]
end

function Client:url(kind, name, opts)
  opts = opts or {}
  local prefix, plural = resource(kind, opts.api_version)
  local ns = opts.namespace or self.namespace
  local u = format("%s/%s/namespaces/%s/%s", self.base, prefix, ns, plural)
  if name then u = u .. "/" .. name end
  return u
end

local function raise(method, url, res)
  local msg = res.body
  local ok, st = pcall(json.decode, res.body)
  if ok and type(st) == "table" and st.message then
    msg = format("%s%s", st.reason and (st.reason .. ": ") or "", st.message)
  end
  error(setmetatable({ class = "k8s", status = res.status, url = url,
    message = format("%s %s: %d %s", method, url, res.status, msg) }, Error), 0)
end

function Client:call(method, url, body, query)
  local res = self.http.request {
    method = method, url = url, query = query,
    headers = body and { ["content-type"] = "application/json" } or nil,
    body = body and json.encode(body) or nil,
    timeout = self.timeout,
  }
  return res
end

function Client:create(obj)
  local meta = obj.metadata or {}
  local url = self:url(obj.kind, nil, { namespace = meta.namespace, api_version = obj.apiVersion })
  local res = self:call("POST", url, obj)
  if res.status >= 300 then raise("POST", url, res) end
  return json.decode(res.body)
end

function Client:get(kind, name, opts)
  local url = self:url(kind, name, opts)
  local res = self:call("GET", url)
  if res.status == 404 then return nil end
  if res.status >= 300 then raise("GET", url, res) end
  return json.decode(res.body)
end

function Client:list(kind, opts)
  opts = opts or {}
  local url = self:url(kind, nil, opts)
  local res = self:call("GET", url, nil, opts.label_selector and { labelSelector = opts.label_selector } or nil)
  if res.status >= 300 then raise("GET", url, res) end
  return json.decode(res.body).items or {}
end

function Client:delete(kind, name, opts)
  opts = opts or {}
  local url = self:url(kind, name, opts)
  local body = { kind = "DeleteOptions", apiVersion = "v1",
                 propagationPolicy = opts.propagation_policy or "Background" }
  local res = self:call("DELETE", url, body)
  if res.status == 404 then return false end
  if res.status >= 300 then raise("DELETE", url, res) end
  return true
end

function Client:logs(pod, opts)
  opts = opts or {}
  local url = self:url("Pod", pod, opts) .. "/log"
  local res = self:call("GET", url, nil, opts.container and { container = opts.container } or nil)
  if res.status >= 300 then raise("GET", url, res) end
  return res.body
end

-- ---- kb.k8s ---------------------------------------------------------------------

local K8s = {}
K8s.__index = K8s

function K8s:create(obj) return self.c:create(obj) end

function K8s:get(kind, name, opts)
  local ok, v = pcall(self.c.get, self.c, kind, name, { namespace = opts and opts.namespace })
  if ok then return v end
  if type(v) == "table" and v.class == "not_found" then return nil end
  error(v, 0)
end

function K8s:list(kind, opts)
  opts = opts or {}
  return self.c:list(kind, { namespace = opts.namespace, label_selector = opts.label_selector }).items
end

function K8s:delete(kind, name, opts)
  opts = opts or {}
  return self.c:delete(kind, name, { namespace = opts.namespace, ignore_not_found = true,
    propagation_policy = opts.propagation_policy or "Background" }) ~= nil
end

function K8s:logs(pod, opts)
  opts = opts or {}
  return self.c:logs(pod, { namespace = opts.namespace, container = opts.container })
end

--- A client. opts: client (use this one as is), kubeconfig (a file: a
-- real cluster), host (kb.target: "sim"/"" = the embedded simulator, else
-- the API server's URL), url (a base URL), namespace ("default"), timeout
-- (seconds per request), connection (a scenario's kb.connection parameters:
-- context, token_file, TLS options; kubeconfig when opts has none).
function M.new(opts)
  opts = opts or {}
  if opts.client then return opts.client end
  local ns = opts.namespace or "default"
  local cp = opts.connection -- the scenario's kb.connection parameters
  local kubeconfig = opts.kubeconfig or (cp and cp.kubeconfig ~= "" and cp.kubeconfig) or nil
  local base = not kubeconfig and (opts.url or require("kb.target").resolve(opts.host)) or nil
  local ok, k8s = pcall(require, "kb.k8s")
  if ok and type(k8s) == "table" and k8s.client then
    local o = { kubeconfig = kubeconfig, server = base, namespace = ns, timeout = opts.timeout }
    if cp then
      local co = require("kb.connection").k8s_options(cp, base)
      o.context, o.token_file, o.tls = co.context, co.token_file, co.tls
      o.allow_insecure_credentials = co.allow_insecure_credentials
      o.timeout = o.timeout or co.timeout
    end
    return setmetatable({ c = k8s.client(o) }, K8s)
  end
  if not base then error("kb.kubebench.client: kubeconfig needs kb.k8s, which did not load: " .. tostring(k8s), 2) end
  return setmetatable({ base = (base:gsub("/+$", "")), namespace = ns, http = kb.http,
    timeout = opts.timeout or 60 }, Client)
end

--- The plain-HTTP adapter, whatever kb.k8s does (tests).
function M.plain(opts)
  opts = opts or {}
  local base = opts.url or require("kb.target").resolve(opts.host)
  return setmetatable({ base = (base:gsub("/+$", "")), namespace = opts.namespace or "default",
    http = kb.http, timeout = opts.timeout or 60 }, Client)
end

return M
