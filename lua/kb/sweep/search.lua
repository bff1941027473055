--- kb.sweep.search: the sequential mode of a sweep (docs/sweep.md).
--
--   search = { param = "num_runs", start = 10, factor = 2, max = 2000,
--              metric = "duration_p50", limit = 900, above = true, precision = 1 }
--
-- Multiplies `param` by `factor` from `start` until the metric (the mean
-- over a point's repeats) crosses `limit` (above = true: goes above it;
-- false: below it) or `max` is reached, then bisects between the last
-- value that did not cross and the first that did until they are
-- `precision` apart. A point whose repeats all failed counts as crossing
-- (an overloaded target usually fails rather than slows). Every point is a
-- cell of the sweep, so a resumed search replays finished points from the
-- journal and continues where it stopped.
local M = {}
local format = string.format

--- Checks a search spec and fills in defaults; raises naming the problem.
function M.check(spec)
  local who = "kb.sweep: search"
  if type(spec) ~= "table" then error(who .. " must be a table", 0) end
  local s = {}
  for k, v in pairs(spec) do s[k] = v end
  if type(s.param) ~= "string" then error(who .. ".param must name the parameter to search", 0) end
  if type(s.metric) ~= "string" then error(who .. ".metric must name the metric to watch", 0) end
  if type(s.limit) ~= "number" then error(who .. ".limit must be a number", 0) end
  if type(s.start) ~= "number" or s.start <= 0 then error(who .. ".start must be a number > 0", 0) end
  s.factor = s.factor or 2
  if type(s.factor) ~= "number" or s.factor <= 1 then error(who .. ".factor must be a number > 1", 0) end
  s.max = s.max or s.start * 1024
  if type(s.max) ~= "number" or s.max < s.start then error(who .. ".max must be a number >= start", 0) end
  if s.int == nil then s.int = math.type(s.start) == "integer" end
  s.precision = s.precision or (s.int and 1 or (s.start / 100))
  if type(s.precision) ~= "number" or s.precision <= 0 then error(who .. ".precision must be a number > 0", 0) end
  if s.above == nil then s.above = true end
  s.max_points = s.max_points or 64
  return s
end

local function crosses(s, value)
  if value == nil then return true end
  if s.above then return value > s.limit end
  return value < s.limit
end

local function norm(s, v)
  if s.int then return math.tointeger(math.floor(v + 0.0)) end
  return v
end

--- Runs the search from one base cell. `evaluate(value, step)` runs a
-- point (every repeat) and returns the metric's mean over the repeats
-- that succeeded, or nil if none did. Returns {param, metric, limit,
-- points = {{value, metric, crossed}}, last_ok, first_crossing, reason}.
function M.run(s, evaluate)
  local points, step = {}, 0
  local function probe(v)
    step = step + 1
    local m = evaluate(v, step)
    local crossed = crosses(s, m)
    points[#points + 1] = { value = v, metric = m, crossed = crossed }
    return crossed
  end
  local lo, hi
  local v = norm(s, s.start)
  while true do
    if probe(v) then hi = v break end
    lo = v
    if v >= s.max or step >= s.max_points then break end
    local nxt = norm(s, math.min(v * s.factor, s.max))
    if nxt <= v then nxt = v + (s.int and 1 or s.precision) end
    v = nxt
  end
  while lo and hi and hi - lo > s.precision and step < s.max_points do
    local mid = norm(s, (lo + hi) / 2)
    if mid <= lo or mid >= hi then break end
    if probe(mid) then hi = mid else lo = mid end
  end
  local reason
  if not hi then
    reason = format("%s never crossed %g up to %s = %s", s.metric, s.limit, s.param, tostring(lo))
  elseif not lo then
    reason = format("%s already crossed %g at the start (%s = %s)", s.metric, s.limit, s.param, tostring(hi))
  else
    reason = format("%s crosses %g between %s = %s and %s", s.metric, s.limit, s.param, tostring(lo), tostring(hi))
  end
  return { param = s.param, metric = s.metric, limit = s.limit, above = s.above, points = points,
    last_ok = lo, first_crossing = hi, reason = reason }
end

return M
