-- Checks what a storm scenario left in its experiment folder (run by
-- tests/e2e/storm.sh): `kbrun storm_check.lua dir=EXP check=taxi|timeout|
-- interrupted|pipelines|probe [runs=50]`, or `check=empty url=SIM` to
-- assert that a simulator holds no pipeline, experiment or run. Raises
-- (exit 1) with every failed check listed.
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local journal = require "kb.journal"
local kfp = require "kb.kfp"

local problems = {}
local function check(ok, fmt, ...)
  if not ok then problems[#problems + 1] = string.format(fmt, ...) end
end

local function read_json(path) return json.decode(fs.read(path)) end
local function read_csv(path) return (csv.parse(fs.read(path), { header = true })) end

local function by(rows, column)
  local n = {}
  for _, r in ipairs(rows) do
    if r[column] ~= nil then n[r[column]] = (n[r[column]] or 0) + 1 end
  end
  return n
end

local function files(dir)
  local f = {
    result = fs.join(dir, "result", "result.json"), runs = fs.join(dir, "result", "runs.csv"),
    latencies = fs.join(dir, "result", "latencies.csv"), html = fs.join(dir, "result", "report.html"),
    journal = fs.join(dir, "output", "journal.jsonl"), report_csv = fs.join(fs.dirname(dir), "kfp-storm-report.csv"),
  }
  for name, path in pairs(f) do check(fs.exists(path) == "file", "%s is missing (%s)", name, path) end
  return f
end

-- The headline run: every run accounted for, every file, a plot per op.
local function check_taxi(dir, p)
  local f = files(dir)
  if #problems > 0 then return end
  local doc = read_json(f.result)
  local r, n = doc.result, p.runs
  check(doc.status == "passed", "status %s (%s)", tostring(doc.status), tostring(doc.error))
  check(r.runs.requested == n and r.runs.created == n, "runs %s", json.encode(r.runs))
  check(r.runs.succeeded + r.runs.failed + r.runs.timed_out + r.runs.not_created == n,
    "not every run accounted for: %s", json.encode(r.runs))
  check(r.runs.deleted == n, "deleted %s of %d", tostring(r.runs.deleted), n)
  check(#r.comparison == 4, "comparison rows: %d", #(r.comparison or {}))
  check(r.server_metrics.available, "no server metrics: %s", tostring(r.server_metrics.reason))
  local runs = read_csv(f.runs)
  check(#runs == n, "runs.csv has %d rows", #runs)
  check((by(runs, "outcome").Succeeded or 0) == r.runs.succeeded, "runs.csv outcomes %s",
    json.encode(by(runs, "outcome")))
  local ops = by(read_csv(f.latencies), "op")
  for _, op in ipairs({ "run.create", "run.get", "run.delete" }) do
    check(ops[op] == n, "latencies.csv: %s rows of %s", tostring(ops[op]), op)
  end
  local html = fs.read(f.html)
  local min_plot = require("kb.report").MIN_PLOT
  for _, id in ipairs({ "run.create", "run.get", "run.delete", "run.list", "run.duration",
      "run.observed_lag", "poll.run.get" }) do
    -- how many lists a storm makes depends on timing against a real clock:
    -- fewer than MIN_PLOT calls are a table row, not a plot
    if id ~= "run.list" or (ops[id] or 0) >= min_plot then
      check(html:find('id="plot-' .. id .. "-", 1, true), "report.html has no plot of %s", id)
    end
  end
  -- calls made once are rows of the summary table, not plots (kb.report.MIN_PLOT)
  -- (the pipeline goes up as pipeline.create or, as an upload, pipeline.upload)
  for _, id in ipairs({ ops["pipeline.upload"] and "pipeline.upload" or "pipeline.create", "experiment.create" }) do
    check(html:find("<tr><th>" .. id .. "</th>", 1, true) and not html:find('id="plot-' .. id .. "-", 1, true),
      "report.html: %s should be a summary row without a plot", id)
  end
  for _, text in ipairs({ 'id="plot-outcomes"', "<h2>Calibration</h2>", "<h2>Runs</h2>",
      "<h2>Server-side vs client-side</h2>", "CreateRun", "<h2>Parameters</h2>" }) do
    check(html:find(text, 1, true), "report.html lacks %s", text)
  end
  local report = read_csv(f.report_csv)
  local last = report[#report] or {}
  check(last.experiment_id == doc.experiment_id, "report.csv's last row is %s", tostring(last.experiment_id))
  check(tonumber(last.succeeded) == r.runs.succeeded, "report.csv succeeded %s", tostring(last.succeeded))
  local events = by(journal.read(f.journal), "event")
  check(events["run.created"] == n and events.finish == 1, "journal events %s", json.encode(events))
end

local function check_timeout(dir, p)
  local f = files(dir)
  if #problems > 0 then return end
  local doc = read_json(f.result)
  check(doc.status == "failed" and doc.exit_code == 99, "status %s, exit %s", doc.status, doc.exit_code)
  check(doc.result.runs.timed_out == p.runs, "timed out %s", json.encode(doc.result.runs))
  local failed = {}
  for _, t in ipairs(doc.thresholds or {}) do if not t.passed then failed[#failed + 1] = t.name end end
  check(table.concat(failed, ",") == "runs.timed_out,success_rate", "failed thresholds: %s",
    table.concat(failed, ","))
  check(by(read_csv(f.runs), "outcome")["Timed out"] == p.runs, "runs.csv outcomes")
  check(fs.read(f.html):find("FAIL", 1, true), "report.html does not mark the failed threshold")
end

local function check_interrupted(dir, p)
  local f = files(dir)
  if #problems > 0 then return end
  local doc = read_json(f.result)
  check(doc.status == "interrupted" and doc.exit_code == 130, "status %s, exit %s", doc.status, doc.exit_code)
  check(doc.cleanup_error == nil, "cleanup error: %s", tostring(doc.cleanup_error))
  local runs = read_csv(f.runs)
  check(#runs == p.runs, "runs.csv has %d rows", #runs)
  local cleanup
  for _, rec in ipairs(journal.read(f.journal)) do if rec.event == "cleanup" then cleanup = rec end end
  check(cleanup and cleanup.cleaned.runs == p.runs, "journal's cleanup: %s", json.encode(cleanup))
  check(cleanup and cleanup.cleaned.pipelines == 1 and cleanup.cleaned.experiments == 1,
    "pipeline and experiment not deleted: %s", json.encode(cleanup))
end

local function check_pipelines(dir)
  local f = read_json(fs.join(dir, "result", "result.json"))
  local r = f.result
  check(f.status == "passed", "status %s (%s)", tostring(f.status), tostring(f.error))
  check(r.pipelines.created == 10 and r.pipelines.deleted == 10, "pipelines %s", json.encode(r.pipelines))
  check(r.versions.created == 100, "versions %s", json.encode(r.versions))
  local html = fs.read(fs.join(dir, "result", "report.html"))
  for _, id in ipairs({ "pipeline.create", "pipeline_version.create", "pipeline.get", "pipeline.delete" }) do
    check(html:find('id="plot-' .. id .. "-", 1, true), "report.html has no plot of %s", id)
  end
end

local function check_probe(dir)
  local doc = read_json(fs.join(dir, "result", "result.json"))
  local pr = doc.result and doc.result.probe
  check(pr and pr.broke_at == 4, "broke at %s", pr and tostring(pr.broke_at))
  check(pr and pr.reason:find("p99", 1, true), "reason %s", pr and tostring(pr.reason))
  check(pr and #pr.steps == 1, "steps %s", pr and #pr.steps)
  local html = fs.read(fs.join(dir, "result", "report.html"))
  check(html:find("The server broke at 4 concurrent runs", 1, true), "report.html lacks the verdict")
end

local function check_empty(url)
  for _, api in ipairs({ "v1beta1", "v2beta1" }) do
    local c = kfp.client{ host = url, api = api }
    local runs, pipelines = c:list_all_runs{}, c:list_all_pipelines{}
    local experiments = {}
    for _, e in ipairs(c:list_all_experiments{}) do
      if e.name ~= "Default" then experiments[#experiments + 1] = e end
    end
    check(#runs == 0, "%s: %d runs left", api, #runs)
    check(#pipelines == 0, "%s: %d pipelines left", api, #pipelines)
    check(#experiments == 0, "%s: %d experiments left", api, #experiments)
  end
end

return {
  params = { dir = "", check = "taxi", runs = 50, url = "" },
  run = function(p)
    if p.check == "empty" then check_empty(p.url)
    elseif p.check == "taxi" then check_taxi(p.dir, p)
    elseif p.check == "timeout" then check_timeout(p.dir, p)
    elseif p.check == "interrupted" then check_interrupted(p.dir, p)
    elseif p.check == "pipelines" then check_pipelines(p.dir)
    elseif p.check == "probe" then check_probe(p.dir)
    else error("unknown check " .. p.check) end
    if #problems > 0 then error(table.concat(problems, "\n  "), 0) end
    return { ok = true }
  end,
}
