--- kb.tmpfiles: removes the temporaries kb.fs.write left behind.
--
-- kb.fs.write writes "<dir>/.<name>.kbtmp-<pid>-<n>" and renames it over
-- <name>; a process killed between the two (SIGKILL, a second Ctrl-C during
-- `kbrun report`) leaves the temporary. The next kbrun writing into the
-- folder removes the stale ones, and only those:
--   - the name must be kb.fs's own pattern (nothing else is touched);
--   - stale means its writer is gone: no process has that pid, or the
--     process that has it now started after the file was last written
--     (the pid was reused), or it is this very process and the file is
--     older than its start.
-- A temporary of a live writer (another kbrun writing there right now) is
-- kept. Pids are per machine: on a folder shared between machines, a live
-- writer elsewhere looks gone.
local fs = require "kb.fs"
local proc = require "kb.proc"

local M = {}

local PATTERN = "^%.(.+)%.kbtmp%-(%d+)%-(%d+)$"

--- The file a temporary would have replaced and its writer's pid, or nil
-- when name is not one of kb.fs.write's temporaries.
function M.parse(name)
  local target, pid = name:match(PATTERN)
  if not target then return nil end
  return target, tonumber(pid)
end

--- When the process holding pid started (seconds since the epoch, 10 ms
-- resolution), or nil if there is no such process. "self" for this one.
M.process_start = proc.start_time

-- Whether the temporary `path` (written by pid) has no live writer.
local function stale(path, pid, self_pid, self_start)
  local ok, st = pcall(fs.stat, path)
  if not ok or st.type ~= "file" then return false end
  if pid == self_pid then
    -- a write of ours may be in flight (large writes and fsyncs run on
    -- the thread pool while other tasks go on): only a file older than
    -- this process is certainly not ours
    return self_start ~= nil and st.mtime < self_start
  end
  local started = M.process_start(pid)
  if started == nil then return true end   -- no such process
  -- 1 s of slack: the start time has 10 ms resolution, mtime may be coarse
  return st.mtime < started - 1             -- the pid was reused since
end

--- Removes the stale temporaries directly inside dir (not below it).
-- Returns the list of paths removed; a folder that does not exist or
-- cannot be read removes nothing. Never raises for a file it cannot
-- remove (another process may win the race); those are just not listed.
function M.clean(dir)
  local removed = {}
  local ok, names = pcall(fs.list, dir)
  if not ok then return removed end
  local self_pid, self_start = proc.self_pid(), M.process_start("self")
  for _, name in ipairs(names) do
    local target, pid = M.parse(name)
    if target then
      local path = fs.join(dir, name)
      if stale(path, pid, self_pid, self_start) and pcall(fs.remove, path) then
        removed[#removed + 1] = path
      end
    end
  end
  return removed
end

--- M.clean on dir and on the folders below it, `depth` levels down
-- (0: dir alone). Returns every path removed.
function M.clean_tree(dir, depth)
  local removed = M.clean(dir)
  if (depth or 0) > 0 then
    local ok, names = pcall(fs.list, dir)
    if ok then
      for _, name in ipairs(names) do
        local sub = fs.join(dir, name)
        if fs.exists(sub) == "dir" then
          for _, p in ipairs(M.clean_tree(sub, depth - 1)) do removed[#removed + 1] = p end
        end
      end
    end
  end
  return removed
end

return M
