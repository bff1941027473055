--- kb.kfp.storm_probe: where does a KFP server break? The arithmetic of
-- scenarios/kfp_probe.lua: the ramp of concurrency levels (mode =
-- "concurrency", closed) or of arrival rates (mode = "rate", the open
-- model: runs created at each step's rate however the server copes), the
-- figures of one step from the calls a storm session kept, the verdict
-- against the limits (in rate mode also: the server stopped keeping up,
-- achieved rate below min_achieved of the offered one: the knee), and the
-- report's ramp section.
--
--   local probe = require "kb.kfp.storm_probe"
--   for _, level in ipairs(probe.ramp(p)) do
--     local mark = #s.calls
--     ... create `level` runs, poll them, delete them ...
--     local step = probe.step(level, s.calls, mark, p)
--     if step.broke then break end
--   end
--   result.probe = probe.summary(steps, p)
local hist = require "kb.hist"
local json = require "kb.json"
local svg = require "kb.report.svg"

local M = {}

--- The parameters of a probe and their defaults (besides the storm's).
M.DEFAULTS = {
  start_concurrency = 8,        -- runs (and requests in flight) of the first step
  factor = 2,                   -- each step multiplies it
  max_concurrency = 1024,       -- the last step at most
  polls_per_step = 3,           -- status polls of each step's runs
  max_error_rate = 0.05,        -- a step with more failed calls breaks the server
  max_p99 = 5.0,                -- ... or with a slower p99 on an op (seconds)
  mode = "concurrency",         -- ramp concurrent runs, or "rate": arrival rates (the open model)
  start_rate = 1.0,             -- mode=rate: runs per second of the first step (times factor each step)
  max_rate = 64.0,              -- mode=rate: the last step's rate at most
  step_duration = 60.0,         -- mode=rate: seconds of arrivals per step
  min_achieved = 0.9,           -- mode=rate: a step achieving less of its offered rate is the knee
}

local function refuse(fmt, ...) require("kb.params").refuse("kfp_probe: " .. fmt, ...) end

--- The arrival rates of mode = "rate": start_rate, start_rate*factor, ...
-- up to max_rate (bad values refused, exit 2).
function M.rate_ramp(p)
  if p.mode ~= "rate" and p.mode ~= "concurrency" then
    refuse("mode must be concurrency or rate, got %s", tostring(p.mode))
  end
  for _, k in ipairs({ "start_rate", "max_rate", "step_duration" }) do
    if type(p[k]) ~= "number" or not (p[k] > 0) then refuse("%s must be a number > 0, got %s", k, tostring(p[k])) end
  end
  if type(p.factor) ~= "number" or p.factor <= 1 then refuse("factor must be a number > 1, got %s", tostring(p.factor)) end
  if type(p.min_achieved) ~= "number" or p.min_achieved <= 0 or p.min_achieved > 1 then
    refuse("min_achieved must be a number in (0, 1], got %s", tostring(p.min_achieved))
  end
  local rates, r = {}, p.start_rate
  while r <= p.max_rate * (1 + 1e-9) do
    rates[#rates + 1] = r
    r = r * p.factor
  end
  return rates
end

--- The concurrency levels: start, start*factor, ... up to max.
function M.ramp(p)
  local levels, n = {}, p.start_concurrency
  if math.type(n) ~= "integer" or n < 1 then
    error("kb.kfp.storm: start_concurrency must be an integer >= 1, got " .. tostring(n), 0)
  end
  if type(p.factor) ~= "number" or p.factor <= 1 then
    error("kb.kfp.storm: factor must be a number > 1, got " .. tostring(p.factor), 0)
  end
  while n <= p.max_concurrency do
    levels[#levels + 1] = n
    n = math.max(n + 1, math.floor(n * p.factor + 0.5))
  end
  return levels
end

local OPS = { "run.create", "poll.run.get", "run.list", "run.terminate", "run.delete" }

-- Latency percentiles (successful calls) and error counts per op.
local function per_op(calls, mark)
  local ops = {}
  for i = mark + 1, #calls do
    local c = calls[i]
    local o = ops[c.op]
    if not o then
      o = { h = hist.new(), calls = 0, errors = 0 }
      ops[c.op] = o
    end
    o.calls = o.calls + 1
    if c.class then o.errors = o.errors + 1 else o.h:record(c.latency) end
  end
  return ops
end

-- Error classes of the step's calls with a sample message each.
local function step_errors(calls, mark)
  local out = {}
  for i = mark + 1, #calls do
    local c = calls[i]
    if c.class then
      local e = out[c.class] or { count = 0, sample = c.error }
      e.count = e.count + 1
      out[c.class] = e
    end
  end
  return out
end

--- The figures of one step from the calls after `mark`: level, calls,
-- errors, error_rate, ops {[op] = {calls, errors, p50, p99}}, worst_p99
-- (and its op), error classes, and broke/reason against the limits.
function M.step(level, calls, mark, p)
  local ops, total, failed = {}, 0, 0
  local worst, worst_op = 0, nil
  for op, o in pairs(per_op(calls, mark)) do
    local s = o.h:summary()
    ops[op] = { calls = o.calls, errors = o.errors, p50 = s.p50, p99 = s.p99 }
    total, failed = total + o.calls, failed + o.errors
    if s.p99 and s.p99 > worst then worst, worst_op = s.p99, op end
  end
  local step = { level = level, calls = total, errors = failed,
    error_rate = total > 0 and failed / total or 0, ops = ops, worst_p99 = worst,
    worst_op = worst_op, error_classes = step_errors(calls, mark) }
  if step.error_rate > p.max_error_rate then
    step.broke = true
    step.reason = string.format("error rate %.1f%% > %.1f%%", 100 * step.error_rate,
      100 * p.max_error_rate)
  elseif worst > p.max_p99 then
    step.broke = true
    step.reason = string.format("%s p99 %.3f s > %.3f s", worst_op, worst, p.max_p99)
  end
  return step
end

--- The figures of one step of the rate ramp: M.step's (level = the
-- rate) plus offered_rate, achieved_rate, arrivals, dropped, created,
-- success (created / arrivals), from kb.kfp.storm_arrivals.run_step's
-- figures `fig`; broke first when the server did not keep up (achieved
-- below min_achieved of offered).
function M.rate_step(rate, calls, mark, p, fig)
  local st = M.step(rate, calls, mark, p)
  st.offered_rate, st.achieved_rate = fig.offered_rate, fig.achieved_rate
  st.arrivals, st.dropped, st.created = fig.arrivals, fig.dropped, fig.created
  st.success = fig.arrivals > 0 and fig.created / fig.arrivals or 0
  if fig.achieved_rate < p.min_achieved * fig.offered_rate then
    st.broke = true
    st.reason = string.format("achieved %.3g runs/s of %.3g offered (%d dropped; %s)", fig.achieved_rate,
      fig.offered_rate, fig.dropped, st.reason or "no other limit crossed")
  end
  return st
end

--- Refuses a sharded probe (kbrun --shard I/N) as a usage error, before
-- anything is created: a level is the load on one server at one time, and
-- shards ramp independently (unsynchronised, each stopping on its own), so
-- N shards' steps never add up to one level's load.
function M.refuse_shards()
  local _, shards = require("kb.shard").current()
  if shards > 1 then
    error(setmetatable({ class = "usage", discard = true, message = string.format(
      "kfp_probe ramps one load on one server and cannot be split into %d shards (each shard would "
      .. "ramp on its own, unsynchronised, and their levels would not add up); run it without --shard "
      .. "(docs/scale-out.md)", shards) }, { __tostring = function(e) return e.message end }), 0)
  end
end

--- The probe's verdict: steps, broke_at (the level, or nil), reason,
-- last_good (the highest level below the limits), limits; interrupted
-- (opts.interrupted) when the ramp was cut short (Ctrl-C, an error).
function M.summary(steps, p, opts)
  local rate = p.mode == "rate"
  local out = { steps = json.array({}), limits = { max_error_rate = p.max_error_rate,
    max_p99 = p.max_p99, min_achieved = rate and p.min_achieved or nil },
    interrupted = opts and opts.interrupted or nil, mode = rate and "rate" or "concurrency" }
  for _, st in ipairs(steps) do
    out.steps[#out.steps + 1] = st
    if st.broke then
      out.broke_at, out.reason = st.level, st.reason
    else
      out.last_good = st.level
    end
  end
  if not out.broke_at and rate then
    out.reason = out.last_good and string.format("kept up with %g runs/s%s", out.last_good,
      out.interrupted and " before the probe was interrupted" or " (the ramp's end)")
      or (out.interrupted and "interrupted before a step was measured" or "kept up with no step")
  elseif not out.broke_at then
    if out.interrupted then
      out.reason = out.last_good and string.format("held up to %d concurrent runs before the probe "
        .. "was interrupted", out.last_good) or "interrupted before a step was measured"
    else
      out.reason = string.format("held up to %d concurrent runs (the ramp's end)", out.last_good or 0)
    end
  end
  return out
end

--- The one-line conclusion of a probe summary (result.verdict: the
-- headline of kbrun's summary and of the report): "the server broke at 64
-- concurrent runs: run.create p99 40.000 s > 35.000 s (last level within
-- the limits: 32)", or "the server held up to 1024 concurrent runs (the
-- ramp's end)".
function M.verdict(pr)
  if pr.mode == "rate" then
    if pr.broke_at then
      return string.format("the server stopped keeping up at %g runs/s: %s (last rate within the limits: %s)",
        pr.broke_at, pr.reason, pr.last_good and (string.format("%g", pr.last_good) .. " runs/s") or "none")
    end
    if not pr.last_good and pr.interrupted then return "the probe was " .. pr.reason end
    return "the server " .. pr.reason
  end
  if pr.broke_at then
    return string.format("the server broke at %d concurrent runs: %s (last level within the limits: %s)",
      pr.broke_at, pr.reason, pr.last_good and tostring(pr.last_good) or "none")
  end
  if not pr.last_good and pr.interrupted then return "the probe was " .. pr.reason end
  return "the server " .. pr.reason
end

-- ---- report -------------------------------------------------------------------------

local function esc(v) return svg.escape(tostring(v)) end

local function fmt_s(v) return v and svg.format_value(v, "s") or "-" end

local function ramp_table(pr)
  local rows = { '<table class="grid"><thead><tr><th>concurrent runs</th><th>calls</th>'
    .. "<th>errors</th><th>error rate</th><th>create p99</th><th>poll GET p99</th>"
    .. "<th>list p99</th><th>worst p99</th><th>verdict</th></tr></thead><tbody>" }
  for _, st in ipairs(pr.steps) do
    local op = function(name) return fmt_s(st.ops[name] and st.ops[name].p99) end
    rows[#rows + 1] = string.format('<tr%s><td>%d</td><td>%d</td><td>%d</td><td>%.1f%%</td>'
      .. "<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
      st.broke and ' class="fail"' or "", st.level, st.calls, st.errors, 100 * st.error_rate,
      esc(op("run.create")), esc(op("poll.run.get")), esc(op("run.list")),
      esc(fmt_s(st.worst_p99)), esc(st.broke and st.reason or "ok"))
  end
  rows[#rows + 1] = "</tbody></table>"
  return table.concat(rows)
end

-- mode=rate: offered vs achieved, latency and success per step.
local function rate_table(pr)
  local rows = { '<table class="grid"><thead><tr><th>offered runs/s</th><th>achieved runs/s</th>'
    .. "<th>arrivals</th><th>dropped</th><th>created</th><th>success</th><th>errors</th>"
    .. "<th>create p50</th><th>create p99</th><th>poll GET p99</th><th>verdict</th></tr></thead><tbody>" }
  for _, st in ipairs(pr.steps) do
    local op = function(name, q) return fmt_s(st.ops[name] and st.ops[name][q]) end
    rows[#rows + 1] = string.format('<tr%s><td>%.3g</td><td>%.3g</td><td>%d</td><td>%d</td><td>%d</td>'
      .. "<td>%.1f%%</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
      st.broke and ' class="fail"' or "", st.offered_rate or 0, st.achieved_rate or 0, st.arrivals or 0,
      st.dropped or 0, st.created or 0, 100 * (st.success or 0), st.errors, esc(op("run.create", "p50")),
      esc(op("run.create", "p99")), esc(op("poll.run.get", "p99")), esc(st.broke and st.reason or "ok"))
  end
  rows[#rows + 1] = "</tbody></table>"
  return table.concat(rows)
end

local function rate_plot(pr)
  local offered, achieved = {}, {}
  for _, st in ipairs(pr.steps) do
    if st.offered_rate and st.achieved_rate then
      offered[#offered + 1] = { x = st.offered_rate, y = st.offered_rate }
      achieved[#achieved + 1] = { x = st.offered_rate, y = st.achieved_rate }
    end
  end
  if #achieved == 0 then return "" end
  return svg.lines{ series = { { name = "achieved", points = achieved },
    { name = "offered (keeping up)", points = offered } }, title = "achieved vs offered rate per step",
    x = { scale = "log", label = "offered runs/s" }, y = { label = "runs/s" } }
end

local function ramp_plot(pr)
  local series = {}
  for _, op in ipairs(OPS) do
    local pts = {}
    for _, st in ipairs(pr.steps) do
      local o = st.ops[op]
      if o and o.p99 then pts[#pts + 1] = { x = st.level, y = o.p99 } end
    end
    if #pts > 0 then series[#series + 1] = { name = op .. " p99", points = pts } end
  end
  if #series == 0 then return "" end
  return svg.lines{ series = series, title = "p99 latency per step",
    x = { scale = "log", label = pr.mode == "rate" and "offered runs/s" or "concurrent runs" },
    y = { unit = "s", label = "p99" } }
end

--- kb.report options: the storm's sections plus the ramp (table and p99
-- per level). Use as the probe scenario's `report` field.
function M.report(doc)
  local opts = require("kb.kfp.storm_report").report(doc)
  local r = type(doc) == "table" and type(doc.result) == "table" and doc.result or nil
  local pr = r and r.probe
  if type(pr) ~= "table" or type(pr.steps) ~= "table" then return opts end
  opts.sections = opts.sections or {}
  if pr.mode == "rate" then
    local verdict = pr.broke_at
        and string.format("<p><b>The server stopped keeping up at %s runs/s</b>: %s. Last rate within "
          .. "the limits: %s.</p>", esc(string.format("%g", pr.broke_at)), esc(pr.reason),
          esc(pr.last_good and string.format("%g runs/s", pr.last_good) or "none"))
        or "<p>The server " .. esc(pr.reason) .. ".</p>"
    table.insert(opts.sections, 1, { title = "Ramp", html = verdict .. rate_table(pr)
      .. "<figure>" .. rate_plot(pr) .. "</figure><figure>" .. ramp_plot(pr) .. "</figure>" })
    return opts
  end
  local verdict = pr.broke_at
      and string.format("<p><b>The server broke at %d concurrent runs</b>: %s. Last level within "
        .. "the limits: %s.</p>", pr.broke_at, esc(pr.reason), esc(pr.last_good or "none"))
      or "<p>" .. esc(pr.reason) .. ".</p>"
  table.insert(opts.sections, 1, { title = "Ramp", html = verdict .. ramp_table(pr)
    .. '<figure>' .. ramp_plot(pr) .. "</figure>" })
  return opts
end

return M
