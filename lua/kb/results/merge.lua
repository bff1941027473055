--- kb.results.merge: combines the results of the shards of one experiment (or any
-- experiments of one scenario) into one experiment, exactly where the data
-- allows it (`kbrun merge DIR...`).
--
--   local merge = require "kb.results.merge"
--   local snap = merge.snapshots({ doc1.metrics, doc2.metrics })  -- exact
--   local doc = merge.documents({ doc1, doc2 })                   -- result docs
--   local exp, doc = merge.experiments({ dir1, dir2 }, { out = "experiments" })
--
-- What is merged and how (docs/scale-out.md has the rationale):
--   metrics     histograms merge bucket by bucket (exact: the merged
--               histogram is the one a single process recording every value
--               would hold), counters and gauges add; layouts must match.
--   result      run()'s return values, field by field: integers add (counts);
--               lists concatenate; equal strings/booleans are kept; a
--               `*_rate`/`*_ratio` field is recomputed from counts next to it
--               (succeeded / total, requested, runs, ...; or succeeded /
--               (succeeded + failed); failed / ... for error and failure
--               rates), else averaged weighted by such a total; throughputs (`*per_second`, `*_rps`, `throughput`)
--               add (the shards ran side by side); `elapsed`, `duration`,
--               `wall*` take the maximum. Any other float (a mean, a
--               percentile computed by the scenario) cannot be merged
--               exactly: it is left out and its path listed in
--               merge.unmerged; each shard's own result stays in shards[i].
--   thresholds  re-evaluated on the merged metrics and result.
--   status      passed only if every input passed.
local fs = require "kb.fs"
local json = require "kb.json"
local hist = require "kb.hist"

local M = {}

local format = string.format
local ARRAY_MT = getmetatable(json.array())

local function merge_error(fmt, ...)
  error(setmetatable({ class = "merge", message = format(fmt, ...) },
    { __tostring = function(e) return e.message end }), 0)
end

-- ---- metrics ---------------------------------------------------------------

