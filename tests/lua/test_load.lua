--- kb.load: arrival schedules and their accounting, against the embedded
-- simulator's events clock (time follows the schedule exactly). Ground
-- truth: the rate and duration asked for, the simulator's configured
-- latency and stall.
local kb = require "kb"
local load = require "kb.load"
local metrics = require "kb.metrics"
local T = require "kb.testing"

local function count(name)
  local m = metrics.get(name)
  return m and m:value() or 0
end

T.case("a constant 2/s for 300 s starts 600 operations at their times", function()
  local sim <close> = kb.sim.start { profile = "fast" }
  local at = {}
  local t0 = kb.now()
  local r = load.run { model = "constant", rate = 2, duration = 300, name = "t1",
    fn = function(i) at[i] = kb.now() - t0; kb.sleep(1) end }
  T.eq(r.arrivals, 600)
  T.eq(r.started + r.dropped, 600)
  T.eq(r.completed, 600)
  T.eq(count("t1.started"), 600)
  T.eq(count("t1.completed"), 600)
  for i = 1, 600 do T.ok(math.abs(at[i] - (i - 1) / 2) < 1e-6, "arrival " .. i .. " at " .. at[i]) end
  T.ok(math.abs(r.duration - 300.5) < 1e-6, "the last arrival at 299.5 s plus its 1 s: " .. r.duration)
end)

T.case("Poisson arrivals: about rate x duration, reproducible for a seed", function()
  local a = load.arrivals { model = "poisson", rate = 2, duration = 300, seed = 9 }
  local b = load.arrivals { model = "poisson", rate = 2, duration = 300, seed = 9 }
  T.eq(#a, #b)
  for i = 1, #a do T.eq(a[i], b[i]) end
  T.ok(math.abs(#a - 600) <= 0.05 * 600 * 2, "within 10% of 600 (sd ~24): " .. #a) -- a loose, seeded bound
  for i = 2, #a do T.ok(a[i] > a[i - 1]) end
end)

T.case("a cap of 10 in flight against a slow server: the excess is dropped and counted", function()
  local sim <close> = kb.sim.start { profile = "fast", config = { kfp_api = { default = { fixed = 5 },
    ListRuns = { fixed = 5, per_item = 0, per_stored_run = 0 } } } }
  local url = sim.url .. "/apis/v2beta1/runs?page_size=1"
  -- 4 arrivals a second, each held 5 s: 20 would be in flight; 10 may be
  local r = load.run { model = "constant", rate = 4, duration = 30, max_in_flight = 10, name = "t2",
    fn = function() assert(kb.http.get(url, { timeout = 60 }).status == 200) end }
  T.eq(r.arrivals, 120)
  T.eq(r.started + r.dropped, 120)
  T.ok(r.dropped > 0, "some arrivals dropped: " .. r.dropped)
  -- every 5 s a wave of 10 ends and 10 more start: 10 per 5 s = 2/s started
  T.eq(r.started, 60)
  T.eq(count("t2.dropped"), r.dropped)
  T.eq(r.failed, 0)
  local h = metrics.get("t2.latency")
  T.ok(math.abs(h:percentile(50) - 5) < 0.01, "each call the modelled 5 s")
end)

T.case("queueing instead of dropping: latency from the intended start exceeds the raw one", function()
  local sim <close> = kb.sim.start { profile = "fast", config = { kfp_api = { default = { fixed = 0.1 },
    ListRuns = { fixed = 0.1, per_item = 0, per_stored_run = 0 } } } }
  local url = sim.url .. "/apis/v2beta1/runs?page_size=1"
  -- every request stalls 3 s: with 2 slots and 2 arrivals a second, they queue
  assert(kb.http.post(sim.url .. "/sim/v1/faults", { api = { stall_rate = 1, stall_seconds = 3 } }).status == 200)
  local r = load.run { model = "constant", rate = 2, duration = 10, max_in_flight = 2, on_full = "queue",
    name = "t3", fn = function() kb.http.get(url, { timeout = 60 }) end }
  T.eq(r.dropped, 0, "queued, not dropped")
  T.eq(r.started, 20)
  local raw, co = metrics.get("t3.latency"), metrics.get("t3.latency_corrected")
  T.ok(math.abs(raw:percentile(50) - 3.1) < 0.01, "raw: the stall plus the modelled 0.1 s")
  T.ok(co:percentile(99) > raw:percentile(99) * 3, string.format("corrected p99 %.1f s > raw %.1f s",
    co:percentile(99), raw:percentile(99)))
end)

T.case("stages change the rate at their boundaries", function()
  local stages = { { duration = 10, target = 1 }, { duration = 10, target = 1 }, { duration = 10, target = 5 } }
  local a = load.arrivals { model = "ramping", stages = stages, start_rate = 1 }
  -- 1/s for 20 s (20 arrivals), then a ramp 1 -> 5 over 10 s: (1 + 5) / 2 * 10 = 30
  T.eq(#a, 50)
  local first20 = 0
  for _, t in ipairs(a) do if t < 20 then first20 = first20 + 1 end end
  T.eq(first20, 20)
  T.ok(math.abs(a[2] - a[1] - 1) < 1e-9, "1 s apart at 1/s")
  T.ok(a[#a] - a[#a - 1] < 0.25, "about 0.2 s apart near 5/s")
end)

T.case("the closed model and bad options", function()
  local r = load.run { model = "closed", iterations = 30, concurrency = 3, name = "t4",
    fn = function() kb.sleep(0.01) end }
  T.eq(r.started, 30)
  T.eq(r.completed, 30)
  T.raises(function() load.run { model = "sometimes", fn = print } end, "model must be")
  T.raises(function() load.run { model = "constant", rate = -1, duration = 1, fn = print } end, "rate must be")
  T.raises(function() load.run { model = "ramping", stages = {}, fn = print } end, "ramping wants stages")
end)

T.run()
