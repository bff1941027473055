--- kb.k8s: a Kubernetes API client for scenarios.
--
--   local k8s = require "kb.k8s"
--   local c = k8s.client{ kubeconfig = path, context = "kind-kind", namespace = "bench" }
--   local job = c:create(kb.yaml.decode(text))
--   local pods = c:list("pods", { label_selector = { ["job-name"] = job.metadata.name } })
--   local w = c:watch("Job", { field_selector = "metadata.name=" .. job.metadata.name })
--   for ev in w:events() do if ev.object.status.succeeded == 1 then break end end
--   w:stop()
--   print(c:logs(pods.items[1], { container = "main" }))
--
-- Why Lua (as kb.kfp): HTTP, JSON and histograms are C; what is left is
-- REST glue that reads best in Lua. Every method suspends the calling task
-- only.
--
-- Where the client connects and with which credentials comes from
-- kb.k8s.kubeconfig (kubeconfig files as kubectl reads them, or the pod's
-- service account with in_cluster = true); credentials come from
-- kb.k8s.auth (token, token file, basic, exec plugins; client certificates
-- are TLS options). Credentials go only over TLS or to a loopback host:
-- a plain http:// server elsewhere raises class "security" unless
-- allow_insecure_credentials = true.
--
-- Any resource type works: kinds are resolved with the server's discovery
-- documents (kb.k8s.discovery, cached per client). A kind is "Pod", "pods",
-- "pod", "po", "deployments.apps", "jobs.v1.batch", "TFJob", or a table
-- {group, version, resource}.
--
-- Metrics: every successful call records its latency (kb.http's total
-- time, JSON decoding excluded; against the embedded simulator only the
-- modelled server time is scaled to virtual time) in the histogram
-- `k8s.<verb>.<resource>` (k8s.create.pods, k8s.list.jobs, k8s.get.workflows,
-- k8s.logs.pods, k8s.discovery); every answer counts in
-- k8s.requests{verb, resource, status}, every call that fails in the end
-- in k8s.errors{verb, resource, class}.
--
-- Transient failures (connection refused or reset, timeouts, 429, 502,
-- 503, 504) are retried by the client's kb.retry policy (retry = false
-- turns it off; a 401 with rotating credentials is re-sent once anyway):
-- `k8s.<verb>.<resource>` is then the logical call, every attempt and
-- every delay, and `<that>.attempt` each attempt; k8s.retries{op, reason},
-- k8s.retry_budget_exhausted{op} and k8s.recovered{op} count what the
-- policy did. A create is not re-sent blindly: after a failure that may
-- have created the object it is looked up first (by name, or by the label
-- kbrun.io/create-id that a generateName object gets) and returned when it
-- exists. Watches resume themselves (kb.k8s.watch) and are not retried here.
--
-- Failures raise kb error objects: HTTP error statuses as class
-- bad_request (400), auth (401 and 403, as in kb.kfp and kb.argo; never
-- retried; the hint names the kubeconfig user, its credentials and what to
-- check: expiry for 401, RBAC with `kubectl auth can-i` for 403),
-- not_found (404), conflict (409; .reason tells AlreadyExists from
-- Conflict), gone (410), invalid (422, .causes), throttled (429), server
-- (5xx) or http, with status, reason, verb, resource, method, url,
-- server_message, hint and retry_after (the Retry-After of a 429 or 503,
-- kb.retry.retry_after); transport errors of kb.http keep their class
-- (connect, timeout, tls, dns, reset, ...) and gain verb, resource and a
-- hint. Tokens never appear in errors, logs or the client's fields: every
-- credential is registered with kb.secrets, which scrubs it (and its
-- base64) from what a server echoes. docs/k8s.md is the reference.
local kb = require "kb"
local http = require "kb.http"
local json = require "kb.json"
local yaml = require "kb.yaml"
local metrics = require "kb.metrics"
local u = require "kb.k8s.util"
local kubeconfig = require "kb.k8s.kubeconfig"
local auth = require "kb.k8s.auth"
local discovery = require "kb.k8s.discovery"
local request = require "kb.k8s.request"
local retry = require "kb.retry"

local M = {}

M.kubeconfig = kubeconfig

-- Per-client private state (credentials, TLS material, discovery cache),
-- kept out of the client's fields so printing or encoding a client never
-- shows a secret.
local private = setmetatable({}, { __mode = "k" })

