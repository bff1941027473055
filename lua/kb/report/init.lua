--- kb.report: the self-contained HTML report of a run (result/report.html).
--
--   local report = require "kb.report"
--   local html = report.html(doc, opts)      -- doc: a result document (kb.runner)
--   report.write(exp, doc, opts)             -- writes <exp>/result/report.html
--   report.write("/out/taxi-202501011200-ab12")  -- regenerates from result.json
--
-- During a run a scenario can hand extra data to the report kbrun writes at
-- the end:
--   report.attach { samples = { ["run.duration"] = durations },   -- seconds
--                   outcomes = { Succeeded = 48, Failed = 2 } }
-- or declare it in the scenario table: `report = { ... }` or
-- `report = function(doc) return { ... } end`.
--
-- opts (all optional):
--   samples   = { [metric name or key] = list of values (s) }: true rug marks
--               and KDE for that histogram; a name without a histogram gets a
--               plot of its own (e.g. run.duration)
--   outcomes  = { Succeeded = 48, Failed = 2 } or list of { label, value }:
--               a count plot
--   kde       = false to leave out the density curves (drawn from 10 values)
--   scales    = { [name] = "log" | "linear" } (default: log when max/min >= 30)
--   order     = list of names whose plots come first
--   title     = the page title (default: the scenario name)
--   environment = { name = value }: added to (or, false, replacing) the
--               environment section; the rest comes from doc.environment
--   sections  = list of { title, html }: trusted HTML appended (e.g. svg.lines)
--   scenario  = the scenario table, for its `report` field (write only)
--
-- The page is one file: inline CSS and inline SVG, no script, no network.
--
-- The sections are kb.report.sections' (and "Over time" kb.report.overtime's);
-- this module holds the data handed over during a run, the style sheet, the
-- page around the sections and the writing of report.html.
local svg = require "kb.report.svg"
local json = require "kb.json"
local fs = require "kb.fs"
local S = require "kb.report.sections"

local M = {}

local esc = svg.escape
local format, concat = string.format, table.concat

local function is_null(v) return v == nil or v == json.null end

-- ---- extra data handed over during the run --------------------------------

local attached = nil

local DATA_FILE = "report-data.json"

