--- kb.thresholds: pass/fail limits a scenario declares.
--
--   thresholds = {
--     ["http.get"] = { p99 = 0.5, p50 = 0.1 },  -- a histogram: each stat <= limit (seconds)
--     ["http.errors"] = { max = 0 },            -- a counter (summed over labels): bounds
--     success_rate = 0.98,                      -- a field of run()'s result: at least
--     ["latency.p99"] = { max = 0.5 },          -- a nested result field: bounds
--   }
-- A failed threshold makes kbrun exit 1 and is marked in the summary.
local M = {}

local STATS = { p50 = true, p75 = true, p90 = true, p95 = true, p99 = true, p999 = true,
  mean = true, max = true, min = true, stddev = true }

local function result_field(result, path)
  local v = result
  for part in path:gmatch("[^.]+") do
    if type(v) ~= "table" then return nil end
    v = v[part]
  end
  return v
end

-- Metrics of one name, all label sets: histograms' summaries and the sum
-- of counters/gauges.
local function find_metric(snapshot, name)
  local hist, total, found = nil, 0, false
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.name == name then
      found = true
      if m.kind == "histogram" then
        hist = hist or m.summary
      else
        total = total + (m.value or 0)
      end
    end
  end
  if not found then return nil end
  return hist, total
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
    local hist, total = find_metric(snapshot, name)
    if type(spec) == "number" then
      check(out, name, "value", spec, tonumber(result_field(result, name)), ">=")
    elseif type(spec) == "table" then
      local stats = {}
      for stat in pairs(spec) do stats[#stats + 1] = stat end
      table.sort(stats)
      for _, stat in ipairs(stats) do
        local limit = spec[stat]
        if hist and STATS[stat] then
          check(out, name, stat, limit, hist[stat], "<=")
        elseif stat == "max" or stat == "min" then
          local actual = total
          if hist == nil and total == nil then actual = tonumber(result_field(result, name)) end
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
