--- The fast-forwarding (events) scenario clock of the embedded simulator:
-- waits cost no real time and are counted exactly, request timeouts run
-- on it, real work (a child process) keeps it from skipping, and several
-- simulators share it. Ground truth: the modelled latencies the config
-- fixes, the sleeps asked for, and the clock's own count of skipped time.
local kb = require "kb"
local core = require "kb.core"
local T = require "kb.testing"

local SLOW = 5 -- seconds: every KFP call, a fixed draw
local CONFIG = { kfp_api = { default = { fixed = SLOW }, ListRuns = { fixed = SLOW, per_item = 0,
  per_stored_run = 0 } } }

T.case("kb.sleep skips exactly, and kb.now() stands still while Lua works", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  T.eq(core.clock_kind(), "events")
  local skipped0 = core.clock_skipped()
  local t0 = kb.now()
  kb.sleep(3600)
  T.ok(math.abs(kb.now() - t0 - 3600) < 1e-6, "an hour passed on the clock: " .. (kb.now() - t0))
  T.ok(math.abs(core.clock_skipped() - skipped0 - 3600) < 1e-6, "and was skipped, not waited")
  local t1 = kb.now()
  local x = 0
  for i = 1, 200000 do x = x + i end
  T.eq(kb.now(), t1, "host work costs no time on the clock")
end)

T.case("a request to the simulator reads its modelled latency, and times out on the clock", function()
  local sim <close> = kb.sim.start { profile = "fast", config = CONFIG }
  local url = sim.url .. "/apis/v2beta1/runs?page_size=1"
  local t0 = kb.now()
  local res = kb.http.get(url, { timeout = 60 })
  T.eq(res.status, 200)
  T.ok(math.abs(res.time.total - SLOW) < 1e-6, "res.time.total is the modelled draw: " .. res.time.total)
  T.ok(math.abs(kb.now() - t0 - SLOW) < 1e-6, "so is kb.now() around the call")
  -- a timeout shorter than the modelled latency fires on the clock
  t0 = kb.now()
  local ok, err = pcall(kb.http.get, url, { timeout = 2 })
  T.ok(not ok, "timed out")
  T.eq(err.class, "timeout", tostring(err))
  T.ok(math.abs(kb.now() - t0 - 2) < 1e-3, "after 2 s on the clock, got " .. (kb.now() - t0))
end)

T.case("a child process is real work: the clock runs with it and does not skip", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  local far = kb.spawn(function() kb.sleep(1000) end) -- a wait the clock could jump to
  local t0, skipped0 = kb.now(), core.clock_skipped()
  local r = kb.process.run { cmd = { "sleep", "0.2" }, timeout = 30 }
  T.eq(r.code, 0)
  local dt = kb.now() - t0
  T.ok(dt >= 0.2 and dt < 100, "the child's 0.2 s passed in real time, got " .. dt)
  T.eq(core.clock_skipped(), skipped0, "no jump while it ran")
  far:cancel()
end)

T.case("simulators share the clock; the last one to stop gives back the real clock", function()
  local a = kb.sim.start { profile = "fast", seed = 1 }
  local b = kb.sim.start { profile = "fast", seed = 2 }
  a:stop()
  T.eq(core.clock_kind(), "events", "b still drives it")
  local t0 = kb.now()
  kb.sleep(50)
  T.ok(math.abs(kb.now() - t0 - 50) < 1e-6)
  b:stop()
  T.eq(core.clock_kind(), "linear")
  T.eq(core.clock_speed(), 1)
  local linear = kb.sim.start { profile = "fast", speed = 600 }
  T.eq(core.clock_kind(), "linear", "a speed asks for the linear clock")
  T.eq(core.clock_speed(), 600)
  linear:stop()
  T.raises(function() kb.sim.start { clock = "sometimes" } end, "clock must be")
end)

T.run()
