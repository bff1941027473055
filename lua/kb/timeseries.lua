--- kb.timeseries: what happened over time. Per interval of the scenario
-- clock (default 10 s) and per registered metric: for a histogram the
-- count, p50/p90/p99 and max of the values recorded in the interval, for a
-- counter its increase, for a gauge its value at the interval's end and
-- its highest value in it. kb.metrics feeds it (every h:record, c:inc and
-- gauge change of a registered metric, while a run's journal is attached); the runner starts
-- it and writes its snapshot as result.json's `timeseries` and
-- result/timeseries.csv.
--
-- An interval's percentiles are exact (nearest rank over its own values,
-- kept only until the interval closes); what stays is one small row per
-- interval and metric, so memory follows the run's length, not its calls.
-- Intervals where a metric saw nothing have no row.
local core = require "kb.core"
local ranks = require("kb.hist").ranks

local M = {}

local context = require "kb.context"

local state -- the run's collector; nil while stopped

-- A collector: its own series, intervals from its own start.
local function collector(interval, j)
  return { interval = interval, t0 = core.now(), hist = {}, count = {}, gauge = {}, order = {},
    journal = j, dirty = {} }
end

local function check_interval(interval)
  if type(interval) ~= "number" or not (interval > 0) then
    error("kb.timeseries: the interval must be a positive number of seconds", 3)
  end
end

