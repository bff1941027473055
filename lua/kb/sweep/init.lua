--- kb.sweep: tuning sweeps, one experiment per cell (docs/sweep.md).
--
--   local sweep = require "kb.sweep"          -- or kb.sweep{...}
--   local result = sweep.run {
--     name = "taxi",                          -- the folder <out>/taxi/
--     version = 1,                            -- bump when run() changes meaning
--     params = { api = "v1beta1" },           -- fixed, passed to every cell
--     matrix = { num_runs = {10, 50, 100}, nodes = {1, 3} },
--     repeats = 3,
--     exclude = function(cell) return cell.num_runs > 50 and cell.nodes == 1 end,
--     parallel = 2,                           -- cells at once (default 1)
--     run = function(cell, ctx) ... return { duration_p50 = 640 } end,
--   }
--
-- Instead of a matrix: sample = {method = "random" | "lhs", n = 20,
-- ranges = {num_runs = {10, 500}, ...}}, or search = {param, start,
-- factor, max, metric, limit, above, precision} (kb.sweep.search; with a
-- matrix, one search per matrix cell).
--
-- Every (cell, repeat) runs as its own experiment <out>/<name>/<cell>-r<k>/
-- (kb.experiment: config/params.json, result/result.json) with a seed
-- derived from (sweep seed, cell key, repeat). Finished cells go to
-- journal.jsonl as they end; re-running the same command skips them, so a
-- crash, Ctrl-C or kill -9 costs only the cells that were running.
-- sweep.csv is rewritten after every cell; sweep.html at the end (also
-- after an interruption).
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local log = require "kb.log"
local kmetrics = require "kb.metrics"
local timeseries = require "kb.timeseries"
local experiment = require "kb.experiment"
local sampling = require "kb.sweep.sampling"
local sjournal = require "kb.sweep.journal"
local search = require "kb.sweep.search"
local report = require "kb.sweep.report"
local lock = require "kb.sweep.lock"
local params_mod = require "kb.params"

local M = {}
local format = string.format

M.sampling, M.journal, M.search, M.report = sampling, sjournal, search, report

local function bad(fmt, ...)
  error("kb.sweep: " .. format(fmt, ...), 0)
end

-- "a=1 b=x": a cell's parameters, in name order, for messages.
local function cell_label(cell)
  local keys, out = {}, {}
  for k in pairs(cell or {}) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for i, k in ipairs(keys) do out[i] = k .. "=" .. tostring(cell[k]) end
  return table.concat(out, " ")
end

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

local function message_of(err)
  if type(err) == "table" then return err.message and tostring(err) or json.encode(err) end
  return tostring(err)
end

-- ---- the definition ------------------------------------------------------------------

local KNOWN = { name = true, version = true, params = true, matrix = true, order = true, sample = true,
  search = true, repeats = true, exclude = true, run = true, parallel = true, targets = true, seed = true,
  speed = true, out = true, metrics = true, report = true, retry_failed = true, fresh = true,
  quiet_cells = true, print = true }

