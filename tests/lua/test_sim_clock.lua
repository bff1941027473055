--- One modelled latency, one figure: GETs on the simulator's KFP,
-- Kubernetes and argo-server surfaces, timed with res.time.total, read the
-- modelled latency (plus this machine's small real overhead) whatever the
-- simulator's speed, embedded (the scenario clock at x60, x600, x6000) or
-- standalone (`kbrun sim`, the client on the real clock). Before, the
-- argo-server surface read host time x speed, and a client of a standalone
-- simulator read the modelled latency / speed.
local kb = require "kb"
local T = require "kb.testing"

local MODELLED = 0.5 -- seconds, every surface (a fixed draw: the ground truth)
local CONFIG = string.format([[
kfp_api:
  ListRuns: {fixed: %g, per_item: 0, per_stored_run: 0}
k8s:
  api_single_object: {fixed: %g}
argo:
  api_single_object: {fixed: %g}
]], MODELLED, MODELLED, MODELLED)

local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
local probe = kb.fs.join(src, "tests", "lua", "sim_clock_probe.lua")
local dir = kb.fs.tmpdir("kbrun-test-sim-clock")
local config = kb.fs.join(dir, "sim.yaml")
kb.fs.write(config, CONFIG)

local function run_probe(args, env)
  local cmd = { bin, "-q", "-o", kb.fs.join(dir, "out") }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  cmd[#cmd + 1] = probe
  local r = kb.process.run { cmd = cmd, env = env, timeout = 120 }
  T.eq(r.code, 0, r.stderr)
  return kb.json.decode(r.stdout:match("[^\n]*{.*}"))
end

local function embedded(speed)
  if speed == "events" then
    return run_probe({ "--sim-clock", "events", "--sim-config", config }, { PROBE_URL = false })
  end
  return run_probe({ "--sim-speed", tostring(speed), "--sim-config", config }, { PROBE_URL = false })
end

local function standalone(speed)
  local sim <close>, url = require("sim_standalone").start { config = config, speed = speed }
  local medians = run_probe({}, { PROBE_URL = url })
  sim:kill()
  return medians
end

-- Every median is the modelled latency plus real overhead: never below it,
-- and within 10% above it (the overhead is milliseconds against 0.5 s).
local function check(label, medians, key_suffix)
  for _, surface in ipairs { "kfp", "k8s", "argo" } do
    local m = medians[surface .. (key_suffix or "")]
    T.ok(type(m) == "number", label .. " " .. surface .. " measured")
    T.ok(m >= MODELLED * 0.999, string.format("%s %s: %.4f s >= modelled %.3f s", label, surface, m, MODELLED))
    T.ok(m <= MODELLED * 1.10, string.format("%s %s: %.4f s within 10%% of modelled %.3f s", label, surface, m, MODELLED))
  end
end

-- The fast-forwarding clock (the default): res.time and kb.now() taken
-- around the call both read exactly the modelled latency (host overhead
-- costs no time on it).
T.case("embedded simulator, events clock: res.time and kb.now() read the modelled latency", function()
  local m = embedded("events")
  T.eq(m.clock, "events")
  check("events res.time", m)
  check("events kb.now()", m, "_now")
  for _, surface in ipairs { "kfp", "k8s", "argo" } do
    T.ok(math.abs(m[surface] - MODELLED) < 1e-6, surface .. ": exactly the modelled draw, got " .. m[surface])
    T.ok(math.abs(m[surface .. "_now"] - MODELLED) < 1e-6, surface .. ": kb.now() around, got " .. m[surface .. "_now"])
  end
end)

for _, speed in ipairs { 60, 600, 6000 } do
  T.case("embedded simulator at x" .. speed .. ": res.time reads the modelled latency", function()
    check("embedded x" .. speed, embedded(speed))
  end)
  T.case("standalone kbrun sim at x" .. speed .. ", client on the real clock: the same figure", function()
    check("standalone x" .. speed, standalone(speed))
  end)
end

T.run()
kb.fs.remove(dir, { recursive = true })
