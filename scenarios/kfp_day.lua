--- kfp_day: a working day of pipeline submissions against Kubeflow
-- Pipelines, compressed 120x (an hour of the day is 30 s of the scenario
-- clock), as an open model: users submit the TFX taxi pipeline whether or
-- not the server keeps up. Only the submissions are compressed: each run
-- still takes its 11 or so minutes, so the peaks' runs overlap. Quiet night, a morning ramp to the 10-11 am
-- peak, a lunch dip, the afternoon peak, the evening tail. Every run is
-- created at its arrival time (kb.kfp.storm_arrivals; an arrival that
-- finds max_in_flight creates in flight is dropped and counted), polled
-- until it finishes, and deleted; the report's "Over time" section shows
-- runs in flight, created and finished per interval, offered vs achieved
-- rate and latency through the day, each hour's end marked.
--
--   kbrun scenarios/kfp_day.lua                              # the embedded simulator
--   kbrun --sim-profile degraded scenarios/kfp_day.lua       # a struggling server
--   kbrun scenarios/kfp_day.lua host=http://127.0.0.1:8888 api=v2beta1
--
-- What it answers: does the server keep up with the day's peaks (offered
-- vs achieved, dropped), how long runs wait at the peaks (run.duration,
-- runs in flight), and whether it recovers in the afternoon lull. Give
-- stages= to replay another day (a JSON or YAML list of {duration,
-- target}: seconds, runs per second at the stage's end; docs/storm.md).
local storm = require "kb.kfp.storm"
local json = require "kb.json"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

-- Runs per second at the end of each hour (x120: 0.5/s is 1 run a
-- minute of the real day), the rate going linearly from one hour's to the
-- next.
local HOUR = 30
local DAY = {
  { hours = 1, rate = 0.02 },   -- 00-01: the night's stragglers
  { hours = 6, rate = 0.02 },   -- 01-07
  { hours = 1, rate = 0.2 },    -- 07-08: the first arrivals
  { hours = 1, rate = 0.6 },    -- 08-09
  { hours = 1, rate = 1.0 },    -- 09-10
  { hours = 1, rate = 1.0 },    -- 10-11: the morning peak
  { hours = 1, rate = 0.4 },    -- 11-12: towards lunch
  { hours = 1, rate = 0.4 },    -- 12-13: lunch
  { hours = 1, rate = 1.2 },    -- 13-14
  { hours = 1, rate = 1.2 },    -- 14-15: the afternoon peak
  { hours = 1, rate = 0.8 },    -- 15-16
  { hours = 2, rate = 0.3 },    -- 16-18: the evening tail
  { hours = 6, rate = 0.02 },   -- 18-24
}

local stages = {}
for _, h in ipairs(DAY) do stages[#stages + 1] = { duration = h.hours * HOUR, target = h.rate } end

local session -- kept for cleanup, which also runs after an error or Ctrl-C

return {
  name = "kfp_day",

  params = storm.params {
    pipeline_file_url = "pipelines/taxi_updated_pool.yaml",  -- next to this file
    pipeline_params = '{"pipeline-root": "gs://ml-pipeline-playground/tfx_taxi_simple/{{workflow.uid}}", '
      .. '"data-root": "gs://ml-pipeline-playground/tfx_taxi_simple/data", '
      .. '"module-file": "gs://ml-pipeline-playground/tfx_taxi_simple/modules/taxi_utils.py"}',
    api = "v2beta1",
    stages = json.encode(stages),  -- the day: 24 hours of 30 s (see DAY)
    max_in_flight = 20,            -- creates in flight at most; an arrival beyond is dropped
    run_status_polling_interval_sec = 60,
    timeout = 0,                   -- the day decides (run_timeout still bounds each run)
  },

  -- Every arrival created and succeeded (dropped ones count against it),
  -- CreateRun stays under 2 s at the peaks.
  thresholds = {
    ["run.create"] = { p99 = 2.0 },
    success_rate = 0.98,
    ["runs.timed_out"] = { max = 0 },
  },

  run = function(p)
    session = storm.new(p, { name = "kfp_day", base_dir = HERE })
    local s = session
    s:scrape_metrics("before")
    s:create_pipeline()
    s:create_experiment()
    s:create_runs()            -- the day's arrivals begin (created at their times)
    s:wait_runs()              -- polls while they arrive, until the last one finished
    s:delete_runs()
    s:cleanup()
    s:scrape_metrics("after")
    return s:finish()
  end,

  cleanup_timeout = 300,       -- real seconds for cleanup after an error or Ctrl-C
  cleanup = function()
    if session then
      session:cleanup()
      return session:finish()
    end
  end,

  report = storm.report,
}
