-- What the results database costs (see bench/results_db.md):
--   kbrun -q -o /tmp/kb-bench bench/results_db.lua [pairs=15] [records=30] [pg=postgresql://...]
-- 1. Wall and CPU time (user + system, the child's) of a whole `kbrun scenarios/taxi_50runs.lua` (the 50-run
--    storm on the embedded simulator) with --results-db off and with the
--    default <out>/kbrun.db (and with pg= a PostgreSQL URL), alternating,
--    `pairs` times each: medians.
-- 2. In one process, what the runner does per experiment: open the
--    database (schema check), record one taxi_50runs experiment (82
--    metrics with their histograms, 50 run rows, params, thresholds) in one
--    transaction, close it (the WAL checkpoint); `records` times, median
--    wall and CPU milliseconds, into a database already holding the
--    earlier ones.
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local rdb = require "kb.results.db"

local function median(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v end
  table.sort(t)
  local n = #t
  if n == 0 then return nil end
  if n % 2 == 1 then return t[(n + 1) // 2] end
  return (t[n // 2] + t[n // 2 + 1]) / 2
end

local function run(p)
  local bin = os.getenv("KBRUN_BIN") or fs.abspath("build/kbrun")
  local src = os.getenv("KBRUN_SOURCE_DIR") or "."
  local taxi = fs.join(src, "scenarios", "taxi_50runs.lua")
  local work = fs.tmpdir("kb-bench-rdb-")
  local modes = { { name = "off", db = "off" }, { name = "sqlite", db = nil } }
  if p.pg ~= "" then modes[#modes + 1] = { name = "postgresql", db = p.pg } end
  local walls, cpus = {}, {}
  for _, m in ipairs(modes) do walls[m.name], cpus[m.name] = {}, {} end
  for i = 1, p.pairs do
    for _, m in ipairs(modes) do
      local cmd = { bin, "-q", "-o", fs.join(work, m.name), "--seed", tostring(i), taxi }
      if m.db then table.insert(cmd, 2, "--results-db") table.insert(cmd, 3, m.db) end
      -- the child's CPU (user + system) from the shell's `times`: on a
      -- loaded machine the steadier figure
      local quoted = {}
      for k, a in ipairs(cmd) do quoted[k] = "'" .. a:gsub("'", "'\\''") .. "'" end
      local t0 = kb.time()
      local r = kb.process.run { cmd = { "bash", "-c", table.concat(quoted, " ") .. " >/dev/null || exit 1; times" }, timeout = 120 }
      local dt = kb.time() - t0
      assert(r.code == 0, r.stderr)
      local um, us, sm, ss = r.stdout:match("\n(%d+)m([%d.]+)s (%d+)m([%d.]+)s%s*$")
      table.insert(walls[m.name], dt)
      table.insert(cpus[m.name], tonumber(um) * 60 + tonumber(us) + tonumber(sm) * 60 + tonumber(ss))
    end
  end
  io.stdout:write(string.format("taxi_50runs, whole process, median of %d (alternating):\n", p.pairs))
  local base, cbase = median(walls.off), median(cpus.off)
  for _, m in ipairs(modes) do
    local med, cmed = median(walls[m.name]), median(cpus[m.name])
    io.stdout:write(string.format("  %-11s wall %7.1f ms (%+.1f%%)  CPU %7.1f ms (%+.1f%% vs off)\n", m.name,
      med * 1000, (med / base - 1) * 100, cmed * 1000, (cmed / cbase - 1) * 100))
  end

  -- 2. per experiment, in process
  local dir = fs.join(work, "sqlite")
  local one
  for _, name in ipairs(fs.list(dir)) do
    if fs.exists(fs.join(dir, name, "result", "result.json")) then one = fs.join(dir, name) break end
  end
  local doc = json.decode(fs.read(fs.join(one, "result", "result.json")))
  local targets = { { name = "sqlite", target = fs.join(work, "bench.db") } }
  if p.pg ~= "" then targets[#targets + 1] = { name = "postgresql", target = p.pg } end
  io.stdout:write(string.format("one experiment (%d metrics, 50 runs): open + record + close, median of %d:\n",
    #doc.metrics.metrics, p.records))
  for _, t in ipairs(targets) do
    local wall, cpu, rec = {}, {}, {}
    for i = 1, p.records do
      doc.experiment_id = string.format("bench-%s-%04d", t.name, i)
      collectgarbage()
      local c0, t0 = os.clock(), kb.time()
      local store = rdb.open(t.target)
      local t1 = kb.time()
      store:record(doc, one)
      local t2 = kb.time()
      store:close()
      wall[i], cpu[i], rec[i] = kb.time() - t0, os.clock() - c0, t2 - t1
    end
    io.stdout:write(string.format("  %-11s wall %6.2f ms (record alone %6.2f ms), CPU %6.2f ms\n", t.name,
      median(wall) * 1000, median(rec) * 1000, median(cpu) * 1000))
  end
  fs.remove(work, { recursive = true })
end

return {
  name = "bench_results_db",
  params = { pairs = 15, records = 30, pg = "" },
  run = run,
}
