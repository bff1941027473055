--- kb.runner: what `kbrun SCENARIO.lua` does, step by step.
--
-- A scenario file either does its work at top level, or returns a table:
--   return {
--     name = "taxi_50runs",            -- optional, defaults to the file name
--     params = { num_runs = 50 },      -- defaults; typos on the command line are refused
--     run = function(p) ... return results end,
--     cleanup = function(p) ... end,   -- always runs: after success, error or Ctrl-C
--     cleanup_timeout = 60,            -- seconds of real time for cleanup
--   }
-- Whatever happens, result/result.json is written before kbrun exits.
local core = require "kb.core"
local kb = require "kb"
local params = require "kb.params"

local M = {}

local EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
local SIGNAL_EXIT = { SIGINT = 130, SIGTERM = 143 }

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

-- A usage error raised while the scenario sets up (bad parameter).
local UsageError = {}
UsageError.__index = UsageError
UsageError.__tostring = function(e) return e.message end

local function usage_error(msg)
  return setmetatable({ class = "usage", message = msg }, UsageError)
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
  self.scenario = scenario
  if scenario.name then self.name = scenario.name end
  local merged, err = params.merge(scenario.params, self.file_params, self.cli_params)
  if not merged then error(usage_error(err)) end
  kb.params = merged
  self.params_ok = true
  self:write_config()
  if scenario.run == nil then return nil end
  if type(scenario.run) ~= "function" then
    error(usage_error(self.args.scenario .. ": the scenario's 'run' must be a function"))
  end
  return scenario.run(merged)
end

function Run:write_config()
  self.exp:write_json("config", "params.json", {
    scenario = self.args.scenario,
    params = kb.params,
    seed = self.seed_value,
  })
  if self.journal then self.journal:write{ k = "params", name = self.name, params = kb.params } end
end

-- ---- the journal (output/journal.jsonl) ------------------------------------
-- Every measurement is journaled as it happens (kb.metrics.set_journal;
-- scenarios' events too, e.g. the storm's), buffered and flushed every
-- KBRUN_JOURNAL_FLUSH_MS (default 50 ms, 0 = each record), so a SIGKILL
-- loses at most that much; `kbrun report DIR` rebuilds the result files
-- from the journal when result.json is missing or older (kb.rebuild).
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
    wall = self.started_wall, seed = self.seed_value, params = kb.params,
    shard = require("kb.shard").describe(), environment = M.environment(),
    flush_ms = interval * 1000 }
  -- the clock: the embedded simulator installs its own during the run
  local speed = 1
  j:on_flush(function()
    local now = core.clock_speed()
    if now ~= speed then
      speed = now
      j:write{ k = "clock", speed = now }
    end
  end)
  journal.set_active(j)
  kb.metrics.set_journal(j)
  j:start_flusher()
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
    j:write{ k = "end", status = doc.status, exit_code = doc.exit_code, error = doc.error,
      duration = doc.duration, clock = doc.clock, finished_at = doc.finished_at }
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
  local ok, err = pcall(kb.timeout, limit * core.clock_speed(), scenario.cleanup, kb.params)
  if not ok then
    kb.log.error("cleanup failed: %s", message_of(err))
    self.cleanup_error = message_of(err)
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
    result = result,
  }
end

-- Thresholds only judge a run that completed; a failed or interrupted run
-- has already failed.
function Run:check_thresholds(doc)
  local spec = self.scenario and self.scenario.thresholds
  if not spec then return end
  local ok, checks, all = pcall(require("kb.thresholds").evaluate, spec, doc.metrics, self.result)
  if not ok then
    kb.log.error("thresholds: %s", message_of(checks))
    checks, all = {}, false
  end
  doc.thresholds = checks
  if not all and self.exit_code == EXIT_OK then
    self.exit_code, self.status = EXIT_FAILED, "failed"
    doc.exit_code, doc.status = self.exit_code, self.status
    doc.error = "a threshold failed"
  end
end

