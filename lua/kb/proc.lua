--- kb.proc: what Linux's /proc says of processes and of this host, for
-- telling whether the writer of a lock (kb.sweep's sweep.lock) or of a
-- temporary file (kb.tmpfiles) is still alive, and for describing the
-- machine in result.json. Every function returns nil where /proc does not
-- tell (another OS, a sandbox without /proc); callers then presume a
-- holder alive rather than take over its work.
local M = {}

--- The first line of a file (without its "\n"), or nil when unreadable.
function M.first_line(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local line = f:read("l")
  f:close()
  return line
end

--- This process's pid.
function M.self_pid()
  local line = M.first_line("/proc/self/stat")
  return line and math.tointeger(tonumber(line:match("^(%d+)")))
end

--- The start of process `pid` ("self" for this one) in clock ticks since
-- boot (/proc/<pid>/stat field 22), as the text /proc gives; nil when
-- there is no such process. Two processes with one pid never share it.
function M.start_ticks(pid)
  local line = M.first_line("/proc/" .. tostring(pid) .. "/stat")
  -- field 2 (comm) is in parentheses and may hold spaces and ")": the
  -- fields are counted after its last ")"
  local rest = line and line:match("^.*%)%s+(.*)$")
  if not rest then return nil end
  local n = 2
  for field in rest:gmatch("%S+") do
    n = n + 1
    if n == 22 then return field end
  end
  return nil
end

local boot_time -- seconds since the epoch, from /proc/stat's btime

local function boot()
  if boot_time == nil then
    boot_time = false
    local f = io.open("/proc/stat", "r")
    if f then
      for line in f:lines() do
        local b = line:match("^btime%s+(%d+)")
        if b then boot_time = tonumber(b) break end
      end
      f:close()
    end
  end
  return boot_time or nil
end

-- Linux exports process start times in clock ticks of USER_HZ, which the
-- kernel ABI fixes at 100 on every architecture kbrun builds for.
local USER_HZ = 100

--- When process `pid` ("self" for this one) started, in seconds since the
-- epoch (10 ms resolution), or nil.
function M.start_time(pid)
  local ticks, b = tonumber(M.start_ticks(pid)), boot()
  if not ticks or not b then return nil end
  return b + ticks / USER_HZ
end

--- This host's name and its boot id (a new one at every boot).
function M.host() return M.first_line("/proc/sys/kernel/hostname") end
function M.boot_id() return M.first_line("/proc/sys/kernel/random/boot_id") end

return M
