--- kb.prometheus: kbrun's own live metrics in the Prometheus text format
-- (0.0.4), and a client for Prometheus's query API. docs/observability.md
-- is the reference.
--
--   local prometheus = require "kb.prometheus"
--   local exp = prometheus.start{ host = "127.0.0.1", port = 0 }
--   print(exp.url)                       -- http://127.0.0.1:PORT/metrics
--   exp:stop()
--   local text = prometheus.render()     -- what GET /metrics serves
--   local v = prometheus.query("http://127.0.0.1:9090", "up", kb.time())
--   for _, s in ipairs(v.result) do print(s.metric.job, s.value) end
--
-- What is served: every kb.metrics entry (counters as `kbrun_<name>_total`,
-- gauges as `kbrun_<name>`, histograms as `kbrun_<name>_seconds` with
-- cumulative buckets on the fixed ladder M.LADDER), errors by class summed
-- over every `*errors` counter (`kbrun_errors_total{class}`), requests in
-- flight, live tasks, `kbrun_up`, and the samples of registered collectors
-- (the storm's runs by state: kb.kfp.prom_query.publish).
local kb = require "kb"
local core = require "kb.core"
local json = require "kb.json"
local metrics = require "kb.metrics"

local M = {}

--- Bucket bounds (seconds) of exported histograms: go-grpc-prometheus'
-- 5 ms .. 300 s extended below (loopback calls take well under 5 ms) and
-- above (run durations); +Inf is added.
M.LADDER = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
  120, 300, 600, 1800, 3600 }

M.CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

-- ---- names and values -------------------------------------------------------------

--- The Prometheus name of a kb.metrics name: `run.create` (histogram) ->
-- `kbrun_run_create_seconds`, `kfp.errors` (counter) ->
-- `kbrun_kfp_errors_total`, `runs.in_flight` (gauge) -> `kbrun_runs_in_flight`.
function M.metric_name(name, kind)
  local s = "kbrun_" .. tostring(name):gsub("[^%w_:]", "_")
  if kind == "histogram" and not s:match("_seconds$") then s = s .. "_seconds" end
  if kind == "counter" and not s:match("_total$") then s = s .. "_total" end
  return s
end

--- A label name Prometheus accepts: other characters become `_`; names
-- Prometheus reserves (`__x`, and `le` on a histogram) get a prefix.
function M.label_name(name, kind)
  local s = tostring(name):gsub("[^%w_]", "_")
  if s:match("^%d") or s:match("^__") then s = "x" .. s end
  if kind == "histogram" and s == "le" then s = "exported_le" end
  return s
end

