--- kb.kfp.storm_arrivals: a run storm at a rate (the open model), and
-- the storm's figures over time. docs/storm.md, "Runs at a rate".
--
-- With arrival_rate=R (runs per second, arrival=constant|poisson) for
-- duration= seconds, or stages= (a ramp), s:create_runs() starts creating
-- runs at their arrival times through kb.load, however the server copes,
-- and returns at once; s:wait_runs() tracks them as in the closed mode
-- (polling every interval) while they keep arriving, and ends once the
-- schedule is over and every created run finished. An arrival that finds
-- max_in_flight creates in flight (default: concurrency) is dropped and
-- counted (outcome Dropped, never silently delayed), or with on_full=queue
-- waits for a slot; either way each create's latency is also recorded
-- from its intended start (storm.arrivals.latency_corrected). num_runs
-- stays the closed (batch) mode and is ignored here.
--
-- Figures over time (kb.metrics, so kb.timeseries keeps them per
-- interval, the journal holds them and --metrics-listen exports them),
-- in both modes:
--   storm.created                  runs the server took (counter)
--   storm.finished{state=S}        runs that left the pending set, by outcome
--   storm.in_flight                runs created and not finished (gauge)
--   storm.arrivals.started/dropped/completed/failed, .latency, .latency_corrected
--                                  (kb.load's, open mode only)
local kb = require "kb"
local load = require "kb.load"

local M = {}

local scenario_times -- (s, times): below

--- The open-model parameters of a run storm (kb.kfp.storm takes them).
M.DEFAULTS = {
  arrival_rate = 0.0,        -- runs per second (0: the closed mode, num_runs)
  arrival = "constant",      -- arrivals at arrival_rate: constant or poisson
  duration = 0.0,            -- seconds of arrivals at arrival_rate
  stages = "",               -- a ramp instead: JSON/YAML list of {duration, target} (runs/s)
  max_in_flight = 0,         -- creates in flight at most (0: concurrency); the excess is dropped
  on_full = "drop",          -- an arrival over max_in_flight: drop (counted) or queue
}

--- The checked kb.load options of a storm's parameters, or nil (closed).
function M.options(p)
  return load.from_params(p, { what = "kb.kfp.storm", concurrency = p.concurrency })
end

-- ---- the storm's figures -------------------------------------------------------------

-- The tracker of a session (made on first use: a storm that never
-- creates a run registers none).
local function outcomes(s)
  s.outcomes = s.outcomes or load.outcomes("storm")
  return s.outcomes
end

--- A run the server took (its create answered, or found by name).
function M.created(s, run) outcomes(s):created(run) end

--- A created run left the pending set: outcome Succeeded, Failed, Timed
-- out, Lost or Unknown (once per run).
function M.ended(s, run, outcome) outcomes(s):ended(run, outcome) end

-- ---- creating at a rate ----------------------------------------------------------------

--- True while the open model's arrivals go on. Once they are over, the
-- arrivals' task is waited for (its error raised), once.
function M.arriving(s)
  local a = s.arrival
  if not a then return false end
  if a.running then return true end
  if a.task then
    local t = a.task
    a.task = nil
    t:wait()
  end
  return false
end

-- Arrival times are cluster seconds (as every storm time parameter): on
-- the scenario clock, divided by the clock's scale (a standalone
-- simulator's speed; 1 otherwise).
scenario_times = function(s, times)
  local scale = s.clock and s.clock.scale or 1
  if scale == 1 then return times end
  local out = {}
  for i, t in ipairs(times) do out[i] = t / scale end
  return out
end

--- s:create_runs() in the open model: runs are created at the arrival
-- times of s.p.load (this shard's part of the schedule) by a task of their
-- own; returns s.runs, which grows as they arrive.
function M.create_runs(s)
  local o = s.p.load
  local times, items = load.shard_times(o, "runs")
  times = scenario_times(s, times)
  s.planned = s.planned + #times
  local base = #s.runs
  local a = { running = true, offered = #times, items = items }
  s.arrival = a
  s:journal_write{ event = "arrivals", model = o.model, rate = o.rate, duration = o.duration,
    stages = o.stages, max_in_flight = o.max_in_flight, on_full = o.on_full, offered = #times,
    t = s:elapsed() }
  a.task = kb.spawn(function()
    -- where the schedule starts on the time series' axis (its stages' boundaries)
    local origin = require("kb.timeseries").origin()
    a.start = origin and kb.now() - origin or nil
    s:journal_write{ event = "arrivals.start", start = a.start, t = s:elapsed() }
    local ok, r = pcall(load.run, {
      model = o.model, times = times, max_in_flight = o.max_in_flight, on_full = o.on_full,
      name = "storm.arrivals",
      stop = function()
        if s:expired() then
          s.stop_reason = s.stop_reason or "the global timeout passed"
          return true
        end
        return s.halted ~= nil
      end,
      on_arrival = function(k, intended, admitted)
        local run = { index = base + k, intended = intended }
        run.name = s:run_name(run.index)
        s.runs[run.index] = run
        if not admitted then
          run.dropped = true
          s:journal_write{ event = "run.dropped", index = run.index, name = run.name, t = s:elapsed() }
        end
      end,
      fn = function(k) s:create_one(s.runs[base + k]) end,
    })
    a.running = false
    if not ok then
      if kb.is_cancelled(r) then s.stop_reason = s.stop_reason or "kbrun was interrupted" end
      error(r, 0)
    end
    a.result = r
    s:journal_write{ event = "arrivals.done", started = r.started, dropped = r.dropped,
      arrivals = r.arrivals, stopped = r.stopped, t = s:elapsed() }
  end)
  return s.runs
end

--- One step of an open-model ramp (kfp_probe's mode=rate): runs created
-- at the arrival times of o (kb.load options: model, rate, duration,
-- max_in_flight, on_full) until the schedule is over and every create
-- answered. Returns the step's runs and its figures: arrivals, dropped,
-- created, answered_in_window (creates answered within the arrival
-- window), window (seconds), offered_rate (arrivals / window),
-- achieved_rate (answered_in_window / window: what the server kept up
-- with).
function M.run_step(s, o)
  local times = scenario_times(s, load.arrivals(o))
  s.planned = s.planned + #times
  local base, made = #s.runs, {}
  local t_begin = kb.now()
  local r = load.run {
    model = o.model, times = times, max_in_flight = o.max_in_flight, on_full = o.on_full,
    name = "storm.arrivals",
    on_arrival = function(k, _, admitted)
      local run = { index = base + k, dropped = not admitted or nil }
      run.name = s:run_name(run.index)
      s.runs[run.index], made[#made + 1] = run, run
      if not admitted then
        s:journal_write{ event = "run.dropped", index = run.index, name = run.name, t = s:elapsed() }
      end
    end,
    fn = function(k) s:create_one(s.runs[base + k]) end,
  }
  local window = o.duration
  local created, in_window = 0, 0
  for _, run in ipairs(made) do
    if run.id then
      created = created + 1
      if run.t_created and run.t_created < t_begin + window / s.clock.scale then in_window = in_window + 1 end
    end
  end
  return made, { arrivals = r.arrivals, dropped = r.dropped, created = created,
    answered_in_window = in_window, window = window, offered_rate = r.arrivals / window,
    achieved_rate = in_window / window }
end

--- Stops the arrivals (cleanup after an error or Ctrl-C): no run is
-- created after it.
function M.stop(s)
  local a = s.arrival
  if a and a.running and a.task then
    a.running = false
    pcall(a.task.cancel, a.task)
    a.task = nil
  end
end

--- result.load of a storm (live or rebuilt): the model and what happened:
-- offered (arrivals in the schedule), arrived, started, dropped, created,
-- start (where the schedule began, seconds on the time series' axis),
-- offered_rate and achieved_rate (created per second of the window).
-- nil for the closed mode.
function M.summary(s)
  local o = s.p.load
  if not o then return nil end
  local window = o.duration
  if o.stages then
    window = 0
    for _, st in ipairs(o.stages) do window = window + st.duration end
  end
  local dropped, created, sent = 0, 0, 0
  for _, run in ipairs(s.runs) do
    if run.dropped then dropped = dropped + 1 end
    if run.id then created = created + 1 end
    if run.sent then sent = sent + 1 end
  end
  local offered = s.arrival and s.arrival.offered or s:requested()
  return { model = o.model, rate = o.rate, duration = o.duration, stages = o.stages,
    max_in_flight = o.max_in_flight, on_full = o.on_full, window = window,
    start = s.arrival and s.arrival.start, -- seconds on the time series' axis
    offered = offered, arrived = #s.runs, started = sent, dropped = dropped, created = created,
    offered_rate = window > 0 and offered / window or nil,
    achieved_rate = window > 0 and created / window or nil }
end

return M
