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
--
-- Scopes: kb.metrics.scope(name) is a registry of its own; inside
-- scope:run(fn) every call here (of that task and of the tasks it spawns)
-- works on the scope, and scope:close() adds it into its parent. kb.sweep
-- runs each cell in one, so cells side by side keep their figures apart.
--
-- Journal: kb.metrics.set_journal(j) (kbrun's runner does it with
-- output/journal.jsonl) sends every measurement of a registered metric to
-- the kb.journal j, so the results can be rebuilt from it (kb.results.rebuild):
-- a definition per metric when it is registered, then batches written at
-- each flush of j (see "the journal sink" below for the records).
local hist = require "kb.hist"
local timeseries = require "kb.timeseries"

local M = {}

-- Registries: the root one (the process's; the runner's journal and
-- result.json) and scopes (M.scope), each {entries = {key -> {key, name,
-- labels, kind, metric}}}. Every function below works on the calling
-- task's registry: the scope in its kb.context (inherited by the tasks it
-- spawns), else the root.
local context = require "kb.context"
local root = { name = "root", entries = {} }
local function current() return context.get("metrics") or root end
local sink        -- the kb.journal measurements go to (set_journal), or nil
local through     -- sink writes every record at once (no batching)
local journal_metric, journal_event -- (metric, delta), (record or entry): set below

-- The C methods of every kb.hist (set_journal wraps some of them).
local hist_methods = getmetatable(hist.new()).__index
local c_record, c_corrected = hist_methods.record, hist_methods.record_corrected
local c_merge, c_reset = hist_methods.merge, hist_methods.reset

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

-- Names, label names and label values already found valid: every call of
-- kb.metrics.counter(name, labels) on a hot path (kb.kfp counts each
-- request) then builds its key without pattern matching. Bounded: the
-- values' memo starts again past VALUES_MAX entries.
local good_names, good_labels = {}, {}
local encoded_values, n_encoded, VALUES_MAX = {}, 0, 4096

local function valid_name(name)
  if good_names[name] then return true end
  if type(name) ~= "string" or not name:match(NAME) then return false end
  good_names[name] = true
  return true
end

local function encoded_value(k, v)
  if type(v) == "string" then
    local e = encoded_values[v]
    if e then return e end
    e = label_value(k, v)
    if n_encoded >= VALUES_MAX then encoded_values, n_encoded = {}, 0 end
    encoded_values[v], n_encoded = e, n_encoded + 1
    return e
  end
  return label_value(k, v)
end

-- The key of name + labels and a private copy of the labels, or nil and why.
local function identify(name, labels)
  if not valid_name(name) then
    return nil, string.format("bad metric name %s (letters, digits, _ . - : /)",
      type(name) == "string" and string.format("%q", name) or type(name))
  end
  if labels == nil then return name, {} end
  if type(labels) ~= "table" then return nil, "labels must be a table, got " .. type(labels) end
  local names, copy, n = {}, {}, 0
  for k, v in pairs(labels) do
    if not good_labels[k] then
      if type(k) ~= "string" or not k:match(LABEL) then
        return nil, string.format("bad label name %s", type(k) == "string" and string.format("%q", k) or tostring(k))
      end
      good_labels[k] = true
    end
    n = n + 1
    names[n] = k
    copy[k] = v
  end
  if n == 0 then return name, copy end
  if n == 2 then
    if names[2] < names[1] then names[1], names[2] = names[2], names[1] end
  elseif n > 2 then
    table.sort(names)
  end
  local parts = {}
  for i = 1, n do
    local k = names[i]
    local v, why = encoded_value(k, labels[k])
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
  if sink then
    journal_metric(self, n)
    if n > 0 then timeseries.note_count(self.key, n) end
  end
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
  if sink then
    journal_metric(self)
    timeseries.note_gauge(self.key, self.n)
  end
  return self
end

function Gauge:inc(n)
  self.n = self.n + check_amount(n, "gauge")
  if sink then
    journal_metric(self)
    timeseries.note_gauge(self.key, self.n)
  end
  return self
end

function Gauge:dec(n)
  self.n = self.n - check_amount(n, "gauge")
  if sink then
    journal_metric(self)
    timeseries.note_gauge(self.key, self.n)
  end
  return self
end

--- gauge:value() -> the current value.
function Gauge:value() return self.n end

function Gauge:__tostring() return string.format("gauge %s = %s", self.key, self.n) end

-- ---- the registry ------------------------------------------------------------

