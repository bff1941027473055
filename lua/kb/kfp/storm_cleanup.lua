--- kb.kfp.storm_cleanup: the part of kb.kfp.storm that deletes what a
-- storm created (notebook steps 7-8 and whatever is left): the creates
-- whose answer was lost looked up by name first, then runs (terminated
-- first when still running), leftover runs, pipelines with their versions
-- and experiments. Its functions are Session's (docs/storm.md, "What differs
-- from the notebook").
local kb = require "kb"
local json = require "kb.json"
local log = require "kb.log"
local arrivals = require "kb.kfp.storm_arrivals"
local message_of = require("kb.kfp.storm_record").message_of
local pending = require("kb.kfp.storm_wait").pending
local storm = require "kb.kfp.storm"

local M = {}

local Session = storm.Session

-- ---- cleanup ----------------------------------------------------------------------

local MAX_CLEANUP_ERRORS = 10

-- Calls fn(...); a failure is logged and kept (the first few), never raised.
-- After MAX_AUTH_FAILURES consecutive auth failures nothing more is sent.
local function try(self, what, fn, ...)
  if self.cleanup_stopped then return false end
  local ok, err = pcall(fn, ...)
  if ok then
    self.cleanup_auth = 0
    return true
  end
  if kb.is_cancelled(err) then error(err, 0) end
  if type(err) == "table" and err.class == "not_found" then return true end
  if type(err) == "table" and err.class == "auth" then
    self.cleanup_auth = (self.cleanup_auth or 0) + 1
    if self.cleanup_auth >= storm.MAX_AUTH_FAILURES then
      self.cleanup_stopped = string.format("cleanup stopped after %d consecutive auth failures (%s)",
        self.cleanup_auth, message_of(err))
      log.error("storm: %s; what the storm created is left on the server", self.cleanup_stopped)
    end
  end
  local text = what .. ": " .. message_of(err)
  self.cleanup_failures = (self.cleanup_failures or 0) + 1
  if #self.cleanup_errors < MAX_CLEANUP_ERRORS then
    self.cleanup_errors[#self.cleanup_errors + 1] = text
    log.warn("storm: cleanup: %s", text)
  elseif self.cleanup_failures == MAX_CLEANUP_ERRORS + 1 then
    log.warn("storm: cleanup: more failures; only the first %d are kept", MAX_CLEANUP_ERRORS)
  end
  return false
end

-- Journals a delete with the object's id, so a rebuild after a kill during
-- cleanup says what was deleted.
function Session:journal_deleted(kind, id, name, index)
  self:journal_write{ event = "deleted", kind = kind, id = id, name = name, index = index,
    t = self:elapsed() }
end

-- Pipelines and experiments whose create may have made one but whose id
-- the storm does not know.

--- Items of a list method (list_pipelines, list_experiments) named `name`:
-- the server filters (name EQUALS), and the name is checked here too.
function Session:find_by_name(c, method, key, name)
  local page = c[method](c, { page_size = 20, filter = { predicates = json.array({ { key = key,
    [self.p.api == "v1beta1" and "op" or "operation"] = "EQUALS", string_value = name } }) } })
  local out = {}
  for _, x in ipairs(page.items) do
    if x.name == name then out[#out + 1] = x end
  end
  return out
end

-- Looks up, by name, what the unanswered creates made (experiments,
-- pipelines, runs) until all are found or `request_timeout` has passed
-- since the last was sent: a create the server received can land after
-- the client stopped waiting (Ctrl-C during a stalled create). Found
-- objects join s.created (and their runs get their id), so cleanup
-- deletes them.
function Session:resolve_intents()
  local aux, p = self.aux, self.p
  local kinds = {
    { list = self.intents.experiments, method = "list_experiments",
      key = p.api == "v1beta1" and "name" or "display_name", into = self.created.experiments,
      kind = "experiment" },
    { list = self.intents.pipelines, method = "list_pipelines", key = "name",
      into = self.created.pipelines, kind = "pipeline" },
  }
  local last_sent = 0
  for _, k in ipairs(kinds) do
    for _, it in ipairs(storm.unanswered(k.list)) do last_sent = math.max(last_sent, it.sent) end
  end
  for _, run in ipairs(storm.unanswered(self.runs)) do last_sent = math.max(last_sent, run.sent) end
  if last_sent == 0 then return end
  local deadline = last_sent + p.request_timeout
  local step = math.max(p.request_timeout / 15, 1e-3)
  local lookup_error
  while not self.cleanup_stopped do
    local left = 0
    for _, k in ipairs(kinds) do
      for _, it in ipairs(storm.unanswered(k.list)) do
        local ok, found = pcall(self.find_by_name, self, aux, k.method, k.key, it.name)
        if not ok and kb.is_cancelled(found) then error(found, 0) end
        if ok and #found > 0 then
          for _, x in ipairs(found) do k.into[#k.into + 1] = x.id end
          it.id, it.found = found[1].id, true
          self:journal_write{ event = k.kind .. ".reconciled", id = it.id, name = it.name,
            t = self:elapsed() }
          log.info("storm: cleanup: found %s %s (%s) by name: its create's answer was lost",
            k.kind, it.name, it.id)
        else
          if not ok and not it.lookup_failed then -- kept once, not once a round
            it.lookup_failed = true
            try(self, "look up " .. k.kind .. " " .. it.name, error, found)
          end
          left = left + 1
        end
      end
    end
    local found, lerr = self:reconcile_runs(self.runs)
    lookup_error = found == nil and message_of(lerr) or nil
    left = left + #storm.unanswered(self.runs)
    if left == 0 or kb.now() >= deadline then break end
    kb.sleep(math.min(step, math.max(deadline - kb.now(), 1e-3)))
  end
  for _, run in ipairs(storm.unanswered(self.runs)) do
    run.looked_up = true
    if lookup_error then
      run.unknown = true
      run.unknown_reason = "unknown (created? intent journaled, the server's runs could not be "
        .. "listed: " .. lookup_error .. ")"
    else
      run.create_error = string.format("not created: no run named %s on the server (looked up by "
        .. "name until request_timeout after the create was sent; %s)", run.name,
        run.create_error or "its answer never arrived")
    end
    run.maybe_created = false
  end
end

-- Deletes our runs that are still there, then anything else the
-- experiment holds (a run whose create call failed may exist anyway).
function Session:cleanup_runs()
  local aux = self.aux
  self:each_created(nil, function(s, run)
    if run.deleted or run.lost then return end
    -- an Unknown run may still be running: terminated first like a pending one
    if pending(run) or (run.unknown and not run.finished) then
      try(s, "terminate run " .. run.id, aux.terminate_run, aux, run.id)
    end
    -- journaled first: a rebuild after a kill here waits for this delete
    s:journal_intent{ event = "delete.intent", kind = "run", id = run.id, t = s:elapsed() }
    if try(s, "delete run " .. run.id, aux.delete_run, aux, run.id) then
      run.deleted = true
      s.cleaned.runs = s.cleaned.runs + 1
      s:journal_deleted("run", run.id, run.name, run.index)
    end
  end)
  for _, eid in ipairs(self.created.experiments) do
    if self.gone[eid] or self.cleanup_stopped then goto next_experiment end
    local ok, items = pcall(aux.list_all_runs, aux, { experiment_id = eid, page_size = 200 })
    if not ok and kb.is_cancelled(items) then error(items, 0) end
    for _, r in ipairs(ok and items or {}) do
      if try(self, "delete leftover run " .. r.id, aux.delete_run, aux, r.id) then
        self.cleaned.leftover_runs = self.cleaned.leftover_runs + 1
        self:journal_deleted("run", r.id, r.name)
      end
    end
    ::next_experiment::
  end
end

--- Deletes everything the storm created: runs (terminated first when still
-- running), leftover runs of its experiments, pipelines with their
-- versions (KFP 2.x refuses a plain delete, kfp.md §1c) and experiments.
-- Idempotent; failures are counted (s.cleanup_failures), the first ten
-- logged and kept in s.cleanup_errors, never raised, so it is safe in a
-- scenario's cleanup after an error or Ctrl-C.
function Session:cleanup()
  self.cleanup_errors = self.cleanup_errors or {}
  self.cleaned = self.cleaned or { runs = 0, leftover_runs = 0, pipelines = 0, experiments = 0 }
  arrivals.stop(self) -- no run arrives during cleanup
  self:resolve_intents()
  self:cleanup_runs()
  local aux = self.aux
  for _, id in ipairs(self.created.pipelines) do
    if not self.gone[id]
        and try(self, "delete pipeline " .. id, aux.delete_pipeline, aux, id, { cascade = true }) then
      self.gone[id] = true
      self.cleaned.pipelines = self.cleaned.pipelines + 1
      self:journal_deleted("pipeline", id)
    end
  end
  for _, id in ipairs(self.created.experiments) do
    if not self.gone[id] and try(self, "delete experiment " .. id, aux.delete_experiment, aux, id) then
      self.gone[id] = true
      self.cleaned.experiments = self.cleaned.experiments + 1
      self:journal_deleted("experiment", id)
    end
  end
  self:journal_write{ event = "cleanup", cleaned = self.cleaned, errors = self.cleanup_errors,
    stopped = self.cleanup_stopped }
  return self.cleaned
end



return M
