--- sweep_taxi: how run durations of a KFP run storm depend on the number
-- of runs, the node pools and the pipeline's size, before anyone rents the
-- cluster (docs/sweep.md).
--
--   kbrun scenarios/sweep_taxi.lua                     # 24 cells on the simulator, ~15 s
--   kbrun --seed 7 scenarios/sweep_taxi.lua repeats=3  # error bars over 3 repeats, ~40 s
-- (wall-clock times measured on a 2-core machine: 13.5-16 s; repeats=3
-- 40 s, 56 s while other jobs loaded it.)
--   kbrun scenarios/sweep_taxi.lua host=http://127.0.0.1:8888   # a real KFP: runs x steps x pool
--
-- Each cell is a run storm (kb.kfp.storm, the taxi_50runs notebook steps)
-- of `num_runs` runs of a synthetic taxi-like pipeline of `steps` steps
-- (kb.kfp.pipeline, a diamond: ingest, steps-2 parallel transforms, a
-- final push; each step requests `step_cpu` and runs about `step_seconds`).
-- On the simulator each cell starts its own cluster of `pools` node pools
-- x `nodes` nodes of `node_cpu` cores, so the sweep shows the run duration
-- growing when the pools are too small for the runs. Against a real KFP
-- the cluster is what it is: the sweep varies runs, steps and the node
-- pool the pipeline is pinned to (`pool_names`).
--
-- Outputs in <out>/sweep_taxi/: sweep.csv, sweep.html, journal.jsonl and
-- one experiment folder per cell (runs.csv, latencies.csv, result.json).
-- Interrupted (Ctrl-C, kill -9)? Run the same command again: finished
-- cells are kept, the rest run.
local kb = require "kb"
local sweep = require "kb.sweep"
local storm = require "kb.kfp.storm"
local gen = require "kb.kfp.pipeline_gen"
local target = require "kb.target"
local connection = require "kb.connection"

-- Simulated clusters per cell, unless host= or kubeconfig= names a real one.
local function simulated(p)
  return target.is_sim(p.host) and (p.kubeconfig or "") == ""
end

local function split(text)
  local out = {}
  for item in tostring(text):gmatch("[^,%s]+") do out[#out + 1] = tonumber(item) or item end
  return out
end

local function median(list)
  if not list or #list == 0 then return nil end
  local v = {}
  for i, x in ipairs(list) do v[i] = x end
  table.sort(v)
  return v[math.max(1, math.ceil(#v / 2))]
end

-- One cell: a cluster (simulator), a pipeline, a storm; the cell's metrics.
local function cell_run(p)
  return function(cell, ctx)
    local host = p.host
    if simulated(p) then
      local sim = ctx:sim(sweep.cluster { pools = cell.pools, nodes = cell.nodes, cpu = p.node_cpu,
        memory = "30Gi" })
      host = sim.url
    end
    local text = gen.pipeline { steps = cell.steps, shape = "diamond", name = "sweep-taxi",
      cpu = p.step_cpu, memory = "1Gi", duration = string.format("lognormal:%g,%g", p.step_seconds,
        1.5 * p.step_seconds), node_selector = cell.pool, image = "tensorflow/tfx:0.15.0" }
    local file = ctx.exp:write("config", "pipeline.yaml", text)
    local sp = storm.params {
      host = host, api = p.api, pipeline_file_url = file, num_runs = cell.num_runs,
      run_status_polling_interval_sec = p.poll, concurrency = p.concurrency,
      timeout = p.timeout, run_timeout = 0, progress = false, scrape_metrics = false, measure_list = false,
    }
    if not simulated(p) then -- a real cluster: the connection parameters (kb.connection)
      for k in pairs(connection.DEFAULTS) do sp[k] = p[k] end
    end
    local s = storm.new(sp, { exp = ctx.exp, name = "sweep_taxi" })
    local ok, err = pcall(function()
      s:create_pipeline()
      s:create_experiment()
      s:create_runs()
      s:wait_runs()
    end)
    if not simulated(p) then s:cleanup() end -- a cell's simulator is thrown away
    local r = s:finish()
    if not ok then error(err, 0) end
    -- kb.metrics in a cell is the cell's own registry (docs/sweep.md)
    local create = kb.metrics.get("run.create")
    return {
      create_p99 = create and create:count() > 0 and create:summary().p99 or nil,
      duration_p50 = r.durations.p50, duration_p90 = r.durations.p90, duration_max = r.durations.max,
      makespan = r.elapsed, success_rate = r.success_rate, timed_out = r.runs.timed_out,
      create_p50 = median(s.samples["run.create"]), errors = r.error_count,
    }
  end
end

return {
  name = "sweep_taxi",

  -- and the connection parameters of every bundled scenario (kb.connection:
  -- ca_file, token_file, cookie_file, header, kubeconfig, ...) for host=URL
  params = connection.params {
    host = "",                        -- "" or "sim": a simulated cluster per cell
    api = "v1beta1",
    num_runs = "10,30,60",            -- the sweep's dimensions (comma-separated)
    pools = "1,2",                    -- simulator only: node pools per cluster
    nodes = "1,3",                    -- simulator only: nodes per pool
    steps = "4,8",                    -- pipeline steps
    pool_names = "pool-1,pool-2",     -- real cluster only: the pipeline's node selector
    node_cpu = 8,                     -- simulator: cores per node (n1-standard-8)
    step_cpu = "1",                   -- each step's cpu request
    step_seconds = 60,                -- each step's median runtime (lognormal, p99 1.5x)
    poll = 30,                        -- run_status_polling_interval_sec
    concurrency = 10,                 -- storm client concurrency
    timeout = 21600,                  -- a cell's storm, cluster seconds
    repeats = 1,
    parallel = 3,                     -- cells at once (each with its own simulator)
    speed = 0,                        -- > 0: a linear simulator clock at that speed; 0: the
                                      -- fast-forwarding clock (a seed gives the same figures)
    fresh = false,                    -- true: move the previous results aside, start over
  },

  run = function(p)
    local matrix
    if simulated(p) then
      matrix = { num_runs = split(p.num_runs), pools = split(p.pools), nodes = split(p.nodes), steps = split(p.steps) }
    else
      matrix = { num_runs = split(p.num_runs), steps = split(p.steps), pool = split(p.pool_names) }
      p.parallel = 1 -- one real cluster: cells one after another
    end
    local order = simulated(p) and { "pools", "nodes", "steps", "num_runs" } or { "pool", "steps", "num_runs" }
    return sweep.run {
      name = simulated(p) and "sweep_taxi" or "sweep_taxi_cluster",
      version = 1,
      params = { api = p.api, node_cpu = p.node_cpu, step_cpu = p.step_cpu, step_seconds = p.step_seconds,
        poll = p.poll, concurrency = p.concurrency, timeout = p.timeout },
      matrix = matrix, order = order,
      repeats = p.repeats, parallel = p.parallel, speed = p.speed > 0 and p.speed or nil, fresh = p.fresh,
      metrics = { "duration_p50", "makespan", "duration_max", "duration_p90", "success_rate", "create_p50",
        "create_p99", "timed_out", "errors" },
      report = {
        x = "num_runs", series = simulated(p) and "nodes" or "pool",
        metrics = { "duration_p50", "makespan" },
        heatmap = { rows = simulated(p) and "nodes" or "pool", cols = "num_runs", metric = "duration_p50" },
        goal = { metric = "duration_p50", minimize = true },
        units = { duration_p50 = "s", makespan = "s", duration_max = "s", duration_p90 = "s", create_p50 = "s", create_p99 = "s" },
      },
      run = cell_run(p),
    }
  end,
}
