--- kb.results.db: every experiment kbrun writes, also recorded in a
-- results database (docs/results.md, "The results database").
--
--   local rdb = require "kb.results.db"
--   local store = rdb.open("experiments/kbrun.db")     -- or "postgresql://..."
--   store:record(doc, dir)          -- one experiment (its result.json document
--                                   -- and folder), in one transaction
--   store:experiments{ scenario = "taxi_50runs", since = "2026-12-01" }
--   store:document(id)              -- a result.json-like document (kb.results.compare)
--   store:close()
--   rdb.import(store, dir)          -- every experiment under dir
--
-- The runner records each experiment through the module's active store
-- (rdb.configure, rdb.record, rdb.failures, rdb.close): the default is
-- `<out>/kbrun.db` (SQLite), `--results-db URL` or KBRUN_RESULTS_DB
-- another one, `off` none. The folder stays the source of truth: the
-- database is written from the same document as result.json and can be
-- rebuilt from folders (`kbrun db import`). A failure to write it is
-- logged and kept in rdb.failures(); the runner then exits 3.
--
-- Schema: M.SCHEMA_VERSION and M.MIGRATIONS (a list of SQL texts, one per
-- version). A database whose version is newer than this kbrun's is
-- refused (class "db", code "newer"); an older one is migrated in a
-- transaction. Writes retry on a locked SQLite file (code "busy").
local kdb = require "kb.db"
local json = require "kb.json"
local fs = require "kb.fs"
local log = require "kb.log"
local secrets = require "kb.secrets"
local csv = require "kb.csv"

local M = {}

local format = string.format

--- The schema version this kbrun writes.
M.SCHEMA_VERSION = 1

--- The file name of the default SQLite database in an experiments folder.
M.FILE = "kbrun.db"

-- Portable SQL: the same text runs on SQLite and PostgreSQL.
M.MIGRATIONS = {
  [1] = [[
CREATE TABLE experiments (
  id TEXT PRIMARY KEY, scenario TEXT, scenario_file TEXT,
  sweep TEXT, cell TEXT, cell_key TEXT, rep INTEGER,
  status TEXT, verdict TEXT, exit_code INTEGER, error TEXT,
  clock_kind TEXT, clock_mode TEXT, clock_speed DOUBLE PRECISION, seed BIGINT,
  started_at TEXT, finished_at TEXT, duration DOUBLE PRECISION,
  kbrun TEXT, lua TEXT, host TEXT, os TEXT, kernel TEXT, cpus INTEGER,
  target TEXT, dir TEXT, result TEXT, recorded_at TEXT NOT NULL, seq BIGINT NOT NULL,
  sweep_columns TEXT);
CREATE INDEX experiments_scenario ON experiments (scenario, started_at);
CREATE TABLE params (
  experiment_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT,
  PRIMARY KEY (experiment_id, name));
CREATE TABLE metrics (
  experiment_id TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL,
  labels TEXT, count BIGINT, min DOUBLE PRECISION, max DOUBLE PRECISION,
  mean DOUBLE PRECISION, stddev DOUBLE PRECISION, p50 DOUBLE PRECISION,
  p90 DOUBLE PRECISION, p95 DOUBLE PRECISION, p99 DOUBLE PRECISION,
  p999 DOUBLE PRECISION, saturated BIGINT, value DOUBLE PRECISION, histogram TEXT,
  PRIMARY KEY (experiment_id, key));
CREATE INDEX metrics_name ON metrics (name);
CREATE TABLE metric_labels (
  experiment_id TEXT NOT NULL, key TEXT NOT NULL, label TEXT NOT NULL, value TEXT,
  PRIMARY KEY (experiment_id, key, label));
CREATE TABLE thresholds (
  experiment_id TEXT NOT NULL, position INTEGER NOT NULL, metric TEXT, stat TEXT, op TEXT,
  limit_value DOUBLE PRECISION, actual DOUBLE PRECISION, passed INTEGER, kind TEXT,
  PRIMARY KEY (experiment_id, position));
CREATE TABLE runs (
  experiment_id TEXT NOT NULL, idx INTEGER NOT NULL, run_id TEXT, name TEXT, state TEXT,
  outcome TEXT, created_at TEXT, finished_at TEXT, duration DOUBLE PRECISION, error TEXT,
  PRIMARY KEY (experiment_id, idx));
CREATE TABLE cell_coordinates (
  experiment_id TEXT NOT NULL, name TEXT NOT NULL, value TEXT,
  PRIMARY KEY (experiment_id, name));
]],
}

