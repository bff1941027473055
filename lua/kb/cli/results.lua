--- kb.cli.results: `kbrun history`, `kbrun db import|query` and the
-- results-database side of `kbrun compare --baseline` (docs/results.md).
-- Each command gets {argv, tty} and returns an exit code; usage errors
-- raise {class = "usage", message}.
local fs = require "kb.fs"
local json = require "kb.json"
local csv = require "kb.csv"
local rdb = require "kb.results.db"
local trend = require "kb.results.trend"
local compare = require "kb.results.compare"
local summary = require "kb.report.summary"

local M = {}

local format = string.format

local function usage(fmt, ...)
  error({ class = "usage", message = format(fmt, ...) }, 0)
end

-- Parses argv: options (a map option -> "value" or true) and the rest.
-- spec: option -> "value" | "flag"; aliases: -o -> --out.
local function parse(argv, spec, cmd)
  local opts, rest, i = {}, {}, 1
  while i <= #argv do
    local a = argv[i]
    local name = a == "-o" and "--out" or a
    if spec[name] == "value" then
      i = i + 1
      if argv[i] == nil then usage("%s: %s needs a value", cmd, a) end
      opts[name] = argv[i]
    elseif spec[name] == "flag" then
      opts[name] = true
    elseif a == "--" then
      for j = i + 1, #argv do rest[#rest + 1] = argv[j] end
      break
    elseif a:sub(1, 1) == "-" and #a > 1 then
      usage("%s: unknown option '%s' (%s --help)", cmd, a, cmd)
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return opts, rest
end

--- cli.open(opts [, create]) -> store: the database of --db URL, or of
-- -o DIR (DIR/kbrun.db, default ./experiments), or KBRUN_RESULTS_DB.
function M.open(opts, create)
  local target = rdb.target_for(opts["--out"], opts["--db"])
  if not target then usage("no results database: --db off (or KBRUN_RESULTS_DB=off)") end
  local ok, store = pcall(rdb.open, target, { create = create })
  if not ok then
    if type(store) == "table" and store.code == "missing" then usage("%s", store.message) end
    error(store, 0)
  end
  return store
end

local function seconds(v) return v and summary.duration(v) or "-" end

-- ---- kbrun history -------------------------------------------------------------

M.HISTORY_USAGE = [==[
usage: kbrun history [-o DIR | --db URL] [--scenario NAME] [--since DATE] [--limit N]
                     [--metric NAME[:STAT]] [--tolerance T] [--test mw|ks|none] [--alpha A] [--json]

Lists the experiments recorded in the results database (oldest first), or
with --metric, that metric's trend across them: a sparkline and a table of
its value per experiment, each compared with the one before with kbrun
compare's statistics (a histogram's Mann-Whitney U or Kolmogorov-Smirnov
test on the whole distributions) and marked REGRESSED or improved when it
changed by more than the tolerance and significantly.

  -o, --out DIR     the experiments folder whose kbrun.db to read (default ./experiments)
      --db URL      another database: a SQLite file or postgresql://...
      --scenario S  only experiments of scenario S
      --since DATE  only experiments started at or after DATE (2026-12-01, or a
                    full UTC time 2026-12-01T10:00:00Z)
      --limit N     only the N most recent
      --metric M    a histogram key or name, a counter, or a result field
                    (success_rate), as kbrun compare's --metric; :STAT picks the
                    statistic (p50 p75 p90 p95 p99 p999 p9999 mean min max;
                    default p99)
      --tolerance T how much change is marked (10% or 0.1; default 5%)
      --test T, --alpha A   the significance test and its level (kbrun compare)
      --json        the list or the trend as JSON
  -h, --help        this text

Exit codes: 0 shown; 2 usage error, no database, or a metric no experiment has.]==]

local HISTORY_SPEC = { ["--out"] = "value", ["--db"] = "value", ["--scenario"] = "value",
  ["--since"] = "value", ["--limit"] = "value", ["--metric"] = "value", ["--tolerance"] = "value",
  ["--test"] = "value", ["--alpha"] = "value", ["--json"] = "flag", ["--help"] = "flag", ["-h"] = "flag" }

