--- kb.kfp.storm_wait: the part of kb.kfp.storm that follows the runs
-- until they end (notebook step 4: status polls, or tracking = "list"
-- through kb.kfp.storm_track; the timeouts; polling stopped when the
-- server keeps refusing) and the notebook's steps 5 and 6 (one more GET,
-- the deletes). Its functions are Session's (docs/storm.md).
local kb = require "kb"
local log = require "kb.log"
local metrics = require "kb.metrics"
local track = require "kb.kfp.storm_track"
local arrivals = require "kb.kfp.storm_arrivals"
local message_of = require("kb.kfp.storm_record").message_of
local check_int = require("kb.kfp.storm_setup").check_int
local storm = require "kb.kfp.storm"

local M = {}

local Session = storm.Session

-- Copies what the server says about a run into our record of it.
local function absorb(run, r)
  run.state, run.state_raw = r.state, r.state_raw
  run.created_at, run.scheduled_at = r.created_at or run.created_at, r.scheduled_at or run.scheduled_at
  run.finished_at = r.finished_at or run.finished_at
  if r.error and r.error ~= "" then run.server_error = r.error end
  if r.finished and run.created_at and run.finished_at then
    run.duration = run.finished_at - run.created_at
  end
end

-- fn(self, run), with failures left to the instrumented client's records.
local function guarded(fn)
  return function(self, run)
    local ok, err = pcall(fn, self, run)
    if not ok and kb.is_cancelled(err) then error(err, 0) end
    return ok
  end
end

local function pending(run)
  return run.id ~= nil and not run.finished and not run.timed_out and not run.lost and not run.unknown
end

--- Consecutive failed status polls after which the storm stops polling:
-- auth failures (401/403: the token will not fix itself) and rounds in
-- which every poll failed (each poll already retried as configured).
storm.MAX_AUTH_FAILURES = 3
storm.MAX_FAILED_ROUNDS = 3

-- Histogram layout of run durations and lags: 1 ms to 30 days.
local LONG = { lowest = 1e-3, highest = 30 * 86400, digits = 3 }

-- A poll's answer: the first time a run is seen finished, the lag between
-- its finished_at and now (server clock).
function Session:observe(run, r)
  absorb(run, r)
  if not r.finished or run.finished or run.timed_out then return end
  run.finished = true
  arrivals.ended(self, run, storm.outcome(run))
  if run.finished_at then run.observed_lag = self.server_now() - run.finished_at end
  if r.succeeded and run.duration then
    metrics.histogram("run.duration", nil, LONG):record(math.max(run.duration, 0))
  end
  if run.observed_lag then
    metrics.histogram("run.observed_lag", nil, LONG):record(math.max(run.observed_lag, 0))
  end
  self:journal_write{ event = "run.finished", id = run.id, state = run.state, t = self:elapsed(),
    duration = run.duration, observed_lag = run.observed_lag }
end

-- A status poll decodes what a run's state needs, not its pipeline spec.
local POLL = { status_only = true }

-- One status GET (poll client); false when the call failed (or polling
-- has stopped).
function Session:poll_one(run)
  if self.halted then return false end
  local ok, r = pcall(self.poller.get_run, self.poller, run.id, POLL)
  if not ok then
    if kb.is_cancelled(r) then error(r, 0) end
    run.poll_error, run.poll_failed = message_of(r), true
    local class = type(r) == "table" and r.class or "lua"
    if class == "not_found" then
      self:lose(run, r)
    elseif class == "auth" then
      self.auth_failures = (self.auth_failures or 0) + 1
      if self.auth_failures >= storm.MAX_AUTH_FAILURES then
        self:halt(string.format("%d consecutive status polls were refused (auth)", self.auth_failures), r)
      end
    end
    return false
  end
  run.poll_failed, self.auth_failures = false, 0
  self:observe(run, r)
  return true
end

