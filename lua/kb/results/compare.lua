--- kb.results.compare: compares two experiments, or two sweeps cell by cell, metric
-- by metric, and decides whether a chosen metric regressed
-- (`kbrun compare A B`).
--
--   local compare = require "kb.results.compare"
--   local r = compare.paths("exp/a-...", "exp/b-...", {
--     gates = { { metric = "http.get", stat = "p99", tolerance = 0.10 } } })
--   print(compare.format(r)); os.exit(r.regressed and 1 or 0)
--
-- For every histogram present in both: p50 and p99 (and the gate's stat)
-- of A and B, their difference (absolute and relative to A), and a
-- significance test on the two whole distributions, computed from the
-- histograms' buckets: the Mann-Whitney U test by default, or the two-sample
-- Kolmogorov-Smirnov test (opts.test = "ks"). docs/scale-out.md explains the
-- choice. Counters and the numeric fields of run()'s result (success_rate,
-- runs.succeeded, ...) are compared as numbers: they are single values, so
-- there is no test for them.
--
-- A gate {metric, stat, tolerance, better} regresses when B is worse than
-- A by more than tolerance (a fraction of A's value) and, for a histogram,
-- the test finds the difference significant (p < alpha). A metric name
-- matches a metric key exactly, or else every label set of that name (the
-- histograms merged, as kb.thresholds does); a result field is named by its
-- path (success_rate, runs.succeeded, optionally prefixed "result.").
local fs = require "kb.fs"
local json = require "kb.json"
local hist = require "kb.hist"
local merge = require "kb.results.merge"

local M = {}

local format, concat = string.format, table.concat
local exp, sqrt, abs, pi = math.exp, math.sqrt, math.abs, math.pi

local function usage_error(fmt, ...)
  error(setmetatable({ class = "usage", message = format(fmt, ...) },
    { __tostring = function(e) return e.message end }), 0)
end

-- ---- statistics ----------------------------------------------------------------

--- compare.erfc(x): the complementary error function (series below 2.5,
-- continued fraction above; relative error well below 1e-8).
function M.erfc(x)
  if x < 0 then return 2 - M.erfc(-x) end
  if x < 2.5 then
    local sum, term, n = x, x, 0
    repeat
      n = n + 1
      term = -term * x * x / n
      local add = term / (2 * n + 1)
      sum = sum + add
    until abs(add) < 1e-17 * abs(sum) or n > 200
    return 1 - 2 / sqrt(pi) * sum
  end
  local f = x
  for k = 80, 1, -1 do f = x + (k / 2) / f end
  return exp(-x * x) / sqrt(pi) / f
end

-- The distinct values of both histograms in increasing order, each with
-- its count in A and in B. A bucket is one value: equal layouts give the
-- same buckets, so values in one bucket are ties.
local function joint_buckets(ha, hb)
  local list, index = {}, {}
  local function add(h, side)
    for _, b in ipairs(h:buckets()) do
      local key = format("%.17g/%.17g", b.low, b.high)
      local e = index[key]
      if not e then
        e = { low = b.low, high = b.high, a = 0, b = 0 }
        index[key] = e
        list[#list + 1] = e
      end
      e[side] = e[side] + b.count
    end
  end
  add(ha, "a")
  add(hb, "b")
  table.sort(list, function(x, y)
    if x.low ~= y.low then return x.low < y.low end
    return x.high < y.high
  end)
  return list
end

--- compare.mann_whitney(ha, hb) -> { u, z, p, effect }: the two-sided
-- Mann-Whitney U test of two histograms, ties (values in one bucket) given
-- mid-ranks, with the tie-corrected variance, a continuity correction and
-- the normal approximation. effect = P(B > A) + P(B = A) / 2 (0.5: neither
-- tends to be larger; above 0.5: B tends to be larger, i.e. slower).
-- Empty histograms give p = 1.
function M.mann_whitney(ha, hb)
  local n, m = ha:count(), hb:count()
  if n == 0 or m == 0 then return { u = 0, z = 0, p = 1, effect = 0.5 } end
  local N = n + m
  local rank_sum_a, below, ties = 0, 0, 0
  for _, e in ipairs(joint_buckets(ha, hb)) do
    local t = e.a + e.b
    rank_sum_a = rank_sum_a + e.a * (below + (t + 1) / 2)
    below = below + t
    ties = ties + (t * t * t - t)
  end
  local u_a = rank_sum_a - n * (n + 1) / 2 -- pairs with A > B (ties count 1/2)
  local u_b = n * m - u_a
  local mean = n * m / 2
  local var = n * m / 12 * ((N + 1) - ties / (N * (N - 1)))
  local z, p = 0, 1
  if var > 0 then
    local d = u_b - mean
    local cc = d > 0 and -0.5 or (d < 0 and 0.5 or 0)
    z = (d + cc) / sqrt(var)
    p = math.min(1, M.erfc(abs(z) / sqrt(2)))
  end
  return { u = u_b, z = z, p = p, effect = u_b / (n * m) }
end

-- Kolmogorov's limiting distribution: P(sqrt(n) D > lambda).
local function kolmogorov_q(lambda)
  if lambda < 0.2 then return 1 end
  local sum, sign = 0, 1
  for k = 1, 100 do
    local term = exp(-2 * k * k * lambda * lambda)
    sum = sum + sign * term
    if term < 1e-16 then break end
    sign = -sign
  end
  return math.max(0, math.min(1, 2 * sum))
end

--- compare.ks(ha, hb) -> { d, p, effect }: the two-sample Kolmogorov-Smirnov
-- test on the histograms' cumulative distributions, evaluated at bucket
-- boundaries, p from Kolmogorov's distribution with Stephens' small-sample
-- correction. Bucketing makes it conservative (D can only shrink).
-- effect as in mann_whitney, for the direction.
function M.ks(ha, hb)
  local n, m = ha:count(), hb:count()
  if n == 0 or m == 0 then return { d = 0, p = 1, effect = 0.5 } end
  local ca, cb, d = 0, 0, 0
  for _, e in ipairs(joint_buckets(ha, hb)) do
    ca, cb = ca + e.a, cb + e.b
    d = math.max(d, abs(ca / n - cb / m))
  end
  local ne = n * m / (n + m)
  local lambda = (sqrt(ne) + 0.12 + 0.11 / sqrt(ne)) * d
  return { d = d, p = kolmogorov_q(lambda), effect = M.mann_whitney(ha, hb).effect }
end

local TESTS = { mw = { "mann-whitney", M.mann_whitney }, ks = { "kolmogorov-smirnov", M.ks } }

-- ---- options -------------------------------------------------------------------

--- compare.parse_tolerance("10%" | "0.1") -> 0.1: a fraction of A's value.
function M.parse_tolerance(text)
  local s = tostring(text)
  local pct = s:match("^%s*([%d.]+)%s*%%%s*$")
  local v = pct and tonumber(pct) and tonumber(pct) / 100 or (s:match("^%s*[%d.]+%s*$") and tonumber(s))
  if not v or v < 0 then
    usage_error("--tolerance wants a percentage like 10%% or a fraction like 0.1, got '%s'", s)
  end
  return v
end

local STATS = { p50 = 50, p75 = 75, p90 = 90, p95 = 95, p99 = 99, p999 = 99.9, p9999 = 99.99 }

local function stat_of(h, stat)
  if h:count() == 0 then return nil end
  if STATS[stat] then return h:percentile(STATS[stat]) end
  if stat == "mean" then return h:mean() end
  if stat == "max" then return h:max() end
  if stat == "min" then return h:min() end
  return nil
end

--- compare.check_stat(stat) -> stat, or raises class "usage".
function M.check_stat(stat)
  if not STATS[stat] and stat ~= "mean" and stat ~= "max" and stat ~= "min" then
    usage_error("--stat wants p50, p75, p90, p95, p99, p999, p9999, mean, min or max, got '%s'", tostring(stat))
  end
  return stat
end

-- ---- loading -----------------------------------------------------------------------

local function canonical(v) return json.encode(v == nil and json.null or v, { sort_keys = true }) end

local function is_experiment(dir)
  return fs.exists(fs.join(dir, "result", "result.json")) == "file"
end

-- Experiment folders inside a sweep (or any folder of experiments): its
-- children and grandchildren holding result/result.json.
local function experiments_in(dir)
  local found = {}
  for _, name in ipairs(fs.list(dir)) do
    local sub = fs.join(dir, name)
    if name:sub(1, 1) ~= "." and fs.exists(sub) == "dir" then
      if is_experiment(sub) then
        found[#found + 1] = sub
      else
        for _, name2 in ipairs(fs.list(sub)) do
          local sub2 = fs.join(sub, name2)
          if fs.exists(sub2) == "dir" and is_experiment(sub2) then found[#found + 1] = sub2 end
        end
      end
    end
  end
  return found
end

-- Numeric leaves of run()'s result, by dotted path (arrays skipped).
local function numeric_fields(result, prefix, out, depth)
  out = out or {}
  if type(result) ~= "table" or depth and depth > 4 then return out end
  for k, v in pairs(result) do
    if type(k) == "string" then
      local path = prefix and (prefix .. "." .. k) or k
      if type(v) == "number" then out[path] = v
      elseif type(v) == "table" and #v == 0 then numeric_fields(v, path, out, (depth or 0) + 1) end
    end
  end
  return out
end

-- A kb.sweep cell's result.json holds run()'s flattened return value as
-- `metrics` (no snapshot): seen here as the result of a run without
-- metrics.
local function normalize(doc)
  if type(doc.metrics) == "table" and doc.metrics.version == nil and doc.result == nil then
    local d = {}
    for k, v in pairs(doc) do d[k] = v end
    d.result, d.metrics = doc.metrics, { version = 1, metrics = {} }
    d.scenario = d.scenario or { name = doc.sweep }
    return d
  end
  return doc
end

local function read(path) return normalize(merge.read(path)) end

-- Repeats of a cell: histograms merged exactly (more samples of the same
-- distribution); counters and numeric result fields averaged, so cells
-- with different numbers of repeats compare.
local function combine_repeats(docs)
  local doc = merge.documents(docs, { force = true })
  for _, m in ipairs(doc.metrics.metrics) do
    if m.kind ~= "histogram" then m.value = m.value / #docs end
  end
  local sums, counts = {}, {}
  for _, d in ipairs(docs) do
    for path, v in pairs(numeric_fields(d.result)) do
      sums[path], counts[path] = (sums[path] or 0) + v, (counts[path] or 0) + 1
    end
  end
  local result = {}
  for path, sum in pairs(sums) do result[path] = sum / counts[path] end
  doc.result, doc.repeats = result, #docs
  return doc
end

--- compare.load(path) -> { kind = "experiment", dir, doc } or
-- { kind = "sweep", dir, cells = { {key, params, scenario, doc, dirs} } }.
-- A sweep is any folder of experiment folders; experiments with the same
-- scenario and parameters (repeats) form one cell, their results merged
-- (kb.results.merge). Raises class "usage" for a path that holds no experiment.
function M.load(path)
  local kind = fs.exists(path)
  if kind == "file" then return { kind = "experiment", dir = path, doc = read(path) } end
  if kind ~= "dir" then usage_error("compare: '%s' does not exist", path) end
  if is_experiment(path) then return { kind = "experiment", dir = path, doc = read(path) } end
  local dirs = experiments_in(path)
  if #dirs == 0 then
    usage_error("compare: '%s' is neither an experiment folder (no result/result.json) nor a sweep "
      .. "(no experiment folders inside)", path)
  end
  local cells, by_key = {}, {}
  for _, dir in ipairs(dirs) do
    local doc = read(dir)
    local name = doc.scenario and doc.scenario.name or "?"
    local key = name .. " " .. canonical(doc.params)
    local cell = by_key[key]
    if not cell then
      cell = { key = key, params = doc.params, scenario = name, docs = {}, dirs = {} }
      by_key[key] = cell
      cells[#cells + 1] = cell
    end
    cell.docs[#cell.docs + 1] = doc
    cell.dirs[#cell.dirs + 1] = dir
  end
  for _, cell in ipairs(cells) do
    cell.doc = #cell.docs == 1 and cell.docs[1] or combine_repeats(cell.docs)
    cell.docs = nil
  end
  table.sort(cells, function(a, b) return a.key < b.key end)
  return { kind = "sweep", dir = path, cells = cells }
end

-- ---- comparing ---------------------------------------------------------------------

local function delta(a, b)
  if type(a) ~= "number" or type(b) ~= "number" then return nil, nil end
  local d = b - a
  local rel
  if a ~= 0 then rel = d / abs(a) elseif d == 0 then rel = 0 else rel = d > 0 and math.huge or -math.huge end
  return d, rel
end

local function by_key(snapshot, kind)
  local out = {}
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.kind == kind or (kind == "counter" and m.kind == "gauge") then out[m.key] = m end
  end
  return out
end

local function sorted_keys(a, b)
  local keys, seen = {}, {}
  for k in pairs(a) do if not seen[k] then seen[k] = true keys[#keys + 1] = k end end
  for k in pairs(b) do if not seen[k] then seen[k] = true keys[#keys + 1] = k end end
  table.sort(keys)
  return keys
end

local function hist_row(key, ma, mb, opts)
  local ha, hb = hist.decode(ma.encoded), hist.decode(mb.encoded)
  local row = { key = key, name = ma.name, kind = "histogram", count_a = ha:count(), count_b = hb:count(),
    stats = {} }
  local stats = { "p50", "p99" }
  for _, g in ipairs(opts.gates or {}) do
    if g.stat and g.stat ~= "p50" and g.stat ~= "p99" then stats[#stats + 1] = g.stat end
  end
  for _, s in ipairs(stats) do
    local a, b = stat_of(ha, s), stat_of(hb, s)
    local d, rel = delta(a, b)
    row.stats[s] = { a = a, b = b, delta = d, relative = rel }
  end
  local t = TESTS[opts.test or "mw"]
  if t then
    local r = t[2](ha, hb)
    row.test = { name = t[1], p = r.p, effect = r.effect, z = r.z, d = r.d,
      significant = r.p < (opts.alpha or 0.05) }
    row.verdict = not row.test.significant and "same" or (r.effect > 0.5 and "slower" or "faster")
  end
  return row
end

-- The histogram of a gate's metric in one document: an exact key, else
-- every label set of that name merged.
local function gate_hist(snapshot, metric)
  local merged
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.kind == "histogram" and m.key == metric then return hist.decode(m.encoded) end
  end
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.kind == "histogram" and m.name == metric then
      local h = hist.decode(m.encoded)
      if merged then merged:merge(h) else merged = h end
    end
  end
  return merged
end

local function counter_value(snapshot, metric)
  local exact, total, found
  for _, m in ipairs(snapshot and snapshot.metrics or {}) do
    if m.kind ~= "histogram" then
      if m.key == metric then exact = m.value end
      if m.name == metric then total, found = (total or 0) + m.value, true end
    end
  end
  if exact ~= nil then return exact end
  if found then return total end
end

local function result_value(result, metric)
  local path = metric:gsub("^result%.", "")
  if type(result) == "table" and type(result[path]) == "number" then return result[path] end
  local v = result
  for part in path:gmatch("[^.]+") do
    if type(v) ~= "table" then return nil end
    v = v[part]
  end
  return type(v) == "number" and v or nil
end

-- Which direction is better for a metric without --better: latencies and
-- counters (errors, retries) lower; result fields that count or rate
-- success or throughput higher.
local function default_better(kind, metric)
  if kind == "result" then
    local m = metric:lower()
    if (m:find("succe") or m:find("throughput") or m:find("per_second") or m:find("rps") or m:find("passed"))
        and not m:find("fail") and not m:find("error") then
      return "higher"
    end
  end
  return "lower"
end

local function evaluate_gate(g, doc_a, doc_b, opts)
  local out = { metric = g.metric, stat = g.stat or "p99", tolerance = g.tolerance }
  local ha, hb = gate_hist(doc_a.metrics, g.metric), gate_hist(doc_b.metrics, g.metric)
  local a, b
  if ha or hb then
    if not (ha and hb) then
      out.error = format("histogram '%s' is only in %s", g.metric, ha and "A" or "B")
      return out
    end
    out.kind = "histogram"
    a, b = stat_of(ha, out.stat), stat_of(hb, out.stat)
    local t = TESTS[opts.test or "mw"]
    if t then
      local r = t[2](ha, hb)
      out.test = { name = t[1], p = r.p, effect = r.effect, significant = r.p < (opts.alpha or 0.05) }
    end
  else
    local ca, cb = counter_value(doc_a.metrics, g.metric), counter_value(doc_b.metrics, g.metric)
    if ca ~= nil or cb ~= nil then
      out.kind, out.stat, a, b = "counter", "value", ca or 0, cb or 0
    else
      a, b = result_value(doc_a.result, g.metric), result_value(doc_b.result, g.metric)
      if a == nil or b == nil then
        out.error = format("no histogram, counter or result field '%s' in %s", g.metric,
          (a == nil and b == nil) and "A or B" or (a == nil and "A" or "B"))
        out.missing = (a == nil and b == nil) and "both" or (a == nil and "A" or "B")
        return out
      end
      out.kind, out.stat = "result", "value"
    end
  end
  out.a, out.b = a, b
  out.delta, out.relative = delta(a, b)
  out.better = g.better or default_better(out.kind, g.metric)
  if a == nil or b == nil then
    out.error = format("'%s' has no %s (no values recorded)", g.metric, out.stat)
    return out
  end
  local worse = out.better == "lower" and out.relative or -out.relative
  out.worse_by = worse
  out.regressed = worse > (g.tolerance or 0) and (out.test == nil or out.test.significant)
  return out
end

--- compare.documents(doc_a, doc_b [, opts]) -> report: { histograms = rows,
-- counters = rows, results = rows, status = {a, b}, gates = results,
-- regressed = bool }. opts: gates = { {metric, stat = "p99", tolerance =
-- 0.1, better = "lower"|"higher"} }, test = "mw" | "ks" | "none", alpha
-- (0.05). A gate whose metric is missing has .error and counts as
-- regressed (a CI check must not pass on a typo).
function M.documents(doc_a, doc_b, opts)
  opts = opts or {}
  local report = { histograms = json.array(), counters = json.array(), results = json.array(),
    status = { a = doc_a.status, b = doc_b.status }, gates = json.array() }
  local ha, hb = by_key(doc_a.metrics, "histogram"), by_key(doc_b.metrics, "histogram")
  for _, key in ipairs(sorted_keys(ha, hb)) do
    if ha[key] and hb[key] then
      report.histograms[#report.histograms + 1] = hist_row(key, ha[key], hb[key], opts)
    else
      report.histograms[#report.histograms + 1] = { key = key, kind = "histogram",
        only = ha[key] and "A" or "B" }
    end
  end
  local ca, cb = by_key(doc_a.metrics, "counter"), by_key(doc_b.metrics, "counter")
  for _, key in ipairs(sorted_keys(ca, cb)) do
    local a, b = ca[key] and ca[key].value, cb[key] and cb[key].value
    local d, rel = delta(a or 0, b or 0)
    report.counters[#report.counters + 1] = { key = key, a = a, b = b, delta = d, relative = rel }
  end
  local ra, rb = numeric_fields(doc_a.result), numeric_fields(doc_b.result)
  for _, path in ipairs(sorted_keys(ra, rb)) do
    local d, rel = delta(ra[path], rb[path])
    report.results[#report.results + 1] = { path = path, a = ra[path], b = rb[path], delta = d, relative = rel }
  end
  local regressed = false
  for i, g in ipairs(opts.gates or {}) do
    local r = evaluate_gate(g, doc_a, doc_b, opts)
    report.gates[i] = r
    regressed = regressed or r.regressed or r.error ~= nil
  end
  report.regressed = regressed
  return report
end

-- Every histogram name present in both documents (the gates of a bare
-- --tolerance).
local function common_histograms(doc_a, doc_b)
  local a, names, seen = {}, {}, {}
  for _, m in ipairs(doc_a.metrics and doc_a.metrics.metrics or {}) do
    if m.kind == "histogram" then a[m.key] = true end
  end
  for _, m in ipairs(doc_b.metrics and doc_b.metrics.metrics or {}) do
    if m.kind == "histogram" and a[m.key] and not seen[m.key] then
      seen[m.key] = true
      names[#names + 1] = m.key
    end
  end
  table.sort(names)
  return names
end

local function expand_gates(opts, doc_a, doc_b)
  if not opts.all_histograms then return opts end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.gates = {}
  for _, key in ipairs(common_histograms(doc_a, doc_b)) do
    o.gates[#o.gates + 1] = { metric = key, stat = opts.stat, tolerance = opts.tolerance, better = opts.better }
  end
  return o
end

-- The parameters that differ between cells, as "k=v,k=v": a cell's name.
local function cell_names(cells)
  local values = {}
  for _, c in ipairs(cells) do
    for k, v in pairs(type(c.params) == "table" and c.params or {}) do
      values[k] = values[k] or {}
      values[k][canonical(v)] = true
    end
  end
  local varying = {}
  for k, set in pairs(values) do
    local n = 0
    for _ in pairs(set) do n = n + 1 end
    if n > 1 then varying[#varying + 1] = k end
  end
  table.sort(varying)
  for _, c in ipairs(cells) do
    local parts = {}
    for _, k in ipairs(varying) do
      local v = type(c.params) == "table" and c.params[k]
      parts[#parts + 1] = k .. "=" .. (type(v) == "table" and canonical(v) or tostring(v))
    end
    c.name = #parts > 0 and concat(parts, ",") or c.scenario
  end
end

--- compare.experiments(doc_a, doc_b, a, b [, opts]) -> report: two
-- experiments' documents (result.json's, or kb.results.db's
-- store:document) compared as compare.paths does, a and b naming them.
function M.experiments(doc_a, doc_b, a, b, opts)
  opts = opts or {}
  local r = M.documents(doc_a, doc_b, expand_gates(opts, doc_a, doc_b))
  r.kind, r.a, r.b = "experiment", a, b
  for _, g in ipairs(r.gates) do
    -- Most likely a typo: a usage error, not a regression.
    if g.missing == "both" then usage_error("compare: %s", g.error) end
  end
  return r
end

--- compare.paths(a, b [, opts]) -> report: loads two experiments or two
-- sweeps (compare.load) and compares them. For sweeps, cells are matched
-- by scenario and parameters: report = { kind = "sweep", cells = { {name,
-- params, report} }, only_a = names, only_b = names, regressed }.
-- opts as for documents, plus all_histograms = true (gate every histogram
-- present in both with opts.stat, opts.tolerance).
function M.paths(a, b, opts)
  opts = opts or {}
  local la, lb = M.load(a), M.load(b)
  if la.kind ~= lb.kind then
    usage_error("compare: '%s' is %s but '%s' is %s: compare experiments with experiments, sweeps with sweeps",
      a, la.kind == "sweep" and "a sweep" or "an experiment", b, lb.kind == "sweep" and "a sweep" or "an experiment")
  end
  if la.kind == "experiment" then return M.experiments(la.doc, lb.doc, a, b, opts) end
  local all = {}
  for _, c in ipairs(la.cells) do all[#all + 1] = c end
  for _, c in ipairs(lb.cells) do all[#all + 1] = c end
  cell_names(all)
  local in_b = {}
  for _, c in ipairs(lb.cells) do in_b[c.key] = c end
  local report = { kind = "sweep", a = a, b = b, cells = json.array(), only_a = json.array(),
    only_b = json.array(), regressed = false }
  local matched = {}
  for _, ca in ipairs(la.cells) do
    local cb = in_b[ca.key]
    if cb then
      matched[ca.key] = true
      local r = M.documents(ca.doc, cb.doc, expand_gates(opts, ca.doc, cb.doc))
      report.cells[#report.cells + 1] = { name = ca.name, params = ca.params, report = r }
      report.regressed = report.regressed or r.regressed
    else
      report.only_a[#report.only_a + 1] = ca.name
    end
  end
  for _, cb in ipairs(lb.cells) do
    if not matched[cb.key] then report.only_b[#report.only_b + 1] = cb.name end
  end
  if #report.cells == 0 then
    usage_error("compare: the sweeps '%s' and '%s' have no cell with the same scenario and parameters", a, b)
  end
  return report
end

-- ---- output ------------------------------------------------------------------------

local function num(v)
  if v == nil then return "-" end
  if v == math.huge then return "inf" end
  if math.type(v) == "integer" then return tostring(v) end
  if abs(v) >= 1e5 or (v ~= 0 and abs(v) < 1e-3) then return format("%.3g", v) end
  return (format("%.4f", v):gsub("0+$", ""):gsub("%.$", ""))
end

local function seconds(v) return require("kb.report.summary").duration(v) end

local function signed_seconds(v)
  if v == nil then return "-" end
  return (v < 0 and "-" or "+") .. seconds(abs(v))
end

local function pct(rel)
  if rel == nil then return "-" end
  if rel == math.huge then return "+inf%" elseif rel == -math.huge then return "-inf%" end
  return format("%+.1f%%", rel * 100)
end

--- compare.table_text(header, rows) -> an aligned text table (first
-- column left-aligned, the others right-aligned), two spaces indented.
local function table_text(header, rows)
  local widths = {}
  for i, h in ipairs(header) do widths[i] = #h end
  for _, r in ipairs(rows) do
    for i, c in ipairs(r) do widths[i] = math.max(widths[i], #c) end
  end
  local lines = {}
  local function line(cells)
    local parts = {}
    for i, c in ipairs(cells) do
      parts[i] = i == 1 and (c .. string.rep(" ", widths[i] - #c)) or (string.rep(" ", widths[i] - #c) .. c)
    end
    lines[#lines + 1] = ("  " .. concat(parts, "  ")):gsub("%s+$", "")
  end
  line(header)
  for _, r in ipairs(rows) do line(r) end
  return concat(lines, "\n")
end

local function format_one(r, out)
  local rows = {}
  for _, h in ipairs(r.histograms) do
    if h.only then
      rows[#rows + 1] = { h.key, "only in " .. h.only, "", "", "", "", "", "", "" }
    else
      for _, s in ipairs({ "p50", "p99" }) do
        local st = h.stats[s]
        rows[#rows + 1] = { s == "p50" and h.key or "", s, seconds(st.a), seconds(st.b),
          signed_seconds(st.delta), pct(st.relative),
          s == "p50" and h.test and format("%.3g", h.test.p) or "",
          s == "p50" and (h.verdict or "") or "", s == "p50" and (h.count_a .. "/" .. h.count_b) or "" }
      end
    end
  end
  if #rows > 0 then
    out[#out + 1] = "histograms (A -> B; p: " .. ((r.histograms[1] and r.histograms[1].test
      and r.histograms[1].test.name) or "no test") .. ")"
    out[#out + 1] = table_text({ "metric", "stat", "A", "B", "delta", "delta%", "p", "verdict", "count A/B" }, rows)
  end
  rows = {}
  for _, c in ipairs(r.counters) do
    rows[#rows + 1] = { c.key, num(c.a), num(c.b), c.delta and ((c.delta >= 0 and "+" or "") .. num(c.delta)) or "-", pct(c.relative) }
  end
  if #rows > 0 then
    out[#out + 1] = "counters"
    out[#out + 1] = table_text({ "metric", "A", "B", "delta", "delta%" }, rows)
  end
  rows = {}
  for _, c in ipairs(r.results) do
    rows[#rows + 1] = { c.path, num(c.a), num(c.b), c.delta and ((c.delta >= 0 and "+" or "") .. num(c.delta)) or "-", pct(c.relative) }
  end
  if #rows > 0 then
    out[#out + 1] = "result"
    out[#out + 1] = table_text({ "field", "A", "B", "delta", "delta%" }, rows)
  end
  if r.status and r.status.a ~= r.status.b then
    out[#out + 1] = format("status: A %s, B %s", tostring(r.status.a), tostring(r.status.b))
  end
  for _, g in ipairs(r.gates) do
    if g.error then
      out[#out + 1] = format("FAIL %s: %s", g.metric, g.error)
    else
      local sig = g.test and format(", %s p=%.3g%s", g.test.name, g.test.p,
        g.test.significant and "" or " (not significant)") or ""
      local shown = g.kind == "histogram" and function(v) return seconds(v) end or num
      out[#out + 1] = format("%s %s %s: %s -> %s (%s, %s is better, tolerance %s%s)",
        g.regressed and "REGRESSED" or "ok", g.metric, g.stat, shown(g.a), shown(g.b), pct(g.relative),
        g.better, pct(g.tolerance or 0):gsub("^%+", ""), sig)
    end
  end
end

M.table_text, M.pct_text, M.num_text = table_text, pct, num

--- compare.format(report) -> the terminal text of a report.
function M.format(r)
  local out = { format("A: %s\nB: %s", r.a or "A", r.b or "B") }
  if r.kind == "sweep" then
    for _, c in ipairs(r.cells) do
      out[#out + 1] = ""
      out[#out + 1] = "== cell " .. c.name .. (c.report.regressed and "  [REGRESSED]" or "")
      format_one(c.report, out)
    end
    if #r.only_a > 0 then out[#out + 1] = "cells only in A: " .. concat(r.only_a, "; ") end
    if #r.only_b > 0 then out[#out + 1] = "cells only in B: " .. concat(r.only_b, "; ") end
  else
    format_one(r, out)
  end
  return concat(out, "\n") .. "\n"
end

-- JSON cannot hold infinities: an infinite relative change becomes null.
local function json_safe(v)
  if type(v) == "number" and (v == math.huge or v == -math.huge or v ~= v) then return json.null end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = json_safe(x) end
  return setmetatable(out, getmetatable(v))
end

--- compare.json(report) -> JSON text of a report.
function M.json(r)
  return json.encode(json_safe(r), { pretty = true }) .. "\n"
end

return M
