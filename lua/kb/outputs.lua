--- kb.outputs: the result files that could not be written.
--
-- A full disk (or a read-only one, a quota, an I/O error) must never change
-- what is measured: kb.csv writers and kb.journal keep what they could not
-- write in memory and try again, and every failure lands here, so that the
-- runner prints it and exits with code 3 ("results not fully saved",
-- docs/results.md).
--
--   local outputs = require "kb.outputs"
--   outputs.watch(dir)          -- kb.fs write failures under dir are recorded
--   outputs.record(path, err [, owner])   -- a write to path failed
--   outputs.resolve(path)       -- path is complete after all (a retry worked)
--   outputs.retry()             -- owners try once more; -> outputs.failed()
--   outputs.failed()            -- { {path=, error=, message=, code=, unsaved=}, ... }
--
-- The first failure of a path is logged once (kb.log.error) with the path
-- and the system's message ("No space left on device"); later ones of the
-- same path are counted, not printed.
--
-- An owner (a kb.csv writer, a kb.journal) is an object with
--   owner:retry()   -> true when everything it held is written now
--   owner:unsaved() -> what is still only in memory ("412 rows"), or nil
local fs = require "kb.fs"

local M = {}

local entries = {} -- abspath -> entry
local order = {}   -- abspaths, first failure first
local watched = {} -- directory prefixes ("/abs/dir/")

local function key(path)
  local ok, abs = pcall(fs.abspath, path)
  return ok and abs or path
end

local function reason_of(err)
  if type(err) == "table" then return err.reason or err.message or tostring(err) end
  return tostring(err)
end

local function message_of(err)
  if type(err) == "table" then return err.message or tostring(err) end
  return tostring(err)
end

--- Records that writing `path` failed with `err` (a kb.fs error, or any
-- value). owner (optional): what holds the unwritten data and will retry
-- (see above). Returns the entry.
function M.record(path, err, owner)
  local k = key(path)
  local e = entries[k]
  if not e then
    e = { path = k, failures = 0 }
    entries[k] = e
    order[#order + 1] = k
  end
  e.failures = e.failures + 1
  e.error, e.message = reason_of(err), message_of(err)
  e.code = type(err) == "table" and err.code or nil
  if owner then e.owner = owner end
  if not e.printed then
    e.printed = true
    require("kb.log").error("%s (measuring goes on; what could not be written is kept in memory "
      .. "where possible and written again at the end; kbrun exits with 3 if results stay unsaved)",
      e.message)
  end
  e.resolved = false
  return e
end

--- Marks path as complete: a retry wrote everything it held.
function M.resolve(path)
  local e = entries[key(path)]
  if not e or e.resolved then return end
  e.resolved = true
  require("kb.log").info("%s: written after all (%d failed write%s before)", e.path, e.failures,
    e.failures == 1 and "" or "s")
end

local function unsaved_of(e)
  if not e.owner then return nil end
  local ok, text = pcall(e.owner.unsaved, e.owner)
  return ok and text or nil
end

--- The failures not resolved, in the order they first happened: a list of
-- { path = absolute path, error = the system's message, message = the full
-- error, code = "ENOSPC" (when known), unsaved = what is still only in
-- memory (when an owner keeps it), failures = count }.
function M.failed()
  local list = {}
  for _, k in ipairs(order) do
    local e = entries[k]
    if not e.resolved then
      list[#list + 1] = { path = e.path, error = e.error, message = e.message, code = e.code,
        unsaved = unsaved_of(e), failures = e.failures }
    end
  end
  return list
end

--- Asks every owner of an unresolved failure to write what it holds (the
-- end of a run: the disk may have space again). Returns M.failed().
function M.retry()
  for _, k in ipairs(order) do
    local e = entries[k]
    if not e.resolved and e.owner then
      local ok, done = pcall(e.owner.retry, e.owner)
      if ok and done then M.resolve(k) end
    end
  end
  return M.failed()
end

-- kb.fs's write hook: failures under a watched directory are recorded,
-- and a later complete write of the same file resolves them.
local function hook(path, err)
  local k = key(path)
  if err == nil then
    local e = entries[k]
    if e and not e.resolved and not e.owner then M.resolve(k) end
    return
  end
  for _, prefix in ipairs(watched) do
    if k:sub(1, #prefix) == prefix then
      M.record(k, err)
      return
    end
  end
end

--- Records every failed kb.fs write (write, append, appenders) of a file
-- under dir (the runner watches the experiments folder).
function M.watch(dir)
  local prefix = key(dir):gsub("/*$", "/")
  for _, p in ipairs(watched) do
    if p == prefix then return end
  end
  watched[#watched + 1] = prefix
  fs.set_write_hook(hook)
end

--- Forgets every failure and watched directory (tests).
function M.reset()
  entries, order, watched = {}, {}, {}
  fs.set_write_hook(nil)
end

return M
