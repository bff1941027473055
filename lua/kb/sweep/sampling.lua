--- kb.sweep.sampling: which cells a sweep runs (docs/sweep.md).
--
--   local sampling = require "kb.sweep.sampling"
--   local cells, dims = sampling.grid({ num_runs = {10, 50}, pool = {"a", "b"} })
--   local rng = sampling.rng(42)
--   local cells = sampling.random(ranges, 20, rng)   -- independent draws
--   local cells = sampling.lhs(ranges, 20, rng)      -- Latin hypercube
--
-- A range is {lo, hi} (integers when both are integers), a table
-- {min =, max =, int = true|false, log = true|false}, or {values = {...}}
-- (a categorical dimension: drawn uniformly, stratified in the hypercube).
-- Everything here is deterministic for a given seed: the generator is
-- splitmix64 in 64-bit integer arithmetic, not math.random.
local M = {}

local format = string.format

-- ---- a deterministic generator -----------------------------------------------------

local Rng = {}
Rng.__index = Rng

local function splitmix(state)
  state = state + 0x9E3779B97F4A7C15
  local z = state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return state, z ~ (z >> 31)
end

--- A generator seeded with an integer (or a string, hashed).
function M.rng(seed)
  if type(seed) == "string" then seed = M.hash64(seed) end
  return setmetatable({ state = math.tointeger(seed) or math.floor(seed or 0) }, Rng)
end

--- The next 64-bit integer.
function Rng:next()
  local z
  self.state, z = splitmix(self.state)
  return z
end

--- A float uniform in [0, 1).
function Rng:uniform()
  return ((self:next() >> 11) & 0x1FFFFFFFFFFFFF) * 2.0 ^ -53
end

--- An integer uniform in [a, b].
function Rng:int(a, b)
  return a + math.floor(self:uniform() * (b - a + 1))
end

--- Shuffles a list in place (Fisher-Yates) and returns it.
function Rng:shuffle(list)
  for i = #list, 2, -1 do
    local j = self:int(1, i)
    list[i], list[j] = list[j], list[i]
  end
  return list
end

--- FNV-1a 64 of a string, as a (possibly negative) Lua integer.
function M.hash64(s)
  local h = -3750763034362895579 -- 0xcbf29ce484222325
  for i = 1, #s do
    h = (h ~ s:byte(i)) * 0x100000001B3
  end
  return h
end

--- The same hash as 16 hex digits.
function M.hex64(s)
  return format("%016x", M.hash64(s))
end

--- A seed derived from several parts (numbers or strings): a cell's seed
-- from (sweep seed, cell key, repeat). A non-negative integer below 2^31,
-- which every consumer (kbrun --seed, the simulator) accepts.
function M.derive(...)
  local parts = table.pack(...)
  local text = {}
  for i = 1, parts.n do text[i] = tostring(parts[i]) end
  local _, z = splitmix(M.hash64(table.concat(text, "\31")))
  return (z >> 33) & 0x7FFFFFFF
end

-- ---- a grid -------------------------------------------------------------------------

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  return keys
end

--- The dimension order: `order` (a list of names, which must name every
-- dimension once), else the names sorted.
function M.order(dims, order, who)
  if order == nil then return sorted_keys(dims) end
  if type(order) ~= "table" then error(format("%s: order must be a list of names", who), 0) end
  local seen = {}
  for _, name in ipairs(order) do
    if dims[name] == nil then error(format("%s: order names %q, which is not a dimension", who, tostring(name)), 0) end
    if seen[name] then error(format("%s: order names %q twice", who, name), 0) end
    seen[name] = true
  end
  for _, name in ipairs(sorted_keys(dims)) do
    if not seen[name] then error(format("%s: order leaves out the dimension %q", who, name), 0) end
  end
  return order
end

