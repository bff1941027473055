--- kb.kfp.storm_track: following a storm's runs by listing them, as an
-- informer does, instead of one GET per pending run each interval
-- (`tracking = "list"`; docs/storm.md, "Tracking runs").
--
-- Each interval: ListRuns of the storm's experiment, filtered to the
-- states that are not final, page by page (status fields only, timed as
-- poll.run.list). A pending run listed in the state we last saw needs no
-- call. A run listed in another state, or no longer listed (it finished,
-- or the server lost it), gets one GET (poll.run.get) that records what
-- changed exactly as the per-run polling does. So the calls per interval
-- are the pages of the unfinished runs plus the runs whose state changed,
-- not one per pending run.
--
-- A server that refuses the filter (HTTP 400: older KFP builds accept
-- fewer filter keys) is listed without it from then on, once said; the
-- outcome is the same, the pages are more.
local kb = require "kb"
local log = require "kb.log"
local json = require "kb.json"

local M = {}

-- The states a run can still leave, as each API spells them.
local NOT_FINAL = {
  v2beta1 = { key = "state", operator = "operation",
    values = { "RUNTIME_STATE_UNSPECIFIED", "PENDING", "RUNNING", "PAUSED", "CANCELING" } },
  v1beta1 = { key = "status", operator = "op",
    values = { "Pending", "Running", "Terminating" } },
}

--- The filter that lists a dialect's unfinished runs (a table, as
-- kb.kfp's list methods take it).
function M.unfinished_filter(api)
  local f = NOT_FINAL[api]
  if not f then error("kb.kfp.storm_track: no filter for api " .. tostring(api), 2) end
  return { predicates = json.array({ { key = f.key, [f.operator] = "IN",
    string_values = { values = json.array({ table.unpack(f.values) }) } } }) }
end

-- Every listed run by id: the unfinished runs of the experiment (all its
-- runs once the filter was refused). Returns nil, err when a page failed.
local function list_unfinished(s)
  local filter = not s.track_unfiltered and M.unfinished_filter(s.p.api) or nil
  local ok, items = pcall(s.poller.list_all_runs, s.poller, {
    experiment_id = s.experiment and s.experiment.id, page_size = s.track_page_size or 200,
    filter = filter, status_only = true })
  if not ok then
    if kb.is_cancelled(items) then error(items, 0) end
    if filter and type(items) == "table" and items.status == 400 then
      s.track_unfiltered = true
      log.warn("storm: the server refused the state filter of ListRuns (%s); tracking lists "
        .. "every run of the experiment instead", tostring(items.server_message or items.message))
      return list_unfinished(s)
    end
    return nil, items
  end
  local by_id = {}
  for _, r in ipairs(items) do
    if r.id then by_id[r.id] = r end
  end
  return by_id
end

--- One tracking round over `list` (runs of session `s`): returns how many
-- calls were made for it and whether every one failed (as a poll round's
-- outcome counts towards halting). `pending(run)` tells the runs still
-- followed.
function M.round(s, list, pending)
  local listed, err = list_unfinished(s)
  if not listed then
    s.track_error = err
    return 1, true
  end
  local changed = {}
  for _, run in ipairs(list) do
    if pending(run) then
      local seen = listed[run.id]
      if seen and seen.state == run.state then
        run.poll_failed = false
      else
        changed[#changed + 1] = run
      end
    end
  end
  local results = kb.pool(s.p.concurrency):map(changed, function(run) return s:poll_one(run) end)
  local any_ok = #changed == 0
  for i = 1, #changed do
    if results[i] then any_ok = true break end
  end
  return 1 + #changed, not any_ok
end

return M
