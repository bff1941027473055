-- kb.shard, kb.results.merge and `kbrun merge`: N local shard processes merged are
-- exactly the unsharded run.
local T = require "kb.testing"
local kb = require "kb"
local shard = require "kb.shard"
local merge = require "kb.results.merge"

local json = kb.json

local function env_of(t) return function(name) return t[name] end end

T.case("kb.shard.parse and from_env", function()
  T.same({ shard.parse("2/5") }, { 2, 5 })
  T.same({ shard.parse(" 0 / 1 ") }, { 0, 1 })
  local i, err = shard.parse("5/5")
  T.eq(i, nil)
  T.eq(err, "shard index 5 is not below the shard count 5 (indices count from 0)")
  i, err = shard.parse("1-4")
  T.eq(err, "--shard wants I/N (shard I of N, 0 <= I < N), got '1-4'")
  i, err = shard.parse("0/0")
  T.eq(err, "shard count must be at least 1, got 0")

  T.same({ shard.from_env(env_of({})) }, { 0, 1 })
  T.same({ shard.from_env(env_of({ KBRUN_SHARD_INDEX = "1", KBRUN_SHARD_COUNT = "3" })) }, { 1, 3 })
  T.same({ shard.from_env(env_of({ JOB_COMPLETION_INDEX = "2", KBRUN_SHARD_COUNT = "3" })) }, { 2, 3 })
  -- KBRUN_SHARD_INDEX wins over the completion index.
  T.same({ shard.from_env(env_of({ KBRUN_SHARD_INDEX = "0", JOB_COMPLETION_INDEX = "2",
    KBRUN_SHARD_COUNT = "3" })) }, { 0, 3 })
  -- Some other Indexed Job: not a shard.
  T.same({ shard.from_env(env_of({ JOB_COMPLETION_INDEX = "7" })) }, { 0, 1 })
  i, err = shard.from_env(env_of({ KBRUN_SHARD_INDEX = "1" }))
  T.eq(err, "KBRUN_SHARD_INDEX is set but KBRUN_SHARD_COUNT is not")
  i, err = shard.from_env(env_of({ KBRUN_SHARD_COUNT = "4" }))
  T.eq(err, "KBRUN_SHARD_COUNT is set but neither KBRUN_SHARD_INDEX nor JOB_COMPLETION_INDEX is")
  i, err = shard.from_env(env_of({ KBRUN_SHARD_COUNT = "x", KBRUN_SHARD_INDEX = "0" }))
  T.eq(err, "KBRUN_SHARD_COUNT must be a non-negative integer, got 'x'")
  i, err = shard.from_env(env_of({ KBRUN_SHARD_COUNT = "2", JOB_COMPLETION_INDEX = "2" }))
  T.eq(err, "shard index 2 is not below the shard count 2 (indices count from 0)")
end)

