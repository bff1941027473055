--- kb.kfp.states: run states and timestamps of the KFP APIs, normalised.
--
-- Runs are reported in the vocabulary of the v1 API and of the official
-- benchmark notebooks (tools/benchmarks/run_service_api.ipynb), whatever the
-- API version, so scenarios and reports compare across versions. The v2
-- RuntimeState is mapped exactly as a KFP 2.x server derives the v1 status
-- from it (see shared/notes/kfp.md §1c):
--
--   v2beta1 state              normalised state
--   PENDING, PAUSED            Pending
--   RUNNING                    Running
--   SUCCEEDED                  Succeeded
--   SKIPPED                    Skipped
--   FAILED, CANCELED           Failed
--   CANCELING                  Terminating
--   RUNTIME_STATE_UNSPECIFIED,
--   missing or unknown         Unknown
--
-- v1 status strings are kept as they are ("Error" and "Terminated" still come
-- from KFP 1.x servers); a missing or empty v1 status is "Unknown". The raw
-- value stays in run.state_raw, so CANCELED remains distinguishable.
--
-- A run is finished when its state is in the notebook's finished set
-- {Succeeded, Failed, Error, Skipped, Terminated}; v2 CANCELED maps to Failed
-- and is therefore finished too. Unknown is not finished: a run stuck there
-- (persistence-agent lag) needs a timeout, not a broken loop.
local u = require "kb.k8s.util"

local M = {}

--- v2 RuntimeState -> normalised state.
M.V2 = {
  PENDING = "Pending",
  PAUSED = "Pending",
  RUNNING = "Running",
  SUCCEEDED = "Succeeded",
  SKIPPED = "Skipped",
  FAILED = "Failed",
  CANCELED = "Failed",
  CANCELING = "Terminating",
  RUNTIME_STATE_UNSPECIFIED = "Unknown",
}

--- The notebook's finished set.
M.FINISHED = { Succeeded = true, Failed = true, Error = true, Skipped = true, Terminated = true }

--- Normalised state of a v2 RuntimeState string (nil -> "Unknown").
function M.from_v2(state)
  return M.V2[state] or "Unknown"
end

--- Normalised state of a v1 status string (nil or "" -> "Unknown").
function M.from_v1(status)
  if type(status) ~= "string" or status == "" then return "Unknown" end
  return status
end

--- True when a normalised state is final.
function M.is_finished(state)
  return M.FINISHED[state] == true
end

--- Seconds since the Unix epoch of an RFC 3339 timestamp ("2024-05-01T10:00:00Z",
-- "2024-05-01T12:00:00.250+02:00"): an integer, or a float with a fraction.
-- Returns nil for anything else, and for times at or before the epoch: KFP
-- writes "1970-01-01T00:00:00Z" for "not yet" (an unfinished run's
-- finished_at), and Go's zero time is year 1.
local parse_rfc3339

-- Parsed times by their text: a storm's polls read the same few timestamps
-- of every run again and again. Bounded: emptied when it holds 8192.
local parsed, n_parsed = {}, 0

function M.parse_time(s)
  if type(s) ~= "string" then return nil end
  local t = parsed[s]
  if t ~= nil then return t or nil end
  t = parse_rfc3339(s)
  if n_parsed >= 8192 then parsed, n_parsed = {}, 0 end
  parsed[s], n_parsed = t or false, n_parsed + 1
  return t
end

parse_rfc3339 = function(s)
  local y, mo, d, h, mi, sec, rest =
    s:match("^(%d%d%d%d)-(%d%d)-(%d%d)[Tt ](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  y, mo, d, h, mi, sec = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(sec)
  if mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or sec > 60 then return nil end
  local frac, zone = rest:match("^(%.%d+)(.*)$")
  if not frac then zone = rest end
  local offset
  if zone == "Z" or zone == "z" then
    offset = 0
  else
    local sign, oh, om = zone:match("^([+-])(%d%d):(%d%d)$")
    if not sign then return nil end
    offset = (tonumber(oh) * 3600 + tonumber(om) * 60) * (sign == "-" and -1 or 1)
  end
  local t = u.days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset
  if frac then t = t + tonumber("0" .. frac) end
  if t <= 0 then return nil end
  return t
end

--- RFC 3339 text (UTC, "Z") of epoch seconds; a string is returned as is.
function M.format_time(t)
  if type(t) == "string" then return t end
  if type(t) ~= "number" or t ~= t then
    error("kb.kfp: a time must be epoch seconds or RFC 3339 text, got " .. tostring(t), 3)
  end
  local whole = math.floor(t)
  local frac = t - whole
  local text = os.date("!%Y-%m-%dT%H:%M:%S", whole)
  if frac > 0 then text = text .. string.format("%.6f", frac):sub(2):gsub("0+$", "") end
  return text .. "Z"
end

return M