-- The tables holding rows of one experiment (deleted before it is
-- written again: an import is idempotent).
local CHILD_TABLES = { "params", "metrics", "metric_labels", "thresholds", "runs", "cell_coordinates" }

local function db_error(code, fmt, ...)
  error(setmetatable({ class = "db", code = code, message = format(fmt, ...) },
    { __tostring = function(e) return "db: " .. e.message end }), 0)
end

local function message_of(err)
  if type(err) == "table" then return err.message or tostring(err) end
  return tostring(err)
end

local function is_pg(target) return kdb.kind_of(target) == "postgresql" end

--- What to call a target in messages: a PostgreSQL URL with its user
-- information and password parameters redacted, a file as it is.
function M.describe(target)
  if is_pg(target) then return log.redact(target) end
  return (target:gsub("^sqlite:", ""))
end

-- A PostgreSQL URL's password (userinfo or ?password=) is a secret: it is
-- registered, so that no log line, error or result file can hold it.
local function register_url_secrets(target)
  if not is_pg(target) then return end
  local userinfo = target:match("^[%a]+://([^@/]*)@")
  if userinfo then
    local pass = userinfo:match(":(.*)$")
    if pass and pass ~= "" then secrets.register(pass) end
    secrets.register(userinfo)
  end
  local qpass = target:match("[?&]password=([^&]*)")
  if qpass and qpass ~= "" then secrets.register(qpass) end
end

-- ---- the store ------------------------------------------------------------------

local Store = {}
Store.__index = Store

local function wrap(store, err)
  if type(err) == "table" and err.class == "db" then
    local msg = tostring(err.message):gsub("^kb%.db%.%a+: ", "")
    if msg:find(store.name, 1, true) then msg = "results database " .. msg
    else msg = format("results database %s: %s", store.name, msg) end
    err.message = secrets.scrub(msg)
  end
  return err
end

--- store:exec(sql [, params]) -> rows, columns (kb.db's exec, errors
-- naming the database).
function Store:exec(sql, params)
  local ok, rows, cols = pcall(self.h.exec, self.h, sql, params)
  if not ok then error(wrap(self, rows), 0) end
  return rows, cols
end

-- Runs fn(store) inside one transaction; a locked SQLite database is
-- retried (the C core already waits busy_timeout for each statement).
function Store:transaction(fn)
  local attempts = 4
  for attempt = 1, attempts do
    local ok, err = pcall(function()
      self:exec(self.kind == "sqlite" and "BEGIN IMMEDIATE" or "BEGIN")
      local okf, ferr = pcall(fn, self)
      if not okf then
        pcall(self.h.exec, self.h, "ROLLBACK")
        error(ferr, 0)
      end
      self:exec("COMMIT")
    end)
    if ok then return end
    if not (type(err) == "table" and err.code == "busy") or attempt == attempts then error(err, 0) end
    log.warn("%s (attempt %d of %d, trying again)", message_of(err), attempt, attempts)
  end
end

--- store:version() -> the schema version the database holds (0: none).
function Store:version()
  local rows = self:exec("SELECT max(version) AS v FROM kbrun_schema")
  return rows[1] and rows[1].v or 0
end

local function newer(self, v)
  db_error("newer", "results database %s has schema version %d, written by a newer kbrun (this one "
    .. "knows versions up to %d): use that kbrun, or another database (--results-db)",
    self.name, v, M.SCHEMA_VERSION)
end

