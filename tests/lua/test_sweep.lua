-- kb.sweep (lua/kb/sweep/init.lua and its parts): cells, repeats,
-- seeds, resuming after an interruption, refusing a changed definition,
-- sampling, search, parallel cells with their own targets and simulators,
-- and the reports. The SIGKILL test is tests/e2e/sweep_resume.sh.
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local sweep = require "kb.sweep"
local sampling = require "kb.sweep.sampling"
local sjournal = require "kb.sweep.journal"
local kjournal = require "kb.journal"
local core = require "kb.core"

local OUT = fs.tmpdir("kb-sweep-test")

local function read_csv(path)
  return (csv.parse(fs.read(path), { header = true }))
end

-- A deterministic cell: metrics from the cell's parameters and its seed.
local function synthetic(cell, ctx)
  return { score = cell.a * 10 + cell.b, noise = ctx.rng:int(0, 1000), nested = { x = cell.a } }
end

T.case("a grid: cells, exclusions, ids, repeats, sweep.csv", function()
  local calls = 0
  local r = sweep.run {
    name = "grid", out = OUT, seed = 7, print = false,
    params = { fixed = "f" }, metrics = { "score", "noise" },
    matrix = { a = { 1, 2, 3 }, b = { 10, 20 } },
    repeats = 2,
    exclude = function(cell) return cell.a == 2 and cell.b == 20 and cell.fixed == "f" end,
    run = function(cell, ctx)
      calls = calls + 1
      T.eq(cell.fixed, "f", "fixed params reach the cell")
      T.ok(fs.exists(ctx.exp:path("config", "params.json")), "the cell's experiment folder exists")
      return synthetic(cell, ctx)
    end,
  }
  T.eq(calls, 10, "5 cells x 2 repeats")
  T.eq(r.cells, 5)
  T.eq(r.runs, 10)
  T.eq(r.failed, 0)
  local rows = read_csv(r.csv)
  T.eq(#rows, 10)
  T.eq(rows[1].cell, "c001")
  T.eq(rows[1]["repeat"], "1")
  T.eq(rows[2]["repeat"], "2")
  T.eq(rows[1].a, "1")
  T.eq(rows[1].b, "10")
  T.eq(rows[1].fixed, "f", "fixed parameters are columns too")
  T.eq(rows[1].score, "20")
  T.eq(rows[1]["nested.x"], "1", "nested metrics are flattened")
  local ids = {}
  for _, row in ipairs(rows) do ids[row.cell] = true end
  T.ok(not ids.c004, "a=2, b=20 (c004) is excluded")
  T.ok(ids.c005 and ids.c006, "ids keep the grid's numbering")
  T.ok(rows[1].seed ~= rows[2].seed, "each repeat has its own seed")
  T.ok(fs.exists(fs.join(r.dir, "c001-r2", "result", "result.json")), "one experiment per cell x repeat")
  local html = fs.read(r.html)
  T.contains(html, "<svg")
  T.contains(html, "score vs a")
  T.contains(html, "Heat map")
  T.contains(html, "Best and worst cells by score")
  -- the same definition and seed again: everything is skipped, same csv
  local before = fs.read(r.csv)
  local r2 = sweep.run {
    name = "grid", out = OUT, seed = 7, print = false, params = { fixed = "f" }, metrics = { "score", "noise" },
    matrix = { a = { 1, 2, 3 }, b = { 10, 20 } }, repeats = 2,
    exclude = function(cell) return cell.a == 2 and cell.b == 20 end,
    run = function() error("must not run again") end,
  }
  T.eq(r2.ran, 0)
  T.eq(r2.skipped, 10)
  T.eq(fs.read(r2.csv), before, "a finished sweep re-run writes the same sweep.csv")
end)

T.case("seeds derive from (sweep seed, cell, repeat) only", function()
  local function run(name, parallel)
    return sweep.run { name = name, out = OUT, seed = 99, print = false, parallel = parallel,
      matrix = { a = { 1, 2 }, b = { 1, 2, 3 } }, repeats = 2,
      run = function(cell, ctx)
        kb.sleep(0.001 * ctx.rng:int(1, 5)) -- finish out of order
        return synthetic(cell, ctx)
      end }
  end
  local a, b = run("seeds-a", 1), run("seeds-b", 3)
  T.eq(fs.read(b.csv), fs.read(a.csv), "sequential and parallel sweeps write the same sweep.csv")
  T.eq(sampling.derive(99, "k", 1), sampling.derive(99, "k", 1))
  T.ok(sampling.derive(99, "k", 1) ~= sampling.derive(99, "k", 2))
  T.ok(sampling.derive(99, "k", 1) ~= sampling.derive(100, "k", 1))
  T.ok(sampling.derive(1, "x", 1) >= 0 and sampling.derive(1, "x", 1) < 2 ^ 31)
end)

T.case("an interrupted sweep resumes: finished cells are not run again", function()
  local ran = {}
  local def = function(stop_after)
    return { name = "resume", out = OUT, seed = 3, print = false, matrix = { a = { 1, 2, 3, 4, 5 }, b = { 0 } },
      run = function(cell, ctx)
        ran[#ran + 1] = ctx.id
        if stop_after and #ran > stop_after then kb.sleep(3600) end -- hangs until cancelled
        return synthetic(cell, ctx)
      end }
  end
  local task = kb.spawn(sweep.run, def(2))
  while #ran < 3 do kb.sleep(0.01) end
  task:cancel()
  local ok, err = pcall(task.wait, task)
  T.ok(not ok and kb.is_cancelled(err), "the sweep was cancelled")
  kb.sleep(0.05)
  T.eq(#ran, 3, "no cell started after the cancel")
  local dir = fs.join(OUT, "resume")
  local partial = read_csv(fs.join(dir, "sweep.csv"))
  T.eq(#partial, 2, "sweep.csv holds the two finished cells")
  T.contains(fs.read(fs.join(dir, "sweep.html")), "Incomplete")
  ran = {}
  local r = sweep.run(def(nil))
  T.eq(table.concat(ran, ","), "c003,c004,c005", "only unfinished cells ran")
  T.eq(r.skipped, 2)
  T.ok(fs.exists(fs.join(dir, "c003-r1-interrupted-1")), "the killed cell's folder is kept aside")
  local fresh = sweep.run { name = "resume-ref", out = OUT, seed = 3, print = false,
    matrix = { a = { 1, 2, 3, 4, 5 }, b = { 0 } }, run = synthetic }
  T.eq(fs.read(r.csv), fs.read(fresh.csv), "the resumed sweep.csv equals an uninterrupted one")
end)

T.case("a cell interrupted while it waits for a target, or after its run, says so in result.json", function()
  -- one target, two cells at once: c002 waits for c001's target when the
  -- sweep is cancelled (its folder exists, its run has not started)
  local started = 0
  local task = kb.spawn(sweep.run, { name = "waiting", out = OUT, seed = 3, print = false, parallel = 2,
    targets = { "only" }, matrix = { a = { 1, 2, 3 } },
    run = function()
      started = started + 1
      kb.sleep(3600) -- until cancelled
    end })
  local dir = fs.join(OUT, "waiting")
  while not fs.exists(fs.join(dir, "c002-r1", "config", "params.json")) do kb.sleep(0.01) end
  kb.sleep(0.01)
  task:cancel()
  T.ok(kb.is_cancelled(select(2, pcall(task.wait, task))), "the sweep was cancelled")
  T.eq(started, 1, "only c001 held the target")
  for _, id in ipairs({ "c001-r1", "c002-r1" }) do
    local doc = require("kb.json").decode(fs.read(fs.join(dir, id, "result", "result.json")))
    T.eq(doc.status, "interrupted", id .. " says it was interrupted")
    T.eq(doc.clock.mode, "events", id .. ": the sweep's clock, though no simulator holds it")
  end
  T.ok(not fs.exists(fs.join(dir, "c003-r1")), "no folder for a cell that never started")

  -- an error after the cell's run (its metrics cannot be read) fails the
  -- cell run, and its result.json says why
  local bad = setmetatable({}, { __pairs = function() error("unreadable metrics") end })
  T.raises(function()
    sweep.run { name = "after-run", out = OUT, seed = 3, print = false, matrix = { a = { 1 } },
      run = function() return bad end }
  end, "unreadable metrics")
  local doc = require("kb.json").decode(fs.read(fs.join(OUT, "after-run", "c001-r1", "result", "result.json")))
  T.eq(doc.status, "failed")
  T.contains(doc.error, "unreadable metrics")
end)

T.case("a changed definition is refused, saying what changed", function()
  sweep.run { name = "changed", out = OUT, seed = 1, print = false, matrix = { a = { 1, 2 } }, repeats = 1,
    run = function() return { v = 1 } end }
  T.raises(function()
    sweep.run { name = "changed", out = OUT, seed = 1, print = false, matrix = { a = { 1, 2, 3 } }, repeats = 2,
      run = function() return { v = 1 } end }
  end, "was written by another definition of sweep 'changed'")
  local ok, err = pcall(sweep.run, { name = "changed", out = OUT, seed = 1, print = false,
    matrix = { a = { 1, 2, 3 } }, repeats = 2, version = 2, run = function() return { v = 1 } end })
  T.ok(not ok)
  T.eq(err.class, "usage") -- the user's choice: one message, exit 2 (tests/e2e/user_errors.sh)
  err = tostring(err)
  T.contains(err, "matrix.a: [1,2] -> [1,2,3]")
  T.contains(err, "repeats: 1 -> 2")
  T.contains(err, "version: (none) -> 2")
  T.contains(err, "fresh = true")
  local r = sweep.run { name = "changed", out = OUT, seed = 1, print = false, fresh = true,
    matrix = { a = { 1, 2, 3 } }, repeats = 2, run = function() return { v = 1 } end }
  T.eq(r.ran, 6, "fresh = true starts over")
  T.eq(sjournal.diff({ a = 1, b = { c = 2 } }, { a = 1, b = { c = 3 }, d = "x" })[1], "b.c: 2 -> 3")
end)

T.case("a resumed sweep keeps the journal's seed (kbrun --seed)", function()
  local target = require "kb.target"
  local saved = target.defaults.seed
  local def = function()
    return { name = "seedkeep", out = OUT, print = false, matrix = { a = { 1, 2 } },
      run = function(cell, ctx) return { s = ctx.seed, a = cell.a } end }
  end
  target.defaults.seed = 11
  local first = sweep.run(def())
  target.defaults.seed = 12
  local again = sweep.run(def())
  target.defaults.seed = saved
  T.eq(first.seed, 11)
  T.eq(again.seed, 11, "the journal's seed wins")
  T.eq(again.ran, 0)
  T.eq(fs.read(again.csv), fs.read(first.csv))
end)

T.case("a failing cell is recorded, not re-run, unless retry_failed", function()
  local n = 0
  local def = { name = "failing", out = OUT, seed = 1, print = false, matrix = { a = { 1, 2 } },
    run = function(cell)
      n = n + 1
      if cell.a == 2 then error("cluster too small") end
      return { v = cell.a }
    end }
  local r = sweep.run(def)
  T.eq(r.failed, 1)
  local rows = read_csv(r.csv)
  T.eq(rows[2].status, "failed")
  T.contains(rows[2].error, "cluster too small")
  n = 0
  sweep.run(def)
  T.eq(n, 0, "a recorded failure is a result")
  def.retry_failed = true
  sweep.run(def)
  T.eq(n, 1, "retry_failed re-runs failed cells only")
  local bad = sweep.run { name = "badreturn", out = OUT, print = false, matrix = { a = { 1 } },
    run = function() return 42 end }
  T.eq(read_csv(bad.csv)[1].error, "run returned a number, not a table of metrics")
end)

T.case("random and Latin-hypercube sampling", function()
  local ranges = { n = { 10, 100 }, f = { min = 0.5, max = 2.0 }, l = { min = 1, max = 1000, log = true, int = true },
    c = { values = { "x", "y" } } }
  local cells = sampling.lhs(ranges, 10, sampling.rng(5))
  T.eq(#cells, 10)
  local strata, cs = {}, { x = 0, y = 0 }
  for _, c in ipairs(cells) do
    T.ok(math.type(c.n) == "integer" and c.n >= 10 and c.n <= 100, "n is an integer in range")
    T.ok(c.f >= 0.5 and c.f < 2.0, "f in range")
    T.ok(c.l >= 1 and c.l <= 1000, "l in range")
    local s = math.floor((c.f - 0.5) / 1.5 * 10)
    T.ok(not strata[s], "each stratum of f is used once")
    strata[s] = true
    cs[c.c] = cs[c.c] + 1
  end
  T.eq(cs.x, 5, "categorical strata are balanced")
  local again = sampling.lhs(ranges, 10, sampling.rng(5))
  T.eq(again[3].f, cells[3].f, "deterministic for a seed")
  local rnd = sampling.random(ranges, 50, sampling.rng(1))
  T.eq(#rnd, 50)
  for _, c in ipairs(rnd) do T.ok(c.n >= 10 and c.n <= 100) end
  local r = sweep.run { name = "lhs", out = OUT, seed = 4, print = false,
    sample = { method = "lhs", n = 6, ranges = { n = { 10, 100 } } },
    run = function(cell) return { twice = cell.n * 2 } end }
  T.eq(#read_csv(r.csv), 6)
  T.raises(function() sampling.lhs({ n = { 5, 1 } }, 3, sampling.rng(1)) end, "ranges.n must have numbers lo <= hi")
  T.raises(function() sampling.grid({ a = {} }) end, "matrix.a must be a non-empty list")
end)

T.case("search doubles, then bisects to the limit", function()
  local seen = {}
  local r = sweep.run { name = "search", out = OUT, seed = 1, print = false,
    matrix = { slope = { 10, 20 } },
    search = { param = "num_runs", start = 4, factor = 2, max = 1000, metric = "latency", limit = 455 },
    run = function(cell)
      seen[#seen + 1] = cell.slope .. ":" .. cell.num_runs
      return { latency = cell.num_runs * cell.slope }
    end }
  T.eq(#r.searches, 2)
  local s10 = r.searches[1]
  T.eq(s10.last_ok, 45, "10 x 45 = 450 <= 455")
  T.eq(s10.first_crossing, 46)
  T.eq(r.searches[2].last_ok, 22, "20 x 22 = 440, 20 x 23 = 460")
  T.eq(s10.points[1].value, 4)
  T.eq(s10.points[5].value, 64, "4, 8, 16, 32, 64 then bisect")
  T.contains(fs.read(r.html), "first crossing")
  local n = #seen
  sweep.run { name = "search", out = OUT, seed = 1, print = false, matrix = { slope = { 10, 20 } },
    search = { param = "num_runs", start = 4, factor = 2, max = 1000, metric = "latency", limit = 455 },
    run = function() error("a finished search replays from the journal") end }
  T.eq(#seen, n)
  T.raises(function() sweep.search.check({ param = "x", metric = "m", limit = 1, start = 0 }) end,
    "search.start must be a number > 0")
end)

T.case("parallel cells get exclusive targets", function()
  local busy, max_busy = {}, 0
  local r = sweep.run { name = "targets", out = OUT, print = false, parallel = 2, targets = { "http://a", "http://b" },
    matrix = { a = { 1, 2, 3, 4, 5 } },
    run = function(cell, ctx)
      T.ok(not busy[ctx.target], "target " .. ctx.target .. " is not shared")
      busy[ctx.target] = true
      local n = 0
      for _ in pairs(busy) do n = n + 1 end
      max_busy = math.max(max_busy, n)
      kb.sleep(0.01)
      busy[ctx.target] = nil
      return { target = ctx.target }
    end }
  T.eq(r.runs, 5)
  T.eq(max_busy, 2, "two cells ran at once")
end)

T.case("cells with their own simulated clusters keep the sweep's clock", function()
  local speeds = {}
  local r = sweep.run { name = "sims", out = OUT, seed = 2, print = false, parallel = 2, speed = 600,
    matrix = { nodes = { 1, 2 } },
    run = function(cell, ctx)
      local sim = ctx:sim(sweep.cluster { pools = 1, nodes = cell.nodes, cpu = 4, memory = "8Gi" })
      local nodes = kb.json.decode(kb.http.get(sim.url .. "/api/v1/nodes").body)
      kb.sleep(cell.nodes == 1 and 60 or 600) -- cell 1 ends (and stops its sim) first
      speeds[#speeds + 1] = core.clock_speed()
      return { nodes = #nodes.items }
    end }
  local rows = read_csv(r.csv)
  T.eq(rows[1].nodes, "1")
  T.eq(rows[2].nodes, "2")
  T.eq(rows[2]["metric.nodes"], "2", "a metric named like a parameter gets a prefix")
  T.eq(speeds[2], 600, "the clock kept the sweep's speed after the first cell's simulator stopped")
end)

T.case("bad definitions say what is wrong", function()
  local run = function() return {} end
  T.raises(function() sweep.run { matrix = { a = { 1 } }, run = run } end, "kb.sweep: name is required")
  T.raises(function() sweep.run { name = "x", matrix = { a = { 1 } } } end, "run must be a function")
  T.raises(function() sweep.run { name = "x", run = run } end, "give a matrix, a sample or a search")
  T.raises(function() sweep.run { name = "x", matrix = { a = { 1 } }, run = run, repeats = 0 } end,
    "repeats must be an integer >= 1, got 0")
  T.raises(function() sweep.run { name = "x", matrix = { a = { 1 } }, run = run, parralel = 2 } end,
    'unknown field "parralel"')
  T.raises(function() sweep.run { name = "x", sample = { method = "sobol", n = 3 }, run = run } end,
    'sample.method must be "random" or "lhs", got sobol')
  T.raises(function() sweep.run { name = "x", out = OUT, matrix = { a = { 1 } }, params = { f = print }, run = run } end,
    "the definition must be plain data besides run and exclude")
  T.raises(function() sweep.run { name = "x", out = OUT, matrix = { a = { 1 } }, order = { "b" }, run = run } end,
    'order names "b", which is not a dimension')
  -- a journal that is not a sweep's
  local dir = fs.join(OUT, "notsweep")
  fs.mkdir(dir)
  local j = kjournal.open(fs.join(dir, "journal.jsonl"))
  j:write { event = "other" }
  j:close()
  T.raises(function() sweep.run { name = "notsweep", out = OUT, print = false, matrix = { a = { 1 } }, run = run } end,
    "is not a sweep journal")
end)

T.case("kb.sweep{...} is sweep.run", function()
  local r = kb.sweep { name = "call", out = OUT, print = false, matrix = { a = { 1 } }, run = function() return { v = 1 } end }
  T.eq(r.runs, 1)
end)

T.case("sharded: each shard runs its own cells (round-robin) in a folder of its own", function()
  local shard = require "kb.shard"
  local saved_i, saved_n = shard.index, shard.count
  local ran = {}
  local function once(index)
    shard.set(index, 2)
    local r = sweep.run {
      name = "sharded", out = OUT, seed = 1, print = false,
      matrix = { a = { 1, 2, 3, 4, 5 } },
      run = function(cell, ctx)
        T.ok(not ran[ctx.id], ctx.id .. " ran in two shards")
        ran[ctx.id] = index
        -- a cell is one item of the split: a storm inside it is not split again
        T.same({ shard.range(10, "runs") }, { 1, 10 }, "inside a cell, range takes everything")
        T.ok(shard.owns(2) and shard.owns(1), "inside a cell, owns takes everything")
        T.eq(kb.spawn(function() return shard.size(7) end):wait(), 7, "so do the cell's tasks")
        return { a = cell.a }
      end,
    }
    local split = shard.describe().split
    shard.set(saved_i, saved_n)
    return r, split
  end
  local r0, s0 = once(0)
  local r1, s1 = once(1)
  T.eq(r0.dir, fs.join(OUT, "sharded-shard0of2"))
  T.eq(r1.dir, fs.join(OUT, "sharded-shard1of2"))
  T.eq(r0.runs, 3)
  T.eq(r1.runs, 2)
  T.same(ran, { c001 = 0, c002 = 1, c003 = 0, c004 = 1, c005 = 0 })
  T.same(s0, { cells = { by = "round-robin", items = 3 } }, "only the cells are recorded as split")
  T.same(s1, { cells = { by = "round-robin", items = 2 } })
  T.same({ shard.range(10) }, { 1, 10 }, "unsharded again")
end)

T.run()
fs.remove(OUT, { recursive = true })
