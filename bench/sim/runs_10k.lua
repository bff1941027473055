--- The simulator at scale: N runs of the 10-step benchmark pipeline created
-- through the KFP v2beta1 REST API of the embedded simulator, polled with
-- paged LISTs until every run finished. Reports wall time, peak memory of
-- the kbrun process (client and simulator together) and the requests/s the
-- simulator served.
--
--   kbrun bench/sim/runs_10k.lua [runs=10000] [concurrency=64] [profile=fast]
local kb = require "kb"
local kfp = require "kb.kfp"

local PIPELINE = (os.getenv("KBRUN_SOURCE_DIR") or ".") .. "/tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml"

-- Enough nodes that 10,000 concurrent 10-step runs are not capacity-bound.
local CLUSTER = [[
cluster:
  pools:
  - {name: pool-1, nodes: 200, cpu: 64, memory: 256Gi, max_pods: 1000}
]]

local function vm_hwm_mb()
  for line in io.lines("/proc/self/status") do
    local kb_ = line:match("^VmHWM:%s+(%d+)")
    if kb_ then return tonumber(kb_) / 1024 end
  end
end

local function served(url)
  local text = kb.http.get(url .. "/metrics").body
  local total = 0
  for n in text:gmatch('kbrun_sim_http_requests_total{api="[^"]+"} (%d+)') do total = total + tonumber(n) end
  return total
end

return {
  name = "sim_runs_10k",
  params = { runs = 10000, concurrency = 64, profile = "fast", speed = 600,
    timeout = 36000 }, -- per request, simulated seconds: the simulator's thread is the bottleneck
  run = function(p)
    local sim = kb.sim.start { profile = p.profile, speed = p.speed, config = CLUSTER, seed = 7 }
    local c = kfp.client { host = sim.url, api = "v2beta1", timeout = p.timeout }
    local wall0 = kb.time()
    local pipeline = c:upload_pipeline { file = PIPELINE, name = "bench-10-steps" }
    local exp = c:create_experiment { name = "bench" }
    local pool = kb.pool(p.concurrency)
    for i = 1, p.runs do
      pool:spawn(function()
        c:create_run { name = "run-" .. i, experiment_id = exp.id, pipeline_id = pipeline.id }
      end)
    end
    pool:wait()
    local created_wall = kb.time() - wall0
    local finished, polls = 0, 0
    repeat
      kb.sleep(60)
      polls = polls + 1
      finished = 0
      for _, run in ipairs(c:list_all_runs { experiment_id = exp.id, page_size = 200 }) do
        if run.finished then finished = finished + 1 end
      end
    until finished == p.runs or polls > 10000
    local wall = kb.time() - wall0
    local requests = served(sim.url)
    local out = {
      runs = p.runs, finished = finished, steps_per_run = 10,
      wall_seconds = wall, create_wall_seconds = created_wall,
      requests_served = requests, requests_per_second = requests / wall,
      peak_rss_mb = vm_hwm_mb(), sim_seconds = sim:now(),
    }
    kb.log.info("%d runs x 10 steps finished in %.1f s wall (%.0f s simulated); %d requests, "
      .. "%.0f req/s; peak RSS %.0f MB", finished, wall, out.sim_seconds, requests,
      out.requests_per_second, out.peak_rss_mb)
    sim:stop()
    return out
  end,
}