local function check_since(text)
  if not text then return nil end
  if not (text:match("^%d%d%d%d%-%d%d%-%d%d$") or text:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$")) then
    usage("history: --since wants a date (2026-12-01) or a UTC time (2026-12-01T10:00:00Z), got '%s'", text)
  end
  return text
end

--- cli.history_options(opts) -> the trend/list filter of parsed options
-- (shared with kbrun report --history).
function M.filter_of(opts)
  local limit = opts["--limit"] and math.tointeger(tonumber(opts["--limit"]))
  if opts["--limit"] and (not limit or limit < 1) then usage("--limit wants a positive integer, got '%s'", opts["--limit"]) end
  local f = { scenario = opts["--scenario"], since = check_since(opts["--since"]), limit = limit }
  if opts["--tolerance"] then f.tolerance = compare.parse_tolerance(opts["--tolerance"]) end
  if opts["--test"] then
    f.test = opts["--test"]
    if f.test ~= "mw" and f.test ~= "ks" and f.test ~= "none" then usage("--test wants mw, ks or none, got '%s'", f.test) end
  end
  if opts["--alpha"] then
    f.alpha = tonumber(opts["--alpha"])
    if not f.alpha or f.alpha <= 0 or f.alpha >= 1 then usage("--alpha wants a number between 0 and 1") end
  end
  return f
end

local function value_text(kind, v)
  if kind == "histogram" then return seconds(v) end
  return compare.num_text(v)
end

--- cli.trend_text(t) -> the terminal text of a trend.series result.
function M.trend_text(t, filter)
  local out = {}
  local test = t.kind == "histogram" and (t.test == "none" and "no test" or
    format("%s at alpha %g", t.test == "ks" and "kolmogorov-smirnov" or "mann-whitney", t.alpha)) or "no test (one value each)"
  out[#out + 1] = format("%s %s (%s, %s is better) over %d experiment(s)%s; each vs the one before: %s, tolerance %s",
    t.metric, t.stat, t.kind, t.better, #t.points, filter.scenario and (" of " .. filter.scenario) or "",
    test, compare.pct_text(t.tolerance):gsub("^%+", ""))
  out[#out + 1] = "  " .. trend.sparkline(t.points)
  local rows = {}
  for _, p in ipairs(t.points) do
    rows[#rows + 1] = { p.id, p.started_at or "-", p.status or "-", value_text(t.kind, p.value),
      p.relative and compare.pct_text(p.relative) or "", p.p and format("%.3g", p.p) or "",
      p.mark == "regressed" and "REGRESSED" or (p.mark or "") }
  end
  out[#out + 1] = compare.table_text({ "experiment", "started", "status", t.stat, "change", "p", "" }, rows)
  if t.skipped > 0 then out[#out + 1] = format("(%d experiment(s) without %s not shown)", t.skipped, t.metric) end
  return table.concat(out, "\n") .. "\n"
end

function M.history(args)
  local opts, rest = parse(args.argv, HISTORY_SPEC, "history")
  if opts["--help"] or opts["-h"] then io.stdout:write(M.HISTORY_USAGE, "\n") return 0 end
  if #rest > 0 then usage("history: unexpected argument '%s'\n%s", rest[1], (M.HISTORY_USAGE:match("^[^\n]*"))) end
  local filter = M.filter_of(opts)
  local store = M.open(opts, false)
  if opts["--metric"] then
    local name, stat = trend.parse_metric(opts["--metric"])
    filter.metric, filter.stat = name, stat
    local t = trend.series(store, filter)
    store:close()
    if #t.points == 0 then
      usage("history: no experiment%s has a histogram, counter or result field '%s'",
        filter.scenario and (" of scenario " .. filter.scenario) or "", name)
    end
    io.stdout:write(opts["--json"] and (json.encode(t, { pretty = true }) .. "\n") or M.trend_text(t, filter))
    return 0
  end
  local list = store:experiments(filter)
  store:close()
  if opts["--json"] then
    io.stdout:write(json.encode(list, { pretty = true }), "\n")
    return 0
  end
  local rows = {}
  for _, e in ipairs(list) do
    rows[#rows + 1] = { e.id, e.scenario or "-", e.status or "-", e.verdict or "-", e.started_at or "-",
      seconds(e.duration), tostring(e.runs or 0), e.seed and tostring(e.seed) or "-" }
  end
  io.stdout:write(format("%d experiment(s) in %s\n", #list, store.name))
  if #rows > 0 then
    io.stdout:write(compare.table_text({ "experiment", "scenario", "status", "thresholds", "started",
      "duration", "runs", "seed" }, rows), "\n")
  end
  return 0
end

-- ---- kbrun db ------------------------------------------------------------------

M.DB_USAGE = [==[
usage: kbrun db import [-o DIR | --db URL] FOLDER...
       kbrun db query [-o DIR | --db URL] [--csv | --json] SQL
       kbrun db export [-o DIR | --db URL] sweep NAME [FILE] | report [FILE]

import: records every experiment FOLDER is or holds (an experiment folder, a
sweep's cells, an experiments folder) from its result/result.json and
result/runs.csv, also folders written before the database existed;
importing a folder again replaces its records.
query: runs SQL on the database and prints the rows as a table (or CSV, or
JSON). The schema and example queries: docs/results.md.
export: makes a sweep's sweep.csv, or Kubebench's report.csv, again from
the database (into FILE, or on stdout).

  -o, --out DIR     the experiments folder whose kbrun.db to use (default ./experiments)
      --db URL      another database: a SQLite file or postgresql://...
  -h, --help        this text

Exit codes: 0 done; 1 a folder could not be imported or the query failed;
2 usage error.]==]

local DB_SPEC = { ["--out"] = "value", ["--db"] = "value", ["--csv"] = "flag", ["--json"] = "flag",
  ["--help"] = "flag", ["-h"] = "flag" }

local function cell_text(v)
  if v == nil then return "" end
  if math.type(v) == "float" then return compare.num_text(v) end
  return tostring(v)
end

function M.db(args)
  local sub = args.argv[1]
  if sub == nil or sub == "-h" or sub == "--help" then
    io.stdout:write(M.DB_USAGE, "\n")
    return sub == nil and 2 or 0
  end
  local argv = table.move(args.argv, 2, #args.argv, 1, {})
  local opts, rest = parse(argv, DB_SPEC, "db " .. sub)
  if opts["--help"] or opts["-h"] then io.stdout:write(M.DB_USAGE, "\n") return 0 end
  if sub == "import" then
    if #rest == 0 then usage("db import: which folders? (kbrun db import [-o DIR | --db URL] FOLDER...)") end
    for _, dir in ipairs(rest) do
      if fs.exists(dir) ~= "dir" then usage("db import: '%s' is not a folder", dir) end
    end
    local store = M.open(opts, true)
    local code, n = 0, 0
    for _, dir in ipairs(rest) do
      local list = rdb.import(store, dir)
      if #list == 0 then
        io.stderr:write(format("kbrun: db import: %s holds no experiment folder (no result/result.json)\n", dir))
        code = 1
      end
      for _, r in ipairs(list) do
        if r.error then
          io.stderr:write(format("kbrun: db import: %s: %s\n", r.dir, r.error))
          code = 1
        else
          n = n + 1
          io.stdout:write(format("%s  %s\n", r.id, r.dir))
        end
      end
    end
    io.stderr:write(format("kbrun: %d experiment(s) recorded in %s\n", n, store.name))
    store:close()
    return code
  elseif sub == "query" then
    if #rest ~= 1 then usage("db query: one SQL text, quoted (kbrun db query [--csv|--json] 'SELECT ...')") end
    local store = M.open(opts, false)
    local ok, rows, cols = pcall(store.exec, store, rest[1])
    store:close()
    if not ok then
      io.stderr:write("kbrun: db query: ", type(rows) == "table" and rows.message or tostring(rows), "\n")
      return 1
    end
    if opts["--json"] then
      io.stdout:write(json.encode(rows, { pretty = true }), "\n")
    elseif opts["--csv"] then
      local list = {}
      for i, r in ipairs(rows) do
        local row = { n = #cols }
        for j, c in ipairs(cols) do row[j] = r[c] end
        list[i] = row
      end
      io.stdout:write(csv.encode(list, cols))
    else
      local list = {}
      for i, r in ipairs(rows) do
        local row = {}
        for j, c in ipairs(cols) do row[j] = cell_text(r[c]) end
        list[i] = row
      end
      if #cols > 0 then io.stdout:write(compare.table_text(cols, list), "\n") end
      io.stdout:write(format("(%d row%s)\n", #rows, #rows == 1 and "" or "s"))
    end
    return 0
  elseif sub == "export" then
    local what, name, file
    if rest[1] == "sweep" then what, name, file = "sweep", rest[2], rest[3]
    elseif rest[1] == "report" then what, file = "report", rest[2]
    else usage("db export: sweep NAME [FILE] or report [FILE]") end
    if what == "sweep" and not name then usage("db export sweep: which sweep? (kbrun db export sweep NAME [FILE])") end
    local store = M.open(opts, false)
    local ok, text = pcall(what == "sweep" and M.sweep_csv or M.report_csv, store, name)
    store:close()
    if not ok then error(text, 0) end
    if file then fs.write(file, text) else io.stdout:write(text) end
    return 0
  end
  usage("db: unknown command '%s' (import, query or export)", sub)
end

--- cli.sweep_csv(store, name) -> the text of sweep NAME's sweep.csv, from
-- its cells in the database (kb.sweep.report's columns and order: the
-- sweep's parameters, its metrics first, then the rest sorted).
function M.sweep_csv(store, name)
  local rows = store:exec("SELECT id, cell, rep, seed, status, error, result, sweep_columns FROM experiments "
    .. "WHERE sweep = ? ORDER BY seq", { name })
  if #rows == 0 then usage("db export: no sweep '%s' in %s", name, store.name) end
  local columns = { params = {}, metrics = {} }
  local records = {}
  for _, r in ipairs(rows) do
    if r.sweep_columns then columns = json.decode(r.sweep_columns) end
    -- what the sweep's journal holds as done: finished cells, not interrupted ones
    if r.status == "ok" or r.status == "failed" then
      local params = {}
      for _, p in ipairs(store:exec("SELECT name, value FROM params WHERE experiment_id = ?", { r.id })) do
        params[p.name] = json.decode(p.value)
      end
      local figures = r.result and json.decode(r.result) or {}
      records[#records + 1] = { id = r.cell, ["repeat"] = r.rep, seed = r.seed, status = r.status,
        params = params, metrics = type(figures) == "table" and figures or {}, error = r.error,
        index = tonumber(r.cell:match("^c(%d+)")) or 0, sub = tonumber(r.cell:match("%.s(%d+)$")) }
    end
  end
  local report = require "kb.sweep.report"
  return report.csv_text(report.sorted(records), columns.params, report.metric_names(records, columns.metrics))
end

--- cli.report_csv(store) -> the text of Kubebench's report.csv, from the
-- Kubebench experiments in the database (kb.kubebench's rows and writer),
-- oldest first.
function M.report_csv(store)
  local kubebench, kreport = require "kb.kubebench", require "kb.kubebench.report"
  local dir = fs.tmpdir("kb-report-csv-")
  local path = fs.join(dir, "report.csv")
  local ok, err = pcall(function()
    for _, e in ipairs(store:exec("SELECT result FROM experiments WHERE result IS NOT NULL ORDER BY started_at, seq")) do
      local r = json.decode(e.result)
      if type(r) == "table" and r.job_kind ~= nil and r.experiment_id ~= nil then
        kreport.append(path, kubebench.report_row(r))
      end
    end
  end)
  local text = ok and fs.exists(path) == "file" and fs.read(path) or nil
  fs.remove(dir, { recursive = true })
  if not ok then error(err, 0) end
  if not text then usage("db export report: no Kubebench experiment in %s", store.name) end
  return text
end

-- ---- kbrun report --history --------------------------------------------------------

M.REPORT_HISTORY_USAGE = [==[
usage: kbrun report --history [-o DIR | --db URL] [--scenario NAME] [--since DATE] [--limit N]
                    [--metric NAME[:STAT]]... [--tolerance T] [--test mw|ks|none] [--alpha A] [--html FILE]

Writes a self-contained HTML page of metrics over the experiments of the
results database: one plot per metric (oldest experiment first), the
regressions marked (each experiment against the one before, as kbrun
history --metric judges them), and a table of every value.

  --metric M        a metric as kbrun history's --metric; repeatable (default:
                    the p99 of every histogram of the most recent experiment, at
                    most 12, and success_rate)
  --html FILE       where the page goes (default DIR/history.html; with --db and
                    no -o, ./history.html)
  other options     as kbrun history (kbrun history --help)

Prints the page's path. Exit codes: 0 written; 1 it could not be written; 2
usage error, no database, or no experiment has any of the metrics.]==]

function M.report_history(args)
  local argv, metrics = {}, {}
  local i = 1
  while i <= #args.argv do
    local a = args.argv[i]
    if a == "--metric" then
      if args.argv[i + 1] == nil then usage("report --history: --metric needs a value") end
      metrics[#metrics + 1] = args.argv[i + 1]
      i = i + 1
    elseif a ~= "--history" then
      argv[#argv + 1] = a
    end
    i = i + 1
  end
  local spec = {}
  for k, v in pairs(HISTORY_SPEC) do spec[k] = v end
  spec["--metric"], spec["--json"], spec["--html"] = nil, nil, "value"
  local opts, rest = parse(argv, spec, "report --history")
  if opts["--help"] or opts["-h"] then io.stdout:write(M.REPORT_HISTORY_USAGE, "\n") return 0 end
  if #rest > 0 then usage("report --history: unexpected argument '%s' (the database is -o DIR or --db URL)", rest[1]) end
  local filter = M.filter_of(opts)
  local list = {}
  for _, m in ipairs(metrics) do
    local name, stat = trend.parse_metric(m)
    list[#list + 1] = { metric = name, stat = stat }
  end
  local store = M.open(opts, false)
  local page = require "kb.results.history_page"
  local ok, html, series = pcall(function()
    if #list == 0 then list = page.default_metrics(store, filter) end
    return page.html(store, list, filter, { source = store.name })
  end)
  store:close()
  if not ok then error(html, 0) end
  if #series == 0 then
    local names = {}
    for _, m in ipairs(list) do names[#names + 1] = m.metric end
    usage("report --history: no experiment in %s has %s", store.name,
      #names > 0 and table.concat(names, ", ") or "any metric")
  end
  local path = opts["--html"] or fs.join(opts["--out"] or (opts["--db"] and "." or "experiments"), "history.html")
  fs.write(path, html)
  print(path)
  return 0
end

-- ---- kbrun compare --baseline ------------------------------------------------------

--- cli.baseline_compare(spec, b, opts, compare_opts) -> report: compares
-- experiment B (a folder, a result.json, or an id in the database) with
-- the baseline the database names (store:baseline: last, last:N, an id).
function M.baseline_compare(spec, b, opts, compare_opts)
  local store = M.open(opts, false)
  local ok, report = pcall(function()
    local doc_b, name_b
    if fs.exists(b) then
      local l = compare.load(b)
      if l.kind ~= "experiment" then usage("compare: --baseline compares one experiment; '%s' is a sweep", b) end
      doc_b, name_b = l.doc, b
    else
      doc_b = store:document(b)
      if not doc_b then usage("compare: '%s' is neither a folder nor an experiment in %s", b, store.name) end
      name_b = b .. " (" .. store.name .. ")"
    end
    local scenario = type(doc_b.scenario) == "table" and doc_b.scenario.name or doc_b.sweep
    local id = store:baseline(spec, scenario, doc_b.experiment_id)
    local doc_a = store:document(id)
    return compare.experiments(doc_a, doc_b, format("%s (--baseline %s, %s)", id, spec, store.name), name_b, compare_opts)
  end)
  store:close()
  if not ok then error(report, 0) end
  return report
end

return M
