--- pipeline_service: the pipeline-service benchmark of Kubeflow Pipelines
-- (tools/benchmarks/pipeline_service_api.ipynb): create 10 pipelines, give
-- each 10 versions (one every 2 s, as the notebook does to spare the
-- pipeline's row lock), get each pipeline, delete each one. CreatePipeline,
-- CreatePipelineVersion, GetPipeline and DeletePipeline are timed.
--
--   kbrun scenarios/pipeline_service.lua                   # the embedded simulator
--   kbrun scenarios/pipeline_service.lua host=http://127.0.0.1:8888 api=v2beta1
--   kbrun scenarios/pipeline_service.lua notebook=true     # one pipeline at a time
--
-- What kbrun adds, each switchable: `concurrency` pipelines at once (each
-- pipeline's versions stay sequential), ListPipelineVersions latency, a
-- global timeout, /metrics before and after, and a delete that works on
-- KFP 2.x (the notebook's DeletePipeline fails while versions exist).
local storm = require "kb.kfp.storm"
local pipelines = require "kb.kfp.storm_pipelines"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

local session -- kept for cleanup, which also runs after an error or Ctrl-C

return {
  name = "pipeline_service",

  params = pipelines.params {
    pipeline_file_url = "pipelines/taxi_updated_pool.yaml",  -- next to this file
    num_pipelines = 10,
    num_pipeline_versions_per_pipeline = 10,
  },

  thresholds = {
    ["pipeline.create"] = { p99 = 5.0 },
    ["pipeline_version.create"] = { p99 = 5.0 },
    ["pipeline.get"] = { p99 = 1.0 },
    ["pipeline.delete"] = { p99 = 5.0 },
    success_rate = 1.0,
  },

  run = function(p)
    session = storm.new(p, { kind = "pipelines", name = "pipeline_service", base_dir = HERE })
    local s = session
    s:scrape_metrics("before")
    s:create_pipelines()       -- 1. num_pipelines pipelines        (timed: pipeline.create)
    s:create_versions()        -- 2. versions, 2 s apart per pipeline (pipeline_version.create)
    s:list_versions()          --    list each pipeline's versions  (pipeline_version.list)
    s:get_pipelines()          -- 3. get each pipeline              (timed: pipeline.get)
    s:delete_pipelines()       -- 4. delete each, with its versions (timed: pipeline.delete)
    s:cleanup()
    s:scrape_metrics("after")
    return s:finish()
  end,

  cleanup_timeout = 300,       -- real seconds for cleanup after an error or Ctrl-C
  cleanup = function()
    if session then
      session:cleanup()
      session:finish()
    end
  end,

  report = pipelines.report,
}
