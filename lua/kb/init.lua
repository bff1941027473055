--- kb: the scenario API of kbrun.
--
-- Tasks, clocks and concurrency helpers live here; submodules (kb.http,
-- kb.json, kb.yaml, kb.hist, kb.metrics, kb.fs, kb.log, ...) load on first
-- use, so `kb.json.encode(t)` works without a separate require.
local core = require "kb.core"
-- spawn: core.spawn, the new task inheriting its spawner's kb.context
-- (sweep cells' metric scopes); every task below is started with it
local spawn = require("kb.context").spawn

local kb = {}

--- Starts `fn(...)` as a new task on the next loop iteration.
-- @return task with :wait(), :cancel(), :status(), :done()
kb.spawn = spawn

--- Suspends the calling task for `seconds` on the scenario clock.
kb.sleep = core.sleep

--- The scenario clock in seconds (float, microsecond resolution). Real
-- monotonic time against a real cluster; the simulator's virtual time
-- against the embedded simulator.
kb.now = core.now

--- Wall-clock time, seconds since the Unix epoch (float).
kb.time = core.time

--- A counting semaphore: sem:acquire() suspends while none is free.
kb.semaphore = core.semaphore

--- The error value a cancelled task raises; kb.is_cancelled(err) tests it.
kb.cancelled = core.cancelled()
kb.is_cancelled = core.is_cancelled

--- Scenario parameters (command line over params file over defaults).
kb.params = {}

--- Waits for every task in `tasks` (a list) and returns a list with the
-- first result of each, in order. If any failed, the first failure is
-- raised once all have finished (no task is left running behind the error).
-- A caller cancelled while it waits cancels the tasks not asked to stop
-- yet, waits for them all to end, then raises kb.cancelled.
function kb.all(tasks)
  local results, first_err, cancelled = {}, nil, nil
  for i, task in ipairs(tasks) do
    local ok, value = pcall(task.wait, task)
    -- the wait itself was cancelled (the task has not ended): the
    -- caller's own cancellation, not a result of the task
    while not ok and core.is_cancelled(value) and not task:done() do
      cancelled = value
      for j = i, #tasks do
        local t = tasks[j]
        if not t:done() and not t:cancel_requested() then t:cancel() end
      end
      ok, value = pcall(task.wait, task)
    end
    if ok then
      results[i] = value
    elseif first_err == nil then
      first_err = value
    end
  end
  if cancelled ~= nil then error(cancelled, 0) end
  if first_err ~= nil then error(first_err, 0) end
  return results
end

local Pool = {}
Pool.__index = Pool

--- A bounded-concurrency pool: at most `n` of its tasks run at once.
--   local pool = kb.pool(64)
--   for i = 1, 10000 do pool:spawn(work, i) end
--   pool:wait()
-- pool:spawn suspends the caller while the pool is full, so a loop of
-- 10,000 spawns never holds more than n tasks (plus the caller) in memory.
function kb.pool(n)
  if math.type(n) ~= "integer" or n <= 0 then
    error("kb.pool(n): n must be a positive integer", 2)
  end
  return setmetatable({ limit = n, slots = core.semaphore(n), tasks = {}, failures = {} }, Pool)
end

--- Starts fn(...) in the pool once a slot is free; returns the task.
function Pool:spawn(fn, ...)
  self.slots:acquire()
  local slots = self.slots
  -- The slot is released by a to-be-closed variable, so an error leaves
  -- fn's frame on the stack and the task's traceback points at the failure.
  local task = spawn(function(...)
    local release <close> = setmetatable({}, { __close = function() slots:release() end })
    return fn(...)
  end, ...)
  self.tasks[#self.tasks + 1] = task
  return task
end

--- Waits for every task spawned so far; raises the first failure after all
-- have finished. Returns the list of first results.
function Pool:wait()
  local tasks = self.tasks
  self.tasks = {}
  return kb.all(tasks)
end

-- A failed item's error, with the traceback a failed task's gets.
local function with_traceback(err)
  if type(err) == "string" then return debug.traceback(err, 2) end
  if type(err) == "table" and not core.is_cancelled(err) and err.traceback == nil then
    err.traceback = debug.traceback(nil, 2)
  end
  return err
end

--- Runs fn(item, index) for every item of the list `items`, at most the
-- pool's n at once, and returns their first results in item order. A
-- failure does not stop the other items; the first (in item order) is
-- raised once all have run. Cancelling the caller cancels the items
-- still running and raises kb.cancelled.
--
-- The items run on at most n worker tasks (spawned in the pool, so they
-- count against its limit) that each take the next item: a task per item
-- would cost each its own coroutine, stack and slot (a storm maps every
-- status poll; bench/kfp.md).
function Pool:map(items, fn)
  local n, taken = #items, 0
  local results, failures = {}, {}
  local function worker()
    while taken < n do
      taken = taken + 1
      local i = taken
      local ok, value = xpcall(fn, with_traceback, items[i], i)
      if ok then
        results[i] = value
      elseif core.is_cancelled(value) then
        error(value, 0)
      else
        failures[i] = value
      end
    end
  end
  local workers = {}
  for w = 1, math.min(self.limit, n) do workers[w] = self:spawn(worker) end
  kb.all(workers)
  for i = 1, n do
    if failures[i] ~= nil then error(failures[i], 0) end
  end
  return results
end

-- fn(...) in a task of its own, cancelled when sleep(seconds) returns first.
local function with_deadline(sleep, seconds, fn, ...)
  local work = spawn(fn, ...)
  local timer = spawn(function()
    sleep(seconds)
    work:cancel()
  end)
  local result = table.pack(pcall(work.wait, work))
  timer:cancel()
  if not work:done() then work:cancel() end -- we were cancelled ourselves
  if result[1] then return table.unpack(result, 2, result.n) end
  if core.is_cancelled(result[2]) and work:status() == "cancelled" then
    error(setmetatable({ class = "timeout",
      message = string.format("gave up after %g s", seconds) },
      getmetatable(kb.cancelled)), 2)
  end
  error(result[2], 0)
end

--- Runs fn with a deadline on the scenario clock: returns fn's results, or
-- raises {class = "timeout"} (fn's task is cancelled) after `seconds`.
function kb.timeout(seconds, fn, ...)
  return with_deadline(core.sleep, seconds, fn, ...)
end

--- The same with a deadline in real seconds, whatever the scenario clock
-- does (a fast-forwarding clock may pass an hour in a millisecond): a bound
-- on work whose cost is real, such as a cleanup.
function kb.timeout_real(seconds, fn, ...)
  return with_deadline(core.sleep_real, seconds, fn, ...)
end

-- Submodules load on first use: kb.http -> require "kb.http".
return setmetatable(kb, {
  __index = function(t, name)
    local ok, mod = pcall(require, "kb." .. name)
    if not ok then
      if tostring(mod):find("module 'kb." .. name .. "' not found", 1, true) then return nil end
      error(mod, 2)
    end
    rawset(t, name, mod)
    return mod
  end,
})
