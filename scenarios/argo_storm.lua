--- argo_storm: submit N Argo Workflows through argo-server's REST API
-- (POST /api/v1/workflows/{ns}), at most `concurrency` submissions in
-- flight, and measure per workflow
--   argo.create         the POST's latency (s), recorded by kb.argo from the
--                       response (the simulator's modelled latency plus real
--                       overhead, the same at any simulator speed)
--   argo.time_to_running from the POST to the first list showing phase
--                       Running (s, at `poll` resolution)
--   argo.duration       status.finishedAt - status.startedAt (s)
--   argo.completion     from the POST to the first list showing it done (s)
-- Against the embedded simulator by default; host=URL (and token_file=,
-- a file holding the bearer token: a token is never a parameter value)
-- for a real argo-server, through kb.argo (which also times argo.list).
-- The connection parameters (ca_file, client_cert/client_key, insecure,
-- token_file, request_timeout, proxy, ...) are kb.connection's, as in every
-- bundled scenario (docs/security.md "Connection parameters").
-- Every workflow carries the label kbrun.io/storm=<run id>; cleanup
-- deletes them. rate=R spaces the submissions (workflow i is submitted
-- (i - 1) / R seconds after the start). Sharded (kbrun --shard I/N,
-- kb.shard.items), each shard submits workflows I+1, I+1+N, ... at their
-- times in the same schedule (concurrency is per shard); `kbrun merge`
-- adds the shards' counts and recomputes completed_rate from them.
-- arrival_rate=R (workflows per second, arrival=constant|poisson) for
-- duration= seconds, or stages= (a ramp), is the open model instead
-- (kb.load): workflows are submitted at their arrival times however the
-- server copes, an arrival that finds max_in_flight submissions in flight
-- (default concurrency) is dropped and counted, and `workflows` is ignored.
-- Over time (result.json's timeseries): storm.created, storm.in_flight,
-- storm.finished{state=PHASE}, storm.arrivals.*.
--
--   kbrun scenarios/argo_storm.lua workflows=200 concurrency=20 steps=3
--   kbrun scenarios/argo_storm.lua arrival_rate=1 duration=600
local kb = require "kb"
local argo = require "kb.argo"
local connection = require "kb.connection"
local load = require "kb.load"

local function workflow(name, label, p)
  local steps = {}
  for i = 1, p.steps do
    steps[i] = { { name = "step-" .. i, template = "work" } }
  end
  return {
    apiVersion = "argoproj.io/v1alpha1",
    kind = "Workflow",
    metadata = { name = name, labels = { ["kbrun.io/storm"] = label } },
    spec = {
      entrypoint = "main",
      templates = {
        { name = "main", steps = steps },
        { name = "work",
          metadata = { annotations = { ["sim.kbrun.io/duration"] = p.step_duration } },
          container = { image = p.image, command = { "sh", "-c", "sleep 5" } } },
      },
    },
  }
end

local state = {}

return {
  name = "argo_storm",
  params = connection.params {
    host = "sim",          -- "sim": the embedded simulator, else argo-server's URL
    -- token_file: a file holding the bearer token of a real argo-server (re-read when it changes)
    namespace = "default",
    request_timeout = 60,  -- one request, scenario seconds
    workflows = 50,        -- how many to submit, over all shards
    concurrency = 10,      -- submissions in flight
    rate = 0.0,            -- submissions per second over all shards (0: as fast as concurrency allows)
    steps = 2,             -- sequential steps per workflow
    step_duration = "lognormal:10,30", -- the simulator's duration model per step
    image = "busybox:1.36",
    poll = 1,              -- seconds between list calls
    timeout = 3600,        -- seconds for all workflows to finish
    arrival_rate = 0.0,    -- workflows per second, the open model (0: workflows= as fast as concurrency allows)
    arrival = "constant",  -- arrivals at arrival_rate: constant or poisson
    duration = 0.0,        -- seconds of arrivals at arrival_rate
    stages = "",           -- a ramp instead: JSON/YAML list of {duration, target} (workflows/s)
    max_in_flight = 0,     -- submissions in flight at most (0: concurrency); the excess is dropped
    on_full = "drop",      -- an arrival over max_in_flight: drop (counted) or queue
  },
  thresholds = { completed_rate = 1.0 },

  run = function(p)
    local open = load.from_params(p, { what = "argo_storm", concurrency = p.concurrency })
    local host = require("kb.target").resolve(p.host)
    local c = argo.client(connection.argo_options(p, host))
    state.connection = connection.describe(p, host)
    local label = kb.exp and kb.exp.id or ("storm-" .. os.time())
    state.client, state.label = c, label

    local h_submit = kb.metrics.histogram("argo.create") -- kb.argo records it
    local h_running = kb.metrics.histogram("argo.time_to_running")
    local h_duration = kb.metrics.histogram("argo.duration")
    local h_done = kb.metrics.histogram("argo.completion")
    local submitted, failed_submit, phases = {}, 0, {}
    local outcomes = load.outcomes("storm") -- over time: created, in flight, finished by phase

    local function submit(i)
      local name = string.format("%s-%04d", label, i):sub(-63):gsub("^%-+", "")
      local t0 = kb.now()
      local ok, err = pcall(c.create, c, workflow(name, label, p))
      if ok then
        submitted[name] = { at = t0 }
        outcomes:created(name)
      else
        failed_submit = failed_submit + 1
        kb.log.warn("submit %s: %s", name, tostring(err))
      end
    end

    -- one poller for all of them: a list per `poll` seconds
    local watcher = kb.spawn(function()
      local pending = math.huge
      while pending > 0 do
        kb.sleep(p.poll)
        local ok, list = pcall(c.list, c, { label_selector = { ["kbrun.io/storm"] = label } })
        if not ok then
          kb.log.warn("list: %s", tostring(list))
        else
          local now = kb.now()
          pending = 0
          for _, wf in ipairs(list.items) do
            local s = submitted[wf.name]
            if s and not s.done then
              if wf.phase ~= "" and wf.phase ~= "Pending" and not s.running then
                s.running = true
                h_running:record(now - s.at)
              end
              if wf.finished then
                s.done = true
                phases[wf.phase] = (phases[wf.phase] or 0) + 1
                outcomes:ended(wf.name, wf.phase)
                h_done:record(now - s.at)
                if wf.duration then h_duration:record(wf.duration) end
              end
            end
          end
          for _, s in pairs(submitted) do if not s.done then pending = pending + 1 end end
          if not state.all_submitted then pending = pending + 1 end
        end
      end
    end)
    local mine, arrivals
    if open then
      -- this shard's arrivals of the whole schedule (round-robin)
      local times, items = load.shard_times(open, "workflows")
      mine = items
      arrivals = load.run { model = open.model, times = times, max_in_flight = open.max_in_flight,
        on_full = open.on_full, name = "storm.arrivals", fn = function(k) submit(items[k]) end }
    else
      mine = kb.shard.items(p.workflows, "workflows") -- this shard's (all, unsharded)
      local pool = kb.pool(p.concurrency)
      local started = kb.now()
      for _, i in ipairs(mine) do
        if p.rate > 0 then -- workflow i's place in the schedule of all shards
          local wait = started + (i - 1) / p.rate - kb.now()
          if wait > 0 then kb.sleep(wait) end
        end
        pool:spawn(submit, i)
      end
      pool:wait()
    end
    state.all_submitted = true
    local ok, err = pcall(kb.timeout, p.timeout, watcher.wait, watcher)
    if not ok then kb.log.error("not every workflow finished: %s", tostring(err)) end

    local n = 0
    for _ in pairs(submitted) do n = n + 1 end
    local completed = 0
    for _, c in pairs(phases) do completed = completed + c end
    local s, r, d = h_submit:summary(), h_running:summary(), h_duration:summary()
    kb.log.info("%d submitted (%d refused): submit p50 %.3f s p99 %.3f s; running after p50 %.1f s; "
      .. "duration p50 %.1f s", n, failed_submit, s.p50 or 0, s.p99 or 0, r.p50 or 0, d.p50 or 0)
    kb.report.attach { outcomes = phases }
    -- counts of this shard's workflows: kbrun merge adds them and
    -- recomputes completed_rate = succeeded / requested
    return {
      requested = #mine,
      submitted = n,
      refused = failed_submit,
      dropped = arrivals and arrivals.dropped or nil, -- the open model's arrivals over max_in_flight
      phases = phases,
      succeeded = phases.Succeeded or 0,
      completed_rate = #mine > 0 and (phases.Succeeded or 0) / #mine or 1,
      connection = state.connection, -- how argo-server was reached (never a secret)
    }
  end,

  cleanup = function()
    local c = state.client
    if not c then return end
    local ok, list = pcall(c.list, c, { label_selector = { ["kbrun.io/storm"] = state.label } })
    if not ok then return end
    for _, wf in ipairs(list.items) do pcall(c.delete, c, wf.name, { ignore_not_found = true }) end
  end,
}
