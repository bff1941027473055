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
  if not MODELS[opts.model] then bad("model must be constant, poisson, ramping or closed, got %s", tostring(opts.model)) end
  if type(opts.fn) ~= "function" then bad("fn (the operation) must be a function") end
  local function positive(k) if type(opts[k]) ~= "number" or not (opts[k] > 0) then bad("%s must be a positive number", k) end end
  if opts.model == "closed" then
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
end

--- Runs a load model (see the module comment); returns {started, dropped,
-- completed, failed, arrivals, duration}. Errors of fn are counted as
-- failed (cancellation passes through).
function M.run(opts)
  check(opts)
  local name = opts.name or "load"
  local lat = metrics.histogram(name .. ".latency")
  local corrected = opts.model ~= "closed" and metrics.histogram(name .. ".latency_corrected") or nil
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

  if opts.model == "closed" then
    local pool = kb.pool(math.floor(opts.concurrency))
    for i = 1, math.floor(opts.iterations) do
      r.arrivals = r.arrivals + 1
      r.started = r.started + 1
      c_started:inc()
      pool:spawn(function()
        in_flight = in_flight + 1
        operation(i, kb.now())
      end)
    end
    pool:wait()
  else
    for i, at in ipairs(M.arrivals(opts)) do
      local intended = t_begin + at
      local wait = intended - kb.now()
      if wait > 0 then kb.sleep(wait) end
      r.arrivals = r.arrivals + 1
      if slots then
        slots:acquire() -- waits for a slot: the latency from `intended` says so
        start(i, intended)
      elseif in_flight >= cap then
        r.dropped = r.dropped + 1
        c_dropped:inc()
      else
        start(i, intended)
      end
    end
    for _, t in ipairs(tasks) do t:wait() end
  end
  r.duration = kb.now() - t_begin
  return r
end

return M
