--- kb.openapi.paths: kb.openapi's operations and path matching: a
-- request's method and path to the operation of the document (literal
-- segments first, then `{param}:verb`, then plain parameters), the nearest
-- templates when none matches, an operation's compiled parameters, and
-- spec:operation / spec:operations.
local util = require "kb.k8s.util"
local V = require "kb.openapi.values"
local D = require "kb.openapi.document"

local M = {}

local format, concat, sort = string.format, table.concat, table.sort
local fail = V.fail
local resolve = D.resolve

------------------------------------------------------------------------
-- Operations and path matching
------------------------------------------------------------------------

local METHODS = { "get", "put", "post", "delete", "options", "head", "patch", "trace" }

local function percent_decode(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function split_path(path)
  path = path:gsub("^%a[%w+.-]*://[^/]*", "")   -- a full URL
  path = path:gsub("#.*$", "")
  local query
  local q = path:find("?", 1, true)
  if q then path, query = path:sub(1, q - 1), path:sub(q + 1) end
  local norm = path:gsub("/+$", "")
  local segs = {}
  for seg in norm:gmatch("[^/]+") do segs[#segs + 1] = seg end
  return segs, query, (norm == "" and "/" or norm)
end

local function match_route(route, segs)
  local params
  for i, s in ipairs(route.segs) do
    local seg = segs[i]
    if s.pattern then
      local caps = { seg:match(s.pattern) }
      if caps[1] == nil then return nil end
      params = params or {}
      for j, n in ipairs(s.names) do params[n] = percent_decode(caps[j]) end
    elseif s.text ~= seg then
      return nil
    end
  end
  return params or {}
end

local function better(a, b)
  for i = 1, #a.score do
    if a.score[i] ~= b.score[i] then return a.score[i] > b.score[i] end
  end
  return a.template < b.template
end

local function route_methods(route)
  local m = {}
  for _, name in ipairs(METHODS) do
    if type(route.item[name]) == "table" then m[#m + 1] = name:upper() end
  end
  return concat(m, ", ")
end

-- Templates closest to an unmatched path: a matching segment counts 1, a
-- literal with a typo up to 0.9, each missing or extra segment -1.
local function nearest(compiled, segs)
  local scored = {}
  for _, r in ipairs(compiled.routes) do
    local score = -math.abs(#r.segs - #segs)
    for i, s in ipairs(r.segs) do
      local seg = segs[i]
      if seg then
        if s.text == seg or (s.pattern and seg:match(s.pattern)) then
          score = score + 1
        elseif not s.pattern then
          local longest = math.max(#seg, #s.text)
          score = score + 0.9 * math.max(0, 1 - util.edit_distance(seg, s.text) / longest)
        end
      end
    end
    if score > 1 then scored[#scored + 1] = { r = r, score = score } end
  end
  sort(scored, function(a, b)
    if a.score ~= b.score then return a.score > b.score end
    return a.r.template < b.r.template
  end)
  local out = {}
  for i = 1, math.min(3, #scored) do
    out[i] = format("%s (%s)", scored[i].r.template, route_methods(scored[i].r))
  end
  return out
end

-- Parameters of an operation: path-level then operation-level, the latter
-- winning; each gets a plain `schema` (Swagger 2 keeps type/format on the
-- parameter itself).
local PARAM_SCHEMA_KEYS = { "type", "format", "enum", "items", "minimum", "maximum",
  "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems" }

local function compile_op(spec, route, method)
  local raw = route.item[method]
  local op = {
    method = method:upper(), path = route.template, raw = raw, id = raw.operationId,
    summary = raw.summary, key = method:upper() .. " " .. route.template,
    query = {}, path_params = {}, headers = {}, form = {}, query_names = {},
  }
  local merged, order = {}, {}
  local function take(list)
    if type(list) ~= "table" then return end
    for _, p in ipairs(list) do
      local rp, _, err = resolve(spec, p)
      if not rp then fail("%s: parameter %s", op.key, err) end
      local k = tostring(rp["in"]) .. ":" .. tostring(rp.name)
      if not merged[k] then order[#order + 1] = k end
      merged[k] = rp
    end
  end
  take(route.item.parameters)
  take(raw.parameters)
  for _, k in ipairs(order) do
    local p = merged[k]
    local entry = { name = p.name, required = p.required == true, raw = p }
    if p.schema ~= nil and p["in"] ~= "body" then
      entry.schema = p.schema
    elseif p["in"] ~= "body" then
      local s = {}
      for _, key in ipairs(PARAM_SCHEMA_KEYS) do s[key] = p[key] end
      entry.schema = s
      entry.collection = p.collectionFormat or "csv"
    end
    local where = p["in"]
    if where == "query" then
      op.query[p.name] = entry
      op.query_names[#op.query_names + 1] = p.name
    elseif where == "path" then
      op.path_params[p.name] = entry
    elseif where == "header" then
      op.headers[p.name:lower()] = entry
    elseif where == "formData" then
      op.form[p.name] = entry
      op.has_form = true
    elseif where == "body" then
      op.body = { schema = p.schema, required = p.required == true }
    end
  end
  sort(op.query_names)
  if type(raw.requestBody) == "table" then
    local rb = resolve(spec, raw.requestBody) or raw.requestBody
    op.body = { content = rb.content, required = rb.required == true }
  end
  op.consumes = raw.consumes or spec.compiled.doc.consumes
  if op.body and type(op.body.content) == "table" then
    local types = {}
    for mt in pairs(op.body.content) do types[#types + 1] = mt end
    sort(types)
    op.consumes = types
  end
  return op
end

--- Finds the operation for a method and a concrete path.
-- Literal segments beat `{param}:verb` segments, which beat plain
-- `{param}` ones (so `/runs/x:archive` finds `/runs/{run_id}:archive`).
-- A query string, a trailing slash or a scheme://host prefix is ignored.
-- @param method string ("GET", "post", ...)
-- @param path string e.g. "/apis/v2beta1/runs/abc:archive"
-- @return op, params (path parameter values), or nil, message
function M.operation(self, method, path)
  if type(method) ~= "string" or type(path) ~= "string" then
    error("spec:operation(method, path): expected two strings", 2)
  end
  local m = method:lower()
  local segs, _, norm = split_path(path)
  local c = self.compiled
  local matches = {}
  for _, r in ipairs(c.by_len[#segs] or {}) do
    local params = match_route(r, segs)
    if params then matches[#matches + 1] = { r = r, params = params } end
  end
  sort(matches, function(a, b) return better(a.r, b.r) end)
  for _, hit in ipairs(matches) do
    local r = hit.r
    if type(r.item[m]) == "table" then
      local op = r.ops[m]
      if not op then
        op = compile_op(self, r, m)
        r.ops[m] = op
      end
      return op, hit.params
    end
  end
  if #matches > 0 then
    local parts = {}
    for i, hit in ipairs(matches) do
      parts[i] = format("%s allows %s", hit.r.template, route_methods(hit.r))
    end
    return nil, format("no %s operation for %s (%s)", method:upper(), norm, concat(parts, "; "))
  end
  local near = nearest(c, segs)
  if #near == 0 then return nil, format("no operation matches %s %s", method:upper(), norm) end
  return nil, format("no operation matches %s %s (nearest: %s)", method:upper(), norm, concat(near, "; "))
end

--- Every operation of the document, sorted by path then method.
-- @return list of { key = "GET /path/{x}", method = "GET", path = template }
function M.operations(self)
  local out = {}
  for _, r in ipairs(self.compiled.routes) do
    for _, name in ipairs(METHODS) do
      if type(r.item[name]) == "table" then
        out[#out + 1] = { key = name:upper() .. " " .. r.template, method = name:upper(), path = r.template }
      end
    end
  end
  return out
end

M.percent_decode = percent_decode
M.split_path = split_path

return M
