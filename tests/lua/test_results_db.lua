-- The results database (kb.db, kb.results.db): what two taxi_50runs runs
-- leave in <out>/kbrun.db against their folders, sweep cells with their
-- coordinates, a corrupt file, a newer schema, two writers at once, and
-- the C binding's errors.
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local csv = require "kb.csv"
local kdb = require "kb.db"
local rdb = require "kb.results.db"

local BIN = os.getenv("KBRUN_BIN")
local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local TAXI = fs.join(SRC, "scenarios", "taxi_50runs.lua")

local function kbrun(args, env)
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local cmd = { BIN }
  for _, a in ipairs(args) do cmd[#cmd + 1] = a end
  return kb.process.run { cmd = cmd, timeout = 120, env = env }
end

local function result_of(dir) return json.decode(fs.read(fs.join(dir, "result", "result.json"))) end

local function experiment_dirs(out)
  local list = {}
  for _, name in ipairs(fs.list(out)) do
    if fs.exists(fs.join(out, name, "result", "result.json")) then list[#list + 1] = name end
  end
  table.sort(list)
  return list
end

T.case("kb.db: statements, parameters, types, NULL, errors", function()
  local dir = fs.tmpdir("kb-db-")
  local h = kdb.open(fs.join(dir, "t.db"))
  T.eq(h:kind(), "sqlite")
  h:exec("CREATE TABLE t (a INTEGER, b TEXT, c DOUBLE PRECISION); CREATE TABLE u (x TEXT)")
  h:exec("INSERT INTO t VALUES (?, ?, ?)", { 1, "x'y", 2.5 })
  h:exec("INSERT INTO t VALUES (?, ?, ?)", { n = 3, 2, json.null })
  h:exec("INSERT INTO t VALUES (?, ?, ?)", { 3, "a\0b", true })
  local rows, cols = h:exec("SELECT a, b, c FROM t ORDER BY a")
  T.same(cols, { "a", "b", "c" })
  T.eq(#rows, 3)
  T.eq(math.type(rows[1].a), "integer")
  T.eq(rows[1].b, "x'y")
  T.eq(rows[1].c, 2.5)
  T.eq(rows[2].b, nil, "NULL is absent")
  T.eq(rows[2].c, nil)
  T.eq(rows[3].b, "a\0b", "bytes after a NUL survive")
  T.eq(rows[3].c, 1, "a boolean is 1")
  local empty, ecols = h:exec("SELECT a FROM t WHERE a > ?", { 99 })
  T.eq(#empty, 0)
  T.eq(#ecols, 0)
  local ok, err = pcall(h.exec, h, "SELEC 1")
  T.eq(ok, false)
  T.eq(err.class, "db")
  T.eq(err.code, "error")
  T.contains(err.message, "t.db: prepare: near \"SELEC\": syntax error")
  ok, err = pcall(h.exec, h, "INSERT INTO t VALUES (?, ?, ?)", { 1 })
  T.contains(err.message, "the statement takes 3 parameter(s), 1 given")
  ok, err = pcall(h.exec, h, "SELECT ?", { {} })
  T.contains(tostring(err), "parameter 1 is a table")
  h:close()
  ok, err = pcall(h.exec, h, "SELECT 1")
  T.contains(tostring(err), "the database handle is closed")
  h:close() -- twice is fine
  -- a file that is not a database: refused, and left as it is
  local bogus = fs.join(dir, "bogus.db")
  local junk = string.rep("not a database\n", 200)
  fs.write(bogus, junk)
  ok, err = pcall(kdb.open, bogus)
  T.eq(ok, false)
  T.eq(err.code, "corrupt")
  T.contains(err.message, "file is not a database (the file is left as it is)")
  T.eq(fs.read(bogus), junk)
  T.ok(not fs.exists(bogus .. "-wal"), "no WAL file was made beside it")
  -- a folder that does not exist
  ok, err = pcall(kdb.open, fs.join(dir, "no", "such", "x.db"))
  T.eq(err.code, "error")
  T.contains(err.message, "cannot open")
  -- create = false does not make a file
  ok, err = pcall(kdb.open, fs.join(dir, "absent.db"), { create = false })
  T.eq(ok, false)
  T.ok(not fs.exists(fs.join(dir, "absent.db")))
  -- a database that is not kbrun's is not given kbrun's tables by a reader
  local other = fs.join(dir, "other.db")
  local oh = kdb.open(other)
  oh:exec("CREATE TABLE mine (x INTEGER)")
  oh:close()
  ok, err = pcall(rdb.open, other, { create = false })
  T.eq(err.code, "missing")
  T.contains(err.message, "other.db holds no kbrun results (no kbrun_schema table)")
  oh = kdb.open(other)
  T.eq(#oh:exec("SELECT name FROM sqlite_master WHERE name = 'experiments'"), 0)
  oh:close()
  T.eq(kdb.kind_of("postgresql://u@h/db"), "postgresql")
  T.eq(kdb.kind_of("postgres://h"), "postgresql")
  T.eq(kdb.kind_of("sqlite:x.db"), "sqlite")
  fs.remove(dir, { recursive = true })
end)

T.case("two taxi_50runs runs: the database holds exactly their folders' results", function()
  local out = fs.tmpdir("kb-rdb-taxi-")
  for seed = 1, 2 do
    local r = kbrun { "-q", "-o", out, "--seed", tostring(seed), TAXI }
    T.eq(r.code, 0, r.stderr)
  end
  local dirs = experiment_dirs(out)
  T.eq(#dirs, 2)
  T.ok(not fs.exists(fs.join(out, "kbrun.db-wal")), "the WAL is checkpointed away when kbrun closes the file")
  local store = rdb.open(fs.join(out, "kbrun.db"), { create = false })
  T.eq(store:version(), rdb.SCHEMA_VERSION)
  local exps = store:experiments()
  T.eq(#exps, 2)
  local ids = { exps[1].id, exps[2].id }
  table.sort(ids)
  T.same(ids, dirs, "one row per experiment folder, with its id")
  for _, e in ipairs(exps) do
    local dir = fs.join(out, e.id)
    local doc = result_of(dir)
    local row = store:exec("SELECT * FROM experiments WHERE id = ?", { e.id })[1]
    T.eq(row.scenario, "taxi_50runs")
    T.eq(row.status, doc.status)
    T.eq(row.exit_code, doc.exit_code)
    T.eq(row.seed, doc.seed)
    T.eq(row.started_at, doc.started_at)
    T.eq(row.finished_at, doc.finished_at)
    T.eq(row.duration, doc.duration)
    T.eq(row.clock_kind, doc.clock.kind)
    T.eq(row.clock_mode, doc.clock.mode)
    T.eq(row.kbrun, doc.kbrun)
    T.eq(row.host, doc.environment.host)
    T.eq(row.target, "simulator")
    T.eq(row.verdict, "passed")
    T.eq(row.dir, fs.abspath(dir))
    T.same(json.decode(row.result).runs, doc.result.runs)
    -- parameters
    local params = {}
    for _, p in ipairs(store:exec("SELECT name, value FROM params WHERE experiment_id = ?", { e.id })) do
      params[p.name] = json.decode(p.value)
    end
    T.same(params, doc.params)
    -- every metric, its summary and its exact histogram
    local metrics = store:exec("SELECT * FROM metrics WHERE experiment_id = ?", { e.id })
    T.eq(#metrics, #doc.metrics.metrics)
    local by_key = {}
    for _, m in ipairs(metrics) do by_key[m.key] = m end
    for _, m in ipairs(doc.metrics.metrics) do
      local got = by_key[m.key]
      T.ok(got, m.key)
      T.eq(got.kind, m.kind, m.key)
      T.same(json.decode(got.labels), m.labels, m.key)
      if m.kind == "histogram" then
        for _, s in ipairs({ "count", "min", "max", "mean", "stddev", "p50", "p90", "p95", "p99", "p999", "saturated" }) do
          T.eq(got[s], m.summary[s], m.key .. " " .. s)
        end
        T.eq(got.histogram, m.encoded, m.key .. " encoded")
      else
        T.eq(got.value, m.value, m.key)
      end
    end
    local labels = store:exec("SELECT value FROM metric_labels WHERE experiment_id = ? AND key = ? AND label = 'op'",
      { e.id, "kfp.requests{op=run.create,status=200}" })
    T.eq(labels[1].value, "run.create")
    -- thresholds
    local th = store:exec("SELECT * FROM thresholds WHERE experiment_id = ? ORDER BY position", { e.id })
    T.eq(#th, #doc.thresholds)
    for i, t in ipairs(doc.thresholds) do
      T.eq(th[i].metric, t.name)
      T.eq(th[i].stat, t.stat)
      T.eq(th[i].limit_value, t.limit)
      T.eq(th[i].actual, t.actual)
      T.eq(th[i].passed, t.passed and 1 or 0)
    end
    -- a row per run, as runs.csv has them
    local csv_rows = csv.parse(fs.read(fs.join(dir, "result", "runs.csv")), { header = true })
    local runs = store:exec("SELECT * FROM runs WHERE experiment_id = ? ORDER BY idx", { e.id })
    T.eq(#runs, 50)
    T.eq(#runs, #csv_rows)
    for i, r in ipairs(csv_rows) do
      T.eq(runs[i].idx, tonumber(r.index))
      T.eq(runs[i].run_id, r.id)
      T.eq(runs[i].state, r.state)
      T.eq(runs[i].outcome, r.outcome)
      T.eq(runs[i].created_at, r.created_at)
      T.eq(runs[i].finished_at, r.finished_at)
      T.eq(runs[i].duration, tonumber(r.duration))
      T.eq(runs[i].error, r.error ~= "" and r.error or nil)
    end
    -- the document rebuilt from the database compares as the folder does
    local back = store:document(e.id)
    local cmp = require("kb.results.compare").documents(doc, back, { gates = { { metric = "run.create", stat = "p99", tolerance = 0 } } })
    T.eq(cmp.gates[1].a, cmp.gates[1].b)
    T.eq(cmp.gates[1].test.p, 1)
    T.eq(cmp.regressed, false)
  end
  -- importing the same folders again replaces, never duplicates
  local imported = rdb.import(store, out)
  T.eq(#imported, 2)
  T.eq(imported[1].error, nil)
  T.eq(#store:experiments(), 2)
  T.eq(store:exec("SELECT count(*) AS n FROM runs")[1].n, 100)
  -- filters
  T.eq(#store:experiments { scenario = "nope" }, 0)
  T.eq(#store:experiments { limit = 1 }, 1)
  T.eq(#store:experiments { since = "2999-01-01" }, 0)
  store:close()
  fs.remove(out, { recursive = true })
end)

T.case("a corrupt database is reported, left alone, and the run exits 3 with its folder complete", function()
  local out = fs.tmpdir("kb-rdb-corrupt-")
  local junk = string.rep("garbage", 1000)
  fs.write(fs.join(out, "kbrun.db"), junk)
  local r = kbrun { "-q", "-o", out, TAXI, "num_runs=3" }
  T.eq(r.code, 3, r.stderr)
  T.contains(r.stderr, "kbrun.db: file is not a database (the file is left as it is)")
  T.contains(r.stderr, "results not fully saved")
  T.eq(fs.read(fs.join(out, "kbrun.db")), junk)
  local dirs = experiment_dirs(out)
  T.eq(#dirs, 1)
  local doc = result_of(fs.join(out, dirs[1]))
  T.eq(doc.exit_code, 3)
  T.eq(doc.status, "incomplete")
  T.eq(#doc.metrics.metrics > 0, true, "the folder has everything measured")
  T.ok(fs.exists(fs.join(out, dirs[1], "result", "runs.csv")))
  -- off: no database, exit 0
  r = kbrun { "-q", "-o", out, "--results-db", "off", TAXI, "num_runs=3" }
  T.eq(r.code, 0, r.stderr)
  fs.remove(out, { recursive = true })
end)

T.case("a database from a newer kbrun is refused, with a clear message", function()
  local out = fs.tmpdir("kb-rdb-newer-")
  local path = fs.join(out, "kbrun.db")
  rdb.open(path):close()
  local h = kdb.open(path)
  h:exec("INSERT INTO kbrun_schema (version, kbrun, applied_at) VALUES (?, ?, ?)", { 7, "9.0", "2030-01-01T00:00:00Z" })
  h:close()
  local ok, err = pcall(rdb.open, path)
  T.eq(ok, false)
  T.eq(err.code, "newer")
  T.contains(err.message, "has schema version 7, written by a newer kbrun (this one knows versions up to 1)")
  local r = kbrun { "-q", "-o", out, TAXI, "num_runs=2" }
  T.eq(r.code, 3)
  T.contains(r.stderr, "written by a newer kbrun")
  h = kdb.open(path)
  T.eq(#h:exec("SELECT id FROM experiments"), 0, "nothing was written into it")
  h:close()
  fs.remove(out, { recursive = true })
end)

T.case("an older schema is migrated, in one transaction, keeping its rows", function()
  local out = fs.tmpdir("kb-rdb-migrate-")
  local path = fs.join(out, "kbrun.db")
  local store = rdb.open(path)
  store:record({ experiment_id = "old-1", scenario = { name = "s" }, status = "passed",
    metrics = { version = 1, metrics = {} }, params = { a = 1 } })
  store:close()
  -- a kbrun one schema version ahead
  local version, migrations = rdb.SCHEMA_VERSION, rdb.MIGRATIONS
  rdb.SCHEMA_VERSION = version + 1
  rdb.MIGRATIONS = setmetatable({ [version + 1] = "ALTER TABLE experiments ADD COLUMN note TEXT" }, { __index = migrations })
  local ok, err = pcall(function()
    local s2 = rdb.open(path)
    T.eq(s2:version(), version + 1)
    T.eq(#s2:exec("SELECT note FROM experiments WHERE id = 'old-1'"), 1, "rows kept, the column added")
    s2:close()
    -- a migration that fails leaves the database as it was
    rdb.SCHEMA_VERSION = version + 2
    rawset(rdb.MIGRATIONS, version + 2, "ALTER TABLE nope ADD COLUMN x TEXT")
    local okm, merr = pcall(rdb.open, path)
    T.eq(okm, false)
    T.contains(merr.message, "no such table: nope")
    local h = kdb.open(path)
    T.eq(h:exec("SELECT max(version) AS v FROM kbrun_schema")[1].v, version + 1)
    h:close()
  end)
  rdb.SCHEMA_VERSION, rdb.MIGRATIONS = version, migrations
  if not ok then error(err, 0) end
  fs.remove(out, { recursive = true })
end)

T.case("two kbrun processes writing the same database at once both succeed", function()
  local out = fs.tmpdir("kb-rdb-two-")
  local tasks = {}
  for i = 1, 3 do
    tasks[i] = kb.spawn(kbrun, { "-q", "-o", out, "--seed", tostring(i), TAXI, "num_runs=20" })
  end
  for i = 1, 3 do
    local r = tasks[i]:wait()
    T.eq(r.code, 0, r.stderr)
  end
  local store = rdb.open(fs.join(out, "kbrun.db"), { create = false })
  T.eq(#store:experiments(), 3)
  T.eq(store:exec("SELECT count(*) AS n FROM runs")[1].n, 60)
  store:close()
  fs.remove(out, { recursive = true })
end)

T.case("a locked database: waited for, retried, and a writer that waits succeeds", function()
  local out = fs.tmpdir("kb-rdb-busy-")
  local path = fs.join(out, "kbrun.db")
  rdb.open(path):close()
  -- another writer holds the lock
  local holder = kdb.open(path)
  holder:exec("BEGIN IMMEDIATE")
  local h2 = kdb.open(path, { busy_timeout = 20 })
  local ok, err = pcall(h2.exec, h2, "BEGIN IMMEDIATE")
  T.eq(ok, false)
  T.eq(err.code, "busy")
  T.contains(err.message, "database is locked")
  h2:close()
  local store = rdb.open(path, { busy_timeout = 20 })
  local doc = { experiment_id = "locked-1", scenario = { name = "s" }, status = "passed",
    metrics = { version = 1, metrics = {} }, params = {} }
  ok, err = pcall(store.record, store, doc)
  T.eq(ok, false, "every attempt found the lock")
  T.eq(err.code, "busy")
  T.contains(err.message, "results database " .. path)
  -- a kbrun run meanwhile waits for the lock, and records once it is free
  local task = kb.spawn(kbrun, { "-q", "-o", out, TAXI, "num_runs=3" })
  kb.sleep(1.5)
  T.eq(task:done(), false, "kbrun waits while the lock is held")
  holder:exec("ROLLBACK")
  local r = task:wait()
  T.eq(r.code, 0, r.stderr)
  store:record(doc) -- free now
  T.eq(#store:experiments(), 2)
  store:close()
  holder:close()
  fs.remove(out, { recursive = true })
end)

T.case("sweep cells are recorded with their coordinates", function()
  local out = fs.tmpdir("kb-rdb-sweep-")
  local path = fs.join(out, "cells.db")
  local before = rdb.active_target()
  rdb.configure { url = path }
  local r = require("kb.sweep").run {
    name = "grid", out = out, seed = 3, print = false, metrics = { "score" },
    params = { fixed = 0.5 }, matrix = { a = { 1, 2 }, b = { "x", "yy" } },
    run = function(cell) return { score = cell.a * 10 + #cell.b, nested = { ratio = cell.a / 3 } } end,
  }
  T.eq(r.runs, 4)
  T.eq(#rdb.failures(), 0)
  rdb.close()
  local store = rdb.open(path, { create = false })
  local cells = store:exec("SELECT id, sweep, cell, rep, status, result FROM experiments ORDER BY id")
  T.eq(#cells, 4)
  T.eq(cells[1].id, "grid/c001-r1")
  T.eq(cells[1].sweep, "grid")
  T.eq(cells[1].cell, "c001")
  T.eq(cells[1].rep, 1)
  local coords = {}
  for _, c in ipairs(store:exec("SELECT experiment_id, name, value FROM cell_coordinates ORDER BY experiment_id, name")) do
    coords[c.experiment_id] = coords[c.experiment_id] or {}
    coords[c.experiment_id][c.name] = json.decode(c.value)
  end
  -- against each cell folder's result.json
  for _, c in ipairs(cells) do
    local doc = result_of(fs.join(out, "grid", c.id:match("/(.*)$")))
    T.same(coords[c.id], json.decode(doc.key))
    T.eq(json.decode(c.result).score, doc.metrics.score)
    T.eq(c.status, doc.status)
  end
  -- sweep.csv made again from the database equals the sweep's own, also
  -- after an import of the folder into a new database
  local cli = require "kb.cli.results"
  local want = fs.read(fs.join(out, "grid", "sweep.csv"))
  T.eq(cli.sweep_csv(store, "grid"), want)
  store:close()
  local again = rdb.open(fs.join(out, "imported.db"))
  local imported = rdb.import(again, fs.join(out, "grid"))
  T.eq(#imported, 4)
  T.eq(cli.sweep_csv(again, "grid"), want)
  local e = T.raises(function() cli.sweep_csv(again, "nope") end)
  T.eq(e.class, "usage")
  T.contains(e.message, "no sweep 'nope' in " .. fs.join(out, "imported.db"))
  again:close()
  rdb.configure { url = before or "off" }
  fs.remove(out, { recursive = true })
end)

T.run()
