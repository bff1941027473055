--- kb.runner: what `kbrun SCENARIO.lua` does, step by step.
--
-- A scenario file either does its work at top level, or returns a table:
--   return {
--     name = "taxi_50runs",            -- optional, defaults to the file name
--     params = { num_runs = 50 },      -- defaults; typos on the command line are refused
--     run = function(p) ... return results end,
--     cleanup = function(p) ... end,   -- always runs: after success, error or Ctrl-C
--     cleanup_timeout = 60,            -- seconds of real time for cleanup
--     thresholds = {...},              -- pass/fail limits (kb.thresholds)
--     report = {...} or function(doc), -- extra data for report.html (kb.report)
--   }
-- A key the table may not hold is refused (exit 2, "did you mean"), before
-- anything runs, and the experiment folder is removed again.
-- Whatever else happens, result/result.json is written before kbrun exits.
--
-- Exit codes (M.EXIT), by precedence when several apply: interrupted
-- (130 SIGINT, 143 SIGTERM) > scenario error (1) > results not fully saved
-- (3) > thresholds failed (99); 0 success, 2 usage error.
local core = require "kb.core"
local kb = require "kb"
local params = require "kb.params"
local proc = require "kb.proc"
local util = require "kb.k8s.util"

local M = {}

local EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_SAVED, EXIT_THRESHOLDS = 0, 1, 2, 3, 99
local SIGNAL_EXIT = { SIGINT = 130, SIGTERM = 143 }

--- kbrun's exit codes (README.md "Exit codes", docs/scenarios.md).
M.EXIT = { ok = EXIT_OK, failed = EXIT_FAILED, usage = EXIT_USAGE, not_saved = EXIT_NOT_SAVED,
  thresholds = EXIT_THRESHOLDS, sigint = SIGNAL_EXIT.SIGINT, sigterm = SIGNAL_EXIT.SIGTERM }

-- What each exit code outranks: a higher rank is never replaced by a lower.
local RANK = { [EXIT_OK] = 0, [EXIT_THRESHOLDS] = 1, [EXIT_NOT_SAVED] = 2, [EXIT_FAILED] = 3,
  [EXIT_USAGE] = 3, [130] = 4, [143] = 4 }

--- The keys a scenario table may hold.
--- Seconds of the scenario clock per interval of result.json's timeseries.
M.TIMESERIES_INTERVAL = 10

M.SCENARIO_KEYS = { "name", "params", "run", "cleanup", "cleanup_timeout",
  "thresholds", "report", "experiment" }

local function basename(path)
  return (path:match("([^/]+)$") or path):gsub("%.lua$", "")
end

local function message_of(err)
  if type(err) == "table" then
    local text = tostring(err)
    if err.traceback and not text:find("stack traceback", 1, true) then
      text = text .. "\n" .. err.traceback
    end
    return text
  end
  return tostring(err)
end

-- A usage error raised while the scenario sets up (bad parameter): the
-- one kind libraries raise too (kb.params.refuse).
local UsageError = params.UsageError
local usage_error = params.usage_error

