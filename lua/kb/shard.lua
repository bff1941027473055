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
--
-- How a scenario splits its work is recorded (describe().split, in
-- result.json's `shard`), so `kbrun merge` can check that the shards' parts
-- are disjoint and whole: range(total, what) records {total, first, last}
-- under `what` (default "items"), owns(i, what) records {by =
-- "round-robin", items = how many it owned}. The bundled scenarios:
--   kb.kfp.storm (taxi_50runs, sweep cells' storms)  range(num_runs, "runs")
--   kb.sweep (sweep_taxi)                            owns(cell index, "cells")
--   http_storm, job_storm, argo_storm                items(total, "requests" /
--                                                    "jobs" / "workflows")
-- A sharded run that split nothing did all the work in every shard: merge
-- refuses it (unless --force).
--
-- Work is split once: code running inside a part already split (a sweep
-- cell, M.within_part) sees range/owns/size as unsharded, so a storm in a
-- cell of a sharded sweep runs all its runs.
local M = { index = 0, count = 1, sharded = false, splits = {} }

local context = require "kb.context"

-- The shard the calling task splits by: unsharded inside a split part.
local function current()
  if context.get("shard.part") then return 0, 1 end
  return M.index, M.count
end

--- kb.shard.current() -> index, count the calling task splits by: the
-- process's shard, or 0, 1 inside a part already split (within_part).
function M.current() return current() end

--- kb.shard.within_part(what, fn, ...) -> fn's results: runs fn (in the
-- calling task and the tasks it spawns) as inside one item of a split
-- already made (`what`, e.g. "cells"): range and owns take everything.
function M.within_part(what, fn, ...)
  local saved = context.push({ ["shard.part"] = what or true })
  local res = table.pack(pcall(fn, ...))
  context.restore(saved)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

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
  M.splits = {}
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
-- The part of 1..total that shard `index` of `count` takes.
local function part(total, index, count)
  local base, extra = total // count, total % count
  local first = index * base + math.min(index, extra) + 1
  local size = base + (index < extra and 1 or 0)
  return first, first + size - 1
end

--- kb.shard.range(total [, what]) -> first, last (see above); recorded
-- as this shard's part of `what` (default "items").
function M.range(total, what)
  total = check_total(total, "range")
  local index, count = current()
  local first, last = part(total, index, count)
  if count == M.count then M.splits[what or "items"] = { total = total, first = first, last = last } end
  return first, last
end

--- kb.shard.size(total [, what]) -> how many of total items this shard
-- takes (range, recorded as range records it).
function M.size(total, what)
  local first, last = M.range(check_total(total, "size"), what)
  return last - first + 1
end

--- kb.shard.part(total, index, count) -> first, last of shard `index`
-- of `count` (what range gives that shard), for checks and merges.
function M.part(total, index, count) return part(check_total(total, "part"), index, count) end

--- kb.shard.owns(i) -> whether item i (counting from 1) is this shard's,
-- round-robin: item i belongs to shard (i - 1) % count. Unlike range it
-- needs no total and spreads neighbours (e.g. sweep cells of increasing
-- load) over all shards.
function M.owns(i, what)
  if math.type(i) ~= "integer" then
    if type(i) == "number" and i == math.floor(i) then i = math.tointeger(i)
    else error("kb.shard.owns: item must be an integer, got " .. tostring(i), 2) end
  end
  if i < 1 then error("kb.shard.owns: items count from 1, got " .. i, 2) end
  local index, count = current()
  if count ~= M.count then return true end -- inside a split part: everything
  local mine = (i - 1) % count == index
  local rec = M.splits[what or "items"]
  if not rec or rec.by ~= "round-robin" then
    rec = { by = "round-robin", items = 0 }
    M.splits[what or "items"] = rec
  end
  if mine then rec.items = rec.items + 1 end
  return mine
end

--- kb.shard.items(total [, what]) -> list of this shard's items of
-- 1..total, round-robin as owns() takes them (item i is shard
-- (i - 1) % count's), in increasing order; recorded as {by =
-- "round-robin", total =, items = how many}, so `kbrun merge` can check
-- that the shards' parts add up to total. A schedule keyed by the global
-- item (item i arrives (i - 1) / rate seconds after the start) splits
-- consistently this way: every shard runs over the whole window at
-- rate / count, and together they send exactly the unsharded arrivals.
-- The bundled http_storm, job_storm and argo_storm split this way.
function M.items(total, what)
  total = check_total(total, "items")
  local index, count = current()
  local list = {}
  for i = index + 1, total, count do list[#list + 1] = i end
  if count == M.count then
    M.splits[what or "items"] = { by = "round-robin", total = total, items = #list }
  end
  return list
end

--- kb.shard.describe() -> { index =, count = [, split = {[what] = ...}] }
-- (recorded in result.json), or nil when unsharded. split is absent when
-- the scenario split nothing (then every shard did all the work).
function M.describe()
  if not M.sharded then return nil end
  local split
  for what, rec in pairs(M.splits) do
    split = split or {}
    local copy = {}
    for k, v in pairs(rec) do copy[k] = v end
    split[what] = copy
  end
  return { index = M.index, count = M.count, split = split }
end

return M
