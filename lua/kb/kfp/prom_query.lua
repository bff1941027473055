--- kb.kfp.prom_query: the storm's server-side figures from a Prometheus
-- server (storm parameter prometheus_url) instead of two /metrics scrapes,
-- and the storm's live series (runs by state, progress).
--
--   local pq = require "kb.kfp.prom_query"
--   local f = pq.figures("http://127.0.0.1:9090", t_start, t_stop)
--   f.grpc["run.create"].p99    -- KFP's grpc_server_handling_seconds
--   f.apiserver[1]              -- {verb, resource, count, p50, p90, p99}
--
-- Over the run's window [start, stop] (wall clock, as Prometheus stamps its
-- samples) it asks for increase(...[W]) at `stop`, W = the window rounded
-- up to seconds: histogram_quantile(0.5/0.9/0.99) of KFP's
-- grpc_server_handling_seconds per grpc_method, their counts, sums and
-- grpc_server_handled_total codes, and the Kubernetes API server's
-- apiserver_request_duration_seconds per verb and resource. The range
-- reaches M.MARGIN seconds before the start, to hold the scrape before
-- the run's first calls; it must span at least two of Prometheus's scrapes
-- of the server; quantiles are estimates from buckets, as PromQL computes
-- them.
local kb = require "kb"
local json = require "kb.json"
local log = require "kb.log"
local prom = require "kb.kfp.prom"
local prometheus = require "kb.prometheus"

local M = {}

M.QUANTILES = { { 0.5, "p50" }, { 0.9, "p90" }, { 0.99, "p99" } }

