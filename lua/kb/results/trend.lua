--- kb.results.trend: one metric across the experiments of a results
-- database, each point judged against the one before with kb.results.compare's
-- statistics (what `kbrun history --metric` prints and `kbrun report
-- --history` draws).
--
--   local trend = require "kb.results.trend"
--   local t = trend.series(store, { metric = "run.create", stat = "p99",
--     scenario = "taxi_50runs", tolerance = 0.05, test = "mw", alpha = 0.05 })
--   -- t.points = { {id, started_at, status, value, relative, p, mark}, ... }
--   print(trend.sparkline(t.points))
local compare = require "kb.results.compare"

local M = {}

--- trend.parse_metric("name[:stat]") -> name, stat (nil when not given).
function M.parse_metric(text)
  local name, stat = tostring(text):match("^(.-):([%w]+)$")
  if not name or name == "" then return text, nil end
  return name, compare.check_stat(stat)
end

--- trend.series(store, opts) -> { metric, stat, kind, better, tolerance,
-- test, alpha, points, skipped }. opts: metric (a histogram key or name,
-- a counter, a result field: as kbrun compare's --metric), stat (default
-- p99), tolerance (0.05), better, test ("mw", "ks", "none"), alpha (0.05),
-- and the store:experiments filter (scenario, since, limit). Points are
-- oldest first; each but the first has relative (the change from the
-- point before), p (the test's p-value, histograms) and mark:
-- "regressed" (worse by more than the tolerance and significant, as a
-- kbrun compare gate), "improved" (better by as much, significant) or
-- nil. Experiments without the metric are counted in skipped.
function M.series(store, opts)
  local stat = opts.stat or "p99"
  local tolerance = opts.tolerance or 0.05
  local gate = { metric = opts.metric, stat = stat, tolerance = tolerance, better = opts.better }
  local cmp_opts = { gates = { gate }, test = opts.test, alpha = opts.alpha }
  local out = { metric = opts.metric, stat = stat, tolerance = tolerance, test = opts.test or "mw",
    alpha = opts.alpha or 0.05, points = {}, skipped = 0 }
  local prev
  for _, e in ipairs(store:experiments { scenario = opts.scenario, since = opts.since, limit = opts.limit }) do
    local doc = store:document(e.id)
    -- the value alone: the document against itself, without a test
    local own = compare.documents(doc, doc, { gates = { gate }, test = "none" }).gates[1]
    if own.error then
      out.skipped = out.skipped + 1
    else
      out.kind, out.better, out.stat = own.kind, own.better, own.stat
      local point = { id = e.id, started_at = e.started_at, status = e.status, value = own.a }
      if prev then
        local g = compare.documents(prev, doc, cmp_opts).gates[1]
        if not g.error then
          point.relative, point.p = g.relative, g.test and g.test.p
          local significant = g.test == nil or g.test.significant
          if g.regressed then point.mark = "regressed"
          elseif significant and g.worse_by and -g.worse_by > tolerance then point.mark = "improved" end
        end
      end
      out.points[#out.points + 1] = point
      prev = doc
    end
  end
  return out
end

local BARS = { "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█" }

--- trend.sparkline(points) -> one character per point, ▁ (lowest value)
-- to █ (highest); all equal: ▄ each.
function M.sparkline(points)
  local lo, hi
  for _, p in ipairs(points) do
    lo = (lo == nil or p.value < lo) and p.value or lo
    hi = (hi == nil or p.value > hi) and p.value or hi
  end
  local out = {}
  for i, p in ipairs(points) do
    local k = (hi == lo) and 4 or (1 + math.floor((p.value - lo) / (hi - lo) * 7 + 0.5))
    out[i] = BARS[k]
  end
  return table.concat(out)
end

return M
