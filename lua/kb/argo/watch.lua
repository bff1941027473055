--- kb.argo.watch: following workflows as they change (c:watch of kb.argo):
-- a list first, then windows of argo-server's workflow-events (or a kb.k8s
-- watch on the CRD), resumed from the last resourceVersion.
local kb = require "kb"
local core = require "kb.core"
local json = require "kb.json"
local metrics = require "kb.metrics"
local log = require "kb.log"
local u = require "kb.k8s.util"
local C = require "kb.argo.common"

local WORKFLOWS, esc, check_opts, need_name = C.WORKFLOWS, C.esc, C.check_opts, C.need_name

local W = {}


local Watch = {}
Watch.__index = Watch
Watch.__name = "kb.argo.watch"

function Watch:__tostring()
  return string.format("kb.argo.watch %s (rv %s, %s)", self.ns, tostring(self.resource_version),
    self.stopped and "stopped" or "running")
end

local function key_of(obj)
  return type(obj) == "table" and type(obj.metadata) == "table" and obj.metadata.name or nil
end

local function rv_of(obj)
  return type(obj) == "table" and type(obj.metadata) == "table" and obj.metadata.resourceVersion or nil
end

local function push(w, ty, obj, now, extra)
  local ev = { type = ty, workflow = C.normalise(obj), object = obj, observed = now }
  for k, v in pairs(extra or {}) do ev[k] = v end
  local k = key_of(obj)
  if k then w.known[k] = ty ~= "DELETED" and obj or nil end
  w.tail = w.tail + 1
  w.queue[w.tail] = ev
  metrics.counter("argo.watch.events", { type = ty }):inc()
end

local function raw_list(w)
  local c = w.client
  local query = { ["listOptions.labelSelector"] = w.labels, ["listOptions.fieldSelector"] = w.fields }
  return c:request({ op = "list", path = "/api/v1/workflows/" .. esc(w.ns), query = query })
end

-- After the server lost our resourceVersion: list, deliver the difference.
local function relist(w)
  metrics.counter("argo.watch.relists", {}):inc()
  local doc = raw_list(w)
  local now, seen = kb.now(), {}
  for _, obj in ipairs(doc.items or {}) do
    local k = key_of(obj)
    seen[k] = true
    local old = w.known[k]
    if not old then push(w, "ADDED", obj, now, { relist = true })
    elseif rv_of(old) ~= rv_of(obj) then push(w, "MODIFIED", obj, now, { relist = true }) end
  end
  for _, k in ipairs(u.sorted_keys(w.known)) do
    if not seen[k] then push(w, "DELETED", w.known[k], now, { relist = true }) end
  end
  w.resource_version = doc.metadata and doc.metadata.resourceVersion
end

-- listOptions.timeoutSeconds for a window: against the sped-up simulator
-- the server counts real seconds.
local function server_window(window)
  local speed = core.clock_speed()
  if speed == 1 then return tostring(math.max(1, math.ceil(window))) end
  return string.format("%.3f", math.max(0.001, window / speed))
end

-- Opens a window: a streamed workflow-events request whose lines are
-- read as they arrive.
local function open_window(w)
  local c = w.client
  w.stream = c:request({ op = "watch", stream = true, no_histogram = true,
    path = "/api/v1/workflow-events/" .. esc(w.ns), timeout = w.window + c.timeout,
    query = { ["listOptions.labelSelector"] = w.labels, ["listOptions.fieldSelector"] = w.fields,
      ["listOptions.resourceVersion"] = w.resource_version,
      ["listOptions.timeoutSeconds"] = server_window(w.window) } })
  w.lines, w.lines_state = w.stream:lines()
  metrics.counter("argo.watch.windows", {}):inc()
end

local function close_window(w)
  if w.stream then w.stream:close() end
  w.stream, w.lines, w.lines_state = nil, nil, nil
end

-- One line of the stream: queues its event; true when it re-listed.
local function event_line(w, line)
  line = line:match("^data: (.*)$") or line
  if not line:find("%S") then return false end
  local ok, msg = pcall(json.decode, line)
  if not ok or type(msg) ~= "table" then
    u.raise("protocol", "kb.argo: watch: an event is not JSON: " .. u.trim(line, 120))
  end
  if type(msg.error) == "table" then
    -- grpc OutOfRange / "too old resource version": re-list
    if msg.error.code == 9 or msg.error.code == 11 or tostring(msg.error.message):find("too old") then
      relist(w)
      return true
    end
    u.raise("watch", "kb.argo: watch: argo-server ended the stream: " .. tostring(msg.error.message))
  end
  local r = type(msg.result) == "table" and msg.result or {}
  if type(r.type) == "string" and type(r.object) == "table" then
    w.resource_version = rv_of(r.object) or w.resource_version
    push(w, r.type, r.object, kb.now())
  end
  return false