--- A label value escaped for the text format (backslash, quote, newline).
function M.escape(v)
  if type(v) == "number" and math.type(v) == "float" and v == math.floor(v)
      and math.abs(v) < 2 ^ 53 then
    v = math.tointeger(v)
  end
  return (tostring(v):gsub('[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

--- A sample value: integers as such, +Inf/-Inf/NaN as Prometheus writes them.
function M.number(v)
  if v ~= v then return "NaN" end
  if v == math.huge then return "+Inf" end
  if v == -math.huge then return "-Inf" end
  if math.type(v) == "integer" then return tostring(v) end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
  return string.format("%.17g", v)
end

local function le_text(le)
  if le == math.huge then return "+Inf" end
  return (string.format("%.6g", le))
end

local function label_text(labels, kind, extra)
  local names, out = {}, {}
  for k in pairs(labels or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    out[#out + 1] = string.format('%s="%s"', M.label_name(k, kind), M.escape(labels[k]))
  end
  if extra then out[#out + 1] = extra end
  if #out == 0 then return "" end
  return "{" .. table.concat(out, ",") .. "}"
end

--- Cumulative counts of an HDR histogram on `ladder` (default M.LADDER):
-- a list of {le, count}, the last le = +Inf holding every observation.
-- An HDR bucket goes to the first bound at or above its lowest value, so a
-- count is exact up to the histogram's precision (3 digits by default).
function M.cumulative(h, ladder)
  ladder = ladder or M.LADDER
  local counts = {}
  for i = 1, #ladder + 1 do counts[i] = 0 end
  local i = 1
  for _, b in ipairs(h:buckets()) do -- sorted by low
    while i <= #ladder and b.low > ladder[i] do i = i + 1 end
    counts[i] = counts[i] + b.count
  end
  local out, sum = {}, 0
  for j = 1, #ladder + 1 do
    sum = sum + counts[j]
    out[j] = { le = ladder[j] or math.huge, count = sum }
  end
  return out
end

-- ---- collectors -----------------------------------------------------------------

local collectors, collector_order = {}, {}

--- prometheus.collector(name, fn): fn() is called at every scrape and
-- returns a list of samples {name, kind ("gauge" or "counter"), help,
-- labels, value} with full Prometheus names (e.g. `kbrun_storm_runs`).
-- Registering a name again replaces it; fn = nil removes it. A collector
-- that raises is skipped (noted as a comment in the exposition).
function M.collector(name, fn)
  if type(name) ~= "string" then error("kb.prometheus.collector: name must be a string", 2) end
  if fn ~= nil and type(fn) ~= "function" then
    error("kb.prometheus.collector: fn must be a function or nil", 2)
  end
  if fn and not collectors[name] then collector_order[#collector_order + 1] = name end
  if not fn then
    for i, n in ipairs(collector_order) do
      if n == name then table.remove(collector_order, i) break end
    end
  end
  collectors[name] = fn
end

-- ---- the exposition ---------------------------------------------------------------

-- Families in first-seen order; a family has one kind, one HELP and its
-- series, deduplicated by label text.
local Families = {}
Families.__index = Families

local function new_families()
  return setmetatable({ list = {}, by = {}, notes = {} }, Families)
end

function Families:family(name, kind, help)
  local f = self.by[name]
  if f then
    if f.kind ~= kind then
      self.notes[#self.notes + 1] = string.format("%s is a %s, a %s of the same name was left out",
        name, f.kind, kind)
      return nil
    end
    return f
  end
  f = { name = name, kind = kind, help = help, lines = {}, seen = {} }
  self.by[name], self.list[#self.list + 1] = f, f
  return f
end

-- Adds one series (its lines) unless the family already has those labels.
function Families:series(f, labels_text, lines)
  if not f then return end
  if f.seen[labels_text] then
    self.notes[#self.notes + 1] = string.format("duplicate series %s%s left out", f.name, labels_text)
    return
  end
  f.seen[labels_text] = true
  for _, l in ipairs(lines) do f.lines[#f.lines + 1] = l end
end

function Families:sample(name, kind, help, labels, value)
  local f = self:family(name, kind, help)
  local lt = label_text(labels, kind)
  self:series(f, lt, { name .. lt .. " " .. M.number(value) })
end

function Families:histogram(name, help, labels, h)
  local f = self:family(name, "histogram", help)
  if not f then return end
  local lt = label_text(labels, "histogram")
  local lines = {}
  for _, b in ipairs(M.cumulative(h)) do
    lines[#lines + 1] = string.format("%s_bucket%s %s", name,
      label_text(labels, "histogram", 'le="' .. le_text(b.le) .. '"'), M.number(b.count))
  end
  local n = h:count()
  lines[#lines + 1] = string.format("%s_sum%s %s", name, lt, M.number(n > 0 and h:mean() * n or 0))
  lines[#lines + 1] = string.format("%s_count%s %s", name, lt, M.number(n))
  self:series(f, lt, lines)
end

function Families:text()
  local out = {}
  for _, f in ipairs(self.list) do
    out[#out + 1] = "# HELP " .. f.name .. " " .. f.help:gsub("\\", "\\\\"):gsub("\n", "\\n")
    out[#out + 1] = "# TYPE " .. f.name .. " " .. f.kind
    for _, l in ipairs(f.lines) do out[#out + 1] = l end
  end
  for _, n in ipairs(self.notes) do out[#out + 1] = "# kbrun: " .. n:gsub("\n", " ") end
  return table.concat(out, "\n") .. "\n"
end

local function builtins(fam)
  fam:sample("kbrun_up", "gauge", "1 while kbrun serves metrics", nil, 1)
  local ok, n = pcall(function() return kb.http.active() end)
  fam:sample("kbrun_http_requests_in_flight", "gauge",
    "HTTP requests in flight on kbrun's shared client", nil, ok and n or 0)
  fam:sample("kbrun_tasks_live", "gauge", "kbrun tasks (coroutines) alive", nil, core.live_tasks())
  fam:sample("kbrun_clock_speed", "gauge",
    "scenario seconds per real second (1 = real clock; the simulator's speed)", nil,
    core.clock_speed())
end

--- Errors by class over every counter whose name ends in "errors" and
-- carries a class label: { [class] = n }.
function M.errors_by_class()
  local out = {}
  for _, c, e in metrics.each("counter") do
    if e.name:match("errors$") and e.labels.class ~= nil then
      local class = tostring(e.labels.class)
      out[class] = (out[class] or 0) + c:value()
    end
  end
  return out
end

local function collected(fam)
  for _, name in ipairs(collector_order) do
    local ok, samples = pcall(collectors[name])
    if not ok or type(samples) ~= "table" then
      fam.notes[#fam.notes + 1] = string.format("collector %s failed: %s", name, tostring(samples))
    else
      for _, s in ipairs(samples) do
        if type(s.name) == "string" and s.name:match("^[%a_:][%w_:]*$") and type(s.value) == "number"
            and (s.kind == "gauge" or s.kind == "counter") then
          fam:sample(s.name, s.kind, s.help or s.name, s.labels, s.value)
        else
          fam.notes[#fam.notes + 1] = string.format("collector %s: bad sample %s", name,
            tostring(s.name))
        end
      end
    end
  end
end

--- The exposition text of everything kbrun measures now (what GET
-- /metrics serves).
function M.render()
  local fam = new_families()
  builtins(fam)
  local by_class = M.errors_by_class()
  local classes = {}
  for class in pairs(by_class) do classes[#classes + 1] = class end
  table.sort(classes)
  for _, class in ipairs(classes) do
    fam:sample("kbrun_errors_total", "counter", "failed calls by error class (all *errors counters)",
      { class = class }, by_class[class])
  end
  collected(fam)
  for _, m, e in metrics.each() do
    local name = M.metric_name(e.name, e.kind)
    if e.kind == "histogram" then
      fam:histogram(name, "kbrun histogram " .. e.name .. " (seconds)", e.labels, m)
    else
      fam:sample(name, e.kind, "kbrun " .. e.kind .. " " .. e.name, e.labels, m:value())
    end
  end
  return fam:text()
end

-- ---- the exporter -----------------------------------------------------------------

--- Parses "HOST:PORT" ("[::1]:PORT"; ":PORT" means 127.0.0.1) -> host,
-- port; or nil and why.
function M.parse_listen(text)
  if type(text) ~= "string" then return nil, "wants HOST:PORT" end
  local host, port = text:match("^%[([^%]]+)%]:(%d+)$")
  if not host then host, port = text:match("^([^:]*):(%d+)$") end
  port = tonumber(port)
  if not host or not port or port > 65535 then
    return nil, string.format("wants HOST:PORT (e.g. 127.0.0.1:9464), got '%s'", text)
  end
  return host ~= "" and host or "127.0.0.1", math.tointeger(port)
end

local function handler(exporter)
  return function(req)
    if req.path ~= "/metrics" and req.path ~= "/" then
      return 404, "not found: kbrun serves /metrics\n", { ["content-type"] = "text/plain" }
    end
    if req.method ~= "GET" and req.method ~= "HEAD" then
      return 405, "only GET\n", { ["content-type"] = "text/plain", allow = "GET, HEAD" }
    end
    if req.path == "/" then
      return 200, '<html><body><a href="/metrics">kbrun metrics</a></body></html>\n',
        { ["content-type"] = "text/html" }
    end
    exporter.scrapes = exporter.scrapes + 1
    return 200, M.render(), { ["content-type"] = M.CONTENT_TYPE }
  end
end

local Exporter = {}
Exporter.__index = Exporter

--- Stops serving (waits until open connections are closed). Idempotent.
function Exporter:stop()
  local srv = self.server
  if not srv then return end
  self.server = nil
  srv:close()
end

--- prometheus.start{host = "127.0.0.1", port = 0} -> exporter {host, port,
-- url (of /metrics), scrapes, stop()}, serving GET /metrics on the
-- runtime's loop. Port 0 picks a free port (read exporter.port). A bind
-- failure raises an error of class "listen".
function M.start(opts)
  opts = opts or {}
  local self = setmetatable({ scrapes = 0 }, Exporter)
  self.server = kb.httpd.listen{ host = opts.host or "127.0.0.1", port = opts.port or 0,
    handler = handler(self), idle_timeout = 120 }
  self.host, self.port = self.server.host, self.server.port
  self.url = self.server.url .. "/metrics"
  return self
end

--- What the runner starts beside a scenario (args from src/main.c):
-- the exporter for args.metrics_listen (its address printed to stderr)
-- and, when stdout is a TTY and -q is not set, the live status line
-- (kb.live). Returns an object whose :stop() stops both. Raises on a bad
-- address or a failed bind.
function M.observe(args)
  local obs = { stop = function(o)
    if o.live then o.live:stop() o.live = nil end
    if o.exporter then o.exporter:stop() o.exporter = nil end
  end }
  if args.metrics_listen then
    local host, port = M.parse_listen(args.metrics_listen)
    if not host then error("--metrics-listen " .. port, 0) end
    local ok, exp = pcall(M.start, { host = host, port = port })
    if not ok then
      error(string.format("--metrics-listen %s: %s", args.metrics_listen, tostring(exp)), 0)
    end
    obs.exporter = exp
    io.stderr:write(string.format("kbrun: metrics on %s\n", exp.url))
  end
  if args.tty and not args.quiet and os.getenv("TERM") ~= "dumb" then
    obs.live = require("kb.live").start()
  end
  return obs
end

-- ---- the query client -------------------------------------------------------------

local ErrorMeta = getmetatable(kb.cancelled)

local function query_error(class, fmt, ...)
  return setmetatable({ class = class, message = "kb.prometheus: " .. string.format(fmt, ...) },
    ErrorMeta)
end

local function number_of(text)
  if text == "+Inf" or text == "Inf" then return math.huge end
  if text == "-Inf" then return -math.huge end
  if text == "NaN" then return 0 / 0 end
  return tonumber(text)
end

local function time_text(t)
  if type(t) == "number" then return string.format("%.3f", t) end
  return t
end

-- A [time, "value"] pair -> time, value; nil when malformed.
local function point(p)
  if type(p) ~= "table" or type(p[1]) ~= "number" or type(p[2]) ~= "string" then return nil end
  local v = number_of(p[2])
  if v == nil then return nil end
  return p[1], v
end

local function parse_data(data, what)
  if type(data) ~= "table" or type(data.resultType) ~= "string" then
    error(query_error("decode", "%s: the answer has no data.resultType", what), 0)
  end
  local kind, res = data.resultType, data.result
  local out = { type = kind }
  local function bad() error(query_error("decode", "%s: malformed %s", what, kind), 0) end
  if kind == "scalar" or kind == "string" then
    local t = type(res) == "table" and res[1]
    if type(t) ~= "number" then bad() end
    out.time = t
    out.value = kind == "scalar" and number_of(res[2]) or res[2]
    return out
  end
  if type(res) ~= "table" then bad() end
  out.result = {}
  for i, s in ipairs(res) do
    if type(s) ~= "table" then bad() end
    local metric = {}
    for k, v in pairs(type(s.metric) == "table" and s.metric or {}) do metric[k] = v end
    if kind == "vector" then
      local t, v = point(s.value)
      if not t then bad() end
      out.result[i] = { metric = metric, time = t, value = v }
    elseif kind == "matrix" then
      local values = {}
      for j, p in ipairs(type(s.values) == "table" and s.values or {}) do
        local t, v = point(p)
        if not t then bad() end
        values[j] = { t, v }
      end
      out.result[i] = { metric = metric, values = values }
    else
      error(query_error("decode", "%s: unknown resultType %s", what, kind), 0)
    end
  end
  return out
end

-- Prometheus's errorType values become classes; anything else is "query".
local ERROR_TYPES = { bad_data = true, execution = true, timeout = true, canceled = true,
  internal = true, unavailable = true, not_found = true }

local function api_get(base, path, params, opts, what)
  base = tostring(base):gsub("/+$", "")
  local real = (opts and opts.timeout or 30) * core.clock_speed() -- real seconds
  local ok, r = pcall(kb.http.get, base .. path, { query = params, timeout = real })
  if not ok then
    if kb.is_cancelled(r) then error(r, 0) end
    local e = query_error("unreachable", "%s: %s", what, type(r) == "table" and r.message or tostring(r))
    e.cause = type(r) == "table" and r.class or nil
    error(e, 0)
  end
  local okd, doc = pcall(json.decode, r.body)
  if not okd or type(doc) ~= "table" or type(doc.status) ~= "string" then
    error(query_error("http", "%s: HTTP %d, not a Prometheus API answer (is %s a Prometheus "
      .. "server?)", what, r.status, base), 0)
  end
  if doc.status ~= "success" then
    local class = ERROR_TYPES[doc.errorType] and doc.errorType or "query"
    local e = query_error(class, "%s: %s: %s", what, tostring(doc.errorType),
      tostring(doc.error))
    e.status = r.status
    error(e, 0)
  end
  local out = parse_data(doc.data, what)
  out.warnings = type(doc.warnings) == "table" and doc.warnings or nil
  return out
end

local function check_expr(fn, expr)
  if type(expr) ~= "string" or expr == "" then
    error(string.format("kb.prometheus.%s: expr must be a non-empty string", fn), 3)
  end
end

--- prometheus.query(url, expr [, time [, opts]]) -> {type = "vector",
-- result = { {metric = {labels}, value, time}, ... }} (or "scalar" /
-- "string" with value and time; "matrix" for a range selector). url is
-- Prometheus's base URL, time epoch seconds (default: the server's now),
-- opts.timeout real seconds (30). Failures raise errors of class
-- "unreachable" (transport; .cause has kb.http's class), "http" (not a
-- Prometheus answer), "decode", or Prometheus's errorType ("bad_data",
-- "execution", "timeout", "canceled", "internal", "unavailable",
-- "not_found").
function M.query(url, expr, time, opts)
  check_expr("query", expr)
  return api_get(url, "/api/v1/query", { query = expr, time = time_text(time) }, opts,
    string.format("query '%s'", expr))
end

--- prometheus.query_range(url, expr, start, stop, step [, opts]) ->
-- {type = "matrix", result = { {metric, values = { {t, v}, ... }}, ... }};
-- times epoch seconds, step seconds; errors as prometheus.query.
function M.query_range(url, expr, start, stop, step, opts)
  check_expr("query_range", expr)
  if type(start) ~= "number" or type(stop) ~= "number" or type(step) ~= "number" or step <= 0 then
    error("kb.prometheus.query_range: start, stop and step (> 0) must be numbers", 2)
  end
  return api_get(url, "/api/v1/query_range", { query = expr, start = time_text(start),
    ["end"] = time_text(stop), step = string.format("%g", step) }, opts,
    string.format("query_range '%s'", expr))
end

return M
