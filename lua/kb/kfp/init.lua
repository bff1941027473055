--- kb.kfp: a client of the Kubeflow Pipelines REST API (v2beta1 and v1beta1).
--
--   local kfp = require "kb.kfp"
--   local c = kfp.client{ host = "http://127.0.0.1:8888", api = "v2beta1" }
--   local p = c:upload_pipeline{ file = "hello.yaml", name = "hello" }
--   local e = c:create_experiment{ name = "bench" }
--   local r = c:create_run{ name = "r1", experiment_id = e.id, pipeline_id = p.id }
--   r = c:wait_run(r.id, { interval = 10, timeout = 3600 })
--   print(r.state, r.finished_at - r.created_at)
--
-- Why Lua: the hot paths (HTTP on libcurl multi, JSON in cJSON, HDR
-- histograms) are C; what is left here is REST glue (paths, bodies,
-- normalisation), which reads best and stays scriptable in Lua. A request
-- costs one C call to kb.http plus a few table operations.
--
-- Every method suspends only the calling task. Its latency is the HTTP
-- exchange's total time as kb.http reports it (scenario clock; against the
-- embedded simulator only the modelled server time is scaled to virtual
-- time, see kb.http), JSON decoding excluded, and it is
-- recorded in the histogram `<metrics_prefix><service>.<method>` (e.g.
-- run.create, run.get, pipeline.upload, healthz.get) when it succeeds;
-- every answer counts in kfp.requests{op, status}, every call that fails in
-- the end in kfp.errors{op, class}. The same op names are used for both API
-- versions (v1 jobs are recurring_run.*, v1 pipeline_versions
-- pipeline_version.*).
--
-- Transient failures are retried (kb.retry; retry = false turns it off):
-- the histogram `<op>` is then the logical call (every attempt and every
-- delay), `<op>.attempt` holds each attempt's own time, failed ones too,
-- and kfp.retries{op, reason}, kfp.retry_budget_exhausted{op} and
-- kfp.recovered{op} count what the policy did. Creates are not re-sent
-- blindly: after a failure that may have created the object, the client
-- looks it up by name (op `<op>.check`) and returns it when it exists.
--
-- Results are normalised tables (the same fields for both versions) with
-- the decoded JSON under .raw. Runs carry the notebook's state vocabulary
-- (see kb.kfp.states), times are epoch seconds (nil when unset), lists
-- return {items, next_page_token, total_size, raw}. docs/kfp.md is the
-- reference.
--
-- Failures raise kb error objects ("class: message"): HTTP error statuses as
-- class auth (401, 403, login redirects; never retried, the hint names the
-- credentials sent and what to check), not_found (404), conflict (409),
-- throttled (429), server (5xx) or http (other), with status, op, method,
-- url, server_message, details, code, hint, and retry_after (a 429's or
-- 503's Retry-After in seconds, kb.retry.retry_after); transport errors of
-- kb.http keep their class (connect, timeout, tls, ...) and gain op. The
-- same classes as kb.k8s and kb.argo. Tokens and cookies never appear in
-- errors, logs or the client's fields: every credential is registered with
-- kb.secrets, which scrubs it (and its base64) from what a server echoes.
local kb = require "kb"
local http = require "kb.http"
local credentials = require "kb.secrets"
local secret_store = credentials -- M.client's own `credentials` is a list of names
local json = require "kb.json"
local fs = require "kb.fs"
local metrics = require "kb.metrics"
local log = require "kb.log"
local states = require "kb.kfp.states"
local common = require "kb.kfp.common"
local retry = require "kb.retry"

local M = {}

M.states = states
M.parse_time = states.parse_time
M.is_finished = states.is_finished
M.pipeline = require("kb.kfp.pipeline_gen").pipeline

local DIALECTS = {
  v2beta1 = "kb.kfp.v2", v2 = "kb.kfp.v2",
  v1beta1 = "kb.kfp.v1", v1 = "kb.kfp.v1",
}

-- kb error objects share the runtime's "kb.error" metatable.
local ErrorMeta = getmetatable(kb.cancelled)

local function kb_error(class, message, fields)
  local e = fields or {}
  e.class, e.message = class, message
  return setmetatable(e, ErrorMeta)
end

-- Secrets live here, keyed by client, so no field of a client (printed,
-- dumped or JSON-encoded by a scenario) ever holds them.
local secrets = setmetatable({}, { __mode = "k" })

local Client = {}
Client.__index = Client
Client.__name = "kb.kfp.client"

function Client:__tostring()
  return string.format("kb.kfp.client %s %s", self.api, self.url)
end

-- ---- options ---------------------------------------------------------------------

local OPTIONS = {
  host = true, api = true, token = true, token_file = true, namespace = true, headers = true,
  cookies = true, cookie_file = true, auth = true, timeout = true, tls = true, metrics_prefix = true,
  allow_insecure_credentials = true, http = true, retry = true,
}
local TLS_OPTIONS = {
  ca_file = true, ca_pem = true, cert_file = true, cert_pem = true, key_file = true,
  key_pem = true, insecure = true, proxy = true, tls_server_name = true,
}
local CREDENTIAL_HEADERS = { authorization = true, ["proxy-authorization"] = true, cookie = true }

local function usage(fmt, ...)
  error("kb.kfp.client: " .. string.format(fmt, ...), 3)
end

-- scheme, host name and base URL (no trailing slash) of host=.
local function parse_host(host)
  if type(host) ~= "string" or host == "" then
    usage("host= is required, e.g. \"http://127.0.0.1:8888\" or "
      .. "\"https://kubeflow.example.com/pipeline\"")
  end
  local scheme, rest = host:match("^(%a[%w+.-]*)://(.*)$")
  scheme = scheme and scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    usage("host must start with http:// or https://, got %q", host)
  end
  local authority, prefix = rest:match("^([^/?#]*)(.*)$")
  if prefix:find("[?#]") then usage("host must not have a query or fragment: %q", host) end
  if authority:find("@", 1, true) then
    usage("host must not carry credentials (user:password@); give them with token_file=, token=, cookies= or headers=")
  end
  local name = authority:match("^%[(.-)%]") or authority:match("^([^:]*)")
  if name == "" then usage("host has no host name: %q", host) end
  return scheme, name:lower(), scheme .. "://" .. authority .. prefix:gsub("/+$", "")
end

local function is_loopback(name)
  return name == "localhost" or name:match("%.localhost$") ~= nil or name == "::1"
    or name:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

local function cookie_text(cookies)
  if cookies == nil or type(cookies) == "string" then return cookies end
  if type(cookies) ~= "table" then usage("cookies= must be a string or a table {name = value}") end
  local parts = {}
  for _, k in ipairs(common.sorted_keys(cookies)) do parts[#parts + 1] = k .. "=" .. cookies[k] end
  return table.concat(parts, "; ")
end

-- ---- credentials -----------------------------------------------------------------

local function auth_error(fmt, ...)
  error(kb_error("auth", "kb.kfp: " .. string.format(fmt, ...)), 0)
end

local function read_token(path)
  local token = credentials.read_token(path, auth_error)
  credentials.register(token) -- before it is sent: a server may echo it
  return token
end

-- Header names whose values are credentials (registered with kb.secrets).
local is_credential_header = credentials.credential_header

local function build_headers(s)
  local h = {}
  for k, v in pairs(s.extra) do h[k] = v end
  if s.token then h["Authorization"] = "Bearer " .. s.token end
  if s.cookies then h["Cookie"] = s.cookies end
  s.headers = h
end

--- kfp.read_cookie_file(path [, fail]) -> the Cookie header's value of a
-- cookie file: "name=value" lines (or one "a=b; c=d" line, or a "Cookie:"
-- header line), or a Netscape cookies.txt (curl -c, browser exports: seven
-- tab-separated fields, # comments, #HttpOnly_ lines kept). Every value is
-- registered with kb.secrets. fail(fmt, ...) raises (default: class auth).
function M.read_cookie_file(path, fail)
  fail = fail or auth_error
  local ok, text = pcall(fs.read, path)
  if not ok then fail("cannot read cookie_file '%s': %s", path, type(text) == "table" and (text.message or tostring(text)) or tostring(text)) end
  local parts = {}
  for line in (text .. "\n"):gmatch("([^\r\n]*)\r?\n") do
    local netscape = line:gsub("^#HttpOnly_", "")
    local f = {}
    for field in (netscape .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = field end
    if #f == 7 and not netscape:match("^#") then
      parts[#parts + 1] = f[6] .. "=" .. f[7]
      credentials.register(f[7])
    elseif line:find("%S") and not line:match("^%s*#") then
      line = line:gsub("^%s*[Cc][Oo][Oo][Kk][Ii][Ee]%s*:%s*", ""):match("^%s*(.-)%s*$")
      for pair in (line .. ";"):gmatch("([^;]*);") do
        pair = pair:match("^%s*(.-)%s*$")
        if pair ~= "" then
          local name, value = pair:match("^([^=%s]+)=(.*)$")
          if not name then fail("cookie_file '%s': '%s...' is not name=value", path, pair:sub(1, 3)) end
          parts[#parts + 1] = name .. "=" .. value
          credentials.register(value)
        end
      end
    end
  end
  if #parts == 0 then fail("cookie_file '%s' holds no cookie (name=value lines or a cookies.txt)", path) end
  local cookie = table.concat(parts, "; ")
  credentials.register(cookie)
  return cookie
end

-- The request headers, re-reading token_file and cookie_file when their
-- mtime or size changed.
local function current_headers(s)
  local changed = false
  if s.token_file then
    local token = credentials.refresh(s, s.token_file, auth_error)
    if token then
      credentials.register(token)
      s.token = token
      changed = true
    end
  end
  if s.cookie_file then
    local okst, st = pcall(fs.stat, s.cookie_file)
    if not okst then auth_error("cannot stat cookie_file '%s'", s.cookie_file) end
    if st.mtime ~= s.cookie_state.mtime or st.size ~= s.cookie_state.size then
      s.cookies = M.read_cookie_file(s.cookie_file)
      s.cookie_state.mtime, s.cookie_state.size = st.mtime, st.size
      changed = true
    end
  end
  if changed then build_headers(s) end
  return s.headers
end

-- Text with every credential the process sends replaced (a server may
-- echo one): the client's are registered with kb.secrets when set.
local function redact(_, text)
  return credentials.scrub(text)
end

--- kb.kfp.client(opts) -> client. opts: host (required), api ("v2beta1",
-- default, or "v1beta1"), token, token_file, namespace, headers, cookies,
-- cookie_file (a session cookie file, kfp.read_cookie_file, re-read when it
-- changes), auth (a kb.k8s.auth provider: the kubeconfig user's token, token
-- file, exec plugin or client certificate, applied to every request),
-- timeout (scenario seconds per request, default 30), tls {ca_file, ca_pem,
-- cert_file, cert_pem, key_file, key_pem, insecure, proxy, tls_server_name},
-- metrics_prefix (""),
-- allow_insecure_credentials (false), http (a kb.http.client to use instead
-- of the shared pool), retry (a kb.retry.policy or a table of its options;
-- default the default policy, false = no retries; docs/kfp.md "Retries").
-- Raises class "security" when credentials would go in
-- clear text (http://) to a host that is not loopback.
function M.client(opts)
  if type(opts) ~= "table" then usage("takes a table of options") end
  for k in pairs(opts) do
    if not OPTIONS[k] then usage("unknown option '%s'", tostring(k)) end
  end
  local scheme, name, base = parse_host(opts.host)
  local api = opts.api or "v2beta1"
  if not DIALECTS[api] then usage("api must be \"v2beta1\" or \"v1beta1\", got %q", tostring(api)) end
  local dialect = require(DIALECTS[api])
  local timeout = opts.timeout or 30
  if type(timeout) ~= "number" or not (timeout > 0) then usage("timeout must be a number > 0") end
  local prefix = opts.metrics_prefix or ""
  if type(prefix) ~= "string" then usage("metrics_prefix must be a string") end
  if opts.namespace ~= nil and (type(opts.namespace) ~= "string" or opts.namespace == "") then
    usage("namespace must be a non-empty string")
  end

  local s = { extra = {}, token_file = opts.token_file, cookies = cookie_text(opts.cookies),
    cookie_file = opts.cookie_file, cookie_state = {}, auth = opts.auth }
  local credentials = {}
  if opts.headers ~= nil then
    if type(opts.headers) ~= "table" then usage("headers= must be a table {name = value}") end
    for k, v in pairs(opts.headers) do
      if type(k) ~= "string" then usage("header names must be strings") end
      s.extra[k] = v
      if CREDENTIAL_HEADERS[k:lower()] then credentials[#credentials + 1] = "header " .. k end
      -- a bare token a server echoes back must be redacted, not only the
      -- whole "Bearer <token>" value
      if is_credential_header(k) then
        secret_store.register(tostring(v))
        s.credential_headers = s.credential_headers or {}
        s.credential_headers[#s.credential_headers + 1] = k
      end
    end
  end
  if opts.token ~= nil then
    if type(opts.token) ~= "string" or opts.token == "" then usage("token must be a non-empty string") end
    if opts.token_file ~= nil then usage("give token= or token_file=, not both") end
    if opts.token:find("%c") then usage("token must be one line") end
    s.token = opts.token
    secret_store.register(opts.token)
    credentials[#credentials + 1] = "token"
  end
  if s.token_file ~= nil then
    if type(s.token_file) ~= "string" or s.token_file == "" then usage("token_file must be a path") end
    credentials[#credentials + 1] = "token_file"
  end
  if s.cookies ~= nil then
    if s.cookie_file ~= nil then usage("give cookies= or cookie_file=, not both") end
    secret_store.register(s.cookies)
    credentials[#credentials + 1] = "cookies"
  end
  if s.cookie_file ~= nil then
    if type(s.cookie_file) ~= "string" or s.cookie_file == "" then usage("cookie_file must be a path") end
    credentials[#credentials + 1] = "cookie_file"
  end
  if s.auth ~= nil then
    if type(s.auth) ~= "table" or type(s.auth.apply) ~= "function" then
      usage("auth= must be a credentials provider (kb.k8s.auth.new)")
    end
    if s.auth:has_credentials() then credentials[#credentials + 1] = "kubeconfig user" end
  end
  -- Before any traffic: a bearer token or session cookie sent in clear text
  -- to a remote host can be replayed by anyone on the path.
  if #credentials > 0 and scheme == "http" and not is_loopback(name)
      and opts.allow_insecure_credentials ~= true then
    error(kb_error("security", string.format("kb.kfp: refusing to send credentials (%s) in clear "
      .. "text over http:// to %s; use https:// (with ca_file= for a private CA), or, if the "
      .. "network is trusted (e.g. inside the cluster), allow it with the scenario parameter "
      .. "insecure_credentials=true (kb.kfp.client option allow_insecure_credentials = true)",
      table.concat(credentials, ", "), name),
      { host = base }), 2)
  end

  local policy = retry.resolve(opts.retry, "kb.kfp.client")

  local tls = {}
  if opts.tls ~= nil then
    if type(opts.tls) ~= "table" then usage("tls= must be a table") end
    for k, v in pairs(opts.tls) do
      if not TLS_OPTIONS[k] then usage("unknown tls option '%s'", tostring(k)) end
      tls[k] = v
    end
  end

  local send = http.request
  if opts.http ~= nil then
    local hc = opts.http
    send = function(o) return hc:request(o) end
  end

  if s.token_file then
    local st = fs.exists(s.token_file) and fs.stat(s.token_file)
    s.token = read_token(s.token_file) -- fail now, not at the first request
    if st then s.mtime, s.size = st.mtime, st.size end
  end
  if s.cookie_file then current_headers(s) end -- read it now: a missing file fails here
  build_headers(s)

  local c = setmetatable({
    api = dialect.api, host = base, url = base .. "/apis/" .. dialect.api,
    namespace = opts.namespace, timeout = timeout, metrics_prefix = prefix,
    retry = policy, _budget = policy and policy:budget(),
    _dialect = dialect, _tls = tls, _send = send, _kfp_prefix = prefix .. "kfp.",
  }, Client)
  secrets[c] = s
  return c
end

-- ---- requests ----------------------------------------------------------------------

local function trim(text, max)
  text = text:gsub("%s+", " "):match("^%s*(.-)%s*$")
  if #text > max then text = text:sub(1, max) .. "..." end
  return text
end

-- message, details, grpc code, is-a-KFP-error of an error body: grpc-gateway's
-- {code, message, details}, the upload handlers' {error_message,
-- error_details}, the old v1 {error}, or plain text / HTML from a proxy.
local function parse_error_body(body)
  if type(body) ~= "string" then return nil end
  if body:match("^%s*{") then
    local ok, doc = pcall(json.decode, body)
    if ok and type(doc) == "table" then
      local msg = common.str(doc.message) or common.str(doc.error_message) or common.str(doc.error)
      if msg then
        local details = common.str(doc.error_details)
        if not details and type(doc.details) == "table" then
          local list = {}
          for _, d in ipairs(doc.details) do
            local m = type(d) == "table" and common.str(d.message)
            if m and m ~= msg then list[#list + 1] = m end
          end
          if #list > 0 then details = table.concat(list, "; ") end
        end
        return msg, details, math.tointeger(doc.code), true
      end
    end
  end
  local text = body
  if text:match("^%s*<") then
    text = text:match("<[Tt][Ii][Tt][Ll][Ee]>(.-)</") or text:gsub("<[^>]*>", " ")
  end
  text = trim(text, 300)
  if text == "" then return nil end
  return text, nil, nil, false
end

local HINTS = {
  login = "the server redirected to a login page: pass a valid session cookie (cookies=) "
    .. "or a token",
  path = "no such API path: check host= and its path prefix (e.g. https://host/pipeline) and api=",
  server = "the KFP API server or a proxy in front of it failed; look at the ml-pipeline "
    .. "pod's logs, or retry later",
  connect = "is the KFP API reachable? e.g. kubectl -n kubeflow port-forward svc/ml-pipeline 8888:8888",
  json = "is host= the KFP API endpoint? Behind the Kubeflow gateway it is https://host/pipeline",
}


-- The hint of a 401 / 403: what was sent and what to check.
local function auth_hint(s, status)
  local source = credentials.describe_credentials(s)
  if source and s.cookie_file then
    source = source:gsub("%(cookies=%)", function() return "of cookie_file '" .. s.cookie_file .. "'" end)
  end
  local via = s.auth and s.auth:describe()
  if via then source = (source and (source .. " and ") or "") .. "the kubeconfig user's credentials (" .. via .. ")" end
  if status == 401 then
    if not source then
      return "no credentials were sent: give token_file= (e.g. a service account token), "
        .. "token=, cookies= with a session cookie, or the kubeflow-userid header (headers=) "
        .. "that a multi-user deployment expects"
    end
    return "the server rejected " .. source .. ": check that it is current (tokens and "
      .. "sessions expire; token_file is re-read when it changes) and meant for this server"
  end
  return "the server accepted " .. (source or "the request") .. " but refused the call: "
    .. "check the user's RBAC / namespace access (Kubeflow profile contributors, "
    .. "kubeflow-userid header) for this operation"
end

local function http_error(s, op, method, url, r)
  local status = r.status
  local msg, details, code, kfp_body = parse_error_body(r.body)
  msg, details = redact(s, msg), redact(s, details)
  local class, hint = "http", nil
  local location = r.headers and r.headers.location
  if status == 401 or status == 403 then
    class, hint = "auth", auth_hint(s, status)
  elseif status >= 300 and status < 400 and location then
    class, hint = "auth", HINTS.login
    msg = "redirected to " .. tostring(location):gsub("[?#].*$", "")
  elseif status == 404 then
    class = "not_found"
    if not kfp_body then hint = HINTS.path end
  elseif status == 409 then
    class = "conflict"
  elseif status == 429 then
    class = "throttled"
  elseif status >= 500 then
    class, hint = "server", HINTS.server
  end
  local message = string.format("%s: %s %s -> HTTP %d%s%s", op, method, url, status,
    msg and (": " .. msg) or "", hint and (" (" .. hint .. ")") or "")
  local body = type(r.body) == "string" and redact(s, r.body:sub(1, 4096)) or nil
  return kb_error(class, message, {
    status = status, op = op, method = method, url = url, server_message = msg,
    details = details, code = code, hint = hint, body = body,
    retry_after = retry.retry_after(status, r.headers),
  })
end

local function count_error(prefix, op, class)
  metrics.counter(prefix .. "kfp.errors", { op = op, class = class }):inc()
end

-- The decode options of a skip set, made once per set (the dialects' sets
-- are constants).
local skip_options = setmetatable({}, { __mode = "k" })
local function decode_options(skip)
  local o = skip_options[skip]
  if not o then
    o = { skip = skip }
    skip_options[skip] = o
  end
  return o
end

-- The metrics of one op of client c: its attempts' histogram, its calls'
-- (`call`, once one succeeded) and, by status, its request counters
-- (kb.metrics.handles: named once, not per call).
local function op_metrics(c, op)
  local h = metrics.handles(c)
  local m = h[op]
  if not m then
    local prefix = c.metrics_prefix
    m = { attempt = metrics.histogram(prefix .. op .. ".attempt"), requests = {} }
    h[op] = m
  end
  return m
end

local function count_request(c, m, op, status)
  local counter = m.requests[status]
  if not counter then
    counter = metrics.counter(c.metrics_prefix .. "kfp.requests", { op = op, status = tostring(status) })
    m.requests[status] = counter
  end
  counter:inc()
end

-- One attempt: sends the request and decodes the answer. Returns true,
-- doc, response, or false, error (as pcall). Every answer counts in
-- kfp.requests{op, status}; every attempt, failed or not, records its time
-- in the histogram `<op>.attempt`.
local function attempt(self, s, req, o, op, method, url)
  local t0 = kb.now()
  local ok, r = pcall(self._send, o)
  local elapsed = kb.now() - t0
  if not ok then
    if type(r) == "table" and getmetatable(r) == ErrorMeta and not kb.is_cancelled(r) then
      r.op = r.op or op
      if r.class == "connect" and r.hint == nil then r.hint = HINTS.connect end
      op_metrics(self, op).attempt:record(elapsed)
    end
    return false, r, nil, elapsed
  end
  elapsed = r.time and r.time.total or elapsed
  local m = op_metrics(self, op)
  m.attempt:record(elapsed)
  local status = r.status
  count_request(self, m, op, status)
  if log.enabled("debug") then
    log.debug("kfp %s %s %s -> %d in %.3f s", op, method, url, status, elapsed)
  end
  if status < 200 or status > 299 then return false, http_error(s, op, method, url, r), nil, elapsed end
  if req.raw then return true, r.body, r, elapsed end
  local doc = {}
  if r.body:find("%S") then
    local okd, d = pcall(json.decode, r.body, req.skip and decode_options(req.skip) or nil)
    if not okd or type(d) ~= "table" then
      return false, kb_error("protocol", string.format("%s: %s %s -> HTTP %d with a body that is "
        .. "not a JSON object (%s): %s (%s)", op, method, url, status,
        tostring(r.headers["content-type"] or "no content type"),
        trim(redact(s, r.body), 120), HINTS.json),
        { status = status, op = op, method = method, url = url, hint = HINTS.json }), nil, elapsed
    end
    doc = d
  end
  return true, doc, r, elapsed
end

-- A request's credentials from the kubeconfig user: a bearer token (a
-- file re-read, an exec plugin's cached until it expires) or a client
-- certificate, put into a copy of its headers.
local function apply_auth(call)
  local h = {}
  for k, v in pairs(call.headers) do h[k] = v end
  call.s.auth:apply(h, call.o)
  if h.Authorization then credentials.register(h.Authorization, (h.Authorization:gsub("^%S+%s+", ""))) end
  call.o.headers = h
end

-- One attempt of a call (its state: see Client:request). A 401 with a
-- kubeconfig user runs its exec plugin again (or reads its token file
-- again) and sends the request once more, as client-go does.
local function attempt_call(call)
  local c, s = call.client, call.s
  local ok, a, b, elapsed = attempt(c, s, call.req, call.o, call.op, call.method, call.url)
  call.spent = call.spent + elapsed
  if not ok and s.auth and not call.refreshed and type(a) == "table" and a.status == 401
      and s.auth:invalidate() then
    call.refreshed = true
    apply_auth(call)
    ok, a, b, elapsed = attempt(c, s, call.req, call.o, call.op, call.method, call.url)
    call.spent = call.spent + elapsed
  end
  return ok, a, b
end

--- c:request{op=, method=, path=, query=, body=, multipart=, root=, raw=,
-- recover=} -> decoded JSON (a table; {} for an empty body), response. The
-- low-level call every method uses: path is under /apis/<api> (under host=
-- with root = true, e.g. "/metrics"), op names the histogram, raw = true
-- returns the body text instead of decoding it. Transient failures are
-- retried by the client's policy (kb.retry); recover (for a create) is
-- called after a failure that may have created the object and returns it
-- (decoded JSON as the request would) or nil. The response gains attempts
-- and elapsed (the logical call's time: every attempt and every delay).
-- Raises like the methods do; the error gains .attempts.
function Client:request(req)
  local op = req.op
  if type(op) ~= "string" then error("kb.kfp: request needs op= (the metric name)", 2) end
  local s = secrets[self]
  local method = req.method or "GET"
  local url = (req.root and self.host or self.url) .. req.path
  local headers = current_headers(s)
  if req.body == nil and req.multipart == nil and method == "POST" then
    -- A bodiless POST (archive, terminate, ...): say JSON as the KFP SDK
    -- does, not libcurl's default form type.
    local h = { ["Content-Type"] = "application/json" }
    for k, v in pairs(headers) do h[k] = v end
    headers = h
  end
  local o = { method = method, url = url, headers = headers, query = req.query,
    body = req.body, multipart = req.multipart, timeout = self.timeout }
  if next(self._tls) then
    for k, v in pairs(self._tls) do o[k] = v end
  end
  -- the call's state, for its attempts (a table, not closures: this runs
  -- for every poll of a storm)
  local call = { client = self, s = s, req = req, o = o, op = op, method = method, url = url,
    headers = headers, spent = 0, refreshed = false }
  if s.auth then apply_auth(call) end
  local policy = self.retry
  if policy and self._budget then self._budget:deposit() end
  -- The first attempt is made here, outside kb.retry's loop: most calls
  -- need nothing of it. A failed one goes on there as its attempt 1.
  local ok, doc, r = attempt_call(call)
  local attempts, slept = 1, 0
  if not ok and policy then
    local info
    ok, doc, r, info = pcall(policy.run, policy, { op = op, method = method,
      budget = self._budget, prefix = self._kfp_prefix, recover = req.recover,
      first_error = doc }, function() return attempt_call(call) end)
    if ok then attempts, slept = info.attempts, info.slept end
  end
  if not ok then
    if type(doc) == "table" and getmetatable(doc) == ErrorMeta and not kb.is_cancelled(doc) then
      count_error(self.metrics_prefix, op, doc.class or "other")
    end
    error(doc, 0)
  end
  -- The logical call: the first attempt's start to the final answer. A
  -- recovered create was answered by its lookup (timed as its own op).
  local elapsed = call.spent + slept
  if r then
    r.attempts, r.elapsed = attempts, elapsed
  else
    r = { recovered = true, attempts = attempts, elapsed = elapsed, headers = {} }
  end
  local m = op_metrics(self, op)
  -- made at the first success: a call that never succeeded has no histogram
  m.call = m.call or metrics.histogram(self.metrics_prefix .. op)
  m.call:record(elapsed)
  return doc, r
end

-- ---- the API methods (kb/kfp/v1.lua, kb/kfp/v2.lua) ---------------------------

local METHODS = {
  "create_pipeline", "create_pipeline_and_version", "upload_pipeline", "upload_pipeline_version",
  "get_pipeline", "get_pipeline_by_name", "list_pipelines", "delete_pipeline",
  "create_pipeline_version", "get_pipeline_version", "list_pipeline_versions",
  "delete_pipeline_version",
  "create_experiment", "get_experiment", "list_experiments", "delete_experiment",
  "archive_experiment", "unarchive_experiment",
  "create_run", "get_run", "list_runs", "delete_run", "archive_run", "unarchive_run",
  "terminate_run", "retry_run",
  "create_recurring_run", "get_recurring_run", "list_recurring_runs", "delete_recurring_run",
  "enable_recurring_run", "disable_recurring_run",
  "healthz",
}

for _, name in ipairs(METHODS) do
  Client[name] = function(self, ...)
    if getmetatable(self) ~= Client then
      error("kb.kfp: call " .. name .. " as a method: c:" .. name .. "(...)", 2)
    end
    return self._dialect[name](self, ...)
  end
end

-- The v1 names of recurring runs.
for _, verb in ipairs({ "create", "get", "list", "delete", "enable", "disable" }) do
  Client[verb .. (verb == "list" and "_jobs" or "_job")] = Client[verb .. "_recurring_run"
    .. (verb == "list" and "s" or "")]
end

local LISTS = {
  list_runs = true, list_pipelines = true, list_pipeline_versions = true,
  list_experiments = true, list_recurring_runs = true,
}

--- c:list_all(list_method, args) -> every item of every page (args as for
-- the list method, plus max_pages, default 10000). Follows next_page_token
-- until the server returns none; a token seen twice raises class protocol.
function Client:list_all(method, a)
  if not LISTS[method] then
    error("kb.kfp: list_all needs a list method name (list_runs, list_pipelines, ...), got "
      .. tostring(method), 2)
  end
  local args = {}
  for k, v in pairs(common.args(a, method)) do args[k] = v end
  local max_pages = args.max_pages or 10000
  args.max_pages = nil
  local items, seen = json.array({}), {}
  for _ = 1, max_pages do
    local page = self[method](self, args)
    for _, x in ipairs(page.items) do items[#items + 1] = x end
    local token = page.next_page_token
    if not token then return items end
    if seen[token] then
      error(kb_error("protocol", string.format("kb.kfp: %s returned the page token %q twice",
        method, token)), 0)
    end
    seen[token], args.page_token = true, token
  end
  error(kb_error("limit", string.format("kb.kfp: %s: more than %d pages (raise max_pages=)",
    method, max_pages)), 0)
end

--- c:list_all_runs(args), list_all_pipelines, list_all_pipeline_versions,
-- list_all_experiments, list_all_recurring_runs: list_all of that method.
for method in pairs(LISTS) do
  Client["list_all_" .. method:sub(6)] = function(self, a) return self:list_all(method, a) end
end

--- c:delete_pipeline_versions(pipeline_id) -> n: deletes every version of a
-- pipeline (all pages are listed first, then each version is deleted).
function Client:delete_pipeline_versions(pipeline_id)
  common.need_id(pipeline_id, "pipeline", "delete_pipeline_versions")
  local versions = self:list_all("list_pipeline_versions", { pipeline_id = pipeline_id })
  for _, v in ipairs(versions) do self:delete_pipeline_version(pipeline_id, v.id) end
  return #versions
end

--- c:wait_run(id [, {interval = 5, timeout = nil}]) -> the finished run.
-- Polls get_run every interval (scenario) seconds; raises class "timeout"
-- (with .run, the last state seen) once timeout seconds have passed.
function Client:wait_run(id, opts)
  opts = common.args(opts, "wait_run")
  local interval = opts.interval or 5
  if type(interval) ~= "number" or not (interval > 0) then
    error("kb.kfp: wait_run: interval must be a number > 0", 2)
  end
  local deadline = opts.timeout and kb.now() + opts.timeout
  while true do
    local run = self:get_run(id)
    if run.finished then return run end
    local now = kb.now()
    if deadline and now >= deadline then
      error(kb_error("timeout", string.format("kb.kfp: run %s not finished after %g s (state %s)",
        id, opts.timeout, run.state), { run = run, op = "run.get" }), 0)
    end
    kb.sleep(deadline and math.min(interval, deadline - now) or interval)
  end
end

return M
