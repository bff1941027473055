--- kb.k8s.watch: watches of any resource, as an iterator of events.
--
--   local w = c:watch("pods", { label_selector = "app=x" })
--   for ev in w:events() do print(ev.type, ev.object.metadata.name) end
--   w:stop()
--
-- Each watch request is streamed (kb.http.stream): every event line is
-- decoded and delivered as it arrives, and ev.observed (scenario clock) is
-- its arrival, so latencies measured from watches are not quantized. The
-- server ends each request after timeoutSeconds (a *window*); the next
-- one resumes from the last resourceVersion seen (an event's, or a
-- BOOKMARK's). The window is opts.window, else the client's watch_window
-- (scenario seconds, default 300: it only sets how often the watch
-- reconnects). On a real cluster (scenario clock speed 1) timeoutSeconds
-- is the window rounded up to whole seconds; against the embedded
-- simulator (sped-up clock) it is the window in the server's real seconds,
-- fractional. A client whose opts.http has no stream() (a test double)
-- gets whole bodies: its events then come when their window ends.
--
-- Like an informer, the watch starts with a list (in the calling task, so
-- an object created after c:watch returns is never missed) and delivers
-- its items as ADDED events with ev.initial = true (opts.initial = false
-- skips them), then watches from the list's resourceVersion. A dropped
-- connection or a failed window (connect, reset, timeout, 5xx, 429, a
-- line that is not JSON) resumes from the last resourceVersion after a
-- short back-off; more than max_retries failures in a row end the watch
-- with that error. A 410 Gone (the server no longer has that
-- resourceVersion) re-lists and delivers the difference to what the watch
-- had seen: ADDED, MODIFIED and DELETED events with ev.relist = true
-- (intermediate states are lost, as with any informer). Events: {type =
-- "ADDED" | "MODIFIED" | "DELETED", object, observed, initial, relist};
-- BOOKMARKs only move the resourceVersion (opts.bookmarks = true delivers
-- them too). w:stop() aborts the open request.
--
-- Metrics: k8s.watch.windows{resource} (requests whose head arrived),
-- k8s.watch.events{resource, type}, k8s.watch.retries{resource, class},
-- k8s.watch.relists{resource}; the initial list and re-lists are timed as
-- k8s.list.<resource>.
local kb = require "kb"
local core = require "kb.core"
local json = require "kb.json"
local metrics = require "kb.metrics"
local log = require "kb.log"
local u = require "kb.k8s.util"

local M = {}

local Watch = {}
Watch.__index = Watch
Watch.__name = "kb.k8s.watch"

function Watch:__tostring()
  return string.format("kb.k8s.watch %s (rv %s, %s)", self.resource, tostring(self.resource_version),
    self.ended and "ended" or "running")
end

local OPTS = {
  namespace = true, all_namespaces = true, label_selector = true, field_selector = true,
  resource_version = true, window = true, initial = true, bookmarks = true, max_retries = true,
}

local RETRY = { connect = true, reset = true, timeout = true, server = true, throttled = true,
  protocol = true, other = true, dns = true }

local function key_of(obj)
  local m = type(obj) == "table" and obj.metadata or nil
  if type(m) ~= "table" then return nil end
  return (m.namespace or "") .. "/" .. tostring(m.name)
end

local function rv_of(obj)
  local m = type(obj) == "table" and obj.metadata or nil
  return type(m) == "table" and m.resourceVersion or nil
end

-- Adds an event to the queue and wakes a reader.
local function push(w, ev)
  w.tail = w.tail + 1
  w.queue[w.tail] = ev
  metrics.counter("k8s.watch.events", { resource = w.resource, type = ev.type }):inc()
  w.ready:release()
end

-- Tracks what the watch has delivered, for re-list differences.
local function remember(w, ev)
  local k = key_of(ev.object)
  if not k then return end
  if ev.type == "DELETED" then w.known[k] = nil else w.known[k] = ev.object end
end

local function list_opts(w)
  return { namespace = w.opts.namespace, all_namespaces = w.opts.all_namespaces,
    label_selector = w.opts.label_selector, field_selector = w.opts.field_selector }
end

-- Lists and returns the items and the list's resourceVersion.
local function list(w)
  local l = w.client:list_all(w.res, list_opts(w))
  return l.items, l.metadata.resourceVersion
end

local function initial(w)
  local items, rv = list(w)
  local now = kb.now()
  for _, obj in ipairs(items) do
    local ev = { type = "ADDED", object = obj, observed = now, initial = true }
    remember(w, ev)
    if w.opts.initial ~= false then push(w, ev) end
  end
  w.resource_version = rv
end

-- After 410 Gone: list again and deliver the difference.
local function relist(w)
  metrics.counter("k8s.watch.relists", { resource = w.resource }):inc()
  local items, rv = list(w)
  local now = kb.now()
  local seen = {}
  for _, obj in ipairs(items) do
    local k = key_of(obj)
    seen[k] = true
    local old = w.known[k]
    local ev
    if not old then
      ev = { type = "ADDED", object = obj, observed = now, relist = true }
    elseif old.metadata.uid ~= obj.metadata.uid then
      push(w, { type = "DELETED", object = old, observed = now, relist = true })
      ev = { type = "ADDED", object = obj, observed = now, relist = true }
    elseif rv_of(old) ~= rv_of(obj) then
      ev = { type = "MODIFIED", object = obj, observed = now, relist = true }
    end
    if ev then push(w, ev) end
    w.known[k] = obj
  end
  for _, k in ipairs(u.sorted_keys(w.known)) do
    if not seen[k] then
      push(w, { type = "DELETED", object = w.known[k], observed = now, relist = true })
      w.known[k] = nil
    end
  end
  w.resource_version = rv
  log.debug("kb.k8s: watch %s re-listed at resourceVersion %s", w.resource, tostring(rv))
end

-- timeoutSeconds for a window of `window` scenario seconds.
local function server_window(window)
  local speed = core.clock_speed()
  if speed == 1 then return math.max(1, math.ceil(window)) end
  return string.format("%.3f", math.max(0.001, window / speed))
end

-- One line of the stream, delivered as it arrives: 1 for an event, 0 for
-- anything else, -1 when a 410 asks for a re-list.
local function on_line(w, line)
  local now = kb.now()
  local ok, ev = pcall(json.decode, line)
  if not ok or type(ev) ~= "table" or type(ev.type) ~= "string" then
    -- A cut stream: resume from the last complete event.
    u.raise("protocol", string.format("kb.k8s: watch %s: a watch event is not JSON: %s",
      w.resource, u.trim(line, 120)))
  end
  if ev.type == "ERROR" then
    local st = type(ev.object) == "table" and ev.object or {}
    if st.code == 410 or st.reason == "Expired" or st.reason == "Gone" then
      w.need_relist = true
      return -1
    end
    u.raise("watch", string.format("kb.k8s: watch %s: the server ended the watch: %s",
      w.resource, tostring(st.message or st.reason or "ERROR event")),
      { status = st.code, reason = st.reason })
  end
  local rv = rv_of(ev.object)
  if rv then w.resource_version = rv end
  if ev.type == "BOOKMARK" then
    if w.opts.bookmarks then push(w, { type = "BOOKMARK", object = ev.object, observed = now }) end
    return 0
  end
  local e = { type = ev.type, object = ev.object, observed = now }
  remember(w, e)
  push(w, e)
  return 1
end

-- One window (or the re-list a 410 asked for): the number of events, -1
-- when it only re-listed or met a 410.
local function window(w)
  local c = w.client
  if w.need_relist then
    relist(w)
    w.need_relist = false
    return -1
  end
  local q = {
    watch = "true", allowWatchBookmarks = "true",
    resourceVersion = w.resource_version,
    timeoutSeconds = server_window(w.window),
    labelSelector = u.selector(w.opts.label_selector, "label_selector"),
    fieldSelector = u.selector(w.opts.field_selector, "field_selector"),
  }
  local ns = not w.opts.all_namespaces and (w.opts.namespace or c.namespace) or nil
  -- no_retry: the watch resumes from its resourceVersion itself (turn()).
  -- <close>: leaving early (410, an error, stop()) aborts the request.
  local s <close> = (c:request({ verb = "watch", resource = w.resource, stream = true,
    no_histogram = true, no_retry = true, path = c:path(w.res, ns), query = q,
    timeout = w.window + c.timeout }))
  metrics.counter("k8s.watch.windows", { resource = w.resource }):inc()
  local got = 0
  for line in s:lines() do
    if line:find("%S") then
      local n = on_line(w, line)
      if n < 0 then return -1 end
      got = got + n
    end
  end
  return got
end

-- One turn of the background task: a window, or the reaction to its failure.
local function turn(w, st)
  local t0 = kb.now()
  local ok, res = pcall(window, w)
  if w.stopped then return end
  if ok then
    st.failures = 0
    -- A server that ends windows at once (no timeoutSeconds support, a
    -- proxy's idle timeout) must not turn this into a busy loop.
    local pause = math.min(w.window / 4, 1)
    if res == 0 and kb.now() - t0 < pause then kb.sleep(pause) end
  elseif kb.is_cancelled(res) then
    error(res, 0)
  elseif u.is_error(res) and res.class == "gone" then
    w.need_relist = true
  elseif u.is_error(res) and RETRY[res.class] and st.failures < w.max_retries then
    st.failures = st.failures + 1
    metrics.counter("k8s.watch.retries", { resource = w.resource, class = res.class }):inc()
    log.debug("kb.k8s: watch %s: %s; resuming from resourceVersion %s", w.resource,
      tostring(res), tostring(w.resource_version))
    -- the server's Retry-After (a 429 / 503), at most a window
    kb.sleep(math.min(w.window, res.retry_after or 0.05 * 2 ^ st.failures))
  else
    error(res, 0)
  end
end

-- The background task: windows until stopped. It never fails itself: an
-- error ends the watch and is raised by next().
local function run(w)
  local st = { failures = 0 }
  while not w.stopped do
    local ok, err = pcall(turn, w, st)
    if not ok then
      if not kb.is_cancelled(err) and not w.stopped then w.err = err end
      break
    end
  end
  if not w.ended then
    w.ended = true
    w.ready:release() -- the end marker
  end
end

--- watch.new(client, resource, opts) -> watcher (use c:watch). opts:
-- namespace, all_namespaces, label_selector, field_selector,
-- resource_version (start there, without the initial list), window,
-- initial (false: no ADDED events for existing objects), bookmarks,
-- max_retries (consecutive failed windows before the watch fails,
-- default 5).
function M.new(c, res, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if not OPTS[k] then error(string.format("kb.k8s: watch: unknown option '%s'", tostring(k)), 3) end
  end
  u.selector(opts.label_selector, "label_selector") -- bad ones fail here, not in the background
  u.selector(opts.field_selector, "field_selector")
  local win = opts.window or c.watch_window
  if type(win) ~= "number" or not (win > 0) then error("kb.k8s: watch: window must be a number > 0", 3) end
  local w = setmetatable({
    client = c, res = res, resource = res.resource, opts = opts, window = win,
    max_retries = opts.max_retries or 5, queue = {}, head = 1, tail = 0, known = {},
    ready = kb.semaphore(0), stopped = false, ended = false,
  }, Watch)
  if opts.resource_version then
    w.resource_version = tostring(opts.resource_version)
  else
    initial(w)
  end
  w.task = kb.spawn(run, w)
  return w
end

--- w:next() -> the next event, or nil once the watch was stopped. Suspends
-- until one arrives; raises the error that ended the watch.
function Watch:next()
  while true do
    if self.head <= self.tail then
      self.ready:acquire() -- an event's unit: never suspends here
      local ev = self.queue[self.head]
      self.queue[self.head] = nil
      self.head = self.head + 1
      return ev
    end
    if self.ended then
      if self.err then error(self.err, 0) end
      return nil
    end
    self.ready:acquire()
    if self.head <= self.tail then
      self.ready:release() -- give the unit back; the loop takes it with the event
    end
  end
end

--- w:events() -> iterator for `for ev in w:events() do ... end`.
function Watch:events()
  return function() return self:next() end
end

--- w:stop(): ends the watch (its pending request is aborted); next()
-- returns the queued events, then nil.
function Watch:stop()
  if self.stopped then return end
  self.stopped = true
  if self.task and not self.task:done() then self.task:cancel() end
  if not self.ended then
    self.ended = true
    self.ready:release()
  end
end

Watch.__close = Watch.stop
Watch.close = Watch.stop

return M
