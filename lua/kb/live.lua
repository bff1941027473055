--- kb.live: one status line redrawn in place on a terminal while a
-- scenario runs: progress (when the scenario publishes it), requests in
-- flight, the p99 of the busiest histogram over the last interval, errors.
--
--   kbrun | runs 12/50 | in flight 8 | run.create p99 134 ms (31/s) | errors 2 (connect 2) | 14 s
--   kbrun | runs 40/600 | rate 2.0/s | running 35 | dropped 3 | in flight 2 | ... (a storm at a rate)
--
-- A storm (kb.kfp.storm, argo_storm, job_storm) adds its current arrival
-- rate (arrivals per second of the scenario clock since the last redraw,
-- storm.arrivals.*), its objects running (storm.in_flight) and the
-- arrivals dropped so far.
-- The runner starts it when stdout is a TTY and -q is not given (never on a
-- pipe); kb.prometheus.observe does that. A scenario publishes progress with
-- live.progress(function() return done, total, "runs" end).
local kb = require "kb"
local core = require "kb.core"
local metrics = require "kb.metrics"

local M = {}

local progress_fn

--- live.progress(fn): fn() -> done, total [, noun] is shown as
-- "noun done/total"; nil removes it.
function M.progress(fn)
  if fn ~= nil and type(fn) ~= "function" then
    error("kb.live.progress: fn must be a function or nil", 2)
  end
  progress_fn = fn
end

