--- kb.shard: which part of the work is this process's own, when one
-- experiment runs as N processes (N pods of an Indexed Kubernetes Job, or
-- N local processes) whose results `kbrun merge` combines.
--
--   local kb = require "kb"
--   local first, last = kb.shard.range(p.num_runs)   -- contiguous, balanced
--   for i = first, last do start_run(i) end
--   for i = 1, #cells do if kb.shard.owns(i) then run_cell(cells[i]) end end
--   kb.shard.index, kb.shard.count                   -- 0 <= index < count
--
-- The shard comes from `kbrun --shard I/N`, else from the environment:
-- KBRUN_SHARD_INDEX (or JOB_COMPLETION_INDEX, which Kubernetes sets in the
-- pods of an Indexed Job) and KBRUN_SHARD_COUNT. Indices count from 0, as
-- Kubernetes completion indices do. Unsharded, index = 0 and count = 1:
-- range(n) is 1..n and owns(i) is always true, so a scenario written for
-- shards runs unchanged on its own.
local M = { index = 0, count = 1, sharded = false }

local function parse_int(text, what)
  if type(text) == "number" then text = tostring(text) end
  if type(text) ~= "string" or not text:match("^%s*%d+%s*$") then
    return nil, string.format("%s must be a non-negative integer, got '%s'", what, tostring(text))
  end
  return math.tointeger(tonumber(text))
end

local function check(index, count)
  if count < 1 then return nil, string.format("shard count must be at least 1, got %d", count) end
  if index >= count then
    return nil, string.format("shard index %d is not below the shard count %d (indices count from 0)",
      index, count)
  end
  return true
end

--- kb.shard.parse("I/N") -> index, count, or nil and a message.
function M.parse(text)
  local i, n = tostring(text):match("^%s*(%d+)%s*/%s*(%d+)%s*$")
  if not i then
    return nil, string.format("--shard wants I/N (shard I of N, 0 <= I < N), got '%s'", tostring(text))
  end
  i, n = math.tointeger(tonumber(i)), math.tointeger(tonumber(n))
  local ok, why = check(i, n)
  if not ok then return nil, why end
  return i, n
end

--- kb.shard.from_env([getenv]) -> index, count (1 shard when unset), or
-- nil and a message. getenv defaults to os.getenv (tests pass their own).
function M.from_env(getenv)
  getenv = getenv or os.getenv
  local count_text = getenv("KBRUN_SHARD_COUNT")
  local index_text = getenv("KBRUN_SHARD_INDEX")
  local index_name = "KBRUN_SHARD_INDEX"
  if index_text == nil or index_text == "" then
    index_text, index_name = getenv("JOB_COMPLETION_INDEX"), "JOB_COMPLETION_INDEX"
  end
  if count_text == nil or count_text == "" then
    if index_text ~= nil and index_text ~= "" and index_name == "KBRUN_SHARD_INDEX" then
      return nil, "KBRUN_SHARD_INDEX is set but KBRUN_SHARD_COUNT is not"
    end
    return 0, 1 -- a lone JOB_COMPLETION_INDEX: some other Indexed Job, not a shard
  end
  local n, nerr = parse_int(count_text, "KBRUN_SHARD_COUNT")
  if not n then return nil, nerr end
  local i = 0
  if index_text ~= nil and index_text ~= "" then
    local ierr
    i, ierr = parse_int(index_text, index_name)
    if not i then return nil, ierr end
  elseif n > 1 then
    return nil, "KBRUN_SHARD_COUNT is set but neither KBRUN_SHARD_INDEX nor JOB_COMPLETION_INDEX is"
  end
  local ok, why = check(i, n)
  if not ok then return nil, why end
  return i, n
end

--- kb.shard.set(index, count): makes this process shard index of count
-- (the runner calls it; tests may too). Raises on bad values.
function M.set(index, count)
  local i, n = math.tointeger(index), math.tointeger(count)
  if not i or not n or i < 0 then
    error(string.format("kb.shard.set: index and count must be integers, index >= 0 (got %s, %s)",
      tostring(index), tostring(count)), 2)
  end
  local ok, why = check(i, n)
  if not ok then error("kb.shard.set: " .. why, 2) end
  M.index, M.count, M.sharded = i, n, n > 1
end

--- kb.shard.configure(cli_text [, getenv]) -> true, or nil and a message:
-- the shard from `--shard I/N` if given, else from the environment.
function M.configure(cli_text, getenv)
  local i, n
  if cli_text ~= nil then i, n = M.parse(cli_text) else i, n = M.from_env(getenv) end
  if not i then return nil, n end
  M.set(i, n)
  return true
end

local function check_total(total, fn)
  if math.type(total) ~= "integer" then
    if type(total) == "number" and total == math.floor(total) and total >= 0 then
      return math.tointeger(total)
    end
    error(string.format("kb.shard.%s: total must be a non-negative integer, got %s", fn, tostring(total)), 3)
  end
  if total < 0 then error(string.format("kb.shard.%s: total must be >= 0, got %d", fn, total), 3) end
  return total
end

--- kb.shard.range(total) -> first, last: this shard's contiguous part of
-- items 1..total. Parts differ in size by at most one (the first
-- total % count shards take one more); a shard with nothing gets
-- first = last + 1, so `for i = first, last` runs zero times.
function M.range(total)
  total = check_total(total, "range")
  local base, extra = total // M.count, total % M.count
  local first = M.index * base + math.min(M.index, extra) + 1
  local size = base + (M.index < extra and 1 or 0)
  return first, first + size - 1
end

--- kb.shard.size(total) -> how many of total items this shard takes (range).
function M.size(total)
  local first, last = M.range(check_total(total, "size"))
  return last - first + 1
end

--- kb.shard.owns(i) -> whether item i (counting from 1) is this shard's,
-- round-robin: item i belongs to shard (i - 1) % count. Unlike range it
-- needs no total and spreads neighbours (e.g. sweep cells of increasing
-- load) over all shards.
function M.owns(i)
  if math.type(i) ~= "integer" then
    if type(i) == "number" and i == math.floor(i) then i = math.tointeger(i)
    else error("kb.shard.owns: item must be an integer, got " .. tostring(i), 2) end
  end
  if i < 1 then error("kb.shard.owns: items count from 1, got " .. i, 2) end
  return (i - 1) % M.count == M.index
end

--- kb.shard.describe() -> { index =, count = } (recorded in result.json),
-- or nil when unsharded.
function M.describe()
  if not M.sharded then return nil end
  return { index = M.index, count = M.count }
end

return M
