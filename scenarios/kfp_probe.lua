--- kfp_probe: how many concurrent runs does a KFP server take before it
-- breaks? Starting at start_concurrency, each step creates that many runs
-- at once, polls them all (and lists the experiment) polls_per_step times,
-- then terminates and deletes them, every step's requests in flight at the
-- step's level. The ramp stops at the first step whose failed calls exceed
-- max_error_rate or whose p99 on an op exceeds max_p99: that is where the
-- server broke. The report shows every step, p99 per level, and the
-- errors grouped by class with sample messages. The verdict ("the server
-- broke at 64 concurrent runs: ...", or how far it held) is result.verdict:
-- the headline of the summary and of the report.
--
-- mode=rate ramps the open model instead (kb.kfp.storm_arrivals): each
-- step creates runs at start_rate, start_rate*factor, ... runs per second
-- for step_duration seconds, however the server copes (an arrival over
-- max_in_flight creates in flight is dropped and counted), then polls,
-- terminates and deletes them. Per step: offered vs achieved rate (creates
-- answered within the step's window), latency, success; the knee is the
-- first step whose achieved rate falls below min_achieved of the offered
-- one (or that crosses max_error_rate / max_p99): "the server stopped
-- keeping up at 16 runs/s: achieved 7.73 runs/s of 16 offered ...".
--
-- Not sharded: the probe's levels are loads on one server at one time, and
-- shards run their steps independently (unsynchronised, each stopping on
-- its own), so their parts never add up to the level's load; run sharded
-- it refuses before creating anything (docs/scale-out.md).
--
--   kbrun scenarios/kfp_probe.lua                                # the embedded simulator
--   kbrun --sim-profile degraded scenarios/kfp_probe.lua         # a struggling server
--   kbrun scenarios/kfp_probe.lua mode=rate start_rate=0.5 max_rate=32 max_in_flight=64
--   kbrun scenarios/kfp_probe.lua host=https://kubeflow.example.com/pipeline token_file=/var/run/token
local kb = require "kb"
local storm = require "kb.kfp.storm"
local probe = require "kb.kfp.storm_probe"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local session -- kept for cleanup, which also runs after an error or Ctrl-C
local steps   -- the steps measured so far (an interrupted probe reports them)

local params = storm.params {
  pipeline_file_url = "pipelines/taxi_updated_pool.yaml",  -- next to this file
  run_status_polling_interval_sec = 30,
  run_timeout = 0,            -- runs are stopped by the probe, not waited for
}
for k, v in pairs(probe.DEFAULTS) do params[k] = v end
params.num_runs = nil         -- the ramp decides

return {
  name = "kfp_probe",
  params = params,

  run = function(p)
    probe.refuse_shards()
    probe.ramp(p) -- bad ramp parameters fail before anything is created
    local rates = probe.rate_ramp(p)
    if p.arrival_rate ~= 0 or p.stages ~= "" then
      require("kb.params").refuse("kfp_probe: the ramp sets the rates: give mode=rate with start_rate, "
        .. "factor, max_rate and step_duration instead of arrival_rate or stages")
    end
    p.num_runs = p.start_concurrency
    session = storm.new(p, { name = "kfp_probe", base_dir = HERE, keep_calls = true })
    local s = session
    s:scrape_metrics("before")
    s:create_pipeline()
    s:create_experiment()
    steps = {}
    if p.mode == "rate" then
      for _, rate in ipairs(rates) do
        kb.log.info("probe: %g runs/s for %g s", rate, p.step_duration)
        local mark = #s.calls
        local runs, fig = require("kb.kfp.storm_arrivals").run_step(s, { model = "constant", rate = rate,
          duration = p.step_duration, max_in_flight = p.max_in_flight > 0 and p.max_in_flight or p.concurrency,
          on_full = p.on_full })
        s:poll_rounds(runs, p.polls_per_step)   -- ListRuns + a GET of every run, per round
        s:terminate_runs(runs)
        s:delete_runs(runs)
        local step = probe.rate_step(rate, s.calls, mark, p, fig)
        steps[#steps + 1] = step
        if step.broke then
          kb.log.warn("probe: the server stopped keeping up at %g runs/s: %s", rate, step.reason)
          break
        end
      end
    end
    for _, level in ipairs(p.mode == "rate" and {} or probe.ramp(p)) do
      kb.log.info("probe: %d concurrent runs", level)
      local mark = #s.calls
      s:set_concurrency(level)
      local runs = s:create_runs(level)         -- `level` CreateRun calls at once
      s:poll_rounds(runs, p.polls_per_step)     -- ListRuns + a GET of every run, per round
      s:terminate_runs(runs)
      s:delete_runs(runs)
      local step = probe.step(level, s.calls, mark, p)
      steps[#steps + 1] = step
      if step.broke then
        kb.log.warn("probe: the server broke at %d concurrent runs: %s", level, step.reason)
        break
      end
    end
    s:cleanup()
    s:scrape_metrics("after")
    local result = s:finish()
    result.probe = probe.summary(steps, p)
    result.verdict = probe.verdict(result.probe)
    return result
  end,

  cleanup_timeout = 300,       -- real seconds for cleanup after an error or Ctrl-C
  -- After an error or Ctrl-C: the storm's runs are deleted, and the result
  -- has the steps measured so far with a verdict saying where it stopped.
  cleanup = function(p)
    if session then
      session:cleanup()
      local result = session:finish()
      if steps and not result.probe then
        result.probe = probe.summary(steps, p, { interrupted = true })
        result.verdict = probe.verdict(result.probe)
      end
      return result
    end
  end,

  report = probe.report,
}
