--- kb.context: values a task inherits from the task that spawned it.
--
--   local context = require "kb.context"
--   local saved = context.push { metrics = scope }   -- this task, and what it spawns
--   ...                                              -- kb.spawn / kb.pool / kb.timeout tasks inherit
--   context.restore(saved)
--   context.get("metrics")                           -- the innermost value, or nil
--
-- A context is an immutable table of fields: push makes a new one (the
-- current fields plus the given ones) for the calling task; a task
-- spawned through kb.spawn, kb.pool or kb.timeout starts with its
-- spawner's context at the moment of the spawn. kb.metrics keys its
-- scopes on it (a sweep cell's tasks record into the cell's own
-- registry). Code not running in a task (the main chunk, C callbacks
-- outside tasks) and httpd handler tasks (spawned from C) have none.
local core = require "kb.core"

local M = {}

local of = setmetatable({}, { __mode = "k" }) -- coroutine -> context

--- The calling task's context table (read-only by convention), or nil.
function M.current()
  return of[coroutine.running()]
end

--- The field `key` of the calling task's context, or nil.
function M.get(key)
  local c = of[coroutine.running()]
  return c and c[key]
end

--- Gives the calling task a context with `fields` added to its current
-- one; returns the previous context for M.restore.
function M.push(fields)
  local co = coroutine.running()
  local prev = of[co]
  local c = {}
  for k, v in pairs(prev or {}) do c[k] = v end
  for k, v in pairs(fields) do c[k] = v end
  of[co] = c
  return prev
end

--- Puts back the context M.push returned.
function M.restore(prev)
  of[coroutine.running()] = prev
end

--- kb.spawn with inheritance: fn(...) runs as a new task whose context is
-- the caller's at this moment.
function M.spawn(fn, ...)
  local c = of[coroutine.running()]
  if c == nil or type(fn) ~= "function" then return core.spawn(fn, ...) end
  return core.spawn(function(...)
    of[coroutine.running()] = c
    return fn(...)
  end, ...)
end

return M
