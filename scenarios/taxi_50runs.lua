--- taxi_50runs: the run-service benchmark of Kubeflow Pipelines, as the KFP
-- docs ran it ("Using the Kubeflow Pipelines Benchmark Scripts"): 50 runs of
-- the TFX Chicago taxi pipeline pinned to node pool pool-1
-- (taxi_updated_pool.yaml), created in one experiment, polled until they
-- finish, fetched once more and deleted. CreateRun, GetRun and DeleteRun
-- are timed, and each run's duration (finished_at - created_at) recorded.
--
--   kbrun scenarios/taxi_50runs.lua                        # the embedded simulator
--   kbrun scenarios/taxi_50runs.lua host=http://127.0.0.1:8888 api=v2beta1
--   kbrun scenarios/taxi_50runs.lua notebook=true          # exactly the notebook's calls
--
-- Step by step it is tools/benchmarks/run_service_api.ipynb (KFP v1 SDK,
-- /apis/v1beta1 by default), plus what the notebook lacks, each switchable:
-- concurrent creates, polling of every run, ListRuns latency, timeouts,
-- a cleanup that works on KFP 2.x, the status lag, and the server's
-- /metrics. docs/storm.md describes the parameters and the outputs.
local storm = require "kb.kfp.storm"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

-- The docs' 50-run result on 2 node pools x 3 n1-standard-8 (read off
-- benchmark-snapshot-1.png; shared/notes/calibration.md A1-A3, C3).
local PUBLISHED = {
  { label = "Run duration, median", metric = "durations", stat = "p50", published = 640,
    source = "C3" },
  { label = "CreateRun latency, p50", metric = "run.create", stat = "p50", published = 0.40,
    source = "A1" },
  { label = "GetRun latency, p50", metric = "run.get", stat = "p50", published = 0.151,
    source = "A2" },
  { label = "DeleteRun latency, p50", metric = "run.delete", stat = "p50", published = 0.18,
    source = "A3" },
}

-- The run parameters the notebook hard-codes for the taxi pipeline.
local TAXI_PARAMS = '{"pipeline-root": "gs://ml-pipeline-playground/tfx_taxi_simple/{{workflow.uid}}", '
  .. '"data-root": "gs://ml-pipeline-playground/tfx_taxi_simple/data", '
  .. '"module-file": "gs://ml-pipeline-playground/tfx_taxi_simple/modules/taxi_utils.py"}'

local session -- kept for cleanup, which also runs after an error or Ctrl-C

return {
  name = "taxi_50runs",

  params = storm.params {
    pipeline_file_url = "pipelines/taxi_updated_pool.yaml",  -- next to this file
    pipeline_params = TAXI_PARAMS,
    num_runs = 50,
    run_status_polling_interval_sec = 60,
  },

  -- The docs' figures have CreateRun at most 0.78 s, GetRun 0.16 s,
  -- DeleteRun 0.62 s, and every run succeeded in under 12 minutes.
  thresholds = {
    ["run.create"] = { p99 = 2.0 },
    ["run.get"] = { p99 = 1.0 },
    ["run.delete"] = { p99 = 2.0 },
    success_rate = 0.98,                 -- at most 1 run in 50 may fail
    ["runs.timed_out"] = { max = 0 },
  },

  run = function(p)
    session = storm.new(p, { name = "taxi_50runs", base_dir = HERE })
    local s = session
    s:scrape_metrics("before")
    s:create_pipeline()        -- 1. the taxi pipeline, from pipeline_file_url
    s:create_experiment()      -- 2. one experiment for every run
    s:create_runs()            -- 3. num_runs runs               (timed: run.create)
    s:wait_runs()              -- 4. poll until all finished     (poll.run.get, run.list)
    s:get_runs()               -- 5. one GET per run             (timed: run.get)
    s:delete_runs()            -- 6. delete every run            (timed: run.delete)
    s:cleanup()                -- 7-8. pipeline (and its versions), experiment
    s:scrape_metrics("after")
    local result = s:finish()
    result.comparison = storm.compare(result, PUBLISHED, 0.15)
    return result
  end,

  cleanup_timeout = 300,       -- real seconds for cleanup after an error or Ctrl-C
  -- After an error or Ctrl-C: what the storm made is deleted (also what a
  -- create whose answer was lost made), and runs.csv has a row per
  -- requested run; the result table is returned for the runner.
  cleanup = function()
    if session then
      session:cleanup()
      return session:finish()
    end
  end,

  report = storm.report,
}