-- Writes everything measured, prints the summary, and stops the loop.
function Run:finish()
  if self.finished then return end
  self.finished = true
  if self.observers then self.observers:stop() end -- --metrics-listen, live line (kb.prometheus)
  local leftover = core.cancel_all()
  if leftover > 0 then
    kb.log.debug("%d task(s) still running at the end were cancelled", leftover)
  end
  if self.journal then self.journal:start_flusher() end -- cancelled above; cleanup may be long
  self:cleanup()
  local doc = self:result_document()
  self:check_thresholds(doc)
  if #self.unobserved > 0 then
    for _, text in ipairs(self.unobserved) do
      kb.log.error("a task failed and nobody waited for it: %s", text)
    end
    if self.exit_code == EXIT_OK then
      self.exit_code, self.status = EXIT_FAILED, "failed"
      doc.exit_code, doc.status = self.exit_code, self.status
    end
  end
  self:close_journal(doc)
  local ok, err = pcall(self.exp.write_json, self.exp, "result", "result.json", doc)
  if not ok then
    kb.log.error("could not write the results: %s", message_of(err))
    if self.exit_code == EXIT_OK then self.exit_code = EXIT_FAILED end
  end
  -- The report is derived from result.json; a broken report never loses it.
  local okr, rerr = pcall(function()
    require("kb.report").write(self.exp, doc, { scenario = self.scenario })
  end)
  if not okr then kb.log.warn("report: %s", message_of(rerr)) end
  if not self.args.quiet then
    local okp, perr = pcall(function() require("kb.summary").print(doc, self.exp, { tty = self.args.tty }) end)
    if not okp then kb.log.warn("summary: %s", message_of(perr)) end
  end
  core.exit(self.exit_code)
end

function Run:fail(err)
  if getmetatable(err) == UsageError then
    self.exit_code, self.status = EXIT_USAGE, "usage"
    io.stderr:write("kbrun: ", err.message, "\n")
  elseif core.is_cancelled(err) and self.signal then
    return -- interrupted: status already set by the signal handler
  else
    self.exit_code, self.status = EXIT_FAILED, "failed"
    io.stderr:write("kbrun: scenario failed: ", message_of(err), "\n")
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
  if self.main_task then self.main_task:cancel() end
  core.cancel_all()
  kb.spawn(function() self:finish() end)
end

--- The clock the run measured in: the simulator's virtual clock if one was
-- installed during the run (even if stopped since), else the real clock.
function M.clock()
  local speed = require("kb.sim").speed_used()
  if speed and speed ~= 1 then return { kind = "virtual", speed = speed } end
  return { kind = "real", speed = 1 }
end

local function first_line(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local line = f:read("l")
  f:close()
  return line
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
    host = first_line("/proc/sys/kernel/hostname"),
    os = os_name,
    kernel = first_line("/proc/sys/kernel/osrelease"),
    cpus = cpus > 0 and cpus or nil,
    kbrun = core.version,
    lua = _VERSION,
  }
end

local function early_exit(code, msg)
  io.stderr:write("kbrun: ", msg, "\n")
  core.exit(code)
end

local function main(args)
  kb.log.level(args.quiet and "warn" or (args.verbose and "debug" or "info"))
  local run = setmetatable({ args = args, exit_code = EXIT_OK, status = "passed",
    name = basename(args.scenario), started = kb.now(), started_wall = kb.time() }, Run)

  local cli, perr = params.parse_assignments(args.assignments or {})
  if not cli then return early_exit(EXIT_USAGE, perr) end
  run.cli_params = cli

  local f = io.open(args.scenario, "r")
  if not f then return early_exit(EXIT_USAGE, string.format("cannot read scenario '%s'", args.scenario)) end
  f:close()
  local chunk, lerr = loadfile(args.scenario)
  if not chunk then return early_exit(EXIT_FAILED, lerr) end

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
  target.defaults.seed = run.seed_value

  local merged, merr = params.merge(nil, file_params, cli)
  if not merged then return early_exit(EXIT_USAGE, merr) end

  -- --metrics-listen and the TTY status line run beside the scenario until
  -- Run:finish (kb.prometheus.observe, docs/observability.md).
  local oko, observers = pcall(require("kb.prometheus").observe, args)
  if not oko then return early_exit(EXIT_USAGE, message_of(observers)) end
  run.observers = observers
  kb.params = merged

  local okx, exp = pcall(require("kb.experiment").create, { out = args.out, name = run.name })
  if not okx then return early_exit(EXIT_FAILED, "cannot create the experiment folder: " .. message_of(exp)) end
  run.exp = exp
  kb.exp = exp
  run:open_journal()
  run:write_config()

  core.on_signal(function(name) run:on_signal(name) end)
  run.main_task = kb.spawn(run.scenario_body, run, chunk)
  local ok, result = pcall(run.main_task.wait, run.main_task)
  if ok then run.result = result else run:fail(result) end
  if run.signal then return end -- the signal path finishes
  run:finish()
end

--- Entry point, called by src/main.c as the first task. A failure of kbrun's
-- own Lua code is reported like any crash would be, with a traceback.
function M.main(args)
  local ok, err = xpcall(main, debug.traceback, args)
  if not ok then
    io.stderr:write("kbrun: internal error: ", tostring(err), "\n")
    core.exit(EXIT_FAILED)
  end
end

return M