--- The valid key nearest to a misspelt one (nil when none is close).
function M.nearest(word, candidates)
  local best, best_d
  for _, c in ipairs(candidates) do
    local d = util.edit_distance(word:lower(), c)
    if not best_d or d < best_d then best, best_d = c, d end
  end
  if best_d and best_d <= math.max(2, #word // 3) then return best end
  return nil
end

-- Refuses a scenario table with a key kbrun does not know: a misspelt
-- `threshold = {...}` would otherwise be ignored and the run pass.
local function check_scenario_keys(file, scenario)
  local known = {}
  for _, k in ipairs(M.SCENARIO_KEYS) do known[k] = true end
  local unknown = {}
  for k in pairs(scenario) do
    if not known[k] then unknown[#unknown + 1] = tostring(k) end
  end
  if #unknown == 0 then return end
  table.sort(unknown)
  local key = unknown[1]
  local near = type(key) == "string" and M.nearest(key, M.SCENARIO_KEYS)
  error(usage_error(string.format("%s: unknown scenario key '%s'%s (a scenario table takes: %s)",
    file, key, near and string.format(", did you mean '%s'?", near) or "",
    table.concat(M.SCENARIO_KEYS, ", ")), true))
end

--- The state of one kbrun invocation.
local Run = {}
Run.__index = Run

function Run:load_params_file()
  if not self.args.params_file then return {} end
  local text = kb.fs.read(self.args.params_file)
  local doc = kb.yaml.decode(text, { name = self.args.params_file })
  if doc == nil or doc == kb.json.null then return {} end
  if type(doc) ~= "table" or (next(doc) ~= nil and doc[1] ~= nil) or getmetatable(doc) then
    error(usage_error(self.args.params_file .. ": a params file must be a YAML mapping of name: value"))
  end
  return doc
end

function Run:seed()
  local seed = tonumber(self.args.seed)
  if not seed then
    local f = io.open("/dev/urandom", "rb")
    local bytes = f and f:read(4) or ""
    if f then f:close() end
    seed = os.time()
    for i = 1, #bytes do seed = seed * 256 + bytes:byte(i) end
    seed = seed % 2 ^ 31 // 1
  end
  seed = math.tointeger(seed) or seed
  math.randomseed(seed)
  return seed
end

-- Runs the chunk, then (for a table scenario) its run function.
function Run:scenario_body(chunk)
  local scenario = chunk()
  if type(scenario) ~= "table" then return nil end
  check_scenario_keys(self.args.scenario, scenario)
  -- Usage errors found here are the user's, before anything ran: one
  -- message, exit 2, and the experiment folder is removed again (discard).
  local okt, terr = pcall(require("kb.thresholds").validate, scenario.thresholds)
  if not okt then error(usage_error(self.args.scenario .. ": " .. tostring(terr), true)) end
  self.scenario = scenario
  if scenario.name then self.name = scenario.name end
  local merged, err = params.merge(scenario.params, self.file_params, self.cli_params,
    { file = self.args.params_file })
  if not merged then error(usage_error(err, true)) end
  kb.params = merged
  self.params_ok = true
  self:write_config()
  if scenario.run == nil then return nil end
  if type(scenario.run) ~= "function" then
    error(usage_error(self.args.scenario .. ": the scenario's 'run' must be a function", true))
  end
  return scenario.run(merged)
end

function Run:write_config()
  self.exp:write_json("config", "params.json", {
    scenario = self.args.scenario,
    params = kb.params,
    seed = self.seed_value,
  })
  -- journaled once the scenario declared its parameters (params_ok): before,
  -- a value it declares secret (header=) is not known to be one yet
  if self.journal and self.params_ok then
    -- with the thresholds (validated: numbers and flags), so a rebuilt
    -- result.json judges them as this run does (kb.results.rebuild)
    self.journal:write{ k = "params", name = self.name, params = kb.params,
      thresholds = self.scenario and self.scenario.thresholds }
  end
end

-- ---- the journal (output/journal.jsonl) ------------------------------------
-- Every measurement is journaled as it happens (kb.metrics.set_journal;
-- scenarios' events too, e.g. the storm's), buffered and flushed every
-- KBRUN_JOURNAL_FLUSH_MS (default 50 ms, 0 = each record), so a SIGKILL
-- loses at most that much; `kbrun report DIR` rebuilds the result files
-- from the journal when result.json is missing or older (kb.results.rebuild).
function Run:open_journal()
  local journal = require "kb.journal"
  local interval, warning = journal.flush_interval()
  if warning then kb.log.warn("%s", warning) end
  local ok, j = pcall(journal.open, self.exp:path("output", "journal.jsonl"), { interval = interval })
  if not ok then
    kb.log.warn("no journal: %s", message_of(j))
    return
  end
  j:write{ k = "begin", v = 1, kbrun = core.version, experiment_id = self.exp.id,
    scenario = { name = self.name, file = self.args.scenario },
    started_at = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(self.started_wall)),
    wall = self.started_wall, seed = self.seed_value,
    shard = require("kb.shard").describe(), environment = M.environment(),
    flush_ms = interval * 1000 }
  -- the clock: the embedded simulator installs its own during the run
  local speed, kind = 1, "linear"
  j:on_flush(function()
    local now, now_kind = core.clock_speed(), core.clock_kind()
    if now ~= speed or now_kind ~= kind then
      speed, kind = now, now_kind
      j:write{ k = "clock", speed = now, mode = now_kind }
    end
  end)
  journal.set_active(j)
  kb.metrics.set_journal(j)
  -- how busy kbrun's own loop is, sampled at each flush (result.json's client)
  local meter = require("kb.saturation").start()
  self.meter = meter
  j:on_flush(function() meter:sample() end)
  j:start_flusher()
  -- what happened over time (kb.timeseries), from the run's first record
  -- (journaled, so `kbrun report` rebuilds it after a kill)
  require("kb.timeseries").start(M.TIMESERIES_INTERVAL, j)
  self.journal = j
