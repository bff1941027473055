--- job_storm: how fast a cluster starts and finishes pods. Creates N
-- batch/v1 Jobs (one pod each) through the Kubernetes API, at most
-- `concurrency` creates in flight, and follows every Job and pod with
-- streamed watches (kb.k8s.lifecycle), as clusterloader2's pod-startup
-- measurement does. Per object it records, from creation:
--   lifecycle.pod.scheduled / running / succeeded
--   lifecycle.job.started / complete
-- each twice: {source = "watch"} (when this client saw it, from just before
-- the create) and {source = "server"} (the objects' own timestamps, 1 s
-- resolution); kb.k8s times the creates themselves (k8s.create.jobs).
-- Against the embedded simulator by default; kubeconfig= (and context=)
-- for a real cluster. Every Job carries the label kbrun.io/storm=<run id>;
-- cleanup deletes them with their pods. rate=R spaces the creates (Job i
-- is created (i - 1) / R seconds after the start). Sharded (kbrun --shard
-- I/N, kb.shard.items), each shard creates Jobs I+1, I+1+N, ... at their
-- times in the same schedule (concurrency is per shard); `kbrun merge`
-- adds the shards' counts and recomputes completed_rate from them.
-- arrival_rate=R (Jobs per second, arrival=constant|poisson) for
-- arrival_duration= seconds, or stages= (a ramp), is the open model
-- instead (kb.load): Jobs are created at their arrival times however the
-- cluster copes, an arrival that finds max_in_flight creates in flight
-- (default concurrency) is dropped and counted, and `jobs` is ignored.
-- (`duration` is the pod's modelled run time here, hence arrival_duration.)
-- Over time (result.json's timeseries): storm.created, storm.in_flight,
-- storm.finished{state=complete|failed|deleted}, storm.arrivals.*.
--
--   kbrun scenarios/job_storm.lua jobs=200 concurrency=20
--   kbrun scenarios/job_storm.lua kubeconfig=$HOME/.kube/config namespace=bench
--   kbrun scenarios/job_storm.lua arrival_rate=2 arrival_duration=300 max_in_flight=20
local kb = require "kb"
local k8s = require "kb.k8s"
local connection = require "kb.connection"
local lifecycle = require "kb.k8s.lifecycle"
local load = require "kb.load"

local function job(name, label, p)
  local ann = { ["sim.kbrun.io/duration"] = p.duration }
  if p.fail_probability > 0 then ann["sim.kbrun.io/fail-probability"] = tostring(p.fail_probability) end
  return {
    apiVersion = "batch/v1",
    kind = "Job",
    metadata = { name = name, labels = { ["kbrun.io/storm"] = label } },
    spec = {
      backoffLimit = 0,
      template = {
        metadata = {
          labels = { ["kbrun.io/storm"] = label },
          annotations = ann,
        },
        spec = {
          restartPolicy = "Never",
          containers = { {
            name = "main", image = p.image, command = { "sh", "-c", p.command },
            resources = { requests = { cpu = p.cpu, memory = p.memory } },
          } },
        },
      },
    },
  }
end

-- kubeconfig= (and context=) wins over host=; the TLS parameters override
-- the kubeconfig's (kb.connection, docs/security.md "Connection parameters").
local function client(p)
  local server = p.kubeconfig == "" and require("kb.target").resolve(p.host) or nil
  return k8s.client(connection.k8s_options(p, server))
end

local state = {}

return {
  name = "job_storm",
  params = connection.params {
    host = "sim",          -- "sim": the embedded simulator, else the API server's URL
    -- kubeconfig: a real cluster (wins over host), context: its context
    namespace = "default",
    jobs = 50,             -- how many Jobs (one pod each), over all shards
    concurrency = 10,      -- creates in flight
    rate = 0.0,            -- creates per second over all shards (0: as fast as concurrency allows)
    image = "busybox:1.36",
    command = "sleep 20",  -- what the pod runs on a real cluster
    duration = "lognormal:20,40", -- the simulator's duration model of the pod
    fail_probability = 0.0, -- the simulator fails a pod with this probability
    cpu = "100m",
    memory = "64Mi",
    timeout = 3600,        -- seconds for every Job to finish
    arrival_rate = 0.0,    -- Jobs per second, the open model (0: jobs= as fast as concurrency allows)
    arrival = "constant",  -- arrivals at arrival_rate: constant or poisson
    arrival_duration = 0.0, -- seconds of arrivals at arrival_rate
    stages = "",           -- a ramp instead: JSON/YAML list of {duration, target} (Jobs/s)
    max_in_flight = 0,     -- creates in flight at most (0: concurrency); the excess is dropped
    on_full = "drop",      -- an arrival over max_in_flight: drop (counted) or queue
  },
  thresholds = { completed_rate = 1.0 },

  run = function(p)
    local open = load.from_params(p, { what = "job_storm", duration_key = "arrival_duration",
      concurrency = p.concurrency })
    local c = client(p)
    local label = kb.exp and kb.exp.id or ("storm-" .. os.time())
    state.client, state.label = c, label
    local selector = { label_selector = { ["kbrun.io/storm"] = label } }
    local outcomes = load.outcomes("storm") -- over time: created, in flight, finished by outcome
    local jobs = lifecycle.track(c, "Job", { label_selector = selector.label_selector,
      on_done = function(entry) outcomes:ended(entry.name, entry.outcome) end })
    local pods = lifecycle.track(c, "Pod", selector)
    state.trackers = { jobs, pods }

    local created, failed_create = 0, 0
    local function create(i)
      local name = string.format("%s-%04d", label, i):sub(-63):gsub("^%-+", "")
      jobs:created(name)
      local ok, err = pcall(c.create, c, job(name, label, p))
      if ok then
        created = created + 1
        outcomes:created(name)
      else
        failed_create = failed_create + 1
        kb.log.warn("create %s: %s", name, tostring(err))
      end
    end
    local mine, arrivals
    if open then
      -- this shard's arrivals of the whole schedule (round-robin)
      local times, items = load.shard_times(open, "jobs")
      mine = items
      arrivals = load.run { model = open.model, times = times, max_in_flight = open.max_in_flight,
        on_full = open.on_full, name = "storm.arrivals", fn = function(k) create(items[k]) end }
    else
      mine = kb.shard.items(p.jobs, "jobs") -- this shard's Jobs (all, unsharded)
      local pool = kb.pool(p.concurrency)
      local started = kb.now()
      for _, i in ipairs(mine) do
        if p.rate > 0 then -- Job i's place in the schedule of all shards
          local wait = started + (i - 1) / p.rate - kb.now()
          if wait > 0 then kb.sleep(wait) end
        end
        pool:spawn(create, i)
      end
      pool:wait()
    end

    local ok, err = pcall(jobs.wait, jobs, { count = created, timeout = p.timeout })
    if not ok then kb.log.error("not every Job finished: %s", tostring(err)) end
    local outcomes = {}
    for _, r in ipairs(jobs:results()) do
      local o = r.outcome or "unfinished"
      outcomes[o] = (outcomes[o] or 0) + 1
    end
    -- counts of this shard's Jobs: kbrun merge adds them and recomputes
    -- completed_rate = completed / requested
    local n = #mine
    return {
      requested = n, created = created, failed_create = failed_create,
      dropped = arrivals and arrivals.dropped or nil, -- the open model's arrivals over max_in_flight
      outcomes = outcomes,
      completed = outcomes.complete or 0,
      completed_rate = n > 0 and (outcomes.complete or 0) / n or 1,
      connection = connection.describe(p, c.server), -- how the API server was reached
    }
  end,

  cleanup = function()
    for _, t in ipairs(state.trackers or {}) do t:stop() end
    local c = state.client
    if not c then return end
    local ok, err = pcall(function()
      local list = c:list("jobs", { label_selector = { ["kbrun.io/storm"] = state.label } })
      for _, j in ipairs(list.items) do
        c:delete("Job", j.metadata.name, { propagation_policy = "Background", ignore_not_found = true })
      end
    end)
    if not ok then kb.log.warn("cleanup: %s", tostring(err)) end
  end,
}
