--- kb.argo: an Argo Workflows client, through argo-server's REST API or
-- through the Kubernetes API (the argoproj.io CRDs, with a kb.k8s client).
--
--   local argo = require "kb.argo"
--   local c = argo.client{ host = "https://argo.example.com:2746", token_file = path }
--   -- or: argo.client{ k8s = require("kb.k8s").client{ kubeconfig = ... } }
--   local wf = c:create(yaml_text)                          -- or a table
--   local run = c:submit{ template = "train", parameters = { lr = "0.1" } }
--   run = c:wait(run.name, { timeout = 3600 })
--   print(run.phase, run.duration, run.done .. "/" .. run.total)
--   print(c:logs(run.name))
--
-- Why Lua (as kb.kfp, kb.k8s): HTTP, JSON and histograms are C; what is
-- left is REST glue. Every method suspends only the calling task.
--
-- Both paths return the same normalised tables (see M.normalise): a
-- workflow is {name, namespace, uid, phase, finished, succeeded, progress,
-- done, total, started_at, finished_at, duration, message, nodes, labels,
-- raw}; times are epoch seconds (nil when unset).
--
-- Metrics: every successful call records kb.http's total time (JSON
-- decoding excluded; against the embedded simulator the modelled server
-- time is virtual) in the histogram argo.<verb> (argo.create, argo.submit,
-- argo.get, argo.list, argo.delete, argo.logs, argo.create_template, ...),
-- each attempt in argo.<verb>.attempt; every answer counts in
-- argo.requests{op, status}, every call that fails in the end in
-- argo.errors{op, class}; watch windows in argo.watch.windows. On the CRD
-- path kb.k8s records its own k8s.* metrics as well.
--
-- Transient failures of argo-server calls are retried by the client's
-- kb.retry policy as in kb.kfp and kb.k8s (retry = false turns it off;
-- retries count in argo.retries{op, reason}, an empty budget in
-- argo.retry_budget_exhausted{op}): GETs and DELETEs on connection
-- refused / reset / timed out and 429, 502, 503, 504, after the server's
-- Retry-After when a 429 or 503 has one; a POST (create, submit) only when
-- the server cannot have acted on it (connection refused, 429). Watches
-- are not retried here: they resume themselves. On the CRD path the kb.k8s
-- client's policy applies.
--
-- Failures raise kb error objects: bad_request (400), auth (401 and 403,
-- as in kb.kfp and kb.k8s; never retried; the hint names the credentials
-- sent and what to check), not_found (404), conflict (409), throttled
-- (429), server (5xx), http (other), with status, op, method, url,
-- server_message, code (argo-server's grpc code), hint, retry_after (the
-- Retry-After of a 429 or 503, kb.retry.retry_after); transport errors
-- keep kb.http's class (connect, timeout, tls, ...) and gain op and a hint.
-- Credentials are sent only over TLS or to a loopback host (class
-- "security" otherwise, unless allow_insecure_credentials = true) and never
-- appear in errors, logs or the client's fields (every one is registered
-- with kb.secrets, which scrubs it and its base64 from what a server
-- echoes). docs/argo.md is the reference.
local kb = require "kb"
local core = require "kb.core"
local http = require "kb.http"
local json = require "kb.json"
local yaml = require "kb.yaml"
local fs = require "kb.fs"
local credentials = require "kb.secrets"
local secret_store = credentials -- setup_server's own `credentials` is a list of names
local metrics = require "kb.metrics"
local log = require "kb.log"
local u = require "kb.k8s.util"
local retry = require "kb.retry"

local C = require "kb.argo.common"
local watch = require "kb.argo.watch"

local GROUP, VERSION, API_VERSION = C.GROUP, C.VERSION, C.API_VERSION
local WORKFLOWS, TEMPLATES = C.WORKFLOWS, C.TEMPLATES
local TEMPLATE_LABEL, WORKFLOW_LABEL = C.TEMPLATE_LABEL, C.WORKFLOW_LABEL
local str, esc, crd_path, check_opts, need_name, object_of =
  C.str, C.esc, C.crd_path, C.check_opts, C.need_name, C.object_of
local normalise_template = C.normalise_template

local M = {}

--- Terminal phases: Succeeded, Failed, Error.
M.TERMINAL = C.TERMINAL

--- argo.normalise(wf) -> the normalised view of a Workflow object (kb.argo.common).
M.normalise = C.normalise

-- ---- the client ------------------------------------------------------------------

-- Per-client secrets, out of the client's fields.
local secrets = setmetatable({}, { __mode = "k" })