end

-- Reads the open window (opening one if needed) until an event is queued
-- or the window ends; true when it ended.
local function window(w)
  if not w.stream then open_window(w) end
  while true do
    local line = w.lines(w.lines_state)
    if not line then
      close_window(w)
      return true
    end
    if event_line(w, line) then
      close_window(w)
      return true
    end
    if w.tail >= w.head then return false end
  end
end

local RETRY = { connect = true, reset = true, timeout = true, server = true, throttled = true,
  protocol = true }

-- Waits for at least one queued event (or the end).
local function fill(w)
  if w.k8s_watch then
    local ev = w.k8s_watch:next()
    if not ev then
      w.stopped = true
      return
    end
    push(w, ev.type, ev.object, ev.observed, { initial = ev.initial, relist = ev.relist })
    return
  end
  local t0 = kb.now()
  local ok, err = pcall(window, w) -- err: whether the window ended, when ok
  if ok then
    w.failures = 0
    -- a server that ends windows at once must not turn this into a busy loop
    if err and w.tail < w.head and kb.now() - t0 < w.window / 4 then
      kb.sleep(math.min(w.window / 4, 1))
    end
    return
  end
  close_window(w)
  if kb.is_cancelled(err) or not (u.is_error(err) and RETRY[err.class])
      or w.failures >= w.max_retries then
    error(err, 0)
  else
    w.failures = w.failures + 1
    metrics.counter("argo.watch.retries", { class = err.class }):inc()
    -- the server's Retry-After (a 429 / 503), at most a window
    kb.sleep(math.min(w.window, err.retry_after or 0.05 * 2 ^ w.failures))
  end
end

local WATCH_OPTS = { name = true, namespace = true, label_selector = true, field_selector = true,
  window = true, initial = true, max_retries = true }

--- c:watch{name, namespace, label_selector, field_selector, window,
-- initial, max_retries} -> watcher. Lists first (the current workflows come
-- as ADDED events with initial = true, unless initial = false), then
-- follows changes in windows of `window` scenario seconds (argo-server's
-- workflow-events with listOptions.timeoutSeconds, or a kb.k8s watch on the
-- CRD path), resuming from the last resourceVersion. Events: {type =
-- "ADDED" | "MODIFIED" | "DELETED", workflow (normalised), object (raw),
-- observed, initial, relist}. w:next() (nil once stopped), w:events(),
-- w:stop() (also <close>).
function W.open(self, opts)
  opts = check_opts(opts, WATCH_OPTS, "watch")
  local fields = u.selector(opts.field_selector, "field_selector")
  if opts.name ~= nil then
    need_name(opts.name, "watch: name")
    fields = (fields and fields ~= "" and (fields .. ",") or "") .. "metadata.name=" .. opts.name
  end
  local win = opts.window or self.watch_window
  if type(win) ~= "number" or not (win > 0) then error("kb.argo: watch: window must be a number > 0", 2) end
  local w = setmetatable({ client = self, ns = opts.namespace or self.namespace,
    labels = u.selector(opts.label_selector, "label_selector"), fields = fields, window = win,
    max_retries = opts.max_retries or 5, failures = 0, queue = {}, head = 1, tail = 0, known = {},
    stopped = false }, Watch)
  if self.k8s then
    w.k8s_watch = self.k8s:watch(WORKFLOWS, { namespace = w.ns, label_selector = w.labels,
      field_selector = fields, window = win, initial = opts.initial, max_retries = opts.max_retries })
    return w
  end
  local doc = raw_list(w)
  local now = kb.now()
  for _, obj in ipairs(doc.items or {}) do
    if opts.initial ~= false then push(w, "ADDED", obj, now, { initial = true })
    else w.known[key_of(obj)] = obj end
  end
  w.resource_version = doc.metadata and doc.metadata.resourceVersion
  return w
end

--- w:next() -> the next event, or nil once stopped; raises the error that
-- ended the watch (more than max_retries failed windows in a row).
function Watch:next()
  while self.head > self.tail do
    if self.stopped then return nil end
    fill(self)
  end
  local ev = self.queue[self.head]
  self.queue[self.head] = nil
  self.head = self.head + 1
  return ev
end

--- w:events() -> iterator for `for ev in w:events() do ... end`.
function Watch:events()
  return function() return self:next() end
end

--- w:stop(): ends the watch; queued events are still returned by next().
function Watch:stop()
  self.stopped = true
  close_window(self)
  if self.k8s_watch then self.k8s_watch:stop() end
end

Watch.__close = Watch.stop
Watch.close = Watch.stop

return W