end

-- The last record (status and all), then the journal is closed: written
-- before result.json, so a complete result.json is never older than it.
function Run:close_journal(doc)
  local j = self.journal
  if not j then return end
  self.journal = nil
  local ok, err = pcall(function()
    kb.metrics.set_journal(nil)
    require("kb.timeseries").detach() -- its last rows, before "end"
    j:write{ k = "end", status = doc.status, exit_code = doc.exit_code, error = doc.error,
      duration = doc.duration, clock = doc.clock, finished_at = doc.finished_at,
      result = doc.result, client = doc.client }
    j:close()
  end)
  if not ok then kb.log.warn("journal: %s", message_of(err)) end
end

-- Cleanup runs in its own task with a bounded (real) time.
function Run:cleanup()
  local scenario = self.scenario
  if not scenario or type(scenario.cleanup) ~= "function" or self.cleaned then return end
  if not self.params_ok then return end -- it never started: nothing to clean
  self.cleaned = true
  local limit = tonumber(scenario.cleanup_timeout) or 60
  local ok, err = pcall(kb.timeout_real, limit, scenario.cleanup, kb.params)
  if not ok then
    kb.log.error("cleanup failed: %s", message_of(err))
    self.cleanup_error = message_of(err)
  elseif self.result == nil and type(err) == "table" then
    -- run() never returned (an error, a signal): a cleanup that accounts
    -- for what was measured (the storm's) gives the result instead.
    self.result = err
  end
end

function Run:result_document()
  local unobserved = {}
  for _, f in ipairs(core.unobserved_failures()) do
    unobserved[#unobserved + 1] = message_of(f.error)
  end
  self.unobserved = unobserved
  local result = self.result
  if result ~= nil and not pcall(kb.json.encode, result) then
    result = tostring(result) -- e.g. a function: keep a trace, not a crash
  end
  -- always a key, null when run never returned (an error, an interruption)
  if result == nil then result = kb.json.null end
  return {
    kbrun = core.version,
    experiment_id = self.exp.id,
    scenario = { name = self.name, file = self.args.scenario },
    status = self.status,
    exit_code = self.exit_code,
    error = self.error_text,
    cleanup_error = self.cleanup_error,
    unobserved_task_failures = #unobserved > 0 and unobserved or nil,
    started_at = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(self.started_wall)),
    finished_at = os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(kb.time())),
    duration = kb.now() - self.started,
    clock = M.clock(),
    seed = self.seed_value,
    shard = require("kb.shard").describe(),
    params = kb.params,
    environment = M.environment(),
    metrics = kb.metrics.snapshot(),
    timeseries = require("kb.timeseries").snapshot(),
    client = self.meter and self.meter:summary() or nil,
    result = result,
  }
end

-- Raises the exit code to `code` unless the current one outranks it
-- (precedence: interrupted > scenario error > results not saved >
-- thresholds failed). Returns whether it changed; doc (if given) follows.
function Run:escalate(code, status, err, doc)
  if RANK[code] <= RANK[self.exit_code] then return false end
  self.exit_code, self.status = code, status
  if err then self.error_text = err end
  if doc then doc.exit_code, doc.status, doc.error = code, status, self.error_text end
  return true
end