local Client = {}
Client.__index = Client
Client.__name = "kb.argo.client"
M.Client = Client

function Client:__tostring()
  return string.format("kb.argo.client %s (%s, namespace %s)", self.url, self.path, self.namespace)
end

local OPTIONS = {
  host = true, k8s = true, namespace = true, token = true, token_file = true, tls = true,
  timeout = true, watch_window = true, headers = true, http = true,
  allow_insecure_credentials = true, retry = true,
}
local TLS_OPTIONS = {
  ca_file = true, ca_pem = true, cert_file = true, cert_pem = true, key_file = true,
  key_pem = true, insecure = true, tls_server_name = true, proxy = true,
}

local function usage(fmt, ...)
  error("kb.argo.client: " .. string.format(fmt, ...), 3)
end

local function auth_error(fmt, ...)
  u.raise("auth", "kb.argo: " .. string.format(fmt, ...))
end

local function read_token(path)
  local token = credentials.read_token(path, auth_error)
  credentials.register(token) -- before it is sent: a server may echo it
  return token
end

-- The request headers, re-reading token_file when its mtime or size changed
-- (projected service account tokens rotate).
local function current_headers(s)
  if s.token_file then
    local fresh = credentials.refresh(s, s.token_file, auth_error)
    if fresh then
      credentials.register(fresh)
      s.token = fresh
    end
  end
  local h = { Accept = "application/json" }
  for k, v in pairs(s.extra) do h[k] = v end
  if s.token then h.Authorization = "Bearer " .. s.token end
  return h
end

-- Text with every credential the process sends replaced (registered with
-- kb.secrets when set).
local function redact(_, text)
  return credentials.scrub(text)
end

