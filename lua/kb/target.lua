--- kb.target: where a scenario's requests go.
--
-- A scenario names its target with a `host` parameter. No host, "" or "sim"
-- means kbrun's embedded simulator, started in-process on first use (its
-- own thread and loop, an ephemeral loopback port) with the cluster config
-- from `kbrun --sim-config FILE` or the scenario; anything else is the URL
-- of a real server. Against the simulator the scenario clock follows the
-- simulator's virtual clock, so a scenario written in real units runs fast
-- and its report reads in cluster time.
local kb = require "kb"

local M = {}

--- Options for the embedded simulator, set by the runner from the command
-- line (--sim-config, --sim-profile, --sim-speed, --seed).
M.defaults = {} -- speed (linear clock), clock, profile, config_file, seed

local embedded

--- True when `host` designates the embedded simulator.
function M.is_sim(host)
  return host == nil or host == "" or host == "sim"
end

--- Starts the embedded simulator once; later calls return the same one.
-- opts (optional, first call only): profile, config (YAML text or table),
-- config_file, speed, seed, clock ("events" or "linear", as kb.sim.start).
function M.simulator(opts)
  if embedded then return embedded end
  opts = opts or {}
  local d = M.defaults
  local config, config_name = opts.config, nil
  local file = opts.config_file or d.config_file
  if config == nil and file then
    config, config_name = kb.fs.read(file), file
  end
  embedded = kb.sim.start {
    profile = opts.profile or d.profile,
    config = config or d.config,
    config_name = config_name,
    speed = opts.speed or d.speed,
    seed = opts.seed or d.seed or 1,
    clock = opts.clock or d.clock,
    pipeline_dir = opts.pipeline_dir or d.pipeline_dir, -- local pipeline files: only in it
  }
  M.pipeline_dir = opts.pipeline_dir or d.pipeline_dir
  if require("kb.core").clock_kind() == "events" then
    kb.log.info("embedded simulator at %s (virtual clock, fast-forwarding)", embedded.url)
  else
    kb.log.info("embedded simulator at %s (x%g)", embedded.url, embedded.speed)
  end
  return embedded
end

--- Resolves a host parameter to a base URL; the second result is the
-- embedded simulator when it is the target.
function M.resolve(host, opts)
  if not M.is_sim(host) then return (host:gsub("/+$", "")), nil end
  local sim = M.simulator(opts)
  return sim.url, sim
end

--- Changes the embedded simulator's faults at run time:
--   target.faults{api = {error_rate = 0.05}, pool_fail = "pool-1", step_fail_prob = 0.3}
function M.faults(spec)
  local sim = assert(embedded, "kb.target.faults: no embedded simulator is running")
  local res = kb.http.request {
    method = "POST", url = sim.url .. "/sim/v1/faults",
    headers = { ["content-type"] = "application/json" },
    body = kb.json.encode(spec),
  }
  if res.status ~= 200 then
    error(string.format("kb.target.faults: the simulator refused: %s", res.body), 2)
  end
  return kb.json.decode(res.body)
end

--- The simulator's status (cluster counts, clock, faults).
function M.status()
  local sim = assert(embedded, "kb.target.status: no embedded simulator is running")
  return kb.json.decode(kb.http.get(sim.url .. "/sim/v1/status").body)
end

--- Stops the embedded simulator (kbrun also stops it at exit).
function M.stop()
  if embedded then embedded:stop() end
  embedded = nil
end

return M
