--- kb.sweep.lock: one sweep at a time in a sweep folder (docs/sweep.md,
-- "One sweep per folder").
--
--   local lock = require "kb.sweep.lock"
--   local held = lock.acquire(dir)    -- raises class "usage" if a live sweep holds it
--   ...
--   held:release()
--
-- The lock is the file <dir>/sweep.lock, a JSON object naming its holder:
-- {pid, host, boot_id, start (the process's start time in clock ticks
-- since boot, /proc/<pid>/stat field 22), started_at (UTC), wall}. Taking
-- it is a check-and-write under an exclusive flock(2) of <dir>/.sweep.lock
-- (kb.fs.with_lock, held for microseconds, never across a yield), so two
-- sweeps starting at the same instant cannot both see the folder free.
--
-- A lock file is stale, and taken over, when its holder is gone: same host
-- and either another boot (boot_id), no process with its pid, or a process
-- with its pid that started at another time (the pid was reused). A lock
-- held from another host is never presumed stale: the refusal says how to
-- remove it by hand. A SIGKILLed sweep leaves its lock behind; the next
-- run finds its pid dead and goes on.
local fs = require "kb.fs"
local proc = require "kb.proc"
local json = require "kb.json"

local M = {}
local format = string.format

local function read(path)
  local ok, text = pcall(fs.read, path)
  return ok and text or nil
end

--- This process as a lock holder: {pid, host, boot_id, start}; fields
-- are nil where /proc does not tell (then a lock is never presumed stale).
function M.me()
  local pid = proc.self_pid()
  return { pid = pid, host = proc.host(), boot_id = proc.boot_id(), start = pid and proc.start_ticks(pid) }
end

--- Whether the holder recorded in `rec` is gone (see the module comment);
-- `me` is M.me(). Returns stale, reason.
function M.stale(rec, me)
  if type(rec) ~= "table" or math.type(rec.pid) ~= "integer" then
    return true, "the lock file does not name a process"
  end
  if rec.host ~= me.host or me.host == nil then return false end
  if rec.boot_id and me.boot_id and rec.boot_id ~= me.boot_id then
    return true, "its host has rebooted since"
  end
  if fs.exists("/proc/self/stat") ~= "file" then return false end -- no /proc: cannot tell
  local start = proc.start_ticks(rec.pid)
  if start == nil then return true, format("process %d is gone", rec.pid) end
  if rec.start and start ~= rec.start then
    return true, format("process %d is another process now (pid reused)", rec.pid)
  end
  return false
end

local function describe(rec)
  return format("pid %s on %s, started %s", tostring(rec.pid), tostring(rec.host or "an unknown host"),
    tostring(rec.started_at or "at an unknown time"))
end

local Held = {}
Held.__index = Held

--- Removes the lock file if it is still this holder's. Idempotent.
function Held:release()
  if self.released then return end
  self.released = true
  pcall(fs.with_lock, self.mutex, function()
    local ok, rec = pcall(json.decode, read(self.path) or "null")
    if ok and type(rec) == "table" and rec.pid == self.rec.pid and rec.start == self.rec.start
        and rec.wall == self.rec.wall then
      fs.remove(self.path)
    end
  end)
end

Held.__close = Held.release

--- Takes the lock of the sweep folder `dir` (which must exist) for this
-- process, or raises a usage error (class "usage") naming the sweep that
-- holds it. opts: name (the sweep's, for messages), wall (now, epoch s),
-- on_stale(reason, record) (told when a stale lock is taken over).
-- Returns the held lock: held:release(), also a to-be-closed value.
function M.acquire(dir, opts)
  opts = opts or {}
  local path, mutex = fs.join(dir, "sweep.lock"), fs.join(dir, ".sweep")
  local me = M.me()
  local wall = opts.wall or os.time()
  local rec = { pid = me.pid, host = me.host, boot_id = me.boot_id, start = me.start, wall = wall,
    started_at = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(wall)), sweep = opts.name }
  local holder, stale_reason, old
  fs.with_lock(mutex, function()
    local text = read(path)
    if text then
      local ok, cur = pcall(json.decode, text)
      cur = ok and cur or nil
      local stale, why = M.stale(cur, me)
      if not stale then
        holder = cur
        return
      end
      stale_reason, old = why, cur
    end
    fs.write(path, json.encode(rec, { sort_keys = true }) .. "\n")
  end)
  if holder then
    local here = holder.host == me.host and holder.pid == me.pid and holder.start == me.start
    local how = holder.host ~= me.host
      and format("if that sweep is no longer running, remove %s by hand", path)
      or "wait for it to finish, or stop it first"
    local e = require("kb.params").refusal(format(
      "kb.sweep: sweep '%s' in %s is already running (%s%s): %s; nothing was written",
      tostring(opts.name), dir, describe(holder), here and ", this very process" or "", how))
    e.path, e.holder = path, holder
    error(e, 0)
  end
  if stale_reason and opts.on_stale then opts.on_stale(stale_reason, old) end
  return setmetatable({ path = path, mutex = mutex, rec = rec }, Held)
end

return M
