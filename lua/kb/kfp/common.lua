--- kb.kfp.common: helpers shared by the v1beta1 and v2beta1 mappings of
-- kb.kfp (argument checks, path segments, list queries, resource
-- references). Internal: scenarios use kb.kfp.
local json = require "kb.json"
local fs = require "kb.fs"
local states = require "kb.kfp.states"

local M = {}

M.parse_time = states.parse_time

--- A string field of a decoded document, or nil (absent, null, not a string,
-- or empty: KFP omits empty fields, some proxies send them as "").
function M.str(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

--- A table field of a decoded document, or an empty table.
function M.tbl(v)
  if type(v) == "table" then return v end
  return {}
end

--- Raises a usage error unless args[key] is a non-empty string.
function M.need(args, key, fn)
  local v = args[key]
  if type(v) ~= "string" or v == "" then
    error(string.format("kb.kfp: %s needs %s= (a non-empty string), got %s", fn, key,
      v == nil and "nothing" or type(v) == "string" and '""' or type(v)), 0)
  end
  return v
end

--- Raises a usage error unless id is a non-empty string. what: "run" (an
-- id) or "pipeline name".
function M.need_id(id, what, fn)
  if type(id) ~= "string" or id == "" then
    if not what:find(" name$") then what = what .. " id" end
    error(string.format("kb.kfp: %s needs the %s (a non-empty string), got %s", fn, what,
      id == nil and "nothing" or type(id) == "string" and '""' or type(id)), 0)
  end
  return id
end

--- A method acting on one object by id: DELETE <collection><id>, else
-- POST <collection><id><sep><verb> (sep ":" by default: v2's custom verbs
-- and v1's archive; v1's terminate, retry, enable and disable use "/").
-- what names the object in messages, fn_suffix the method ("_run").
function M.object_action(collection, what, fn_suffix, op, verb, sep)
  return function(c, id)
    M.need_id(id, what, verb .. fn_suffix)
    c:request{ op = op, method = verb == "delete" and "DELETE" or "POST",
      path = collection .. M.seg(id) .. (verb == "delete" and "" or (sep or ":") .. verb) }
    return true
  end
end

--- The experiment methods both APIs share (the same paths, ops and
-- answers): get_experiment (its answer through V.experiment, the
-- dialect's mapping) and delete, archive and unarchive_experiment, added
-- to dialect table V.
function M.experiment_methods(V)
  function V.get_experiment(c, id)
    M.need_id(id, "experiment", "get_experiment")
    return V.experiment(c:request{ op = "experiment.get", method = "GET",
      path = "/experiments/" .. M.seg(id) })
  end
  for _, verb in ipairs({ "delete", "archive", "unarchive" }) do
    V[verb .. "_experiment"] = M.object_action("/experiments/", "experiment", "_experiment",
      "experiment." .. verb, verb)
  end
end

--- The arguments table of a method, checked.
function M.args(a, fn)
  if a == nil then return {} end
  if type(a) ~= "table" then
    error(string.format("kb.kfp: %s takes a table of arguments, got %s", fn, type(a)), 0)
  end
  return a
end

local function percent(c) return string.format("%%%02X", c:byte()) end

--- A path segment, percent-encoded (RFC 3986 unreserved characters kept).
-- Ids (UUIDs) need nothing: they are returned as they are.
function M.seg(s)
  if not s:find("[^%w%-%._~]") then return s end
  return (s:gsub("[^%w%-%._~]", percent))
end

--- The text of a filter: a string is sent as is, a table ({predicates =
-- {...}}) is JSON-encoded. kb.http percent-encodes it in the query.
function M.filter(f)
  if f == nil or type(f) == "string" then return f end
  if type(f) ~= "table" then
    error("kb.kfp: filter must be a table ({predicates = {...}}) or JSON text, got " .. type(f), 0)
  end
  return json.encode(f)
end

--- The paging query of a list call: page_size, page_token, sort_by, filter.
function M.list_query(a, q)
  q = q or {}
  q.page_size = a.page_size
  q.page_token = M.str(a.page_token)
  q.sort_by = a.sort_by
  q.filter = M.filter(a.filter)
  return q
end

--- recover function of a create (see kb.retry): lists `path` (query q
-- plus a filter `key` EQUALS name) as op `<op>.check` and returns the raw
-- item whose `field` is name, or nil. ver: 1 or 2 (the predicate's
-- operator key differs). The item is checked here too, so a server that
-- ignores the filter cannot make a wrong object the answer.
function M.finder(c, ver, op, path, q, items_key, key, field, name)
  return function()
    local query = {}
    for k, v in pairs(q or {}) do query[k] = v end
    query.page_size = 20
    query.filter = json.encode({ predicates = json.array({ { key = key,
      [ver == 1 and "op" or "operation"] = "EQUALS", string_value = name } }) })
    local doc = c:request{ op = op .. ".check", method = "GET", path = path, query = query }
    local items = doc[items_key]
    for _, x in ipairs(type(items) == "table" and items or {}) do
      if type(x) == "table" and x[field] == name then return x end
    end
    return nil
  end
end

--- A page of a list answer: {items, next_page_token (nil on the last page),
-- total_size, raw}.
function M.page(doc, key, norm)
  local items = json.array({})
  local list = doc[key]
  if type(list) == "table" then
    for i, x in ipairs(list) do items[i] = norm(x) end
  end
  return {
    items = items,
    next_page_token = M.str(doc.next_page_token),
    total_size = math.tointeger(doc.total_size) or 0,
    raw = doc,
  }
end

--- The multipart part and default filename of an upload ({file=} or {content=}).
function M.upload_part(a, fn)
  if (a.file == nil) == (a.content == nil) then
    error("kb.kfp: " .. fn .. " needs exactly one of file= (a path) and content= (the text)", 0)
  end
  if a.file ~= nil then
    if type(a.file) ~= "string" then error("kb.kfp: " .. fn .. ": file= must be a path", 0) end
    return { name = "uploadfile", file = a.file, filename = a.filename or fs.basename(a.file) }
  end
  if type(a.content) ~= "string" then error("kb.kfp: " .. fn .. ": content= must be a string", 0) end
  -- The server picks the format from the filename's extension first.
  return { name = "uploadfile", data = a.content, filename = a.filename or "pipeline.yaml" }
end

--- A v1 resource reference.
function M.ref(type_, id, relationship)
  return { key = { type = type_, id = id }, relationship = relationship }
end

--- The id of the first v1 resource reference of a type, or nil.
function M.find_ref(refs, type_)
  if type(refs) ~= "table" then return nil end
  for _, r in ipairs(refs) do
    if type(r) == "table" and type(r.key) == "table" and r.key.type == type_ then
      return M.str(r.key.id)
    end
  end
  return nil
end

--- The text of a parameter value for APIs that take strings (v1).
function M.param_text(v)
  local t = type(v)
  if t == "string" then return v end
  if t == "number" or t == "boolean" then
    if math.type(v) == "float" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then
      return tostring(math.tointeger(v))
    end
    return tostring(v)
  end
  if t == "table" then return json.encode(v) end
  error("kb.kfp: a run parameter must be a string, number, boolean or table, got " .. t, 0)
end

--- The keys of a table, sorted (deterministic request bodies).
function M.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) ~= "string" then error("kb.kfp: parameter names must be strings", 0) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

--- An int64 for the JSON of the KFP APIs (text, as protobuf writes them).
function M.int64(v, what)
  if v == nil then return nil end
  local n = math.tointeger(v)
  if not n then error(string.format("kb.kfp: %s must be an integer, got %s", what, tostring(v)), 0) end
  return tostring(n)
end

--- The trigger of a recurring run: exactly one of cron= and interval_seconds=.
-- A 5-field cron expression gets a leading "0 " (KFP's cron has a seconds
-- field first); 6 fields and descriptors ("@hourly", "@every 5m") pass.
function M.trigger(a, fn)
  if (a.cron == nil) == (a.interval_seconds == nil) then
    error("kb.kfp: " .. fn .. " needs exactly one of cron= and interval_seconds=", 0)
  end
  local start_time = a.start_time and states.format_time(a.start_time)
  local end_time = a.end_time and states.format_time(a.end_time)
  if a.cron ~= nil then
    if type(a.cron) ~= "string" or a.cron == "" then
      error("kb.kfp: " .. fn .. ": cron= must be a cron expression", 0)
    end
    local cron, fields = a.cron, select(2, a.cron:gsub("%S+", ""))
    if fields == 5 and cron:sub(1, 1) ~= "@" then cron = "0 " .. cron end
    return { cron_schedule = { cron = cron, start_time = start_time, end_time = end_time } }
  end
  local n = math.tointeger(a.interval_seconds)
  if not n or n <= 0 then
    error("kb.kfp: " .. fn .. ": interval_seconds= must be a positive integer", 0)
  end
  return { periodic_schedule = { interval_second = tostring(n), start_time = start_time,
    end_time = end_time } }
end

--- cron and interval_seconds of a decoded trigger.
function M.trigger_fields(t)
  t = M.tbl(t)
  local cron = M.tbl(t.cron_schedule).cron
  local interval = M.tbl(t.periodic_schedule).interval_second
  return M.str(cron), interval and math.tointeger(tonumber(interval)) or nil
end

--- A healthz answer.
function M.healthz(doc)
  return {
    multi_user = doc.multi_user == true,
    pipeline_store = M.str(doc.pipeline_store),
    commit_sha = M.str(doc.commit_sha),
    tag_name = M.str(doc.tag_name),
    raw = doc,
  }
end

return M
