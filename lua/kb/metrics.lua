--- kb.metrics: the registry of everything a run measures, so reports can
-- enumerate it and shards can be merged exactly.
--
--   local metrics = require "kb.metrics"
--   metrics.histogram("run.create", { status = 200 }):record(0.134)
--   metrics.counter("http.request", { method = "GET", status = 200 }):inc()
--   metrics.gauge("runs.in_flight"):inc()
--   local snap = metrics.snapshot()         -- plain tables: JSON-serialisable
--   other_registry.merge_snapshot(snap)      -- counters add, histograms merge
--
-- A metric is identified by its name and labels. The key is the name followed
-- by the labels sorted by label name, e.g. `http.request{method=GET,status=200}`
-- (no braces without labels). Label values that are not plain words
-- (letters, digits, `_ . - / :`) are quoted with %q so keys stay unambiguous.
-- Asking twice for the same name and labels returns the same object; asking
-- for it as another kind of metric is an error.
local hist = require "kb.hist"

local M = {}

local entries = {} -- key -> { key, name, labels, kind, metric }

local NAME = "^[%a_][%w_%.%-:/]*$"
local LABEL = "^[%a_][%w_%.]*$"

local function label_value(k, v)
  local t = type(v)
  if t == "number" then
    if v ~= v then return nil, string.format("label '%s' is NaN", k) end
    if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then
      v = math.tointeger(v)
    end
    return tostring(v)
  elseif t == "boolean" then
    return tostring(v)
  elseif t == "string" then
    if v:match("^[%w_%.%-/:]+$") then return v end
    return string.format("%q", v)
  end
  return nil, string.format("label '%s' must be a string, number or boolean, got %s", k, t)
end