--- merge.snapshots(list) -> snapshot: the exact merge of kb.metrics
-- snapshots (as in result.json): the same rules as
-- kb.metrics.merge_snapshot, without touching the process's registry.
-- Raises class "merge" on a kind or layout mismatch.
function M.snapshots(list)
  local by_key, order = {}, {}
  for si, snap in ipairs(list) do
    if type(snap) ~= "table" or type(snap.metrics) ~= "table" then
      merge_error("input %d has no metrics snapshot", si)
    end
    if snap.version ~= 1 then
      merge_error("input %d: unsupported metrics snapshot version %s", si, tostring(snap.version))
    end
    for _, m in ipairs(snap.metrics) do
      local e = by_key[m.key]
      if e and e.kind ~= m.kind then
        merge_error("metric %s is a %s in input %d but a %s before", m.key, tostring(m.kind), si, e.kind)
      end
      if not e then
        e = { key = m.key, name = m.name, labels = m.labels, kind = m.kind }
        by_key[m.key] = e
        order[#order + 1] = m.key
      end
      if m.kind == "histogram" then
        local ok, h = pcall(hist.decode, m.encoded)
        if not ok then merge_error("histogram %s of input %d: %s", m.key, si, tostring(h)) end
        if e.hist then
          local okm, err = pcall(e.hist.merge, e.hist, h)
          if not okm then merge_error("histogram %s of input %d: %s", m.key, si, tostring(err)) end
        else
          e.hist = h
        end
      elseif m.kind == "counter" or m.kind == "gauge" then
        if type(m.value) ~= "number" then merge_error("%s %s of input %d has no value", m.kind, m.key, si) end
        e.value = (e.value or 0) + m.value
      else
        merge_error("metric %s of input %d has an unknown kind %s", tostring(m.key), si, tostring(m.kind))
      end
    end
  end
  table.sort(order)
  local out = {}
  for i, key in ipairs(order) do
    local e = by_key[key]
    local m = { key = e.key, name = e.name, labels = e.labels, kind = e.kind }
    if e.hist then
      m.summary, m.encoded = e.hist:summary(), e.hist:encode()
    else
      m.value = e.value
    end
    out[i] = m
  end
  return { version = 1, metrics = json.array(out) }
end

-- ---- run()'s results ---------------------------------------------------------

local function is_array(t)
  return getmetatable(t) == ARRAY_MT or (#t > 0 and next(t, #t) == nil)
end

local SUCCESSES = { "succeeded", "successes", "success", "completed", "ok", "passed" }
local FAILURES = { "failed", "failures", "errors", "error_count" }
local DENOMINATORS = { "total", "requested", "requests", "attempts", "runs", "count", "n" }

-- The counts a rate is made of: success counts for success_rate,
-- completed_rate, ...; failure counts for error_rate, failure_rate; none
-- for other rates (they can only be averaged).
local function numerators_of(key)
  local k = key:lower()
  if k:find("fail") or k:find("error") then return FAILURES, SUCCESSES end
  if k:find("succe") or k:find("complet") or k:find("ok") or k:find("pass") then return SUCCESSES, FAILURES end
end

-- The (numerator, denominator) counts a rate next to them is made of, in t
-- or one level down (result.runs.succeeded, result.calls.succeeded); either
-- may be nil. Without a total, numerator + its complement (succeeded +
-- failed) is the denominator.
local function rate_counts(t, key)
  local nums, complement = numerators_of(key)
  local function in_table(x)
    local num, den, other
    for _, k in ipairs(nums or {}) do
      if math.type(x[k]) == "integer" then num = x[k] break end
    end
    for _, k in ipairs(DENOMINATORS) do
      if math.type(x[k]) == "integer" then den = x[k] break end
    end
    for _, k in ipairs(complement or {}) do
      if math.type(x[k]) == "integer" then other = x[k] break end
    end
    if num and not den and other then den = num + other end
    return num, den
  end
  local num, den = in_table(t)
  if num and den then return num, den end
  local keys = {}
  for k, v in pairs(t) do if type(v) == "table" and type(k) == "string" then keys[#keys + 1] = k end end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local n2, d2 = in_table(t[k])
    if n2 and d2 then return n2, d2 end
  end
  return num, den
end

-- How a number at `key` merges, decided by its name and never by its JSON
-- type (a rate of 1.0 and a percentile of 632 s read back as integers):
--   "rate"  recomputed from the merged counts (else weighted)
--   "sum"   throughputs of shards running side by side
--   "max"   elapsed times, and the maximum of a statistics table
--   "min"   the minimum of a statistics table
--   "mean"  weighted by the `count` next to it
--   "pct"   a percentile (p50, p99, p99_9, median): only from merged raw
--           material (histograms, run rows), else dropped
--   "same"  settings (a clock's speed): kept when equal, else dropped
--   "drop"  spreads (sd): cannot be merged from the parts shown
--   nil     a count (integers add) or an unknown float (dropped)
local SETTINGS = { speed = true, scale = true, concurrency = true, version = true, seed = true,
  port = true, digits = true, lowest = true, highest = true, limit = true, tolerance = true,
  published = true, index = true, interval = true }
local function kind_of(key)
  if type(key) ~= "string" then return nil end
  if key:match("per_second") or key:match("_rps$") or key:match("^rps$") or key:match("throughput") then
    return "sum"
  end
  if key:match("rate$") or key:match("ratio$") then return "rate" end
  if key:match("^p%d+$") or key:match("^p%d+_%d+$") or key == "median" then return "pct" end
  if key == "min" then return "min" end
  if key == "max" then return "max" end
  if key == "mean" or key == "avg" or key == "average" then return "mean" end
  if key == "sd" or key == "stddev" or key == "std" or key == "variance" then return "drop" end
  if SETTINGS[key] then return "same" end
  if key:match("^elapsed") or key:match("duration$") or key:match("^duration") or key:match("^wall") then
    return "max"
  end
end
M.kind_of = kind_of

local merge_values

-- The merged metrics of the documents being merged (set by M.results), for
-- result tables that name the histogram their figures come from.
local merged_metrics

-- The statistics a result table may copy from a histogram's summary, by
-- the names scenarios give them.
local HIST_STATS = { count = "count", min = "min", max = "max", mean = "mean", avg = "mean",
  p50 = "p50", median = "p50", p90 = "p90", p95 = "p95", p99 = "p99", p999 = "p999", p99_9 = "p999",
  stddev = "stddev", sd = "stddev" }

-- The merged summary of the histogram every shard's table names in its
-- `metric` field (result.latency = {metric = "http.get", p50 = ...}), or
-- nil: its statistics are then read from the merged histogram, exactly.
local function named_histogram(values)
  local key
  for _, t in pairs(values) do
    if type(t.metric) ~= "string" or (key and t.metric ~= key) then return nil end
    key = t.metric
  end
  if not key or type(merged_metrics) ~= "table" then return nil end
  for _, m in ipairs(merged_metrics.metrics or {}) do
    if m.key == key and m.kind == "histogram" then return m.summary end
  end
end

-- Merges the tables of all shards (nil where a shard lacks the field).
local function merge_tables(values, path, unmerged)
  local keys, seen = {}, {}
  for _, t in pairs(values) do
    for k in pairs(t) do
      if not seen[k] then seen[k] = true keys[#keys + 1] = k end
    end
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) == "number"
  end)
  local out, rates = {}, {}
  local hist_summary = named_histogram(values)
  for _, k in ipairs(keys) do
    local list = {}
    if hist_summary and HIST_STATS[k] then
      -- from the merged histogram (the shards' own figures cannot be combined)
      out[k] = hist_summary[HIST_STATS[k]]
      if out[k] == nil then unmerged[#unmerged + 1] = path .. "." .. tostring(k) end
      goto continue
    end
    for i, t in pairs(values) do list[i] = t[k] end
    local sub = path .. "." .. tostring(k)
    local v = merge_values(list, sub, unmerged, k)
    if v == "__rate" then rates[#rates + 1] = k
    elseif v == "__mean" then
      -- weighted by the shards' counts next to it (exact up to rounding)
      local wsum, w = 0, 0
      for _, t in pairs(values) do
        local c = t.count or t.n
        if type(t[k]) ~= "number" or type(c) ~= "number" then wsum = nil break end
        wsum, w = wsum + t[k] * c, w + c
      end
      if wsum and w > 0 then out[k] = wsum / w
      elseif wsum then out[k] = nil
      else unmerged[#unmerged + 1] = sub end
    elseif v ~= nil then out[k] = v end
    ::continue::
  end
  -- Rates last: they are recomputed from the merged counts.
  for _, k in ipairs(rates) do
    local num, den = rate_counts(out, k)
    if num and den then
      out[k] = den > 0 and num / den or 0
    else
      local wsum, w = 0, 0
      for i, t in pairs(values) do
        local _, d = rate_counts(t, k)
        if not d or type(t[k]) ~= "number" then wsum = nil break end
        wsum, w = wsum + t[k] * d, w + d
      end
      if wsum and w > 0 then out[k] = wsum / w
      else unmerged[#unmerged + 1] = path .. "." .. k end
    end
  end
  return out
end

merge_values = function(list, path, unmerged, key)
  local n, first, kinds = 0, nil, {}
  for _, v in pairs(list) do
    n = n + 1
    first = first == nil and v or first
    kinds[math.type(v) or type(v)] = true
  end
  if n == 0 then return nil end
  local only = next(kinds)
  if next(kinds, only) ~= nil then
    if kinds.integer and kinds.float and not kinds.table and not kinds.string and not kinds.boolean then
      only = "float"
    else
      unmerged[#unmerged + 1] = path
      return nil
    end
  end
  if only == "integer" or only == "float" then
    local how = kind_of(key)
    if how == "rate" then return "__rate" end
    if how == "mean" then return "__mean" end
    if how == "sum" or (how == nil and only == "integer") then
      local s = 0
      for _, v in pairs(list) do s = s + v end
      return s
    elseif how == "max" or how == "min" then
      local m = how == "max" and -math.huge or math.huge
      for _, v in pairs(list) do
        if (how == "max" and v > m) or (how == "min" and v < m) then m = v end
      end
      return m
    end
    local same = true
    for _, v in pairs(list) do same = same and v == first end
    if same and (n == 1 or how == "same") then return first end
    unmerged[#unmerged + 1] = path
    return nil
  elseif only == "table" then
    local arrays, objects = 0, 0
    for _, v in pairs(list) do
      if next(v) == nil then -- empty: fits both
      elseif is_array(v) then arrays = arrays + 1 else objects = objects + 1 end
    end
    if arrays > 0 and objects == 0 then
      local out = {}
      local idx = {}
      for i in pairs(list) do idx[#idx + 1] = i end
      table.sort(idx)
      for _, i in ipairs(idx) do
        for _, x in ipairs(list[i]) do out[#out + 1] = x end
      end
      return json.array(out)
    elseif arrays > 0 then
      unmerged[#unmerged + 1] = path
      return nil
    end
    return merge_tables(list, path, unmerged)
  else -- strings, booleans, null
    for _, v in pairs(list) do
      if v ~= first then
        unmerged[#unmerged + 1] = path
        return nil
      end
    end
    return first
  end
end

--- merge.results(list [, n [, metrics]]) -> merged, unmerged: run()'s
-- results of n shards (list[i] may be nil) merged by the rules above;
-- unmerged lists the paths ("result.latency.p50") that could not be.
-- metrics: the merged metrics snapshot; a result table naming one of its
-- histograms (`metric = "http.get"`) takes its statistics (count, min,
-- max, mean, p50, p90, p95, p99, p999, stddev) from it.
function M.results(list, n, metrics)
  local values = {}
  for i = 1, n or #list do
    if list[i] ~= nil and list[i] ~= json.null then values[i] = list[i] end
  end
  local unmerged = {}
  merged_metrics = metrics
  local okm, v = pcall(merge_values, values, "result", unmerged, "result")
  merged_metrics = nil
  if not okm then error(v, 0) end
  if v == "__rate" then v, unmerged[#unmerged + 1] = nil, "result" end
  table.sort(unmerged)
  return v, unmerged
end

-- ---- run storms: figures re-derived from the run rows ------------------------------

-- Nearest-rank statistics of a list, as kb.kfp.storm_report.stats (the
-- figures one process running every run computes).
local function stats(list)
  return require("kb.kfp.storm_report").stats(list)
end

local function is_storm(r)
  return type(r) == "table" and type(r.runs) == "table" and r.runs.requested ~= nil
    and type(r.durations) == "table"
end

local function hist_summary(snap, key)
  for _, m in ipairs(snap.metrics) do
    if m.key == key and m.kind == "histogram" then return m.summary end
  end
end

local CLIENT_PREFIXES = { "poll.", "aux." }

--- merge.storm(result, inputs, metrics, rows, notes): re-derives the
-- figures of merged KFP run storms (kb.kfp.storm) that merge_values
-- cannot: durations and observed_lag from the concatenated run rows
-- (runs.csv of every shard; without them these are dropped), the success
-- rate from the merged run counts, server_vs_client's client side from
-- the merged histograms (the server side is each shard's own scrape
-- window: dropped), the comparison rows against the merged figures.
-- server_metrics (each shard's window of the server) is dropped. notes
-- collects "path: why" for everything dropped.
function M.storm(result, inputs, metrics, rows, notes)
  local all_rows = rows and #rows > 0
  if all_rows then
    local durations, lags = {}, {}
    for _, row in ipairs(rows) do
      local d, lag = tonumber(row.duration), tonumber(row.observed_lag)
      if row.outcome == "Succeeded" and d then durations[#durations + 1] = d end
      if lag then lags[#lags + 1] = lag end
    end
    result.durations, result.observed_lag = stats(durations), stats(lags)
  else
    result.durations, result.observed_lag = nil, nil
    notes[#notes + 1] = "result.durations, result.observed_lag: no runs.csv in the inputs to recompute them from"
  end
  local runs = result.runs or {}
  local n = tonumber(runs.requested) or 0
  result.success_rate = n > 0 and (tonumber(runs.succeeded) or 0) / n or 0
  if result.server_metrics ~= nil then
    result.server_metrics = { available = false, reason = "merged shards: each shard scraped its own window; see shards[i].result.server_metrics" }
    notes[#notes + 1] = "result.server_metrics: each shard's own scrape window of the server (not additive); kept per shard"
  end
  local ops, seen = {}, {}
  for _, r in ipairs(inputs) do
    for _, row in ipairs(type(r) == "table" and type(r.server_vs_client) == "table" and r.server_vs_client or {}) do
      if row.op and not seen[row.op] then seen[row.op], ops[#ops + 1] = true, row.op end
    end
  end
  if #ops > 0 then
    local out = json.array({})
    for _, op in ipairs(ops) do
      local c = hist_summary(metrics, op)
      local extra = 0
      for _, prefix in ipairs(CLIENT_PREFIXES) do
        local h = hist_summary(metrics, prefix .. op)
        extra = extra + (h and h.count or 0)
      end
      out[#out + 1] = { op = op, client = c and c.count > 0 and { count = c.count, p50 = c.p50, p90 = c.p90,
        p99 = c.p99, other_calls = extra } or nil }
    end
    result.server_vs_client = out
    notes[#notes + 1] = "result.server_vs_client: client side from the merged histograms; the server side is each shard's own window (dropped)"
  end
  local first
  for _, r in ipairs(inputs) do
    if type(r) == "table" and type(r.comparison) == "table" then first = r.comparison break end
  end
  if first then
    local out = json.array({})
    for _, ref in ipairs(first) do
      local source = ref.metric == "durations" and result.durations or hist_summary(metrics, ref.metric) or {}
      local measured = source[ref.stat]
      local diff = measured and ref.published and (measured - ref.published) / ref.published or nil
      out[#out + 1] = { label = ref.label, metric = ref.metric, stat = ref.stat, published = ref.published,
        measured = measured, diff = diff, unit = ref.unit, tolerance = ref.tolerance, source = ref.source,
        within = diff ~= nil and ref.tolerance ~= nil and math.abs(diff) <= ref.tolerance }
    end
    result.comparison = out
  end
end

-- The shards' splits (kb.shard's describe().split): every `what` split by
-- range must be covered exactly once, by parts of the same total.
-- A round-robin split with a total (kb.shard.items) must give every shard
-- the items round-robin gives it, and the parts must add up to the total.
local function check_splits(docs, count, problem, warnings)
  local any, by_what, rr = false, {}, {}
  for i, d in ipairs(docs) do
    local s = type(d.shard) == "table" and d.shard or nil
    if s and type(s.split) == "table" then
      any = true
      for what, rec in pairs(s.split) do
        if rec.by == "round-robin" and math.type(rec.total) == "integer" then
          local w = rr[what] or { total = rec.total, sum = 0, n = 0 }
          rr[what] = w
          if rec.total ~= w.total then
            problem("input %d split %d %s, input 1 %s", i, rec.total, what, tostring(w.total))
          end
          local index, n = math.tointeger(s.index), math.tointeger(s.count)
          local want = index and n and n > index and (rec.total - index + n - 1) // n
          if want and rec.items ~= want then
            problem("input %d (shard %d/%d) took %s of the %d %s; round-robin gives it %d", i, index, n,
              tostring(rec.items), rec.total, what, want)
          end
          w.sum, w.n = w.sum + (tonumber(rec.items) or 0), w.n + 1
        elseif rec.total ~= nil then
          local w = by_what[what] or { total = rec.total, parts = {} }
          by_what[what] = w
          if rec.total ~= w.total then
            problem("input %d split %d %s, input 1 %s", i, rec.total, what, tostring(w.total))
          end
          w.parts[#w.parts + 1] = { first = rec.first, last = rec.last, input = i }
        end
      end
    end
  end
  if count and count > 1 and not any then
    warnings[#warnings + 1] = "the shards recorded no split of their work (a scenario that ignores kb.shard "
      .. "does all of it in every shard: its counts are added as many times)"
  end
  for what, w in pairs(rr) do
    if count and w.n == count and w.sum ~= w.total then
      problem("the shards' %s add up to %d of %d", what, w.sum, w.total)
    end
  end
  for what, w in pairs(by_what) do
    table.sort(w.parts, function(a, b) return a.first < b.first end)
    local expect = 1
    for _, part in ipairs(w.parts) do
      if part.first ~= expect then
        problem("the shards' %s overlap or leave a gap at %d (input %d takes %d..%d)", what, expect,
          part.input, part.first, part.last)
        break
      end
      expect = part.last + 1
    end
    if count and #w.parts == count and expect ~= w.total + 1 then
      problem("the shards' %s end at %d of %d", what, expect - 1, w.total)
    end
  end
end

-- ---- result documents ---------------------------------------------------------

-- The thresholds spec behind a result document's checks, so they can be
-- evaluated again on merged numbers.
local function thresholds_spec(checks)
  if type(checks) ~= "table" or #checks == 0 then return nil end
  local spec = {}
  for _, c in ipairs(checks) do
    local s = spec[c.name] or {}
    if c.stat == "value" then s[c.op == ">=" and "min" or "max"] = c.limit
    else s[c.stat] = c.limit end
    if c.allowed then s.allow_missing = true end -- "no data, allowed" stays allowed
    spec[c.name] = s
  end
  return spec
end

local function canonical(v)
  return json.encode(v == nil and json.null or v, { sort_keys = true })
end

--- merge.documents(docs [, opts]) -> doc: one result document from the
-- result documents of shards (or repeats) of one scenario. Raises class
-- "merge" when they cannot belong together (other scenarios, duplicate or
-- inconsistent shards); opts.force merges anyway, recording warnings.
-- opts.dirs: the folders the documents came from (recorded).
function M.documents(docs, opts)
  opts = opts or {}
  if #docs == 0 then merge_error("nothing to merge") end
  local warnings = {}
  local function problem(fmt, ...)
    local msg = format(fmt, ...)
    if not opts.force then merge_error("%s (--force merges anyway)", msg) end
    warnings[#warnings + 1] = msg
  end
  local first = docs[1]
  local name = first.scenario and first.scenario.name
  local params_text = canonical(first.params)
  local count, seen_index = nil, {}
  for i, d in ipairs(docs) do
    local dname = d.scenario and d.scenario.name
    if dname ~= name then problem("input %d is scenario '%s', input 1 is '%s'", i, tostring(dname), tostring(name)) end
    if canonical(d.params) ~= params_text then problem("input %d was run with other parameters than input 1", i) end
    if type(d.merge) == "table" then
      problem("input %d is itself a merge of %s experiments (its inputs would count twice)", i, tostring(d.merge.inputs))
    end
    local s = d.shard
    if type(s) == "table" then
      if count and s.count ~= count then problem("input %d is shard %s/%s, but input 1 belongs to %s shards", i, s.index, s.count, count) end
      count = count or s.count
      if seen_index[s.index] then problem("shard %s/%s appears twice (inputs %d and %d)", s.index, s.count, seen_index[s.index], i) end
      seen_index[s.index] = i
    end
  end
  if count then
    local missing = {}
    for k = 0, count - 1 do if not seen_index[k] then missing[#missing + 1] = tostring(k) end end
    if #missing > 0 then problem("shard(s) %s of %d missing", table.concat(missing, ", "), count) end
  end
  check_splits(docs, count, problem, warnings)

  local snaps, results, shards = {}, {}, {}
  local status, exit_code, duration = "passed", 0, 0
  for i, d in ipairs(docs) do
    snaps[i] = d.metrics
    results[i] = d.result
    if d.status ~= "passed" then status = "failed" end
    if type(d.exit_code) == "number" and d.exit_code > exit_code then exit_code = d.exit_code end
    if type(d.duration) == "number" and d.duration > duration then duration = d.duration end
    shards[i] = { experiment_id = d.experiment_id, dir = opts.dirs and opts.dirs[i], shard = d.shard,
      status = d.status, seed = d.seed, duration = d.duration, result = d.result,
      client = d.client } -- each process's own load (kb.saturation): it does not add
  end
  local clock = first.clock
  for i, d in ipairs(docs) do
    if canonical(d.clock) ~= canonical(clock) then
      warnings[#warnings + 1] = format("input %d measured on another clock than input 1", i)
    end
  end
  local metrics = M.snapshots(snaps)
  local result, unmerged = M.results(results, #docs, metrics)
  local notes = {}
  local storms = #docs > 0
  for i = 1, #docs do storms = storms and is_storm(results[i]) end
  if storms and type(result) == "table" then
    M.storm(result, results, metrics, opts.rows, notes)
    -- what the storm re-derived is merged, not dropped
    local kept = {}
    for _, path in ipairs(unmerged) do
      local top = path:match("^result%.([^%.]+)")
      if top ~= "durations" and top ~= "observed_lag" and top ~= "server_vs_client" and top ~= "comparison"
          and top ~= "server_metrics" and top ~= "success_rate" then
        kept[#kept + 1] = path
      end
    end
    unmerged = kept
  end
  for _, d in ipairs(docs) do
    if d.timeseries then
      -- each shard's intervals count from its own start, and an interval's
      -- percentiles cannot be combined from the shards' summaries
      notes[#notes + 1] = "timeseries: each shard's own (intervals from its own start; percentiles of an interval do not add); see the shards' result.json"
      break
    end
  end
  local doc = {
    kbrun = first.kbrun,
    scenario = first.scenario,
    status = status,
    exit_code = exit_code,
    error = status ~= "passed" and "an input did not pass" or nil,
    started_at = first.started_at,
    finished_at = first.finished_at,
    duration = duration,
    clock = clock,
    params = first.params,
    environment = first.environment,
    metrics = metrics,
    result = result,
    merge = { inputs = #docs, shards = count, unmerged = json.array(unmerged),
      notes = json.array(notes), warnings = json.array(warnings), runs_rows = opts.rows and #opts.rows or nil },
    shards = json.array(shards),
  }
  local spec = thresholds_spec(first.thresholds)
  if spec then
    local checks, all = require("kb.thresholds").evaluate(spec, metrics, result)
    doc.thresholds = checks
    if not all and doc.status == "passed" then
      doc.status, doc.exit_code, doc.error = "failed", require("kb.runner").EXIT.thresholds,
        "a threshold failed"
    end
  end
  return doc
end

--- merge.read(dir) -> the result document of an experiment folder (or of
-- a result.json path). Raises class "merge" with what is wrong.
function M.read(dir)
  local path = dir
  if fs.exists(dir) == "dir" then path = fs.join(dir, "result", "result.json") end
  if fs.exists(path) ~= "file" then
    merge_error("'%s' is not an experiment folder (no result/result.json)", dir)
  end
  local ok, doc = pcall(json.decode, fs.read(path), { name = path })
  if not ok or type(doc) ~= "table" then
    merge_error("%s: %s", path, ok and "not a result document" or tostring(doc.message or doc))
  end
  return doc
end

--- merge.experiments(dirs, opts) -> exp, doc: reads the experiment
-- folders, merges them (merge.documents) and writes a new experiment
-- (config/params.json, result/result.json, result/report.html) under
-- opts.out (default: the folder holding the first input), named
-- "<scenario>-merged" unless opts.name.
-- The rows of result/<name> of every input that has one (nil when none
-- has), each shard's `index` column made global by its split of `what`
-- (its first item - 1 added), and the header of the first.
local function concat_csv(dirs, docs, name, what)
  local csv = require "kb.csv"
  local rows, header = {}, nil
  for i, dir in ipairs(dirs) do
    local path = fs.join(dir, "result", name)
    if fs.exists(dir) ~= "dir" or fs.exists(path) ~= "file" then return nil end -- all or none
    do
      local list, h = csv.parse(fs.read(path), { header = true })
      header = header or h
      local split = type(docs[i].shard) == "table" and type(docs[i].shard.split) == "table"
        and docs[i].shard.split[what] or nil
      local offset = split and tonumber(split.first) and split.first - 1 or 0
      for _, row in ipairs(list) do
        if what and offset ~= 0 and tonumber(row.index) then row.index = tostring(math.tointeger(tonumber(row.index) + offset)) end
        rows[#rows + 1] = row
      end
    end
  end
  if what then -- in the order of the whole run
    table.sort(rows, function(a, b) return (tonumber(a.index) or 0) < (tonumber(b.index) or 0) end)
  end
  return rows, header
end

function M.experiments(dirs, opts)
  opts = opts or {}
  local docs = {}
  for i, dir in ipairs(dirs) do docs[i] = M.read(dir) end
  local rows, run_header = concat_csv(dirs, docs, "runs.csv", "runs")
  local calls, call_header = concat_csv(dirs, docs, "latencies.csv", nil)
  local doc = M.documents(docs, { force = opts.force, dirs = dirs, rows = rows })
  local out = opts.out or fs.dirname(fs.abspath(dirs[1]))
  local name = opts.name or ((doc.scenario and doc.scenario.name or "experiment") .. "-merged")
  local exp = require("kb.experiment").create({ out = out, name = name })
  doc.experiment_id = exp.id
  exp:write_json("config", "params.json", { scenario = doc.scenario and doc.scenario.file,
    params = doc.params, merged_from = json.array(dirs) })
  -- a storm's run rows and timed calls, concatenated (the raw material
  -- the merged figures were derived from)
  local csv = require "kb.csv"
  if rows then fs.write(exp:path("result", "runs.csv"), csv.encode(rows, run_header)) end
  if calls then fs.write(exp:path("result", "latencies.csv"), csv.encode(calls, call_header)) end
  exp:write_json("result", "result.json", doc)
  local ok, err = pcall(require("kb.report").write, exp, doc)
  if not ok then doc.merge.warnings[#doc.merge.warnings + 1] = "report: " .. tostring(err) end
  return exp, doc
end

return M
