--- kb.k8s.lifecycle: how long objects take to reach the milestones of
-- their life (a pod scheduled, running, succeeded; a Job complete; a
-- Workflow or TFJob running and succeeded), measured per object from a
-- watch.
--
--   local lifecycle = require "kb.k8s.lifecycle"
--   local pods = lifecycle.track(c, "Pod", { label_selector = "app=bench" })
--   ... create the pods ...
--   pods:wait{ count = 20, timeout = 600 }
--   for _, r in ipairs(pods:results()) do print(r.name, r.milestones.running.server) end
--   pods:stop()
--
-- Each milestone is a function(obj) -> reached, server_time: whether the
-- object (as a watch event shows it) has reached it, and when the server
-- says it did (an RFC 3339 string or epoch seconds, nil if unknown). Two
-- durations are recorded per object and milestone, into the histogram
-- `lifecycle.<kind>.<milestone>` (kind in lower case: lifecycle.pod.running):
--   {source = "server"}: server_time - metadata.creationTimestamp, from the
--     objects' own timestamps (1 s resolution; virtual time against the
--     simulator);
--   {source = "watch"}: from the object's creation as the scenario saw it
--     (tracker:created(name, t), e.g. kb.now() just before c:create, else
--     the first watch event showing it) to the watch event showing the
--     milestone, on the scenario clock. Watch events are streamed
--     (kb.k8s.watch): this is when the event's line arrived.
-- Milestones that were passed between two observations are all recorded
-- when the later one is seen.
--
-- Built-in milestone sets (by the resource's kind):
--   Pod: scheduled, initialized, running, ready, succeeded | failed
--   Job: started, complete | failed
--   Workflow (argoproj.io): running, succeeded | failed | error
--   TFJob, PyTorchJob, MPIJob (kubeflow.org): created, running, succeeded | failed
-- An object is done at its first terminal milestone (after |), or when
-- it is deleted.
local kb = require "kb"
local metrics = require "kb.metrics"
local u = require "kb.k8s.util"

local M = {}

local function condition(obj, ctype)
  local st = type(obj.status) == "table" and obj.status or nil
  local list = st and type(st.conditions) == "table" and st.conditions or nil
  for _, c in ipairs(list or {}) do
    if type(c) == "table" and c.type == ctype then return c end
  end
end

local function cond_true(ctype)
  return function(obj)
    local c = condition(obj, ctype)
    if c and c.status == "True" then return true, c.lastTransitionTime or c.lastUpdateTime end
    return false
  end
end

local function status(obj) return type(obj.status) == "table" and obj.status or {} end

-- Earliest container start and latest container finish of a pod.
local function container_times(obj)
  local started, finished
  for _, cs in ipairs(type(status(obj).containerStatuses) == "table" and status(obj).containerStatuses or {}) do
    local state = type(cs.state) == "table" and cs.state or {}
    for _, which in ipairs({ "running", "terminated" }) do
      local s = state[which]
      if type(s) == "table" then
        local t = u.parse_time(s.startedAt)
        if t and (not started or t < started) then started = t end
        local f = u.parse_time(s.finishedAt)
        if f and (not finished or f > finished) then finished = f end
      end
    end
  end
  return started, finished
end

local POD_PAST_RUNNING = { Running = true, Succeeded = true, Failed = true }

local function phase_is(p, field)
  return function(obj)
    if status(obj).phase ~= p then return false end
    if field == "containers" then
      local _, finished = container_times(obj)
      return true, finished
    end
    return true, field and status(obj)[field] or nil
  end
end

M.builtin = {
  Pod = {
    order = { "scheduled", "initialized", "running", "ready", "succeeded", "failed" },
    terminal = { "succeeded", "failed" },
    milestones = {
      scheduled = cond_true("PodScheduled"),
      initialized = cond_true("Initialized"),
      running = function(obj)
        if not POD_PAST_RUNNING[status(obj).phase] then return false end
        local started = container_times(obj)
        if started then return true, started end
        return status(obj).phase == "Running", nil
      end,
      ready = cond_true("Ready"),
      succeeded = phase_is("Succeeded", "containers"),
      failed = phase_is("Failed", "containers"),
    },
  },
  Job = {
    order = { "started", "complete", "failed" },
    terminal = { "complete", "failed" },
    milestones = {
      started = function(obj) local t = status(obj).startTime return t ~= nil, t end,
      complete = cond_true("Complete"),
      failed = cond_true("Failed"),
    },
  },
  Workflow = {
    order = { "running", "succeeded", "failed", "error" },
    terminal = { "succeeded", "failed", "error" },
    milestones = {
      running = function(obj)
        local p = status(obj).phase
        if p == "Running" or p == "Succeeded" or p == "Failed" or p == "Error" then
          return true, status(obj).startedAt
        end
        return false
      end,
      succeeded = phase_is("Succeeded", "finishedAt"),
      failed = phase_is("Failed", "finishedAt"),
      error = phase_is("Error", "finishedAt"),
    },
  },
}

local TRAINING = {
  order = { "created", "running", "succeeded", "failed" },
  terminal = { "succeeded", "failed" },
  milestones = {
    created = function(obj)
      local c = condition(obj, "Created")
      if c then return true, c.lastTransitionTime end
      return false
    end,
    running = function(obj)
      local c = condition(obj, "Running")
      if c and c.status == "True" then return true, c.lastTransitionTime end
      -- Finished between two observations: Running is False by now and its
      -- transition time is the end; the operator's startTime is the start.
      if cond_true("Succeeded")(obj) or cond_true("Failed")(obj) then
        return c ~= nil, status(obj).startTime
      end
      return false
    end,
    succeeded = cond_true("Succeeded"),
    failed = cond_true("Failed"),
  },
}
M.builtin.TFJob, M.builtin.PyTorchJob, M.builtin.MPIJob = TRAINING, TRAINING, TRAINING

local Tracker = {}
Tracker.__index = Tracker
Tracker.__name = "kb.k8s.lifecycle"

function Tracker:__tostring()
  return string.format("kb.k8s.lifecycle %s (%d objects, %d done)", self.kind, self.count,
    self.done_count)
end

local OPTS = {
  namespace = true, all_namespaces = true, label_selector = true, field_selector = true,
  milestones = true, order = true, terminal = true, existing = true, window = true, name = true,
  on_done = true,
}

local function wake(t)
  local waiters = t.waiters
  t.waiters = {}
  for _, s in ipairs(waiters) do s:release() end
end

local function record(t, entry, name, server_time, now)
  local m = { at = now }
  local ts = u.parse_time(server_time)
  if ts and entry.created then
    m.server = math.max(0, ts - entry.created)
    metrics.histogram(t.metric .. "." .. name, { source = "server" }):record(m.server)
  end
  local t0 = t.starts[entry.name] or entry.first_seen
  m.observed = math.max(0, now - t0)
  metrics.histogram(t.metric .. "." .. name, { source = "watch" }):record(m.observed)
  entry.milestones[name] = m
end

local function observe(t, ev)
  local obj = ev.object
  local meta = type(obj) == "table" and type(obj.metadata) == "table" and obj.metadata
  if not meta or ev.type == "BOOKMARK" then return end
  local uid = meta.uid or ((meta.namespace or "") .. "/" .. tostring(meta.name))
  local entry = t.objects[uid]
  if not entry then
    if ev.initial and not t.existing then
      t.ignored[uid] = true
      return
    end
    if t.ignored[uid] then return end
    entry = {
      name = meta.name, namespace = meta.namespace, uid = meta.uid,
      created = u.parse_time(meta.creationTimestamp), first_seen = ev.observed or kb.now(),
      milestones = {}, done = false,
    }
    t.objects[uid] = entry
    t.list[#t.list + 1] = entry
    t.count = t.count + 1
  end
  if entry.done then return end
  local now = ev.observed or kb.now()
  for _, name in ipairs(t.order) do
    if not entry.milestones[name] then
      local ok, reached, when = pcall(t.milestones[name], obj)
      if not ok then
        error(string.format("kb.k8s.lifecycle: milestone '%s' failed on %s: %s", name,
          tostring(meta.name), tostring(reached)), 0)
      end
      if reached then
        record(t, entry, name, when, now)
        if t.terminal[name] then
          entry.done, entry.outcome = true, name
        end
      end
    end
  end
  if not entry.done and ev.type == "DELETED" then entry.done, entry.outcome = true, "deleted" end
  entry.last = obj
  if entry.done then
    t.done_count = t.done_count + 1
    if t.on_done then t.on_done(entry) end
  end
end

local function run(t)
  local ok, err = pcall(function()
    for ev in t.watch:events() do
      observe(t, ev)
      wake(t)
    end
  end)
  if not ok and not kb.is_cancelled(err) and not t.stopped then t.err = err end
  t.ended = true
  wake(t)
end

--- lifecycle.track(client, kind [, opts]) -> tracker. opts: namespace,
-- all_namespaces, label_selector, field_selector (as for c:watch),
-- milestones ({name = function(obj) -> reached, server_time}, replacing
-- the built-in set of the kind), order (milestone names in evaluation
-- order; default the built-in order, else sorted names), terminal (names
-- that end an object's tracking; default the built-in ones, else: when
-- every milestone is reached), existing (also track objects that exist
-- already, default false), window (watch window, scenario seconds), name
-- (the kind in metric names, default the kind in lower case), on_done
-- (function(entry): called as each object is done, entry.name and
-- entry.outcome the terminal milestone or "deleted").
function M.track(c, kind, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not OPTS[k] then error(string.format("kb.k8s.lifecycle: unknown option '%s'", tostring(k)), 2) end
  end
  local res = c:resource(kind)
  local builtin = M.builtin[res.kind]
  local milestones = opts.milestones or (builtin and builtin.milestones)
  if type(milestones) ~= "table" or next(milestones) == nil then
    error(string.format("kb.k8s.lifecycle: no built-in milestones for kind %s; give milestones = "
      .. "{name = function(obj) return reached, server_time end}", res.kind), 2)
  end
  for name, fn in pairs(milestones) do
    if type(fn) ~= "function" then
      error(string.format("kb.k8s.lifecycle: milestone '%s' must be a function", tostring(name)), 2)
    end
  end
  local order = opts.order or (not opts.milestones and builtin and builtin.order) or u.sorted_keys(milestones)
  for _, name in ipairs(order) do
    if not milestones[name] then
      error(string.format("kb.k8s.lifecycle: order names an unknown milestone '%s'", name), 2)
    end
  end
  local terminal_list = opts.terminal or (not opts.milestones and builtin and builtin.terminal)
  local terminal = {}
  if terminal_list then
    for _, n in ipairs(terminal_list) do terminal[n] = true end
  else
    terminal[order[#order]] = true -- the last milestone, with every one before it
  end
  local t = setmetatable({
    client = c, kind = res.kind, resource = res.resource,
    metric = "lifecycle." .. (opts.name or res.kind:lower()),
    milestones = milestones, order = order, terminal = terminal,
    existing = opts.existing == true, objects = {}, list = {}, ignored = {}, starts = {},
    count = 0, done_count = 0, waiters = {}, on_done = opts.on_done,
  }, Tracker)
  t.watch = c:watch(res, { namespace = opts.namespace, all_namespaces = opts.all_namespaces,
    label_selector = opts.label_selector, field_selector = opts.field_selector, window = opts.window })
  t.task = kb.spawn(run, t)
  return t
end

--- tracker:created(name [, t]): the scenario created object `name` at
-- scenario time t (default now); watch durations of that object count
-- from there.
function Tracker:created(name, when)
  self.starts[name] = when or kb.now()
end

--- tracker:wait{count = n, timeout = s} -> results. Waits until n objects
-- are done (default: every object seen so far, at least one). Raises class
-- "timeout" (with .results) after timeout scenario seconds, and the
-- watch's error if it failed.
function Tracker:wait(opts)
  opts = opts or {}
  local want = opts.count
  local function satisfied()
    if self.err then error(self.err, 0) end
    if want then return self.done_count >= want end
    return self.count > 0 and self.done_count == self.count
  end
  local function loop()
    while not satisfied() do
      if self.ended then
        u.raise("watch", string.format("kb.k8s.lifecycle: the watch of %s ended", self.resource))
      end
      local s = kb.semaphore(0)
      self.waiters[#self.waiters + 1] = s
      s:acquire()
    end
  end
  if opts.timeout then
    local ok, err = pcall(kb.timeout, opts.timeout, loop)
    if not ok then
      if u.is_error(err) and err.class == "timeout" then
        u.raise("timeout", string.format("kb.k8s.lifecycle: %d of %s %s done after %g s", self.done_count,
          want and tostring(want) or tostring(self.count), self.resource, opts.timeout),
          { results = self:results() })
      end
      error(err, 0)
    end
  else
    loop()
  end
  return self:results()
end

--- tracker:results() -> list of {name, namespace, uid, created (epoch),
-- first_seen (scenario time), done, outcome, milestones = {name = {server,
-- observed, at}}} in the order the objects were first seen.
function Tracker:results()
  local out = {}
  for i, e in ipairs(self.list) do
    out[i] = { name = e.name, namespace = e.namespace, uid = e.uid, created = e.created,
      first_seen = e.first_seen, done = e.done, outcome = e.outcome, milestones = e.milestones }
  end
  return out
end

--- tracker:stop(): ends the watch.
function Tracker:stop()
  self.stopped = true
  self.watch:stop()
end

Tracker.__close = Tracker.stop

return M