--- Marks the results as not fully saved (exit 3, status "incomplete"),
-- unless something outranks it; why is logged and stored as `error`.
-- For the writers of result files (result.json here; kb.outputs' registry).
function Run:results_not_saved(why, doc)
  kb.log.error("results not fully saved: %s", why)
  return self:escalate(EXIT_NOT_SAVED, "incomplete", "results not fully saved: " .. why, doc)
end

-- Thresholds are evaluated and shown for every run, but decide only the
-- status of a run that would otherwise pass (exit 99).
function Run:check_thresholds(doc)
  local spec = self.scenario and self.scenario.thresholds
  if not spec then return end
  local ok, checks, all = pcall(require("kb.thresholds").evaluate, spec, doc.metrics, self.result)
  if not ok then
    kb.log.error("thresholds: %s", message_of(checks))
    checks, all = {}, false
  end
  doc.thresholds = checks
  if not all then self:escalate(EXIT_THRESHOLDS, "failed", "a threshold failed", doc) end
end

-- Records the experiment in the results database (<out>/kbrun.db unless
-- --results-db says otherwise); what could not be written there, this
-- experiment or a sweep's cells, means exit 3 (docs/results.md).
function Run:record_in_database(doc)
  local rdb = require "kb.results.db"
  local ok, err = pcall(rdb.record, doc, self.exp.dir)
  if not ok then kb.log.error("results database: %s", message_of(err)) end
  local failures = rdb.failures()
  if #failures > 0 then
    self:results_not_saved(string.format("%s: %d experiment(s) not recorded: %s", rdb.active_name(),
      #failures, failures[1].error), doc)
  elseif not ok then
    self:results_not_saved("results database: " .. message_of(err), doc)
  end
  rdb.close()
end

-- Writes everything measured, prints the summary, and stops the loop.
function Run:finish()
  if self.finished then return end
  self.finished = true
  if self.observers then self.observers:stop() end -- --metrics-listen, live line (kb.prometheus)
  -- After a signal the scenario's task unwinds (a sweep lets its cells
  -- write what they measured): give it a bounded real time to end before
  -- what is left is cancelled again, which would cut that writing short.
  local main = self.main_task
  if self.signal and main and not main:done() then
    pcall(kb.timeout_real, 20, function() pcall(main.wait, main) end)
  end
  local leftover = core.cancel_all()
  if leftover > 0 then
    kb.log.debug("%d task(s) still running at the end were cancelled", leftover)
  end
  if self.journal then self.journal:start_flusher() end -- cancelled above; cleanup may be long
  self:cleanup()
  local doc = self:result_document()
  local saturated = require("kb.saturation").warning(doc.client, doc.clock)
  if saturated then kb.log.warn("%s", saturated) end
  self:check_thresholds(doc)
  if #self.unobserved > 0 then
    for _, text in ipairs(self.unobserved) do
      kb.log.error("a task failed and nobody waited for it: %s", text)
    end
    self:escalate(EXIT_FAILED, "failed", "a task failed and nobody waited for it", doc)
  end
  -- kb.outputs: files a write failed for (a full disk) get one more try;
  -- what stays unsaved means exit 3 (checked before the journal's end
  -- record, after it for the journal itself, and after the report)
  local outputs, told = require "kb.outputs", {}
  local function unsaved(list)
    for _, f in ipairs(list) do
      if not told[f.path] then
        told[f.path] = true
        self:results_not_saved(string.format("%s: %s%s", f.path, f.error,
          f.unsaved and " (" .. f.unsaved .. " not written)" or ""), doc)
      end
    end
  end
  unsaved(outputs.retry())
  self:close_journal(doc)
  unsaved(outputs.failed())
  if doc.timeseries then
    local okt, terr = pcall(self.exp.write, self.exp, "result", "timeseries.csv",
      require("kb.timeseries").csv(doc.timeseries))
    if not okt then self:results_not_saved("timeseries.csv: " .. message_of(terr), doc) end
  end
  -- the results database (kb.results.db), from the same document, before
  -- result.json so that result.json's exit code says whether it failed
  self:record_in_database(doc)
  local ok, err = pcall(self.exp.write_json, self.exp, "result", "result.json", doc)
  if not ok then self:results_not_saved("result.json: " .. message_of(err)) end
  if not ok then told[kb.fs.abspath(self.exp:path("result", "result.json"))] = true end
  -- The report is derived from result.json; a broken report never loses it.
  local okr, rerr = pcall(function()
    require("kb.report").write(self.exp, doc, { scenario = self.scenario })
  end)
  if not okr then kb.log.warn("report: %s", message_of(rerr)) end
  unsaved(outputs.failed())
  -- -q keeps the verdict and every failed threshold
  local okp, perr = pcall(function()
    local summary = require "kb.report.summary"
    doc.status, doc.exit_code = self.status, self.exit_code
    if self.args.quiet then summary.print_quiet(doc, { tty = self.args.tty })
    else summary.print(doc, self.exp, { tty = self.args.tty }) end
  end)
  if not okp then kb.log.warn("summary: %s", message_of(perr)) end
  core.exit(self.exit_code)
end

-- A usage error found once the scenario table was read (an unknown key):
-- nothing ran, so nothing is kept; the experiment folder goes again.
function Run:abandon()
  if self.finished then return end
  self.finished = true
  if self.observers then self.observers:stop() end
  core.cancel_all()
  local j = self.journal
  self.journal = nil
  if j then
    pcall(function()
      kb.metrics.set_journal(nil)
      require("kb.journal").set_active(nil)
      j:close()
    end)
  end
  local ok, err = pcall(kb.fs.remove, self.exp.dir, { recursive = true })
  if not ok then kb.log.warn("could not remove %s: %s", self.exp.dir, message_of(err)) end
  if self.out_created then pcall(kb.fs.remove, self.args.out) end -- only if empty
  core.exit(self.exit_code)
end

function Run:fail(err)
  -- After a signal every error is its consequence (a cancelled call, or
  -- a scenario's own error wrapping one): the run was interrupted.
  local pending = self.signal or core.pending_signal()
  if pending then
    kb.log.debug("after %s: %s", pending, message_of(err))
    if not self.signal then self:on_signal(pending) end
    return
  end
  -- The runner's own usage errors, and a library's refusal of how it was
  -- called (class "usage": a sweep folder another sweep holds, a sharded
  -- Kubebench experiment) read as one message and exit 2.
  if getmetatable(err) == UsageError or (type(err) == "table" and err.class == "usage") then
    self.exit_code, self.status = EXIT_USAGE, "usage"
    -- the user's mistake: its message, never a Lua traceback
    io.stderr:write("kbrun: ", require("kb.secrets").scrub(tostring(err.message or err)), "\n")
  else
    self.exit_code, self.status = EXIT_FAILED, "failed"
    io.stderr:write("kbrun: scenario failed: ", require("kb.secrets").scrub(message_of(err)), "\n")
  end
  self.error_text = message_of(err)
end

function Run:on_signal(name)
  if self.signal or self.finished then return end
  self.signal = name
  self.exit_code, self.status = SIGNAL_EXIT[name] or 130, "interrupted"
  self.error_text = "interrupted by " .. name
  io.stderr:write(string.format("\nkbrun: %s: stopping, cleaning up and writing results (again to exit now)\n", name))
  if self.journal then pcall(self.journal.flush, self.journal) end
  -- every task once, the scenario's included: a second cancel of a task
  -- already unwinding (a sweep waiting for its cells to write) cut that
  -- unwinding short
  core.cancel_all()
  kb.spawn(function() self:finish() end)
end

--- The clock the run measured in: the simulator's virtual clock if one was
-- installed during the run (even if stopped since), else the real clock.
function M.clock()
  local speed = require("kb.sim").speed_used()
  -- fast-forwarding: modelled time, no host overhead, no scale factor
  if speed == "events" then return { kind = "virtual", mode = "events", speed = 1 } end
  if speed and speed ~= 1 then return { kind = "virtual", mode = "linear", speed = speed } end
  return { kind = "real", speed = 1 }
end


--- Where the run happened: recorded in result.json so a report rebuilt
-- elsewhere still describes the machine that measured.
function M.environment()
  local os_name
  local f = io.open("/etc/os-release", "r")
  if f then
    os_name = f:read("a"):match('PRETTY_NAME="([^"]*)"')
    f:close()
  end
  local cpus = 0
  f = io.open("/proc/cpuinfo", "r")
  if f then
    for line in f:lines() do
      if line:match("^processor%s*:") then cpus = cpus + 1 end
    end
    f:close()
  end
  return {
    host = proc.host(),
    os = os_name,
    kernel = proc.first_line("/proc/sys/kernel/osrelease"),
    cpus = cpus > 0 and cpus or nil,
    kbrun = core.version,
    lua = _VERSION,
  }
end

local function early_exit(code, msg)
  io.stderr:write("kbrun: ", require("kb.secrets").scrub(msg), "\n")
  core.exit(code)
end

-- A signal that came before the experiment folder exists: nothing was
-- measured and there is nowhere to write, so kbrun just exits.
local function interrupted_early(name)
  io.stderr:write(string.format("\nkbrun: %s: interrupted before the experiment started\n", name))
  core.exit(SIGNAL_EXIT[name] or 130)
end

local function main(run, args)
  kb.log.level(args.quiet and "warn" or (args.verbose and "debug" or "info"))
  -- From the start: a signal before the experiment exists exits at once,
  -- after it the run stops in order (Run:on_signal).
  core.on_signal(function(name)
    if run.exp then run:on_signal(name) else interrupted_early(name) end
  end)

  local cli, perr = params.parse_assignments(args.assignments or {})
  if not cli then return early_exit(EXIT_USAGE, perr) end
  run.cli_params = cli

  local f = io.open(args.scenario, "r")
  if not f then return early_exit(EXIT_USAGE, string.format("cannot read scenario '%s'", args.scenario)) end
  f:close()
  local chunk, lerr = loadfile(args.scenario)
  if not chunk then return early_exit(EXIT_FAILED, lerr) end
  if args.help then -- the scenario explains itself; nothing runs, nothing is written
    local okc, scenario = pcall(chunk)
    if not okc then return early_exit(EXIT_FAILED, message_of(scenario)) end
    io.stdout:write(require("kb.cli.scenario_help").text(args.scenario, scenario))
    io.stdout:flush()
    return core.exit(EXIT_OK)
  end

  local shard_ok, shard_err = require("kb.shard").configure(args.shard)
  if not shard_ok then return early_exit(EXIT_USAGE, shard_err) end

  local okf, file_params = pcall(run.load_params_file, run)
  if not okf then return early_exit(EXIT_USAGE, message_of(file_params)) end
  run.file_params = file_params
  run.seed_value = run:seed()
  local target = require "kb.target"
  target.defaults.config_file = args.sim_config
  target.defaults.profile = args.sim_profile
  target.defaults.speed = tonumber(args.sim_speed) or target.defaults.speed
  -- a speed only means something to the linear clock
  target.defaults.clock = args.sim_clock or (args.sim_speed and "linear") or target.defaults.clock
  target.defaults.seed = run.seed_value
  -- the embedded simulator reads local pipeline files from the scenario's folder only
  local scenario_dir = kb.fs.abspath(args.scenario):match("^(.*)/[^/]*$")
  target.defaults.pipeline_dir = scenario_dir ~= "" and scenario_dir or "/"

  local merged, merr = params.merge(nil, file_params, cli)
  if not merged then return early_exit(EXIT_USAGE, merr) end

  -- --metrics-listen and the TTY status line run beside the scenario until
  -- Run:finish (kb.prometheus.observe, docs/observability.md).
  local oko, observers = pcall(require("kb.prometheus").observe, args)
  if not oko then return early_exit(EXIT_USAGE, message_of(observers)) end
  run.observers = observers
  kb.params = merged

  run.out_created = args.out and not kb.fs.exists(args.out)
  local okx, exp = pcall(require("kb.experiment").create, { out = args.out, name = run.name })
  if not okx then return early_exit(EXIT_FAILED, "cannot create the experiment folder: " .. message_of(exp)) end
  -- temporaries a killed kbrun left in the experiments folder (a sweep's
  -- sweep.csv, a shared folder's files), never a live writer's
  if args.out then require("kb.tmpfiles").clean_tree(args.out, 1) end
  run.exp = exp
  kb.exp = exp
  require("kb.results.db").configure { out = args.out, url = args.results_db }
  run:open_journal()
  run:write_config()

  -- a signal while the above ran (no yield since the handler was set)
  local pending = core.pending_signal()
  if pending then return run:on_signal(pending) end
  run.main_task = kb.spawn(run.scenario_body, run, chunk)
  local ok, result = pcall(run.main_task.wait, run.main_task)
  if ok then run.result = result else run:fail(result) end
  -- A signal interrupts the running Lua code at once (src/rt/signal.c);
  -- its handler runs later from the loop. A run that ended in between,
  -- with an error or with a scenario that swallowed the cancellation, was
  -- still interrupted.
  if not run.signal and core.pending_signal() then run:on_signal(core.pending_signal()) end
  if run.signal then return end -- the signal path finishes
  if run.status == "usage" and type(result) == "table" and result.discard then return run:abandon() end
  run:finish()
end

--- Entry point, called by src/main.c as the first task. A failure of kbrun's
-- own Lua code is reported like any crash would be, with a traceback.
function M.main(args)
  local run = setmetatable({ args = args, exit_code = EXIT_OK, status = "passed",
    name = basename(args.scenario), started = kb.now(), started_wall = kb.time() }, Run)
  local ok, err = xpcall(main, function(e)
    if core.is_cancelled(e) then return e end
    return debug.traceback(e)
  end, run, args)
  if not ok then
    -- a signal's interrupt hook raised in kbrun's own code (between
    -- statements of main): an interruption, not an internal error
    local pending = core.pending_signal()
    if pending and core.is_cancelled(err) then
      if run.exp and not run.finished then return run:on_signal(pending) end
      return interrupted_early(pending)
    end
    io.stderr:write("kbrun: internal error: ", require("kb.secrets").scrub(tostring(err)), "\n")
    core.exit(EXIT_FAILED)
  end
end

return M