--- store:migrate([create]): brings the schema to M.SCHEMA_VERSION. With
-- create == false a database without kbrun's tables is refused (code
-- "missing") rather than given them (kbrun history on the wrong file).
function Store:migrate(create)
  -- the usual case, one statement: the schema is this kbrun's already
  local ok, v = pcall(self.version, self)
  if ok and v == M.SCHEMA_VERSION then return end
  if ok and v > M.SCHEMA_VERSION then newer(self, v) end
  if create == false and (not ok or v == 0) then
    db_error("missing", "%s holds no kbrun results (no kbrun_schema table): `kbrun db import DIR` "
      .. "makes a results database from experiment folders", self.name)
  end
  self:transaction(function()
    if self.kind == "postgresql" then
      -- two kbruns creating the schema at once: one after the other
      self:exec("SELECT pg_advisory_xact_lock(1616161616)")
    end
    self:exec("CREATE TABLE IF NOT EXISTS kbrun_schema (version INTEGER NOT NULL, kbrun TEXT, applied_at TEXT NOT NULL)")
    local v = self:version()
    if v > M.SCHEMA_VERSION then newer(self, v) end
    for version = v + 1, M.SCHEMA_VERSION do
      self:exec(M.MIGRATIONS[version])
      self:exec("INSERT INTO kbrun_schema (version, kbrun, applied_at) VALUES (?, ?, ?)",
        { version, require("kb.core").version, os.date("!%Y-%m-%dT%H:%M:%SZ") })
    end
  end)
end

--- rdb.open(target [, opts]) -> store. target: a file (SQLite; created
-- unless opts.create == false) or a postgresql:// URL. Migrates an older
-- schema; refuses a newer one (code "newer"), a corrupt file (code
-- "corrupt", left as it is), a server that cannot be reached after a
-- bounded retry (code "connect").
function M.open(target, opts)
  opts = opts or {}
  register_url_secrets(target)
  local name = M.describe(target)
  if not is_pg(target) and opts.create == false and fs.exists(name) ~= "file" then
    db_error("missing", "no results database at %s (kbrun writes one per experiments folder; "
      .. "`kbrun db import DIR` makes one from existing folders)", name)
  end
  local ok, h = pcall(kdb.open, target, { create = opts.create ~= false, busy_timeout = opts.busy_timeout,
    connect_attempts = opts.connect_attempts, retry_delay = opts.retry_delay })
  if not ok then
    local store = { name = name }
    error(wrap(store, h), 0)
  end
  local store = setmetatable({ h = h, kind = h:kind(), name = name }, Store)
  local okm, merr = pcall(store.migrate, store, opts.create)
  if not okm then
    h:close()
    error(merr, 0)
  end
  return store
end

function Store:close()
  if self.h then self.h:close() end
  self.h = nil
end

-- ---- writing one experiment ----------------------------------------------------------

local NULL = json.null

local function num(v) return type(v) == "number" and v or NULL end
local function int(v) return math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v)) or NULL end
local function str(v)
  if v == nil or v == NULL then return NULL end
  if type(v) == "table" then return json.encode(v, { sort_keys = true }) end
  return tostring(v)
end

-- The experiment's document as result.json holds it: scrubbed, without
-- the time series (kept in the folder only).
local function scrubbed(doc)
  local copy = {}
  for k, v in pairs(doc) do if k ~= "timeseries" then copy[k] = v end end
  return json.decode(secrets.encode_json(copy))
end

-- A kb.sweep cell's result.json: its figures are `metrics`, its registry
-- `registry` (docs/sweep.md).
local function is_cell(doc) return doc.sweep ~= nil and doc.cell ~= nil end

--- rdb.id_of(doc) -> the experiment's id in the database: its folder's
-- id, a sweep cell's prefixed with the sweep ("sweep_taxi/c001-r1").
function M.id_of(doc)
  if is_cell(doc) then return format("%s/%s", doc.sweep, doc.experiment_id or doc.cell) end
  return doc.experiment_id
end

local function verdict_of(thresholds)
  if type(thresholds) ~= "table" or #thresholds == 0 then return NULL end
  for _, t in ipairs(thresholds) do
    if not t.passed then return "failed" end
  end
  return "passed"
end

local function target_of(result)
  local t = type(result) == "table" and result.target
  if type(t) ~= "table" then return NULL end
  if t.simulator then return "simulator" end
  return str(t.url)
end

-- A storm's result/runs.csv, as rows (nil when the folder has none).
local function read_runs(dir)
  if not dir then return nil end
  local path = fs.join(dir, "result", "runs.csv")
  if fs.exists(path) ~= "file" then return nil end
  local rows = csv.parse(fs.read(path), { header = true })
  return rows
end

