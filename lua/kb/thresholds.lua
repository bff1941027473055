--- kb.thresholds: pass/fail limits a scenario declares.
--
--   thresholds = {
--     ["http.get"] = { p99 = 0.5, p50 = 0.1 },  -- a histogram (all label sets merged):
--                                                -- each stat <= limit; p75, p999 (99.9) too
--     ["http.get{code=200}"] = { p99 = 0.5 },   -- only the label sets with code=200
--     ["http.errors"] = { max = 0 },            -- a counter (summed over labels): bounds;
--                                                -- a counter never incremented is 0
--     ["queue.wait"] = { p99 = 1, allow_missing = true }, -- a histogram that may stay empty
--     success_rate = 0.98,                      -- a field of run()'s result: at least
--     ["latency.p99"] = { max = 0.5 },          -- a nested result field: bounds
--   }
-- A failed threshold makes kbrun exit 99 and is marked in the summary.
--
-- A name is looked up among the metrics first (a histogram, else counters
-- and gauges), then among the fields of run()'s result. A histogram that
-- recorded nothing (absent, or count 0) has no data: its checks fail unless
-- the spec says allow_missing = true. A name with bounds (max/min) that is
-- neither a metric nor a result field is a counter never incremented: 0.
-- A result field that is absent while its parent table exists (latency.p99
-- with result.latency but no p99), or a plain-number threshold's field,
-- stays missing and fails.
local M = {}

local hist = require "kb.hist"
local metrics = require "kb.metrics"

local HIST_STATS = { mean = true, max = true, min = true, stddev = true }
local OPTIONS = { allow_missing = true }

local function is_percentile(stat)
  return type(stat) == "string" and stat:match("^p%d+$") ~= nil
end

-- A statistic of a histogram: pNN (p50, p75, p999 = 99.9, ...), mean,
-- max, min, stddev.
local function stat_of(h, stat)
  local digits = stat:match("^p(%d+)$")
  if digits then
    local p = tonumber(digits)
    if #digits > 2 then p = tonumber(digits:sub(1, 2) .. "." .. digits:sub(3)) end
    return h:percentile(p)
  end
  if stat == "mean" then return h:mean() end
  if stat == "max" then return h:max() end
  if stat == "min" then return h:min() end
  if stat == "stddev" then return h:stddev() end
  return nil
end

local function result_field(result, path)
  local v = result
  for part in path:gmatch("[^.]+") do
    if type(v) ~= "table" then return nil end
    v = v[part]
  end
  return v
end

-- Whether path names a field inside a table the result has: latency.p99
-- when result.latency is a table (or success_rate when result is one).
local function parent_exists(result, path)
  local parent = path:match("^(.*)%.[^.]+$")
  if not parent then return false end
  return type(result_field(result, parent)) == "table"
end