local function check(def)
  if type(def) ~= "table" then bad("wants a table (the sweep's definition)") end
  for k in pairs(def) do
    if not KNOWN[k] then bad("unknown field %q in the definition", tostring(k)) end
  end
  if type(def.name) ~= "string" or def.name == "" then bad("name is required (it names the sweep's folder)") end
  if type(def.run) ~= "function" then bad("run must be a function(cell, ctx) returning a table of metrics") end
  if def.exclude ~= nil and type(def.exclude) ~= "function" then bad("exclude must be a function(cell)") end
  local modes = (def.sample and 1 or 0) + ((def.matrix or def.search) and 1 or 0)
  if modes ~= 1 then bad("give a matrix, a sample or a search (a search may have a matrix)") end
  if def.sample and def.search then bad("sample and search do not combine") end
  local repeats = def.repeats or 1
  if math.type(repeats) ~= "integer" or repeats < 1 then bad("repeats must be an integer >= 1, got %s", tostring(repeats)) end
  local parallel = def.parallel or 1
  if math.type(parallel) ~= "integer" or parallel < 1 then bad("parallel must be an integer >= 1, got %s", tostring(parallel)) end
  if def.targets ~= nil and (type(def.targets) ~= "table" or #def.targets == 0) then
    bad("targets must be a non-empty list (one per cell running at once)")
  end
  if def.sample then
    local s = def.sample
    if type(s) ~= "table" then bad("sample must be {method = \"random\" | \"lhs\", n, ranges}") end
    if s.method ~= "random" and s.method ~= "lhs" then bad("sample.method must be \"random\" or \"lhs\", got %s", tostring(s.method)) end
    if math.type(s.n) ~= "integer" or s.n < 1 then bad("sample.n must be an integer >= 1, got %s", tostring(s.n)) end
  end
  return repeats, parallel
end

-- What the journal hashes: everything that decides which cells run and
-- with which parameters. Functions (run, exclude) cannot be hashed: a
-- change to them must bump `version`.
-- `speed` and `parallel` change what a cell measures (the simulators'
-- clock; cells sharing the machine), so they are part of it too.
local function hashed(def, repeats, parallel, speed)
  local h = { name = def.name, version = def.version, params = def.params, matrix = def.matrix,
    order = def.order, sample = def.sample, search = def.search, repeats = repeats, seed = def.seed,
    speed = speed, parallel = parallel }
  local ok, err = pcall(json.encode, h)
  if not ok then bad("the definition must be plain data besides run and exclude: %s", message_of(err)) end
  return json.decode(json.encode(h))
end

-- Flattens a cell's metrics to name -> scalar ("a.b" for nested tables).
local function flatten(t, prefix, out)
  for k, v in pairs(t) do
    local name = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    local tv = type(v)
    if tv == "table" and v ~= json.null then
      flatten(v, name, out)
    elseif tv == "number" or tv == "string" or tv == "boolean" then
      out[name] = v
    elseif v ~= json.null then
      out[name] = tostring(v)
    end
  end
  return out
end

-- ---- cluster configs for the simulator --------------------------------------------

--- A simulator config with `pools` node pools "pool-1".. of `nodes` nodes
-- each: sweep.cluster{pools = 2, nodes = 3, cpu = 8, memory = "30Gi",
-- gpu = 0, labels = {...}, images = {...} (on the nodes from the start),
-- profile_overrides...}; or pool_list = {{name =, nodes =, ...}, ...}, the
-- pools as the simulator config writes them. Other fields of opts
-- (kfp_api, api_faults, steps, k8s, ...) are copied into the config, so a
-- cell can also change the API latency model and the faults.
function M.cluster(opts)
  opts = opts or {}
  local npools = opts.pools or 1
  if math.type(npools) ~= "integer" or npools < 1 then bad("cluster: pools must be an integer >= 1") end
  local pools = {}
  if type(opts.pool_list) == "table" then
    pools = opts.pool_list
  else
    for i = 1, npools do
      pools[i] = { name = "pool-" .. i, nodes = opts.nodes or 3, cpu = opts.cpu or 8,
        memory = opts.memory or "30Gi", gpu = opts.gpu or 0, labels = opts.labels, images = opts.images }
    end
  end
  local config = { cluster = { pools = pools } }
  for k, v in pairs(opts) do
    if k ~= "pools" and k ~= "nodes" and k ~= "cpu" and k ~= "memory" and k ~= "gpu" and k ~= "labels"
      and k ~= "images" and k ~= "pool_list" then
      config[k] = v
    end
  end
  return config
end

-- ---- a cell's context -------------------------------------------------------------

local Ctx = {}
Ctx.__index = Ctx

--- Starts a simulator for this cell (stopped when the cell ends): config
-- as kb.sim.start's (YAML text or a table, e.g. sweep.cluster{...});
-- opts: profile, seed (default: the cell's seed). Every cell simulator
-- runs at the sweep's speed; the scenario clock follows a clock-keeping
-- simulator the sweep starts once, so cells ending never change the
-- clock of cells still running.
function Ctx:sim(config, opts)
  opts = opts or {}
  local sim
  if self.sweep.clock == "events" then
    -- cells share the runtime's fast-forwarding clock on its loop: it
    -- skips only when every cell waits, so cells never skew each other
    sim = kb.sim.start { config = config, profile = opts.profile, seed = opts.seed or self.seed,
      clock = "events" }
  else
    self.sweep:ensure_clock()
    sim = kb.sim.start { config = config, profile = opts.profile, speed = self.sweep.speed,
      seed = opts.seed or self.seed, clock = false }
  end
  self.sims[#self.sims + 1] = sim
  return sim
end

--- Prints a progress line prefixed with the cell's id (stderr; not with
-- kbrun -q or print = false).
function Ctx:log(fmt, ...)
  self.sweep:say("%s r%d: " .. fmt, self.id, self.rep, ...)
end

function Ctx:close()
  for _, sim in ipairs(self.sims) do pcall(sim.stop, sim) end
  self.sims = {}
end

-- ---- the sweep ---------------------------------------------------------------------

local Sweep = {}
Sweep.__index = Sweep

function Sweep:ensure_clock()
  if self.keeper then return end
  self.keeper = kb.sim.start { profile = "fast", speed = self.speed, seed = 1, clock = true,
    config = { cluster = { pools = { { name = "clock", nodes = 1, cpu = 1, memory = "1Gi" } } } } }
end

function Sweep:say(fmt, ...)
  if self.print then io.stderr:write(format("sweep %s: " .. fmt, self.name, ...), "\n") end
end

-- A folder left by a cell that was running when the sweep died is moved
-- aside (never deleted: what it measured stays on disk).
local function move_aside(dir)
  if not fs.exists(dir) then return end
  for n = 1, 1000 do
    local to = format("%s-interrupted-%d", dir, n)
    if not fs.exists(to) then
      local ok, err = os.rename(dir, to)
      if not ok then bad("cannot move the unfinished cell folder %s aside: %s", dir, tostring(err)) end
      return
    end
  end
end

function Sweep:records()
  local list = {}
  for _, k in ipairs(self.j.order) do list[#list + 1] = self.j.done[k] end
  return list
end

function Sweep:info(complete)
  return { name = self.name, seed = self.seed, hash = self.j.hash, dims = self.dims, repeats = self.repeats,
    params = self.param_names, varying = self.varying, sampled = self.def.sample ~= nil, metrics = self.def.metrics, report = self.def.report, searches = self.searches,
    total = self.total, complete = complete }
end

function Sweep:write_reports(html, complete)
  return report.write(self.dir, self:records(), self:info(complete), html)
end

function Sweep:progress(rec, skipped)
  self.finished = self.finished + 1
  if not self.print then return end
  local parts = {}
  for _, p in ipairs(self.varying) do parts[#parts + 1] = p .. "=" .. tostring(rec.params[p]) end
  local shown = {}
  local names = report.metric_names({ rec }, self.def.metrics)
  for i = 1, math.min(3, #names) do
    shown[#shown + 1] = names[i] .. "=" .. report.num_text(rec.metrics[names[i]])
  end
  local total = self.total and ("/" .. self.total) or ""
  self:say("[%d%s] %s r%d %s: %s%s%s", self.finished, total, rec.id, rec["repeat"], table.concat(parts, " "),
    skipped and "done before, skipped" or rec.status, rec.error and (" (" .. tostring(rec.error):sub(1, 200) .. ")") or "",
    (#shown > 0 and not skipped) and ("  " .. table.concat(shown, " ")) or "")
end

-- The cell run's result/result.json; an interrupted cell's says so, with
-- what it measured (nothing yet, when the interrupt came before it ran).
-- The clock is the sweep's: between cells no simulator holds the events
-- clock, and the runtime's own reading would say "linear".
function Sweep:write_cell_result(run, status, elapsed, registry, err, figures)
  run.written = true
  local c = run.cell
  local doc = {
    sweep = self.name, experiment_id = run.exp_id, cell = c.id, key = c.key, ["repeat"] = run.rep, seed = run.seed,
    status = status, error = err, params = run.params, metrics = figures, elapsed = elapsed,
    clock = { mode = self.clock, speed = self.clock == "linear" and self.speed or 1 },
    registry = registry,
    -- the cell's own series (kb.timeseries.within): its report's "Over time"
    timeseries = run.ts and timeseries.snapshot(run.ts) or nil,
  }
  local okw, werr = pcall(run.exp.write_json, run.exp, "result", "result.json", doc)
  if not okw then log.warn("sweep %s: %s: result.json: %s", self.name, run.exp_id, message_of(werr)) end
  if run.ts then
    local okc, cerr = pcall(run.exp.write, run.exp, "result", "timeseries.csv",
      timeseries.csv(timeseries.snapshot(run.ts)))
    if not okc then log.warn("sweep %s: %s: timeseries.csv: %s", self.name, run.exp_id, message_of(cerr)) end
  end
  -- the cell with its coordinates, and sweep.csv's columns (docs/results.md)
  require("kb.results.db").record(doc, run.exp.dir, { columns = { params = self.param_names, metrics = self.def.metrics } })
end

-- Runs one repeat of one cell unless the journal has it; returns its record.
function Sweep:run_one(c, rep)
  -- a cell refused how it was called (a usage error): the rest are not run
  if self.refused then return { status = "refused", metrics = {} } end
  local rk = sjournal.run_key(c.key, rep)
  local done = self.j.done[rk]
  if done and (done.status == "ok" or not self.def.retry_failed) then
    self.skipped = self.skipped + 1
    self:progress(done, true)
    return done
  end
  self.ran = self.ran + 1
  local run = { cell = c, rep = rep, seed = sampling.derive(self.seed, c.key, rep), exp_id = format("%s-r%d", c.id, rep),
    params = copy(self.def.params), written = false }
  for k, v in pairs(c.cell) do run.params[k] = v end
  move_aside(fs.join(self.dir, run.exp_id))
  run.exp = experiment.create { out = self.dir, id = run.exp_id }
  -- From here the folder exists, and whatever ends the cell run (an
  -- interrupt while it writes its journal line or stops its simulator
  -- included) leaves its result.json saying what happened.
  local ok, back = pcall(self.run_cell, self, run)
  if not ok then
    if not run.written then
      local cancelled = kb.is_cancelled(back)
      self:write_cell_result(run, cancelled and "interrupted" or "failed", run.t0 and kb.now() - run.t0 or 0,
        run.registry, not cancelled and message_of(back):gsub("\n.*", "") or nil)
    end
    error(back, 0)
  end
  return back
end

-- The body of run_one, once the cell run's folder exists.
function Sweep:run_cell(run)
  local c, rep, seed, exp_id, exp, params = run.cell, run.rep, run.seed, run.exp_id, run.exp, run.params
  -- Before the cell runs: its config, its journal record, a target to run
  -- on (they may wait).
  exp:write_json("config", "params.json", { sweep = self.name, cell = c.id, key = c.key, ["repeat"] = rep,
    seed = seed, params = params })
  self.j:start { key = c.key, id = c.id, index = c.index, sub = c.sub, ["repeat"] = rep, seed = seed, dir = exp_id }
  local slot
  if self.slots then
    self.slot_sem:acquire()
    slot = table.remove(self.slots)
  end
  -- The cell's own metric registry: what run() and the tasks it spawns
  -- record (kb.metrics.*, a storm's figures) is this cell's alone, even
  -- with cells side by side; added to the sweep's registry at the end.
  local scope = kmetrics.scope(exp_id)
  run.ts = timeseries.new() -- and its own time series, from its start
  local ctx = setmetatable({ sweep = self, cell = params, id = c.id, key = c.key, index = c.index, rep = rep,
    seed = seed, exp = exp, dir = exp.dir, target = slot, rng = sampling.rng(seed), sims = {},
    speed = self.speed, name = self.name, metrics = scope }, Ctx)
  run.t0 = kb.now()
  -- a cell is one item of the sweep's shard split: what it runs (a storm)
  -- is not split again (kb.shard.within_part)
  local ok, metrics = timeseries.within(run.ts, scope.run, scope, require("kb.shard").within_part, "cells",
    xpcall, self.def.run, function(e)
      if kb.is_cancelled(e) then return e end
      if type(e) == "table" then return e end
      return debug.traceback(tostring(e), 2)
    end, copy(params), ctx)
  ctx:close()
  run.registry = scope:snapshot()
  scope:close()
  if self.slots then
    self.slots[#self.slots + 1] = slot
    self.slot_sem:release()
  end
  if not ok and kb.is_cancelled(metrics) then
    -- interrupted: what the cell measured so far is written (its registry,
    -- status interrupted, by run_one) before the sweep goes; not journaled
    -- as done, so a resume runs the cell again (its folder is moved aside then)
    error(metrics, 0)
  end
  if not ok and type(metrics) == "table" and metrics.class == "usage" then
    -- The user's mistake (kb.kfp.storm refusing num_runs=abc), the same for
    -- every cell: not a result of this cell. Nothing is journaled for it,
    -- no further cell starts, and the sweep ends with that one message
    -- (kb.params.refusal; exit 2). A journal without a finished cell does
    -- not hold a later, corrected run back (kb.sweep.journal).
    run.written = true -- nothing of it is kept
    if metrics.discard then pcall(fs.remove, exp.dir, { recursive = true }) end
    if not self.refused then
      self.refused = params_mod.refusal(format("kb.sweep: cell %s r%d (%s): %s", c.id, rep,
        cell_label(c.cell), tostring(metrics.message or metrics)))
    end
    error(self.refused, 0)
  end
  local rec = { key = c.key, id = c.id, index = c.index, sub = c.sub, ["repeat"] = rep, seed = seed,
    params = params, dir = exp_id, elapsed = kb.now() - run.t0 }
  if ok and metrics ~= nil and type(metrics) ~= "table" then
    ok, metrics = false, format("run returned a %s, not a table of metrics", type(metrics))
  end
  if ok then
    rec.status, rec.metrics = "ok", flatten(metrics or {}, nil, {})
  else
    local text = message_of(metrics)
    rec.status, rec.metrics, rec.error = "failed", {}, (text:gsub("\n.*", ""))
    log.warn("sweep %s: cell %s r%d failed: %s", self.name, c.id, rep, rec.error)
    log.debug("%s", text)
  end
  local back = self.j:finish(rec)
  self:write_cell_result(run, rec.status, rec.elapsed, run.registry, rec.error, back.metrics)
  self:progress(back, false)
  local okw, werr = pcall(self.write_reports, self, false, false)
  if not okw then log.warn("sweep %s: sweep.csv: %s", self.name, message_of(werr)) end
  return back
end

-- The cells of a matrix (minus exclusions), each {key, id, index, cell}.
function Sweep:grid_cells(matrix)
  local cells, dims = sampling.grid(matrix, self.def.order)
  local out = {}
  for i, cell in ipairs(cells) do
    local full = copy(self.def.params)
    for k, v in pairs(cell) do full[k] = v end
    if not (self.def.exclude and self.def.exclude(full)) then
      out[#out + 1] = { key = sjournal.canonical(cell), id = format("c%03d", i), index = i, cell = cell }
    end
  end
  return out, dims
end

function Sweep:run_cells(cells)
  self.total = #cells * self.repeats
  local pool = kb.pool(self.parallel)
  for _, c in ipairs(cells) do
    for rep = 1, self.repeats do self.tasks[#self.tasks + 1] = pool:spawn(self.run_one, self, c, rep) end
  end
  pool:wait()
end

function Sweep:run_search(bases)
  local spec = search.check(self.def.search)
  self.searches = {}
  local pool = kb.pool(self.parallel)
  for bi, base in ipairs(bases) do
    self.tasks[#self.tasks + 1] = pool:spawn(function()
      local res = search.run(spec, function(value, step)
        local cell = copy(base.cell)
        cell[spec.param] = value
        local c = { key = sjournal.canonical(cell), id = format("%s.s%02d", base.id, step), index = base.index,
          sub = step, cell = cell }
        local vals = {}
        for rep = 1, self.repeats do
          local rec = self:run_one(c, rep)
          local v = rec.status == "ok" and rec.metrics[spec.metric]
          if type(v) == "number" then vals[#vals + 1] = v end
        end
        return (report.mean_sd(vals))
      end)
      res.base_id = base.id
      local label = {}
      for _, p in ipairs(self.varying) do
        if p ~= spec.param then label[#label + 1] = p .. "=" .. tostring(base.cell[p]) end
      end
      res.base_label = table.concat(label, " ")
      self.searches[bi] = res
      self:say("search %s: %s", base.id, res.reason)
    end)
  end
  pool:wait()
end

--- Runs a sweep (see the module comment and docs/sweep.md). Returns
-- {name, dir, csv, html, seed, hash, cells, runs, ran, skipped, failed,
-- best, searches, resumed}.
function M.run(def)
  local repeats, parallel = check(def)
  local target = require "kb.target"
  local exp = rawget(kb, "exp")
  local out = def.out or (exp and exp.out) or "experiments"
  local self = setmetatable({ def = def, name = def.name, repeats = repeats, parallel = parallel,
    speed = def.speed or target.defaults.speed, finished = 0, skipped = 0, ran = 0, tasks = {} }, Sweep)
  -- the clock: fast-forwarding (events) unless a speed asks for the linear one
  self.clock = self.speed and "linear" or def.clock or target.defaults.clock or "events"
  if self.clock == "linear" then self.speed = self.speed or 600 end
  self.dir = fs.join(out, experiment.sanitize(def.name))
  -- sharded (kbrun --shard I/N): this shard's cells, in a folder of its own
  local shard = require "kb.shard"
  if shard.sharded then self.dir = format("%s-shard%dof%d", self.dir, shard.index, shard.count) end
  local quiet = log.level() == "warn" or log.level() == "error" or log.level() == "off"
  self.print = def.print ~= false and not quiet
  -- One sweep at a time per folder (kb.sweep.lock): a second one is
  -- refused before it writes anything, fresh = true included. The lock
  -- is released however this function ends (a to-be-closed guard).
  local guard <close> = setmetatable({}, { __close = function(g) if g.held then g.held:release() end end })
  local function take()
    return lock.acquire(self.dir, { name = def.name, wall = kb.time(), on_stale = function(why, old)
      log.warn("sweep %s: taking over the lock of a sweep that is gone (%s): %s", def.name,
        old and ("pid " .. tostring(old.pid)) or "?", why)
    end })
  end
  if fs.exists(self.dir) == "dir" then
    guard.held = take()
    if def.fresh then
      local to = format("%s.old-%s", self.dir, os.date("!%Y%m%d%H%M%S"))
      local okr, rerr = os.rename(self.dir, to)
      if not okr then bad("fresh = true: cannot move %s aside: %s", self.dir, tostring(rerr)) end
      guard.held = nil
      pcall(fs.remove, fs.join(to, "sweep.lock"))
      self:say("fresh = true: moved the previous results to %s", to)
    end
  end
  fs.mkdir(self.dir)
  guard.held = guard.held or take()
  local seed = def.seed or target.defaults.seed or 1
  self.j = sjournal.open(self.dir, hashed(def, repeats, parallel, self.clock == "events" and "events" or self.speed), seed, { wall = kb.time(),
    kbrun = require("kb.core").version, warn = function(msg) log.warn("%s", msg) end })
  self.seed = self.j.seed
  self.resumed = self.j.resumed
  if self.resumed then
    self:say("resuming: %d cell run(s) already finished (journal %s)", #self.j.order, self.j.path)
  end
  if def.targets then
    self.slots = {}
    for i = #def.targets, 1, -1 do self.slots[#self.slots + 1] = def.targets[i] end
    self.slot_sem = kb.semaphore(#def.targets)
  end

  -- which cells, and the parameter columns
  local cells, bases
  if def.sample then
    local rng = sampling.rng(sampling.derive(self.seed, "sample"))
    local list, ranges = sampling[def.sample.method](def.sample.ranges, def.sample.n, rng, def.order)
    cells = {}
    for i, cell in ipairs(list) do
      cells[i] = { key = sjournal.canonical(cell), id = format("c%03d", i), index = i, cell = cell }
    end
    self.dims = {}
    for i, r in ipairs(ranges) do
      self.dims[i] = { name = r.name, values = r.values, range = r.values and nil or format("%s .. %s%s%s",
        tostring(r.lo), tostring(r.hi), r.int and " (integers)" or "", r.log and " (log)" or "") }
    end
  else
    local list, dims
    if def.matrix then
      list, dims = self:grid_cells(def.matrix)
    else
      list, dims = { { key = "{}", id = "c001", index = 1, cell = {} } }, {}
    end
    self.dims = dims
    if def.search then bases = list else cells = list end
  end
  if shard.sharded then
    local function mine(list)
      local kept = {}
      for _, c in ipairs(list) do
        if shard.owns(c.index, "cells") then kept[#kept + 1] = c end
      end
      return kept
    end
    if cells then cells = mine(cells) else bases = mine(bases) end
  end
  self.varying, self.param_names = {}, {}
  local seen = {}
  for _, d in ipairs(self.dims) do
    self.varying[#self.varying + 1], seen[d.name] = d.name, true
  end
  if def.search and not seen[def.search.param] then
    self.varying[#self.varying + 1], seen[def.search.param] = def.search.param, true
    self.dims[#self.dims + 1] = { name = def.search.param, range = "searched" }
  end
  for _, n in ipairs(self.varying) do self.param_names[#self.param_names + 1] = n end
  local fixed = {}
  for k in pairs(def.params or {}) do if not seen[k] then fixed[#fixed + 1] = k end end
  table.sort(fixed)
  for _, k in ipairs(fixed) do self.param_names[#self.param_names + 1] = k end

  self:say("%s cell(s) x %d repeat(s), %d at once, seed %s, folder %s",
    cells and tostring(#cells) or "searching", repeats, parallel, tostring(self.seed), self.dir)

  local saved_level
  if def.quiet_cells ~= false and not quiet then saved_level = log.level("warn") end
  local ok, err = pcall(function()
    if cells then self:run_cells(cells) else self:run_search(bases) end
  end)
  if saved_level then log.level(saved_level) end
  if not ok then
    -- an interrupted sweep leaves no cell running behind it, and gives
    -- each (a few real seconds at most) to write what it measured. A cell
    -- asked to stop already (on a signal every task is) is not cancelled
    -- again: that would cut its writing short.
    for _, t in ipairs(self.tasks) do
      if not t:done() and not t:cancel_requested() then t:cancel() end
    end
    pcall(kb.timeout_real, 10, function()
      for _, t in ipairs(self.tasks) do pcall(t.wait, t) end
    end)
  end
  if self.keeper then
    pcall(self.keeper.stop, self.keeper)
    self.keeper = nil
  end
  local okw, csv_path, html_path = pcall(self.write_reports, self, true, ok)
  self.j:close()
  if not ok then
    if self.refused then error(self.refused, 0) end -- one message (see run_one)
    if okw then self:say("interrupted; %s and %s hold the %d finished cell run(s)", csv_path, html_path, #self.j.order) end
    error(err, 0)
  end
  if not okw then error(csv_path, 0) end

  local records = self:records()
  local metrics = report.metric_names(records, def.metrics)
  local cell_list = report.cells(records, metrics)
  if self.print then
    io.stdout:write("\n", report.table_text(cell_list, self.varying, metrics, 4), "\n")
    io.stdout:write(format("  sweep.csv   %s\n  sweep.html  %s\n", csv_path, html_path))
  end
  local failed = 0
  for _, r in ipairs(records) do if r.status ~= "ok" then failed = failed + 1 end end
  local goal = def.report and def.report.goal or {}
  local gmetric = goal.metric or (def.report and def.report.metrics and def.report.metrics[1]) or metrics[1]
  local best
  if gmetric then
    local b = report.ranked(cell_list, gmetric, goal.minimize == false and "max" or "min", 1)
    if b[1] then best = { id = b[1].id, params = b[1].params, metric = gmetric, mean = b[1].stats[gmetric].mean } end
  end
  return { name = self.name, dir = self.dir, csv = csv_path, html = html_path, seed = self.seed, hash = self.j.hash,
    cells = #cell_list, runs = #records, ran = self.ran, skipped = self.skipped, failed = failed,
    best = best, searches = self.searches, resumed = self.resumed }
end

return setmetatable(M, { __call = function(_, def) return M.run(def) end })
