--- kb.results.history_page: `kbrun report --history`, a self-contained
-- HTML page of chosen metrics over the experiments of a results database:
-- one plot per metric (a line over the experiments, oldest first, with
-- its regressions marked), and a table of every value with its change and
-- mark (kb.results.trend: kbrun compare's statistics against the
-- experiment before).
--
--   local page = require "kb.results.history_page"
--   local metrics = page.default_metrics(store, filter)
--   local html, series = page.html(store, metrics, filter)
local svg = require "kb.report.svg"
local trend = require "kb.results.trend"
local compare = require "kb.results.compare"
local summary = require "kb.report.summary"

local M = {}

local format, concat = string.format, table.concat
local esc = svg.escape

--- page.default_metrics(store, filter) -> { {metric, stat} }: the p99 of
-- every histogram name of the most recent experiment (at most 12, sorted;
-- not aux.* nor *.attempt), then success_rate when its result has one.
function M.default_metrics(store, filter)
  local last = store:experiments { scenario = filter.scenario, since = filter.since, limit = 1 }[1]
  if not last then return {} end
  local names = store:exec("SELECT DISTINCT name FROM metrics WHERE experiment_id = ? AND kind = 'histogram' "
    .. "ORDER BY name", { last.id })
  local out = {}
  for _, n in ipairs(names) do
    -- kbrun's own housekeeping calls and per-attempt twins are left out
    if #out < 12 and not n.name:find("^aux%.") and not n.name:find("%.attempt$") then
      out[#out + 1] = { metric = n.name, stat = "p99" }
    end
  end
  local doc = store:document(last.id)
  if type(doc.result) == "table" and type(doc.result.success_rate) == "number" then
    out[#out + 1] = { metric = "success_rate" }
  end
  return out
end

local function value_text(kind, v)
  if v == nil then return "-" end
  if kind == "histogram" then return summary.duration(v) end
  return compare.num_text(v)
end

local function plot(t)
  local line, marks = {}, {}
  for i, p in ipairs(t.points) do
    line[#line + 1] = { x = i, y = p.value }
    if p.mark == "regressed" then marks[#marks + 1] = { x = i, y = p.value } end
  end
  local series = { { name = format("%s %s", t.metric, t.stat), points = line, color = "#35589a" } }
  if #marks > 0 then
    series[2] = { name = "regressed (vs the one before)", points = marks, line = false, color = "#c0392b" }
  end
  return svg.lines {
    title = format("%s %s", t.metric, t.stat),
    subtitle = format("%d experiment(s), %s is better; %d regression(s)", #t.points, t.better, #marks),
    series = series, width = 620, height = 300,
    x = { label = "experiment (oldest first)", zero = false },
    y = { unit = t.kind == "histogram" and "s" or nil, label = t.kind == "histogram" and (t.stat .. " latency") or t.metric,
      scale = "linear" },
  }
end

--- page.html(store, metrics, filter [, info]) -> html, series: the page of
-- metrics ({metric, stat} each) over the experiments filter selects
-- (scenario, since, limit, tolerance, test, alpha); info.source names the
-- database. Metrics no experiment has are listed as such.
function M.html(store, metrics, filter, info)
  info = info or {}
  local all, missing, regressions = {}, {}, 0
  for _, m in ipairs(metrics) do
    local t = trend.series(store, { metric = m.metric, stat = m.stat, scenario = filter.scenario,
      since = filter.since, limit = filter.limit, tolerance = filter.tolerance, test = filter.test,
      alpha = filter.alpha })
    if #t.points == 0 then
      missing[#missing + 1] = m.metric
    else
      all[#all + 1] = t
      for _, p in ipairs(t.points) do if p.mark == "regressed" then regressions = regressions + 1 end end
    end
  end
  local exps = store:experiments { scenario = filter.scenario, since = filter.since, limit = filter.limit }
  local title = filter.scenario and ("History of " .. filter.scenario) or "History"
  local body = {}
  local figs = {}
  for _, t in ipairs(all) do figs[#figs + 1] = "<figure>" .. plot(t) .. "</figure>" end
  body[#body + 1] = format('<section id="plots"><h2>Metrics over experiments</h2><div class="plots">%s</div>%s</section>',
    concat(figs), #missing > 0 and format('<p class="muted">Not in any experiment: %s</p>', esc(concat(missing, ", "))) or "")
  -- per experiment: what changed significantly against the one before
  local marks = {}
  for _, t in ipairs(all) do
    for _, p in ipairs(t.points) do
      if p.mark then
        marks[p.id] = marks[p.id] or {}
        table.insert(marks[p.id], format("%s%s %s %s (%s%s)", p.mark == "regressed" and "REGRESSED " or "improved ",
          t.metric, t.stat, value_text(t.kind, p.value), compare.pct_text(p.relative),
          p.p and format(", p=%.3g", p.p) or ""))
      end
    end
  end
  local rows = {}
  for i, e in ipairs(exps) do
    local m = marks[e.id]
    local bad = false
    for _, text in ipairs(m or {}) do bad = bad or text:find("^REGRESSED") ~= nil end
    rows[#rows + 1] = format('<tr%s><td>%d</td><td class="kind">%s</td><td class="kind">%s</td><td class="kind">%s</td>'
      .. '<td class="kind changes">%s</td></tr>', bad and ' class="fail"' or "", i, esc(e.id), esc(e.started_at or "-"),
      esc(e.status or "-"), m and esc(concat(m, "; ")) or "")
  end
  -- per metric: its range and where it regressed
  local mrows = {}
  for _, t in ipairs(all) do
    local lo, hi, at = math.huge, -math.huge, {}
    local index = {}
    for i, e in ipairs(exps) do index[e.id] = i end
    for _, p in ipairs(t.points) do
      lo, hi = math.min(lo, p.value), math.max(hi, p.value)
      if p.mark == "regressed" then at[#at + 1] = "#" .. tostring(index[p.id]) end
    end
    mrows[#mrows + 1] = format('<tr%s><td class="kind">%s %s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class="kind">%s</td></tr>',
      #at > 0 and ' class="fail"' or "", esc(t.metric), esc(t.stat), #t.points, esc(value_text(t.kind, t.points[1].value)),
      esc(value_text(t.kind, t.points[#t.points].value)), esc(value_text(t.kind, lo)), esc(value_text(t.kind, hi)),
      #at > 0 and esc(concat(at, " ")) or "none")
  end
  local how = format("Each value is compared with the one before it (the previous experiment that has the metric), as "
    .. "<code>kbrun compare</code> does: REGRESSED when worse by more than the tolerance (%s) and, for a histogram, "
    .. "significantly (%s); improved when better by as much.", esc((compare.pct_text(filter.tolerance or 0.05):gsub("^%+", ""))),
    esc(filter.test == "none" and "no test" or format("%s, alpha %g", filter.test == "ks" and "Kolmogorov-Smirnov" or "Mann-Whitney U",
      filter.alpha or 0.05)))
  body[#body + 1] = format('<section id="metrics"><h2>Metrics</h2><p class="muted">%s</p><table class="grid num"><thead><tr>'
    .. '<th>metric</th><th>experiments</th><th>first</th><th>latest</th><th>min</th><th>max</th><th>regressed at</th></tr></thead>'
    .. '<tbody>%s</tbody></table></section>', how, concat(mrows))
  body[#body + 1] = format('<section id="experiments"><h2>Experiments (oldest first)</h2><table class="grid num"><thead><tr>'
    .. '<th>#</th><th>experiment</th><th>started</th><th>status</th><th>significant changes</th></tr></thead><tbody>%s</tbody>'
    .. '</table></section>', concat(rows))
  local regressed_exps = 0
  for _, list in pairs(marks) do
    for _, text in ipairs(list) do
      if text:find("^REGRESSED") then regressed_exps = regressed_exps + 1 break end
    end
  end
  local verdict = regressions > 0 and format("%d regression(s) in %d of %d experiment(s)", regressions, regressed_exps, #exps)
    or format("no regression in %d experiment(s)", #exps)
  local html = concat({
    "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1"><meta name="generator" content="kbrun">',
    format("<title>%s — kbrun</title>", esc(title)),
    "<style>" .. require("kb.report").CSS .. "table.num td.changes{white-space:normal}</style></head><body>",
    format('<header><h1>%s</h1><p class="verdict">%s</p><p class="muted">From %s. One self-contained file: no scripts, no network.</p></header>',
      esc(title), esc(verdict), esc(info.source or "the results database")),
    "<main>", concat(body, "\n"), "</main></body></html>", "",
  }, "\n")
  return html, all
end

return M
