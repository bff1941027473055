--- kb.report.summary: the table kbrun prints at the end of a run.
local M = {}

local function color(on, code, text)
  if not on then return text end
  return string.format("\27[%sm%s\27[0m", code, text)
end

--- Formats a duration in seconds with a unit that keeps 3-4 digits.
function M.duration(s)
  if s == nil then return "-" end
  if s < 1e-3 then return string.format("%.0f us", s * 1e6) end
  if s < 1 then return string.format("%.2f ms", s * 1e3) end
  if s < 120 then return string.format("%.3f s", s) end
  return string.format("%.1f min", s / 60)
end

local function label_text(labels)
  local keys = {}
  for k in pairs(labels or {}) do keys[#keys + 1] = k end
  if #keys == 0 then return "" end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(labels[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end

local function pad(s, n)
  s = tostring(s)
  return s .. string.rep(" ", math.max(0, n - #s))
end

local function lpad(s, n)
  s = tostring(s)
  return string.rep(" ", math.max(0, n - #s)) .. s
end

-- Rows in the order of the scenario's steps: `order` maps a metric's key
-- to when the run first recorded it (kb.metrics.order()); an `.attempt`
-- row follows its call; the side calls (`aux.*`: cleanup, metrics
-- scrapes) go after the scenario's own operations; metrics the order does
-- not know (a merged or rebuilt result) after the known ones, by name.
local function sorter(order)
  order = order or {}
  local function rank(r)
    local key = r.op and (r.op .. r.labels) or r.key
    local n = order[key] or order[r.key]
    return n and (n + (r.op and 0.5 or 0)) or math.huge
  end
  return function(a, b)
    local aux_a, aux_b = a.name:find("^aux%.") ~= nil, b.name:find("^aux%.") ~= nil
    if aux_a ~= aux_b then return aux_b end
    local ra, rb = rank(a), rank(b)
    if ra ~= rb then return ra < rb end
    if a.name ~= b.name then return a.name < b.name end
    return a.labels < b.labels
  end
end

--- Lines of the histogram table. An `<op>.attempt` histogram is shown only
-- where it differs from `<op>`'s (retries happened): without retries each
-- call is one attempt and the two are the same samples. order: see
-- sorter above (default: names in key order).
function M.histogram_lines(snapshot, order)
  local lines = {}
  local rows, by_key = {}, {}
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.kind == "histogram" and m.summary and m.summary.count > 0 then
      local key = m.name .. label_text(m.labels)
      by_key[key] = m.summary
      rows[#rows + 1] = { key, m.summary, name = m.name, op = m.name:match("^(.*)%.attempt$"),
        labels = label_text(m.labels), key = m.key or key }
    end
  end
  local kept = {}
  for _, r in ipairs(rows) do
    local call = r.op and by_key[r.op .. r.labels]
    if not (call and call.count == r[2].count and call.max == r[2].max) then kept[#kept + 1] = r end
  end
  rows = kept
  if #rows == 0 then return lines end
  table.sort(rows, sorter(order))
  local w = 10
  for _, r in ipairs(rows) do w = math.max(w, #r[1]) end
  lines[1] = pad("histogram", w) .. lpad("count", 9) .. lpad("p50", 11) .. lpad("p90", 11)
    .. lpad("p99", 11) .. lpad("max", 11)
  for _, r in ipairs(rows) do
    local s = r[2]
    lines[#lines + 1] = pad(r[1], w) .. lpad(s.count, 9) .. lpad(M.duration(s.p50), 11)
      .. lpad(M.duration(s.p90), 11) .. lpad(M.duration(s.p99), 11) .. lpad(M.duration(s.max), 11)
  end
  return lines
end

--- Lines of the counter/gauge table, in the histograms' order.
function M.counter_lines(snapshot, order)
  local rows = {}
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.kind == "counter" or m.kind == "gauge" then
      rows[#rows + 1] = { m.name .. label_text(m.labels), m.value, name = m.name, labels = label_text(m.labels),
        key = m.key or (m.name .. label_text(m.labels)) }
    end
  end
  table.sort(rows, sorter(order))
  local lines = {}
  for _, r in ipairs(rows) do lines[#lines + 1] = pad(r[1], 40) .. " " .. tostring(r[2]) end
  return lines
end

-- The first line: "<id>: passed in 12.4 min (virtual clock, events)" or
-- "... (virtual clock, x600)".
local function verdict_line(doc, tty)
  local status = doc.status == "passed" and color(tty, "32", "passed") or color(tty, "31", tostring(doc.status))
  local clock = type(doc.clock) == "table" and doc.clock or { kind = "real", speed = 1 }
  return string.format("%s: %s in %s (%s clock%s)", doc.experiment_id, status,
    M.duration(doc.duration), clock.kind,
    clock.mode == "events" and ", events" or
    (type(clock.speed) == "number" and clock.speed ~= 1) and string.format(", x%g", clock.speed) or "")
end

--- A scenario's one-line conclusion (result.verdict, e.g. kfp_probe's
-- "the server broke at 64 concurrent runs: ..."), or nil.
function M.verdict(doc)
  local r = type(doc) == "table" and doc.result
  local v = type(r) == "table" and r.verdict
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

--- Lines of the threshold verdicts ("ok   op p99 950 ms <= 1 s",
-- "FAIL api.errors 3 <= 0"), every one or (failed_only) the failed ones.
function M.threshold_lines(doc, opts)
  opts = opts or {}
  local thresholds = require "kb.thresholds"
  local lines = {}
  for _, t in ipairs(doc.thresholds or {}) do
    if not (opts.failed_only and t.passed) then
      local mark = t.passed and color(opts.tty, "32", "ok  ") or color(opts.tty, "31", "FAIL")
      lines[#lines + 1] = mark .. " " .. thresholds.describe(t)
    end
  end
  return lines
end

local function use_color(opts)
  return opts.tty and os.getenv("TERM") ~= "dumb" and os.getenv("NO_COLOR") == nil
end

--- Prints the summary of a result document (see kb.runner) to stdout:
-- the status line, the scenario's verdict (M.verdict) under it, the
-- histograms and counters in the order the run first recorded them
-- (opts.order, default kb.metrics.order()), the thresholds.
function M.print(doc, exp, opts)
  opts = opts or {}
  local tty = use_color(opts)
  local out = {}
  out[#out + 1] = "\n" .. verdict_line(doc, tty)
  local verdict = M.verdict(doc)
  if verdict then out[#out + 1] = "  " .. color(tty, "1", verdict) end
  local order = opts.order or require("kb.metrics").order()
  for _, line in ipairs(M.histogram_lines(doc.metrics, order)) do out[#out + 1] = "  " .. line end
  local counters = M.counter_lines(doc.metrics, order)
  if #counters > 0 then
    out[#out + 1] = ""
    for _, line in ipairs(counters) do out[#out + 1] = "  " .. line end
  end
  local checks = M.threshold_lines(doc, { tty = tty })
  if #checks > 0 then
    out[#out + 1] = ""
    for _, line in ipairs(checks) do out[#out + 1] = "  " .. line end
  end
  if exp then out[#out + 1] = "  results: " .. exp.result_dir end
  io.stdout:write(require("kb.secrets").scrub(table.concat(out, "\n")), "\n") -- docs/security.md
end

--- What -q still prints: the verdict line and every failed threshold.
function M.print_quiet(doc, opts)
  opts = opts or {}
  local tty = use_color(opts)
  local out = { verdict_line(doc, tty) }
  local verdict = M.verdict(doc)
  if verdict then out[#out + 1] = "  " .. verdict end
  for _, line in ipairs(M.threshold_lines(doc, { tty = tty, failed_only = true })) do
    out[#out + 1] = "  " .. line
  end
  io.stdout:write(require("kb.secrets").scrub(table.concat(out, "\n")), "\n") -- docs/security.md
end

return M
