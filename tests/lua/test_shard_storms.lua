-- Every bundled storm honours its shard: http_storm, job_storm and
-- argo_storm run as `kbrun --shard 0/2` and `1/2` (job_storm and argo_storm
-- against the embedded simulator, http_storm against its own loopback
-- server), then `kbrun merge` of the two shard folders. Checked against
-- ground truth:
--   - each shard took the items round-robin gives it (kb.shard.items,
--     recorded in result.json's shard.split) and did only those: its
--     histogram and counter counts equal its share;
--   - the merged counts equal those of one unsharded run of the same
--     parameters (and the sum of the shards' own counts);
--   - merged rates are recomputed from the merged counts (with failing
--     pods, the shards' rates differ, and the merged completed_rate is
--     completed / requested, not their mean);
--   - http_storm's merged latency figures are the merged histogram's.
-- kb.shard.items itself and merge's check of round-robin parts are tested
-- at the end without processes.
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local shard = require "kb.shard"
local merge = require "kb.results.merge"

local BIN = os.getenv("KBRUN_BIN")
local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."

local function kbrun(args)
  local cmd = { BIN }
  if args[1] ~= "merge" then cmd[2] = "-q" end
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  return kb.process.run { cmd = cmd, timeout = 240 }
end

local function result_of(dir) return json.decode(fs.read(fs.join(dir, "result", "result.json"))) end

local function experiments(folder)
  local out = {}
  for _, name in ipairs(fs.list(folder)) do
    local d = fs.join(folder, name)
    if fs.exists(fs.join(d, "result", "result.json")) == "file" then out[#out + 1] = d end
  end
  return out
end

-- count of a histogram, value of a counter (0 when absent), by key
local function metric(doc, key)
  for _, m in ipairs(doc.metrics.metrics) do
    if m.key == key then return m.kind == "histogram" and m.summary.count or m.value, m end
  end
  return 0
end

-- Runs the scenario unsharded (unless opts.no_whole) and as two shards (in
-- parallel), merges the shards; returns the unsharded doc, the two shard
-- docs (by index) and the merged doc. Every run must exit 0, or with one of
-- opts.codes; the merge exits 0 (its result.json says 99 when the merged
-- thresholds fail).
local function sharded(work, file, params, opts)
  opts = opts or {}
  local codes = opts.codes or { [0] = true }
  local scen = fs.join(SRC, "scenarios", file)
  local function args(out, extra)
    local a = { "-o", fs.join(work, out), "--seed", "7" }
    for _, x in ipairs(extra) do a[#a + 1] = x end
    a[#a + 1] = scen
    for _, p in ipairs(params) do a[#a + 1] = p end
    return a
  end
  local tasks = {
    kb.spawn(kbrun, args("shards", { "--shard", "0/2" })),
    kb.spawn(kbrun, args("shards", { "--shard", "1/2" })),
  }
  if not opts.no_whole then tasks[3] = kb.spawn(kbrun, args("whole", {})) end
  for i, r in ipairs(kb.all(tasks)) do
    T.ok(codes[r.code], file .. " run " .. i .. " exit " .. tostring(r.code) .. ": " .. r.stderr)
  end
  local whole = not opts.no_whole and result_of(experiments(fs.join(work, "whole"))[1]) or nil
  local dirs = experiments(fs.join(work, "shards"))
  T.eq(#dirs, 2, "two shard experiments")
  local shards = {}
  for _, d in ipairs(dirs) do
    local doc = result_of(d)
    shards[doc.shard.index + 1] = doc
  end
  local m = kbrun { "merge", "-o", fs.join(work, "merged"), dirs[1], dirs[2] }
  local merged = result_of(experiments(fs.join(work, "merged"))[1])
  T.eq(m.code, 0, "kbrun merge: " .. m.stderr)
  T.eq(merged.exit_code, merged.status == "passed" and 0 or 99, "the merged experiment's exit code")
  return whole, shards, merged
end

-- Shard i of 2 took the items round-robin gives it.
local function check_split(shards, what, total)
  for i, doc in ipairs(shards) do
    local rec = doc.shard and doc.shard.split and doc.shard.split[what]
    T.ok(rec, "shard " .. (i - 1) .. " records its split of " .. what)
    T.eq(rec.by, "round-robin")
    T.eq(rec.total, total)
    T.eq(rec.items, (total - (i - 1) + 1) // 2, "shard " .. (i - 1) .. " of 2 takes its round-robin share")
  end
end

T.case("http_storm: 2 shards merged = one run (counts, rate from counts, latency from the merged histogram)", function()
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local work = fs.tmpdir("kb-shard-http")
  local N = 41
  local whole, shards, merged = sharded(work, "http_storm.lua",
    { "requests=" .. N, "concurrency=4", "rate=400" })
  check_split(shards, "requests", N)
  for i, doc in ipairs(shards) do
    local share = doc.shard.split.requests.items
    T.eq(doc.result.requests, share, "shard " .. (i - 1) .. " result.requests")
    T.eq(metric(doc, "http.get"), share, "shard " .. (i - 1) .. " timed only its requests")
    T.eq(metric(doc, "http.requests{outcome=ok}"), share)
  end
  T.eq(whole.result.requests, N)
  T.eq(metric(whole, "http.get"), N)
  -- merged counts = the unsharded run's = the sum of the shards'
  for _, key in ipairs({ "requests", "succeeded", "failed" }) do
    T.eq(merged.result[key], whole.result[key], "merged result." .. key)
    T.eq(merged.result[key], shards[1].result[key] + shards[2].result[key], "sum of the shards' " .. key)
  end
  T.eq(metric(merged, "http.get"), N, "merged histogram count")
  T.eq(metric(merged, "http.requests{outcome=ok}"), metric(whole, "http.requests{outcome=ok}"))
  T.eq(merged.result.success_rate, merged.result.succeeded / merged.result.requests, "rate from counts")
  T.eq(merged.result.success_rate, 1)
  -- throughputs of shards side by side add; the latency table names its
  -- histogram, so its figures are the merged histogram's, not dropped
  T.near(merged.result.requests_per_second,
    shards[1].result.requests_per_second + shards[2].result.requests_per_second, 1e-9)
  local _, h = metric(merged, "http.get")
  for _, stat in ipairs({ "p50", "p90", "p99", "max" }) do
    T.eq(merged.result.latency[stat], h.summary[stat], "merged latency." .. stat)
  end
  T.same(merged.merge.unmerged, {}, "nothing dropped")
  fs.remove(work, { recursive = true })
end)

T.case("job_storm on the simulator: 2 shards merged = one run", function()
  local work = fs.tmpdir("kb-shard-jobs")
  local N = 9
  local whole, shards, merged = sharded(work, "job_storm.lua", { "jobs=" .. N, "concurrency=3" })
  check_split(shards, "jobs", N)
  for i, doc in ipairs(shards) do
    local share = doc.shard.split.jobs.items
    T.eq(doc.result.requested, share, "shard " .. (i - 1) .. " result.requested")
    T.eq(metric(doc, "k8s.create.jobs"), share, "shard " .. (i - 1) .. " created only its Jobs")
    T.eq(metric(doc, "lifecycle.job.complete{source=watch}"), share)
  end
  for _, key in ipairs({ "requested", "created", "completed", "failed_create" }) do
    T.eq(merged.result[key], whole.result[key], "merged result." .. key .. " = unsharded")
  end
  T.eq(merged.result.requested, N)
  T.eq(merged.result.outcomes.complete, N)
  T.eq(merged.result.completed_rate, 1)
  for _, key in ipairs({ "k8s.create.jobs", "lifecycle.pod.running{source=watch}",
    "lifecycle.job.complete{source=server}" }) do
    T.eq(metric(merged, key), metric(whole, key), "merged " .. key .. " = unsharded")
    T.eq(metric(merged, key), N)
  end
  fs.remove(work, { recursive = true })
end)

T.case("job_storm with failing pods: merged rate recomputed from the merged counts", function()
  local work = fs.tmpdir("kb-shard-jobfail")
  local N = 12
  -- failures are drawn by the simulator: the counts differ between runs,
  -- so the ground truth is the shards' own counts
  local _, shards, merged = sharded(work, "job_storm.lua",
    { "jobs=" .. N, "concurrency=4", "fail_probability=0.5", "duration=fixed:10" },
    { no_whole = true, codes = { [0] = true, [99] = true } })
  local completed, requested = 0, 0
  for _, doc in ipairs(shards) do
    completed = completed + doc.result.completed
    requested = requested + doc.result.requested
    T.eq(doc.result.completed_rate, doc.result.completed / doc.result.requested)
    T.eq(doc.result.completed + (doc.result.outcomes.failed or 0), doc.result.requested,
      "every Job of the shard finished, complete or failed")
  end
  T.eq(requested, N)
  T.eq(merged.result.requested, N)
  T.eq(merged.result.completed, completed)
  T.eq(merged.result.outcomes.complete or 0, completed)
  T.eq((merged.result.outcomes.failed or 0), N - completed)
  T.eq(merged.result.completed_rate, completed / N, "completed / requested of the merged counts")
  T.eq(merged.status, completed == N and "passed" or "failed", "the threshold evaluated on the merged rate")
  fs.remove(work, { recursive = true })
end)

T.case("argo_storm on the simulator: 2 shards merged = one run", function()
  local work = fs.tmpdir("kb-shard-argo")
  local N = 7
  local whole, shards, merged = sharded(work, "argo_storm.lua",
    { "workflows=" .. N, "concurrency=3", "steps=1", "step_duration=fixed:5", "rate=0.5" })
  check_split(shards, "workflows", N)
  for i, doc in ipairs(shards) do
    local share = doc.shard.split.workflows.items
    T.eq(doc.result.requested, share, "shard " .. (i - 1) .. " result.requested")
    T.eq(metric(doc, "argo.create"), share, "shard " .. (i - 1) .. " submitted only its workflows")
  end
  for _, key in ipairs({ "requested", "submitted", "refused", "succeeded" }) do
    T.eq(merged.result[key], whole.result[key], "merged result." .. key .. " = unsharded")
  end
  T.eq(merged.result.submitted, N)
  T.eq(merged.result.phases.Succeeded, N)
  T.eq(merged.result.completed_rate, merged.result.succeeded / merged.result.requested)
  for _, key in ipairs({ "argo.create", "argo.completion", "argo.duration" }) do
    T.eq(metric(merged, key), metric(whole, key), "merged " .. key .. " = unsharded")
    T.eq(metric(merged, key), N)
  end
  fs.remove(work, { recursive = true })
end)

T.case("kb.shard.items: round-robin, disjoint, whole, recorded; merge checks the parts", function()
  local saved_i, saved_n = shard.index, shard.count
  for _, total in ipairs({ 0, 1, 5, 12 }) do
    for n = 1, 4 do
      local seen, count = {}, 0
      for i = 0, n - 1 do
        shard.set(i, n)
        local list = shard.items(total, "x")
        for k, item in ipairs(list) do
          T.eq((item - 1) % n, i, "item " .. item .. " belongs to shard " .. i)
          T.ok(not seen[item], "item taken twice")
          T.ok(k == 1 or item > list[k - 1], "in increasing order")
          seen[item], count = true, count + 1
        end
        T.same(shard.splits.x, { by = "round-robin", total = total, items = #list })
      end
      T.eq(count, total, "every item taken once")
    end
  end
  -- inside a split part (a sweep cell) everything is taken, nothing recorded
  shard.set(1, 3)
  T.same(shard.within_part("cells", shard.items, 4, "y"), { 1, 2, 3, 4 })
  T.eq(shard.splits.y, nil)
  shard.set(saved_i, saved_n)

  local function doc(index, items)
    return { scenario = { name = "s" }, params = {}, status = "passed",
      shard = { index = index, count = 2, split = { requests = { by = "round-robin", total = 5, items = items } } },
      metrics = { version = 1, metrics = json.array({}) }, result = { requests = items } }
  end
  local ok = merge.documents({ doc(0, 3), doc(1, 2) })
  T.eq(ok.result.requests, 5)
  T.raises(function() merge.documents({ doc(0, 3), doc(1, 3) }) end,
    "input 2 (shard 1/2) took 3 of the 5 requests; round-robin gives it 2")
  local forced = merge.documents({ doc(0, 2), doc(1, 2) }, { force = true })
  T.contains(table.concat(forced.merge.warnings, "\n"), "the shards' requests add up to 4 of 5")
end)

T.run()
