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

T.run()
