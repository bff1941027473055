--- kb.load: load models for any scenario (open and closed).
--
-- An open model starts operations at arrival times of its own, however the
-- server copes, as independent users do: a constant rate, Poisson
-- arrivals, or a rate ramping through stages. A closed model runs
-- `iterations` operations with at most `concurrency` in flight, each
-- starting when another ends (what every storm did so far).
--
--   local load = require "kb.load"
--   local r = load.run {
--     model = "constant", rate = 2, duration = 300,   -- 600 arrivals
--     max_in_flight = 50, name = "submit",
--     fn = function(i) client:create_run{ ... } end,
--   }
--   -- r.started, r.dropped, r.completed, r.failed, r.arrivals
--
-- An arrival that finds `max_in_flight` operations running is dropped and
-- counted (`on_full = "drop"`, the default, as k6 does), never silently
-- delayed; with `on_full = "queue"` it waits for a slot and its latency is
-- also recorded from its intended start (coordinated omission corrected,
-- as wrk2 does). Metrics (kb.metrics), under `name`:
--   <name>.latency            from the operation's actual start
--   <name>.latency_corrected  from its intended start (open models)
--   <name>.started, <name>.dropped, <name>.completed, <name>.failed (counters)
-- Times are scenario seconds (kb.now): on the embedded simulator's events
-- clock an arrival schedule is followed exactly.
local kb = require "kb"
local metrics = require "kb.metrics"

local M = {}

local MODELS = { constant = true, poisson = true, ramping = true, closed = true }

-- ---- arrival schedules -----------------------------------------------------------

-- A deterministic uniform generator (splitmix64 halves), independent of
-- math.random, for Poisson gaps.
local function uniform(seed)
  local state = seed & 0x7fffffffffffffff
  return function()
    state = (state + 0x9e3779b97f4a7c15) & 0xffffffffffffffff
    local z = state
    z = ((z ~ (z >> 30)) * 0xbf58476d1ce4e5b9) & 0xffffffffffffffff
    z = ((z ~ (z >> 27)) * 0x94d049bb133111eb) & 0xffffffffffffffff
    z = z ~ (z >> 31)
    return ((z >> 11) + 0.5) / 9007199254740992.0 -- (0, 1)
  end
end