--- Stops polling (and the storm's further calls but cleanup): the server
-- keeps refusing or failing. Every pending run is then reported Unknown
-- with the last error: its state could not be read, it did not time out.
function Session:halt(why, err)
  if self.halted then return end
  self.halted = { reason = why, error = message_of(err), class = type(err) == "table" and err.class or nil }
  log.error("storm: stopped polling: %s; last error: %s", why, self.halted.error)
  self:journal_write{ event = "storm.halted", reason = why, error = self.halted.error, t = self:elapsed() }
end

-- After the polls stopped: every pending run is Unknown.
function Session:mark_unknown(list, why)
  for _, run in ipairs(list) do
    if pending(run) then
      run.unknown = true
      arrivals.ended(self, run, "Unknown")
      run.unknown_reason = string.format("state unknown (%s): last poll: %s", why,
        run.poll_error or ("not polled; the last refusal: " .. (self.halted and self.halted.error or "?")))
      self:journal_write{ event = "run.unknown", id = run.id, index = run.index, state = run.state,
        error = run.unknown_reason, t = self:elapsed() }
    end
  end
end

--- Marks a run the server no longer knows (a GET by id answered 404: it
-- was deleted behind the storm's back, or a restarted server lost its
-- state) as lost: outcome "Lost", class not_found; it is no longer polled,
-- fetched or deleted.
function Session:lose(run, err)
  if run.lost then return end
  run.lost, run.lost_class = true, type(err) == "table" and err.class or "not_found"
  arrivals.ended(self, run, "Lost")
  run.poll_error = string.format("lost (%s): the server no longer knows this run: %s",
    run.lost_class, message_of(err))
  self:journal_write{ event = "run.lost", id = run.id, t = self:elapsed(), class = run.lost_class,
    error = run.poll_error }
  log.warn("storm: run %s is lost: the server answered %s", run.id, message_of(err))
end

-- The notebook's loop: GET runs in creation order, stop at the first
-- unfinished one (finished runs are fetched again every time).
function Session:poll_in_order(list)
  for _, run in ipairs(list) do
    if run.id and not run.timed_out and not run.lost and not run.unknown then
      local ok = self:poll_one(run)
      self:count_round({ ok }, 1)
      if not run.finished then return end
    end
  end
end

-- Every pending run, `concurrency` GETs in flight (poll_one does none
-- once polling halted).
function Session:poll_pending(list, count_rounds)
  local todo = {}
  for _, run in ipairs(list) do
    if pending(run) then todo[#todo + 1] = run end
  end
  local results = kb.pool(self.p.concurrency):map(todo, function(run) return self:poll_one(run) end)
  -- wait_runs stops after rounds of failures; the probe's rounds measure them
  if count_rounds then self:count_round(results, #todo) end
end

-- One round of tracking = "list" (kb.kfp.storm_track): the unfinished runs
-- listed, a GET for each whose state changed.
function Session:track_round(list)
  local _, all_failed = track.round(self, list, pending)
  self:count_round({ not all_failed }, 1, self.track_error and message_of(self.track_error))
end

-- A poll round in which every poll failed counts towards halting.
function Session:count_round(results, n, fallback)
  if n == 0 or self.halted then return end
  for i = 1, n do
    if results[i] then self.failed_rounds = 0 return end
  end
  self.failed_rounds = (self.failed_rounds or 0) + 1
  if self.failed_rounds >= storm.MAX_FAILED_ROUNDS then
    local last
    for _, run in ipairs(self.runs) do
      if pending(run) and run.poll_error then last = run.poll_error end
    end
    self:halt(string.format("every status poll failed in %d consecutive rounds", self.failed_rounds),
      last or fallback or "?")
  end
end

--- ListRuns of the experiment (every page; timed: run.list). Returns the
-- number of runs listed, or nil when the call failed.
function Session:list_runs()
  local ok, items = pcall(self.c.list_all_runs, self.c,
    { experiment_id = self.experiment and self.experiment.id, page_size = 200, status_only = true })
  if not ok then
    if kb.is_cancelled(items) then error(items, 0) end
    return nil
  end
  return #items
end

-- Terminates a run that ran out of time and counts it as timed out.
function Session:time_out(run, why)
  run.timed_out, run.timeout_reason = true, why
  arrivals.ended(self, run, "Timed out")
  local ok, err = pcall(self.c.terminate_run, self.c, run.id)
  if not ok and kb.is_cancelled(err) then error(err, 0) end
  run.terminated = ok
  self:journal_write{ event = "run.timeout", id = run.id, state = run.state, reason = why,
    t = self:elapsed(), terminated = ok }
  log.warn("storm: run %s %s (state %s)%s", run.id, why, tostring(run.state),
    ok and "; terminated" or "; terminate failed")
end

-- Cluster seconds a run has existed (from its create call's answer).
function Session:age(run)
  return (kb.now() - run.t_created) * self.clock.scale
end

function Session:enforce_timeouts(list)
  local p, expired = self.p, self:expired()
  local pool = kb.pool(p.concurrency)
  for _, run in ipairs(list) do
    if pending(run) then
      local why
      if expired then
        why = string.format("not finished within the global timeout (%g s)", p.timeout)
      elseif p.run_timeout > 0 and self:age(run) >= p.run_timeout then
        why = string.format("not finished within run_timeout (%g s)", p.run_timeout)
      end
      if why and run.poll_failed then
        -- its last poll failed: we do not know that it is still running
        run.unknown = true
        arrivals.ended(self, run, "Unknown")
        run.unknown_reason = string.format("state unknown: %s and the last poll failed: %s", why,
          run.poll_error)
        self:journal_write{ event = "run.unknown", id = run.id, index = run.index, state = run.state,
          error = run.unknown_reason, t = self:elapsed() }
      elseif why then
        pool:spawn(self.time_out, self, run, why)
      end
    end
  end
  pool:wait()
end

-- Cluster seconds until the next poll: the interval, or less when a
-- timeout falls due first.
function Session:next_wait(list)
  local p = self.p
  local wait = p.run_status_polling_interval_sec
  if p.timeout > 0 then wait = math.min(wait, p.timeout - self:elapsed()) end
  if p.run_timeout > 0 then
    for _, run in ipairs(list) do
      if pending(run) then wait = math.min(wait, p.run_timeout - self:age(run)) end
    end
  end
  return math.max(wait, 1e-3)
end

--- Sets the number of requests in flight (the probe raises it step by step).
function Session:set_concurrency(n)
  self.p.concurrency = n
  check_int(self.p, "concurrency", 1, storm.MAX_CONCURRENCY)
end

--- `rounds` polls of the runs (default all) without waiting for them to
-- finish, `run_status_polling_interval_sec` apart: a ListRuns (with
-- measure_list) and a GET of every pending run per round.
function Session:poll_rounds(list, rounds)
  list = list or self.runs
  for i = 1, rounds do
    if self:count(pending, list) == 0 then return end
    if self.p.measure_list then self:list_runs() end
    self:poll_pending(list)
    self.progress:update()
    if i < rounds then self:sleep(self.p.run_status_polling_interval_sec) end
  end
end

--- Terminates every run (default all) still pending (timed: run.terminate).
function Session:terminate_runs(list)
  self:each_created(list, guarded(function(s, run)
    if not pending(run) then return end
    s.c:terminate_run(run.id)
    run.terminated = true
  end))
end

--- Polls the runs (default all) until every created one finished or timed
-- out (notebook step 4). With poll_all, each interval GETs every pending
-- run; without it, the notebook's in-order walk. measure_list adds a
-- ListRuns per interval. Status GETs are timed as poll.run.get.
function Session:wait_runs(list)
  list = list or self.runs
  while not self.halted do
    -- open model: runs keep arriving until the schedule is over
    if self:count(pending, list) == 0 and not arrivals.arriving(self) then break end
    if self.p.measure_list then self:list_runs() end
    if self.p.tracking == "list" then self:track_round(list)
    elseif self.p.poll_all then self:poll_pending(list, true)
    else self:poll_in_order(list) end
    if self.halted then break end
    self:enforce_timeouts(list)
    self.progress:update()
    if self:count(pending, list) == 0 and not arrivals.arriving(self) then break end
    self:sleep(self:next_wait(list))
  end
  if self.halted then self:mark_unknown(list, "polling stopped: " .. self.halted.reason) end
  self.progress:done()
end

-- True (and said once per step) when polling stopped: the notebook's later
-- steps would only meet the same refusals.
function Session:skip_when_halted(what)
  if not self.halted then return false end
  log.warn("storm: skipping %s: %s", what, self.halted.reason)
  return true
end

-- Runs `fn(self, run)` for each run with an id, `concurrency` at a time.
function Session:each_created(list, fn)
  local created = {}
  for _, run in ipairs(list or self.runs) do
    if run.id then created[#created + 1] = run end
  end
  kb.pool(self.p.concurrency):map(created, function(run) return fn(self, run) end)
end

--- One more GET of every created run, timed as run.get (notebook step 5:
-- these are the notebook's GetRun latencies).
function Session:get_runs(list)
  if self:skip_when_halted("the final GETs (run.get)") then return end
  self:each_created(list, guarded(function(s, run)
    if run.lost then return end
    local ok, r = pcall(s.c.get_run, s.c, run.id, POLL) -- the storm reads states and times only
    if ok then return s:observe(run, r) end
    if type(r) == "table" and r.class == "not_found" then s:lose(run, r) end
    error(r, 0)
  end))
end

--- Deletes every created run, timed as run.delete (notebook step 6).
function Session:delete_runs(list)
  if self:skip_when_halted("the deletes (run.delete; cleanup still tries)") then return end
  self:each_created(list, guarded(function(s, run)
    if run.deleted or run.lost then return end
    s.c:delete_run(run.id)
    run.deleted = true
  end))
end

-- for kb.kfp.storm's other parts
M.absorb, M.pending = absorb, pending

return M
