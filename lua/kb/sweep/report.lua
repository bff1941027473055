--- kb.sweep.report: what a sweep leaves behind (docs/sweep.md, "Outputs"):
-- sweep.csv (one row per cell x repeat), sweep.html (line plots with error
-- bars over repeats, a heat map, the best and worst cells, search results)
-- and the terminal table.
--
-- Every function works from the journal's "done" records (as they read
-- back from JSON), so an interrupted-and-resumed sweep and an
-- uninterrupted one with the same seed write the same sweep.csv.
-- Wall-clock figures (a cell's elapsed time) stay in the journal and the
-- cells' result.json, out of sweep.csv, which is deterministic.
local csv = require "kb.csv"
local fs = require "kb.fs"
local json = require "kb.json"
local svg = require "kb.report.svg"

local M = {}
local format, concat = string.format, table.concat
local esc = svg.escape

local INFO_FILE = "sweep-report.json"

-- A copy of v without functions (a definition's exclude, a report's
-- callbacks), for JSON.
local function plain(v, depth)
  if type(v) ~= "table" then
    if type(v) == "function" or type(v) == "userdata" or type(v) == "thread" then return nil end
    return v
  end
  if (depth or 0) > 8 then return nil end
  local out = {}
  for k, x in pairs(v) do
    if type(k) == "string" or type(k) == "number" then out[k] = plain(x, (depth or 0) + 1) end
  end
  return out
end

-- ---- columns and aggregation --------------------------------------------------------

local function is_num(v) return type(v) == "number" and v == v end

--- The metric names of the records: `preferred` first (those present),
-- then the rest sorted.
function M.metric_names(records, preferred)
  local seen, names = {}, {}
  for _, name in ipairs(preferred or {}) do
    if not seen[name] then seen[name], names[#names + 1] = true, name end
  end
  local rest = {}
  for _, r in ipairs(records) do
    for k in pairs(r.metrics or {}) do
      if not seen[k] then seen[k], rest[#rest + 1] = true, k end
    end
  end
  table.sort(rest)
  for _, k in ipairs(rest) do names[#names + 1] = k end
  return names
end

--- The records in report order: by cell index, then repeat.
function M.sorted(records)
  local list = {}
  for i, r in ipairs(records) do list[i] = r end
  table.sort(list, function(a, b)
    if a.index ~= b.index then return a.index < b.index end
    if a.sub ~= b.sub then return (a.sub or 0) < (b.sub or 0) end
    return a["repeat"] < b["repeat"]
  end)
  return list
end

local function value_text(v)
  if v == nil or v == json.null then return "" end
  return v
end

--- The CSV text: cell, repeat, seed, status, the parameters, the
-- metrics, error.
function M.csv_text(records, params, metrics)
  local header = { "cell", "repeat", "seed", "status" }
  for _, p in ipairs(params) do header[#header + 1] = p end
  for _, m in ipairs(metrics) do header[#header + 1] = m end
  header[#header + 1] = "error"
  local rows = {}
  for _, r in ipairs(records) do
    local row = { r.id, r["repeat"], r.seed, r.status }
    for _, p in ipairs(params) do row[#row + 1] = value_text(r.params and r.params[p]) end
    for _, m in ipairs(metrics) do row[#row + 1] = value_text(r.metrics and r.metrics[m]) end
    row[#row + 1] = value_text(r.error)
    row.n = #header
    rows[#rows + 1] = row
  end
  -- names that clash (a metric named like a parameter) get a prefix
  local seen = {}
  for i, h in ipairs(header) do
    if seen[h] then header[i] = "metric." .. h end
    seen[header[i]] = true
  end
  return csv.encode(rows, header)
end

--- Mean, sample standard deviation and count of a list of numbers.
function M.mean_sd(list)
  local n, sum = #list, 0
  if n == 0 then return nil, nil, 0 end
  for _, v in ipairs(list) do sum = sum + v end
  local mean = sum / n
  if n == 1 then return mean, nil, 1 end
  local ss = 0
  for _, v in ipairs(list) do ss = ss + (v - mean) ^ 2 end
  return mean, math.sqrt(ss / (n - 1)), n
end

local function group_key(params, names)
  local parts = {}
  for i, n in ipairs(names) do parts[i] = tostring(params[n]) end
  return concat(parts, "\31")
end

--- The cells (records grouped over repeats): a list of {id, index,
-- params, status ("ok" if any repeat succeeded), stats = {[metric] =
-- {mean, sd, n}}, repeats, failed}, in cell order.
function M.cells(records, metrics)
  local by, list = {}, {}
  for _, r in ipairs(M.sorted(records)) do
    local c = by[r.key]
    if not c then
      c = { id = r.id, index = r.index, key = r.key, params = r.params, values = {}, repeats = 0, failed = 0, dirs = {} }
      by[r.key] = c
      list[#list + 1] = c
    end
    c.repeats = c.repeats + 1
    if type(r.dir) == "string" then c.dirs[#c.dirs + 1] = r.dir end
    if r.status == "ok" then
      for _, m in ipairs(metrics) do
        local v = r.metrics and r.metrics[m]
        if is_num(v) then
          c.values[m] = c.values[m] or {}
          table.insert(c.values[m], v)
        end
      end
    else
      c.failed = c.failed + 1
      c.error = c.error or r.error
    end
  end
  for _, c in ipairs(list) do
    c.status = c.failed < c.repeats and "ok" or "failed"
    c.stats = {}
    for m, vals in pairs(c.values) do
      local mean, sd, n = M.mean_sd(vals)
      c.stats[m] = { mean = mean, sd = sd, n = n }
    end
    c.values = nil
  end
  return list
end

-- ---- numbers as text ------------------------------------------------------------

local function num_text(v)
  if not is_num(v) then return v == nil and "-" or tostring(v) end
  local a = math.abs(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v == math.floor(v) and a < 1e6 then return format("%d", math.floor(v)) end
  if a ~= 0 and (a >= 1e6 or a < 1e-3) then return format("%.3g", v) end
  if a >= 100 then return format("%.0f", v) end
  if a >= 10 then return format("%.1f", v) end
  return format("%.3g", v)
end
M.num_text = num_text

local function stat_text(st)
  if not st or st.mean == nil then return "-" end
  if st.sd then return num_text(st.mean) .. " ±" .. num_text(st.sd) end
  return num_text(st.mean)
end

-- ---- the terminal table -----------------------------------------------------------

--- The terminal table: one line per cell with its parameters and the
-- (up to `max_metrics`) metrics' mean ± sd over repeats.
function M.table_text(cells, params, metrics, max_metrics)
  local shown = {}
  for i = 1, math.min(#metrics, max_metrics or 4) do shown[i] = metrics[i] end
  local header = { "cell" }
  for _, p in ipairs(params) do header[#header + 1] = p end
  for _, m in ipairs(shown) do header[#header + 1] = m end
  header[#header + 1] = "status"
  local rows = { header }
  for _, c in ipairs(cells) do
    local row = { c.id }
    for _, p in ipairs(params) do row[#row + 1] = tostring(c.params[p]) end
    for _, m in ipairs(shown) do row[#row + 1] = stat_text(c.stats[m]) end
    row[#row + 1] = c.failed > 0 and format("%s (%d/%d failed)", c.status, c.failed, c.repeats) or c.status
    rows[#rows + 1] = row
  end
  local width = {}
  for _, row in ipairs(rows) do
    for i, cell in ipairs(row) do width[i] = math.max(width[i] or 0, utf8.len(cell) or #cell) end
  end
  local lines = {}
  for r, row in ipairs(rows) do
    local parts = {}
    for i, cell in ipairs(row) do
      local pad = string.rep(" ", width[i] - (utf8.len(cell) or #cell))
      parts[i] = (i == 1 or i == #row) and (cell .. pad) or (pad .. cell)
    end
    lines[#lines + 1] = "  " .. concat(parts, "  ")
    if r == 1 then
      local rule = {}
      for i = 1, #row do rule[i] = string.rep("-", width[i]) end
      lines[#lines + 1] = "  " .. concat(rule, "  ")
    end
  end
  return concat(lines, "\n") .. "\n"
end

-- ---- plots ------------------------------------------------------------------------

local function distinct(cells, name)
  local seen, out = {}, {}
  for _, c in ipairs(cells) do
    local v = c.params[name]
    if v ~= nil and not seen[v] then seen[v], out[#out + 1] = true, v end
  end
  table.sort(out, function(a, b)
    if type(a) == type(b) and type(a) ~= "boolean" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return out
end

local function all_numeric(values)
  for _, v in ipairs(values) do if type(v) ~= "number" then return false end end
  return #values > 0
end

--- Which parameter is on the x axis, which one makes the series, and
-- which ones split the plots (facets): from opts (x, series), else the
-- first numeric varying parameter, the next varying one, the rest.
function M.layout(cells, params, opts)
  opts = opts or {}
  local varying = {}
  for _, p in ipairs(params) do
    if #distinct(cells, p) > 1 then varying[#varying + 1] = p end
  end
  local x = opts.x
  if not x then
    for _, p in ipairs(varying) do
      if all_numeric(distinct(cells, p)) then x = p break end
    end
  end
  local series = opts.series
  if series == nil then
    for _, p in ipairs(varying) do
      if p ~= x then series = p break end
    end
  end
  local facets = {}
  for _, p in ipairs(varying) do
    if p ~= x and p ~= series then facets[#facets + 1] = p end
  end
  return { x = x, series = series or nil, facets = facets, varying = varying }
end

local function facet_label(params, facets)
  local parts = {}
  for i, f in ipairs(facets) do parts[i] = f .. " = " .. tostring(params[f]) end
  return concat(parts, ", ")
end

local MAX_PLOTS = 24

--- The y range shared by every panel of a metric (so panels compare at
-- a glance): { scale, domain = { lo, hi } } over the means ± sd of all
-- cells; log when the values are positive and span 30x or more.
function M.shared_y(cells, metric)
  local lo, hi = math.huge, -math.huge
  for _, c in ipairs(cells) do
    local st = c.stats[metric]
    if st and is_num(st.mean) then
      local sd = is_num(st.sd) and st.sd or 0
      lo, hi = math.min(lo, st.mean - sd, st.mean), math.max(hi, st.mean + sd)
    end
  end
  if lo == math.huge then return nil end
  local pos_lo = math.huge
  for _, c in ipairs(cells) do
    local st = c.stats[metric]
    if st and is_num(st.mean) and st.mean > 0 then pos_lo = math.min(pos_lo, st.mean) end
  end
  if lo > 0 and hi / lo >= 30 then
    return { scale = "log", domain = { lo / 1.15, hi * 1.15 } }
  end
  if hi <= lo then hi = lo + (lo ~= 0 and math.abs(lo) * 0.1 or 1) end
  local pad = (hi - lo) * 0.04
  if lo >= 0 then return { scale = "linear", domain = { 0, hi + pad } } end
  return { scale = "linear", domain = { lo - pad, hi + pad } }
end

--- The line plots of one metric: metric vs layout.x, one line per value of
-- layout.series, error bars = sd over repeats, one plot per combination
-- of the facet parameters, all on the same y range (M.shared_y). Returns
-- a list of {title, svg}.
function M.line_plots(cells, metric, layout, opts)
  opts = opts or {}
  if not layout.x then return {} end
  local shared = M.shared_y(cells, metric) or {}
  local xs = distinct(cells, layout.x)
  if not all_numeric(xs) then return {} end
  local groups, order = {}, {}
  for _, c in ipairs(cells) do
    local st = c.stats[metric]
    if st and st.mean then
      local fk = group_key(c.params, layout.facets)
      local g = groups[fk]
      if not g then
        g = { label = facet_label(c.params, layout.facets), series = {}, sorder = {} }
        groups[fk] = g
        order[#order + 1] = fk
      end
      local sv = layout.series and c.params[layout.series]
      local sk = tostring(sv)
      local s = g.series[sk]
      if not s then
        s = { name = layout.series and (layout.series .. " = " .. tostring(sv)) or metric, points = {}, sort = sv }
        g.series[sk] = s
        g.sorder[#g.sorder + 1] = sk
      end
      s.points[#s.points + 1] = { x = c.params[layout.x], y = st.mean, err = st.sd }
    end
  end
  table.sort(order)
  local plots = {}
  for _, fk in ipairs(order) do
    if #plots >= MAX_PLOTS then break end
    local g = groups[fk]
    table.sort(g.sorder, function(a, b)
      local va, vb = g.series[a].sort, g.series[b].sort
      if type(va) == "number" and type(vb) == "number" then return va < vb end
      return a < b
    end)
    local series = {}
    for _, sk in ipairs(g.sorder) do series[#series + 1] = g.series[sk] end
    local title = metric .. " vs " .. layout.x
    plots[#plots + 1] = {
      title = title, facet = g.label,
      svg = svg.lines {
        title = title, subtitle = g.label ~= "" and g.label or nil,
        series = series, width = opts.width or 560, height = opts.height or 340,
        x = { label = layout.x, scale = opts.x_scale },
        y = { label = metric, unit = opts.units and opts.units[metric], scale = shared.scale, domain = shared.domain },
      },
    }
  end
  return plots
end

--- The heat map of a metric over two parameters (mean over everything
-- else, repeats included).
function M.heatmap(cells, metric, rows_p, cols_p, opts)
  opts = opts or {}
  local rows, cols = distinct(cells, rows_p), distinct(cells, cols_p)
  local sums = {}
  for _, c in ipairs(cells) do
    local st = c.stats[metric]
    if st and st.mean then
      local k = tostring(c.params[rows_p]) .. "\31" .. tostring(c.params[cols_p])
      local s = sums[k] or { sum = 0, n = 0 }
      s.sum, s.n = s.sum + st.mean, s.n + 1
      sums[k] = s
    end
  end
  local values, rl, cl = {}, {}, {}
  for r, rv in ipairs(rows) do
    rl[r] = tostring(rv)
    values[r] = {}
    for c, cv in ipairs(cols) do
      local s = sums[tostring(rv) .. "\31" .. tostring(cv)]
      values[r][c] = s and s.sum / s.n or nil
    end
  end
  for c, cv in ipairs(cols) do cl[c] = tostring(cv) end
  return svg.heatmap {
    title = format("%s by %s and %s", metric, rows_p, cols_p),
    subtitle = opts.subtitle, rows = rl, cols = cl, values = values,
    ylabel = rows_p, xlabel = cols_p, unit = opts.units and opts.units[metric],
    width = opts.width or 620, height = math.max(220, 60 + 40 * #rl),
  }
end

--- The best and worst `n` cells by a metric's mean (goal = "min" or "max").
function M.ranked(cells, metric, goal, n)
  local list = {}
  for _, c in ipairs(cells) do
    if c.stats[metric] and c.stats[metric].mean then list[#list + 1] = c end
  end
  table.sort(list, function(a, b)
    local va, vb = a.stats[metric].mean, b.stats[metric].mean
    if va ~= vb then
      if goal == "max" then return va > vb end
      return va < vb
    end
    return a.index < b.index
  end)
  local best, worst = {}, {}
  for i = 1, math.min(n, #list) do best[i] = list[i] end
  for i = 1, math.min(n, #list) do worst[i] = list[#list - i + 1] end
  return best, worst
end

-- ---- HTML -------------------------------------------------------------------------

local CSS = [[
:root{--fg:#1b1f24;--muted:#5b6571;--line:#d8dde3;--bg:#f6f8fa}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:var(--fg);background:var(--bg);margin:0}
header,main{max-width:1240px;margin:0 auto;padding:12px 20px}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:0 0 8px}
section{background:#fff;border:1px solid var(--line);border-radius:6px;padding:14px;margin:14px 0;overflow-x:auto}
.grid{display:flex;flex-wrap:wrap;gap:10px}figure{margin:0;flex:1 1 520px;max-width:100%}
svg{max-width:100%;height:auto}
table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid var(--line);padding:3px 7px;text-align:right}
th{overflow-wrap:anywhere;vertical-align:bottom}td{white-space:nowrap}
th:first-child,td:first-child{text-align:left}.muted{color:var(--muted)}.failed{color:#b42318}
a{color:#35589a;text-decoration:none}a:hover{text-decoration:underline}
]]

local function html_table(header, rows)
  local out = { "<table><tr>" }
  for _, h in ipairs(header) do out[#out + 1] = "<th>" .. esc(h) .. "</th>" end
  out[#out + 1] = "</tr>"
  for _, row in ipairs(rows) do
    out[#out + 1] = "<tr>"
    for _, v in ipairs(row) do
      out[#out + 1] = "<td>" .. (type(v) == "table" and v.html or esc(tostring(v))) .. "</td>"
    end
    out[#out + 1] = "</tr>"
  end
  out[#out + 1] = "</table>"
  return concat(out)
end

-- A cell's id linking to its experiment's report (the first repeat's;
-- the others follow as r2, r3 ...), and to its "Over time" charts.
local function cell_link(c)
  if not c.dirs or #c.dirs == 0 then return c.id end
  local parts = { format('<a href="%s/result/report.html">%s</a>', esc(c.dirs[1]), esc(c.id)) }
  for i = 2, #c.dirs do
    parts[#parts + 1] = format('<a href="%s/result/report.html">r%d</a>', esc(c.dirs[i]), i)
  end
  -- what happened over time in the cell (its report's charts, kb.report.overtime)
  parts[#parts + 1] = format('<a href="%s/result/report.html#overtime" class="muted">over time</a>', esc(c.dirs[1]))
  return { html = concat(parts, " ") }
end

-- mean ± sd in the metric's unit (durations as in the plots: "6.2 min
-- ±12 s"), plain numbers otherwise
local function unit_stat_text(st, unit)
  if unit ~= "s" or not st or not is_num(st.mean) then return stat_text(st) end
  local t = svg.format_value(st.mean, "s")
  if is_num(st.sd) then t = t .. " ±" .. svg.format_value(st.sd, "s") end
  return t
end

local function cell_rows(list, params, metrics, units)
  local rows = {}
  for _, c in ipairs(list) do
    local row = { cell_link(c) }
    for _, p in ipairs(params) do row[#row + 1] = tostring(c.params[p]) end
    for _, m in ipairs(metrics) do row[#row + 1] = unit_stat_text(c.stats[m], units and units[m]) end
    row[#row + 1] = c.failed > 0 and format("%d/%d failed%s", c.failed, c.repeats,
      c.error and (": " .. tostring(c.error):sub(1, 120)) or "") or "ok"
    rows[#rows + 1] = row
  end
  return rows
end

--- The sweep.html page. info: {name, seed, hash, dims = {{name, values}},
-- repeats, params (parameter columns), varying (those that vary), metrics, report = {x, series,
-- metrics, heatmap = {rows, cols, metric}, goal = {metric, minimize},
-- units = {[metric] = "s"}}, searches = list of search results,
-- total (cells x repeats planned)}.
function M.html(records, info)
  local ropts = info.report or {}
  local metrics = M.metric_names(records, info.metrics)
  local cells = M.cells(records, metrics)
  local layout = M.layout(cells, info.params, ropts)
  if info.sampled then
    -- sampled values rarely repeat: one cloud of points per metric, no facets
    layout.series = ropts.series or nil
    layout.facets = {}
  end
  -- tables show what varies; the fixed parameters are listed once
  local shown, fixed = {}, {}
  local varies = {}
  for _, p in ipairs(info.varying or info.params) do varies[p] = true end
  for _, p in ipairs(info.params) do
    if varies[p] then shown[#shown + 1] = p
    elseif cells[1] then fixed[#fixed + 1] = { p, tostring(cells[1].params[p]) } end
  end
  local plot_metrics = ropts.metrics or {}
  if #plot_metrics == 0 then
    for i = 1, math.min(3, #metrics) do plot_metrics[i] = metrics[i] end
  end
  local ok, failed = 0, 0
  for _, r in ipairs(records) do
    if r.status == "ok" then ok = ok + 1 else failed = failed + 1 end
  end
  local body = {}
  local dims = {}
  for _, d in ipairs(info.dims or {}) do
    local vals = {}
    for i, v in ipairs(d.values or {}) do vals[i] = tostring(v) end
    dims[#dims + 1] = { d.name, d.values and concat(vals, ", ") or d.range or "" }
  end
  body[#body + 1] = format([[<section id="summary"><h2>Sweep</h2><p>%d of %d cell runs recorded (%d ok, %d failed), %d cells, %s repeat(s), seed %s, definition %s.%s</p>%s</section>]],
    #records, info.total or #records, ok, failed, #cells, tostring(info.repeats or 1), esc(tostring(info.seed)),
    esc(tostring(info.hash)), info.complete == false and ' <b class="failed">Incomplete: re-run the same command to finish it.</b>' or "",
    (#dims > 0 and html_table({ "parameter", "values" }, dims) or "") ..
    (#fixed > 0 and ("<h3>Fixed parameters</h3>" .. html_table({ "parameter", "value" }, fixed)) or ""))

  if layout.x then
    local figs = {}
    for _, m in ipairs(plot_metrics) do
      for _, p in ipairs(M.line_plots(cells, m, layout, ropts)) do
        figs[#figs + 1] = "<figure>" .. p.svg .. "</figure>"
      end
    end
    if #figs > 0 then
      body[#body + 1] = format('<section id="lines"><h2>Metrics vs %s</h2><p class="muted">One line per %s%s; points are means over repeats, error bars one standard deviation.</p><div class="grid">%s</div></section>',
        esc(layout.x), esc(layout.series or "sweep"), #layout.facets > 0 and (", one plot per " .. esc(concat(layout.facets, " x "))) or "",
        concat(figs))
    end
  end

  local hm = ropts.heatmap or {}
  local hrows, hcols = hm.rows or layout.series, hm.cols or layout.x
  if info.sampled and not ropts.heatmap then hrows = nil end
  if hrows and hcols and hrows ~= hcols and #metrics > 0 then
    local hmetric = hm.metric or plot_metrics[1]
    local others = {}
    for _, p in ipairs(layout.varying) do
      if p ~= hrows and p ~= hcols then others[#others + 1] = p end
    end
    body[#body + 1] = format('<section id="heatmap"><h2>Heat map</h2><figure>%s</figure></section>',
      M.heatmap(cells, hmetric, hrows, hcols, { units = ropts.units,
        subtitle = #others > 0 and ("mean over " .. concat(others, ", ") .. " and repeats") or "mean over repeats" }))
  end

  local goal = ropts.goal or {}
  local gmetric = goal.metric or plot_metrics[1]
  if gmetric then
    local dir = goal.minimize == false and "max" or "min"
    local best, worst = M.ranked(cells, gmetric, dir, ropts.top or 5)
    local header = { "cell" }
    for _, p in ipairs(shown) do header[#header + 1] = p end
    for _, m in ipairs(plot_metrics) do header[#header + 1] = m end
    header[#header + 1] = "status"
    body[#body + 1] = format('<section id="best"><h2>Best and worst cells by %s (%s is better)</h2><h3>Best</h3>%s<h3>Worst</h3>%s</section>',
      esc(gmetric), dir == "min" and "lower" or "higher", html_table(header, cell_rows(best, shown, plot_metrics, ropts.units)),
      html_table(header, cell_rows(worst, shown, plot_metrics, ropts.units)))
  end

  if info.searches and #info.searches > 0 then
    local rows = {}
    for _, s in ipairs(info.searches) do
      local pts = {}
      for i, p in ipairs(s.points) do
        pts[i] = format("%s→%s%s", tostring(p.value), num_text(p.metric), p.crossed and "✗" or "")
      end
      rows[#rows + 1] = { s.base_id or "-", s.base_label or "", tostring(s.last_ok or "-"),
        tostring(s.first_crossing or "-"), concat(pts, "  ") }
    end
    body[#body + 1] = format('<section id="search"><h2>Search</h2>%s</section>',
      html_table({ "base", "parameters", "last value under the limit", "first crossing", "points (value→metric, ✗ crossed)" }, rows))
  end

  local header = { "cell" }
  for _, p in ipairs(shown) do header[#header + 1] = p end
  for _, m in ipairs(metrics) do header[#header + 1] = m end
  header[#header + 1] = "status"
  body[#body + 1] = format('<section id="cells"><h2>All cells (mean ±sd over repeats)</h2><p class="muted">A cell\'s id links to its experiment\'s report (plots of its calls, its figures, parameters).</p>%s</section>',
    html_table(header, cell_rows(cells, shown, metrics, ropts.units)))

  return concat({
    "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1"><meta name="generator" content="kbrun">',
    format("<title>%s — kbrun sweep</title>", esc(info.name)),
    "<style>" .. CSS .. "</style></head><body>",
    format("<header><h1>Sweep %s</h1><p class=\"muted\">sweep.csv holds every cell x repeat; each cell's experiment folder holds its result.json and report.html (linked from the tables below). One file: no scripts, no network.</p></header>", esc(info.name)),
    "<main>", concat(body, "\n"), "</main></body></html>", "",
  }, "\n")
end

--- Writes sweep.csv (and with html = true sweep.html) into dir; returns
-- their paths.
function M.write(dir, records, info, html)
  local metrics = M.metric_names(records, info.metrics)
  local sorted = M.sorted(records)
  local csv_path = fs.join(dir, "sweep.csv")
  fs.write(csv_path, M.csv_text(sorted, info.params, metrics), { sync = false })
  local html_path
  if html then
    M.write_cell_reports(dir, sorted)
    html_path = fs.join(dir, "sweep.html")
    fs.write(html_path, M.html(sorted, info))
    -- what sweep.html was made from besides the journal, so that
    -- `kbrun report SWEEP_DIR` can make it again without the scenario
    local okj, text = pcall(json.encode, plain(info))
    if okj then fs.write(fs.join(dir, INFO_FILE), text .. "\n", { sync = false }) end
  end
  return csv_path, html_path
end

--- The done records of a sweep folder's journal.jsonl, in the order they
-- were first recorded (a later record of the same cell x repeat wins).
function M.journal_records(dir)
  local path = fs.join(dir, "journal.jsonl")
  local text = fs.read(path)
  local order, by = {}, {}
  local n = 0
  for line in text:gmatch("[^\n]+") do
    n = n + 1
    local ok, rec = pcall(json.decode, line)
    if ok and type(rec) == "table" and rec.event == "done" and rec.key and rec["repeat"] then
      local k = tostring(rec.key) .. "#" .. tostring(rec["repeat"])
      if not by[k] then order[#order + 1] = k end
      by[k] = rec
    end
  end
  local list = {}
  for _, k in ipairs(order) do list[#list + 1] = by[k] end
  return list
end

--- Makes a sweep folder's sweep.html (and sweep.csv, and every cell's
-- report.html that is missing) again from its journal.jsonl and the
-- sweep-report.json written with sweep.html; without that file (a sweep
-- killed before its end), from the journal's definition. Returns the
-- path of sweep.html. kbrun report SWEEP_DIR calls it.
function M.rebuild(dir, opts)
  opts = opts or {}
  if fs.exists(fs.join(dir, "journal.jsonl")) ~= "file" then
    error(format("kb.sweep.report: '%s' has no journal.jsonl: not a sweep folder", dir), 2)
  end
  local records = M.journal_records(dir)
  local info
  local ipath = fs.join(dir, INFO_FILE)
  if fs.exists(ipath) == "file" then
    local ok, v = pcall(json.decode, fs.read(ipath))
    if ok and type(v) == "table" then info = v end
  end
  if not info then
    local first = fs.read(fs.join(dir, "journal.jsonl")):match("^[^\n]+")
    local ok, head = pcall(json.decode, first or "")
    local def = ok and type(head) == "table" and head.definition or {}
    local names, dims = {}, {}
    for k in pairs(type(def.matrix) == "table" and def.matrix or {}) do names[#names + 1] = k end
    table.sort(names)
    local order = type(def.order) == "table" and def.order or names
    for _, k in ipairs(order) do dims[#dims + 1] = { name = k, values = def.matrix[k] } end
    local params = {}
    for _, d in ipairs(dims) do params[#params + 1] = d.name end
    local fixed = {}
    for k in pairs(type(def.params) == "table" and def.params or {}) do fixed[#fixed + 1] = k end
    table.sort(fixed)
    for _, k in ipairs(fixed) do params[#params + 1] = k end
    local varying = {}
    for _, d in ipairs(dims) do varying[#varying + 1] = d.name end
    info = { name = def.name or dir:match("([^/]+)/*$"), seed = ok and head.seed or nil, hash = ok and head.hash or nil,
      dims = dims, repeats = def.repeats, params = params, varying = varying, total = #records }
  end
  if opts.force_cells then
    for _, r in ipairs(records) do
      if type(r.dir) == "string" then pcall(fs.remove, fs.join(dir, r.dir, "result", "report.html")) end
    end
  end
  local _, html_path = M.write(dir, records, info, true)
  return html_path
end

--- Writes result/report.html (kb.report) of every cell folder that has a
-- result.json and no report yet; returns how many were written. A cell
-- whose report cannot be written is skipped (its link then shows the
-- browser's "not found"); the reason is logged.
function M.write_cell_reports(dir, records)
  local kreport = require "kb.report"
  local n = 0
  for _, r in ipairs(records) do
    if type(r.dir) == "string" then
      local cdir = fs.join(dir, r.dir)
      local result = fs.join(cdir, "result", "result.json")
      if fs.exists(result) == "file" and fs.exists(fs.join(cdir, "result", "report.html")) ~= "file" then
        local ok, err = pcall(kreport.write, cdir, nil, {
          title = format("%s: cell %s, repeat %s", tostring(r.sweep or dir:match("[^/]+$") or "sweep"), tostring(r.id), tostring(r["repeat"])),
          environment = false })
        if ok then n = n + 1 else require("kb.log").warn("sweep: %s: report.html: %s", cdir, tostring(err)) end
      end
    end
  end
  return n
end

return M