local function lookup(kind, name, labels)
  local key, copy = identify_or_raise(name, labels)
  local e = current().entries[key]
  if e and e.kind ~= kind then
    error(string.format("kb.metrics: %s is a %s, not a %s", key, e.kind, kind), 3)
  end
  return e, key, copy
end

local registered = 0 -- registrations so far (the order of M.order)

-- The key of every histogram (a scope's too): what its values are
-- noted under in kb.timeseries.
local hist_keys = setmetatable({}, { __mode = "k" })

local function register(kind, key, name, labels, metric)
  registered = registered + 1
  if kind == "histogram" then hist_keys[metric] = key end
  local e = { key = key, name = name, labels = labels, kind = kind, metric = metric, seq = registered }
  local reg = current()
  reg.entries[key] = e
  if sink and reg == root then journal_event(e) end -- a scope's reach the journal when merged
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
  local e = current().entries[key]
  if e then return e.metric, e.kind end
  return nil
end

local function sorted_entries(kind, reg)
  local list = {}
  for _, e in pairs((reg or current()).entries) do
    if kind == nil or e.kind == kind then list[#list + 1] = e end
  end
  table.sort(list, function(a, b) return a.key < b.key end)
  return list
end

--- kb.metrics.order() -> {[key] = n}: the order in which the calling
-- task's registry first saw each metric (histograms and counters are
-- registered at their first record, so this is the order of the
-- scenario's steps); kb.report.summary prints its rows in it.
function M.order()
  local out = {}
  for key, e in pairs(current().entries) do out[key] = e.seq end
  return out
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
  return M.snapshot_of(sorted_entries())
end

--- kb.metrics.snapshot_of(list) -> the snapshot of a list of entries
-- {key, name, labels, kind, metric} sorted by key, registered or not (a
-- registry rebuilt from a journal).
function M.snapshot_of(entry_list)
  local list = {}
  for i, e in ipairs(entry_list) do
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
  local e = current().entries[key] or pending[key]
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
  local reg = current()
  if sink and reg == root then journal_event({ k = "reset" }) end
  for _, e in pairs(reg.entries) do
    if e.kind == "histogram" then c_reset(e.metric) else e.metric.n = 0 end
  end
end

--- kb.metrics.clear() forgets every metric (held objects are detached).
function M.clear()
  local reg = current()
  if sink and reg == root then journal_event({ k = "clear" }) end
  reg.entries = {}
end

-- ---- scopes ------------------------------------------------------------------------
--
-- A scope is a registry of its own for one part of a run (a sweep cell):
-- while a task runs inside scope:run, every kb.metrics call of that task
-- and of the tasks it spawns (kb.spawn, kb.pool, kb.timeout: they inherit
-- the kb.context) works on the scope, so cells running side by side
-- never see each other's figures. scope:close() adds the scope into the
-- registry it was made in (exactly: histograms merge, counters and gauges
-- add), so the process's totals stay whole.

local Scope = { __name = "kb.metrics.scope" }
Scope.__index = Scope

--- kb.metrics.scope([name]) -> a new, empty scope, child of the calling
-- task's registry.
function M.scope(name)
  return setmetatable({ name = name or "scope", entries = {}, parent = current() }, Scope)
end

-- registry entries -> owner -> the owner's handles (M.handles); weak both ways
local handle_sets = setmetatable({}, { __mode = "k" })

--- kb.metrics.handles(owner) -> a table, the owner's own, for keeping the
-- metrics it records on a hot path (a kb.kfp client: each request's
-- histograms and counters) instead of naming them on every call. It
-- belongs to the calling task's registry: another scope (a sweep cell) or
-- kb.metrics.clear() gives a fresh, empty one, so a kept metric is always
-- the one kb.metrics.histogram(...) would return.
function M.handles(owner)
  local entries = current().entries
  local per = handle_sets[entries]
  if not per then
    per = setmetatable({}, { __mode = "k" })
    handle_sets[entries] = per
  end
  local h = per[owner]
  if not h then
    h = {}
    per[owner] = h
  end
  return h
end

--- kb.metrics.current_scope() -> the calling task's scope, or nil at the root.
function M.current_scope()
  local reg = current()
  if reg ~= root then return reg end
  return nil
end

-- Runs fn(...) in the calling task with `reg` as its registry.
local function within(reg, fn, ...)
  local saved = context.push({ metrics = reg ~= root and reg or false })
  local res = table.pack(pcall(fn, ...))
  context.restore(saved)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

--- scope:run(fn, ...) -> fn's results: runs fn in the calling task with
-- this scope as its registry (and that of every task it spawns); the
-- task's registry is restored however fn ends.
function Scope:run(fn, ...)
  if self.closed then error("kb.metrics: scope " .. tostring(self.name) .. " is closed", 2) end
  return within(self, fn, ...)
end

--- scope:snapshot() -> the scope's metrics, as kb.metrics.snapshot().
function Scope:snapshot() return M.snapshot_of(sorted_entries(nil, self)) end

--- scope:get(name [, labels]) -> the scope's metric and its kind, or nil.
function Scope:get(name, labels) return within(self, M.get, name, labels) end

--- scope:each([kind]) -> as kb.metrics.each, over the scope's metrics.
function Scope:each(kind) return within(self, M.each, kind) end

--- scope:close(): adds the scope's metrics into the registry it was made
-- in and closes it (idempotent). Its objects stay readable.
function Scope:close()
  if self.closed then return end
  self.closed = true
  within(self.parent, function()
    for _, e in ipairs(sorted_entries(nil, self)) do
      if e.kind == "histogram" then
        M.histogram(e.name, e.labels, e.metric:layout()):merge(e.metric)
      elseif e.kind == "counter" then
        M.counter(e.name, e.labels):inc(e.metric.n)
      else
        M.gauge(e.name, e.labels):inc(e.metric.n)
      end
    end
  end)
end

function Scope:__tostring() return "kb.metrics.scope " .. tostring(self.name) end

-- ---- the journal sink ----------------------------------------------------------
--
-- Records (one JSON object a line; docs/results.md):
--   {"k":"def","m":key,"name":..,"labels":{..},"kind":"histogram","layout":{..}}
--   {"k":"h","m":key,"t":s,"u":[units..]}          values recorded since the last flush
--   {"k":"h","m":key,"t":s,"u":[..],"n":[counts..]} when some record(v, n) had n ~= 1
--   {"k":"hc","m":key,"v":v,"i":interval,"n":n}     h:record_corrected
--   {"k":"hm","m":key,"e":encoded}                  h:merge(other)
--   {"k":"hr","m":key}                              h:reset()
--   {"k":"c","m":key,"d":delta,"t":s}               counter increments since the last flush
--   {"k":"g","m":key,"v":value,"t":s}               a gauge's value at the flush
--   {"k":"reset"} / {"k":"clear"}                   kb.metrics.reset() / clear()
-- t: scenario seconds since the journal was attached. "u" holds the values
-- as the histogram stores them: integers in units of its `lowest` (what
-- h:record(v) rounds v to; above `highest`, highest + 1); integers encode
-- ten times faster than floats. Replaying the records in order gives the
-- registry back exactly: h:record(u * lowest) lands on the same unit.
--
-- kb.hist's record is a C method, and metrics.histogram() hands out the
-- kb.hist itself (callers use every method of it and pass it to C
-- functions), so while a journal is attached the record/merge/reset
-- methods of the kb.hist class are replaced by wrappers that call the C
-- method, then note the value when the histogram is a registered one. A
-- value costs a table append; encoding waits for the flush.

local MAX_PENDING = 8192 -- values held before a flush is forced

local tracked = setmetatable({}, { __mode = "k" }) -- metric object -> pending batch
local dirty, ndirty, npending = {}, 0, 0
local t0 = 0

local function now()
  return math.floor((require("kb").now() - t0) * 1e6 + 0.5) / 1e6
end

-- Writes every pending batch into the journal (its buffer): runs at each
-- flush, and before any record whose order matters (def, merge, reset).
local function seal()
  if ndirty == 0 then return end
  local t, array = now(), require("kb.json").array
  for i = 1, ndirty do
    local p = dirty[i]
    dirty[i] = nil
    p.dirty = false
    local e = p.entry
    if e.kind == "histogram" then
      local v, unit, hi = p.v, p.unit, p.hi
      for j = 1, p.nv do -- as hist.c's to_units
        local x = v[j]
        if x > 0 then
          local u = x / unit
          x = u > hi and hi + 1 or math.floor(u + 0.5)
          if x < 1 then x = 1 end
        else
          x = 0
        end
        v[j] = x
      end
      sink:write({ k = "h", m = e.key, t = t, u = array(v), n = p.c and array(p.c) or nil })
      p.v, p.c, p.nv = {}, nil, 0
    elseif e.kind == "counter" then
      sink:write({ k = "c", m = e.key, d = p.d, t = t })
      p.d = 0
    else
      sink:write({ k = "g", m = e.key, v = e.metric.n, t = t })
    end
  end
  ndirty, npending = 0, 0
end

local function mark(p)
  if not p.dirty then
    p.dirty = true
    ndirty = ndirty + 1
    dirty[ndirty] = p
  end
  npending = npending + 1
  if npending >= MAX_PENDING or through then
    -- a failing journal (disk full) must not fail the measurement; the
    -- flusher reports it
    pcall(sink.flush, sink)
  end
end

-- A counter increment or a gauge change.
journal_metric = function(metric, n)
  local p = tracked[metric]
  if not p then return end
  if n then p.d = p.d + n end
  mark(p)
end

local function definition(e)
  local d = { k = "def", m = e.key, name = e.name, labels = e.labels, kind = e.kind }
  if e.kind == "histogram" then
    local l = e.metric:layout()
    d.layout = { lowest = l.lowest, highest = l.highest, digits = l.digits }
  end
  return d
end

-- A record whose position matters; an entry table means "define it".
journal_event = function(x)
  seal()
  if x.metric then
    local e = x
    x = definition(e)
    local p = { entry = e, v = {}, nv = 0, d = 0, dirty = false }
    if x.layout then
      p.unit = x.layout.lowest
      p.hi = math.floor(x.layout.highest / p.unit + 0.5)
    end
    tracked[e.metric] = p
  elseif x.k == "clear" then
    tracked = setmetatable({}, { __mode = "k" })
  end
  sink:write(x)
  if through then sink:flush() end
end

-- A C method's error as the caller would have got it calling the method
-- itself: at the caller's line, arguments numbered as in h:name(...).
local function rethrow(err, name)
  if type(err) ~= "string" then error(err, 0) end
  err = err:gsub("^bad argument #(%d+) to '%?'", function(i)
    return string.format("bad argument #%d to '%s'", tonumber(i) - 1, name)
  end)
  error(err, 3)
end

local function record(h, v, n)
  local ok, err = pcall(c_record, h, v, n)
  if not ok then rethrow(err, "record") end
  local p = tracked[h]
  -- a scope's histograms (a sweep cell's) are not journaled, but have
  -- their time series (the cell's kb.timeseries collector)
  local key = hist_keys[h]
  if key then timeseries.note_value(key, v, n) end
  if p then
    local i = p.nv + 1
    p.nv = i
    p.v[i] = v
    if (n ~= nil and n ~= 1) or p.c then
      if not p.c then
        p.c = {}
        for j = 1, i - 1 do p.c[j] = 1 end
      end
      p.c[i] = n or 1
    end
    mark(p)
  end
end

local function record_corrected(h, v, interval, n)
  local ok, err = pcall(c_corrected, h, v, interval, n)
  if not ok then rethrow(err, "record_corrected") end
  local p = tracked[h]
  if p then journal_event({ k = "hc", m = p.entry.key, v = v, i = interval, n = n }) end
end

local function merge(h, other)
  local ok, err = pcall(c_merge, h, other)
  if not ok then rethrow(err, "merge") end
  local p = tracked[h]
  if p then journal_event({ k = "hm", m = p.entry.key, e = other:encode() }) end
  return h
end

local function reset(h)
  local ok, err = pcall(c_reset, h)
  if not ok then rethrow(err, "reset") end
  local p = tracked[h]
  if p then journal_event({ k = "hr", m = p.entry.key }) end
  return h
end

--- kb.metrics.set_journal(j): sends every measurement of the registered
-- metrics to the kb.journal j from now on (nil: stop, after writing what
-- is pending). Metrics registered before are journaled with their
-- current values. j:flush() writes the batches.
function M.set_journal(j)
  if sink then
    seal()
    hist_methods.record, hist_methods.record_corrected = c_record, c_corrected
    hist_methods.merge, hist_methods.reset = c_merge, c_reset
    sink = nil
    tracked = setmetatable({}, { __mode = "k" })
  end
  if j == nil then return end
  sink, t0, through = j, require("kb").now(), j:write_through()
  hist_methods.record, hist_methods.record_corrected = record, record_corrected
  hist_methods.merge, hist_methods.reset = merge, reset
  j:on_flush(function(journal) if sink == journal then seal() end end)
  for _, e in ipairs(sorted_entries(nil, root)) do
    journal_event(e)
    if e.kind == "histogram" then
      if e.metric:count() > 0 then journal_event({ k = "hm", m = e.key, e = e.metric:encode() }) end
    elseif e.metric.n ~= 0 then
      journal_event({ k = e.kind == "counter" and "c" or "g", m = e.key, d = e.kind == "counter"
        and e.metric.n or nil, v = e.kind == "gauge" and e.metric.n or nil, t = 0 })
    end
  end
end

--- kb.metrics.journal() -> the journal attached by set_journal, or nil.
function M.journal() return sink end

return M
