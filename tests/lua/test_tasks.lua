-- Tasks, sleeping, error propagation, cancellation and the pool helper.
local kb = require "kb"
local T = require "kb.testing"

T.case("spawn returns results through wait", function()
  local t = kb.spawn(function(a, b) return a + b, "x" end, 2, 3)
  local sum, x = t:wait()
  T.eq(sum, 5)
  T.eq(x, "x")
  T.eq(t:status(), "done")
  -- waiting again gives the same results
  T.eq((t:wait()), 5)
end)

T.case("spawned tasks start on the next loop iteration, in order", function()
  local order = {}
  local a = kb.spawn(function() order[#order + 1] = "a" end)
  local b = kb.spawn(function() order[#order + 1] = "b" end)
  order[#order + 1] = "spawner"
  kb.all({ a, b })
  T.eq(table.concat(order, ","), "spawner,a,b")
end)

T.case("sleep orders wake-ups by duration", function()
  local order = {}
  local tasks = {}
  for _, d in ipairs({ 0.03, 0.01, 0.02, 0 }) do
    tasks[#tasks + 1] = kb.spawn(function()
      kb.sleep(d)
      order[#order + 1] = d
    end)
  end
  kb.all(tasks)
  T.same(order, { 0, 0.01, 0.02, 0.03 })
end)

T.case("kb.now advances across a sleep and kb.time is wall clock", function()
  local t0 = kb.now()
  kb.sleep(0.02)
  T.ok(kb.now() - t0 >= 0.019, "now advanced")
  T.ok(math.abs(kb.time() - os.time()) < 2, "time is the epoch clock")
end)

T.case("wait re-raises a task's error with its traceback", function()
  local t = kb.spawn(function()
    kb.sleep(0)
    error("boom")
  end)
  local err = T.raises(function() t:wait() end, "boom")
  T.contains(err, "stack traceback")
  T.contains(err, "test_tasks.lua")
  T.eq(t:status(), "failed")
end)

T.case("error tables keep their fields and gain a traceback", function()
  local t = kb.spawn(function() error({ class = "custom", message = "m" }) end)
  local ok, err = pcall(t.wait, t)
  T.eq(ok, false)
  T.eq(err.class, "custom")
  T.contains(err.traceback, "stack traceback")
end)

T.case("kb.all returns first results and raises after all finished", function()
  local slow_done = false
  local tasks = {
    kb.spawn(function() return 1 end),
    kb.spawn(function() error("second failed", 0) end),
    kb.spawn(function() kb.sleep(0.01); slow_done = true; return 3 end),
  }
  local err = T.raises(function() kb.all(tasks) end, "second failed")
  T.ok(err)
  T.ok(slow_done, "kb.all waited for the slow task before raising")
  T.same(kb.all({ tasks[1], tasks[3] }), { 1, 3 })
end)

T.case("kb.all cancelled: the tasks are cancelled once, waited for, then the caller raises", function()
  local cleanups, log = {}, {}
  local function worker(name)
    return function()
      local ok, err = pcall(kb.sleep, 3600)
      log[#log + 1] = name .. (ok and " woke" or kb.is_cancelled(err) and " cancelled" or " failed")
      -- cleanup that suspends: a second cancel would raise here
      local okc = pcall(kb.sleep, 0.01)
      cleanups[#cleanups + 1] = okc and name or (name .. " cut")
    end
  end
  local a, b = kb.spawn(worker("a")), kb.spawn(worker("b"))
  kb.sleep(0.001) -- both are asleep
  b:cancel() -- asked to stop already: kb.all does not ask again
  T.ok(b:cancel_requested() and not a:cancel_requested(), "cancel_requested tells which task was asked")
  local waiter = kb.spawn(kb.all, { a, b })
  kb.sleep(0.01)
  waiter:cancel()
  local ok, err = pcall(waiter.wait, waiter)
  T.ok(not ok and kb.is_cancelled(err), "the cancelled caller raises kb.cancelled")
  T.ok(a:done() and b:done(), "no task is left running behind it")
  table.sort(cleanups)
  T.same(cleanups, { "a", "b" }, "each task was cancelled once: its cleanup ran whole")
  table.sort(log)
  T.same(log, { "a cancelled", "b cancelled" })
  local done = kb.spawn(function() end)
  done:wait()
  done:cancel()
  T.ok(not done:cancel_requested(), "cancelling a finished task requests nothing")
end)

T.case("cancel stops a sleeping task; waiting raises cancelled", function()
  local reached = false
  local t = kb.spawn(function()
    kb.sleep(10)
    reached = true
  end)
  kb.sleep(0.001)
  t:cancel()
  local ok, err = pcall(t.wait, t)
  T.eq(ok, false)
  T.ok(kb.is_cancelled(err), "the error is kb.cancelled")
  T.eq(tostring(err), "cancelled: the task was cancelled")
  T.eq(reached, false)
  T.eq(t:status(), "cancelled")
end)

T.case("a cancelled task can clean up with pcall", function()
  local cleaned = false
  local t = kb.spawn(function()
    local ok, err = pcall(kb.sleep, 10)
    cleaned = not ok and kb.is_cancelled(err)
    error(err, 0) -- propagate the cancellation
  end)
  kb.sleep(0)
  t:cancel()
  pcall(t.wait, t)
  T.ok(cleaned)
end)

T.case("cancelling a task that has not started yet", function()
  local ran = false
  local t = kb.spawn(function() ran = true end)
  t:cancel()
  T.eq(t:status(), "cancelled")
  kb.sleep(0)
  T.eq(ran, false)
end)

T.case("suspending calls outside a task are refused", function()
  local co = coroutine.create(function() kb.sleep(0) end)
  local ok, err = coroutine.resume(co)
  T.eq(ok, false)
  T.contains(err, "must run inside a kb task")
end)

T.case("a bare coroutine.yield inside a task fails the task clearly", function()
  local t = kb.spawn(function() coroutine.yield() end)
  T.raises(function() t:wait() end, "coroutine.yield() called directly inside a kb task")
end)

T.case("sleep rejects bad arguments", function()
  T.raises(function() kb.sleep(-1) end, "non-negative")
  T.raises(function() kb.sleep("x") end, "number expected")
end)

T.case("a task cannot wait for itself", function()
  local me
  me = kb.spawn(function()
    kb.sleep(0)
    return me:wait()
  end)
  T.raises(function() me:wait() end, "cannot wait for itself")
end)

T.case("pool runs 10,000 operations with at most N in flight", function()
  local pool = kb.pool(50)
  local in_flight, peak, done = 0, 0, 0
  for i = 1, 10000 do
    pool:spawn(function()
      in_flight = in_flight + 1
      if in_flight > peak then peak = in_flight end
      kb.sleep(i % 3 == 0 and 0.001 or 0)
      in_flight = in_flight - 1
      done = done + 1
    end)
  end
  pool:wait()
  T.eq(done, 10000)
  T.eq(peak, 50)
end)

T.case("pool:map keeps item order and propagates failures", function()
  local pool = kb.pool(3)
  local squares = pool:map({ 1, 2, 3, 4, 5 }, function(x)
    kb.sleep(0.001 * (6 - x))
    return x * x
  end)
  T.same(squares, { 1, 4, 9, 16, 25 })
  T.raises(function()
    kb.pool(2):map({ 1, 2 }, function(x) if x == 2 then error("item 2 failed", 0) end end)
  end, "item 2 failed")
  T.raises(function() kb.pool(0) end, "positive integer")
end)

T.case("pool:map runs the items on at most n tasks, every item despite failures", function()
  local threads, nthreads, ran = {}, 0, {}
  local ok, err = pcall(kb.pool(4).map, kb.pool(4), { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, function(x, i)
    local co = coroutine.running()
    if not threads[co] then threads[co], nthreads = true, nthreads + 1 end
    kb.sleep(0.001 * (x % 3))
    ran[#ran + 1] = i
    if x == 3 or x == 7 then error("item " .. x .. " failed") end
    return x
  end)
  T.eq(ok, false)
  T.eq(nthreads, 4)         -- workers, not a task per item
  T.eq(#ran, 10)            -- the failures stopped nothing
  T.contains(err, "item 3 failed") -- the first in item order
  T.contains(err, "stack traceback") -- as a failed task's error
  local e = {}
  local ok2, got = pcall(kb.pool(2).map, kb.pool(2), { 1 }, function() error(e) end)
  T.eq(ok2, false)
  T.eq(got, e)
  T.eq(type(e.traceback), "string")
  T.same(kb.pool(3):map({}, function() error("never") end), {})
end)

T.case("pool:map: cancelling the caller cancels the items in flight", function()
  local started, finished = 0, 0
  local t = kb.spawn(function()
    kb.pool(2):map({ 1, 2, 3, 4 }, function()
      started = started + 1
      kb.sleep(10)
      finished = finished + 1
    end)
  end)
  kb.sleep(0.01)
  t:cancel()
  local ok, err = pcall(t.wait, t)
  T.eq(ok, false)
  T.ok(kb.is_cancelled(err))
  T.eq(started, 2)
  T.eq(finished, 0)
end)

T.case("kb.timeout returns results or raises class timeout", function()
  T.eq(kb.timeout(1, function() kb.sleep(0.001); return 42 end), 42)
  local ok, err = pcall(kb.timeout, 0.01, function() kb.sleep(5) end)
  T.eq(ok, false)
  T.eq(err.class, "timeout")
  T.contains(tostring(err), "gave up after 0.01 s")
end)

T.case("semaphore hands units to waiters in FIFO order", function()
  local sem = kb.semaphore(1)
  local order = {}
  sem:acquire()
  local tasks = {}
  for i = 1, 3 do
    tasks[i] = kb.spawn(function()
      sem:acquire()
      order[#order + 1] = i
      sem:release()
    end)
  end
  kb.sleep(0.001)
  T.eq(#order, 0)
  sem:release()
  kb.all(tasks)
  T.same(order, { 1, 2, 3 })
  T.eq(sem:available(), 1)
end)

T.case("to-be-closed variables close when a task fails or is cancelled", function()
  local closed = {}
  local function closer(name)
    return setmetatable({}, { __close = function() closed[#closed + 1] = name end })
  end
  local failing = kb.spawn(function()
    local c <close> = closer("failed")
    kb.sleep(0)
    error("boom", 0)
  end)
  T.raises(function() failing:wait() end, "boom")
  local sleeping = kb.spawn(function()
    local c <close> = closer("cancelled")
    kb.sleep(10)
  end)
  kb.sleep(0)
  sleeping:cancel()
  pcall(sleeping.wait, sleeping)
  T.same(closed, { "failed", "cancelled" })
end)

T.case("a pool slot is released when its task fails", function()
  local pool = kb.pool(1)
  pool:spawn(function() error("first fails", 0) end)
  -- would wait forever for the slot if the failure kept it
  local second = pool:spawn(function() return "second ran" end)
  T.eq(second:wait(), "second ran")
  T.raises(function() pool:wait() end, "first fails")
end)

-- ---- memory safety: many results, cancel before start, units not lost ----------

local function range(n)
  local t = {}
  for i = 1, n do t[i] = i end
  return t
end

-- Checks that `got` (a table.pack) is exactly 1..n.
local function check_range(got, n, what)
  T.eq(got.n, n, what .. ": count")
  for i = 1, n do
    if got[i] ~= i then T.eq(got[i], i, what .. ": value " .. i) end
  end
end

T.case("a task returning 5,000 values: wait (before and after it ends), kb.all, kb.timeout", function()
  local N = 5000
  local values = range(N)
  local function many() kb.sleep(0) return table.unpack(values, 1, N) end
  -- Waiting while it runs: the results are handed over when it finishes.
  local t = kb.spawn(many)
  check_range(table.pack(t:wait()), N, "wait while running")
  -- Waiting on a finished task copies them again.
  check_range(table.pack(t:wait()), N, "wait after the end")
  -- Several waiters at once each get all of them.
  local target = kb.spawn(many)
  local waiters = {}
  for i = 1, 3 do waiters[i] = kb.spawn(function() return select("#", target:wait()) end) end
  T.same(kb.all(waiters), { N, N, N })
  T.eq(kb.all({ kb.spawn(many) })[1], 1, "kb.all's first result")
  check_range(table.pack(kb.timeout(30, many)), N, "kb.timeout")
  -- Arguments too: a new coroutine starts with room for 20 values.
  local args = kb.spawn(function(...) return select("#", ...), (select(N, ...)) end,
    table.unpack(values, 1, N))
  local n, last = args:wait()
  T.eq(n, N)
  T.eq(last, N)
end)

T.case("as many results as a Lua stack holds (200,000) pass through wait", function()
  local N = 200000
  local values = range(N)
  local t = kb.spawn(function() kb.sleep(0) return table.unpack(values, 1, N) end)
  local got = table.pack(t:wait())
  T.eq(got.n, N)
  T.eq(got[N], N)
  T.eq(select("#", t:wait()), N)
end)

T.case("cancelling tasks that have not started, then collecting garbage", function()
  local ran = 0
  for round = 1, 50 do
    local tasks = {}
    for i = 1, 20 do tasks[i] = kb.spawn(function() ran = ran + 1 end) end
    for i = 1, 20, 2 do tasks[i]:cancel() end
    for i = 1, 20, 2 do T.eq(tasks[i]:status(), "cancelled") end
    -- Only the cancelled ones become garbage: they are still linked in
    -- the ready queue, which must not touch freed memory.
    for i = 1, 20, 2 do tasks[i] = nil end
    collectgarbage()
    collectgarbage()
    kb.sleep(0)
    for i = 2, 20, 2 do T.eq(tasks[i]:status(), "done", "round " .. round) end
  end
  T.eq(ran, 50 * 10, "only the tasks not cancelled ran")
  -- A task cancelled by another task in the same ready-queue pass.
  for _ = 1, 50 do
    local victim
    local killer = kb.spawn(function()
      victim:cancel()
      victim = nil
      collectgarbage()
    end)
    victim = kb.spawn(function() error("must not run") end)
    kb.sleep(0)
    T.eq(killer:status(), "done")
  end
end)

T.case("a semaphore unit granted to a waiter cancelled before it resumed goes on", function()
  local sem = kb.semaphore(1)
  sem:acquire()
  local first = kb.spawn(function() sem:acquire() return "first" end)
  local second = kb.spawn(function() sem:acquire() sem:release() return "second" end)
  kb.sleep(0)
  T.eq(first:status(), "awaiting")
  sem:release() -- the unit is handed to `first`...
  first:cancel() -- ...which is cancelled before it could take it
  T.eq(second:wait(), "second", "the next waiter got the unit")
  T.eq(first:status(), "cancelled")
  T.eq(sem:available(), 1, "the unit is back")
  -- Without another waiter the unit returns to the count.
  sem:acquire()
  local lone = kb.spawn(function() sem:acquire() end)
  kb.sleep(0)
  sem:release()
  lone:cancel()
  T.eq(sem:available(), 1)
  T.ok(not pcall(lone.wait, lone), "the waiter was cancelled")
end)

T.case("a pool keeps its capacity when a spawner is cancelled after it was granted a slot", function()
  local pool = kb.pool(2)
  for _ = 1, 20 do
    local gate = kb.semaphore(0)
    local a = pool:spawn(function() gate:acquire() end)
    local b = pool:spawn(function() gate:acquire() end)
    -- The pool is full: this spawner waits for a slot.
    local spawner = kb.spawn(function() pool:spawn(function() end) end)
    kb.sleep(0)
    T.eq(spawner:status(), "awaiting")
    -- a's slot is released when a ends and handed to the spawner, which is
    -- cancelled before it runs: by a task queued right behind a.
    gate:release()
    local canceller = kb.spawn(function()
      T.eq(a:status(), "done")
      T.eq(spawner:status(), "awaiting")
      spawner:cancel()
    end)
    a:wait()
    canceller:wait()
    T.eq(spawner:status(), "cancelled")
    gate:release()
    b:wait()
    T.eq(pool.slots:available(), 2, "both slots are free again")
  end
  -- And the pool still runs work at full width.
  local running, peak = 0, 0
  local gate = kb.semaphore(0)
  for i = 1, 2 do
    pool:spawn(function()
      running = running + 1
      peak = math.max(peak, running)
      gate:acquire()
      running = running - 1
    end)
  end
  kb.sleep(0)
  T.eq(peak, 2)
  gate:release()
  gate:release()
  pool:wait()
end)

T.case("a waiter cancelled before it took a failure leaves the failure unobserved", function()
  local failing = kb.spawn(function() kb.sleep(0) error("nobody saw this", 0) end)
  local waiter = kb.spawn(function() return failing:wait() end)
  kb.sleep(0) -- both run; the waiter awaits
  kb.sleep(0) -- failing fails: the waiter is queued with the outcome
  waiter:cancel()
  T.eq(waiter:status(), "awaiting")
  T.ok(kb.is_cancelled(select(2, pcall(waiter.wait, waiter))), "the waiter was cancelled")
  T.eq(waiter:status(), "cancelled")
  T.eq(failing:status(), "failed")
  -- Nobody took the failure: it is reported as unobserved (at exit, the
  -- runner's report; here, asked for directly, which clears the list).
  local reported = false
  for _, f in ipairs(require("kb.core").unobserved_failures()) do
    if f.id == failing:id() then
      reported = true
      T.contains(f.error, "nobody saw this")
    end
  end
  T.ok(reported, "the failure is listed as unobserved")
  T.contains(T.raises(function() failing:wait() end), "nobody saw this")
end)

-- The loop's time is that of its last wakeup; Lua that ran since then
-- must not shorten a real wait that starts after it.
local function spin_real(seconds)
  local core = require "kb.core"
  local t0 = core.time()
  while core.time() - t0 < seconds do end
end

T.case("a real sleep after busy Lua lasts its whole length", function()
  local core = require "kb.core"
  core.sleep_real(0) -- a fresh loop turn
  spin_real(0.08)
  local t0 = core.time()
  core.sleep_real(0.1)
  local waited = core.time() - t0
  T.ok(waited >= 0.099, string.format("slept %.3f s of 0.1", waited))
end)

T.run()