T.case("range and owns partition the items exactly once, balanced", function()
  local saved_i, saved_n = shard.index, shard.count
  for _, total in ipairs({ 0, 1, 5, 7, 100, 101 }) do
    for n = 1, 6 do
      local seen_range, seen_owns, sizes = {}, {}, {}
      local expect_first = 1
      for i = 0, n - 1 do
        shard.set(i, n)
        local first, last = shard.range(total)
        T.eq(first, expect_first, "contiguous")
        expect_first = last + 1
        sizes[#sizes + 1] = last - first + 1
        T.eq(shard.size(total), last - first + 1)
        for k = first, last do
          T.ok(not seen_range[k], "item taken twice")
          seen_range[k] = true
        end
        for k = 1, total do
          if shard.owns(k) then
            T.ok(not seen_owns[k], "owned twice")
            seen_owns[k] = true
          end
        end
      end
      for k = 1, total do T.ok(seen_range[k] and seen_owns[k], "item " .. k .. " of " .. total .. " lost") end
      T.ok(math.max(table.unpack(sizes)) - math.min(table.unpack(sizes)) <= 1, "balanced")
    end
  end
  shard.set(1, 4)
  T.same(shard.describe(), { index = 1, count = 4 })
  T.same({ shard.range(10) }, { 4, 6 })
  shard.set(0, 1)
  T.eq(shard.describe(), nil)
  T.same({ shard.range(3) }, { 1, 3 })
  T.raises(function() shard.range(-1) end, "kb.shard.range: total must be >= 0, got -1")
  T.raises(function() shard.owns(0) end, "kb.shard.owns: items count from 1, got 0")
  T.raises(function() shard.set(3, 2) end, "kb.shard.set: shard index 3 is not below the shard count 2")
  shard.set(saved_i, saved_n)
end)

T.case("merge.snapshots is exact and checks layouts", function()
  local a, b, all = kb.hist.new(), kb.hist.new(), kb.hist.new()
  for i = 1, 500 do
    local v = 0.0001 * i * i
    if i % 3 == 0 then a:record(v) else b:record(v) end
    all:record(v)
  end
  local function snap(h, n)
    return { version = 1, metrics = {
      { key = "op", name = "op", labels = {}, kind = "histogram", summary = h:summary(), encoded = h:encode() },
      { key = "ok", name = "ok", labels = {}, kind = "counter", value = n },
    } }
  end
  local m = merge.snapshots({ snap(a, 2), snap(b, 3) })
  T.eq(#m.metrics, 2)
  T.eq(m.metrics[1].key, "ok")
  T.eq(m.metrics[1].value, 5)
  T.eq(m.metrics[2].encoded, all:encode())
  T.same(m.metrics[2].summary, all:summary())
  local other = kb.hist.new { lowest = 1e-3, highest = 10, digits = 2 }
  other:record(1)
  local bad = snap(other, 1)
  T.raises(function() merge.snapshots({ snap(a, 1), bad }) end, "histogram op of input 2: ")
  bad.metrics[1].kind = "counter"
  T.raises(function() merge.snapshots({ snap(a, 1), bad }) end, "metric op is a counter in input 2 but a histogram before")
end)

T.case("merge.results: counts add, rates recomputed, the rest listed", function()
  local r, unmerged = merge.results({
    { requests = 10, succeeded = 9, success_rate = 0.9, name = "x", wall_time = 3.5,
      requests_per_second = 100.5, latency = { p50 = 0.1 }, ids = json.array({ "a" }),
      runs = { requested = 4, succeeded = 2 } },
    { requests = 30, succeeded = 15, success_rate = 0.5, name = "x", wall_time = 5.0,
      requests_per_second = 50.25, latency = { p50 = 0.3 }, ids = json.array({ "b", "c" }),
      runs = { requested = 6, succeeded = 6 } },
  })
  T.eq(r.requests, 40)
  T.eq(r.succeeded, 24)
  T.eq(r.success_rate, 24 / 40)
  T.eq(r.runs.succeeded, 8)
  T.eq(r.name, "x")
  T.eq(r.wall_time, 5.0)
  T.eq(r.requests_per_second, 150.75)
  T.same(r.ids, { "a", "b", "c" })
  T.eq(r.latency.p50, nil)
  T.same(unmerged, { "result.latency.p50" })
  -- A rate without counts next to it: weighted by a total when there is one.
  r = merge.results({ { total = 1, share_rate = 1.0 }, { total = 3, share_rate = 0.5 } })
  T.eq(r.share_rate, (1 * 1.0 + 3 * 0.5) / 4)
  local nested = merge.results({ { calls = { succeeded = 3, failed = 1 }, success_rate = 0.75 },
    { calls = { succeeded = 1, failed = 3 }, success_rate = 0.25 } })
  T.eq(nested.success_rate, 4 / 8)
  local rates = merge.results({ { requests = 10, succeeded = 9, errors = 1, error_rate = 0.1, hit_ratio = 0.5 },
    { requests = 10, succeeded = 5, errors = 5, error_rate = 0.5, hit_ratio = 0.7 } })
  T.eq(rates.error_rate, 6 / 20)
  T.eq(rates.hit_ratio, (0.5 * 10 + 0.7 * 10) / 20, "no counts for hits: weighted by the total")
  local _, un2 = merge.results({ { name = "a", mean = 0.5 }, { name = "b", mean = 0.7 } })
  T.same(un2, { "result.mean", "result.name" })
end)

T.case("merge.documents refuses shards that do not belong together", function()
  local function doc(index, count, params)
    return { scenario = { name = "s" }, params = params or { n = 1 }, status = "passed",
      shard = index and { index = index, count = count } or nil,
      metrics = { version = 1, metrics = {} }, result = { n = 1 } }
  end
  T.raises(function() merge.documents({ doc(0, 2), doc(0, 2) }) end,
    "shard 0/2 appears twice (inputs 1 and 2) (--force merges anyway)")
  T.raises(function() merge.documents({ doc(0, 3), doc(2, 3) }) end, "shard(s) 1 of 3 missing")
  T.raises(function() merge.documents({ doc(0, 2), doc(1, 2, { n = 2 }) }) end,
    "input 2 was run with other parameters than input 1")
  local d = merge.documents({ doc(0, 3), doc(2, 3) }, { force = true })
  T.same(d.merge.warnings, { "shard(s) 1 of 3 missing", "the shards recorded no split of their work "
    .. "(a scenario that ignores kb.shard does all of it in every shard: its counts are added as many times)" })
  T.eq(d.result.n, 2)
  T.raises(function() merge.documents({}) end, "nothing to merge")
  T.raises(function() merge.documents({ doc(0, 2), doc(1, 2), d }) end,
    "input 3 is itself a merge of 2 experiments (its inputs would count twice)")
end)

T.case("merge.results: numbers merge by what they are, never by their JSON type", function()
  -- a taxi storm's shards as result.json reads back: 1.0 and 632.0 are integers
  local r, unmerged = merge.results({
    { success_rate = 1, runs = { requested = 5, succeeded = 5 },
      durations = { count = 5, min = 600, max = 660, p50 = 632, p99 = 660, mean = 631.5, sd = 3 },
      clock = { speed = 600, scale = 1, kind = "sim" }, elapsed = 800, calls = 90, other = 1.5 },
    { success_rate = 0.75, runs = { requested = 4, succeeded = 3 },
      durations = { count = 3, min = 610, max = 650, p50 = 630, p99 = 650, mean = 628.0, sd = 2 },
      clock = { speed = 600, scale = 1, kind = "sim" }, elapsed = 810, calls = 80, other = 1.5 },
  })
  T.eq(r.success_rate, 8 / 9, "a rate is recomputed from the merged counts, never summed")
  T.eq(r.runs.requested, 9)
  T.eq(r.durations.count, 8, "counts add")
  T.eq(r.durations.min, 600, "min of the minima")
  T.eq(r.durations.max, 660, "max of the maxima")
  T.eq(r.durations.mean, (631.5 * 5 + 628.0 * 3) / 8, "means weighted by their counts")
  T.eq(r.durations.p50, nil, "a percentile cannot come from the shards' percentiles")
  T.eq(r.durations.p99, nil)
  T.eq(r.durations.sd, nil)
  T.eq(r.clock.speed, 600, "a setting equal in every shard is kept")
  T.eq(r.clock.scale, 1)
  T.eq(r.elapsed, 810)
  T.eq(r.calls, 170)
  T.eq(r.other, nil, "an unknown float is dropped")
  T.same(unmerged, { "result.durations.p50", "result.durations.p99", "result.durations.sd", "result.other" })
  local r2, un3 = merge.results({ { clock = { speed = 600 } }, { clock = { speed = 60 } } })
  T.eq(r2.clock.speed, nil, "settings that differ are dropped")
  T.same(un3, { "result.clock.speed" })
  local r3 = merge.results({ { latency = { mean = 0.5 } }, { latency = { mean = 0.7 } } })
  T.eq(r3.latency.mean, nil, "a mean without counts is dropped")
end)

T.case("merge.documents checks the shards' splits", function()
  local function doc(index, first, last, total)
    return { scenario = { name = "s" }, params = { n = 1 }, status = "passed",
      shard = { index = index, count = 2, split = { runs = { total = total or 10, first = first, last = last } } },
      metrics = { version = 1, metrics = {} }, result = { n = 1 } }
  end
  local d = merge.documents({ doc(0, 1, 5), doc(1, 6, 10) })
  T.same(d.merge.warnings, {})
  T.raises(function() merge.documents({ doc(0, 1, 6), doc(1, 6, 10) }) end,
    "the shards' runs overlap or leave a gap at 7 (input 2 takes 6..10)")
  T.raises(function() merge.documents({ doc(0, 1, 4), doc(1, 6, 10) }) end,
    "the shards' runs overlap or leave a gap at 5 (input 2 takes 6..10)")
  T.raises(function() merge.documents({ doc(0, 1, 5), doc(1, 6, 9, 9) }) end, "input 2 split 9 runs, input 1 10")
  T.raises(function() merge.documents({ doc(0, 1, 5), doc(1, 6, 9) }) end, "the shards' runs end at 9 of 10")
end)

T.case("merge.documents re-judges thresholds: exit 99 when one fails, allowed no-data stays allowed", function()
  local function doc(index, rate)
    return { scenario = { name = "s" }, params = { n = 1 }, status = "passed", exit_code = 0,
      shard = { index = index, count = 2 },
      metrics = { version = 1, metrics = {} }, result = { ok = rate * 10, n = 10, success_rate = rate },
      thresholds = {
        { name = "success_rate", stat = "value", op = ">=", limit = 0.9 },
        { name = "queue.wait", stat = "p99", op = "<=", limit = 1, allowed = true, no_data = true },
      } }
  end
  local d = merge.documents({ doc(0, 1.0), doc(1, 0.6) }, { force = true })
  T.eq(d.result.success_rate, 0.8)
  T.eq(d.status, "failed")
  T.eq(d.exit_code, 99)
  local by = {}
  for _, c in ipairs(d.thresholds) do by[c.name] = c end
  T.eq(by.success_rate.passed, false)
  T.eq(by["queue.wait"].passed, true, "an allowed empty histogram stays allowed after a merge")
end)

-- ---- the real thing: kbrun processes ------------------------------------------------

local SCENARIO = [[
local kb = require "kb"
return {
  name = "shard-demo",
  params = { items = 600 },
  thresholds = { ["op.latency"] = { p99 = 10 }, success_rate = 0.5 },
  run = function(p)
    local h = kb.metrics.histogram("op.latency")
    local ok = kb.metrics.counter("op.ok")
    local first, last = kb.shard.range(p.items)
    local succeeded = 0
    for i = first, last do
      h:record(0.001 * (1 + (i * 7919) % 997))
      kb.metrics.histogram("op.size", { parity = i % 2 == 0 and "even" or "odd" }):record(i * 1e-4)
      if i % 10 ~= 0 then ok:inc() succeeded = succeeded + 1 end
    end
    kb.metrics.counter("shards.seen", { shard = kb.shard.index }):inc()
    local n = last - first + 1
    return { requests = n, succeeded = succeeded, success_rate = n > 0 and succeeded / n or 0 }
  end,
}
]]

local BIN = os.getenv("KBRUN_BIN")

local function run(args, env)
  local cmd = { BIN, "-q" }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  return kb.process.run { cmd = cmd, env = env, timeout = 120 }
end

local function only_experiment(dir)
  local list = {}
  for _, name in ipairs(kb.fs.list(dir)) do -- folders: kbrun.db (docs/results.md) is beside them
    if kb.fs.exists(kb.fs.join(dir, name)) == "dir" then list[#list + 1] = name end
  end
  T.eq(#list, 1, "one experiment in " .. dir)
  return kb.fs.join(dir, list[1])
end

local function result_of(dir)
  return json.decode(kb.fs.read(kb.fs.join(dir, "result", "result.json")))
end

T.case("N shard processes merged equal the unsharded run exactly", function()
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local work = kb.fs.tmpdir("kb-shards-")
  local scen = kb.fs.join(work, "shard_demo.lua")
  kb.fs.write(scen, SCENARIO)

  local r = run({ "-o", kb.fs.join(work, "whole"), scen })
  T.eq(r.code, 0, "unsharded run: " .. r.stderr)
  local whole = result_of(only_experiment(kb.fs.join(work, "whole")))
  T.eq(whole.shard, nil)

  -- Three shards, told their part three ways: --shard, KBRUN_SHARD_INDEX,
  -- and JOB_COMPLETION_INDEX as in a Kubernetes Indexed Job.
  local sharded = kb.fs.join(work, "sharded")
  local tasks = {
    kb.spawn(run, { "-o", sharded, "--shard", "0/3", scen }),
    kb.spawn(run, { "-o", sharded, scen }, { KBRUN_SHARD_INDEX = "1", KBRUN_SHARD_COUNT = "3" }),
    kb.spawn(run, { "-o", sharded, scen }, { JOB_COMPLETION_INDEX = "2", KBRUN_SHARD_COUNT = "3" }),
  }
  for i, t in ipairs(tasks) do
    local res = t:wait()
    T.eq(res.code, 0, "shard " .. i .. ": " .. res.stderr)
  end
  local dirs, seen = {}, {}
  for _, name in ipairs(kb.fs.list(sharded)) do
    local d = kb.fs.join(sharded, name)
    if kb.fs.exists(d) == "dir" then -- beside them: kbrun.db, written by the three at once
      dirs[#dirs + 1] = d
      local doc = result_of(d)
      T.eq(doc.shard.count, 3)
      seen[doc.shard.index] = true
      T.ok(doc.result.requests == 200, "each shard took 200 items")
    end
  end
  T.ok(seen[0] and seen[1] and seen[2], "shards 0, 1, 2 recorded in result.json")

  local out = kb.fs.join(work, "merged")
  local cmd = { "merge", "-o", out }
  for _, d in ipairs(dirs) do cmd[#cmd + 1] = d end
  local m = kb.process.run { cmd = { BIN, table.unpack(cmd) }, timeout = 60 }
  T.eq(m.code, 0, "kbrun merge: " .. m.stderr)
  local merged_dir = m.stdout:gsub("%s+$", "")
  T.eq(merged_dir, only_experiment(out))
  T.eq(kb.fs.exists(kb.fs.join(merged_dir, "result", "report.html")), "file")
  local merged = result_of(merged_dir)

  -- Histograms: bit-for-bit the same encoding, hence the same buckets.
  local function by_key(doc)
    local t = {}
    for _, x in ipairs(doc.metrics.metrics) do t[x.key] = x end
    return t
  end
  local mw, mm = by_key(whole), by_key(merged)
  local hists = 0
  for key, x in pairs(mw) do
    if x.kind == "histogram" then
      hists = hists + 1
      T.ok(mm[key], key .. " merged")
      T.eq(mm[key].encoded, x.encoded, key .. " encoding")
      T.same(mm[key].summary, x.summary, key .. " summary")
      T.same(kb.hist.decode(mm[key].encoded):buckets(), kb.hist.decode(x.encoded):buckets(), key)
    end
  end
  T.eq(hists, 3)
  T.eq(mm["op.ok"].value, mw["op.ok"].value)
  T.eq(mm["op.ok"].value, 540)
  T.eq(mm["shards.seen{shard=0}"].value + mm["shards.seen{shard=1}"].value
    + mm["shards.seen{shard=2}"].value, 3)
  T.eq(merged.result.requests, whole.result.requests)
  T.eq(merged.result.succeeded, whole.result.succeeded)
  T.eq(merged.result.success_rate, whole.result.success_rate)
  T.eq(merged.status, "passed")
  T.eq(#merged.thresholds, 2)
  T.eq(merged.merge.shards, 3)
  T.eq(#merged.merge.warnings, 0, "no warnings (the report was written)")
  T.eq(#merged.merge.unmerged, 0)
  -- recorded in the merge folder's results database, as a run is (docs/results.md)
  local store = require("kb.results.db").open(kb.fs.join(out, "kbrun.db"), { create = false })
  local row = store:exec("SELECT id, status, (SELECT count(*) FROM metrics m WHERE m.experiment_id = e.id) AS n "
    .. "FROM experiments e")
  T.eq(#row, 1)
  T.eq(row[1].id, merged.experiment_id)
  T.eq(row[1].status, "passed")
  T.eq(row[1].n, #merged.metrics.metrics)
  local back = store:document(merged.experiment_id)
  for _, x in ipairs(back.metrics.metrics) do
    if x.kind == "histogram" then T.eq(x.encoded, mm[x.key].encoded, x.key .. " in the database") end
  end
  store:close()
  T.eq(#merged.shards, 3)

  -- Shards that do not add up are refused, with what is wrong.
  local bad = kb.process.run { cmd = { BIN, "merge", "-o", out, dirs[1], dirs[1] }, timeout = 60 }
  T.eq(bad.code, 1)
  T.contains(bad.stderr, "appears twice")
  bad = kb.process.run { cmd = { BIN, "merge", "-o", out, dirs[1], dirs[2] }, timeout = 60 }
  T.eq(bad.code, 1)
  T.contains(bad.stderr, "missing (--force merges anyway)")
  bad = kb.process.run { cmd = { BIN, "merge", kb.fs.join(work, "nope") }, timeout = 60 }
  T.eq(bad.code, 1)
  T.contains(bad.stderr, "kbrun: merge: '" .. kb.fs.join(work, "nope") .. "' is not an experiment folder (no result/result.json)")
  bad = kb.process.run { cmd = { BIN, "merge" }, timeout = 60 }
  T.eq(bad.code, 2)
  T.contains(bad.stderr, "usage: kbrun merge")

  -- A bad --shard or environment is a usage error before anything runs.
  bad = run({ "-o", kb.fs.join(work, "bad"), "--shard", "3/3", scen })
  T.eq(bad.code, 2)
  T.contains(bad.stderr, "kbrun: shard index 3 is not below the shard count 3 (indices count from 0)")
  bad = run({ "-o", kb.fs.join(work, "bad"), scen }, { KBRUN_SHARD_COUNT = "2" })
  T.eq(bad.code, 2)
  T.contains(bad.stderr, "KBRUN_SHARD_COUNT is set but neither KBRUN_SHARD_INDEX nor JOB_COMPLETION_INDEX is")
  kb.fs.remove(work, { recursive = true })
end)

T.run()