local function setup_server(opts, c)
  local host = opts.host
  if host == "sim" then host = require("kb.target").resolve("sim") end
  if type(host) ~= "string" then usage("host= must be argo-server's URL (or \"sim\")") end
  local scheme, name, base = u.parse_server(host, "kb.argo: host=")
  local s = { extra = {}, token_file = opts.token_file }
  local credentials = {}
  if opts.headers ~= nil then
    if type(opts.headers) ~= "table" then usage("headers= must be a table {name = value}") end
    for k, v in pairs(opts.headers) do
      if type(k) ~= "string" then usage("header names must be strings") end
      s.extra[k] = v
      local lk = k:lower()
      if lk == "authorization" or lk == "cookie" then
        credentials[#credentials + 1] = "header " .. k
      end
      -- a bare token a server echoes back must be redacted too
      if secret_store.credential_header(k) then
        secret_store.register(tostring(v))
        s.credential_headers = s.credential_headers or {}
        s.credential_headers[#s.credential_headers + 1] = k
      end
    end
  end
  if opts.token ~= nil then
    if type(opts.token) ~= "string" or opts.token == "" or opts.token:find("%c") then
      usage("token must be a non-empty one-line string")
    end
    if opts.token_file ~= nil then usage("give token= or token_file=, not both") end
    s.token = opts.token
    secret_store.register(opts.token)
    credentials[#credentials + 1] = "token"
  end
  if s.token_file ~= nil then
    if type(s.token_file) ~= "string" or s.token_file == "" then usage("token_file must be a path") end
    credentials[#credentials + 1] = "token_file"
  end
  -- Before any traffic: a bearer token sent in clear text to a remote host
  -- can be replayed by anyone on the path.
  if #credentials > 0 and scheme == "http" and not u.is_loopback(name)
      and opts.allow_insecure_credentials ~= true then
    u.raise("security", string.format("kb.argo: refusing to send credentials (%s) in clear text "
      .. "over http:// to %s; use https:// (argo-server serves TLS by default; ca_file= for a "
      .. "private CA), or, if the network is trusted, allow it with the scenario parameter "
      .. "insecure_credentials=true (kb.argo.client option allow_insecure_credentials = true)",
      table.concat(credentials, ", "), name), { host = base })
  end
  local tls = {}
  if opts.tls ~= nil then
    if type(opts.tls) ~= "table" then usage("tls= must be a table") end
    for k, v in pairs(opts.tls) do
      if not TLS_OPTIONS[k] then usage("unknown tls option '%s'", tostring(k)) end
      tls[k] = v
    end
  end
  if s.token_file then
    s.token = read_token(s.token_file) -- fail now, not at the first request
    local st = fs.stat(s.token_file)
    s.mtime, s.size = st.mtime, st.size
  end
  s.tls = tls
  s.send, s.stream = http.request, http.stream
  if opts.http ~= nil then
    local hc = opts.http
    s.send = function(o) return hc:request(o) end
    s.stream = hc.stream and function(o) return hc:stream(o) end
      or function(o) return u.body_stream(hc:request(o)) end
  end
  c.url, c.path = base, "argo-server"
  return s
end

--- argo.client(opts) -> client. opts: host (argo-server's URL, e.g.
-- "https://127.0.0.1:2746", or "sim" for the embedded simulator) or k8s (a
-- kb.k8s client: the CRD path); namespace (default the k8s client's, else
-- "default"); token, token_file (re-read when it changes), headers, tls
-- {ca_file, ca_pem, cert_file, cert_pem, key_file, key_pem, insecure}, http
-- (a kb.http.client) and allow_insecure_credentials for host=; timeout
-- (scenario seconds per request, default 30), watch_window (seconds per
-- watch request, default 300: events are streamed as they arrive, so the
-- window only sets how often a watch reconnects, as in kb.k8s); retry (a
-- kb.retry.policy or a table of its options, default the default policy,
-- false = no retries; host= only, the CRD path retries with its kb.k8s
-- client's policy).
function M.client(opts)
  if type(opts) ~= "table" then usage("takes a table of options") end
  for k in pairs(opts) do
    if not OPTIONS[k] then usage("unknown option '%s'", tostring(k)) end
  end
  if (opts.host == nil) == (opts.k8s == nil) then
    usage("give host= (argo-server's URL) or k8s= (a kb.k8s client for the CRD path)")
  end
  local timeout = opts.timeout or 30
  if type(timeout) ~= "number" or not (timeout > 0) then usage("timeout must be a number > 0") end
  local window = opts.watch_window or 300
  if type(window) ~= "number" or not (window > 0) then usage("watch_window must be a number > 0") end
  if opts.namespace ~= nil and (type(opts.namespace) ~= "string" or opts.namespace == "") then
    usage("namespace must be a non-empty string")
  end
  local c = setmetatable({ timeout = timeout, watch_window = window }, Client)
  if opts.k8s then
    if getmetatable(opts.k8s) ~= require("kb.k8s").Client then usage("k8s= must be a kb.k8s client") end
    for _, k in ipairs({ "token", "token_file", "tls", "headers", "http", "allow_insecure_credentials",
        "retry" }) do
      if opts[k] ~= nil then usage("%s= is for host=; give credentials to the kb.k8s client", k) end
    end
    c.k8s, c.url, c.path = opts.k8s, opts.k8s.server, "crd"
    c.namespace = opts.namespace or opts.k8s.namespace or "default"
    secrets[c] = {}
  else
    secrets[c] = setup_server(opts, c)
    c.namespace = opts.namespace or "default"
    c.retry = retry.resolve(opts.retry, "kb.argo.client")
    secrets[c].budget = c.retry and c.retry:budget()
  end
  return c
end

-- ---- requests ----------------------------------------------------------------------

-- 401 and 403 are both class auth (as in kb.kfp and kb.k8s: a caller
-- stops on err.class == "auth"; err.status tells them apart).
local CLASS_BY_STATUS = {
  [400] = "bad_request", [401] = "auth", [403] = "auth", [404] = "not_found",
  [409] = "conflict", [429] = "throttled",
}
local HINTS = {
  server = "argo-server or the API server failed; retry later or look at its logs",
  connect = "is argo-server reachable? e.g. kubectl -n argo port-forward svc/argo-server 2746:2746",
  tls = "TLS failed: argo-server serves a self-signed certificate by default: pass "
    .. "tls = {ca_file = ...} (or tls = {insecure = true} for a test)",
}

local function count_error(op, class)
  metrics.counter("argo.errors", { op = op, class = class }):inc()
end


-- The hint of a 401 / 403: what was sent and what to check.
local function auth_hint(s, status, url)
  local source = credentials.describe_credentials(s)
  if status == 401 then
    if not source then
      return "no credentials were sent: argo-server's \"client\" auth mode takes a Kubernetes "
        .. "bearer token (token_file= or token=)"
    end
    return "argo-server rejected " .. source .. ": check that it is current (tokens expire; "
      .. "token_file is re-read when it changes) and a Kubernetes bearer token of this cluster "
      .. "(auth mode \"client\")"
  end
  local ns = url:match("/api/v1/[%w-]+/([^/?]+)")
  return "the token's user lacks RBAC permission on Argo's resources" .. (ns and (" in namespace "
    .. ns) or "") .. ": check its Role/ClusterRole bindings (kubectl auth can-i create "
    .. "workflows.argoproj.io" .. (ns and (" -n " .. ns) or "") .. ")"
end

local function status_error(s, op, method, url, r)
  local status = r.status
  local msg, code
  if type(r.body) == "string" and r.body:match("^%s*{") then
    local ok, d = pcall(json.decode, r.body)
    if ok and type(d) == "table" then msg, code = str(d.message), math.tointeger(d.code) end
  end
  if not msg and type(r.body) == "string" and r.body:find("%S") then
    msg = u.trim(r.body:gsub("<[^>]*>", " "), 300)
  end
  msg = redact(s, msg)
  local class = CLASS_BY_STATUS[status] or (status >= 500 and "server") or "http"
  local hint = HINTS[class]
  if status == 401 or status == 403 then hint = auth_hint(s, status, url) end
  return u.error(class, string.format("%s: %s %s -> HTTP %d%s%s", op, method, url, status,
    msg and (": " .. msg) or "", hint and (" (" .. hint .. ")") or ""), {
    status = status, op = op, method = method, url = url, server_message = msg, code = code,
    hint = hint,
    retry_after = retry.retry_after(status, r.headers),
  })
end

-- One attempt: true, doc (the text with raw, the stream with stream),
-- response, or false, error (as pcall); then the attempt's time. Every
-- answer counts in argo.requests{op, status}; every attempt, failed or
-- not, is recorded in `<op>.attempt` (unless no_histogram).
local function attempt(s, req, o, op, method, url)
  local t0 = kb.now()
  local ok, r = pcall(req.stream and s.stream or s.send, o)
  if ok and req.stream and (r.status < 200 or r.status > 299) then ok, r = pcall(u.read_whole, r) end
  if not ok then
    if u.is_error(r) and not kb.is_cancelled(r) then
      r.op = op
      if HINTS[r.class] then
        r.hint = HINTS[r.class]
        if not tostring(r.message):find(r.hint, 1, true) then
          r.message = tostring(r.message) .. " (" .. r.hint .. ")"
        end
      end
      if not req.no_histogram then metrics.histogram(op .. ".attempt"):record(kb.now() - t0) end
    end
    return false, r, nil, kb.now() - t0
  end
  local elapsed = r.time and r.time.total or (kb.now() - t0)
  if not req.no_histogram then metrics.histogram(op .. ".attempt"):record(elapsed) end
  metrics.counter("argo.requests", { op = op, status = tostring(r.status) }):inc()
  if log.enabled("debug") then
    log.debug("argo %s %s %s -> %d in %.3f s", op, method, url, r.status, elapsed)
  end
  if r.status < 200 or r.status > 299 then
    return false, status_error(s, op, method, url, r), nil, elapsed
  end
  if req.stream then return true, r, r, elapsed end
  if req.raw then return true, r.body, r, elapsed end
  local doc = {}
  if r.body:find("%S") then
    local okd, d = pcall(json.decode, r.body)
    if not okd or type(d) ~= "table" then
      return false, u.error("protocol", string.format("%s: %s %s -> HTTP %d with a body that is "
        .. "not JSON (%s): %s (is host= argo-server's URL?)", op, method, url, r.status,
        tostring(r.headers["content-type"] or "no content type"), u.trim(redact(s, r.body), 120)),
        { status = r.status, op = op, url = url }), nil, elapsed
    end
    doc = d
  end
  return true, doc, r, elapsed
end

--- c:request{op=, method=, path=, query=, body=, raw=, stream=, timeout=,
-- no_histogram=} -> decoded JSON (or the text with raw = true, or with
-- stream = true the open kb.http stream of a 2xx answer, which the caller
-- reads and closes), response.
-- argo-server only: path is under host= ("/api/v1/version"); op names the
-- metrics (argo.<op>). Transient failures are retried by the client's
-- policy (kb.retry; streams are not: watches resume themselves); the
-- response gains attempts and elapsed (the logical call: every attempt and
-- every delay), the error .attempts.
function Client:request(req)
  local s = secrets[self]
  if not s then error("kb.argo: call methods on a client: c:request(...)", 2) end
  if self.k8s then error("kb.argo: request is for argo-server clients (host=)", 2) end
  local op = "argo." .. req.op
  local method = req.method or "GET"
  local url = self.url .. req.path
  local headers = current_headers(s)
  local body = req.body
  if type(body) == "table" then body = json.encode(body) end
  if body then headers["Content-Type"] = "application/json" end
  local o = { method = method, url = url, headers = headers, query = req.query, body = body,
    timeout = req.timeout or self.timeout }
  for k, v in pairs(s.tls) do o[k] = v end
  local spent = 0
  local function once()
    local ok, a, b, t = attempt(s, req, o, op, method, url)
    spent = spent + t
    return ok, a, b
  end
  local policy = not req.stream and self.retry or nil
  local ok, doc, r, info
  if policy then
    ok, doc, r, info = pcall(policy.run, policy, { op = op, method = method, budget = s.budget,
      prefix = "argo." }, once)
  else
    ok, doc, r = once()
    info = { attempts = 1, slept = 0 }
  end
  if not ok then
    if u.is_error(doc) and not kb.is_cancelled(doc) then count_error(op, doc.class or "other") end
    error(doc, 0)
  end
  if req.stream then return doc, doc end -- a userdata: its fields are its own
  local elapsed = spent + info.slept
  r.attempts, r.elapsed = info.attempts, elapsed
  if not req.no_histogram then metrics.histogram(op):record(elapsed) end
  return doc, r
end

-- A kb.k8s request on the CRD path, timed in argo.<op> as well.
local K8S_VERB = { submit = "create", create_template = "create", get_template = "get",
  list_templates = "list", delete_template = "delete" }

local function k8s_call(c, op, req)
  req.verb = K8S_VERB[op] or op
  local ok, doc, r = pcall(c.k8s.request, c.k8s, req)
  if not ok then
    if u.is_error(doc) and not kb.is_cancelled(doc) then count_error("argo." .. op, doc.class or "other") end
    error(doc, 0)
  end
  if not req.no_histogram then
    metrics.histogram("argo." .. op):record(r.time and r.time.total or 0)
  end
  return doc, r
end

-- ---- workflows -------------------------------------------------------------------

--- c:create(workflow | yaml_text [, {namespace, generate_name, dry_run}]) ->
-- the normalised workflow. The namespace is opts.namespace, else the
-- object's, else the client's.
function Client:create(what, opts)
  opts = check_opts(opts, { namespace = true, generate_name = true, dry_run = true }, "create")
  local wf = object_of(what, "Workflow", "create")
  if opts.generate_name then wf.metadata.generateName, wf.metadata.name = opts.generate_name, nil end
  local ns = opts.namespace or str(wf.metadata.namespace) or self.namespace
  wf.metadata.namespace = ns
  if self.k8s then
    return M.normalise((k8s_call(self, "create", { resource = "workflows", method = "POST",
      path = crd_path(WORKFLOWS, ns), body = wf, query = opts.dry_run and { dryRun = "All" } or nil })))
  end
  return M.normalise((self:request({ op = "create", method = "POST",
    path = "/api/v1/workflows/" .. esc(ns),
    body = { namespace = ns, workflow = wf, serverDryRun = opts.dry_run or nil } })))
end

local function pairs_text(t, what)
  if t == nil or type(t) == "string" then return t end
  if type(t) ~= "table" then error("kb.argo: submit: " .. what .. " must be a table or a string", 4) end
  local parts = {}
  for _, k in ipairs(u.sorted_keys(t)) do parts[#parts + 1] = k .. "=" .. tostring(t[k]) end
  return table.concat(parts, ",")
end

-- The Workflow a template submits, as argo-server builds it (the
-- simulator's too): the template's spec inlined (a real controller would
-- resolve a workflowTemplateRef the same way), workflowMetadata as
-- labels/annotations, the workflow-template label, then submitOptions.
local function workflow_from_template(tmpl, name, so)
  local spec = u.deep_copy(type(tmpl.spec) == "table" and tmpl.spec or {})
  local wm = type(spec.workflowMetadata) == "table" and spec.workflowMetadata or {}
  spec.workflowMetadata = nil
  local labels = u.deep_copy(type(wm.labels) == "table" and wm.labels or {})
  local ann = u.deep_copy(type(wm.annotations) == "table" and wm.annotations or {})
  labels[TEMPLATE_LABEL] = name
  for _, pair in ipairs({ { labels, so.labels }, { ann, so.annotations } }) do
    for kv in tostring(pair[2] or ""):gmatch("[^,]+") do
      local k, v = kv:match("^([^=]+)=(.*)$")
      if k then pair[1][k] = v end
    end
  end
  local meta = { labels = labels, annotations = next(ann) and ann or nil }
  if so.name then meta.name = so.name else meta.generateName = so.generateName or (name .. "-") end
  if so.entryPoint then spec.entrypoint = so.entryPoint end
  if so.serviceAccount then spec.serviceAccountName = so.serviceAccount end
  for _, kv in ipairs(so.parameters or {}) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if k then
      spec.arguments = type(spec.arguments) == "table" and spec.arguments or {}
      local params = type(spec.arguments.parameters) == "table" and spec.arguments.parameters or json.array({})
      spec.arguments.parameters = params
      local found
      for _, p in ipairs(params) do
        if p.name == k then p.value, found = v, true end
      end
      if not found then params[#params + 1] = { name = k, value = v } end
    end
  end
  return { apiVersion = API_VERSION, kind = "Workflow", metadata = meta, spec = spec }
end

local SUBMIT_OPTS = { template = true, kind = true, parameters = true, generate_name = true,
  name = true, labels = true, annotations = true, entrypoint = true, service_account = true,
  namespace = true, dry_run = true }

--- c:submit{template = name, kind = "WorkflowTemplate", parameters = {k = v}
-- (or a list of "k=v"), generate_name, name, labels ({k = v} or "a=b,c=d"),
-- annotations, entrypoint, service_account, namespace, dry_run} -> the
-- normalised workflow created from the template. The CRD path builds the
-- Workflow as argo-server does (only WorkflowTemplate there).
function Client:submit(a)
  a = check_opts(a, SUBMIT_OPTS, "submit")
  need_name(a.template, "submit: template")
  local kind = a.kind or "WorkflowTemplate"
  local params
  if a.parameters ~= nil then
    if type(a.parameters) ~= "table" then error("kb.argo: submit: parameters must be a table", 2) end
    params = json.array({})
    if u.is_array(a.parameters) then
      for _, kv in ipairs(a.parameters) do params[#params + 1] = tostring(kv) end
    else
      for _, k in ipairs(u.sorted_keys(a.parameters)) do
        params[#params + 1] = k .. "=" .. tostring(a.parameters[k])
      end
    end
  end
  local so = { generateName = a.generate_name, name = a.name, parameters = params,
    labels = pairs_text(a.labels, "labels"), annotations = pairs_text(a.annotations, "annotations"),
    entryPoint = a.entrypoint, serviceAccount = a.service_account,
    serverDryRun = a.dry_run or nil }
  local ns = a.namespace or self.namespace
  if self.k8s then
    if kind ~= "WorkflowTemplate" then
      error("kb.argo: submit: the CRD path submits kind WorkflowTemplate only, got " .. tostring(kind), 2)
    end
    local tmpl = k8s_call(self, "get_template", { resource = "workflowtemplates",
      path = crd_path(TEMPLATES, ns, a.template), no_histogram = true })
    local wf = workflow_from_template(tmpl, a.template, so)
    return M.normalise((k8s_call(self, "submit", { resource = "workflows", method = "POST",
      path = crd_path(WORKFLOWS, ns), body = wf, query = a.dry_run and { dryRun = "All" } or nil })))
  end
  return M.normalise((self:request({ op = "submit", method = "POST",
    path = "/api/v1/workflows/" .. esc(ns) .. "/submit",
    body = { namespace = ns, resourceKind = kind, resourceName = a.template, submitOptions = so } })))
end

--- c:get(name [, {namespace}]) -> the normalised workflow.
function Client:get(name, opts)
  need_name(name, "get")
  opts = check_opts(opts, { namespace = true }, "get")
  local ns = opts.namespace or self.namespace
  if self.k8s then
    return M.normalise((k8s_call(self, "get", { resource = "workflows", path = crd_path(WORKFLOWS, ns, name) })))
  end
  return M.normalise((self:request({ op = "get",
    path = "/api/v1/workflows/" .. esc(ns) .. "/" .. esc(name) })))
end

local LIST_OPTS = { namespace = true, label_selector = true, field_selector = true, limit = true,
  continue = true }

local function list_items(doc, normalise)
  local items = json.array({})
  for _, x in ipairs(type(doc.items) == "table" and doc.items or {}) do items[#items + 1] = normalise(x) end
  local m = type(doc.metadata) == "table" and doc.metadata or {}
  return { items = items, continue = str(m.continue), resource_version = str(m.resourceVersion), raw = doc }
end

local function list_call(c, res, op, opts, normalise)
  local ns = opts.namespace or c.namespace
  if opts.limit ~= nil and (math.type(opts.limit) ~= "integer" or opts.limit < 1) then
    error("kb.argo: " .. op .. ": limit must be a positive integer", 3)
  end
  local labels = u.selector(opts.label_selector, "label_selector")
  local fields = u.selector(opts.field_selector, "field_selector")
  local doc
  if c.k8s then
    doc = k8s_call(c, op, { resource = res.resource, path = crd_path(res, ns), query = {
      labelSelector = labels, fieldSelector = fields, limit = opts.limit, continue = opts.continue } })
  else
    doc = c:request({ op = op, path = "/api/v1/" .. (res == WORKFLOWS and "workflows/" or "workflow-templates/")
      .. esc(ns), query = { ["listOptions.labelSelector"] = labels, ["listOptions.fieldSelector"] = fields,
      ["listOptions.limit"] = opts.limit, ["listOptions.continue"] = opts.continue } })
  end
  return list_items(doc, normalise)
end

--- c:list{namespace, label_selector, field_selector (strings or {k = v}),
-- limit, continue} -> {items (normalised workflows), continue (the next
-- page's token or nil), resource_version, raw}.
function Client:list(opts)
  opts = check_opts(opts, LIST_OPTS, "list")
  return list_call(self, WORKFLOWS, "list", opts, M.normalise)
end

--- c:delete(name [, {namespace, ignore_not_found}]) -> true, or false when
-- absent with ignore_not_found.
function Client:delete(name, opts)
  need_name(name, "delete")
  opts = check_opts(opts, { namespace = true, ignore_not_found = true }, "delete")
  local ns = opts.namespace or self.namespace
  local ok, err = pcall(function()
    if self.k8s then
      k8s_call(self, "delete", { resource = "workflows", method = "DELETE",
        path = crd_path(WORKFLOWS, ns, name), body = { kind = "DeleteOptions", apiVersion = "v1",
        propagationPolicy = "Background" } })
    else
      self:request({ op = "delete", method = "DELETE",
        path = "/api/v1/workflows/" .. esc(ns) .. "/" .. esc(name) })
    end
  end)
  if ok then return true end
  if opts.ignore_not_found and u.is_error(err) and err.class == "not_found" then return false end
  error(err, 0)
end

--- c:wait(name [, {timeout, interval = 2, namespace}]) -> the normalised
-- workflow once its phase is terminal (Succeeded, Failed, Error: check
-- .succeeded). Polls c:get every interval scenario seconds; raises class
-- "timeout" (with .workflow, the last state seen) after timeout seconds.
function Client:wait(name, opts)
  need_name(name, "wait")
  opts = check_opts(opts, { timeout = true, interval = true, namespace = true }, "wait")
  local interval = opts.interval or 2
  if type(interval) ~= "number" or not (interval > 0) then error("kb.argo: wait: interval must be a number > 0", 2) end
  if opts.timeout ~= nil and (type(opts.timeout) ~= "number" or opts.timeout < 0) then
    error("kb.argo: wait: timeout must be a number >= 0", 2)
  end
  local deadline = opts.timeout and kb.now() + opts.timeout
  while true do
    local wf = self:get(name, { namespace = opts.namespace })
    if wf.finished then return wf end
    local now = kb.now()
    if deadline and now >= deadline then
      u.raise("timeout", string.format("kb.argo: workflow %s not finished after %g s (phase %s, "
        .. "progress %s)", name, opts.timeout, wf.phase ~= "" and wf.phase or "unknown",
        wf.progress or "-"), { workflow = wf, op = "argo.wait" })
    end
    kb.sleep(deadline and math.min(interval, deadline - now) or interval)
  end
end

-- ---- logs ------------------------------------------------------------------------

local function grep_ok(grep, line)
  return not grep or line:find(grep, 1, true) ~= nil
end

local function crd_logs(c, name, ns, opts)
  k8s_call(c, "get", { resource = "workflows", path = crd_path(WORKFLOWS, ns, name), no_histogram = true })
  local t0 = kb.now()
  local pods = c.k8s:list("pods", { namespace = ns, label_selector = { [WORKFLOW_LABEL] = name },
    field_selector = opts.pod and { ["metadata.name"] = opts.pod } or nil })
  local entries = json.array({})
  for _, p in ipairs(pods.items) do
    local ok, text = pcall(c.k8s.logs, c.k8s, p.metadata.name, { namespace = ns,
      container = opts.container or "main" })
    if not ok then
      -- a pod without that container has no such log (argo-server skips it)
      if opts.pod or not (u.is_error(text) and text.class == "bad_request") then error(text, 0) end
    else
      for line in text:gmatch("([^\n]*)\n?") do
        if line ~= "" and grep_ok(opts.grep, line) then
          entries[#entries + 1] = { pod = p.metadata.name, content = line }
        end
      end
    end
  end
  metrics.histogram("argo.logs"):record(kb.now() - t0)
  return entries
end

local function server_logs(c, name, ns, opts)
  local text = c:request({ op = "logs", raw = true,
    path = "/api/v1/workflows/" .. esc(ns) .. "/" .. esc(name) .. "/log",
    query = { podName = opts.pod, ["logOptions.container"] = opts.container or "main",
      grep = opts.grep } })
  local entries = json.array({})
  for line in text:gmatch("[^\n]+") do
    line = line:match("^data: (.*)$") or line
    if line:find("%S") then
      local ok, msg = pcall(json.decode, line)
      if not ok or type(msg) ~= "table" then
        u.raise("protocol", "argo.logs: a log message is not JSON: " .. u.trim(line, 120))
      end
      if type(msg.error) == "table" then
        u.raise("server", "argo.logs: argo-server ended the log stream: " .. tostring(msg.error.message),
          { code = msg.error.code })
      end
      local r = type(msg.result) == "table" and msg.result or {}
      if type(r.content) == "string" and grep_ok(opts.grep, r.content) then
        entries[#entries + 1] = { pod = r.podName, content = r.content }
      end
    end
  end
  return entries
end

--- c:logs(name [, {pod, container = "main", grep, follow, namespace,
-- timeout}]) -> the log text (lines of every pod of the workflow, pod by
-- pod in name order, or of one pod), and the list of {pod, content}
-- lines. follow = true first waits for the workflow to finish (c:wait with
-- timeout), so the text is complete.
function Client:logs(name, opts)
  need_name(name, "logs")
  opts = check_opts(opts, { pod = true, container = true, grep = true, follow = true,
    namespace = true, timeout = true }, "logs")
  local ns = opts.namespace or self.namespace
  if opts.follow then self:wait(name, { namespace = ns, timeout = opts.timeout }) end
  local entries = self.k8s and crd_logs(self, name, ns, opts) or server_logs(self, name, ns, opts)
  local lines = {}
  for i, e in ipairs(entries) do lines[i] = e.content end
  return #lines > 0 and (table.concat(lines, "\n") .. "\n") or "", entries
end

-- ---- workflow templates ----------------------------------------------------------

--- c:create_template(template | yaml_text [, {namespace}]) -> {name,
-- namespace, uid, labels, created_at, raw}.
function Client:create_template(what, opts)
  opts = check_opts(opts, { namespace = true }, "create_template")
  local t = object_of(what, "WorkflowTemplate", "create_template")
  local ns = opts.namespace or str(t.metadata.namespace) or self.namespace
  t.metadata.namespace = ns
  if self.k8s then
    return normalise_template((k8s_call(self, "create_template", { resource = "workflowtemplates",
      method = "POST", path = crd_path(TEMPLATES, ns), body = t })))
  end
  return normalise_template((self:request({ op = "create_template", method = "POST",
    path = "/api/v1/workflow-templates/" .. esc(ns), body = { namespace = ns, template = t } })))
end

--- c:get_template(name [, {namespace}]) -> the template (as create_template).
function Client:get_template(name, opts)
  need_name(name, "get_template")
  opts = check_opts(opts, { namespace = true }, "get_template")
  local ns = opts.namespace or self.namespace
  if self.k8s then
    return normalise_template((k8s_call(self, "get_template", { resource = "workflowtemplates",
      path = crd_path(TEMPLATES, ns, name) })))
  end
  return normalise_template((self:request({ op = "get_template",
    path = "/api/v1/workflow-templates/" .. esc(ns) .. "/" .. esc(name) })))
end

--- c:list_templates{namespace, label_selector, field_selector, limit,
-- continue} -> {items, continue, resource_version, raw}.
function Client:list_templates(opts)
  opts = check_opts(opts, LIST_OPTS, "list_templates")
  return list_call(self, TEMPLATES, "list_templates", opts, normalise_template)
end

--- c:delete_template(name [, {namespace}]) -> true.
function Client:delete_template(name, opts)
  need_name(name, "delete_template")
  opts = check_opts(opts, { namespace = true }, "delete_template")
  local ns = opts.namespace or self.namespace
  if self.k8s then
    k8s_call(self, "delete_template", { resource = "workflowtemplates", method = "DELETE",
      path = crd_path(TEMPLATES, ns, name) })
  else
    self:request({ op = "delete_template", method = "DELETE",
      path = "/api/v1/workflow-templates/" .. esc(ns) .. "/" .. esc(name) })
  end
  return true
end

--- c:version() -> argo-server's /api/v1/version {version, gitCommit, ...}
-- (the API server's /version on the CRD path).
function Client:version()
  if self.k8s then return self.k8s:version() end
  return (self:request({ op = "version", path = "/api/v1/version" }))
end

--- c:watch{...} -> watcher of workflows (kb.argo.watch describes it).
function Client:watch(opts)
  return watch.open(self, opts)
end

return M