local Client = {}
Client.__index = Client
Client.__name = "kb.k8s.client"
M.Client = Client

function Client:__tostring()
  return string.format("kb.k8s.client %s (context %s, namespace %s)", self.server,
    tostring(self.context), self.namespace)
end

local OPTIONS = {
  kubeconfig = true, context = true, namespace = true, in_cluster = true, server = true,
  token = true, token_file = true, tls = true, timeout = true, watch_window = true, http = true,
  allow_insecure_credentials = true, exec_timeout = true, compressed = true, http2 = true,
  user_agent = true, retry = true,
}

local function usage(fmt, ...)
  error("kb.k8s.client: " .. string.format(fmt, ...), 3)
end

-- Watch requests are streamed (events arrive as they happen), so the
-- window only sets how often a watch reconnects: 5 minutes, client-go's
-- shortest (its reflectors pick 5-10 minutes). Against the simulator at
-- x600 that is half a real second per request.
local WATCH_WINDOW = 300

local function positive(v, name)
  if v ~= nil and (type(v) ~= "number" or not (v > 0)) then usage("%s must be a number > 0", name) end
  return v
end

-- The connection config from the options.
local function connection(opts)
  if opts.in_cluster then
    local ic = type(opts.in_cluster) == "table" and opts.in_cluster or {}
    local cfg = kubeconfig.in_cluster({ root = ic.root, host = ic.host, port = ic.port,
      namespace = opts.namespace })
    if opts.server then
      cfg.scheme, cfg.host, cfg.server = u.parse_server(opts.server, "server=")
    end
    return cfg
  end
  if opts.server and not opts.kubeconfig and not opts.context then
    local scheme, host, server = u.parse_server(opts.server, "server=")
    return { server = server, scheme = scheme, host = host, namespace = opts.namespace or "default",
      context = nil, files = {}, tls = {}, auth = nil, compressed = true }
  end
  local cfg = kubeconfig.load({ kubeconfig = opts.kubeconfig, context = opts.context,
    namespace = opts.namespace })
  if opts.server then cfg.scheme, cfg.host, cfg.server = u.parse_server(opts.server, "server=") end
  return cfg
end

