-- kb.saturation: how busy kbrun's own event loop was (result.json's
-- `client`), against ground truth: a scenario that waits in real time and
-- then blocks the loop with Lua for a known CPU time, the process's own
-- CPU clock, and one that only waits. Runs kbrun as a child (KBRUN_BIN).
local kb = require "kb"
local T = require "kb.testing"
local fs = require "kb.fs"
local json = require "kb.json"
local saturation = require "kb.saturation"
local rebuild = require "kb.results.rebuild"

local SCENARIO = [[
local kb = require "kb"
return { name = "saturation_probe", params = { spin = 1.5, idle = 1.2 }, run = function(p)
  kb.core.sleep_real(p.idle)
  local t = os.clock()
  while os.clock() - t < p.spin do end -- the loop turns no more meanwhile
  return { ok = true }
end }
]]

local function run(args)
  local work = fs.tmpdir("kb-saturation-")
  local file = fs.join(work, "probe.lua")
  fs.write(file, SCENARIO)
  local cmd = { os.getenv("KBRUN_BIN"), "-q", "-o", fs.join(work, "out"), file }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  local r = kb.process.run { cmd = cmd, timeout = 120 }
  T.eq(r.code, 0, r.stderr)
  local dir
  for _, name in ipairs(fs.list(fs.join(work, "out"))) do
    if fs.exists(fs.join(work, "out", name, "result")) == "dir" then dir = fs.join(work, "out", name) end
  end
  T.ok(dir, "an experiment folder")
  return json.decode(fs.read(fs.join(dir, "result", "result.json"))), r.stderr, dir
end

T.case("a loop blocked for 1.5 s of CPU is saturated for that long, and said so", function()
  local doc, stderr, dir = run({})
  local c = doc.client
  T.ok(c, "result.json has client")
  T.ok(c.cpu_seconds >= 1.45, "cpu_seconds " .. c.cpu_seconds)
  T.ok(math.abs(c.wall_seconds - doc.duration) < 0.3, "wall " .. c.wall_seconds .. " vs " .. doc.duration)
  -- busy time holds the CPU time (more only when the machine made it wait)
  T.ok(c.loop_busy * c.wall_seconds >= c.cpu_seconds - 0.1,
    string.format("busy %.3f x %.3f s against %.3f s of CPU", c.loop_busy, c.wall_seconds, c.cpu_seconds))
  T.ok(c.loop_busy < 0.85, "the 1.2 s of waiting is idle: " .. c.loop_busy)
  T.ok(c.saturated_seconds >= 1.4 and c.saturated_seconds <= c.wall_seconds - 1.0,
    "saturated " .. c.saturated_seconds)
  T.ok(c.loop_busy_max >= 0.95, "busiest stretch " .. c.loop_busy_max)
  T.contains(stderr, "kbrun's own event loop was saturated for ")
  T.contains(stderr, "--shard I/N")
  -- a rebuilt result.json keeps the figures (the journal's end record)
  fs.remove(fs.join(dir, "result", "result.json"))
  local _, rebuilt = rebuild.experiment(dir)
  T.same(rebuilt.client, c)
end)

T.case("a loop that only waits is idle: no saturation, no warning", function()
  local doc, stderr = run({ "spin=0", "idle=1.5" })
  local c = doc.client
  T.ok(c.loop_busy < 0.2, "loop_busy " .. c.loop_busy)
  T.eq(c.saturated_seconds, 0)
  T.ok(c.loop_busy_max < 0.5, "busiest " .. tostring(c.loop_busy_max))
  T.ok(not stderr:find("saturated", 1, true), stderr)
end)

T.case("the warning: only for a second or more of saturation, never on the events clock", function()
  T.eq(saturation.warning(nil, nil), nil)
  T.eq(saturation.warning({ saturated_seconds = 0.9, wall_seconds = 10, loop_busy_max = 1 }), nil)
  local c = { saturated_seconds = 3.2, wall_seconds = 40.5, loop_busy_max = 0.987 }
  T.eq(saturation.warning(c, { kind = "virtual", mode = "events", speed = 1 }), nil)
  local w = saturation.warning(c, { kind = "real", speed = 1 })
  T.contains(w, "saturated for 3.2 s of 40.5 s (its busiest second 99% busy)")
  T.ok(saturation.warning(c, { kind = "virtual", mode = "linear", speed = 60 }) ~= nil,
    "a standalone simulator's scaled clock still counts kbrun's delay")
end)

T.run()
