--- kb.thresholds: pass/fail limits a scenario declares.
--
--   thresholds = {
--     ["http.get"] = { p99 = 0.5, p50 = 0.1 },  -- a histogram (all label sets merged):
--                                                -- each stat <= limit; p75, p999 (99.9) too
--     ["http.errors"] = { max = 0 },            -- a counter (summed over labels): bounds
--     success_rate = 0.98,                      -- a field of run()'s result: at least
--     ["latency.p99"] = { max = 0.5 },          -- a nested result field: bounds
--   }
-- A failed threshold makes kbrun exit 1 and is marked in the summary.
local M = {}

local hist = require "kb.hist"

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

-- Metrics of one name over all its label sets: the histograms merged
-- exactly (from their encodings), counters and gauges summed.
local function find_metric(snapshot, name)
  local merged, total, found = nil, 0, false
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.name == name then
      found = true
      if m.kind == "histogram" then
        local h = hist.decode(m.encoded)
        if merged then merged:merge(h) else merged = h end
      else
        total = total + (m.value or 0)
      end
    end
  end
  if not found then return nil end
  return merged, total
end

local function check(out, name, stat, limit, actual, op)
  local passed = actual ~= nil and ((op == "<=" and actual <= limit) or (op == ">=" and actual >= limit))
  out[#out + 1] = { name = name, stat = stat, op = op, limit = limit, actual = actual, passed = passed }
end

--- Evaluates thresholds against a metrics snapshot and the run's result.
-- @return list of {name, stat, op, limit, actual, passed}, and whether all passed
function M.evaluate(thresholds, snapshot, result)
  local out = {}
  local names = {}
  for name in pairs(thresholds or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local spec = thresholds[name]
    local hist_found, total = find_metric(snapshot, name)
    if type(spec) == "number" then
      check(out, name, "value", spec, tonumber(result_field(result, name)), ">=")
    elseif type(spec) == "table" then
      local stats = {}
      for stat in pairs(spec) do stats[#stats + 1] = stat end
      table.sort(stats)
      for _, stat in ipairs(stats) do
        local limit = spec[stat]
        if hist_found then
          check(out, name, stat, limit, stat_of(hist_found, stat), "<=")
        elseif stat == "max" or stat == "min" then
          local actual = total
          if actual == nil then actual = tonumber(result_field(result, name)) end
          check(out, name, "value", limit, actual, stat == "max" and "<=" or ">=")
        else
          check(out, name, stat, limit, nil, "<=")
        end
      end
    else
      error(string.format("threshold '%s' must be a number or a table of limits", name), 0)
    end
  end
  local all = true
  for _, t in ipairs(out) do all = all and t.passed end
  return out, all
end

return M