--- k8s.client(opts) -> client. opts (all optional): kubeconfig (path, "a:b"
-- or a list), context, namespace, in_cluster (true, or {root=, host=,
-- port=} for tests), server (overrides the URL), token (a bearer token,
-- instead of the kubeconfig user's credentials), token_file (a file holding
-- one, re-read when it changes), tls (kb.http TLS options over the
-- kubeconfig's: ca_file, cert_file, key_file, insecure, proxy, ...;
-- kb.connection.k8s_options makes them), timeout (scenario seconds
-- per request, default 30), watch_window (scenario seconds per watch
-- request, default 300; see c:watch), exec_timeout (real seconds an exec
-- plugin may run, default 60), compressed (ask for gzip; default as the
-- kubeconfig's disable-compression says), http2 (default true over https),
-- user_agent, http (a kb.http.client to use instead of the shared pool),
-- allow_insecure_credentials (false), retry (a kb.retry.policy or a table
-- of its options; default the default policy, false = no retries; docs/k8s.md
-- "Retries").
function M.client(opts)
  opts = opts or {}
  if type(opts) ~= "table" then usage("takes a table of options") end
  for k in pairs(opts) do
    if not OPTIONS[k] then usage("unknown option '%s'", tostring(k)) end
  end
  local timeout = positive(opts.timeout, "timeout") or 30
  local window = positive(opts.watch_window, "watch_window") or WATCH_WINDOW
  positive(opts.exec_timeout, "exec_timeout")
  if opts.namespace ~= nil and (type(opts.namespace) ~= "string" or opts.namespace == "") then
    usage("namespace must be a non-empty string")
  end
  if opts.token ~= nil and (type(opts.token) ~= "string" or opts.token == "" or opts.token:find("%c")) then
    usage("token must be a non-empty one-line string")
  end

  local policy = retry.resolve(opts.retry, "kb.k8s.client")
  local cfg = connection(opts)
  if opts.token then cfg.auth = { kind = "token", token = opts.token } end
  if opts.token_file ~= nil then -- a bearer token file (re-read when it changes), over the user's
    if type(opts.token_file) ~= "string" or opts.token_file == "" then usage("token_file must be a path") end
    if opts.token then usage("give token= or token_file=, not both") end
    cfg.auth = { kind = "token_file", path = opts.token_file }
  end
  if opts.tls ~= nil then -- kb.http TLS options over the kubeconfig's (ca_file, cert_file, insecure, proxy, ...)
    if type(opts.tls) ~= "table" then usage("tls= must be a table of kb.http TLS options") end
    local tls = {}
    for k, v in pairs(cfg.tls) do tls[k] = v end
    for k, v in pairs(opts.tls) do tls[k] = v end
    if opts.tls.ca_file or opts.tls.ca_pem then
      tls.insecure, tls.ca_file, tls.ca_pem = opts.tls.insecure, opts.tls.ca_file, opts.tls.ca_pem
    end
    if opts.tls.insecure then tls.ca_file, tls.ca_pem = nil, nil end
    if opts.tls.cert_file then tls.cert_pem, tls.key_pem = nil, nil end
    if opts.tls.cert_pem then tls.cert_file, tls.key_file = nil, nil end
    cfg.tls = tls
  end
  local provider = auth.new(cfg.auth, { exec_timeout = opts.exec_timeout })
  local has_cert = cfg.tls.cert_file or cfg.tls.cert_pem
  if (provider:has_credentials() or has_cert) and cfg.scheme == "http" and not u.is_loopback(cfg.host)
      and opts.allow_insecure_credentials ~= true then
    -- A token sent in clear text can be replayed by anyone on the path
    -- (client-go sends none over http at all).
    error(u.error("security", string.format("kb.k8s: refusing to send credentials (%s) in clear "
      .. "text over http:// to %s; use https://, or, if the network is trusted, allow it with the "
      .. "scenario parameter insecure_credentials=true (kb.k8s.client option "
      .. "allow_insecure_credentials = true)", cfg.auth and cfg.auth.kind or "client certificate", cfg.host),
      { server = cfg.server }), 2)
  end

  local send, stream = http.request, http.stream
  if opts.http ~= nil then
    local hc = opts.http
    send = function(o) return hc:request(o) end
    stream = hc.stream and function(o) return hc:stream(o) end
      or function(o) return u.body_stream(hc:request(o)) end
  end
  local c = setmetatable({
    server = cfg.server, namespace = cfg.namespace, context = cfg.context,
    user = cfg.user_name, cluster = cfg.cluster_name, files = cfg.files,
    auth_kind = cfg.auth and cfg.auth.kind or (has_cert and "client_certificate") or nil,
    timeout = timeout, watch_window = window, retry = policy,
  }, Client)
  local p = {
    auth = provider, tls = cfg.tls, send = send, stream = stream,
    compressed = opts.compressed == nil and cfg.compressed or opts.compressed == true,
    http2 = cfg.scheme == "https" and opts.http2 ~= false,
    user_agent = opts.user_agent or "kbrun", budget = policy and policy:budget(),
  }
  private[c] = p
  p.discovery = discovery.new(function(path, verb)
    return c:request({ verb = verb, resource = nil, path = path })
  end)
  return c
end

-- ---- requests (one attempt: kb/k8s/request.lua) ------------------------------

local attempt, count_error = request.attempt, request.count_error

local creation_check -- defined with c:create

--- c:request{verb=, resource=, method=, path=, query=, body=, content_type=,
-- raw=, stream=, timeout=, no_histogram=, no_retry=, recover=} -> decoded
-- JSON (or the text with raw = true, or with stream = true the open
-- kb.http stream of a 2xx answer, which the caller reads and closes; its
-- time is the time to the head), response. The call every method uses; path is
-- under the server URL (e.g. "/version", "/api/v1/nodes"); verb and
-- resource name the metrics (k8s.<verb>.<resource>, or k8s.<verb> without
-- a resource). Transient failures are retried by the client's policy
-- (kb.retry) unless no_retry; recover (for a create) returns the object
-- when a failed attempt created it, else nil. The response gains attempts
-- and elapsed (the logical call: every attempt and every delay).
function Client:request(req)
  local p = private[self]
  if not p then error("kb.k8s: call methods on a client: c:request(...)", 2) end
  local verb, resource = req.verb or "request", req.resource
  req.verb = verb
  req.op = "k8s." .. verb .. (resource and ("." .. resource) or "")
  local method = req.method or "GET"
  local url = self.server .. req.path
  local body, ctype = req.body, req.content_type
  if type(body) == "table" then
    body = json.encode(body)
    ctype = ctype or "application/json"
  end
  local spent = 0
  local function once()
    local ok, a, b, t = attempt(self, p, req, method, url, body, ctype)
    spent = spent + t
    return ok, a, b
  end
  local policy = not req.no_retry and self.retry or nil
  local ok, doc, r, info
  if policy then
    ok, doc, r, info = pcall(policy.run, policy, { op = req.op, method = method,
      budget = p.budget, prefix = "k8s.", recover = req.recover }, once)
  else
    ok, doc, r = once()
    info = { attempts = 1, slept = 0 }
  end
  if not ok then
    if u.is_error(doc) and not kb.is_cancelled(doc) then
      count_error(verb, resource, doc.class or "other")
    end
    error(doc, 0)
  end
  local elapsed = spent + info.slept
  if req.stream then -- the stream is a userdata: its fields are its own
    r = { status = r.status, headers = r.headers, attempts = info.attempts, elapsed = elapsed }
  elseif r then
    r.attempts, r.elapsed = info.attempts, elapsed
  else
    r = { recovered = true, attempts = info.attempts, elapsed = elapsed, headers = {} }
  end
  if not req.no_histogram then metrics.histogram(req.op):record(elapsed) end
  return doc, r
end

-- ---- resources and paths ---------------------------------------------------------

--- c:resource(kind) -> the resolved resource {group, version, resource,
-- kind, namespaced, api_version, prefix, verbs}.
function Client:resource(kind)
  return private[self].discovery:resolve(kind)
end

--- c:resource_of(obj) -> the resource of an object's apiVersion and kind.
function Client:resource_of(obj)
  return private[self].discovery:resolve_object(obj)
end

--- Forgets the cached discovery documents (after installing a CRD).
function Client:refresh_discovery()
  private[self].discovery:reset()
end

local function escape(s)
  return (tostring(s):gsub("[^%w%-%._~:]", function(ch) return string.format("%%%02X", ch:byte()) end))
end
M.escape = escape

local function check_opts(opts, allowed, fn)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("kb.k8s: " .. fn .. ": options must be a table", 3) end
  for k in pairs(opts) do
    if not allowed[k] then error(string.format("kb.k8s: %s: unknown option '%s'", fn, tostring(k)), 3) end
  end
  return opts
end

--- The path of a resource collection or object: namespace is ns, or nil
-- for all namespaces / cluster-scoped resources.
function Client:path(res, ns, name, sub)
  local parts = { res.prefix }
  if res.namespaced and ns then parts[#parts + 1] = "/namespaces/" .. escape(ns) end
  parts[#parts + 1] = "/" .. res.resource
  if name then parts[#parts + 1] = "/" .. escape(name) end
  if sub then parts[#parts + 1] = "/" .. sub end
  return table.concat(parts)
end

local function need_name(name, fn)
  if type(name) ~= "string" or name == "" then
    error("kb.k8s: " .. fn .. ": name must be a non-empty string, got " .. tostring(name), 3)
  end
end

local selector = u.selector
M.selector = selector

local function object_ns(c, res, obj, opts)
  if not res.namespaced then return nil end
  local m = obj.metadata
  return opts.namespace or (type(m) == "table" and type(m.namespace) == "string" and m.namespace)
    or c.namespace
end

-- ---- CRUD ----------------------------------------------------------------------------

local WRITE_OPTS = { namespace = true, field_manager = true, dry_run = true }

local function write_query(opts)
  local q = {}
  if opts.field_manager then q.fieldManager = opts.field_manager end
  if opts.dry_run then q.dryRun = "All" end
  return next(q) and q or nil
end

local function check_object(obj, fn)
  if type(obj) ~= "table" then error("kb.k8s: " .. fn .. ": takes an object (a table)", 3) end
end

--- The label kb.k8s puts on an object created with generateName (and no
-- name), so that a create whose answer was lost can be found again.
M.CREATE_ID_LABEL = "kbrun.io/create-id"

local function create_id()
  local chars = {}
  for i = 1, 12 do
    local n = math.random(0, 35)
    chars[i] = n < 10 and string.char(48 + n) or string.char(87 + n)
  end
  return table.concat(chars)
end

-- The object to send and the recover function of its create (kb.retry):
-- a GET by name, or by the create-id label for a generateName object.
creation_check = function(c, res, ns, obj)
  local m = type(obj.metadata) == "table" and obj.metadata or {}
  if type(m.name) == "string" and m.name ~= "" then
    return obj, function()
      local ok, found = pcall(c.request, c, { verb = "check", resource = res.resource,
        path = c:path(res, ns, m.name) })
      if ok then return found end
      if u.is_error(found) and found.class == "not_found" then return nil end
      error(found, 0)
    end
  end
  if type(m.generateName) ~= "string" then return obj, nil end
  local id = create_id()
  local copy, meta, labels = {}, {}, {}
  for k, v in pairs(obj) do copy[k] = v end
  for k, v in pairs(m) do meta[k] = v end
  for k, v in pairs(type(m.labels) == "table" and m.labels or {}) do labels[k] = v end
  labels[M.CREATE_ID_LABEL] = id
  meta.labels, copy.metadata = labels, meta
  return copy, function()
    local list = c:request({ verb = "check", resource = res.resource, path = c:path(res, ns),
      query = { labelSelector = M.CREATE_ID_LABEL .. "=" .. id } })
    local item = type(list.items) == "table" and list.items[1] or nil
    if item then item.apiVersion, item.kind = item.apiVersion or obj.apiVersion, item.kind or obj.kind end
    return item
  end
end

--- c:create(obj [, {namespace=, field_manager=, dry_run=}]) -> the created
-- object. The namespace is opts.namespace, else obj.metadata.namespace,
-- else the client's.
function Client:create(obj, opts)
  check_object(obj, "create")
  opts = check_opts(opts, WRITE_OPTS, "create")
  local res = private[self].discovery:resolve_object(obj)
  local ns = object_ns(self, res, obj, opts)
  local recover
  if self.retry and not opts.dry_run then obj, recover = creation_check(self, res, ns, obj) end
  return (self:request({ verb = "create", resource = res.resource, method = "POST",
    path = self:path(res, ns), query = write_query(opts), body = obj, recover = recover }))
end

--- c:get(kind, name [, {namespace=}]) -> the object.
function Client:get(kind, name, opts)
  need_name(name, "get")
  opts = check_opts(opts, { namespace = true }, "get")
  local res = self:resource(kind)
  return (self:request({ verb = "get", resource = res.resource,
    path = self:path(res, opts.namespace or self.namespace, name) }))
end

local LIST_OPTS = {
  namespace = true, all_namespaces = true, label_selector = true, field_selector = true,
  limit = true, continue = true, resource_version = true, page_size = true, max_pages = true,
}

local function list_query(opts)
  local q = {}
  q.labelSelector = selector(opts.label_selector, "label_selector")
  q.fieldSelector = selector(opts.field_selector, "field_selector")
  if opts.limit ~= nil then
    if math.type(opts.limit) ~= "integer" or opts.limit < 1 then
      error("kb.k8s: list: limit must be a positive integer", 4)
    end
    q.limit = opts.limit
  end
  q.continue = opts.continue
  q.resourceVersion = opts.resource_version
  return q
end

local function list_ns(c, opts)
  if opts.all_namespaces then return nil end
  return opts.namespace or c.namespace
end

--- c:list(kind [, opts]) -> the List object {items, metadata =
-- {resourceVersion, continue, remainingItemCount}}. opts: namespace,
-- all_namespaces, label_selector and field_selector (strings, or tables
-- {key = value}), limit, continue, resource_version.
function Client:list(kind, opts)
  opts = check_opts(opts, LIST_OPTS, "list")
  local res = self:resource(kind)
  local doc = self:request({ verb = "list", resource = res.resource,
    path = self:path(res, list_ns(self, opts)), query = list_query(opts) })
  if type(doc.items) ~= "table" or doc.items == json.null then doc.items = json.array({}) end
  if type(doc.metadata) ~= "table" then doc.metadata = {} end
  return doc
end

--- c:list_all(kind [, opts]) -> one List object with every item, following
-- metadata.continue page by page (page_size items per request, default
-- 500; at most max_pages pages, default 10000). Its resourceVersion is the
-- first page's (the snapshot the pages belong to).
function Client:list_all(kind, opts)
  opts = check_opts(opts, LIST_OPTS, "list_all")
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  local max_pages = o.max_pages or 10000
  o.limit, o.page_size, o.max_pages = o.page_size or o.limit or 500, nil, nil
  local first = self:list(kind, o)
  local items = first.items
  local seen = {}
  for _ = 2, max_pages + 1 do
    local token = first.metadata.continue
    if type(token) ~= "string" or token == "" then
      first.metadata.continue, first.metadata.remainingItemCount = nil, nil
      return first
    end
    if seen[token] then
      u.raise("protocol", string.format("kb.k8s: list_all %s: the server returned the continue "
        .. "token %q twice", tostring(kind), token))
    end
    seen[token] = true
    o.continue = token
    local page = self:list(kind, o)
    for _, x in ipairs(page.items) do items[#items + 1] = x end
    first.metadata.continue = page.metadata.continue
  end
  u.raise("limit", string.format("kb.k8s: list_all %s: more than %d pages (raise max_pages=)",
    tostring(kind), max_pages))
end

--- c:update(obj [, {namespace=, field_manager=, dry_run=}]) -> the stored
-- object (PUT; with metadata.resourceVersion a stale object raises class
-- conflict).
function Client:update(obj, opts)
  check_object(obj, "update")
  opts = check_opts(opts, WRITE_OPTS, "update")
  local res = private[self].discovery:resolve_object(obj)
  local name = type(obj.metadata) == "table" and obj.metadata.name
  need_name(name, "update")
  return (self:request({ verb = "update", resource = res.resource, method = "PUT",
    path = self:path(res, object_ns(self, res, obj, opts), name), query = write_query(opts),
    body = obj }))
end

local PATCH_TYPES = {
  merge = "application/merge-patch+json",
  json = "application/json-patch+json",
  strategic = "application/strategic-merge-patch+json",
  apply = "application/apply-patch+yaml",
}

--- c:patch(kind, name, patch [, opts]) -> the patched object. patch is a
-- table (encoded as JSON) or text; opts: type ("merge", default; "json"
-- (a list of operations), "strategic" (built-in types only), "apply"
-- (server-side apply, needs field_manager)), namespace, field_manager,
-- force (server-side apply), dry_run, subresource ("status").
function Client:patch(kind, name, patch, opts)
  need_name(name, "patch")
  opts = check_opts(opts, { type = true, namespace = true, field_manager = true, force = true,
    dry_run = true, subresource = true }, "patch")
  local ptype = opts.type or "merge"
  local ctype = PATCH_TYPES[ptype]
  if not ctype then
    error("kb.k8s: patch: type must be \"merge\", \"json\", \"strategic\" or \"apply\", got "
      .. tostring(ptype), 2)
  end
  if type(patch) ~= "table" and type(patch) ~= "string" then
    error("kb.k8s: patch: the patch must be a table or a string", 2)
  end
  if ptype == "json" and type(patch) == "table" and next(patch) ~= nil and not u.is_array(patch) then
    error("kb.k8s: patch: a json patch is a list of operations {op=, path=, value=}", 2)
  end
  if ptype == "apply" and not opts.field_manager then
    error("kb.k8s: patch: type \"apply\" needs field_manager=", 2)
  end
  local res = self:resource(kind)
  local q = write_query(opts) or {}
  if opts.force then q.force = "true" end
  return (self:request({ verb = "patch", resource = res.resource, method = "PATCH",
    path = self:path(res, opts.namespace or self.namespace, name, opts.subresource),
    query = next(q) and q or nil, content_type = ctype,
    body = type(patch) == "table" and json.encode(patch) or patch }))
end

local PROPAGATION = { Background = true, Foreground = true, Orphan = true }

--- c:delete(kind, name [, opts]) -> the server's answer (the object, still
-- being deleted, or a Status), or nil when ignore_not_found and it was
-- absent. opts: namespace, propagation_policy ("Background",
-- "Foreground", "Orphan"), grace_period_seconds, ignore_not_found, dry_run.
function Client:delete(kind, name, opts)
  need_name(name, "delete")
  opts = check_opts(opts, { namespace = true, propagation_policy = true,
    grace_period_seconds = true, ignore_not_found = true, dry_run = true }, "delete")
  if opts.propagation_policy ~= nil and not PROPAGATION[opts.propagation_policy] then
    error("kb.k8s: delete: propagation_policy must be \"Background\", \"Foreground\" or "
      .. "\"Orphan\", got " .. tostring(opts.propagation_policy), 2)
  end
  local res = self:resource(kind)
  local body = { kind = "DeleteOptions", apiVersion = "v1",
    propagationPolicy = opts.propagation_policy, gracePeriodSeconds = opts.grace_period_seconds }
  if opts.dry_run then body.dryRun = json.array({ "All" }) end
  local ok, doc = pcall(self.request, self, { verb = "delete", resource = res.resource,
    method = "DELETE", path = self:path(res, opts.namespace or self.namespace, name), body = body })
  if ok then return doc end
  if opts.ignore_not_found and u.is_error(doc) and doc.class == "not_found" then return nil end
  error(doc, 0)
end

-- ---- logs, version ---------------------------------------------------------------

local LOG_OPTS = { namespace = true, container = true, follow = true, tail_lines = true,
  since_seconds = true, timestamps = true, previous = true, timeout = true }

-- The pod's name and namespace (a name or a Pod object).
local function pod_ref(pod, ns)
  if type(pod) == "table" then
    local m = type(pod.metadata) == "table" and pod.metadata or {}
    return m.name, ns or m.namespace
  end
  return pod, ns
end

-- The request of a pod's log (c:logs, c:log_stream), options checked.
local function log_request(c, name, ns, opts)
  local q = { container = opts.container, tailLines = opts.tail_lines,
    sinceSeconds = opts.since_seconds }
  if opts.follow then q.follow = "true" end
  if opts.timestamps then q.timestamps = "true" end
  if opts.previous then q.previous = "true" end
  local res = { prefix = "/api/v1", resource = "pods", namespaced = true }
  return { verb = "logs", resource = "pods", raw = true, accept = "*/*",
    path = c:path(res, ns or c.namespace, name, "log"), query = q,
    timeout = opts.timeout or (opts.follow and 86400 or nil) }
end

--- c:logs(pod [, opts]) -> the log text. pod is a name or a Pod object.
-- opts: namespace, container, follow (the call returns the whole text
-- when the server ends the stream, i.e. when the pod has finished),
-- tail_lines, since_seconds, timestamps, previous, timeout (default the
-- client's, or 24 h with follow).
function Client:logs(pod, opts)
  opts = check_opts(opts, LOG_OPTS, "logs")
  local name, ns = pod_ref(pod, opts.namespace)
  need_name(name, "logs")
  return (self:request(log_request(self, name, ns, opts)))
end

--- c:log_stream(pod [, opts]) -> an open kb.http stream of the pod's log,
-- following it unless opts.follow = false: `for line in s:lines() do`
-- gets each line as the container writes it, nil once the container has
-- ended. Close it (or use <close>) to stop early. opts as c:logs.
function Client:log_stream(pod, opts)
  opts = check_opts(opts, LOG_OPTS, "log_stream")
  local name, ns = pod_ref(pod, opts.namespace)
  need_name(name, "log_stream")
  local o = setmetatable({ follow = opts.follow ~= false }, { __index = opts })
  local req = log_request(self, name, ns, o)
  req.stream, req.no_histogram = true, true
  return (self:request(req))
end

--- c:version() -> the server's /version document {major, minor, gitVersion, ...}.
function Client:version()
  return (self:request({ verb = "get", resource = "version", path = "/version" }))
end

-- ---- watch, apply (kb/k8s/watch.lua, kb/k8s/apply.lua) -----------------------------

--- c:watch(kind [, opts]) -> watcher; see kb.k8s.watch.
function Client:watch(kind, opts)
  return require("kb.k8s.watch").new(self, self:resource(kind), opts)
end

--- c:apply(yaml_text | object | {objects} [, opts]) -> list of
-- {object, action = "created" | "configured" | "unchanged"}; see kb.k8s.apply.
function Client:apply(what, opts)
  return require("kb.k8s.apply").apply(self, what, opts)
end

--- Decodes multi-document YAML into the list of objects it holds
-- (empty documents and List kinds flattened).
function M.objects(text)
  local docs = yaml.decode_all(text)
  local out = {}
  local function add(d)
    if d == nil or d == json.null then return end
    if type(d) ~= "table" then u.raise("yaml", "kb.k8s: a document is not a mapping") end
    if type(d.kind) == "string" and d.kind:match("List$") and type(d.items) == "table" then
      for _, x in ipairs(d.items) do add(x) end
    else
      out[#out + 1] = d
    end
  end
  for _, d in ipairs(docs) do add(d) end
  return out
end

return M