-- Splits `name{k=v,k2="quoted, value"}` into the name and its labels (a
-- table of strings), or returns the name alone. Values follow kb.metrics'
-- keys: plain words, or %q-quoted strings. Raises on a malformed key.
function M.parse_key(key)
  local name, body = key:match("^([^{]+)(%b{})$")
  if not name then
    if key:find("{", 1, true) then
      error(string.format("threshold '%s': a labelled key is name{label=value,...}", key), 0)
    end
    return key, nil
  end
  body = body:sub(2, -2)
  local labels, pos = {}, 1
  while pos <= #body do
    local k, after = body:match("^%s*([%a_][%w_%.]*)%s*=%s*()", pos)
    if not k then
      error(string.format("threshold '%s': a labelled key is name{label=value,...}", key), 0)
    end
    local v
    if body:sub(after, after) == '"' then
      local i = after + 1
      local parts = {}
      while true do
        local c = body:sub(i, i)
        if c == "" then error(string.format("threshold '%s': unterminated quoted label value", key), 0) end
        if c == '"' then break end
        if c == "\\" then
          local n = body:sub(i + 1, i + 1)
          parts[#parts + 1] = ({ n = "\n", t = "\t", r = "\r" })[n] or n
          i = i + 2
        else
          parts[#parts + 1] = c
          i = i + 1
        end
      end
      v, pos = table.concat(parts), i + 1
    else
      local s, e = body:match("^([^,]*)()", after)
      v, pos = s:match("^%s*(.-)%s*$"), e
    end
    labels[k] = v
    local sep, rest = body:match("^%s*(,?)%s*()", pos)
    if sep == "" and rest <= #body then
      error(string.format("threshold '%s': a labelled key is name{label=value,...}", key), 0)
    end
    pos = rest
  end
  return name, labels
end

-- Whether a series' labels hold every wanted label (values compared as
-- kb.metrics writes them in keys, so 200 and "200" are the same).
local function labels_match(series, wanted)
  for k, v in pairs(wanted) do
    local have = series[k]
    if have == nil then return false end
    if metrics.key("x", { [k] = have }) ~= metrics.key("x", { [k] = v }) then return false end
  end
  return true
end

-- The metrics a threshold key selects: the histograms merged exactly (from
-- their encodings), the counters and gauges summed. A plain name selects
-- every label set of that name; name{labels} the label sets holding those
-- labels. Returns { hist = merged or nil, total = sum or nil, kind }.
local function find_metric(snapshot, key)
  local name, wanted = M.parse_key(key)
  local found = { kind = nil }
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.name == name and (not wanted or labels_match(m.labels or {}, wanted)) then
      if m.kind == "histogram" then
        local h = hist.decode(m.encoded)
        if found.hist then found.hist:merge(h) else found.hist = h end
        found.kind = "histogram"
      else
        found.total = (found.total or 0) + (m.value or 0)
        if found.kind ~= "histogram" then
          found.kind = (found.kind == nil or found.kind == m.kind) and m.kind or "counter"
        end
      end
    end
  end
  return found, wanted ~= nil
end

local function add(out, t)
  local a, limit, op = t.actual, t.limit, t.op
  if t.passed == nil then
    t.passed = a ~= nil and ((op == "<=" and a <= limit) or (op == ">=" and a >= limit))
  end
  out[#out + 1] = t
end

-- Raises a clear error for a spec kbrun cannot evaluate (a typo in a stat
-- must not read as "missing" forever).
local function check_spec(name, spec)
  if type(name) ~= "string" then
    error(string.format("threshold names are strings, got %s", type(name)), 0)
  end
  M.parse_key(name)
  if type(spec) == "number" then return end
  if type(spec) ~= "table" then
    error(string.format("threshold '%s' must be a number or a table of limits", name), 0)
  end
  for stat, limit in pairs(spec) do
    if OPTIONS[stat] then
      if type(limit) ~= "boolean" then
        error(string.format("threshold '%s': %s wants true or false", name, stat), 0)
      end
    elseif not (is_percentile(stat) or HIST_STATS[stat]) then
      error(string.format("threshold '%s': unknown statistic '%s' (pNN, mean, min, max, stddev, allow_missing)",
        name, tostring(stat)), 0)
    elseif type(limit) ~= "number" or limit ~= limit then
      error(string.format("threshold '%s': the limit of %s must be a number", name, stat), 0)
    end
  end
end

--- Checks a thresholds table without evaluating it: raises a message
-- naming the first bad entry (unknown statistic, a limit that is not a
-- number, a malformed labelled key).
function M.validate(thresholds)
  if thresholds == nil then return end
  if type(thresholds) ~= "table" then
    error("the scenario's 'thresholds' must be a table", 0)
  end
  for name, spec in pairs(thresholds) do check_spec(name, spec) end
end

--- Evaluates thresholds against a metrics snapshot and the run's result.
-- @return list of {name, stat, op, limit, actual, passed, kind, unit,
--   no_data, allowed}, and whether all passed. kind is "histogram",
--   "counter", "gauge" or "result"; unit "s" for histograms; actual is nil
--   when there was nothing to judge (no_data = true for a histogram).
-- opts.result_unknown: run()'s result is not known (a killed run rebuilt
-- from its journal): a name that is no metric is then a result field
-- without a value, not a counter never incremented (which would read 0).
function M.evaluate(thresholds, snapshot, result, opts)
  local result_unknown = opts ~= nil and opts.result_unknown == true
  M.validate(thresholds)
  local out = {}
  local names = {}
  for name in pairs(thresholds or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local spec = thresholds[name]
    local found, labelled = find_metric(snapshot, name)
    if type(spec) == "number" then
      add(out, { name = name, stat = "value", op = ">=", limit = spec, kind = "result",
        actual = tonumber(result_field(result, name)) })
    else
      local stats = {}
      for stat in pairs(spec) do
        if not OPTIONS[stat] then stats[#stats + 1] = stat end
      end
      table.sort(stats)
      local h = found.hist
      local empty = h == nil or h:count() == 0
      -- a histogram (even an empty one) is judged on its statistics; a
      -- percentile, mean or stddev only makes sense for one
      local wants_hist = found.kind == "histogram"
      for _, stat in ipairs(stats) do
        if not wants_hist and stat ~= "max" and stat ~= "min" then wants_hist = true end
      end
      for _, stat in ipairs(stats) do
        local limit = spec[stat]
        if wants_hist then
          local t = { name = name, stat = stat, op = "<=", limit = limit, kind = "histogram", unit = "s" }
          if empty then
            t.no_data, t.allowed, t.passed = true, spec.allow_missing == true, spec.allow_missing == true
          else
            t.actual = stat_of(h, stat)
          end
          add(out, t)
        else
          local op = stat == "max" and "<=" or ">="
          local t = { name = name, stat = "value", op = op, limit = limit }
          if found.kind then
            t.kind, t.actual = found.kind, found.total
          else
            local field = not labelled and tonumber(result_field(result, name)) or nil
            if field ~= nil then
              t.kind, t.actual = "result", field
            elseif not labelled and (result_unknown or parent_exists(result, name)) then
              t.kind = "result" -- a field missing from a table the result has (or unknown)
            else
              t.kind, t.actual = "counter", 0 -- never incremented
            end
          end
          add(out, t)
        end
      end
    end
  end
  local all = true
  for _, t in ipairs(out) do all = all and t.passed end
  return out, all
end

-- ---- formatting -----------------------------------------------------------

-- x with `digits` significant digits, without an exponent for ordinary
-- magnitudes and without trailing zeros.
local function significant(x, digits)
  if x == math.floor(x) and math.abs(x) < 1e15 then return string.format("%d", x) end
  if math.abs(x) >= 10 ^ digits then return string.format("%.0f", x) end
  local s = string.format("%." .. digits .. "g", x)
  if s:find("e", 1, true) then return s end
  if s:find(".", 1, true) then s = s:gsub("0+$", ""):gsub("%.$", "") end
  return s
end

-- Formats v so that it reads differently from `other` whenever it differs
-- from it (a p99 of 1.0004 s against a limit of 1 s is not "1 s <= 1 s").
local function distinct(v, other, scale)
  local text
  for digits = 3, 9 do
    text = significant(v / scale, digits)
    if v == other or text ~= significant(other / scale, digits) then return text end
  end
  return text
end

local function seconds_scale(limit)
  local a = math.abs(limit)
  if a ~= 0 and a < 1e-3 then return 1e-6, "us" end
  if a ~= 0 and a < 1 then return 1e-3, "ms" end
  return 1, "s"
end

--- Whether a threshold reads as a rate (a fraction shown in percent): a
-- result field or gauge named *rate or *ratio with a limit in [0, 1].
function M.is_rate(t)
  if t.kind ~= "result" and t.kind ~= "gauge" then return false end
  local last = tostring(t.name):match("([^.]+)$") or ""
  return (last:match("rate$") or last:match("ratio$")) ~= nil
    and type(t.limit) == "number" and t.limit >= 0 and t.limit <= 1
end

--- The actual and the limit of a check as text in the metric's unit:
-- seconds (in s, ms or us as the limit reads best) for histograms,
-- percentages for rates, integers for counts. Returns actual_text (nil
-- when nothing was measured) and limit_text.
function M.values_text(t)
  local limit, actual = t.limit, t.actual
  if t.unit == "s" then
    local scale, unit = seconds_scale(limit)
    return actual and (distinct(actual, limit, scale) .. " " .. unit) or nil,
      significant(limit / scale, 6) .. " " .. unit
  end
  if M.is_rate(t) then
    return actual and (distinct(actual, limit, 0.01) .. "%") or nil, significant(limit * 100, 6) .. "%"
  end
  return actual and distinct(actual, limit, 1) or nil, significant(limit, 6)
end

--- One line describing a check: "op p99 950 ms <= 1 s",
-- "api.errors 3 <= 0", "success_rate 97.5% >= 98%",
-- "queue.wait p99 no data (limit <= 1 s)".
function M.describe(t)
  local actual, limit = M.values_text(t)
  local what = t.stat == "value" and t.name or (t.name .. " " .. t.stat)
  if actual == nil then
    local why = t.no_data and (t.allowed and "no data, allowed" or "no data") or "missing"
    return string.format("%s %s (limit %s %s)", what, why, t.op, limit)
  end
  return string.format("%s %s %s %s", what, actual, t.op, limit)
end

return M
