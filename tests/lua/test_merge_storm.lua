-- Two real shards of a KFP run storm (scenarios/taxi_50runs.lua on the
-- embedded simulator, kbrun --shard 0/2 and 1/2), then `kbrun merge`:
--   - the shards' runs add up to num_runs exactly and are disjoint (their
--     recorded splits cover 1..num_runs once; run names differ);
--   - every merged figure equals the one computed from the ground truth,
--     the union of both shards' runs.csv and latencies.csv: run counts,
--     success_rate, durations and observed_lag (count, min, max, p50, p90,
--     p99, mean), server_vs_client's client counts and percentiles (from
--     merged histograms, to their 3 significant digits), the comparison
--     rows; the merged runs.csv is the union in global order.
-- Before, every shard ran all num_runs runs and merge added integers:
-- success_rate 2 and a p50 the sum of the shards' p50s.
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"

local BIN = os.getenv("KBRUN_BIN")
local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local NUM_RUNS = 9

local function run(args)
  local cmd = { BIN, "-q" }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  return kb.process.run { cmd = cmd, timeout = 240 }
end

local function read_csv(path) return (csv.parse(fs.read(path), { header = true })) end
local function result_of(dir) return json.decode(fs.read(fs.join(dir, "result", "result.json"))) end

local function nearest(list, q)
  local v = {}
  for i, x in ipairs(list) do v[i] = x end
  table.sort(v)
  return v[math.max(1, math.ceil(q * #v))]
end

local function stats(list)
  local sum = 0
  for _, x in ipairs(list) do sum = sum + x end
  return { count = #list, min = nearest(list, 0), max = nearest(list, 1), p50 = nearest(list, 0.5),
    p90 = nearest(list, 0.9), p99 = nearest(list, 0.99), mean = #list > 0 and sum / #list or nil }
end

local function close_to(a, b, rel, what)
  T.ok(type(a) == "number" and type(b) == "number" and math.abs(a - b) <= rel * math.abs(b) + 1e-9,
    string.format("%s: merged %s, ground truth %s", what, tostring(a), tostring(b)))
end

T.case("two storm shards: disjoint, whole, and merged from the union of their rows", function()
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local work = fs.tmpdir("kb-merge-storm")
  local shards = fs.join(work, "shards")
  local scen = fs.join(SRC, "scenarios", "taxi_50runs.lua")
  local results = kb.all {
    kb.spawn(run, { "-o", shards, "--seed", "3", "--shard", "0/2", scen, "num_runs=" .. NUM_RUNS }),
    kb.spawn(run, { "-o", shards, "--seed", "3", "--shard", "1/2", scen, "num_runs=" .. NUM_RUNS }),
  }
  for i, r in ipairs(results) do T.eq(r.code, 0, "shard " .. (i - 1) .. ": " .. r.stderr) end
  local dirs = {}
  for _, name in ipairs(fs.list(shards)) do
    local d = fs.join(shards, name)
    if fs.exists(fs.join(d, "result", "result.json")) then dirs[#dirs + 1] = d end
  end
  T.eq(#dirs, 2, "two shard experiments")

  -- item 3: the shards' parts are disjoint and add up to num_runs
  local union_runs, union_calls, names, covered = {}, {}, {}, {}
  local requested = 0
  for _, d in ipairs(dirs) do
    local doc = result_of(d)
    local split = doc.shard and doc.shard.split and doc.shard.split.runs
    T.ok(split, "shard " .. tostring(doc.shard and doc.shard.index) .. " records its split of the runs")
    T.eq(split.total, NUM_RUNS)
    T.eq(split.first, doc.shard.index == 0 and 1 or 6)
    for i = split.first, split.last do
      T.ok(not covered[i], "run " .. i .. " taken by two shards")
      covered[i] = true
    end
    local rows = read_csv(fs.join(d, "result", "runs.csv"))
    T.eq(#rows, split.last - split.first + 1, "the shard ran exactly its part")
    T.eq(doc.result.runs.requested, #rows)
    requested = requested + doc.result.runs.requested
    for _, row in ipairs(rows) do
      T.ok(not names[row.name], "run name " .. row.name .. " in two shards")
      -- (ids are each simulator's own: two seeded simulators hand out the same ones)
      names[row.name] = true
      union_runs[#union_runs + 1] = row
    end
    for _, c in ipairs(read_csv(fs.join(d, "result", "latencies.csv"))) do union_calls[#union_calls + 1] = c end
  end
  T.eq(requested, NUM_RUNS, "the shards' runs add up to num_runs")
  for i = 1, NUM_RUNS do T.ok(covered[i], "run " .. i .. " taken by no shard") end

  -- item 4: merge, and compare with the ground truth
  local out = fs.join(work, "merged")
  local m = kb.process.run { cmd = { BIN, "merge", "-o", out, dirs[1], dirs[2] }, timeout = 120 }
  T.eq(m.code, 0, "kbrun merge: " .. m.stderr)
  local merged_dir = m.stdout:gsub("%s+$", "") -- kbrun merge prints it (kbrun.db is beside it)
  local doc = result_of(merged_dir)
  local r = doc.result
  local succeeded, durations, lags = 0, {}, {}
  for _, row in ipairs(union_runs) do
    if row.outcome == "Succeeded" then
      succeeded = succeeded + 1
      if tonumber(row.duration) then durations[#durations + 1] = tonumber(row.duration) end
    end
    if tonumber(row.observed_lag) then lags[#lags + 1] = tonumber(row.observed_lag) end
  end
  T.eq(r.runs.requested, NUM_RUNS)
  T.eq(r.runs.succeeded, succeeded)
  T.eq(r.success_rate, succeeded / NUM_RUNS, "success_rate from the merged counts")
  T.ok(r.success_rate <= 1, "a rate is never summed")
  for name, truth in pairs({ durations = stats(durations), observed_lag = stats(lags) }) do
    for _, k in ipairs({ "count", "min", "max", "p50", "p90", "p99" }) do
      T.eq(r[name][k], truth[k], name .. "." .. k .. " equals the union's")
    end
    close_to(r[name].mean, truth.mean, 1e-12, name .. ".mean")
  end
  local shard_p50 = result_of(dirs[1]).result.durations.p50 + result_of(dirs[2]).result.durations.p50
  T.ok(r.durations.p50 < shard_p50, "p50 is not the sum of the shards' p50s")
  -- timed calls: counts exact, percentiles from merged histograms
  local by_op = {}
  for _, c in ipairs(union_calls) do
    if c.error_class == nil or c.error_class == "" then
      local list = by_op[c.op] or {}
      list[#list + 1] = tonumber(c.latency)
      by_op[c.op] = list
    end
  end
  T.eq(#by_op["run.create"], NUM_RUNS)
  local seen = 0
  for _, row in ipairs(r.server_vs_client) do
    local list = by_op[row.op]
    if row.client and list then
      seen = seen + 1
      T.eq(row.client.count, #list, row.op .. " client count")
      close_to(row.client.p50, nearest(list, 0.5), 0.002, row.op .. " client p50")
      close_to(row.client.p99, nearest(list, 0.99), 0.002, row.op .. " client p99")
    end
    T.eq(row.server, nil, "the server side (each shard's own window) is dropped")
  end
  T.ok(seen >= 3, "server_vs_client rows checked: " .. seen)
  for _, c in ipairs(r.comparison) do
    if c.metric == "durations" then T.eq(c.measured, r.durations[c.stat], "comparison " .. c.label) end
  end
  T.eq(r.server_metrics.available, false)
  T.ok(#doc.merge.notes >= 2, "what was dropped is noted")
  T.eq(r.clock.speed, 1, "a setting equal in both shards is kept, not summed")
  T.eq(r.clock.mode, "events", "the shards' clock: fast-forwarding")
  -- the merged runs.csv is the union, in the order of the whole run
  local rows = read_csv(fs.join(merged_dir, "result", "runs.csv"))
  T.eq(#rows, NUM_RUNS)
  for i, row in ipairs(rows) do T.eq(tonumber(row.index), i, "global run index") end
  T.eq(#read_csv(fs.join(merged_dir, "result", "latencies.csv")), #union_calls)
  fs.remove(work, { recursive = true })
end)

T.run()
