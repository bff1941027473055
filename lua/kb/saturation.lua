--- kb.saturation: was kbrun itself the bottleneck of a run?
--
-- kbrun runs every task on one event loop. While the loop is busy (Lua,
-- encoding, parsing: anything but waiting for events), an answer that has
-- arrived waits for it, and the latency measured for it includes that
-- wait: kbrun's own delay, not the server's. This module measures the
-- share of real time the loop was busy, from libuv's idle time
-- (kb.core.loop_idle), over the whole run, over windows of about a second
-- (the busiest) and between samples (the saturated time), and the
-- process's CPU time. The runner samples it at every
-- journal flush and writes the figures as result.json's `client`; it warns
-- when the loop was saturated (at least M.SATURATED busy) for M.WINDOW
-- seconds or more in all, unless
-- the run's clock fast-forwards (the embedded simulator's events clock,
-- where the client's own time is not in the latencies).
--
--   local meter = require("kb.saturation").start()
--   meter:sample()              -- now and then (a journal flush hook)
--   local c = meter:summary()   -- {cpu_seconds, wall_seconds, loop_busy, ...}
local core = require "kb.core"

local M = {}

--- A stretch at least this busy is a saturated one.
M.SATURATED = 0.95
--- Real seconds a window spans at least (and the saturated time that is
-- warned about).
M.WINDOW = 1

local Meter = {}
Meter.__index = Meter

--- A meter counting from now.
function M.start()
  local idle, now = core.loop_idle()
  return setmetatable({ idle0 = idle, t0 = now, cpu0 = os.clock(), w_idle = idle, w_t = now,
    s_idle = idle, s_t = now, busy_max = nil, saturated = 0 }, Meter)
end

local function busy_share(idle_span, span)
  return math.min(1, math.max(0, 1 - idle_span / span))
end

-- Closes the window that began at w_t, at (idle, now).
local function close_window(m, idle, now)
  local busy = busy_share(idle - m.w_idle, now - m.w_t)
  if not m.busy_max or busy > m.busy_max then m.busy_max = busy end
  m.w_idle, m.w_t = idle, now
end

-- The time since the last sample counts as saturated when the loop was
-- busy for nearly all of it. Samples come at each journal flush, every
-- few tens of ms while the loop turns; a loop blocked for seconds is one
-- long stretch between two samples, all of it busy.
local function account(m, idle, now)
  local span = now - m.s_t
  if span > 0 then
    local busy = busy_share(idle - m.s_idle, span)
    if busy >= M.SATURATED then m.saturated = m.saturated + span end
    -- a stretch that long is a window of its own (the loop was blocked)
    if span >= M.WINDOW and (not m.busy_max or busy > m.busy_max) then m.busy_max = busy end
  end
  m.s_idle, m.s_t = idle, now
end

--- Takes a sample; closes the current window once it spans M.WINDOW.
function Meter:sample()
  local idle, now = core.loop_idle()
  account(self, idle, now)
  if now - self.w_t >= M.WINDOW then close_window(self, idle, now) end
end

--- The figures so far (a last window of at least half M.WINDOW counts):
-- cpu_seconds (user + system of the process), wall_seconds (real),
-- loop_busy (share of the wall time the loop was busy), loop_busy_max
-- (the busiest stretch of M.WINDOW s or more; nil before the first),
-- saturated_seconds (the time between two samples the loop was at least
-- M.SATURATED busy, added up).
function Meter:summary()
  local idle, now = core.loop_idle()
  account(self, idle, now)
  if now - self.w_t >= M.WINDOW / 2 then close_window(self, idle, now) end
  local wall = now - self.t0
  local function round(x, d) return x and math.floor(x * 10 ^ d + 0.5) / 10 ^ d end
  return {
    cpu_seconds = round(os.clock() - self.cpu0, 3),
    wall_seconds = round(wall, 3),
    loop_busy = wall > 0 and round(busy_share(idle - self.idle0, wall), 3) or nil,
    loop_busy_max = round(self.busy_max, 3),
    saturated_seconds = round(self.saturated, 1),
  }
end

--- The warning for a run's `client` figures, or nil when the loop was
-- never saturated (or the clock fast-forwards: clock.mode "events").
function M.warning(client, clock)
  if type(client) ~= "table" or (client.saturated_seconds or 0) < M.WINDOW then return nil end
  if type(clock) == "table" and clock.mode == "events" then return nil end
  return string.format("kbrun's own event loop was saturated for %.1f s of %.1f s (its busiest "
    .. "second %d%% busy): latencies measured then include kbrun's own delay. Lower the "
    .. "concurrency, or split the load over several kbrun processes (--shard I/N, "
    .. "docs/scale-out.md)", client.saturated_seconds, client.wall_seconds or 0,
    math.floor((client.loop_busy_max or 1) * 100 + 0.5))
end

return M