-- Merges extra data b into a (samples appended, outcomes summed, other
-- fields replaced); returns a.
local function merge_data(a, b)
  for k, v in pairs(b or {}) do
    if k == "samples" then
      a.samples = a.samples or {}
      for name, list in pairs(v) do
        local dst = a.samples[name] or {}
        if type(list) == "number" then list = { list } end
        for _, x in ipairs(list) do dst[#dst + 1] = x end
        a.samples[name] = dst
      end
    elseif k == "outcomes" and type(v) == "table" and #v == 0 then
      a.outcomes = a.outcomes or {}
      for label, n in pairs(v) do a.outcomes[label] = (a.outcomes[label] or 0) + n end
    else
      a[k] = v
    end
  end
  return a
end

local function check_data(data)
  if type(data) ~= "table" then error("kb.report.attach: wants a table, got " .. type(data), 3) end
  for name, list in pairs(data.samples or {}) do
    if type(name) ~= "string" then error("kb.report.attach: samples are keyed by metric name", 3) end
    if type(list) ~= "table" and type(list) ~= "number" then
      error(format("kb.report.attach: samples['%s'] must be a list of numbers", name), 3)
    end
    for i, x in ipairs(type(list) == "table" and list or {}) do
      if type(x) ~= "number" or x ~= x then
        error(format("kb.report.attach: samples['%s'][%d] is not a number", name, i), 3)
      end
    end
  end
  if data.outcomes ~= nil and type(data.outcomes) ~= "table" then
    error("kb.report.attach: outcomes must be a table of label = count", 3)
  end
end

--- Adds data (samples, outcomes, ...) for the report written at the end of
-- this run. Samples are appended and outcomes summed over calls. When the
-- run has an experiment folder the data is also kept in
-- output/report-data.json, so report.write(dir) can regenerate the page.
function M.attach(data)
  check_data(data)
  attached = merge_data(attached or {}, data)
  local kb = package.loaded["kb"]
  local exp = kb and rawget(kb, "exp")
  if exp and exp.output_dir then
    local keep = { samples = attached.samples, outcomes = attached.outcomes }
    fs.write(fs.join(exp.output_dir, DATA_FILE), require("kb.secrets").encode_json(keep) .. "\n") -- docs/security.md
  end
end

--- Forgets attached data (tests).
function M.reset() attached = nil end

-- ---- the page -----------------------------------------------------------------

M.verdict = S.verdict
M.MIN_PLOT = S.MIN_PLOT

local metric_key, anchor, scalar_text = S.metric_key, S.anchor, S.scalar_text
local metrics_of, ordered_histograms, plotted = S.metrics_of, S.ordered_histograms, S.plotted
local header, thresholds_section, histograms_by_name = S.header, S.thresholds_section, S.histograms_by_name
local figures_section, summary_section, plots_section = S.figures_section, S.summary_section, S.plots_section
local params_section, environment_section, result_section = S.params_section, S.environment_section, S.result_section

local CSS = [[
:root{--fg:#1d1d1f;--muted:#666;--line:#e3e3e3;--bg:#f5f6f8;--good:#2e8b57;--bad:#c0392b;--warn:#d68910}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans","Liberation Sans",Arial,sans-serif}
header,main,footer{max-width:1320px;margin:0 auto;padding:0 20px}
header{padding-top:18px}
h1{font-size:22px;margin:0 0 10px}
h2{font-size:17px;margin:0 0 10px}
h3{font-size:14px;margin:16px 0 8px}
nav{margin:10px 0 4px;font-size:13px}
nav a{margin-right:14px;color:#35589a;text-decoration:none}
section{background:#fff;border:1px solid var(--line);border-radius:6px;padding:14px 16px;margin:14px 0}
.facts{display:flex;flex-wrap:wrap;gap:6px 26px;margin:0}
.facts div{min-width:0}
.facts dt{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:var(--muted)}
.facts dd{margin:0;font-weight:500;overflow-wrap:anywhere}
.badge{display:inline-block;padding:1px 9px;border-radius:10px;color:#fff;font-weight:600}
.badge.good{background:var(--good)}.badge.bad{background:var(--bad)}.badge.warn{background:var(--warn)}
.verdict{margin:0 0 12px;padding:8px 14px;border-radius:6px;font-size:16px;font-weight:600;background:#fff;border-left:5px solid #35589a}
.problem{margin-top:12px;border-left:4px solid var(--bad);background:#fdf1f0;padding:8px 12px}
.problem pre{margin:6px 0 0;white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px}
.muted{color:var(--muted)}.bad-text{color:var(--bad);font-weight:600}
table{border-collapse:collapse;font-size:13px}
table.grid th,table.grid td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left}
table.grid thead th{font-size:12px;color:var(--muted);font-weight:600;border-bottom:2px solid var(--line)}
table.num td{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.num td.kind{text-align:left;color:var(--muted)}
table.grid tbody th{font-weight:500}
table.grid a{color:#35589a;text-decoration:none}
tr.fail td{background:#fdecea;color:var(--bad);font-weight:600}
tr.pass td.mark{color:var(--good);font-weight:600}
td.fail{background:#fdecea;color:var(--bad);font-weight:600}
table.kv th{text-align:left;font-weight:500;padding:3px 18px 3px 0;vertical-align:top;color:#333;white-space:nowrap}
table.kv td{padding:3px 0;overflow-wrap:anywhere;vertical-align:top}
table.kv code{font-size:12.5px}
.side{display:flex;flex-wrap:wrap;align-items:flex-start;gap:8px 28px}
.kv2{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:0 28px}.kv2 table.kv{justify-self:start;align-self:start}
details summary{cursor:pointer;list-style-position:outside}details summary h2{display:inline;margin:0}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:14px}
section.extra table.grid{margin:6px 0 10px}section.extra figure{max-width:760px}
figure{margin:0;border:1px solid var(--line);border-radius:4px;overflow:hidden;background:#fff}
figure svg{display:block;width:100%;height:auto}
figcaption{font-size:12px;color:var(--muted);padding:4px 10px}
footer{color:var(--muted);font-size:12px;padding-bottom:24px}
@media print{body{background:#fff}section{break-inside:avoid;border:none}figure{break-inside:avoid}}
]]
--- The reports' style sheet (also kbrun report --history's page, kb.results.history_page).
M.CSS = CSS

--- The report page of a result document, as a string.
function M.html(doc, opts)
  opts = opts or {}
  if type(doc) ~= "table" then error("kb.report.html: wants a result document (table), got " .. type(doc), 2) end
  local metrics = metrics_of(doc)
  local histos, counters = {}, {}
  for _, m in ipairs(metrics) do
    if type(m) == "table" and type(m.name) == "string" then
      if m.kind == "histogram" then histos[#histos + 1] = m
      elseif m.kind == "counter" or m.kind == "gauge" then counters[#counters + 1] = m end
    end
  end
  local by_key = function(a, b) return metric_key(a) < metric_key(b) end
  histos = ordered_histograms(histos, opts.order)
  table.sort(counters, function(a, b)
    local aa, ab = a.name:find("^aux%.") ~= nil, b.name:find("^aux%.") ~= nil
    if aa ~= ab then return ab end
    return by_key(a, b)
  end)
  local plot_ids = {}
  for i, m in ipairs(histos) do
    if plotted(m) then plot_ids[metric_key(m)] = anchor("plot", metric_key(m), i) end
  end
  local plot_list = {}
  for _, m in ipairs(histos) do if plot_ids[metric_key(m)] then plot_list[#plot_list + 1] = m end end

  local head, title = header(doc, opts)
  -- what a reader came for first (thresholds, the scenario's own sections:
  -- a storm's outcomes, calibration, server vs client), the raw dump last
  local body = { thresholds_section(doc, histograms_by_name(metrics)), figures_section(doc) }
  local extra_nav = {}
  for i, s in ipairs(type(opts.sections) == "table" and opts.sections or {}) do
    local id = anchor("section", s.title or "", i)
    body[#body + 1] = format('<section class="extra" id="%s"><h2>%s</h2>%s</section>', id, esc(s.title or ""), s.html or "")
    extra_nav[#extra_nav + 1] = format('<a href="#%s">%s</a>', id, esc(s.title or ("section " .. i)))
  end
  body[#body + 1] = summary_section(histos, counters, plot_ids, doc)
  body[#body + 1] = plots_section(plot_list, opts, doc, plot_ids)
  local plot_keys = {}
  for i, m in ipairs(plot_list) do plot_keys[i] = metric_key(m) end
  body[#body + 1] = require("kb.report.overtime").section(doc, plot_keys) -- "Over time"
  body[#body + 1] = params_section(doc)
  body[#body + 1] = environment_section(doc, opts)
  body[#body + 1] = result_section(doc)

  local nav = {}
  for _, pair in ipairs({ { "thresholds", "Thresholds" }, { "figures", "Figures" }, { "summary", "Summary" }, { "plots", "Plots" }, { "overtime", "Over time" },
    { "parameters", "Parameters" }, { "environment", "Environment" }, { "result", "Result" } }) do
    for _, s in ipairs(body) do
      if s:find('<section id="' .. pair[1] .. '"', 1, true) then
        nav[#nav + 1] = format('<a href="#%s">%s</a>', pair[1], pair[2])
        break
      end
    end
    -- the scenario's sections come right after the thresholds (or first)
    if pair[1] == "figures" then
      for _, a in ipairs(extra_nav) do nav[#nav + 1] = a end
    end
  end
  return concat({
    "<!DOCTYPE html>",
    '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<meta name="generator" content="kbrun">',
    format("<title>%s — kbrun report</title>", esc(title)),
    "<style>" .. CSS .. "</style></head><body>",
    head,
    '<main><nav>' .. concat(nav) .. "</nav>",
    concat(body, "\n"),
    "</main>",
    format('<footer>Generated by kbrun %s from result/result.json of %s. One self-contained file: no scripts, no network.</footer>',
      esc(scalar_text(is_null(doc.kbrun) and "" or doc.kbrun)), esc(scalar_text(doc.experiment_id or "-"))),
    "</body></html>", "",
  }, "\n")
end

-- Options from a scenario's `report` field (table or function(doc)).
local function scenario_options(scenario, doc)
  local r = type(scenario) == "table" and scenario.report or nil
  if type(r) == "function" then r = r(doc) end
  if r ~= nil and type(r) ~= "table" then error("kb.report: the scenario's 'report' must be a table or return one", 0) end
  return r
end

local function read_json(path)
  local ok, text = pcall(fs.read, path)
  if not ok then return nil end
  return json.decode(text, { name = path })
end

-- ---- folders ------------------------------------------------------------------------

-- An experiment folder: result/ (result.json in it, or missing: writing
-- then says so) or output/journal.jsonl (kbrun was killed).
local function is_experiment(dir)
  return fs.exists(fs.join(dir, "result")) == "dir"
    or fs.exists(fs.join(dir, "output", "journal.jsonl")) == "file"
end

local function is_sweep(dir)
  if fs.exists(fs.join(dir, "sweep.csv")) == "file" then return true end
  local j = fs.join(dir, "journal.jsonl")
  if fs.exists(j) ~= "file" then return false end
  local f = io.open(j, "r")
  local first = f and f:read("l")
  if f then f:close() end
  return first ~= nil and first:find('"event":"sweep"', 1, true) ~= nil
end

--- What `kbrun report DIR` rebuilds, as a list of { dir, kind }: kind
-- "experiment" (a folder with result/ or output/journal.jsonl)
-- or "sweep" (a folder with sweep.csv or a sweep's journal.jsonl: its
-- cells first, then the sweep itself). DIR is one of them, or a folder of
-- them (an experiments folder, `-o DIR` of kbrun), looked into one level
-- deep (sweeps inside it included). Raises when DIR holds none.
function M.targets(dir)
  if fs.exists(dir) ~= "dir" then
    error(format("'%s' is not a folder (give an experiment folder, a sweep folder or a folder of experiments)", dir), 0)
  end
  local out = {}
  local function add_sweep(d)
    for _, name in ipairs(fs.list(d)) do
      local c = fs.join(d, name)
      if fs.exists(c) == "dir" and is_experiment(c) then out[#out + 1] = { dir = c, kind = "experiment" } end
    end
    out[#out + 1] = { dir = d, kind = "sweep" }
  end
  if is_experiment(dir) then
    out[1] = { dir = dir, kind = "experiment" }
  elseif is_sweep(dir) then
    add_sweep(dir)
  else
    for _, name in ipairs(fs.list(dir)) do
      local c = fs.join(dir, name)
      if fs.exists(c) == "dir" then
        if is_experiment(c) then out[#out + 1] = { dir = c, kind = "experiment" }
        elseif is_sweep(c) then add_sweep(c) end
      end
    end
  end
  if #out == 0 then
    error(format("'%s' holds no experiment (result/result.json or output/journal.jsonl) and no sweep (sweep.csv); " ..
      "give an experiment folder, a sweep folder or the folder kbrun -o wrote them to", dir), 0)
  end
  return out
end

--- Writes report.html for an experiment and returns its path.
-- target: an experiment (kb.experiment) or its folder (a string); a folder
-- without a result/ subfolder gets report.html directly inside.
-- doc: the result document (default: result/result.json read from disk).
-- The page combines, in increasing precedence: data attached during this
-- run (or output/report-data.json from disk), the scenario's `report`
-- field (opts.scenario), and opts.
function M.write(target, doc, opts)
  opts = opts or {}
  local dir, result_dir, output_dir
  if type(target) == "table" then
    dir, result_dir, output_dir = target.dir, target.result_dir, target.output_dir
  elseif type(target) == "string" then
    dir = target
    if fs.exists(fs.join(dir, "result")) == "dir" then
      result_dir, output_dir = fs.join(dir, "result"), fs.join(dir, "output")
    else
      result_dir = dir
    end
  else
    error("kb.report.write: wants an experiment or a folder, got " .. type(target), 2)
  end
  if doc == nil then
    doc = read_json(fs.join(result_dir, "result.json"))
    if type(doc) ~= "table" then
      error(format("kb.report.write: no result document in '%s'", result_dir), 2)
    end
  end
  local data = {}
  if attached then
    merge_data(data, attached)
  elseif output_dir and fs.exists(fs.join(output_dir, DATA_FILE)) == "file" then
    local saved = read_json(fs.join(output_dir, DATA_FILE))
    if type(saved) == "table" then merge_data(data, saved) end
  end
  local from_scenario = scenario_options(opts.scenario, doc)
  if from_scenario then merge_data(data, from_scenario) end
  for k, v in pairs(opts) do
    if k ~= "scenario" then
      if k == "samples" or k == "outcomes" then merge_data(data, { [k] = v }) else data[k] = v end
    end
  end
  local path = fs.join(result_dir, "report.html")
  require("kb.tmpfiles").clean(result_dir) -- a killed writer's .report.html.kbtmp-*
  fs.write(path, M.html(require("kb.secrets").scrub_value(doc), require("kb.secrets").scrub_value(data))) -- docs/security.md
  return path
end

return M
