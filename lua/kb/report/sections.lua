--- kb.report.sections: the sections of report.html, each a function of the
-- result document returning its HTML: the header, thresholds, a sweep
-- cell's figures, the summary table, the plots, the parameters, the
-- environment and the raw result; and which histograms are listed and
-- plotted, in which order. kb.report.html assembles the page from them
-- (kb.report.overtime draws "Over time"); kb.report re-exports verdict
-- and MIN_PLOT.
local svg = require "kb.report.svg"
local hist = require "kb.hist"
local json = require "kb.json"

local M = {}

local esc = svg.escape
local format, concat = string.format, table.concat
local fmt = svg.format_value

local function is_null(v) return v == nil or v == json.null end

-- ---- small helpers ----------------------------------------------------------

local function label_text(labels)
  local keys = {}
  for k in pairs(labels or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = k .. "=" .. tostring(labels[k]) end
  return #parts > 0 and ("{" .. concat(parts, ",") .. "}") or ""
end

local function metric_key(m) return m.key or (m.name .. label_text(m.labels)) end

-- A string usable as an HTML id.
local function anchor(prefix, s, i)
  return prefix .. "-" .. tostring(s):gsub("[^%w%-_.]", "_") .. (i and ("-" .. i) or "")
end

-- A float with 4 significant digits (9.092259645462036 -> 9.092); whole
-- numbers stay whole.
local function round_float(v)
  if v ~= v or v == math.huge or v == -math.huge then return tostring(v) end
  if v == math.floor(v) and math.abs(v) < 1e15 then return format("%d", v) end
  return format("%.4g", v)
end

-- Compact JSON-like text of a table with floats rounded (for reading, not
-- for parsing back: result.json keeps the exact values).
local function rounded_json(v, depth)
  if is_null(v) then return "null" end
  local t = type(v)
  if t == "number" then return math.type(v) == "integer" and tostring(v) or round_float(v) end
  if t == "string" then return (json.encode(v)) end
  if t ~= "table" then return tostring(v) end
  if (depth or 0) > 6 then return "…" end
  local parts = {}
  if #v > 0 or next(v) == nil then
    for i, x in ipairs(v) do parts[i] = rounded_json(x, (depth or 0) + 1) end
    return "[" .. concat(parts, ",") .. "]"
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local x = v[k]
    if x == nil then x = v[tonumber(k)] end
    parts[#parts + 1] = json.encode(k) .. ":" .. rounded_json(x, (depth or 0) + 1)
  end
  return "{" .. concat(parts, ",") .. "}"
end

local function scalar_text(v)
  if is_null(v) then return "null" end
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    return round_float(v)
  end
  if type(v) == "table" then
    local ok, s = pcall(rounded_json, v)
    if not ok then return tostring(v) end
    -- a long list (every run of a storm) is in the result files, not here
    if #v > 0 and #s > 400 then
      return format("[%d items: see result.json%s]", #v, #v >= 10 and " and the CSV files beside it" or "")
    end
    return s
  end
  return tostring(v)
end

-- Flattens nested tables into sorted { path, value } rows; lists and deep
-- tables stay as JSON text.
local function flatten(t, prefix, rows, depth)
  rows = rows or {}
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local v = t[k]
    local path = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    if type(v) == "table" and #v == 0 and next(v) ~= nil and (depth or 0) < 3 then
      flatten(v, path, rows, (depth or 0) + 1)
    else
      rows[#rows + 1] = { path, scalar_text(v) }
    end
  end
  return rows
end

-- A name/value table; more than 12 rows are split into two tables side
-- by side (half the height on a wide screen, one under the other on a
-- narrow one).
local function kv_table(rows, class)
  if #rows == 0 then return '<p class="muted">none</p>' end
  local function one(from, to)
    local out = { format('<table class="kv %s"><tbody>', class or "") }
    for i = from, to do
      local r = rows[i]
      local value = r[2]
      if #value > 2000 then value = value:sub(1, 2000) .. " …" end
      out[#out + 1] = format("<tr><th>%s</th><td><code>%s</code></td></tr>", esc(r[1]), esc(value))
    end
    out[#out + 1] = "</tbody></table>"
    return concat(out)
  end
  if #rows <= 12 then return one(1, #rows) end
  local half = (#rows + 1) // 2
  return '<div class="kv2">' .. one(1, half) .. one(half + 1, #rows) .. "</div>"
end

local function read_text(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- What can be learnt about the machine without running a program.
local function local_environment()
  local env = {}
  local host = read_text("/proc/sys/kernel/hostname")
  if host then env.host = host:gsub("%s+$", "") end
  local kernel = read_text("/proc/sys/kernel/osrelease")
  if kernel then env.kernel = kernel:gsub("%s+$", "") end
  local osr = read_text("/etc/os-release")
  if osr then env.os = osr:match('PRETTY_NAME="([^"]*)"') end
  local cpu = read_text("/proc/cpuinfo")
  if cpu then
    local n = 0
    for _ in cpu:gmatch("\nprocessor%s*:") do n = n + 1 end
    if cpu:match("^processor%s*:") then n = n + 1 end
    if n > 0 then env.cpus = n end
  end
  return env
end

-- ---- sections ---------------------------------------------------------------

--- The one-line conclusion of a run, if its scenario gave one: the
-- result's `verdict` string (doc.result.verdict, or doc.verdict).
function M.verdict(doc)
  local r = type(doc) == "table" and doc.result
  local v = type(r) == "table" and r.verdict or (type(doc) == "table" and doc.verdict)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

local STATUS_CLASS = { passed = "good", ok = "good", failed = "bad", interrupted = "warn", usage = "bad" }

local function header(doc, opts)
  local scenario = type(doc.scenario) == "table" and doc.scenario or {}
  local title = opts.title or scenario.name or "kbrun run"
  local status = is_null(doc.status) and "unknown" or tostring(doc.status)
  local clock = type(doc.clock) == "table" and doc.clock or {}
  local clock_text = clock.kind and tostring(clock.kind) or "-"
  if clock.mode == "events" then clock_text = clock_text .. ", events (fast-forwarding)"
  elseif type(clock.speed) == "number" and clock.speed ~= 1 then clock_text = format("%s, ×%g", clock_text, clock.speed) end
  local facts = {
    { "experiment", doc.experiment_id },
    { "scenario file", scenario.file },
    { "status", nil, format('<span class="badge %s">%s</span>%s', STATUS_CLASS[status] or "warn", esc(status),
      is_null(doc.exit_code) and "" or format(' <span class="muted">exit %s</span>', esc(doc.exit_code))) },
    { "clock", clock_text },
    { "seed", doc.seed },
    { "started", doc.started_at },
    { "finished", doc.finished_at },
    { "duration", type(doc.duration) == "number" and fmt(doc.duration, "s") or nil },
  }
  local out = { format('<header><h1>%s</h1>', esc(title)) }
  -- a scenario's one-line conclusion (kfp_probe: "broke at concurrency
  -- 1024: ...") is the first thing a reader sees
  local verdict = M.verdict(doc)
  if verdict then out[#out + 1] = format('<p class="verdict">%s</p>', esc(verdict)) end
  out[#out + 1] = '<dl class="facts">'
  for _, f in ipairs(facts) do
    if f[3] or not is_null(f[2]) then
      out[#out + 1] = format("<div><dt>%s</dt><dd>%s</dd></div>", esc(f[1]), f[3] or esc(scalar_text(f[2])))
    end
  end
  out[#out + 1] = "</dl>"
  local problems = {}
  if not is_null(doc.error) then problems[#problems + 1] = { "error", doc.error } end
  if not is_null(doc.cleanup_error) then problems[#problems + 1] = { "cleanup error", doc.cleanup_error } end
  if type(doc.unobserved_task_failures) == "table" then
    for _, e in ipairs(doc.unobserved_task_failures) do problems[#problems + 1] = { "task failure nobody waited for", e } end
  end
  for _, p in ipairs(problems) do
    out[#out + 1] = format('<div class="problem"><strong>%s</strong><pre>%s</pre></div>', esc(p[1]), esc(scalar_text(p[2])))
  end
  out[#out + 1] = "</header>"
  return concat(out), title
end

local HIST_STATS = { p50 = true, p75 = true, p90 = true, p95 = true, p99 = true, p999 = true,
  mean = true, max = true, min = true, stddev = true }

-- Histograms by name (first label set) for threshold formatting and marks.
local function histograms_by_name(metrics)
  local by = {}
  for _, m in ipairs(metrics) do
    if m.kind == "histogram" and not by[m.name] then by[m.name] = m end
  end
  return by
end

local function threshold_value(t, hists, v)
  if type(v) ~= "number" then return is_null(v) and "missing" or scalar_text(v) end
  if hists[t.name] and HIST_STATS[t.stat] then return fmt(v, "s") end
  return svg.format_number(v)
end

local function thresholds_section(doc, hists)
  local list = type(doc.thresholds) == "table" and doc.thresholds or {}
  if #list == 0 then return "" end
  local failed = 0
  for _, t in ipairs(list) do if not t.passed then failed = failed + 1 end end
  local out = { '<section id="thresholds"><h2>Thresholds</h2>' }
  out[#out + 1] = format('<p>%d of %d passed%s</p>', #list - failed, #list,
    failed > 0 and format(' — <span class="bad-text">%d failed</span>', failed) or "")
  out[#out + 1] = '<table class="grid"><thead><tr><th></th><th>metric</th><th>stat</th><th>limit</th><th>actual</th></tr></thead><tbody>'
  for _, t in ipairs(list) do
    local op = t.op == ">=" and "≥" or "≤"
    out[#out + 1] = format('<tr class="%s"><td class="mark">%s</td><td>%s</td><td>%s</td><td>%s %s</td><td>%s</td></tr>',
      t.passed and "pass" or "fail", t.passed and "ok" or "FAIL", esc(scalar_text(t.name)), esc(scalar_text(t.stat)),
      op, esc(threshold_value(t, hists, t.limit)), esc(threshold_value(t, hists, t.actual)))
  end
  out[#out + 1] = "</tbody></table></section>"
  return concat(out)
end

-- Failed threshold stats per histogram name: name -> { stat = true }.
local function failed_stats(doc)
  local f = {}
  for _, t in ipairs(type(doc.thresholds) == "table" and doc.thresholds or {}) do
    if not t.passed then
      f[t.name] = f[t.name] or {}
      f[t.name][t.stat] = true
    end
  end
  return f
end

local SUMMARY_COLS = { "count", "min", "p50", "p90", "p99", "max", "mean" }

local function summary_section(histos, counters, plot_ids, doc)
  local out = { '<section id="summary"><h2>Summary</h2>' }
  if #histos == 0 and #counters == 0 then
    out[#out + 1] = '<p class="muted">This run recorded no metrics.</p></section>'
    return concat(out)
  end
  local failed = failed_stats(doc)
  local notes
  out[#out + 1] = '<div class="side">'
  if #histos > 0 then
    out[#out + 1] = '<div><table class="grid num"><thead><tr><th>histogram</th>'
    for _, c in ipairs(SUMMARY_COLS) do out[#out + 1] = "<th>" .. c .. "</th>" end
    out[#out + 1] = "</tr></thead><tbody>"
    for _, m in ipairs(histos) do
      local s = type(m.summary) == "table" and m.summary or {}
      local key = metric_key(m)
      if plot_ids[key] then
        out[#out + 1] = format('<tr><th><a href="#%s">%s</a></th>', plot_ids[key], esc(key))
      else
        out[#out + 1] = format('<tr><th>%s</th>', esc(key))
      end
      for _, c in ipairs(SUMMARY_COLS) do
        local v = s[c]
        local text = c == "count" and svg.format_number(v or 0) or (type(v) == "number" and fmt(v, "s") or "–")
        local bad = failed[m.name] and failed[m.name][c]
        out[#out + 1] = format("<td%s>%s</td>", bad and ' class="fail"' or "", esc(text))
      end
      out[#out + 1] = "</tr>"
    end
    out[#out + 1] = "</tbody></table></div>"
    notes = format('<p class="muted">Plotted: operations with at least %d values; side calls (<code>aux.*</code>: ' ..
      'cleanup, scrapes) and operations measured a few times are in this table only. An <code>.attempt</code> ' ..
      'histogram is listed where retries made it differ from its call.</p>', M.MIN_PLOT)
  end
  if #counters > 0 then
    out[#out + 1] = '<div><table class="grid num"><thead><tr><th>counter or gauge</th><th>value</th></tr></thead><tbody>'
    for _, m in ipairs(counters) do
      out[#out + 1] = format("<tr><th>%s%s</th><td>%s</td></tr>", esc(metric_key(m)),
        m.kind == "gauge" and ' <span class="muted">(gauge)</span>' or "", esc(scalar_text(m.value)))
    end
    out[#out + 1] = "</tbody></table></div>"
  end
  out[#out + 1] = "</div>" .. (notes or "") .. "</section>"
  return concat(out)
end

-- Percentile and threshold markers of a histogram.
local function markers_for(m, summary, doc)
  local marks = {}
  for _, p in ipairs({ "p50", "p90", "p99" }) do
    local v = summary[p]
    if type(v) == "number" then
      marks[#marks + 1] = { value = v, label = p .. " " .. fmt(v, "s"), kind = "percentile",
        dash = p == "p50" and "5 3" or (p == "p90" and "3 3" or "1.5 2.5") }
    end
  end
  for _, t in ipairs(type(doc.thresholds) == "table" and doc.thresholds or {}) do
    if t.name == m.name and HIST_STATS[t.stat] and type(t.limit) == "number" then
      marks[#marks + 1] = { value = t.limit, kind = "threshold",
        label = format("limit %s %s %s %s", t.stat, t.op == ">=" and "≥" or "≤", fmt(t.limit, "s"), t.passed and "ok" or "FAIL"),
        color = t.passed and svg.colors.good or svg.colors.bad }
    end
  end
  return marks
end

-- Plots are drawn at the width of a grid column of a 1280 px window, so
-- their text shows at its nominal size there.
local PLOT_W, PLOT_H = 600, 320

local function figure(id, svg_text, caption)
  return format('<figure id="%s">%s%s</figure>', id, svg_text,
    caption and format("<figcaption>%s</figcaption>", esc(caption)) or "")
end

local function numeric_samples(list)
  local out = {}
  for _, v in ipairs(type(list) == "table" and list or {}) do
    if type(v) == "number" and v == v and v >= 0 then out[#out + 1] = v end
  end
  return out
end

-- One histogram plot from a metric's encoded histogram (and raw samples).
local function histogram_plot(m, opts, doc, samples)
  local key = metric_key(m)
  local summary = type(m.summary) == "table" and m.summary or {}
  local ok, h = pcall(hist.decode, m.encoded)
  if not ok or not h then
    return svg.bars { title = key, subtitle = "cannot decode the histogram: " .. tostring(h), categories = {} }
  end
  local count = h:count()
  local buckets = h:buckets()
  local pmin, pmax = nil, h:max()
  for _, b in ipairs(buckets) do
    if b.low > 0 then pmin = b.low break end
  end
  local scale = opts.scales and (opts.scales[key] or opts.scales[m.name])
  if not scale then scale = (pmin and pmax and pmax / pmin >= 30) and "log" or "linear" end
  local points
  if samples and #samples > 0 then
    points = {}
    for i, v in ipairs(samples) do points[i] = { value = v, count = 1 } end
  else
    points = {}
    for i, b in ipairs(buckets) do points[i] = { value = (b.low + b.high) / 2, count = b.count } end
  end
  local bins
  if count == 0 then
    bins = {}
  elseif scale == "log" then
    bins = h:bins { n = svg.bin_count(count) }
  else
    local bpoints = {}
    for i, b in ipairs(buckets) do bpoints[i] = { value = (b.low + b.high) / 2, count = b.count } end
    bins = svg.linear_bins(bpoints)
  end
  local sub = { format("n = %s", svg.format_number(count)) }
  if type(summary.mean) == "number" then sub[#sub + 1] = "mean " .. fmt(summary.mean, "s") end
  if type(summary.max) == "number" then sub[#sub + 1] = "max " .. fmt(summary.max, "s") end
  sub[#sub + 1] = scale == "log" and "log axis" or nil
  sub[#sub + 1] = (samples and #samples > 0) and format("rug: %s raw samples", svg.format_number(#samples)) or nil
  if type(summary.saturated) == "number" and summary.saturated > 0 then
    sub[#sub + 1] = format("%s above the histogram's range", svg.format_number(summary.saturated))
  end
  return svg.histogram {
    title = key, subtitle = concat(sub, " · "), unit = "s", scale = scale,
    bins = bins, points = points, kde = opts.kde ~= false and count >= 10,
    markers = markers_for(m, summary, doc), xlabel = m.name or key,
    empty_text = "no values recorded", width = PLOT_W, height = PLOT_H,
  }
end

-- A plot of raw samples that have no histogram.
local function samples_plot(name, samples, opts, doc)
  local h = hist.new()
  for _, v in ipairs(samples) do h:record(v) end
  local s = h:summary()
  local pmin = nil
  for _, v in ipairs(samples) do if v > 0 and (not pmin or v < pmin) then pmin = v end end
  local scale = opts.scales and opts.scales[name]
  if not scale then scale = (pmin and s.max and s.max / pmin >= 30) and "log" or "linear" end
  local sub = { format("n = %s", svg.format_number(#samples)) }
  if s.mean then sub[#sub + 1] = "mean " .. fmt(s.mean, "s") end
  if s.max then sub[#sub + 1] = "max " .. fmt(s.max, "s") end
  sub[#sub + 1] = scale == "log" and "log axis" or nil
  sub[#sub + 1] = "raw samples"
  return svg.histogram {
    title = name, subtitle = concat(sub, " · "), unit = "s", scale = scale, samples = samples,
    kde = opts.kde ~= false and #samples >= 10, markers = markers_for({ name = name }, s, doc),
    xlabel = name, empty_text = "no values recorded", width = PLOT_W, height = PLOT_H,
  }, s
end

local OUTCOME_ORDER = { succeeded = 1, success = 1, passed = 1, ok = 1, completed = 1, failed = 2, error = 3 }

local function outcome_categories(outcomes)
  local cats = {}
  if #outcomes > 0 then
    for _, c in ipairs(outcomes) do
      cats[#cats + 1] = { label = tostring(c.label or c[1]), value = tonumber(c.value or c[2]) or 0 }
    end
    return cats
  end
  for label, n in pairs(outcomes) do cats[#cats + 1] = { label = tostring(label), value = tonumber(n) or 0 } end
  table.sort(cats, function(a, b)
    local ra, rb = OUTCOME_ORDER[a.label:lower()] or 9, OUTCOME_ORDER[b.label:lower()] or 9
    if ra ~= rb then return ra < rb end
    return a.label < b.label
  end)
  return cats
end

local function plots_section(histos, opts, doc, plot_ids)
  local figs = {}
  local samples = opts.samples or {}
  local used = {}
  if type(opts.outcomes) == "table" and next(opts.outcomes) ~= nil then
    local cats = outcome_categories(opts.outcomes)
    local total = 0
    for _, c in ipairs(cats) do total = total + c.value end
    figs[#figs + 1] = { key = "outcomes", html = figure("plot-outcomes", svg.bars {
      title = "outcomes", subtitle = format("%s in total", svg.format_number(total)), categories = cats,
      width = PLOT_W, height = PLOT_H,
    }) }
  end
  for _, m in ipairs(histos) do
    local key = metric_key(m)
    local raw = samples[key] or samples[m.name]
    if samples[key] then used[key] = true elseif samples[m.name] then used[m.name] = true end
    if not plot_ids[key] then goto continue end
    local ok, text = pcall(histogram_plot, m, opts, doc, raw and numeric_samples(raw) or nil)
    if not ok then text = svg.bars { title = key, subtitle = "cannot plot: " .. tostring(text), categories = {} } end
    figs[#figs + 1] = { key = key, name = m.name, html = figure(plot_ids[key], text) }
    ::continue::
  end
  local extra = {}
  for name in pairs(samples) do
    if not used[name] then extra[#extra + 1] = name end
  end
  table.sort(extra)
  for _, name in ipairs(extra) do
    local list = numeric_samples(samples[name])
    if #list < M.MIN_PLOT then goto next_extra end
    local id = anchor("plot", name)
    plot_ids[name] = id
    figs[#figs + 1] = { key = name, name = name, html = figure(id, (samples_plot(name, list, opts, doc))) }
    ::next_extra::
  end
  -- opts.order first, in its order; the rest keep theirs
  if type(opts.order) == "table" then
    local rank = {}
    for i, n in ipairs(opts.order) do rank[n] = i end
    for i, f in ipairs(figs) do f.pos = i end
    table.sort(figs, function(a, b)
      -- the outcome count plot stays first (the notebook's first plot)
      local ra = a.key == "outcomes" and 0 or rank[a.key] or rank[a.name] or math.huge
      local rb = b.key == "outcomes" and 0 or rank[b.key] or rank[b.name] or math.huge
      if ra ~= rb then return ra < rb end
      return a.pos < b.pos
    end)
  end
  if #figs == 0 then return "" end
  local out = { '<section id="plots"><h2>Plots</h2><div class="plots">' }
  for _, f in ipairs(figs) do out[#out + 1] = f.html end
  out[#out + 1] = "</div></section>"
  return concat(out, "\n")
end

local function params_section(doc)
  local params = type(doc.params) == "table" and doc.params or {}
  return '<section id="parameters"><h2>Parameters</h2>' .. kv_table(flatten(params)) .. "</section>"
end

-- What the scenario's run returned, last on the page: folded (a native
-- <details>, no script) when it is long, floats rounded.
local function result_section(doc)
  local r = doc.result
  if is_null(r) then return "" end
  local body, n
  if type(r) == "table" then
    local rows = flatten(r)
    body, n = kv_table(rows), #rows
  else
    body, n = format("<pre>%s</pre>", esc(scalar_text(r))), 1
  end
  if n > 24 then
    return format('<section id="result"><details><summary><h2>Result</h2> <span class="muted">what the scenario ' ..
      'returned: %d values (floats rounded; exact in result/result.json), click to show</span></summary>%s</details></section>', n, body)
  end
  return '<section id="result"><h2>Result</h2><p class="muted">what the scenario returned (floats rounded; exact in result/result.json)</p>' .. body .. "</section>"
end

local function environment_section(doc, opts)
  local env = {}
  if opts.environment ~= false then
    local from_doc = type(doc.environment) == "table" and doc.environment or nil
    for k, v in pairs(from_doc or local_environment()) do env[k] = v end
    for k, v in pairs(type(opts.environment) == "table" and opts.environment or {}) do env[k] = v end
  end
  if not is_null(doc.kbrun) then env.kbrun = env.kbrun or doc.kbrun end
  env.lua = env.lua or _VERSION
  return '<section id="environment"><h2>Environment</h2>' .. kv_table(flatten(env)) .. "</section>"
end

--- Histograms with this many values or more get a plot; fewer (a call
-- made once: create the experiment, delete the pipeline) are rows of the
-- summary table only.
M.MIN_PLOT = 5

-- The metrics of a document: doc.metrics.metrics (a run), or
-- doc.registry.metrics (a sweep cell, whose doc.metrics holds its figures).
local function metrics_of(doc)
  if type(doc.metrics) == "table" and type(doc.metrics.metrics) == "table" then return doc.metrics.metrics end
  if type(doc.registry) == "table" and type(doc.registry.metrics) == "table" then return doc.registry.metrics end
  return {}
end

local function summary_equal(a, b)
  return type(a) == "table" and type(b) == "table" and a.count == b.count and a.max == b.max and a.p50 == b.p50
end

-- The histograms to list, in reading order: opts.order's names first, then
-- the scenario's own operations by name, then the side calls (aux.*). An
-- `<op>.attempt` twin identical to its call (no retries) is left out.
local function ordered_histograms(histos, order)
  local by_key = {}
  for _, m in ipairs(histos) do by_key[metric_key(m)] = m end
  local rank = {}
  for i, n in ipairs(type(order) == "table" and order or {}) do rank[n] = i end
  local list = {}
  for _, m in ipairs(histos) do
    local op = m.name:match("^(.*)%.attempt$")
    local call = op and by_key[op .. label_text(m.labels)]
    if not (call and summary_equal(call.summary, m.summary)) then list[#list + 1] = m end
  end
  local function group(m)
    if rank[metric_key(m)] or rank[m.name] then return 0 end
    return m.name:find("^aux%.") and 2 or 1
  end
  table.sort(list, function(a, b)
    local ga, gb = group(a), group(b)
    if ga ~= gb then return ga < gb end
    if ga == 0 then
      local ra, rb = rank[metric_key(a)] or rank[a.name], rank[metric_key(b)] or rank[b.name]
      if ra ~= rb then return ra < rb end
    end
    return metric_key(a) < metric_key(b)
  end)
  return list
end

local function plotted(m)
  local s = type(m.summary) == "table" and m.summary or {}
  return not m.name:find("^aux%.") and type(s.count) == "number" and s.count >= M.MIN_PLOT
end

-- A sweep cell's figures (doc.metrics as a flat name -> number table).
local function figures_section(doc)
  local f = doc.metrics
  if type(f) ~= "table" or type(f.metrics) == "table" or next(f) == nil then return "" end
  local rows = {}
  for _, r in ipairs(flatten(f)) do rows[#rows + 1] = r end
  local intro = doc.sweep and format('<p class="muted">This cell of sweep <code>%s</code> measured (the row of sweep.csv; <a href="../../sweep.html">sweep.html</a>):</p>',
    esc(scalar_text(doc.sweep))) or ""
  return '<section id="figures"><h2>Figures</h2>' .. intro .. kv_table(rows) .. "</section>"
end

M.metric_key = metric_key
M.anchor = anchor
M.scalar_text = scalar_text
M.header = header
M.histograms_by_name = histograms_by_name
M.thresholds_section = thresholds_section
M.figures_section = figures_section
M.summary_section = summary_section
M.plots_section = plots_section
M.params_section = params_section
M.environment_section = environment_section
M.result_section = result_section
M.ordered_histograms = ordered_histograms
M.plotted = plotted
M.metrics_of = metrics_of

return M
