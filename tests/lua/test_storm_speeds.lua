--- The storms' latency figures do not depend on the simulator's speed:
-- the KFP run storm (taxi_50runs) and the Argo storm run on the embedded
-- simulator at x60, x600 and x6000 and against a standalone `kbrun sim`
-- (the client on the real clock), with the same fixed modelled latencies.
-- Each result.json's p50 of run.create, run.get and argo.create reads the
-- modelled latency (the ground truth the config sets) within 10%, so the
-- runs agree with each other within 10% too. Before, argo.create read host
-- time x speed and a standalone simulator's figures read modelled / speed.
local kb = require "kb"
local T = require "kb.testing"

local CREATE, GET, ARGO = 1.5, 0.7, 1.0 -- modelled seconds (fixed draws, below taxi_50runs' thresholds; 10% leaves room for a loaded machine)
local CONFIG = string.format([[
kfp_api:
  max_inflight: 1000
  CreateRun: {fixed: %g}
  GetRun: {fixed: %g}
argo:
  api_single_object: {fixed: %g}
]], CREATE, GET, ARGO)

local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
local dir = kb.fs.tmpdir("kbrun-test-storm-speeds")
local config = kb.fs.join(dir, "sim.yaml")
kb.fs.write(config, CONFIG)

-- Runs a bundled scenario in a child kbrun; returns its result.json.
local function run_scenario(name, args, out)
  local cmd = { bin, "-q", "-o", out, "--seed", "7" }
  for _, a in ipairs(args.opts or {}) do cmd[#cmd + 1] = a end
  cmd[#cmd + 1] = kb.fs.join(src, "scenarios", name)
  for _, a in ipairs(args.params or {}) do cmd[#cmd + 1] = a end
  local r = kb.process.run { cmd = cmd, timeout = 240 }
  T.eq(r.code, 0, name .. ": " .. r.stderr)
  local found = {}
  for _, e in ipairs(kb.fs.list(out)) do
    local p = kb.fs.join(out, e, "result", "result.json")
    if kb.fs.exists(p) then found[#found + 1] = p end
  end
  T.eq(#found, 1, "one experiment in " .. out)
  return kb.json.decode(kb.fs.read(found[1]))
end

local function p50(doc, name)
  for _, m in ipairs(doc.metrics.metrics) do
    if m.name == name and m.kind == "histogram" and next(m.labels or {}) == nil then
      return m.summary.p50
    end
  end
  error("no histogram " .. name .. " in result.json")
end

local function near(label, got, modelled)
  T.ok(got >= modelled * 0.999 and got <= modelled * 1.10,
    string.format("%s: p50 %.4f s, modelled %.3f s (within 10%%)", label, got, modelled))
end

local STORM = { "num_runs=4" }
local ARGO_STORM = { "workflows=4", "steps=1", "step_duration=fixed:5" }

local function check(label, taxi, argo)
  near(label .. " run.create", p50(taxi, "run.create"), CREATE)
  near(label .. " run.get", p50(taxi, "run.get"), GET)
  near(label .. " argo.create", p50(argo, "argo.create"), ARGO)
end

for _, speed in ipairs { 60, 600, 6000 } do
  T.case("embedded simulator at x" .. speed, function()
    local opts = { "--sim-speed", tostring(speed), "--sim-config", config }
    local base = kb.fs.join(dir, "embedded-" .. speed)
    local taxi = run_scenario("taxi_50runs.lua", { opts = opts, params = STORM }, base .. "-taxi")
    local argo = run_scenario("argo_storm.lua", { opts = opts, params = ARGO_STORM }, base .. "-argo")
    T.eq(taxi.clock.speed, speed)
    check("embedded x" .. speed, taxi, argo)
  end)
end

-- The fast-forwarding clock (kbrun's default): the modelled latencies,
-- and the same seed gives the same figures, to the last digit.
T.case("embedded simulator, events clock: modelled figures, the same for the same seed", function()
  local opts = { "--sim-clock", "events", "--seed", "11", "--sim-config", config }
  local docs = {}
  for i = 1, 2 do
    local base = kb.fs.join(dir, "events-" .. i)
    docs[i] = {
      taxi = run_scenario("taxi_50runs.lua", { opts = opts, params = STORM }, base .. "-taxi"),
      argo = run_scenario("argo_storm.lua", { opts = opts, params = ARGO_STORM }, base .. "-argo"),
    }
  end
  local taxi, argo = docs[1].taxi, docs[1].argo
  T.eq(taxi.clock.mode, "events")
  check("events", taxi, argo)
  for _, name in ipairs { "run.create", "run.get", "run.duration", "poll.run.get" } do
    T.eq(p50(docs[2].taxi, name), p50(taxi, name), "same seed, same " .. name)
  end
  T.eq(p50(docs[2].argo, "argo.create"), p50(argo, "argo.create"), "same seed, same argo.create")
  for _, stat in ipairs { "count", "min", "p50", "p90", "max", "mean" } do
    T.eq(docs[2].taxi.result.durations[stat], taxi.result.durations[stat], "same seed, same durations " .. stat)
  end
  -- (the experiment's duration also holds the real time before the
  -- simulator started, and real work such as big file writes: not compared)
end)

T.case("standalone kbrun sim at x600, the storms on the real clock", function()
  local sim <close>, url = require("sim_standalone").start { config = config, speed = 600 }
  local base = kb.fs.join(dir, "standalone")
  local params = { "host=" .. url, "api=v2beta1" }
  for _, p in ipairs(STORM) do params[#params + 1] = p end
  local taxi = run_scenario("taxi_50runs.lua", { params = params }, base .. "-taxi")
  params = { "host=" .. url }
  for _, p in ipairs(ARGO_STORM) do params[#params + 1] = p end
  local argo = run_scenario("argo_storm.lua", { params = params }, base .. "-argo")
  sim:kill()
  check("standalone x600", taxi, argo)
end)

T.run()
kb.fs.remove(dir, { recursive = true })