local INSERT_EXPERIMENT = [[INSERT INTO experiments (id, scenario, scenario_file, sweep, cell, cell_key,
  rep, status, verdict, exit_code, error, clock_kind, clock_mode, clock_speed, seed, started_at,
  finished_at, duration, kbrun, lua, host, os, kernel, cpus, target, dir, result, recorded_at, sweep_columns, seq)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
  (SELECT coalesce(max(seq), 0) + 1 FROM experiments))]]
-- The child rows: one multi-row INSERT per table (and per 400 rows), not
-- one statement per row: a round trip each on PostgreSQL (bench/results_db.md).
local INSERT_METRICS = { "INSERT INTO metrics (experiment_id, key, name, kind, labels, count, min, max, "
  .. "mean, stddev, p50, p90, p95, p99, p999, saturated, value, histogram)", 18 }
local INSERT_LABELS = { "INSERT INTO metric_labels (experiment_id, key, label, value)", 4 }
local INSERT_PARAMS = { "INSERT INTO params (experiment_id, name, value)", 3 }
local INSERT_THRESHOLDS = { "INSERT INTO thresholds (experiment_id, position, metric, stat, op, "
  .. "limit_value, actual, passed, kind)", 9 }
local INSERT_RUNS = { "INSERT INTO runs (experiment_id, idx, run_id, name, state, outcome, created_at, "
  .. "finished_at, duration, error)", 10 }
local INSERT_COORDS = { "INSERT INTO cell_coordinates (experiment_id, name, value)", 3 }
local BATCH = 400

