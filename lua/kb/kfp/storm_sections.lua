--- kb.kfp.storm_sections: the part of kb.kfp.storm_report that gives a
-- storm's report.html its sections (runs, calibration, server- vs
-- client-side figures, errors) and plot order: kb.kfp.storm_report.report
-- is M.report (docs/storm.md, "Outputs").
local json = require "kb.json"
local OUTCOMES = require("kb.kfp.storm_report").OUTCOMES

local M = {}


-- ---- report.html sections ------------------------------------------------------------

local function esc(v) return require("kb.report.svg").escape(tostring(v)) end

-- A table cell: durations with the unit that keeps 1-3 digits (the plots'
-- units: "31.2 min", "140 ms"), other floats to 4 significant digits.
local function cell(v, unit)
  if v == nil or v == json.null then return "-" end
  if type(v) == "number" and unit == "s" then return esc(require("kb.report.svg").format_value(v, "s")) end
  if type(v) == "number" and math.type(v) == "float" then return esc(string.format("%.4g", v)) end
  return esc(v)
end

-- An HTML table: header list and rows of already escaped cells; row.class
-- marks a row (e.g. "fail", shown in red).
local function html_table(header, rows)
  local out = { '<table class="grid">', "<thead><tr>" }
  for _, h in ipairs(header) do out[#out + 1] = "<th>" .. esc(h) .. "</th>" end
  out[#out + 1] = "</tr></thead><tbody>"
  for _, row in ipairs(rows) do
    out[#out + 1] = row.class and ('<tr class="' .. row.class .. '">') or "<tr>"
    for _, c in ipairs(row) do out[#out + 1] = "<td>" .. c .. "</td>" end
    out[#out + 1] = "</tr>"
  end
  out[#out + 1] = "</tbody></table>"
  return table.concat(out)
end

local function runs_section(r)
  if type(r.runs) ~= "table" then return nil end
  local rows = {}
  for _, o in ipairs(OUTCOMES) do
    if (r.outcomes[o] or 0) > 0 then rows[#rows + 1] = { esc(o), cell(r.outcomes[o]) } end
  end
  local states_rows = {}
  for _, st in ipairs(require("kb.kfp.common").sorted_keys(r.states)) do
    states_rows[#states_rows + 1] = { esc(st), cell(r.states[st]) }
  end
  local d, l = r.durations, r.observed_lag
  local html = '<div class="side">' .. html_table({ "outcome", "runs" }, rows)
    .. html_table({ "Last KFP state of each run", "runs" }, states_rows) .. "</div>"
    .. html_table({ "", "count", "min", "p50", "p90", "p99", "max" }, {
      { "run duration (succeeded, finished_at - created_at)", cell(d.count), cell(d.min, "s"),
        cell(d.p50, "s"), cell(d.p90, "s"), cell(d.p99, "s"), cell(d.max, "s") },
      { "observed lag (poll that saw the end - finished_at)", cell(l.count), cell(l.min, "s"),
        cell(l.p50, "s"), cell(l.p90, "s"), cell(l.p99, "s"), cell(l.max, "s") } })
  return { title = "Runs", html = html }
end

local function server_section(r)
  local sm = r.server_metrics
  if sm and sm.source == "prometheus" then return require("kb.kfp.prom_query").report_section(r) end
  if not sm or not sm.available then
    return { title = "Server-side vs client-side", html = "<p class=\"muted\">No server metrics: "
      .. esc(sm and sm.reason or "not scraped") .. "</p>" }
  end
  local rows = {}
  for _, row in ipairs(r.server_vs_client or {}) do
    local c, sv = row.client or {}, row.server or {}
    rows[#rows + 1] = { esc(row.op), cell(c.count), cell(c.p50, "s"), cell(c.p99, "s"),
      cell(c.other_calls), esc(sv.method or "-"), cell(sv.count), cell(sv.mean, "s"),
      cell(sv.p50, "s"), cell(sv.p99, "s"), cell(sv.errors) }
  end
  return { title = "Server-side vs client-side", html = "<p>Client: kbrun's timed calls "
    .. "(round trip). Server: <code>grpc_server_handling_seconds</code> between the scrapes "
    .. "before and after (every call, polls and cleanup included; p50/p99 interpolated in "
    .. "its buckets).</p>" .. html_table({ "op", "client calls", "client p50", "client p99",
      "polls/cleanup calls", "gRPC method", "server calls", "server mean", "server p50 (est.)",
      "server p99 (est.)", "server errors" }, rows) }
end

local function calibration_section(r)
  if type(r.comparison) ~= "table" or #r.comparison == 0 then return nil end
  local rows = {}
  for _, c in ipairs(r.comparison) do
    rows[#rows + 1] = { esc(c.label), cell(c.published, c.unit), cell(c.measured, c.unit),
      c.diff and esc(string.format("%+.1f%%", 100 * c.diff)) or "-",
      c.within and "yes" or "<b>no</b>", class = (not c.within) and "fail" or nil }
  end
  local tol = r.comparison[1].tolerance or 0
  return { title = "Calibration", html = string.format("<p>This run next to the 50-run result "
    .. "published with KFP's benchmark scripts (kubeflow/website, benchmark-examples; figures "
    .. "read off its plots). Within: |measured - published| ≤ %.0f%% of published.</p>", 100 * tol)
    .. html_table({ "figure", "published", "measured", "difference", "within" }, rows) }
end

local function errors_section(r)
  if (r.error_count or 0) == 0 then return nil end
  local rows = {}
  for _, class in ipairs(require("kb.kfp.common").sorted_keys(r.errors)) do
    local e = r.errors[class]
    local ops = {}
    for _, op in ipairs(require("kb.kfp.common").sorted_keys(e.ops)) do
      ops[#ops + 1] = op .. " ×" .. e.ops[op]
    end
    local samples = {}
    for _, m in ipairs(e.samples) do samples[#samples + 1] = "<code>" .. esc(m) .. "</code>" end
    rows[#rows + 1] = { esc(class), cell(e.count), esc(table.concat(ops, ", ")),
      table.concat(samples, "<br>") }
  end
  return { title = "Errors", html = html_table({ "class", "count", "ops", "sample messages" }, rows) }
end

--- Options for kb.report from a result document: the notebook's plot
-- order and the storm's sections (runs, server vs client, calibration,
-- errors). Use as a scenario's `report` field.
function M.report(doc)
  local r = type(doc) == "table" and type(doc.result) == "table" and doc.result or nil
  local opts = { order = { "run.create", "run.duration", "run.get", "run.delete", "run.list",
    "run.observed_lag" } }
  if not r then return opts end
  local sections = {}
  -- what a reader looks for first: how the runs ended, how this run
  -- compares with the published one, server- vs client-side figures
  for _, make in ipairs({ runs_section, calibration_section, server_section, errors_section }) do
    local sec = make(r)
    if sec then sections[#sections + 1] = sec end
  end
  opts.sections = sections
  return opts
end

return M
