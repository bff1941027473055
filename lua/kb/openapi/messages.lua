--- kb.openapi.messages: kb.openapi's checks of one exchange:
-- spec:validate_request (path, query and header parameters coerced to
-- their types, the body against its media type's schema) and
-- spec:validate_response (the status's documented schema, or the error
-- schema for an undocumented error status).
local json = require "kb.json"
local V = require "kb.openapi.values"
local D = require "kb.openapi.document"
local S = require "kb.openapi.schema"
local P = require "kb.openapi.paths"

local M = {}

local format, concat, sort = string.format, table.concat, table.sort
local quote, INT_RANGE = V.quote, V.INT_RANGE
local resolve = D.resolve
local add, check, make_ctx, to_schema = S.add, S.check, S.make_ctx, S.to_schema
local percent_decode, split_path = P.percent_decode, P.split_path

------------------------------------------------------------------------
-- Requests
------------------------------------------------------------------------

local function parse_query(q)
  local out, order = {}, {}
  if q == nil or q == "" then return out, order end
  for pair in q:gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=(.*)$")
    if not k then k, v = pair, "" end
    k = percent_decode((k:gsub("%+", " ")))
    v = percent_decode((v:gsub("%+", " ")))
    if out[k] == nil then
      out[k] = { v }
      order[#order + 1] = k
    else
      local list = out[k]
      list[#list + 1] = v
    end
  end
  return out, order
end

local function query_table(t)
  local out, order = {}, {}
  for k, v in pairs(t) do
    if type(k) ~= "string" then error("spec:validate_request: query keys must be strings", 3) end
    local list = {}
    if type(v) == "table" then
      for i, x in ipairs(v) do list[i] = tostring(x) end
    else
      list[1] = tostring(v)
    end
    out[k] = list
    order[#order + 1] = k
  end
  sort(order)
  return out, order
end

local PARSE_BOOL = { ["1"] = true, t = true, T = true, TRUE = true, ["true"] = true, True = true,
  ["0"] = false, f = false, F = false, FALSE = false, ["false"] = false, False = false }

-- Converts a query/path/header string to the parameter's type; returns
-- value, or nil + message.
local function coerce(s, schema, spec)
  local r = resolve(spec, schema)
  local t = type(r) == "table" and r.type
  if t == "integer" then
    local n = s:match("^[+-]?%d+$") and math.tointeger(tonumber(s))
    if not n then return nil, format("expected %s, got %s", r.format or "integer", quote(s)) end
    return n
  elseif t == "number" then
    local n = tonumber(s)
    if not n then return nil, format("expected number, got %s", quote(s)) end
    return n
  elseif t == "boolean" then
    local b = PARSE_BOOL[s]
    if b == nil then return nil, format("expected boolean, got %s", quote(s)) end
    return b
  elseif t == "string" and INT_RANGE[r.format] and not s:match("^[+-]?%d+$") then
    return nil, format("expected %s, got %s", r.format, quote(s))
  end
  return s
end

local function check_param(ctx, entry, values, where)
  local schema = entry.schema
  local r = resolve(ctx.spec, schema)
  if type(r) == "table" and r.type == "array" then
    local list = {}
    if entry.collection == "multi" or entry.collection == nil then
      for _, v in ipairs(values) do list[#list + 1] = v end
    else
      local sep = ({ csv = ",", ssv = " ", tsv = "\t", pipes = "|" })[entry.collection] or ","
      for _, v in ipairs(values) do
        for item in (v .. sep):gmatch("(.-)" .. sep:gsub("%p", "%%%0")) do list[#list + 1] = item end
      end
    end
    local coerced = json.array()
    for i, v in ipairs(list) do
      local cv, err = coerce(v, r.items or {}, ctx.spec)
      if err then return add(ctx, where .. "[" .. (i - 1) .. "]", err) end
      coerced[i] = cv
    end
    return check(ctx, schema, coerced, where, false, 0)
  end
  if #values > 1 then
    return add(ctx, where, format("given %d times, expected one value", #values))
  end
  local v, err = coerce(values[1], schema, ctx.spec)
  if err then return add(ctx, where, err) end
  check(ctx, schema, v, where, false, 0)
end

local function decode_body(body)
  if type(body) ~= "string" then return true, body end
  if body == "" then return true, nil end
  local ok, v = pcall(json.decode, body)
  if not ok then
    local msg = type(v) == "table" and v.message or tostring(v)
    return false, "invalid JSON: " .. msg:gsub("^kb%.json%.decode: ", "")
  end
  return true, v
end

local function header_value(headers, name)
  if type(headers) ~= "table" then return nil end
  for k, v in pairs(headers) do
    if type(k) == "string" and k:lower() == name then return v end
  end
  return nil
end

local function media_base(ct)
  return (ct:match("^%s*([^;%s]+)") or ""):lower()
end

-- The schema of an OpenAPI 3 `content` map for a media type (or the JSON one).
local function content_schema(content, ctype)
  if type(content) ~= "table" then return nil end
  if ctype then
    local base = media_base(ctype)
    for mt, media in pairs(content) do
      if media_base(mt) == base then return media.schema, true end
    end
  end
  for _, mt in ipairs({ "application/json", "*/*" }) do
    if content[mt] then return content[mt].schema, true end
  end
  local keys = {}
  for mt in pairs(content) do keys[#keys + 1] = mt end
  sort(keys)
  for _, mt in ipairs(keys) do
    if mt:find("json", 1, true) then return content[mt].schema, true end
  end
  return nil, #keys > 0
end

local function check_request_body(ctx, op, req)
  local body = req.body
  local ctype = header_value(req.headers, "content-type")
  if op.has_form then
    if type(body) ~= "table" then return end
    for name, entry in pairs(op.form) do
      if entry.required and body[name] == nil then add(ctx, "form." .. name, "missing required field") end
    end
    local names = {}
    for k in pairs(body) do names[#names + 1] = tostring(k) end
    sort(names)
    for _, k in ipairs(names) do
      if not op.form[k] then add(ctx, "form." .. k, "unknown field") end
    end
    return
  end
  if ctype and type(op.consumes) == "table" then
    local base, accepted = media_base(ctype), false
    for _, c in ipairs(op.consumes) do
      local cb = media_base(c)
      if cb == base or cb == "*/*" then accepted = true break end
    end
    if not accepted then
      add(ctx, "header.content-type", format("%s is not accepted (consumes %s)", quote(ctype), concat(op.consumes, ", ")))
    end
  end
  local ok, value = decode_body(body)
  if not ok then return add(ctx, "body", value) end
  if not op.body then
    if value ~= nil and not (type(value) == "table" and next(value) == nil) then
      add(ctx, "body", "operation takes no request body")
    end
    return
  end
  local schema = op.body.schema
  if op.body.content then
    local has
    schema, has = content_schema(op.body.content, ctype)
    if schema == nil and has then return end     -- a non-JSON media type
  end
  if value == nil then
    if op.body.required then add(ctx, "body", "missing required request body") end
    return
  end
  if schema ~= nil then check(ctx, schema, value, "body", false, 0) end
end

--- Validates a request against its operation.
-- @param req table: method, path (may carry ?query), query (table of
--   name -> value|list, or raw "a=1&b=2"), headers, body (decoded value,
--   or a JSON string), plus per-call options strict, int64, allow_null,
--   unknown_query
-- @return ok, errors, op
function M.validate_request(self, req)
  if type(req) ~= "table" or type(req.method) ~= "string" or type(req.path) ~= "string" then
    error("spec:validate_request{method=, path=, ...}: method and path are required strings", 2)
  end
  local ctx = make_ctx(self, req, "request")
  local op, params = self:operation(req.method, req.path)
  if not op then return false, { "operation: " .. params } end
  for name, entry in pairs(op.path_params) do
    local v = params[name]
    if v == nil then
      if entry.required then add(ctx, "path." .. name, "missing required parameter") end
    else
      check_param(ctx, entry, { v }, "path." .. name)
    end
  end
  -- The path's own query string, then req.query on top of it.
  local _, inline = split_path(req.path)
  local values, order = parse_query(inline)
  local q = req.query
  if q ~= nil then
    local more, more_order
    if type(q) == "table" then
      more, more_order = query_table(q)
    elseif type(q) == "string" then
      more, more_order = parse_query((q:gsub("^%?", "")))
    else
      error("spec:validate_request: query must be a table or a string", 2)
    end
    for _, k in ipairs(more_order) do
      if values[k] == nil then order[#order + 1] = k end
      values[k] = more[k]
    end
  end
  for _, name in ipairs(order) do
    local entry = op.query[name]
    local where = "query." .. name
    if entry then
      check_param(ctx, entry, values[name], where)
    elseif ctx.unknown_query == "error" then
      local known = #op.query_names > 0 and concat(op.query_names, ", ") or "none"
      add(ctx, where, format("unknown parameter (known: %s)", known))
    end
  end
  for _, name in ipairs(op.query_names) do
    if op.query[name].required and values[name] == nil then
      add(ctx, "query." .. name, "missing required parameter")
    end
  end
  for lname, entry in pairs(op.headers) do
    local v = header_value(req.headers, lname)
    if v == nil then
      if entry.required then add(ctx, "header." .. lname, "missing required parameter") end
    else
      check_param(ctx, entry, { tostring(v) }, "header." .. lname)
    end
  end
  check_request_body(ctx, op, req)
  return #ctx.errors == 0, ctx.errors, op
end

------------------------------------------------------------------------
-- Responses
------------------------------------------------------------------------

local function documented(responses)
  local keys = {}
  for k in pairs(responses or {}) do keys[#keys + 1] = tostring(k) end
  sort(keys)
  return #keys > 0 and concat(keys, ", ") or "none"
end

-- The response body schema for a status; returns schema (false = none to
-- check), or nil + message.
local function response_schema(spec, op, status)
  local code = tostring(status)
  local range = code:sub(1, 1) .. "XX"
  local over = spec.responses[op.key] or {}
  local responses = op.raw.responses or {}
  -- Most specific first: an exact status (override, then document) wins
  -- over any range or default, so an override of `default` (an error
  -- shape) never captures a documented 200.
  if over[code] ~= nil then return over[code] end
  local r = responses[code] or responses[tonumber(code)]
  if r == nil then
    if over[range] ~= nil then return over[range] end
    r = responses[range]
  end
  if r == nil then
    if over.default ~= nil then return over.default end
    r = responses.default
  end
  if r == nil then
    local es = spec.opts.error_schema
    if es ~= nil and (tonumber(code) or 0) >= 400 then return to_schema(spec, es, "error_schema") end
    return nil, format("%s is not a documented response (documented: %s)", code, documented(responses))
  end
  local rr, _, err = resolve(spec, r)
  if not rr then return nil, err end
  if spec.version == 2 then return rr.schema or false end
  local schema, has = content_schema(rr.content, nil)
  if schema == nil then return false end
  return schema, has
end

--- Validates a response against the operation's schema for its status
-- (the exact code, then "2XX"-style ranges, then "default").
-- @param res table: method, path, status, body (decoded or JSON string),
--   plus per-call options strict, int64, allow_null
-- @return ok, errors, op
function M.validate_response(self, res)
  if type(res) ~= "table" or type(res.method) ~= "string" or type(res.path) ~= "string" then
    error("spec:validate_response{method=, path=, status=, body=}: method and path are required strings", 2)
  end
  if res.status == nil then error("spec:validate_response: status is required", 2) end
  local ctx = make_ctx(self, res, "response")
  local op, msg = self:operation(res.method, res.path)
  if not op then return false, { "operation: " .. msg } end
  local schema, err = response_schema(self, op, res.status)
  if schema == nil then return false, { "status: " .. err }, op end
  if schema == false then return true, ctx.errors, op end
  local ok, value = decode_body(res.body)
  if not ok then return false, { "body: " .. value }, op end
  if value == nil then
    local r = resolve(self, schema)
    if type(r) == "table" and (r.type ~= nil or r.properties ~= nil) then
      return false, { "body: missing response body" }, op
    end
    return true, ctx.errors, op
  end
  check(ctx, schema, value, "body", false, 0)
  return #ctx.errors == 0, ctx.errors, op
end

return M