--- The q-quantile (0..1) of the observations added between two bucket
-- lists of the same histogram (h:buckets(), {low, high, count} sorted by
-- low): the top of the bucket where the count reaches ceil(q * n), as
-- HdrHistogram reports; nil when nothing was added.
function M.recent_quantile(q, before, after)
  local prev = {}
  for _, b in ipairs(before or {}) do prev[b.low] = b.count end
  local added, n = {}, 0
  for _, b in ipairs(after) do
    local d = b.count - (prev[b.low] or 0)
    if d > 0 then
      added[#added + 1] = { high = b.high, count = d }
      n = n + d
    end
  end
  if n == 0 then return nil end
  local rank, seen = math.max(1, math.ceil(q * n)), 0
  for _, b in ipairs(added) do
    seen = seen + b.count
    if seen >= rank then return b.high end
  end
  return added[#added].high
end

local function duration(v)
  if v < 1e-3 then return string.format("%.0f us", v * 1e6) end
  if v < 1 then return string.format("%.0f ms", v * 1000) end
  return string.format("%.2f s", v)
end

--- The status line of a state {progress = {done, total, noun}, load =
-- {rate, running, dropped}, in_flight, busiest = {name, p99, rate},
-- errors = {[class] = n}, elapsed}, cut to `width` columns.
function M.line(st, width)
  local parts = { "kbrun" }
  local p = st.progress
  if p and p.total then
    parts[#parts + 1] = string.format("%s %d/%d", p.noun or "done", p.done or 0, p.total)
  end
  local l = st.load
  if l then
    if l.rate then parts[#parts + 1] = string.format("rate %.1f/s", l.rate) end
    if l.running then parts[#parts + 1] = string.format("running %d", l.running) end
    if l.dropped then parts[#parts + 1] = string.format("dropped %d", l.dropped) end
  end
  parts[#parts + 1] = string.format("in flight %d", st.in_flight or 0)
  local b = st.busiest
  if b then
    parts[#parts + 1] = string.format("%s p99 %s (%.0f/s)", b.name, b.p99 and duration(b.p99) or "-",
      b.rate or 0)
  end
  local classes, total = {}, 0
  for class, n in pairs(st.errors or {}) do
    if n > 0 then
      classes[#classes + 1] = class
      total = total + n
    end
  end
  table.sort(classes, function(x, y) return st.errors[x] > st.errors[y] end)
  local err = string.format("errors %d", total)
  if total > 0 then
    local shown = {}
    for i = 1, math.min(#classes, 3) do shown[i] = classes[i] .. " " .. st.errors[classes[i]] end
    err = err .. " (" .. table.concat(shown, ", ") .. ")"
  end
  parts[#parts + 1] = err
  parts[#parts + 1] = string.format("%.0f s", st.elapsed or 0)
  local text = table.concat(parts, " | ")
  width = width or 80
  if #text > width - 1 then text = text:sub(1, width - 2) .. "~" end
  return text
end

local Live = {}
Live.__index = Live

-- The histogram whose count grew most since the last tick, with its p99
-- over that interval (bucket lists are kept only for the ones that grew).
function Live:busiest(dt)
  local best, best_d
  for key, h, e in metrics.each("histogram") do
    local n = h:count()
    local d = n - (self.counts[key] or 0)
    self.counts[key] = n
    if d > 0 then
      local before = self.buckets[key]
      local after = h:buckets()
      self.buckets[key] = after
      if not best_d or d > best_d then
        best_d = d
        best = { name = e.name, p99 = M.recent_quantile(0.99, before, after),
          rate = dt > 0 and d / dt or 0 }
      end
    end
  end
  return best or self.last_busiest
end

local function value_of(name)
  local m = metrics.get(name)
  return m and m:value() or nil
end

-- A storm's figures (storm.* metrics): the arrival rate since the last
-- tick on the scenario clock, running, dropped; nil when there is no storm.
function Live:load()
  local started, dropped = value_of("storm.arrivals.started"), value_of("storm.arrivals.dropped")
  local running = value_of("storm.in_flight")
  if not (started or dropped or running) then return nil end
  local arrivals, now = (started or 0) + (dropped or 0), kb.now()
  local rate
  if started or dropped then
    local prev = self.arrivals
    if prev and now > prev.t then rate = (arrivals - prev.n) / (now - prev.t) else rate = self.rate end
    if not prev or now > prev.t then self.arrivals = { n = arrivals, t = now } end
    self.rate = rate
  end
  return { rate = rate, running = running, dropped = dropped }
end

--- The current state (see M.line).
function Live:state()
  local now = kb.time()
  local st = { elapsed = now - self.t0, errors = require("kb.prometheus").errors_by_class() }
  local ok, n = pcall(function() return kb.http.active() end)
  st.in_flight = ok and n or 0
  if progress_fn then
    local okp, done, total, noun = pcall(progress_fn)
    if okp and total then st.progress = { done = done, total = total, noun = noun } end
  end
  st.load = self:load()
  st.busiest = self:busiest(now - self.last)
  self.last_busiest, self.last = st.busiest, now
  return st
end

function Live:draw()
  local text = M.line(self:state(), self.width)
  -- the cursor goes back to column 0, so a log line printed meanwhile
  -- overwrites the status rather than trailing it
  self.out:write("\r\27[K", text, "\r")
  self.out:flush()
  self.drawn = true
end

local function terminal_width()
  local w = tonumber(os.getenv("COLUMNS") or "")
  if w then return w end
  local p = io.popen("stty size < /dev/tty 2>/dev/null")
  local line = p and p:read("l")
  if p then p:close() end
  return tonumber(line and line:match("%d+%s+(%d+)") or "") or 80
end

--- live.start{interval = 0.5, out = io.stdout, width = terminal columns}
-- -> handle with :stop() (clears the line). interval is real seconds.
function M.start(opts)
  opts = opts or {}
  local self = setmetatable({ interval = opts.interval or 0.5, out = opts.out or io.stdout,
    width = opts.width or terminal_width(), t0 = kb.time(), last = kb.time(), counts = {},
    buckets = {} }, Live)
  self.task = kb.spawn(function()
    while true do
      -- the scenario clock may be virtual: sleep real seconds
      core.sleep_real(self.interval)
      local ok, err = pcall(self.draw, self)
      if not ok and kb.is_cancelled(err) then return end
    end
  end)
  M.current = self
  return self
end

--- Stops redrawing and clears the line. Idempotent.
function Live:stop()
  if self.task then
    self.task:cancel()
    self.task = nil
  end
  if self.drawn then
    self.out:write("\r\27[K")
    self.out:flush()
    self.drawn = false
  end
  if M.current == self then M.current = nil end
end

--- True while a status line is shown (another progress line should then
-- stay quiet).
function M.running() return M.current ~= nil end

return M