-- Where a value of the calling task goes: the collector of its kb.context
-- (a sweep cell's, M.within), else the run's. Without a collector of its
-- own in use (nwithin 0) the context is not looked at.
local nwithin = 0
local function current()
  if nwithin == 0 then return state end
  return context.get("timeseries") or state
end

local journal_rows -- (j): set below

--- Starts collecting, with intervals of `interval` scenario seconds (10),
-- counted from now. Discards what an earlier start collected. With a
-- kb.journal j, the rows go to it as they change (at each of its flushes),
-- so M.replay rebuilds the series from the journal of a killed run.
function M.start(interval, j)
  interval = interval or 10
  check_interval(interval)
  state = collector(interval, j)
  -- --metrics-listen: the last complete interval's figures (M.samples)
  require("kb.prometheus").collector("timeseries", M.samples)
  if j then
    j:write({ k = "ts_start", interval = interval })
    local mine = state
    j:on_flush(function(journal) if state == mine and mine.journal then journal_rows(journal, mine) end end)
  end
end

function M.stop() state = nil end

--- A collector of its own (intervals of `interval` seconds, 10, from now)
-- for M.within: a sweep cell's series, apart from the run's and the other
-- cells'. M.snapshot(c) reads it.
function M.new(interval)
  interval = interval or 10
  check_interval(interval)
  return collector(interval)
end

--- Runs fn(...) with what the calling task (and the tasks it spawns)
-- records going to collector c instead of the run's; returns fn's results.
function M.within(c, fn, ...)
  local saved = context.push({ timeseries = c })
  nwithin = nwithin + 1
  local res = table.pack(pcall(fn, ...))
  nwithin = nwithin - 1
  context.restore(saved)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

--- Writes the rows changed since the journal's last flush to it and stops
-- journaling (collecting goes on): the runner calls it before the
-- journal's last record.
function M.detach()
  if state and state.journal then
    journal_rows(state.journal, state, true)
    state.journal = nil
  end
end

--- The scenario-clock time (kb.now) the intervals count from, or nil
-- when stopped: a row's t is seconds since it.
function M.origin() return state and state.t0 end
function M.active() return state ~= nil end

local function bucket_of(st, now)
  return math.floor((now - st.t0) / st.interval)
end

local function series(st, tbl, key, kind)
  local s = tbl[key]
  if not s then
    s = { rows = {}, key = key, kind = kind, journaled = 0, iv = st.interval }
    tbl[key] = s
    st.order[#st.order + 1] = key
  end
  if st.journal and not s.dirty then
    s.dirty = true
    st.dirty[#st.dirty + 1] = s
  end
  return s
end

-- The row of an interval: the nearest-rank p50, p90, p99 and the max of
-- its values (kb.hist.ranks: sorted in C, the values left as they are, so
-- an open interval's row is made the same way).
-- Weighted values (h:record(v, n) with n ~= 1) count as ranks over counts.
local function interval_row(s)
  local count, p50, p90, p99, max = ranks(s.values, s.weights, 0.5, 0.9, 0.99)
  return { t = s.bucket * s.iv, count = count, p50 = p50, p90 = p90, p99 = p99, max = max }
end

local function close(s)
  if s.values and #s.values > 0 then s.rows[#s.rows + 1] = interval_row(s) end
  s.values, s.weights, s.bucket = nil, nil, nil
end

--- A histogram value (n times): called by kb.metrics.
function M.note_value(key, v, n)
  local st = current()
  if not st then return end
  local s = series(st, st.hist, key, "h")
  local b = bucket_of(st, core.now())
  if s.bucket ~= b then
    close(s)
    s.bucket, s.values = b, {}
  end
  local vals = s.values
  vals[#vals + 1] = v
  if n ~= nil and n ~= 1 then
    s.weights = s.weights or {}
    s.weights[#vals] = n
  end
end

--- A counter increase: called by kb.metrics.
function M.note_count(key, d)
  local st = current()
  if not st then return end
  local s = series(st, st.count, key, "c")
  local b = bucket_of(st, core.now())
  local last = s.rows[#s.rows]
  if last and last.i == b then
    last.d = last.d + d
  else
    s.rows[#s.rows + 1] = { i = b, t = b * st.interval, d = d }
  end
end

--- A gauge's new value: called by kb.metrics.
function M.note_gauge(key, v)
  local st = current()
  if not st then return end
  local s = series(st, st.gauge, key, "g")
  local b = bucket_of(st, core.now())
  local last = s.rows[#s.rows]
  if last and last.i == b then
    last.v = v
    if v > last.max then last.max = v end
  else
    s.rows[#s.rows + 1] = { i = b, t = b * st.interval, v = v, max = v }
  end
end


-- ---- the journal ------------------------------------------------------------------
--
-- Records (docs/results.md): {"k":"ts_start","interval":10}, then per row
-- that changed since the last flush {"k":"ts","m":key,"s":"h"|"c"|"g","t":..}
-- with the row's fields (count, p50, p90, p99, max | d | v, max). A later
-- record of the same series and t replaces an earlier one: an open
-- interval is written again as it grows (a histogram's at most every
-- M.OPEN_ROWS_EVERY real seconds, and when it closes).

local function row_record(s, r)
  return { k = "ts", m = s.key, s = s.kind, t = r.t, count = r.count, p50 = r.p50, p90 = r.p90,
    p99 = r.p99, max = r.max, d = r.d, v = r.v }
end

--- Real seconds between two journalings of a histogram's open interval:
-- its row is computed from all its values (a sort), so it is written at
-- most this often, not at every flush (a flush comes every 8,192 values).
M.OPEN_ROWS_EVERY = 1
--- The share of the process's CPU the open rows may take: when sorting
-- them took c CPU seconds, the next are written c / share seconds later
-- at the earliest (under load an interval holds 100,000s of values, and
-- sorting them all every second cost a storm 10% of its CPU, bench/kfp.md).
M.OPEN_ROWS_CPU_SHARE = 0.05

--- Real seconds from one journaling of the open rows to the next, when
-- the last took `cpu` CPU seconds.
function M.open_rows_wait(cpu)
  return math.max(M.OPEN_ROWS_EVERY, (cpu or 0) / M.OPEN_ROWS_CPU_SHARE)
end

journal_rows = function(j, st, force)
  local list, keep = st.dirty, {}
  st.dirty = {}
  local now = core.time()
  local open_due = force or now - (st.open_at or -math.huge) >= M.open_rows_wait(st.open_cpu)
  local cpu0
  if open_due then st.open_at, cpu0 = now, os.clock() end
  for _, s in ipairs(list) do
    s.dirty = false
    -- a counter's or gauge's last row changes in place: written again
    local from = s.kind == "h" and s.journaled + 1 or math.max(1, s.journaled)
    for i = from, #s.rows do j:write(row_record(s, s.rows[i])) end
    s.journaled = #s.rows
    if s.kind == "h" and s.values and #s.values > 0 then
      if open_due then
        j:write(row_record(s, interval_row(s)))
      else
        s.dirty, keep[#keep + 1] = true, s -- its open interval at a later flush
      end
    end
  end
  st.dirty = keep
  if open_due then st.open_cpu = os.clock() - cpu0 end
end

--- The series of a journal's records (as M.snapshot gives them), or nil
-- when they hold none (no "ts_start").
function M.replay(records)
  local out, rows
  local into = { h = "histograms", c = "counters", g = "gauges" }
  for _, r in ipairs(records) do
    if r.k == "ts_start" then
      out = { interval = r.interval, histograms = {}, counters = {}, gauges = {} }
      rows = { h = {}, c = {}, g = {} }
    elseif r.k == "ts" and out and into[r.s] and type(r.m) == "string" and type(r.t) == "number" then
      local by_t = rows[r.s][r.m] or {}
      rows[r.s][r.m] = by_t
      local row = { t = r.t }
      if r.s == "h" then
        row.count, row.p50, row.p90, row.p99, row.max = r.count, r.p50, r.p90, r.p99, r.max
      elseif r.s == "c" then
        row.d = r.d
      else
        row.v, row.max = r.v, r.max
      end
      by_t[r.t] = row
    end
  end
  if not out then return nil end
  for kind, keys in pairs(rows) do
    for key, by_t in pairs(keys) do
      local list = {}
      for _, row in pairs(by_t) do list[#list + 1] = row end
      table.sort(list, function(a, b) return a.t < b.t end)
      out[into[kind]][key] = list
    end
  end
  return out
end

--- The series so far: {interval, histograms = {[key] = {{t, count, p50,
-- p90, p99, max}, ...}}, counters = {[key] = {{t, d}, ...}}, gauges =
-- {[key] = {{t, v, max}, ...}} (v: the value at the interval's end; an
-- interval without a change has no row: the value held)}, t the start
-- of each interval in seconds since start(); open intervals are included
-- as they stand. Of collector c (M.new), default the run's; nil when
-- stopped.
function M.snapshot(c)
  local st = c or state
  if not st then return nil end
  local out = { interval = st.interval, histograms = {}, counters = {}, gauges = {} }
  for key, s in pairs(st.hist) do
    local rows = {}
    for i, r in ipairs(s.rows) do rows[i] = r end
    if s.values and #s.values > 0 then rows[#rows + 1] = interval_row(s) end
    out.histograms[key] = rows
  end
  for key, s in pairs(st.count) do
    local rows = {}
    for i, r in ipairs(s.rows) do rows[i] = { t = r.t, d = r.d } end
    out.counters[key] = rows
  end
  for key, s in pairs(st.gauge) do
    local rows = {}
    for i, r in ipairs(s.rows) do rows[i] = { t = r.t, v = r.v, max = r.max } end
    out.gauges[key] = rows
  end
  return out
end

--- The last complete interval's figures as kb.prometheus collector
-- samples (what --metrics-listen serves): kbrun_interval_seconds, and per
-- series (label metric = its key) kbrun_interval_count and
-- kbrun_interval_p50/p90/p99/max_seconds of a histogram,
-- kbrun_interval_increase of a counter, kbrun_interval_gauge (its value at
-- the interval's end) and kbrun_interval_gauge_max of a gauge. A series
-- that saw nothing in that interval has count / increase 0 (a gauge: its
-- last value). Empty when stopped.
function M.samples()
  if not state then return {} end
  local iv = state.interval
  local last = (bucket_of(state, core.now()) - 1) * iv -- the last complete interval's start
  local out = { { name = "kbrun_interval_seconds", kind = "gauge", value = iv,
    help = "the length of kbrun's time series intervals (scenario seconds)" },
    { name = "kbrun_interval_start_seconds", kind = "gauge", value = math.max(last, 0),
      help = "the start of the last complete interval (scenario seconds since the run's start)" } }
  if last < 0 then return out end
  local function add(name, help, key, v)
    out[#out + 1] = { name = name, kind = "gauge", help = help, labels = { metric = key }, value = v }
  end
  for key, s in pairs(state.hist) do
    local row
    for i = #s.rows, 1, -1 do
      if s.rows[i].t == last then row = s.rows[i] break end
      if s.rows[i].t < last then break end
    end
    if not row and s.values and #s.values > 0 and s.bucket * iv == last then row = interval_row(s) end
    add("kbrun_interval_count", "values a histogram recorded in the last complete interval", key, row and row.count or 0)
    if row then
      for _, q in ipairs({ "p50", "p90", "p99", "max" }) do
        add("kbrun_interval_" .. q .. "_seconds", q .. " of a histogram in the last complete interval", key, row[q])
      end
    end
  end
  for key, s in pairs(state.count) do
    local d = 0
    for i = #s.rows, 1, -1 do
      if s.rows[i].t == last then d = s.rows[i].d break end
      if s.rows[i].t < last then break end
    end
    add("kbrun_interval_increase", "a counter's increase in the last complete interval", key, d)
  end
  for key, s in pairs(state.gauge) do
    local row
    for i = #s.rows, 1, -1 do
      if s.rows[i].t <= last then row = s.rows[i] break end
    end
    if row then
      add("kbrun_interval_gauge", "a gauge's value at the end of the last complete interval", key, row.v)
      add("kbrun_interval_gauge_max", "a gauge's highest value in the last complete interval", key,
        row.t == last and row.max or row.v)
    end
  end
  return out
end

--- The snapshot as CSV text: metric,kind,t,count,p50,p90,p99,max,delta,value
-- (a gauge's row: max and value).
function M.csv(snap)
  local lines = { "metric,kind,t,count,p50,p90,p99,max,delta,value" }
  local function q(s) return s:find('[,"\n]') and ('"' .. s:gsub('"', '""') .. '"') or s end
  local keys = {}
  for k in pairs(snap.histograms) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    for _, r in ipairs(snap.histograms[k]) do
      lines[#lines + 1] = string.format("%s,histogram,%.17g,%d,%.17g,%.17g,%.17g,%.17g,,", q(k), r.t,
        r.count, r.p50, r.p90, r.p99, r.max)
    end
  end
  keys = {}
  for k in pairs(snap.counters) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    for _, r in ipairs(snap.counters[k]) do
      lines[#lines + 1] = string.format("%s,counter,%.17g,,,,,,%.17g,", q(k), r.t, r.d)
    end
  end
  keys = {}
  for k in pairs(snap.gauges or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    for _, r in ipairs(snap.gauges[k]) do
      lines[#lines + 1] = string.format("%s,gauge,%.17g,,,,,%.17g,,%.17g", q(k), r.t, r.max, r.v)
    end
  end
  return table.concat(lines, "\n") .. "\n"
end

return M
