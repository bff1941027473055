--- kb.report.overtime: report.html's "Over time" section, from result.json's
-- timeseries (kb.timeseries) and, for a storm at a rate, result.load:
--   latency and durations    p50/p90/p99 of the first plotted operation and
--                            the p99 of the next ones
--   requests and errors      client requests per second (every *.requests
--                            counter), those answered outside 2xx/3xx, and
--                            the open model's dropped arrivals
--   runs per interval        in flight (at the interval's end), created,
--                            finished per outcome (storm.* series)
--   offered vs achieved      arrivals and creates per second (open model)
--   create latency           raw and from the intended start (open model,
--                            when they differ: arrivals queued for a slot)
-- Stage boundaries (result.load: the schedule's start, each stage's end)
-- are dashed lines on every chart. Charts sit three to a row, so a storm's
-- page grows by one row (report_pages.sh bounds taxi_50runs' height).
local svg = require "kb.report.svg"

local M = {}

local format = string.format

--- Series seen in fewer intervals make no trend and are not drawn.
M.MIN_POINTS = 6
local MAX_OPS = 4 -- operations in the latency chart
local W, H = 390, 250 -- a third of a 1280 px window: text at its nominal size

-- {t -> delta} of a counter's rows.
local function by_t(rows, into, scale)
  into = into or {}
  for _, r in ipairs(type(rows) == "table" and rows or {}) do
    if type(r.t) == "number" and type(r.d) == "number" then into[r.t] = (into[r.t] or 0) + r.d * (scale or 1) end
  end
  return into
end

-- The interval starts from 0 to the last one any series has.
local function axis(ts)
  local last = -1
  for _, group in ipairs({ ts.histograms, ts.counters, ts.gauges }) do
    for _, rows in pairs(type(group) == "table" and group or {}) do
      for _, r in ipairs(rows) do
        if type(r.t) == "number" and r.t > last then last = r.t end
      end
    end
  end
  local out = {}
  for t = 0, last, ts.interval do out[#out + 1] = t end
  return out
end

-- Points of {t -> v} over the whole axis (missing intervals are 0).
local function points(ts, ticks, values, per_second)
  local pts = {}
  for _, t in ipairs(ticks) do
    local v = values[t] or 0
    pts[#pts + 1] = { x = t + ts.interval / 2, y = per_second and v / ts.interval or v }
  end
  return pts
end

-- Stage boundaries of result.load on the series' axis.
local function marks(doc)
  local load = type(doc.result) == "table" and type(doc.result.load) == "table" and doc.result.load or nil
  if not load or type(load.start) ~= "number" then return nil end
  local out = { { x = load.start, label = "arrivals begin" } }
  if type(load.stages) == "table" and #load.stages > 0 then
    local t = load.start
    for i, st in ipairs(load.stages) do
      t = t + (tonumber(st.duration) or 0)
      out[#out + 1] = { x = t, label = format("end of stage %d (%s runs/s)", i, tostring(st.target)) }
    end
  elseif type(load.window) == "number" then
    out[#out + 1] = { x = load.start + load.window, label = "arrivals end" }
  end
  return out
end

local function chart(o, mk, subtitle)
  o.width, o.height, o.marks = W, H, mk
  o.subtitle = subtitle
  o.x = { unit = "s", label = "time", zero = true, ticks = "auto" }
  return svg.lines(o)
end

local function latency_chart(ts, keys, mk, sub)
  local hs = type(ts.histograms) == "table" and ts.histograms or {}
  local series, first = {}, true
  for _, key in ipairs(keys) do
    local rows = hs[key]
    if type(rows) == "table" and #rows >= M.MIN_POINTS and #series < MAX_OPS + 2 then
      local qs = first and { "p50", "p90", "p99" } or { "p99" }
      for _, q in ipairs(qs) do
        local pts = {}
        for _, r in ipairs(rows) do
          if type(r.t) == "number" and type(r[q]) == "number" then pts[#pts + 1] = { x = r.t + ts.interval / 2, y = r[q] } end
        end
        if #pts >= M.MIN_POINTS then
          series[#series + 1] = { name = key .. " " .. q, points = pts, dash = (first and q ~= "p99") and "5 3" or nil }
        end
      end
      first = false
    end
  end
  if #series == 0 then return nil end
  local o = { series = series, title = "latency and durations", y = { unit = "s", label = "duration", scale = "log" } }
  return chart(o, mk, sub)
end

-- Requests (every counter named *.requests) and those with a status
-- outside 2xx/3xx, per second; dropped arrivals.
local function requests_chart(ts, ticks, mk, sub)
  local all, bad = {}, {}
  for key, rows in pairs(type(ts.counters) == "table" and ts.counters or {}) do
    local name = key:match("^([^{]*)")
    if name:match("requests$") then
      by_t(rows, all)
      local status = tonumber(key:match("[{,]status=\"?(%d+)"))
      if not status or status < 200 or status >= 400 then by_t(rows, bad) end
    end
  end
  if next(all) == nil then return nil end
  local series = { { name = "requests/s", points = points(ts, ticks, all, true) },
    { name = "errors/s (not 2xx/3xx)", points = points(ts, ticks, bad, true) } }
  local dropped = by_t(ts.counters["storm.arrivals.dropped"])
  if next(dropped) then series[#series + 1] = { name = "dropped arrivals/s", points = points(ts, ticks, dropped, true) } end
  if #series[1].points < 2 then return nil end
  return chart({ series = series, title = "requests and errors", y = { label = "rate (/s)", zero = true, scale = "linear" } }, mk, sub)
end

local function runs_chart(ts, ticks, mk, sub)
  local counters = type(ts.counters) == "table" and ts.counters or {}
  local created = counters["storm.created"]
  if type(created) ~= "table" then return nil end
  local series = {}
  local g = type(ts.gauges) == "table" and ts.gauges["storm.in_flight"] or nil
  if type(g) == "table" then
    local at, pts, v, i = {}, {}, 0, 1
    for _, r in ipairs(g) do at[r.t] = r.v end
    for _, t in ipairs(ticks) do
      if at[t] ~= nil then v = at[t] end -- an interval without a change held the value
      pts[i], i = { x = t + ts.interval / 2, y = v }, i + 1
    end
    series[#series + 1] = { name = "in flight", points = pts }
  end
  series[#series + 1] = { name = "created", points = points(ts, ticks, by_t(created)) }
  local states = {}
  for key in pairs(counters) do
    local st = key:match("^storm%.finished{state=\"?([^\"}]*)\"?}$")
    if st then states[#states + 1] = { st, key } end
  end
  table.sort(states, function(a, b) return a[1] < b[1] end)
  for _, s in ipairs(states) do
    series[#series + 1] = { name = s[1], points = points(ts, ticks, by_t(counters[s[2]])), dash = "5 3" }
  end
  if #ticks < 2 then return nil end
  return chart({ series = series, title = "runs per interval", y = { label = "runs", zero = true, scale = "linear" } }, mk, sub)
end

local function rate_chart(ts, ticks, mk, sub)
  local c = type(ts.counters) == "table" and ts.counters or {}
  if not (c["storm.arrivals.started"] or c["storm.arrivals.dropped"]) then return nil end
  local offered = by_t(c["storm.arrivals.started"])
  by_t(c["storm.arrivals.dropped"], offered)
  local series = { { name = "offered (arrivals/s)", points = points(ts, ticks, offered, true) },
    { name = "achieved (created/s)", points = points(ts, ticks, by_t(c["storm.created"]), true) } }
  if #ticks < 2 then return nil end
  return chart({ series = series, title = "offered vs achieved rate", y = { label = "runs/s", zero = true, scale = "linear" } }, mk, sub)
end

local function corrected_chart(ts, mk, sub)
  local hs = type(ts.histograms) == "table" and ts.histograms or {}
  local raw, co = hs["storm.arrivals.latency"], hs["storm.arrivals.latency_corrected"]
  if type(raw) ~= "table" or type(co) ~= "table" or #raw < 2 then return nil end
  -- only when they differ (arrivals waited for a slot: on_full = queue)
  local at, differs = {}, false
  for _, r in ipairs(raw) do at[r.t] = r.p99 end
  for _, r in ipairs(co) do
    if at[r.t] and r.p99 > at[r.t] * 1.01 then differs = true end
  end
  if not differs then return nil end
  local function pts(rows)
    local out = {}
    for _, r in ipairs(rows) do out[#out + 1] = { x = r.t + ts.interval / 2, y = r.p99 } end
    return out
  end
  return chart({ series = { { name = "p99 from the actual start", points = pts(raw) },
    { name = "p99 from the intended start", points = pts(co), dash = "5 3" } },
    title = "create latency (coordinated omission)", y = { unit = "s", label = "p99", scale = "log" } }, mk, sub)
end

--- The section's HTML ("" when the document has no time series to show).
-- keys: the metric keys of the report's plots, in their order (the
-- latency chart takes the first ones with enough intervals).
function M.section(doc, keys)
  local ts = type(doc.timeseries) == "table" and doc.timeseries or nil
  if not ts or type(ts.interval) ~= "number" or not (ts.interval > 0) then return "" end
  local ticks = axis(ts)
  local mk = marks(doc)
  local sub = format("per %s (timeseries.csv)%s", svg.format_value(ts.interval, "s"),
    mk and "; dashed: stage boundaries" or "")
  local charts = {}
  for _, c in ipairs({ latency_chart(ts, keys, mk, sub), requests_chart(ts, ticks, mk, sub),
    runs_chart(ts, ticks, mk, sub), rate_chart(ts, ticks, mk, sub), corrected_chart(ts, mk, sub) }) do
    if c then charts[#charts + 1] = c end
  end
  if #charts == 0 then return "" end
  local figs = {}
  for i, c in ipairs(charts) do figs[i] = format('<figure id="plot-overtime-%d">%s</figure>', i, c) end
  return format('<section id="overtime"><h2>Over time</h2><div class="plots3" '
    .. 'style="display:grid;grid-template-columns:repeat(auto-fill,minmax(%dpx,1fr));gap:14px">%s</div></section>',
    W - 30, table.concat(figs))
end

return M