-- The key of name + labels and a private copy of the labels, or nil and why.
local function identify(name, labels)
  if type(name) ~= "string" or not name:match(NAME) then
    return nil, string.format("bad metric name %s (letters, digits, _ . - : /)",
      type(name) == "string" and string.format("%q", name) or type(name))
  end
  if labels == nil then return name, {} end
  if type(labels) ~= "table" then return nil, "labels must be a table, got " .. type(labels) end
  local names, copy = {}, {}
  for k, v in pairs(labels) do
    if type(k) ~= "string" or not k:match(LABEL) then
      return nil, string.format("bad label name %s", type(k) == "string" and string.format("%q", k) or tostring(k))
    end
    names[#names + 1] = k
    copy[k] = v
  end
  if #names == 0 then return name, copy end
  table.sort(names)
  local parts = {}
  for i, k in ipairs(names) do
    local v, why = label_value(k, labels[k])
    if not v then return nil, why end
    parts[i] = k .. "=" .. v
  end
  return name .. "{" .. table.concat(parts, ",") .. "}", copy
end

-- identify() for a public function: errors point at its caller's caller.
local function identify_or_raise(name, labels)
  local key, copy = identify(name, labels)
  if not key then error("kb.metrics: " .. copy, 4) end
  return key, copy
end

--- The registry key of a name and labels, e.g. `http.request{method=GET,status=200}`.
function M.key(name, labels)
  local key, why = identify(name, labels)
  if not key then error("kb.metrics: " .. why, 2) end
  return key
end

-- ---- counters and gauges ---------------------------------------------------

local function check_amount(n, what)
  if n == nil then return 1 end
  if type(n) ~= "number" or n ~= n then
    error(string.format("kb.metrics: %s amount must be a number, got %s", what, tostring(n)), 3)
  end
  return n
end

local Counter = { __name = "kb.metrics.counter" }
Counter.__index = Counter

--- counter:inc([n]) adds n (default 1, must be >= 0); returns the counter.
function Counter:inc(n)
  n = check_amount(n, "counter")
  if n < 0 then error("kb.metrics: a counter only goes up (inc by " .. n .. ")", 2) end
  self.n = self.n + n
  return self
end

--- counter:value() -> the current count.
function Counter:value() return self.n end

function Counter:__tostring() return string.format("counter %s = %s", self.key, self.n) end

local Gauge = { __name = "kb.metrics.gauge" }
Gauge.__index = Gauge

--- gauge:set(v), gauge:inc([n]), gauge:dec([n]) (n default 1); return the gauge.
function Gauge:set(v)
  if type(v) ~= "number" or v ~= v then
    error("kb.metrics: gauge value must be a number, got " .. tostring(v), 2)
  end
  self.n = v
  return self
end

function Gauge:inc(n)
  self.n = self.n + check_amount(n, "gauge")
  return self
end

function Gauge:dec(n)
  self.n = self.n - check_amount(n, "gauge")
  return self
end

--- gauge:value() -> the current value.
function Gauge:value() return self.n end

function Gauge:__tostring() return string.format("gauge %s = %s", self.key, self.n) end

-- ---- the registry ------------------------------------------------------------

local function lookup(kind, name, labels)
  local key, copy = identify_or_raise(name, labels)
  local e = entries[key]
  if e and e.kind ~= kind then
    error(string.format("kb.metrics: %s is a %s, not a %s", key, e.kind, kind), 3)
  end
  return e, key, copy
end

local function register(kind, key, name, labels, metric)
  entries[key] = { key = key, name = name, labels = labels, kind = kind, metric = metric }
  return metric
end

local function layout_differs(h, opts)
  local l = h:layout()
  local function differs(a, b)
    return type(b) ~= "number" or math.abs(a - b) > 1e-9 * math.abs(b)
  end
  return differs(l.lowest, opts.lowest or 1e-6) or differs(l.highest, opts.highest or 3600)
    or l.digits ~= (opts.digits or 3)
end

--- kb.metrics.histogram(name [, labels [, opts]]) -> kb.hist, created once.
-- opts is the kb.hist.new layout, used when the histogram is created; asking
-- again with a different layout is an error.
function M.histogram(name, labels, opts)
  local e, key, copy = lookup("histogram", name, labels)
  if e then
    if opts and layout_differs(e.metric, opts) then
      error(string.format("kb.metrics: histogram %s already exists with another layout", key), 2)
    end
    return e.metric
  end
  return register("histogram", key, name, copy, hist.new(opts))
end

--- kb.metrics.counter(name [, labels]) -> counter with :inc(n), :value().
function M.counter(name, labels)
  local e, key, copy = lookup("counter", name, labels)
  if e then return e.metric end
  return register("counter", key, name, copy, setmetatable({ key = key, n = 0 }, Counter))
end

--- kb.metrics.gauge(name [, labels]) -> gauge with :set(v), :inc(n), :dec(n), :value().
function M.gauge(name, labels)
  local e, key, copy = lookup("gauge", name, labels)
  if e then return e.metric end
  return register("gauge", key, name, copy, setmetatable({ key = key, n = 0 }, Gauge))
end

--- kb.metrics.get(name [, labels]) -> the metric and its kind, or nil.
function M.get(name, labels)
  local key, why = identify(name, labels)
  if not key then error("kb.metrics: " .. why, 2) end
  local e = entries[key]
  if e then return e.metric, e.kind end
  return nil
end

local function sorted_entries(kind)
  local list = {}
  for _, e in pairs(entries) do
    if kind == nil or e.kind == kind then list[#list + 1] = e end
  end
  table.sort(list, function(a, b) return a.key < b.key end)
  return list
end

--- kb.metrics.each([kind]) iterates over the metrics in key order, giving
-- key, metric, entry where entry = {key, name, labels, kind, metric}.
-- kind ("histogram", "counter", "gauge") filters.
function M.each(kind)
  local list, i = sorted_entries(kind), 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e.key, e.metric, e end
  end
end

local function copy_labels(labels)
  local t = {}
  for k, v in pairs(labels) do t[k] = v end
  return t
end

--- kb.metrics.snapshot() -> { version = 1, metrics = { ... } }, plain tables
-- only (JSON-serialisable), metrics in key order. Each metric has key, name,
-- labels, kind and either value (counter, gauge) or summary (h:summary())
-- and encoded (h:encode()) for a histogram.
function M.snapshot()
  local list = {}
  for i, e in ipairs(sorted_entries()) do
    local m = { key = e.key, name = e.name, labels = copy_labels(e.labels), kind = e.kind }
    if e.kind == "histogram" then
      m.summary = e.metric:summary()
      m.encoded = e.metric:encode()
    else
      m.value = e.metric:value()
    end
    list[i] = m
  end
  -- Marked as an array so an empty registry encodes as [] in JSON.
  return { version = 1, metrics = require("kb.json").array(list) }
end

local function snapshot_error(i, msg)
  error(string.format("kb.metrics.merge_snapshot: metric #%d: %s", i, msg), 4)
end

-- Checks one snapshot entry against the registry; returns a function that
-- applies it. Nothing is applied until every entry has been checked.
local function plan(i, m, pending)
  if type(m) ~= "table" then snapshot_error(i, "not a table") end
  local key, why = identify(m.name, m.labels)
  if not key then snapshot_error(i, why) end
  local e = entries[key] or pending[key]
  if e and e.kind ~= m.kind then
    snapshot_error(i, string.format("%s is a %s here, a %s in the snapshot", key, e.kind, tostring(m.kind)))
  end
  pending[key] = pending[key] or { kind = m.kind }
  if m.kind == "counter" or m.kind == "gauge" then
    local v = m.value
    if type(v) ~= "number" or v ~= v then snapshot_error(i, "value must be a number") end
    if m.kind == "counter" and v < 0 then snapshot_error(i, "counter value is negative") end
    return function() M[m.kind](m.name, m.labels):inc(v) end
  elseif m.kind == "histogram" then
    if type(m.encoded) ~= "string" then snapshot_error(i, "histogram without an encoding") end
    local okd, h = pcall(hist.decode, m.encoded)
    if not okd then snapshot_error(i, tostring(h)) end
    local a, b = e and (e.metric or e.hist):layout(), h:layout()
    if a and (a.lowest ~= b.lowest or a.highest ~= b.highest or a.digits ~= b.digits) then
      snapshot_error(i, string.format("histogram %s has another layout here", key))
    end
    pending[key].hist = pending[key].hist or h
    return function() M.histogram(m.name, m.labels, h:layout()):merge(h) end
  end
  snapshot_error(i, "unknown kind " .. tostring(m.kind))
end

--- kb.metrics.merge_snapshot(snap): adds a snapshot (from snapshot(), maybe
-- via JSON) into the registry exactly: counters add, histograms merge,
-- gauges add too (shards hold disjoint parts of the work, so the sum is the
-- whole). Validates the whole snapshot first: on error nothing is merged.
function M.merge_snapshot(snap)
  if type(snap) ~= "table" then error("kb.metrics.merge_snapshot: snapshot must be a table", 2) end
  if snap.version ~= 1 then
    error("kb.metrics.merge_snapshot: unsupported snapshot version " .. tostring(snap.version), 2)
  end
  if type(snap.metrics) ~= "table" then
    error("kb.metrics.merge_snapshot: snapshot has no metrics list", 2)
  end
  local steps, pending = {}, {}
  for i, m in ipairs(snap.metrics) do steps[i] = plan(i, m, pending) end
  for _, apply in ipairs(steps) do apply() end
end

--- kb.metrics.reset() zeroes every metric in place: objects held by callers
-- stay registered and valid.
function M.reset()
  for _, e in pairs(entries) do
    if e.kind == "histogram" then e.metric:reset() else e.metric.n = 0 end
  end
end

--- kb.metrics.clear() forgets every metric (held objects are detached).
function M.clear()
  entries = {}
end

return M
