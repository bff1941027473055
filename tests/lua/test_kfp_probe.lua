--- kfp_probe against a simulator whose breaking point is configured: the
-- KFP API serves max_inflight = 16 requests at once, each a fixed 10 s
-- (modelled), so a step of L concurrent calls of one kind has its slowest
-- at ceil(L / 16) * 10 s. With max_p99 = 35 s the ramp 8, 16, 32, 64, 128
-- must break at the first level where that exceeds the limit (64: 40 s),
-- and say so as result.verdict (the headline of the summary and report).
-- Sharded, the probe refuses as a usage error and writes nothing.
local kb = require "kb"
local T = require "kb.testing"

local M_INFLIGHT, S, LIMIT = 16, 10, 35
local CONFIG = string.format([[
kfp_api:
  max_inflight: %d
  CreateRun: {fixed: %g}
  GetRun: {fixed: %g}
  ListRuns: {fixed: %g, per_item: 0, per_stored_run: 0}
  DeleteRun: {fixed: %g}
  CreatePipeline: {fixed: %g}
  CreateExperiment: {fixed: %g}
  default: {fixed: %g}
]], M_INFLIGHT, S, S, S, S, S, S, S)

local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
local dir = kb.fs.tmpdir("kbrun-test-kfp-probe")
local config = kb.fs.join(dir, "sim.yaml")
kb.fs.write(config, CONFIG)
local PROBE = kb.fs.join(src, "scenarios", "kfp_probe.lua")
local PARAMS = { "start_concurrency=8", "max_concurrency=128", "polls_per_step=1",
  "max_p99=" .. LIMIT, "max_error_rate=0.5", "request_timeout=120", "progress=false" }

local function slowest(level) return math.ceil(level / M_INFLIGHT) * S end