--- Every combination of the matrix's values, the first dimension varying
-- slowest (nested loops in `order`). Returns the cells (tables name ->
-- value) and the dimensions as a list of {name, values}.
function M.grid(matrix, order)
  if type(matrix) ~= "table" then error("kb.sweep: matrix must be a table of name = list of values", 0) end
  local names = M.order(matrix, order, "kb.sweep: matrix")
  local dims = {}
  for i, name in ipairs(names) do
    local values = matrix[name]
    if type(name) ~= "string" then error("kb.sweep: matrix keys must be parameter names", 0) end
    if type(values) ~= "table" or #values == 0 then
      error(format("kb.sweep: matrix.%s must be a non-empty list of values", name), 0)
    end
    for j, v in ipairs(values) do
      local t = type(v)
      if t ~= "number" and t ~= "string" and t ~= "boolean" then
        error(format("kb.sweep: matrix.%s[%d] must be a number, string or boolean, got %s", name, j, t), 0)
      end
    end
    dims[i] = { name = name, values = values }
  end
  local cells = {}
  local function fill(d, cell)
    if d > #dims then
      local copy = {}
      for k, v in pairs(cell) do copy[k] = v end
      cells[#cells + 1] = copy
      return
    end
    for _, v in ipairs(dims[d].values) do
      cell[dims[d].name] = v
      fill(d + 1, cell)
    end
    cell[dims[d].name] = nil
  end
  fill(1, {})
  return cells, dims
end

-- ---- ranges -------------------------------------------------------------------------

local function parse_range(name, r)
  local who = "kb.sweep: ranges." .. name
  if type(r) ~= "table" then error(who .. " must be {lo, hi}, {min =, max =} or {values = {...}}", 0) end
  if r.values then
    if type(r.values) ~= "table" or #r.values == 0 then error(who .. ".values must be a non-empty list", 0) end
    return { name = name, values = r.values }
  end
  local lo, hi = r.min or r[1], r.max or r[2]
  if type(lo) ~= "number" or type(hi) ~= "number" or not (lo <= hi) then
    error(format("%s must have numbers lo <= hi, got %s, %s", who, tostring(lo), tostring(hi)), 0)
  end
  local int = r.int
  if int == nil then int = math.type(lo) == "integer" and math.type(hi) == "integer" end
  if r.log and lo <= 0 then error(who .. ": a log range needs lo > 0", 0) end
  return { name = name, lo = lo, hi = hi, int = int, log = r.log or false }
end

-- The value at u in [0, 1) of a range.
local function value_at(r, u)
  if r.values then return r.values[math.min(#r.values, math.floor(u * #r.values) + 1)] end
  local v
  if r.log then
    v = math.exp(math.log(r.lo) + u * (math.log(r.hi) - math.log(r.lo)))
  else
    v = r.lo + u * (r.hi - r.lo)
  end
  if r.int then
    -- integers: u spreads over [lo, hi + 1) so hi is as likely as lo
    if not r.log then v = r.lo + u * (r.hi - r.lo + 1) end
    v = math.min(r.hi, math.max(r.lo, math.floor(v)))
    return math.tointeger(v)
  end
  return v
end

--- The parsed ranges in order: a list of {name, lo, hi, int, log} or
-- {name, values}.
function M.ranges(ranges, order)
  if type(ranges) ~= "table" then error("kb.sweep: sample.ranges must be a table of name = range", 0) end
  local out = {}
  for i, name in ipairs(M.order(ranges, order, "kb.sweep: sample.ranges")) do
    out[i] = parse_range(name, ranges[name])
  end
  return out
end

--- n cells drawn independently and uniformly from the ranges.
function M.random(ranges, n, rng, order)
  local rs = M.ranges(ranges, order)
  local cells = {}
  for i = 1, n do
    local cell = {}
    for _, r in ipairs(rs) do cell[r.name] = value_at(r, rng:uniform()) end
    cells[i] = cell
  end
  return cells, rs
end

--- n cells of a Latin hypercube: each range is cut into n equal strata and
-- every stratum of every range is used exactly once (a random point
-- inside it), the strata of the ranges paired by independent shuffles.
function M.lhs(ranges, n, rng, order)
  local rs = M.ranges(ranges, order)
  local cells = {}
  for i = 1, n do cells[i] = {} end
  for _, r in ipairs(rs) do
    local strata = {}
    for i = 1, n do strata[i] = i - 1 end
    rng:shuffle(strata)
    for i = 1, n do cells[i][r.name] = value_at(r, (strata[i] + rng:uniform()) / n) end
  end
  return cells, rs
end

return M
