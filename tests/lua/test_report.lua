-- kb.report: the HTML page of a result document: sections, one plot per
-- histogram, threshold marks, outcomes and samples, escaping, empty runs,
-- writing and regenerating from disk, attached data, size.
local T = require "kb.testing"
local kb = require "kb"
local report = require "kb.report"
local hist = require "kb.hist"
local check_xml = require "xml_check"

local function valid_html(text, what)
  local ok, err = check_xml(text, { html = true })
  T.ok(ok, (what or "html") .. ": " .. tostring(err))
  T.eq(text:sub(1, 15), "<!DOCTYPE html>", what)
  T.ok(not text:find("<script", 1, true), "no script")
  T.ok(not text:find('src="', 1, true), "nothing loaded")
  T.ok(not text:find('href="http', 1, true), "no external links")
end

local function count(s, plain)
  local n, i = 0, 1
  while true do
    local a, b = s:find(plain, i, true)
    if not a then return n end
    n, i = n + 1, b + 1
  end
end

-- A histogram entry of a metrics snapshot, as kb.metrics.snapshot() makes.
local function histogram(name, values, labels)
  local h = hist.new()
  for _, v in ipairs(values) do h:record(v) end
  local key = name
  if labels then
    local parts = {}
    for k, v in pairs(labels) do parts[#parts + 1] = k .. "=" .. v end
    table.sort(parts)
    key = name .. "{" .. table.concat(parts, ",") .. "}"
  end
  return { key = key, name = name, labels = labels or {}, kind = "histogram", summary = h:summary(), encoded = h:encode() }
end

local function spread(n, lo, hi)
  local out = {}
  for i = 1, n do out[i] = lo + (hi - lo) * ((i * 0.618034) % 1) end
  return out
end

local function sample_doc()
  return {
    kbrun = "0.1.0",
    experiment_id = "taxi-202501011200-ab12",
    scenario = { name = "taxi", file = "scenarios/taxi.lua" },
    status = "failed", exit_code = 1, error = "a threshold failed",
    started_at = "2025-01-01T12:00:00Z", finished_at = "2025-01-01T12:20:00Z",
    duration = 1200.5, clock = { kind = "virtual", speed = 600 }, seed = 42,
    params = { num_runs = 50, pipeline = { name = "taxi", version = 2 } },
    metrics = { version = 1, metrics = {
      histogram("run.create", spread(50, 0.08, 0.9)),
      histogram("run.get", spread(400, 0.002, 0.5)),
      histogram("run.delete", spread(50, 0.05, 0.2)),
      { key = "http.requests{status=200}", name = "http.requests", labels = { status = 200 }, kind = "counter", value = 500 },
      { key = "runs.in_flight", name = "runs.in_flight", labels = {}, kind = "gauge", value = 3 },
    } },
    thresholds = {
      { name = "run.create", stat = "p99", op = "<=", limit = 0.5, actual = 0.89, passed = false },
      { name = "run.get", stat = "p50", op = "<=", limit = 0.3, actual = 0.25, passed = true },
      { name = "success_rate", stat = "value", op = ">=", limit = 0.95, actual = 0.96, passed = true },
    },
    result = { runs = 50, success_rate = 0.96 },
  }
end

T.case("a full report: header, sections, one plot per histogram", function()
  local html = report.html(sample_doc(), { environment = false })
  valid_html(html, "full report")
  T.contains(html, "<h1>taxi</h1>")
  T.contains(html, "taxi-202501011200-ab12")
  T.contains(html, '<span class="badge bad">failed</span>')
  T.contains(html, "virtual, ×600")
  T.contains(html, "<dd>42</dd>") -- seed
  T.contains(html, "2025-01-01T12:20:00Z")
  T.contains(html, "20 min") -- duration 1200.5 s
  T.contains(html, "a threshold failed")
  -- one figure per histogram, linked from the summary table
  T.eq(count(html, "<figure "), 3)
  T.eq(count(html, "<svg "), 3)
  for _, name in ipairs({ "run.create", "run.get", "run.delete" }) do
    local id = html:match('<figure id="(plot%-' .. name:gsub("%.", "%%.") .. '%-%d+)">')
    T.ok(id, "figure for " .. name)
    T.contains(html, 'href="#' .. id .. '"')
  end
  -- summary table, counters, parameters, result
  T.contains(html, "<th>p99</th>")
  T.contains(html, "http.requests{status=200}")
  T.contains(html, "<td>500</td>")
  T.contains(html, "<th>pipeline.name</th>")
  T.contains(html, "<th>success_rate</th>")
  T.contains(html, 'id="environment"')
  T.contains(html, "Lua 5.4")
  -- percentile markers
  T.contains(html, 'class="marker-label"')
  T.ok(html:find(">p50 [%d.]+ ms</text>"), "p50 marker")
  T.ok(html:find(">p99 [%d.]+ ms</text>"), "p99 marker")
end)

T.case("thresholds: table rows, summary cells and marks in the plots", function()
  local html = report.html(sample_doc(), { environment = false })
  T.contains(html, "2 of 3 passed")
  T.contains(html, '<tr class="fail"><td class="mark">FAIL</td><td>run.create</td><td>p99</td><td>≤ 500 ms</td><td>890 ms</td></tr>')
  T.contains(html, '<tr class="pass"><td class="mark">ok</td><td>success_rate</td><td>value</td><td>≥ 0.95</td><td>0.96</td></tr>')
  T.contains(html, "limit p99 ≤ 500 ms FAIL")
  T.contains(html, "limit p50 ≤ 300 ms ok")
  T.eq(count(html, '<td class="fail">'), 1) -- the p99 cell of run.create
  T.ok(html:find('<td class="fail">8[89]%d ms</td>'), "failed stat highlighted")
end)

T.case("outcomes count plot and raw samples", function()
  local durations = spread(48, 300, 1500)
  local html = report.html(sample_doc(), { environment = false,
    outcomes = { Failed = 2, Succeeded = 48 },
    samples = { ["run.duration"] = durations, ["run.create"] = spread(50, 0.08, 0.9) } })
  valid_html(html, "outcomes")
  T.contains(html, '<figure id="plot-outcomes">')
  T.contains(html, ">48</text>")
  T.contains(html, ">2</text>")
  T.ok(html:find(">Succeeded</text>", 1, true) < html:find(">Failed</text>", 1, true), "Succeeded first")
  -- run.duration has no histogram: a plot of its own, in minutes
  T.contains(html, '<figure id="plot-run.duration">')
  T.contains(html, "raw samples")
  T.ok(html:find("%d+ min</text>"), "minutes in the marker labels")
  T.contains(html, ">run.duration (min)</text>") -- the axis title carries the ticks' unit
  -- run.create has both: its rug comes from the samples
  T.contains(html, "rug: 50 raw samples")
  T.eq(count(html, "<figure "), 5)
  -- order puts plots first, after the outcome count plot (always first)
  local ordered = report.html(sample_doc(), { environment = false, order = { "run.get", "outcomes" },
    outcomes = { ok = 1 } })
  local a, b, c = ordered:find('id="plot-run.get', 1, true), ordered:find('id="plot-outcomes"', 1, true),
    ordered:find('id="plot-run.create', 1, true)
  T.ok(b < a and a < c, "ordered")
end)

T.case("an empty run still makes a valid page", function()
  local doc = { kbrun = "0.1.0", experiment_id = "empty-1", scenario = { name = "empty" }, status = "passed",
    exit_code = 0, clock = { kind = "real", speed = 1 }, params = {}, metrics = { version = 1, metrics = {} } }
  local html = report.html(doc, { environment = false })
  valid_html(html, "empty run")
  T.contains(html, "This run recorded no metrics.")
  T.contains(html, '<span class="badge good">passed</span>')
  T.eq(count(html, "<figure "), 0)
  T.ok(not html:find('id="thresholds"', 1, true), "no threshold section")
  -- even a nearly empty table
  valid_html(report.html({}, { environment = false }), "bare document")
  T.raises(function() report.html(nil) end, "kb.report.html: wants a result document (table), got nil")
end)

T.case("a histogram with no values and one that cannot be decoded", function()
  local doc = sample_doc()
  doc.metrics.metrics = { histogram("never", {}),
    { key = "broken", name = "broken", labels = {}, kind = "histogram", summary = { count = 5 }, encoded = "not base64!" } }
  local html = report.html(doc, { environment = false })
  valid_html(html, "odd histograms")
  -- no values: a row of the summary only; undecodable: a plot saying so
  T.eq(count(html, "<figure "), 1)
  T.contains(html, "<tr><th>never</th><td>0</td>")
  T.contains(html, "cannot decode the histogram")
  -- an empty histogram can still be drawn on its own
  T.contains(require("kb.report.svg").histogram { title = "never", unit = "s", bins = {}, empty_text = "no values recorded" },
    "no values recorded")
end)

T.case("everything from the document is escaped", function()
  local doc = sample_doc()
  local evil = '<script>alert("x")</script>&'
  doc.scenario.name = evil
  doc.error = evil
  doc.params = { [evil] = evil }
  doc.result = evil
  doc.metrics.metrics[#doc.metrics.metrics + 1] = histogram("lat", { 0.1, 0.2, 0.3, 0.4, 0.5 }, { path = '"/a<b>"' })
  local html = report.html(doc, { environment = { note = evil }, outcomes = { [evil] = 1 } })
  valid_html(html, "escaping")
  T.contains(html, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;")
  T.contains(html, "lat{path=&quot;/a&lt;b&gt;&quot;}")
  T.ok(html:find('<figure id="plot%-lat_path__"_a_b_"_%-%d+">') == nil, "ids stay plain")
  T.ok(html:find('<figure id="plot%-lat_path[%w_%-%.]+">'), "sanitised id")
end)

T.case("write, regenerate from disk, attached data", function()
  local dir = kb.fs.tmpdir("kb-report-")
  local exp = require("kb.experiment").create({ out = dir, id = "exp-one" })
  local doc = sample_doc()
  exp:write_json("result", "result.json", doc)
  report.reset()
  local path = report.write(exp, doc, { environment = false })
  T.eq(path, kb.fs.join(exp.result_dir, "report.html"))
  valid_html(kb.fs.read(path), "written")

  -- the folder alone: doc read back from result.json; data from output/
  kb.fs.write(kb.fs.join(exp.output_dir, "report-data.json"),
    kb.json.encode({ outcomes = { Succeeded = 7 }, samples = { ["run.duration"] = { 60, 120, 180, 240, 300 } } }))
  T.eq(report.write(exp.dir, nil, { environment = false }), path)
  local again = kb.fs.read(path)
  valid_html(again, "regenerated")
  T.contains(again, '<figure id="plot-outcomes">')
  T.contains(again, '<figure id="plot-run.duration">')
  T.contains(again, "limit p99 ≤ 500 ms FAIL")

  -- the scenario's report field (a function of the document)
  report.write(exp, doc, { environment = false, scenario = { report = function(d)
    return { outcomes = { Succeeded = 1, Timeout = #d.thresholds } }
  end } })
  T.contains(kb.fs.read(path), ">Timeout</text>")
  T.raises(function() report.write(exp, doc, { scenario = { report = 5 } }) end,
    "kb.report: the scenario's 'report' must be a table or return one")

  -- a folder without result/ gets report.html inside; no result.json: error
  local bare = kb.fs.join(dir, "bare")
  kb.fs.mkdir(bare)
  T.raises(function() report.write(bare) end, "kb.report.write: no result document in '" .. bare .. "'")
  T.eq(report.write(bare, doc, { environment = false }), kb.fs.join(bare, "report.html"))
  T.raises(function() report.write(42) end, "kb.report.write: wants an experiment or a folder, got number")
  kb.fs.remove(dir, { recursive = true })
end)

T.case("attach checks and merges its data", function()
  report.reset()
  T.raises(function() report.attach(5) end, "kb.report.attach: wants a table, got number")
  T.raises(function() report.attach { samples = { x = { 1, "two" } } } end, "kb.report.attach: samples['x'][2] is not a number")
  T.raises(function() report.attach { samples = { x = true } } end, "kb.report.attach: samples['x'] must be a list of numbers")
  T.raises(function() report.attach { outcomes = 3 } end, "kb.report.attach: outcomes must be a table of label = count")
  report.attach { samples = { ["run.duration"] = { 1, 2 } }, outcomes = { Succeeded = 2 } }
  report.attach { samples = { ["run.duration"] = { 3, 4, 5 } }, outcomes = { Succeeded = 1, Failed = 1 } }
  -- kept in the run's experiment folder for a later report.write(dir)
  local saved = kb.json.decode(kb.fs.read(kb.fs.join(kb.exp.output_dir, "report-data.json")))
  T.same({ table.unpack(saved.samples["run.duration"]) }, { 1, 2, 3, 4, 5 })
  T.same(saved.outcomes, { Succeeded = 3, Failed = 1 })
  local dir = kb.fs.tmpdir("kb-report-")
  local doc = { scenario = { name = "a" }, metrics = { version = 1, metrics = {} } }
  local path = report.write(dir, doc, { environment = false })
  local html = kb.fs.read(path)
  T.contains(html, "n = 5 · mean 3 s") -- samples appended over calls
  T.contains(html, ">3</text>")        -- Succeeded 2 + 1
  T.contains(html, "4 in total")
  report.reset()
  kb.fs.remove(dir, { recursive = true })
end)

T.case("twenty large histograms stay well under 1 MB", function()
  local doc = sample_doc()
  local list = {}
  for i = 1, 20 do
    local values = {}
    for j = 1, 5000 do values[j] = 0.001 * math.exp(7 * ((j * 0.7548776662 + i * 0.31) % 1)) end
    list[i] = histogram(string.format("op%02d", i), values)
  end
  doc.metrics.metrics = list
  local html = report.html(doc, { environment = false })
  valid_html(html, "twenty")
  T.eq(count(html, "<figure "), 20)
  T.ok(#html < 1000000, "size " .. #html)
  -- deterministic for the same input
  T.eq(report.html(doc, { environment = false }), html)
end)

T.run()