local function experiments(out)
  local found = {}
  for _, e in ipairs(kb.fs.exists(out) and kb.fs.list(out) or {}) do
    local p = kb.fs.join(out, e, "result", "result.json")
    if kb.fs.exists(p) then found[#found + 1] = p end
  end
  return found
end

T.case("the verdict is the level where the configured server breaks", function()
  -- ground truth from the configuration: the ramp and its breaking level
  local levels, expected, last_good = { 8, 16, 32, 64, 128 }, nil, nil
  for _, l in ipairs(levels) do
    -- a poll round is L GETs and one ListRuns: L + 1 calls in the queue
    if slowest(l) > LIMIT then expected = l break end
    T.ok(slowest(l + 1) <= LIMIT, "the test's limit must hold below the breaking level")
    last_good = l
  end
  T.eq(expected, 64)
  local out = kb.fs.join(dir, "out")
  -- the events clock (the default): the modelled latencies exactly, under ASan too
  local cmd = { bin, "-o", out, "--seed", "5", "--sim-config", config, PROBE }
  for _, a in ipairs(PARAMS) do cmd[#cmd + 1] = a end
  local r = kb.process.run { cmd = cmd, timeout = 240 }
  T.eq(r.code, 0, r.stderr)
  local found = experiments(out)
  T.eq(#found, 1)
  local doc = kb.json.decode(kb.fs.read(found[1]))
  local pr = doc.result.probe
  T.eq(pr.broke_at, expected)
  T.eq(pr.last_good, last_good)
  T.eq(#pr.steps, 4, "the ramp stops at the breaking level")
  for i, st in ipairs(pr.steps) do
    T.eq(st.level, levels[i])
    T.eq(st.errors, 0)
    -- every create of the step queued behind max_inflight: p99 the slowest
    -- (later arrivals wait a little less: within 2%)
    local p99 = st.ops["run.create"].p99
    T.ok(p99 <= slowest(st.level) * 1.001 and p99 >= slowest(st.level) * 0.98,
      string.format("level %d: run.create p99 %.3f s, modelled %g s", st.level, p99, slowest(st.level)))
    T.eq(st.broke or false, st.level == expected)
  end
  local verdict = doc.result.verdict
  T.eq(type(verdict), "string")
  T.ok(verdict:find("^the server broke at 64 concurrent runs: "), verdict)
  T.ok(verdict:find("(last level within the limits: 32)", 1, true), verdict)
  -- the summary's headline: the line under the status line
  local status_line = r.stdout:match("\n(kfp%-probe%-%S+: passed in [^\n]*)\n")
  T.ok(status_line, r.stdout)
  T.contains(r.stdout, status_line .. "\n  " .. verdict .. "\n")
end)

-- mode=rate: the server takes 16 CreateRuns at once, 2 s each: 8 runs/s
-- at most. Offered 1.5, 3, 6 runs/s it keeps up (6/s: 12 in flight);
-- at 12/s it answers 8 a second from t = 2 s, so (60 - 2) * 8 creates
-- within the 60 s window: 7.73 runs/s achieved, below 0.9 of 12.
T.case("mode=rate: the knee is where the configured server stops keeping up", function()
  local cfg = kb.fs.join(dir, "rate.yaml")
  kb.fs.write(cfg, [[
kfp_api:
  max_inflight: 16
  CreateRun: {fixed: 2}
  GetRun: {fixed: 0.1}
  ListRuns: {fixed: 0.1, per_item: 0, per_stored_run: 0}
  default: {fixed: 0.1}
]])
  local out = kb.fs.join(dir, "rate")
  local r = kb.process.run { cmd = { bin, "-o", out, "--seed", "5", "--sim-config", cfg, PROBE, "mode=rate",
    "start_rate=1.5", "factor=2", "max_rate=48", "step_duration=60", "max_in_flight=64", "polls_per_step=1",
    "max_p99=30", "max_error_rate=0.5", "request_timeout=120", "progress=false" }, timeout = 240 }
  T.eq(r.code, 0, r.stderr)
  local found = experiments(out)
  T.eq(#found, 1)
  local doc = kb.json.decode(kb.fs.read(found[1]))
  local pr = doc.result.probe
  T.eq(pr.mode, "rate")
  T.eq(#pr.steps, 4, "the ramp stops at the knee")
  for i, want in ipairs({ 1.5, 3, 6, 12 }) do
    local st = pr.steps[i]
    T.eq(st.level, want)
    T.eq(st.arrivals, math.floor(want * 60 + 0.5), "every arrival of the step offered")
    T.ok(math.abs(st.offered_rate - want) < 1e-9, "offered " .. st.offered_rate)
    T.eq(st.errors, 0)
    if i < 4 then
      -- answered within the window: arrivals before 60 - 2 s
      T.ok(math.abs(st.achieved_rate - want * 58 / 60) <= want * 0.01, string.format("%g/s: achieved %.3f", want, st.achieved_rate))
      T.eq(st.dropped, 0)
      T.ok(not st.broke, st.reason or "")
    end
  end
  local knee = pr.steps[4]
  T.ok(math.abs(knee.achieved_rate - 8 * 58 / 60) <= 0.02 * 8, "at the knee the server's 8/s: " .. knee.achieved_rate)
  T.ok(knee.dropped > 0, "arrivals over 64 in flight dropped: " .. knee.dropped)
  T.eq(knee.created + knee.dropped, knee.arrivals)
  T.ok(knee.broke)
  T.eq(pr.broke_at, 12)
  T.eq(pr.last_good, 6)
  local verdict = doc.result.verdict
  T.ok(verdict:find("^the server stopped keeping up at 12 runs/s: achieved 7%.%d+ runs/s of 12 offered"), verdict)
  T.ok(verdict:find("(last rate within the limits: 6 runs/s)", 1, true), verdict)
  local html = kb.fs.read(kb.fs.join(kb.fs.dirname(found[1]), "report.html"))
  T.contains(html, "achieved vs offered rate per step")
  T.contains(html, "The server stopped keeping up at 12 runs/s")
end)

T.case("mode=rate refuses arrival_rate and bad ramp values", function()
  for _, args in ipairs({ { "mode=rate", "arrival_rate=2", "duration=10" }, { "mode=rate", "start_rate=0" },
    { "mode=rate", "min_achieved=1.5" }, { "mode=bursty" } }) do
    local cmd = { bin, "-o", kb.fs.join(dir, "bad"), "--sim-config", config, PROBE }
    for _, a in ipairs(args) do cmd[#cmd + 1] = a end
    local r = kb.process.run { cmd = cmd, timeout = 60 }
    T.eq(r.code, 2, table.concat(args, " ") .. ": " .. r.stderr)
    T.contains(r.stderr, "kfp_probe: ")
  end
end)

T.case("sharded: a usage error (exit 2), nothing created or written", function()
  local out = kb.fs.join(dir, "sharded")
  local cmd = { bin, "-o", out, "--shard", "1/3", "--sim-config", config, PROBE }
  for _, a in ipairs(PARAMS) do cmd[#cmd + 1] = a end
  local r = kb.process.run { cmd = cmd, timeout = 60 }
  T.eq(r.code, 2, r.stderr)
  T.contains(r.stderr, "kbrun: kfp_probe ramps one load on one server and cannot be split into 3 shards")
  T.ok(not r.stderr:find("stack traceback", 1, true), r.stderr)
  T.eq(#experiments(out), 0)
  T.ok(not r.stderr:find("storm:", 1, true), "nothing was created: " .. r.stderr)
end)

T.run()