--- Seconds the queried range reaches back before the run's start, so it
-- holds the last scrape before the run: increase() only sees the calls
-- between two samples inside its range, and calls made right at the start
-- (a storm's creates) came after the last in-range-less sample otherwise.
M.MARGIN = 60

--- How many (verb, resource) rows of the API server are kept (busiest first).
M.APISERVER_ROWS = 20

local function window_text(seconds)
  return string.format("%ds", math.max(1, math.ceil(seconds)))
end

-- The finite value of a vector sample, or nil (histogram_quantile gives NaN
-- for a series without observations).
local function finite(v)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return nil end
  return v
end

local function vector(url, expr, at)
  return prometheus.query(url, expr, at).result or {}
end

--- The PromQL expressions of a window `w` ("300s"): a table of named
-- expressions ({grpc_p50 = ..., apiserver_count = ...}).
function M.expressions(w)
  local out = {
    grpc_count = string.format(
      "sum by (grpc_method, grpc_service) (increase(grpc_server_handling_seconds_count[%s]))", w),
    grpc_sum = string.format(
      "sum by (grpc_method) (increase(grpc_server_handling_seconds_sum[%s]))", w),
    grpc_codes = string.format(
      "sum by (grpc_method, grpc_code) (increase(grpc_server_handled_total[%s]))", w),
    apiserver_count = string.format(
      "sum by (verb, resource) (increase(apiserver_request_duration_seconds_count[%s]))", w),
  }
  for _, q in ipairs(M.QUANTILES) do
    out["grpc_" .. q[2]] = string.format("histogram_quantile(%g, sum by (le, grpc_method) "
      .. "(rate(grpc_server_handling_seconds_bucket[%s])))", q[1], w)
    out["apiserver_" .. q[2]] = string.format("histogram_quantile(%g, sum by (le, verb, resource) "
      .. "(rate(apiserver_request_duration_seconds_bucket[%s])))", q[1], w)
  end
  return out
end

-- KFP's figures per op, the shape kb.kfp.prom.grpc gives.
local function grpc_figures(url, ex, at)
  local out = {}
  local function entry(method, service)
    local op = prom.op_name(method)
    local e = out[op]
    if not e then
      e = { method = method, service = service, count = 0, codes = {}, errors = 0 }
      out[op] = e
    end
    return e
  end
  for _, s in ipairs(vector(url, ex.grpc_count, at)) do
    if s.metric.grpc_method and finite(s.value) and s.value > 0 then
      local e = entry(s.metric.grpc_method, s.metric.grpc_service)
      e.count = e.count + s.value
    end
  end
  for _, s in ipairs(vector(url, ex.grpc_sum, at)) do
    local e = s.metric.grpc_method and out[prom.op_name(s.metric.grpc_method)]
    if e and finite(s.value) then e.sum = (e.sum or 0) + s.value end
  end
  for _, q in ipairs(M.QUANTILES) do
    for _, s in ipairs(vector(url, ex["grpc_" .. q[2]], at)) do
      local e = s.metric.grpc_method and out[prom.op_name(s.metric.grpc_method)]
      if e then e[q[2]] = finite(s.value) end
    end
  end
  for _, s in ipairs(vector(url, ex.grpc_codes, at)) do
    local e = s.metric.grpc_method and out[prom.op_name(s.metric.grpc_method)]
    if e and finite(s.value) and s.value > 0 then
      local code = s.metric.grpc_code or "?"
      e.codes[code] = (e.codes[code] or 0) + s.value
      if code ~= "OK" then e.errors = e.errors + s.value end
    end
  end
  for _, e in pairs(out) do
    e.mean = e.sum and e.count > 0 and e.sum / e.count or nil
  end
  return out
end

-- The API server's rows, busiest first.
local function apiserver_figures(url, ex, at)
  local rows, by = {}, {}
  local function key(m) return tostring(m.verb) .. " " .. tostring(m.resource) end
  for _, s in ipairs(vector(url, ex.apiserver_count, at)) do
    if finite(s.value) and s.value > 0 then
      local r = { verb = s.metric.verb, resource = s.metric.resource, count = s.value }
      rows[#rows + 1], by[key(s.metric)] = r, r
    end
  end
  for _, q in ipairs(M.QUANTILES) do
    for _, s in ipairs(vector(url, ex["apiserver_" .. q[2]], at)) do
      local r = by[key(s.metric)]
      if r then r[q[2]] = finite(s.value) end
    end
  end
  table.sort(rows, function(a, b)
    if a.count ~= b.count then return a.count > b.count end
    return tostring(a.verb) .. tostring(a.resource) < tostring(b.verb) .. tostring(b.resource)
  end)
  while #rows > M.APISERVER_ROWS do rows[#rows] = nil end
  return json.array(rows)
end

--- pq.figures(url, start, stop) -> { available = true, source =
-- "prometheus", url, window = {start, stop, seconds, range}, grpc = {[op] =
-- {method, service, count, sum, mean, p50, p90, p99, codes, errors}},
-- apiserver = { {verb, resource, count, p50, p90, p99}, ... } }, or
-- { available = false, source = "prometheus", reason } when Prometheus
-- cannot answer (the reason names the error class and the query).
function M.figures(url, start, stop)
  local range = window_text(stop - start + M.MARGIN)
  local out = { source = "prometheus", url = url,
    window = { start = start, stop = stop, seconds = stop - start, range = range } }
  local ex = M.expressions(range)
  local ok, grpc = pcall(grpc_figures, url, ex, stop)
  if not ok then
    if kb.is_cancelled(grpc) then error(grpc, 0) end
    out.available = false
    out.reason = string.format("%s (%s)", type(grpc) == "table" and grpc.message or tostring(grpc),
      type(grpc) == "table" and grpc.class or "lua")
    log.warn("storm: prometheus_url: %s", out.reason)
    return out
  end
  out.available, out.grpc = true, grpc
  local oka, api = pcall(apiserver_figures, url, ex, stop)
  if oka then
    out.apiserver = api
  else
    if kb.is_cancelled(api) then error(api, 0) end
    out.apiserver_error = type(api) == "table" and api.message or tostring(api)
  end
  if next(grpc) == nil then
    log.warn("storm: prometheus_url: no grpc_server_handling_seconds in the run's window "
      .. "(%s): does Prometheus scrape the KFP API server, at least twice during the run?", range)
  end
  return out
end

--- The storm session's server metrics in prometheus_url mode: figures of
-- the window from the session's start to now (wall clock).
function M.server_metrics(s)
  return M.figures(s.p.prometheus_url, s.started_wall, kb.time())
end

-- ---- the storm's live series -----------------------------------------------------

--- The state a run is in for the live series: KFP's state once created,
-- else "Creating" / "NotCreated"; "TimedOut" once it ran out of time.
function M.run_state(run)
  if run.dropped then return "Dropped" end
  if not run.id then return run.create_error and "NotCreated" or "Creating" end
  if run.timed_out then return "TimedOut" end
  return run.state or "Unknown"
end

--- Publishes a storm session's live figures: the exporter's
-- kbrun_storm_runs{state} and kbrun_storm_runs_requested, and the live
-- view's progress (runs finished / requested). While kb.live draws its
-- line, the storm's own progress line stays quiet (its milestones still log).
function M.publish(s)
  prometheus.collector("storm", function()
    local by, samples = {}, {}
    for _, run in ipairs(s.runs) do
      local st = M.run_state(run)
      by[st] = (by[st] or 0) + 1
    end
    for st, n in pairs(by) do
      samples[#samples + 1] = { name = "kbrun_storm_runs", kind = "gauge",
        help = "the storm's runs by state", labels = { state = st }, value = n }
    end
    samples[#samples + 1] = { name = "kbrun_storm_runs_requested", kind = "gauge",
      help = "runs the storm creates", value = #s.runs }
    return samples
  end)
  local live = require "kb.live"
  live.progress(function()
    local done = 0
    for _, run in ipairs(s.runs) do
      if run.finished or run.timed_out or run.create_error or run.dropped then done = done + 1 end
    end
    return done, #s.runs, "runs"
  end)
  if live.running() and s.progress then s.progress.tty = false end
end

-- ---- the report section -----------------------------------------------------------

local function esc(v) return require("kb.report.svg").escape(tostring(v)) end

local function seconds(v)
  if v == nil or v == json.null then return "-" end
  if v < 1 then return esc(string.format("%.1f ms", v * 1000)) end
  return esc(string.format("%.2f s", v))
end

local function count(v)
  if v == nil or v == json.null then return "-" end
  return esc(string.format("%.0f", v))
end

local function html_table(header, rows)
  local out = { '<table class="grid"><thead><tr>' }
  for _, h in ipairs(header) do out[#out + 1] = "<th>" .. esc(h) .. "</th>" end
  out[#out + 1] = "</tr></thead><tbody>"
  for _, row in ipairs(rows) do
    out[#out + 1] = "<tr><td>" .. table.concat(row, "</td><td>") .. "</td></tr>"
  end
  out[#out + 1] = "</tbody></table>"
  return table.concat(out)
end

--- The report.html section of a storm result whose server_metrics came
-- from Prometheus: server_vs_client rows (client p50/p99 next to KFP's
-- gRPC handling quantiles) and the API server's latency.
function M.report_section(r)
  local sm = r.server_metrics
  local title = "Server-side vs client-side (Prometheus)"
  if not sm.available then
    return { title = title, html = "<p class=\"muted\">No server metrics from Prometheus: "
      .. esc(sm.reason or "?") .. "</p>" }
  end
  local rows = {}
  for _, row in ipairs(r.server_vs_client or {}) do
    local c, sv = row.client or {}, row.server or {}
    rows[#rows + 1] = { esc(row.op), count(c.count), seconds(c.p50), seconds(c.p99),
      esc(sv.method or "-"), count(sv.count), seconds(sv.p50), seconds(sv.p90), seconds(sv.p99),
      count(sv.errors) }
  end
  local w = sm.window or {}
  local html = { string.format("<p>Client: kbrun's timed calls (round trip). Server: "
    .. "<code>grpc_server_handling_seconds</code> from Prometheus at %s over the run's %s "
    .. "window (every call, polls and cleanup included; quantiles estimated in buckets by "
    .. "<code>histogram_quantile</code>).</p>", esc(sm.url or "?"), esc(w.range or "?")),
    html_table({ "op", "client calls", "client p50", "client p99", "gRPC method", "server calls",
      "server p50", "server p90", "server p99", "server errors" }, rows) }
  local api = {}
  for _, a in ipairs(sm.apiserver or {}) do
    api[#api + 1] = { esc(a.verb or "-"), esc(a.resource or "-"), count(a.count), seconds(a.p50),
      seconds(a.p90), seconds(a.p99) }
  end
  if #api > 0 then
    html[#html + 1] = "<p>Kubernetes API server: <code>apiserver_request_duration_seconds</code> "
      .. "in the same window, busiest first.</p>"
    html[#html + 1] = html_table({ "verb", "resource", "requests", "p50", "p90", "p99" }, api)
  elseif sm.apiserver_error then
    html[#html + 1] = "<p class=\"muted\">API server latency: " .. esc(sm.apiserver_error) .. "</p>"
  else
    html[#html + 1] = "<p class=\"muted\">No apiserver_request_duration_seconds in the window.</p>"
  end
  return { title = title, html = table.concat(html) }
end

return M