--- Arrival times (seconds from the start) of an open model: a list. opts:
-- model ("constant" | "poisson" | "ramping"), rate, duration, stages
-- ({ {duration =, target =}, ... }: the rate goes linearly from the
-- previous stage's target, or start_rate (0), to this one's), seed.
function M.arrivals(opts)
  local out = {}
  if opts.model == "constant" or opts.model == "poisson" then
    local rate, duration = opts.rate, opts.duration
    if opts.model == "constant" then
      for k = 0, math.huge do
        local t = k / rate
        if t >= duration then break end
        out[#out + 1] = t
      end
    else
      local u, t = uniform(opts.seed or 1), 0
      while true do
        t = t + -math.log(u()) / rate
        if t >= duration then break end
        out[#out + 1] = t
      end
    end
    return out
  end
  -- ramping: cumulative arrivals over a linear segment are
  -- N(t) = r0*t + (r1 - r0)*t^2/(2D); arrival k (0, 1, ...) comes where
  -- the count reaches k, as constant's does (k / rate)
  local t0, r0, due, k = 0, opts.start_rate or 0, 0, 0
  for _, st in ipairs(opts.stages) do
    local d, r1 = st.duration, st.target
    local a = (r1 - r0) / (2 * d)
    local total = r0 * d + a * d * d
    while k < due + total - 1e-9 do
      local need = k - due
      local t = math.abs(a) < 1e-15 and need / r0 or (-r0 + math.sqrt(r0 * r0 + 4 * a * need)) / (2 * a)
      out[#out + 1] = t0 + t
      k = k + 1
    end
    due, t0, r0 = due + total, t0 + d, r1
  end
  return out
end

-- ---- running ------------------------------------------------------------------------

local function check(opts)
  local function bad(fmt, ...) error(string.format("kb.load: " .. fmt, ...), 3) end
  if type(opts) ~= "table" then bad("options table expected") end
  if opts.times == nil and not MODELS[opts.model] then bad("model must be constant, poisson, ramping or closed, got %s", tostring(opts.model)) end
  if type(opts.fn) ~= "function" then bad("fn (the operation) must be a function") end
  local function positive(k) if type(opts[k]) ~= "number" or not (opts[k] > 0) then bad("%s must be a positive number", k) end end
  if opts.times ~= nil then
    if type(opts.times) ~= "table" then bad("times must be a list of seconds from the start") end
    for i, t in ipairs(opts.times) do
      if type(t) ~= "number" or t < 0 or (i > 1 and t < opts.times[i - 1]) then
        bad("times[%d] must be a number >= 0, not before times[%d]", i, i - 1)
      end
    end
  elseif opts.model == "closed" then
    positive("iterations")
    positive("concurrency")
  elseif opts.model == "ramping" then
    if type(opts.stages) ~= "table" or #opts.stages == 0 then bad("ramping wants stages = { {duration =, target =}, ... }") end
    for i, st in ipairs(opts.stages) do
      if type(st.duration) ~= "number" or st.duration <= 0 or type(st.target) ~= "number" or st.target < 0 then
        bad("stages[%d] needs duration > 0 and target >= 0", i)
      end
    end
  else
    positive("rate")
    positive("duration")
  end
  if opts.max_in_flight ~= nil then positive("max_in_flight") end
  if opts.on_full ~= nil and opts.on_full ~= "drop" and opts.on_full ~= "queue" then
    bad("on_full must be \"drop\" or \"queue\"")
  end
  if opts.on_arrival ~= nil and type(opts.on_arrival) ~= "function" then bad("on_arrival must be a function") end
  if opts.stop ~= nil and type(opts.stop) ~= "function" then bad("stop must be a function") end
end

--- Runs a load model (see the module comment); returns {started, dropped,
-- completed, failed, arrivals, duration, stopped}. Errors of fn are
-- counted as failed (cancellation passes through). Besides the model's
-- options: times (an explicit list of arrival times, seconds from the
-- start, instead of the model's schedule: e.g. one shard's part of it),
-- on_arrival(i, intended, admitted) (called at each arrival, before its
-- operation starts or when it is dropped: admitted false), stop() (checked
-- before each arrival: true ends the schedule there, r.stopped = true).
function M.run(opts)
  check(opts)
  local name = opts.name or "load"
  local lat = metrics.histogram(name .. ".latency")
  local corrected = (opts.times or opts.model ~= "closed") and metrics.histogram(name .. ".latency_corrected") or nil
  local c_started, c_dropped = metrics.counter(name .. ".started"), metrics.counter(name .. ".dropped")
  local c_done, c_failed = metrics.counter(name .. ".completed"), metrics.counter(name .. ".failed")
  local r = { started = 0, dropped = 0, completed = 0, failed = 0, arrivals = 0 }
  local cap = opts.max_in_flight or math.huge
  local slots = opts.on_full == "queue" and cap ~= math.huge and kb.semaphore(cap) or nil
  local in_flight, tasks = 0, {}
  local t_begin = kb.now()

  local function operation(i, intended)
    local t0 = kb.now()
    local ok, err = pcall(opts.fn, i, intended)
    local t1 = kb.now()
    in_flight = in_flight - 1
    if slots then slots:release() end
    if not ok and kb.is_cancelled(err) then error(err, 0) end
    lat:record(t1 - t0)
    if corrected then corrected:record(t1 - intended) end
    if ok then
      r.completed = r.completed + 1
      c_done:inc()
    else
      r.failed = r.failed + 1
      c_failed:inc()
    end
  end

  local function start(i, intended)
    r.started = r.started + 1
    c_started:inc()
    in_flight = in_flight + 1
    tasks[#tasks + 1] = kb.spawn(operation, i, intended)
  end

  if opts.model == "closed" and not opts.times then
    local pool = kb.pool(math.floor(opts.concurrency))
    for i = 1, math.floor(opts.iterations) do
      r.arrivals = r.arrivals + 1
      r.started = r.started + 1
      c_started:inc()
      pool:spawn(function()
        in_flight = in_flight + 1
        if opts.on_arrival then opts.on_arrival(i, kb.now(), true) end
        operation(i, kb.now())
      end)
    end
    pool:wait()
  else
    for i, at in ipairs(opts.times or M.arrivals(opts)) do
      local intended = t_begin + at
      local wait = intended - kb.now()
      if wait > 0 then kb.sleep(wait) end
      if opts.stop and opts.stop() then
        r.stopped = true
        break
      end
      r.arrivals = r.arrivals + 1
      if slots then
        slots:acquire() -- waits for a slot: the latency from `intended` says so
        if opts.on_arrival then opts.on_arrival(i, intended, true) end
        start(i, intended)
      elseif in_flight >= cap then
        r.dropped = r.dropped + 1
        c_dropped:inc()
        if opts.on_arrival then opts.on_arrival(i, intended, false) end
      else
        if opts.on_arrival then opts.on_arrival(i, intended, true) end
        start(i, intended)
      end
    end
    for _, t in ipairs(tasks) do t:wait() end
  end
  r.duration = kb.now() - t_begin
  return r
end

-- ---- what a storm's objects did over time ------------------------------------------------

local Outcomes = {}
Outcomes.__index = Outcomes

--- load.outcomes([prefix]) -> a tracker of a storm's objects (runs, Jobs,
-- workflows) over time, in kb.metrics (so kb.timeseries has them per
-- interval): counter `<prefix>.created`, counter `<prefix>.finished{state}`,
-- gauge `<prefix>.in_flight` (created, not finished). prefix: "storm".
-- t:created(key) when the server took object `key` (any value: a name, a
-- record), t:ended(key, state) when it finished; each counts once per key,
-- and an end seen before the creation (a watch faster than the create's
-- answer) counts when the creation does.
function M.outcomes(prefix)
  prefix = prefix or "storm"
  return setmetatable({ prefix = prefix, created_c = metrics.counter(prefix .. ".created"),
    gauge = metrics.gauge(prefix .. ".in_flight"), seen = {}, early = {} }, Outcomes)
end

local function finish(t, state)
  t.gauge:dec()
  metrics.counter(t.prefix .. ".finished", { state = state }):inc()
end

function Outcomes:created(key)
  if self.seen[key] then return end
  self.seen[key] = "created"
  self.created_c:inc()
  self.gauge:inc()
  local early = self.early[key]
  if early then
    self.early[key] = nil
    self.seen[key] = "ended"
    finish(self, early)
  end
end

function Outcomes:ended(key, state)
  local s = self.seen[key]
  if s == "ended" then return end
  if s == nil then
    self.early[key] = self.early[key] or state
    return
  end
  self.seen[key] = "ended"
  finish(self, state)
end

-- ---- a storm's parameters -----------------------------------------------------------

local function refuse(fmt, ...) require("kb.params").refuse(fmt, ...) end

-- stages: a list of {duration =, target =} (a table, or JSON / YAML text).
local function decode_stages(v, what)
  if type(v) == "string" then
    local ok, doc = pcall(require("kb.yaml").decode, v, { name = "stages" })
    if not ok or type(doc) ~= "table" then
      refuse("%s: stages must be a JSON or YAML list of {duration, target}, got %q%s", what, v,
        ok and "" or (" (" .. tostring(doc) .. ")"))
    end
    v = doc
  end
  if type(v) ~= "table" or #v == 0 then
    refuse("%s: stages must be a non-empty list of {duration, target}", what)
  end
  local out = {}
  for i, st in ipairs(v) do
    local d, t = type(st) == "table" and tonumber(st.duration), type(st) == "table" and tonumber(st.target)
    if not d or d <= 0 or not t or t < 0 then
      refuse("%s: stages[%d] needs duration > 0 and target >= 0 (runs per second), got %s", what, i,
        require("kb.json").encode(st))
    end
    out[i] = { duration = d, target = t }
  end
  return out
end

--- load.from_params(p [, opts]) -> the kb.load options of a storm's
-- open-model parameters: arrival_rate (per second; 0 = the closed mode),
-- arrival (constant | poisson), the window (`duration`, or
-- opts.duration_key), stages (a ramp: JSON or YAML list of {duration,
-- target}; wins over arrival_rate), max_in_flight (0 = opts.concurrency),
-- on_full (drop | queue); or nil for the closed
-- mode (arrival_rate 0 and no stages). opts: duration_key ("duration"),
-- what (the name in messages), concurrency (max_in_flight 0 means it).
-- A bad value is refused (exit 2) naming the parameter. The Poisson seed
-- comes from math.random, so kbrun --seed reproduces the arrivals.
function M.from_params(p, o)
  o = o or {}
  local what, dkey = o.what or "storm", o.duration_key or "duration"
  local rate, stages = p.arrival_rate or 0, p.stages or ""
  if type(rate) ~= "number" or rate ~= rate or rate < 0 then
    refuse("%s: arrival_rate must be a number >= 0 (runs per second), got %s", what, tostring(rate))
  end
  local open = rate > 0 or (stages ~= "" and stages ~= false)
  if not open then return nil end
  local out = { max_in_flight = nil, on_full = p.on_full or "drop" }
  if out.on_full ~= "drop" and out.on_full ~= "queue" then
    refuse("%s: on_full must be drop or queue, got %s", what, tostring(out.on_full))
  end
  local cap = p.max_in_flight or 0
  if type(cap) ~= "number" or cap < 0 or cap ~= math.floor(cap) then
    refuse("%s: max_in_flight must be an integer >= 0 (0: concurrency), got %s", what, tostring(cap))
  end
  cap = cap > 0 and cap or o.concurrency
  out.max_in_flight = cap and cap > 0 and cap or nil
  if stages ~= "" then
    out.model, out.stages = "ramping", decode_stages(stages, what)
    return out
  end
  local arrival = p.arrival or "constant"
  if arrival ~= "constant" and arrival ~= "poisson" then
    refuse("%s: arrival must be constant or poisson, got %s", what, tostring(arrival))
  end
  local d = p[dkey]
  if type(d) ~= "number" or not (d > 0) then
    refuse("%s: arrival_rate=%g needs %s > 0 (seconds of arrivals), got %s", what, rate, dkey, tostring(d))
  end
  out.model, out.rate, out.duration = arrival, rate, d
  out.seed = arrival == "poisson" and math.random(1, 0x7fffffff) or nil
  return out
end

--- load.shard_times(opts [, what]) -> times, items: this shard's part of
-- the schedule of opts (kb.shard.items, round-robin: arrival i is shard
-- (i - 1) % count's, so the shards together follow the whole schedule),
-- as arrival times (seconds from the start) and their global numbers.
function M.shard_times(opts, what)
  local all = M.arrivals(opts)
  local times, items = {}, {}
  if #all == 0 then return times, items end
  for k, i in ipairs(require("kb.shard").items(#all, what)) do
    times[k], items[k] = all[i], i
  end
  return times, items
end

return M