-- Inserts rows (lists of spec[2] values each) with as few statements as
-- the batch size allows.
function Store:insert_rows(spec, rows)
  local head, ncols = spec[1], spec[2]
  local tuple = "(" .. string.rep("?, ", ncols - 1) .. "?)"
  for first = 1, #rows, BATCH do
    local last = math.min(#rows, first + BATCH - 1)
    local params, tuples = {}, {}
    for r = first, last do
      local row = rows[r]
      for c = 1, ncols do params[#params + 1] = row[c] end
      tuples[#tuples + 1] = tuple
    end
    params.n = #tuples * ncols
    self:exec(head .. " VALUES " .. table.concat(tuples, ", "), params)
  end
end

local function sorted_pairs(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local i = 0
  return function()
    i = i + 1
    local k = keys[i]
    if k ~= nil then return k, t[k] end
  end
end

local function empty(v) return v == nil or v == "" end

-- sweep.csv's columns for a cell: what the sweep says (opts.columns), else
-- what its sweep-report.json says (a folder imported after the sweep).
local function sweep_columns(columns, dir)
  if not columns and dir then
    local path = fs.join(fs.dirname(fs.abspath(dir)), "sweep-report.json")
    if fs.exists(path) == "file" then
      local ok, info = pcall(json.decode, fs.read(path))
      if ok and type(info) == "table" then columns = { params = info.params, metrics = info.metrics } end
    end
  end
  if type(columns) ~= "table" then return NULL end
  return json.encode({ params = json.array(columns.params or {}), metrics = json.array(columns.metrics or {}) })
end

--- store:record(doc, dir [, opts]) -> id: writes one experiment, replacing
-- a previous record of the same id, in one transaction. doc: the
-- experiment's result.json document (a run's, a merged one, a sweep
-- cell's); dir: its folder (a storm's result/runs.csv is read from it);
-- opts.columns: a sweep cell's {params, metrics}, sweep.csv's columns
-- (else read from the sweep folder's sweep-report.json).
function Store:record(doc, dir, opts)
  opts = opts or {}
  doc = scrubbed(doc)
  local id = M.id_of(doc)
  if type(id) ~= "string" or id == "" then
    db_error("error", "%s: result.json has no experiment_id", dir or "?")
  end
  local cell = is_cell(doc)
  local snapshot = cell and doc.registry or doc.metrics
  local result = cell and doc.metrics or doc.result
  local env = type(doc.environment) == "table" and doc.environment or {}
  local clock = type(doc.clock) == "table" and doc.clock or {}
  local scenario = type(doc.scenario) == "table" and doc.scenario or {}
  local runs = read_runs(dir)
  -- the rows, built before the transaction opens (it holds the write lock)
  local experiment = {
    id, str(scenario.name or (cell and doc.sweep) or nil), str(scenario.file),
    cell and str(doc.sweep) or NULL, cell and str(doc.cell) or NULL, cell and str(doc.key) or NULL,
    cell and int(doc["repeat"]) or NULL,
    str(doc.status), verdict_of(doc.thresholds), int(doc.exit_code), str(doc.error),
    str(clock.kind), str(clock.mode), num(clock.speed), int(doc.seed),
    str(doc.started_at), str(doc.finished_at), num(doc.duration or doc.elapsed),
    str(doc.kbrun or env.kbrun), str(env.lua), str(env.host), str(env.os), str(env.kernel), int(env.cpus),
    target_of(result), dir and str(fs.abspath(dir)) or NULL,
    (result ~= nil and result ~= NULL) and json.encode(result, { sort_keys = true }) or NULL,
    os.date("!%Y-%m-%dT%H:%M:%SZ"),
    cell and sweep_columns(opts.columns, dir) or NULL,
  }
  local params, metrics, labels, thresholds, run_rows, coords = {}, {}, {}, {}, {}, {}
  for name, value in sorted_pairs(type(doc.params) == "table" and doc.params or {}) do
    params[#params + 1] = { id, tostring(name), json.encode(value) }
  end
  for _, m in ipairs(type(snapshot) == "table" and snapshot.metrics or {}) do
    local s = type(m.summary) == "table" and m.summary or {}
    metrics[#metrics + 1] = { id, str(m.key), str(m.name or m.key), str(m.kind),
      json.encode(m.labels or {}, { sort_keys = true }),
      int(s.count), num(s.min), num(s.max), num(s.mean), num(s.stddev), num(s.p50), num(s.p90),
      num(s.p95), num(s.p99), num(s.p999), int(s.saturated), num(m.value), str(m.encoded) }
    for label, value in sorted_pairs(type(m.labels) == "table" and m.labels or {}) do
      labels[#labels + 1] = { id, str(m.key), tostring(label), str(value) }
    end
  end
  for i, t in ipairs(type(doc.thresholds) == "table" and doc.thresholds or {}) do
    thresholds[#thresholds + 1] = { id, i, str(t.name), str(t.stat), str(t.op), num(t.limit),
      num(t.actual), t.passed and 1 or 0, str(t.kind) }
  end
  local function opt(v) return empty(v) and NULL or v end
  for i, r in ipairs(runs or {}) do
    run_rows[#run_rows + 1] = { id, math.tointeger(tonumber(r.index)) or i, opt(r.id), opt(r.name),
      opt(r.state), opt(r.outcome), opt(r.created_at), opt(r.finished_at), tonumber(r.duration) or NULL,
      opt(r.error) }
  end
  if cell and type(doc.key) == "string" then
    local okk, c = pcall(json.decode, doc.key)
    for name, value in sorted_pairs(okk and type(c) == "table" and c or {}) do
      coords[#coords + 1] = { id, tostring(name), json.encode(value) }
    end
  end
  self:transaction(function()
    -- an experiment recorded before (an import again): replaced
    if self:exec("SELECT 1 AS x FROM experiments WHERE id = ?", { id })[1] then
      for _, t in ipairs(CHILD_TABLES) do
        self:exec("DELETE FROM " .. t .. " WHERE experiment_id = ?", { id })
      end
      self:exec("DELETE FROM experiments WHERE id = ?", { id })
    end
    self:exec(INSERT_EXPERIMENT, experiment)
    self:insert_rows(INSERT_PARAMS, params)
    self:insert_rows(INSERT_METRICS, metrics)
    self:insert_rows(INSERT_LABELS, labels)
    self:insert_rows(INSERT_THRESHOLDS, thresholds)
    self:insert_rows(INSERT_RUNS, run_rows)
    self:insert_rows(INSERT_COORDS, coords)
  end)
  return id
end

-- ---- reading ------------------------------------------------------------------------

--- store:experiments([filter]) -> rows of the experiments table, oldest
-- first (started_at, then the order they were recorded in: seq). filter: scenario (name), since (an ISO date
-- or time: experiments started at or after it), status, limit (the most
-- recent N), id.
function Store:experiments(filter)
  filter = filter or {}
  local where, params = {}, {}
  if filter.scenario then where[#where + 1] = "scenario = ?" params[#params + 1] = filter.scenario end
  if filter.since then where[#where + 1] = "started_at >= ?" params[#params + 1] = filter.since end
  if filter.status then where[#where + 1] = "status = ?" params[#params + 1] = filter.status end
  if filter.id then where[#where + 1] = "id = ?" params[#params + 1] = filter.id end
  local sql = "SELECT id, scenario, sweep, cell, status, verdict, exit_code, seed, started_at, finished_at, "
    .. "duration, clock_kind, kbrun, target, dir, (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id) AS runs "
    .. "FROM experiments e" .. (#where > 0 and (" WHERE " .. table.concat(where, " AND ")) or "")
    .. " ORDER BY started_at DESC, seq DESC"
  if filter.limit then sql = sql .. " LIMIT " .. math.tointeger(filter.limit) end
  local rows = self:exec(sql, #params > 0 and params or nil)
  local out = json.array()
  for i = #rows, 1, -1 do out[#out + 1] = rows[i] end
  return out
end

--- store:document(id) -> a document shaped like result.json (experiment_id,
-- scenario, status, exit_code, params, metrics = a kb.metrics snapshot with
-- every histogram's exact encoding, thresholds, result), or nil when the
-- database has no such experiment. kb.results.compare compares these as it does
-- folders.
function Store:document(id)
  local e = self:exec("SELECT * FROM experiments WHERE id = ?", { id })[1]
  if not e then return nil end
  local doc = { experiment_id = e.id, scenario = { name = e.scenario, file = e.scenario_file },
    status = e.status, exit_code = e.exit_code, seed = e.seed, started_at = e.started_at,
    finished_at = e.finished_at, duration = e.duration, dir = e.dir, params = {},
    metrics = { version = 1, metrics = json.array() }, thresholds = json.array() }
  doc.result = e.result and json.decode(e.result) or nil
  for _, p in ipairs(self:exec("SELECT name, value FROM params WHERE experiment_id = ?", { id })) do
    doc.params[p.name] = json.decode(p.value)
  end
  for _, m in ipairs(self:exec("SELECT * FROM metrics WHERE experiment_id = ? ORDER BY key", { id })) do
    local entry = { key = m.key, name = m.name, kind = m.kind,
      labels = m.labels and json.decode(m.labels) or {} }
    if m.kind == "histogram" then
      entry.encoded = m.histogram
      entry.summary = { count = m.count, min = m.min, max = m.max, mean = m.mean, stddev = m.stddev,
        p50 = m.p50, p90 = m.p90, p95 = m.p95, p99 = m.p99, p999 = m.p999, saturated = m.saturated }
    else
      entry.value = m.value
    end
    doc.metrics.metrics[#doc.metrics.metrics + 1] = entry
  end
  for _, t in ipairs(self:exec("SELECT * FROM thresholds WHERE experiment_id = ? ORDER BY position", { id })) do
    doc.thresholds[#doc.thresholds + 1] = { name = t.metric, stat = t.stat, op = t.op, limit = t.limit_value,
      actual = t.actual, passed = t.passed == 1, kind = t.kind }
  end
  return doc
end

--- store:baseline(spec, scenario [, exclude]) -> id: the experiment
-- `--baseline` names: "last" (the most recent passed experiment of the
-- scenario), "last:N" (the N-th most recent passed one, N >= 1), or an
-- experiment id. exclude: an id that is not a candidate (the run being
-- judged). Raises class "usage" when there is none.
function Store:baseline(spec, scenario, exclude)
  local n = spec == "last" and 1 or tonumber((spec or ""):match("^last:(%d+)$"))
  if not n then
    if self:exec("SELECT id FROM experiments WHERE id = ?", { spec })[1] then return spec end
    error({ class = "usage", message = format("no experiment '%s' in results database %s", spec, self.name) }, 0)
  end
  if n < 1 then error({ class = "usage", message = "--baseline last:N wants N >= 1" }, 0) end
  local rows = self:exec("SELECT id FROM experiments WHERE scenario = ? AND status = 'passed' AND id <> ? "
    .. "ORDER BY started_at DESC, seq DESC", { scenario or "", exclude or "" })
  local row = rows[n]
  if not row then
    error({ class = "usage", message = format("--baseline %s: results database %s holds %d passed "
      .. "experiment(s) of scenario '%s'%s", spec, self.name, #rows, tostring(scenario),
      exclude and " besides the one compared" or "") }, 0)
  end
  return row.id
end

-- ---- import -------------------------------------------------------------------------

local function is_experiment(dir) return fs.exists(fs.join(dir, "result", "result.json")) == "file" end

local function subdirs(dir)
  local list = {}
  for _, name in ipairs(fs.list(dir)) do
    local p = fs.join(dir, name)
    if fs.exists(p) == "dir" then list[#list + 1] = p end
  end
  table.sort(list)
  return list
end

--- rdb.experiment_dirs(dir) -> the experiment folders dir is or holds: an
-- experiment, a sweep's cells, or an experiments folder of them (two
-- levels deep).
function M.experiment_dirs(dir)
  if is_experiment(dir) then return { dir } end
  local out = {}
  for _, d in ipairs(subdirs(dir)) do
    if is_experiment(d) then out[#out + 1] = d
    else
      for _, c in ipairs(subdirs(d)) do
        if is_experiment(c) then out[#out + 1] = c end
      end
    end
  end
  return out
end

--- rdb.import(store, dir) -> { {dir, id} or {dir, error} ... }: records
-- every experiment folder dir is or holds (M.experiment_dirs), from its
-- result/result.json (and runs.csv); also folders written before the
-- database existed. Importing again replaces the records.
function M.import(store, dir)
  local out = {}
  for _, d in ipairs(M.experiment_dirs(dir)) do
    local ok, id = pcall(function()
      local doc = json.decode(fs.read(fs.join(d, "result", "result.json")))
      if type(doc) ~= "table" then db_error("error", "%s: result.json is not an object", d) end
      return store:record(doc, d)
    end)
    out[#out + 1] = ok and { dir = d, id = id } or { dir = d, error = message_of(id) }
  end
  return out
end

-- ---- the runner's store -------------------------------------------------------------

local active = { target = nil, store = nil, failures = {}, failed = false }

--- rdb.target_for(out, url) -> the database a run writes to: url
-- (--results-db), else KBRUN_RESULTS_DB, else <out>/kbrun.db; nil for "off".
function M.target_for(out, url)
  local t = url or os.getenv("KBRUN_RESULTS_DB")
  if t == "off" or t == "none" then return nil end
  if t and t ~= "" then return t end
  return fs.join(out or "experiments", M.FILE)
end

--- rdb.configure{out =, url =}: where rdb.record writes (see target_for).
function M.configure(opts)
  M.close()
  active.target = M.target_for(opts.out, opts.url)
  active.failed, active.failures = false, {}
end

--- rdb.record(doc, dir [, opts]) -> id or nil: records one experiment in the
-- configured database (opened on first use, kept open). A failure is
-- logged once with the database's message and kept (rdb.failures()); the
-- folder's files are never touched by it.
function M.record(doc, dir, opts)
  if not active.target then return nil end
  if active.failed then
    active.failures[#active.failures + 1] = { id = M.id_of(doc), error = active.failed }
    return nil
  end
  local ok, id = pcall(function()
    if not active.store then active.store = M.open(active.target) end
    return active.store:record(doc, dir, opts)
  end)
  if ok then return id end
  local msg = message_of(id)
  -- a database that cannot be opened is not tried again for every cell
  if not active.store then active.failed = msg end
  active.failures[#active.failures + 1] = { id = M.id_of(doc), error = msg }
  log.error("%s (the experiment's folder holds its results; `kbrun db import` adds them later)", msg)
  return nil
end

--- rdb.failures() -> { {id, error} }: the experiments rdb.record could not write.
function M.failures() return active.failures end

--- rdb.active_target() -> the configured target as given (nil: off).
function M.active_target() return active.target end

--- rdb.active_name() -> the configured database, as messages name it (nil: off).
function M.active_name() return active.target and M.describe(active.target) or nil end

--- rdb.close(): closes the configured database.
function M.close()
  if active.store then active.store:close() end
  active.store = nil
end

return M
