--- kb.openapi: checks HTTP requests and responses against Swagger 2.0 and
-- OpenAPI 3 documents, so tests can prove that kbrun's clients send, and
-- its simulator answers, what the real APIs define.
--
--   local openapi = require "kb.openapi"
--   local kfp = openapi.kfp("v2beta1")
--   local ok, errs = kfp:validate_request{ method = "POST", path = "/apis/v2beta1/runs",
--                                          body = { display_name = "r1" } }
--   local ok, errs = kfp:validate_response{ method = "GET", path = "/apis/v2beta1/runs/x",
--                                           status = 200, body = run }
--
-- Errors are strings "<location>: <message>". Locations read like JSON
-- paths: `body.runs[0].state` (array indices count from 0, as in the JSON
-- text), `body.metadata.labels["app.kubernetes.io/name"]`, `query.page_size`,
-- `path.run_id`, `header.content-type`. See docs/openapi.md for every
-- message and option.
local fs = require "kb.fs"
local json = require "kb.json"
local util = require "kb.k8s.util"

local M = {}

local format, concat, sort = string.format, table.concat, table.sort
local null = json.null
local ARRAY_MT = getmetatable(json.array())
local OBJECT_MT = getmetatable(json.object({}))

-- Problems with a document or an assertion are kb error objects of class
-- "openapi"; misuse of the API raises plain messages.
local Error = { __name = "kb.error" }
Error.__index = Error
Error.__tostring = function(e) return e.class .. ": " .. e.message end

local function fail(fmt, ...)
  error(setmetatable({ class = "openapi", message = format(fmt, ...) }, Error), 0)
end

------------------------------------------------------------------------
-- Values
------------------------------------------------------------------------

-- Lua cannot tell an empty JSON array from an empty object, so an empty
-- plain table is "empty" and fits both; a sequence without the kb.array
-- mark is an array (bodies built in Lua rather than decoded).
local function jtype(v)
  local t = type(v)
  if t == "string" or t == "boolean" then return t end
  if t == "number" then
    if math.type(v) == "integer" or (v == math.floor(v) and v - v == 0) then return "integer" end
    return "number"
  end
  if v == null then return "null" end
  if t == "table" then
    local mt = getmetatable(v)
    if mt == ARRAY_MT then return "array" end
    if mt == OBJECT_MT then return "object" end
    if next(v) == nil then return "empty" end
    local n, count = #v, 0
    if n == 0 then return "object" end
    for _ in pairs(v) do count = count + 1 end
    return count == n and "array" or "object"
  end
  if t == "nil" then return "nothing" end
  return "Lua " .. t
end

-- The JSON name of a value's type, as error messages print it.
local GOT = { integer = "number", empty = "object" }
local function got(jt) return GOT[jt] or jt end

local function quote(s)
  if #s > 60 then s = s:sub(1, 57) .. "..." end
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return format("\\u%04x", c:byte())
  end) .. '"'
end

local function show(v)
  if type(v) == "string" then return quote(v) end
  if math.type(v) == "float" and v == math.floor(v) and v - v == 0 and math.abs(v) < 2^63 then
    return format("%d", v)
  end
  if v == null then return "null" end
  return tostring(v)
end

local function child(where, key)
  if type(key) == "string" and key:match("^[%a_][%w_]*$") then return where .. "." .. key end
  if type(key) == "string" then return where .. "[" .. quote(key) .. "]" end
  return where .. "[" .. tostring(key) .. "]"
end

------------------------------------------------------------------------
-- Formats
------------------------------------------------------------------------

local DAYS = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 }

local function valid_date(y, m, d)
  y, m, d = tonumber(y), tonumber(m), tonumber(d)
  if m < 1 or m > 12 or d < 1 or d > DAYS[m] then return false end
  if m == 2 and d == 29 then return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) end
  return true
end

-- RFC 3339 section 5.6 (the `T` and `Z` may be lower case).
local function is_date_time(s)
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)[Tt](%d%d):(%d%d):(%d%d)(.*)$")
  if not y or not valid_date(y, mo, d) then return false end
  if tonumber(h) > 23 or tonumber(mi) > 59 or tonumber(sec) > 60 then return false end
  rest = rest:gsub("^%.%d+", "", 1)
  if rest == "Z" or rest == "z" then return true end
  local oh, om = rest:match("^[+-](%d%d):(%d%d)$")
  return oh ~= nil and tonumber(oh) <= 23 and tonumber(om) <= 59
end

local function is_date(s)
  local y, m, d = s:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)$")
  return y ~= nil and valid_date(y, m, d)
end

-- Standard or URL-safe alphabet, padded or not (proto3 JSON accepts all).
local function is_base64(s)
  local body, pad = s:match("^([%w+/_%-]*)(=*)$")
  if not body or #pad > 2 then return false end
  if #pad > 0 then return (#body + #pad) % 4 == 0 end
  return #body % 4 ~= 1
end

local UINT64_MAX = "18446744073709551615"

-- Decimal strings for 64-bit integers (proto3 JSON writes int64 as strings).
local function int64_string_ok(s, fmt)
  if fmt == "uint64" then
    if not s:match("^%d+$") then return nil end
    local digits = s:gsub("^0+(%d)", "%1")
    return #digits < 20 or (#digits == 20 and digits <= UINT64_MAX)
  end
  if not s:match("^[+-]?%d+$") then return nil end
  return math.tointeger(tonumber(s)) ~= nil
end

local INT_RANGE = {
  int32 = { -2147483648, 2147483647 },
  uint32 = { 0, 4294967295 },
  int64 = { math.mininteger, math.maxinteger },
  uint64 = { 0, 18446744073709551615.0 },
}

local function int_in_range(v, fmt)
  local r = INT_RANGE[fmt]
  if not r then return true end
  if math.type(v) == "float" and fmt == "int64" then return v >= -2^63 and v < 2^63 end
  return v >= r[1] and v <= r[2]
end

------------------------------------------------------------------------
-- Documents and $ref
------------------------------------------------------------------------

local docs = {}        -- abspath -> compiled document (shared by its Specs)
local table_docs = setmetatable({}, { __mode = "k" })

local function unescape_pointer(token)
  token = token:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  return (token:gsub("~1", "/"):gsub("~0", "~"))
end

local function lookup_pointer(doc, ref)
  local node = doc
  for token in ref:sub(3):gmatch("[^/]+") do
    if type(node) ~= "table" then return nil end
    node = node[unescape_pointer(token)]
  end
  return node
end

local Spec = {}
Spec.__index = Spec

local MISSING = {}     -- cached result of a $ref that points nowhere

-- Follows a chain of $ref to a schema; returns schema, name of the last
-- definition it went through, or nil, nil, message.
local function resolve(spec, schema)
  local name, seen
  while type(schema) == "table" do
    local ref = schema["$ref"]
    if type(ref) ~= "string" then break end
    seen = seen or {}
    if seen[ref] then return nil, nil, "$ref cycle at " .. quote(ref) end
    seen[ref] = true
    local target = spec.overrides[ref]
    if target == nil then
      local c = spec.compiled
      target = c.refs[ref]
      if target == nil then
        if ref:sub(1, 2) ~= "#/" then return nil, nil, "unsupported $ref " .. quote(ref) .. " (only local refs)" end
        target = lookup_pointer(c.doc, ref)
        if type(target) ~= "table" and type(target) ~= "boolean" then target = MISSING end
        c.refs[ref] = target
      end
      if target == MISSING then return nil, nil, "unresolvable $ref " .. quote(ref) end
    end
    name = ref:match("([^/]+)$")
    schema = target
  end
  return schema, name
end

local function compile_routes(doc)
  local base = ""
  if doc.swagger and type(doc.basePath) == "string" and doc.basePath ~= "/" then
    base = doc.basePath:gsub("/$", "")
  end
  local routes, by_len = {}, {}
  for template, item in pairs(doc.paths or {}) do
    local full = base .. template
    local norm = full:gsub("/+$", "")
    if norm == "" then norm = "/" end
    local segs, score, params = {}, {}, {}
    for seg in norm:gmatch("[^/]+") do
      local s = { text = seg }
      if seg:find("{", 1, true) then
        local names, pat, pos, lits = {}, { "^" }, 1, 0
        while true do
          local a, b, name = seg:find("{([^}]+)}", pos)
          local lit = seg:sub(pos, (a or 0) - 1)
          if a == nil then lit = seg:sub(pos) end
          lits = lits + #lit
          pat[#pat + 1] = lit:gsub("%W", "%%%0")
          if a == nil then break end
          pat[#pat + 1] = "(.+)"
          names[#names + 1] = name
          params[#params + 1] = name
          pos = b + 1
        end
        pat[#pat + 1] = "$"
        s.pattern, s.names = concat(pat), names
        score[#score + 1] = lits > 0 and 2 or 1
        s.lits = lits
      else
        score[#score + 1] = 3
        s.lits = #seg
      end
      segs[#segs + 1] = s
    end
    local route = { template = full, segs = segs, score = score, item = item, ops = {}, params = params }
    routes[#routes + 1] = route
    local list = by_len[#segs] or {}
    by_len[#segs] = list
    list[#list + 1] = route
  end
  sort(routes, function(a, b) return a.template < b.template end)
  return routes, by_len
end

local function compile(doc, where)
  if type(doc) ~= "table" then fail("%s is not a JSON/YAML object", where) end
  local version
  if doc.swagger == "2.0" then
    version = 2
  elseif type(doc.openapi) == "string" and doc.openapi:match("^3%.") then
    version = 3
  else
    fail('%s is neither Swagger 2.0 nor OpenAPI 3 (no "swagger": "2.0" or "openapi": "3.x")', where)
  end
  local routes, by_len = compile_routes(doc)
  return { doc = doc, version = version, routes = routes, by_len = by_len, refs = {},
           known = setmetatable({}, { __mode = "k" }), source = where }
end

local function read_doc(path)
  local ok, text = pcall(fs.read, path)
  if not ok then fail("cannot read %s: %s", path, tostring(text)) end
  local decode = json.decode
  if path:match("%.ya?ml$") then decode = require("kb.yaml").decode end
  local okd, doc = pcall(decode, text)
  if not okd then fail("%s: %s", path, tostring(doc)) end
  return doc
end

local OPTION_NAMES = {
  strict = true, strict_request = true, strict_response = true, int64 = true,
  allow_null = true, unknown_query = true, error_schema = true,
}

local function check_options(opts, who)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(who .. ": options must be a table", 3) end
  for k in pairs(opts) do
    if not OPTION_NAMES[k] then error(format("%s: unknown option %s", who, tostring(k)), 3) end
  end
  if opts.int64 ~= nil and opts.int64 ~= "lenient" and opts.int64 ~= "strict" then
    error(who .. ': option int64 must be "lenient" or "strict"', 3)
  end
  if opts.unknown_query ~= nil and opts.unknown_query ~= "error" and opts.unknown_query ~= "ignore" then
    error(who .. ': option unknown_query must be "error" or "ignore"', 3)
  end
  local copy = {}
  for k, v in pairs(opts) do copy[k] = v end
  return copy
end

--- Loads a Swagger 2.0 or OpenAPI 3 document.
-- A path is read once (JSON, or YAML when it ends in .yaml/.yml) and its
-- decoded document and compiled path table are cached for the process;
-- every call returns a new spec object with its own options and overrides.
-- @param src string path, or an already decoded document table
-- @param opts table|nil: strict (bool: unknown properties are errors in
--   requests and responses), strict_request, strict_response (the same for
--   one direction), int64 ("lenient": int64-as-string fields also accept
--   JSON numbers; "strict": they must be strings; default lenient for
--   requests, strict for responses), allow_null (bool: JSON null fits any
--   schema), unknown_query ("error" or "ignore"), error_schema (schema or
--   $ref used for an undocumented status >= 400)
-- @return spec
function M.load(src, opts)
  opts = check_options(opts, "kb.openapi.load")
  local compiled
  if type(src) == "string" then
    local key = fs.abspath(src)
    compiled = docs[key]
    if not compiled then
      compiled = compile(read_doc(key), key)
      docs[key] = compiled
    end
  elseif type(src) == "table" then
    compiled = table_docs[src]
    if not compiled then
      compiled = compile(src, "document")
      table_docs[src] = compiled
    end
  else
    error("kb.openapi.load: expected a path or a document table, got " .. type(src), 2)
  end
  return setmetatable({ compiled = compiled, opts = opts, overrides = {}, responses = {},
                        version = compiled.version, source = compiled.source }, Spec)
end

local function schema_ref(spec, name)
  if spec.version == 2 then return "#/definitions/" .. name end
  return "#/components/schemas/" .. name
end

--- Replaces a named definition (Swagger `#/definitions/NAME`, OpenAPI 3
-- `#/components/schemas/NAME`) for this spec object only: the way to
-- record a server fact the document gets wrong.
-- @param name string definition name
-- @param schema table the schema to use instead
function Spec:set_definition(name, schema)
  if type(name) ~= "string" or type(schema) ~= "table" then
    error("spec:set_definition(name, schema): expected a string and a table", 2)
  end
  self.overrides[schema_ref(self, name)] = schema
end

--- Replaces (or adds) the response schema of one operation and status for
-- this spec object only.
-- @param method string, e.g. "POST"
-- @param template string the path template as in the document
-- @param status string|integer "200", 404 or "default"
-- @param schema table|false the body schema; false = body not checked
function Spec:set_response(method, template, status, schema)
  if type(method) ~= "string" or type(template) ~= "string" or status == nil
     or (type(schema) ~= "table" and schema ~= false) then
    error("spec:set_response(method, template, status, schema): expected two strings, a status and a table or false", 2)
  end
  local key = method:upper() .. " " .. template
  local t = self.responses[key] or {}
  self.responses[key] = t
  t[tostring(status)] = schema
end

------------------------------------------------------------------------
-- Schema validation
------------------------------------------------------------------------

local function add(ctx, where, msg)
  local errs = ctx.errors
  errs[#errs + 1] = where .. ": " .. msg
end

local function is_any_schema(s, name)
  if name == "protobufAny" or name == "google.protobuf.Any" or name == "googleprotobufAny" then
    return true
  end
  return type(s.properties) == "table" and s.properties["@type"] ~= nil
end

-- The properties an object may carry, over the schema and its allOf
-- members: { props = set, free = no closed property list, closed =
-- additionalProperties false somewhere, name = first definition name }.
local function known_info(spec, s, name)
  local cache = spec.compiled.known
  local info = cache[s]
  if info then return info end
  info = { props = {}, free = true, closed = false, name = name }
  local has_props, open = false, false
  local visited = {}
  local function walk(node, nname)
    if visited[node] then return end
    visited[node] = true
    info.name = info.name or nname
    if type(node.properties) == "table" then
      has_props = true
      for k in pairs(node.properties) do info.props[k] = true end
    end
    local ap = node.additionalProperties
    if ap == false then info.closed = true
    elseif ap ~= nil then open = true end
    if node["x-kubernetes-preserve-unknown-fields"] == true then open = true end
    if type(node.allOf) == "table" then
      for _, m in ipairs(node.allOf) do
        local r, rname = resolve(spec, m)
        if type(r) == "table" then walk(r, rname) end
      end
    end
  end
  walk(s, name)
  info.free = open or (not has_props and not info.closed)
  cache[s] = info
  return info
end

local TYPE_OK = {
  string = { string = true },
  integer = { integer = true },
  number = { integer = true, number = true },
  boolean = { boolean = true },
  object = { object = true, empty = true },
  array = { array = true, empty = true },
  null = { null = true },
}

local function enum_text(list)
  local parts = {}
  local n = #list
  for i = 1, math.min(n, 20) do parts[i] = type(list[i]) == "string" and list[i] or show(list[i]) end
  if n > 20 then parts[#parts + 1] = format("... (%d more)", n - 20) end
  return concat(parts, ", ")
end

local check

local function check_string_format(ctx, s, value, where)
  local fmt = s.format
  if fmt == "int64" or fmt == "uint64" then
    local ok = int64_string_ok(value, fmt)
    if ok == nil then
      add(ctx, where, format("expected a decimal %s string, got %s", fmt, quote(value)))
    elseif not ok then
      add(ctx, where, format("%s is out of range for %s", quote(value), fmt))
    end
  elseif fmt == "int32" or fmt == "uint32" then
    local n = value:match("^[+-]?%d+$") and math.tointeger(tonumber(value))
    if not n then
      add(ctx, where, format("expected a decimal %s string, got %s", fmt, quote(value)))
    elseif not int_in_range(n, fmt) then
      add(ctx, where, format("%s is out of range for %s", quote(value), fmt))
    end
  elseif fmt == "date-time" then
    if not is_date_time(value) then add(ctx, where, quote(value) .. " is not an RFC 3339 date-time") end
  elseif fmt == "date" then
    if not is_date(value) then add(ctx, where, quote(value) .. " is not an RFC 3339 full-date") end
  elseif fmt == "byte" then
    if not is_base64(value) then add(ctx, where, quote(value) .. " is not valid base64") end
  end
end

local function check_bounds(ctx, s, value, jt, where)
  if jt == "integer" or jt == "number" then
    local lo, hi = s.minimum, s.maximum
    if type(lo) == "number" then
      if value < lo or (s.exclusiveMinimum == true and value == lo) then
        add(ctx, where, format("%s is below the minimum %s", show(value), show(lo)))
      end
    end
    if type(s.exclusiveMinimum) == "number" and value <= s.exclusiveMinimum then
      add(ctx, where, format("%s is not above the exclusive minimum %s", show(value), show(s.exclusiveMinimum)))
    end
    if type(hi) == "number" then
      if value > hi or (s.exclusiveMaximum == true and value == hi) then
        add(ctx, where, format("%s is above the maximum %s", show(value), show(hi)))
      end
    end
    if type(s.exclusiveMaximum) == "number" and value >= s.exclusiveMaximum then
      add(ctx, where, format("%s is not below the exclusive maximum %s", show(value), show(s.exclusiveMaximum)))
    end
  elseif jt == "string" then
    local len = utf8.len(value) or #value
    if type(s.minLength) == "number" and len < s.minLength then
      add(ctx, where, format("length %d is below minLength %d", len, s.minLength))
    end
    if type(s.maxLength) == "number" and len > s.maxLength then
      add(ctx, where, format("length %d is above maxLength %d", len, s.maxLength))
    end
  elseif jt == "array" or jt == "empty" then
    local n = #value
    if type(s.minItems) == "number" and n < s.minItems then
      add(ctx, where, format("%d items, below minItems %d", n, s.minItems))
    end
    if type(s.maxItems) == "number" and n > s.maxItems then
      add(ctx, where, format("%d items, above maxItems %d", n, s.maxItems))
    end
  end
end

-- Checks the value against `type` (and numeric formats); false when the
-- type is wrong (then nothing else is checked).
local function check_type(ctx, s, value, jt, where)
  local t = s.type
  local fmt = s.format
  if t == "string" and (fmt == "int64" or fmt == "uint64") and (jt == "integer" or jt == "number") then
    -- proto3 JSON writes 64-bit integers as strings but parsers take numbers.
    if ctx.int64 == "strict" then
      add(ctx, where, format("expected %s as a JSON string, got number", fmt))
    elseif jt == "number" or not int_in_range(value, fmt) then
      add(ctx, where, format("%s is out of range for %s", show(value), fmt))
    end
    return false
  end
  local ok
  if type(t) == "table" then
    ok = false
    for _, one in ipairs(t) do
      if TYPE_OK[one] and TYPE_OK[one][jt] then ok = true break end
    end
    t = concat(t, " or ")
  else
    ok = TYPE_OK[t] == nil or TYPE_OK[t][jt]
  end
  if not ok then
    if jt == "number" and (t == "integer" or t:find("integer", 1, true)) then
      add(ctx, where, format("expected %s, got number %s", t, show(value)))
    else
      add(ctx, where, format("expected %s, got %s", t, got(jt)))
    end
    return false
  end
  if t == "integer" and fmt and not int_in_range(value, fmt) then
    add(ctx, where, format("%s is out of range for %s", show(value), fmt))
  end
  if jt == "string" and fmt then check_string_format(ctx, s, value, where) end
  return true
end

local function simple_type_names(spec, alts)
  local names = {}
  for i, a in ipairs(alts) do
    local r = resolve(spec, a)
    if type(r) ~= "table" or type(r.type) ~= "string" then return nil end
    for k in pairs(r) do
      if k ~= "type" and k ~= "description" and k ~= "format" then return nil end
    end
    names[i] = r.type
  end
  return names
end

local function check_alternatives(ctx, s, value, where, key, depth)
  local alts = s[key]
  local saved = ctx.errors
  local matches, firsts = 0, {}
  for i, a in ipairs(alts) do
    ctx.errors = {}
    check(ctx, a, value, where, false, depth)
    if #ctx.errors == 0 then matches = matches + 1 else firsts[i] = ctx.errors[1] end
  end
  ctx.errors = saved
  if matches == 0 then
    local names = simple_type_names(ctx.spec, alts)
    if names then
      add(ctx, where, format("expected %s, got %s", concat(names, " or "), got(jtype(value))))
    else
      local parts = {}
      for i = 1, #alts do parts[i] = format("(%d) %s", i, firsts[i]) end
      add(ctx, where, format("matches no alternative of %s: %s", key, concat(parts, "; ")))
    end
  elseif key == "oneOf" and matches > 1 then
    add(ctx, where, format("matches %d alternatives of oneOf, expected exactly one", matches))
  end
end

local function check_object(ctx, s, name, value, where, open, depth)
  local props, ap = s.properties, s.additionalProperties
  if type(s.required) == "table" then
    for _, r in ipairs(s.required) do
      if value[r] == nil then add(ctx, child(where, r), "missing required property") end
    end
  end
  local keys = {}
  for k in pairs(value) do
    if type(k) ~= "string" then
      add(ctx, where, format("key %s is not a string", show(k)))
    else
      keys[#keys + 1] = k
    end
  end
  sort(keys)  -- a stable order of messages
  local info = not open and known_info(ctx.spec, s, name)
  local flag = info and not info.free and (ctx.strict or info.closed)
  for _, k in ipairs(keys) do
    local v = value[k]
    local ps = type(props) == "table" and props[k]
    if ps ~= nil and ps ~= false then
      check(ctx, ps, v, child(where, k), false, depth)
    elseif type(ap) == "table" then
      check(ctx, ap, v, child(where, k), false, depth)
    elseif flag and not info.props[k] then
      add(ctx, child(where, k), info.name and ("unknown property of " .. info.name) or "unknown property")
    end
  end
end

local MAX_DEPTH = 256

-- Validates `value` against `schema` at `where`, appending to ctx.errors.
-- `open`: an enclosing allOf checks unknown properties over all members.
check = function(ctx, schema, value, where, open, depth)
  depth = (depth or 0) + 1
  if depth > MAX_DEPTH then
    return add(ctx, where, format("nested deeper than %d levels", MAX_DEPTH))
  end
  local s, name, err = resolve(ctx.spec, schema)
  if s == nil then return add(ctx, where, err) end
  if s == false then return add(ctx, where, "no value is allowed here") end
  if type(s) ~= "table" then return end
  local active = ctx.active
  if active[s] == where then return add(ctx, where, "schema cycle" .. (name and (" at " .. name) or "")) end
  local prev = active[s]
  active[s] = where
  local jt = jtype(value)
  if jt == "null" then
    if s.nullable == true or s["x-nullable"] == true or ctx.allow_null
       or (s.type == nil and s.allOf == nil and s.oneOf == nil and s.anyOf == nil and s.enum == nil) then
      active[s] = prev
      return
    end
  end
  if (s["x-kubernetes-int-or-string"] == true or s.format == "int-or-string") then
    if jt ~= "integer" and jt ~= "string" then
      add(ctx, where, format("expected integer or string, got %s", got(jt)))
    end
    active[s] = prev
    return
  end
  if (jt == "object") and value["@type"] ~= nil and is_any_schema(s, name) then
    -- protobuf Any: "@type" names the message, the rest is that message.
    if type(value["@type"]) ~= "string" then
      add(ctx, child(where, "@type"), "expected string, got " .. got(jtype(value["@type"])))
    end
    active[s] = prev
    return
  end
  local type_ok = true
  if s.type ~= nil then type_ok = check_type(ctx, s, value, jt, where) end
  if type_ok then
    if type(s.enum) == "table" then
      local hit = false
      for _, e in ipairs(s.enum) do
        if e == value then hit = true break end
      end
      if not hit then add(ctx, where, format("expected one of %s, got %s", enum_text(s.enum), show(value))) end
    end
    check_bounds(ctx, s, value, jt, where)
    if jt == "object" or jt == "empty" then
      if s.properties ~= nil or s.required ~= nil or s.additionalProperties ~= nil or s.allOf ~= nil then
        check_object(ctx, s, name, value, where, open, depth)
      end
    elseif jt == "array" and s.items ~= nil then
      for i = 1, #value do
        check(ctx, s.items, value[i], where .. "[" .. (i - 1) .. "]", false, depth)
      end
    end
    if type(s.allOf) == "table" then
      for _, m in ipairs(s.allOf) do check(ctx, m, value, where, true, depth) end
    end
    if type(s.anyOf) == "table" then check_alternatives(ctx, s, value, where, "anyOf", depth) end
    if type(s.oneOf) == "table" then check_alternatives(ctx, s, value, where, "oneOf", depth) end
  end
  active[s] = prev
end

local function make_ctx(spec, call, direction)
  local o = spec.opts
  local strict = direction and call["strict_" .. direction]
  if strict == nil then strict = call.strict end
  if strict == nil and direction then strict = o["strict_" .. direction] end
  if strict == nil then strict = o.strict end
  local allow_null = call.allow_null
  if allow_null == nil then allow_null = o.allow_null end
  return {
    spec = spec, errors = {}, active = {},
    strict = strict == true,
    allow_null = allow_null == true,
    int64 = call.int64 or o.int64 or (direction == "response" and "strict" or "lenient"),
    unknown_query = call.unknown_query or o.unknown_query or "error",
  }
end

local function to_schema(spec, s, who)
  if type(s) == "table" or type(s) == "boolean" then return s end
  if type(s) ~= "string" then error(who .. ": schema must be a table, a $ref or a definition name", 3) end
  local ref = s:sub(1, 1) == "#" and s or schema_ref(spec, s)
  if spec.overrides[ref] == nil and type(lookup_pointer(spec.compiled.doc, ref)) ~= "table" then
    error(who .. ": unresolvable $ref " .. quote(ref), 3)
  end
  return { ["$ref"] = ref }
end

--- Validates any value against a schema.
-- @param schema table, "#/..." $ref, or a definition name ("v2beta1Run")
-- @param value the decoded value (a JSON string is not decoded here)
-- @param where string location prefix of messages (default "value")
-- @param opts table|nil per-call options (strict, int64, allow_null)
-- @return ok, errors (list of strings, empty when ok)
function Spec:validate(schema, value, where, opts)
  schema = to_schema(self, schema, "spec:validate")
  local ctx = make_ctx(self, opts or {}, nil)
  check(ctx, schema, value, where or "value", false, 0)
  return #ctx.errors == 0, ctx.errors
end

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
function Spec:operation(method, path)
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
function Spec:operations()
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
function Spec:validate_request(req)
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
function Spec:validate_response(res)
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

------------------------------------------------------------------------
-- Shared specs
------------------------------------------------------------------------

--- The folder of the API specs kbrun carries (`specs/` of the source tree,
-- installed as share/kbrun/specs): $KBRUN_SPECS_DIR, else
-- $KBRUN_SOURCE_DIR/specs, else ../../../specs from this file
-- (lua/kb/openapi/init.lua: the source tree and the installed layout both
-- put it there). Raises a kb "openapi" error
-- naming every place it looked.
function M.specs_dir()
  local tried = {}
  local env = os.getenv("KBRUN_SPECS_DIR")
  if env and env ~= "" then
    if fs.exists(env) then return env end
    fail("KBRUN_SPECS_DIR=%s does not exist", env)
  end
  local src = os.getenv("KBRUN_SOURCE_DIR")
  if src and src ~= "" then
    local p = fs.join(src, "specs")
    if fs.exists(p) then return p end
    tried[#tried + 1] = p
  end
  local here = package.searchpath("kb.openapi", package.path)
  if here then
    local p = fs.join(fs.dirname(fs.abspath(here)), "..", "..", "..", "specs")
    if fs.exists(p) then return p end
    tried[#tried + 1] = p
  end
  fail("API specs not found (set KBRUN_SPECS_DIR, or KBRUN_SOURCE_DIR to a kbrun checkout); looked in: %s",
    #tried > 0 and concat(tried, ", ") or "nowhere")
end

local function spec_file(...)
  local p = fs.join(M.specs_dir(), ...)
  if not fs.exists(p) then fail("spec file %s is missing", p) end
  return p
end

-- The helpers' defaults under the caller's options; a caller's `strict`
-- also replaces the default of strict_request.
local function with_defaults(opts, defaults)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  opts = opts or {}
  if opts.strict ~= nil then o.strict_request = nil end
  for k, v in pairs(opts) do o[k] = v end
  return o
end

local function str(desc) return { type = "string", description = desc } end

--- KFP's API (v2beta1 or v1beta1) from kfp_api_single_file.swagger.json,
-- with the server facts the swagger lacks: request bodies are strict (the
-- server rejects unknown fields), healthz carries commit_sha and tag_name,
-- the upload endpoints answer errors as {error_message, error_details}.
-- @param version "v2beta1" (default) or "v1beta1"
-- @param opts table|nil options for load (override the defaults)
function M.kfp(version, opts)
  version = version or "v2beta1"
  if version ~= "v2beta1" and version ~= "v1beta1" then
    error('kb.openapi.kfp: version must be "v2beta1" or "v1beta1", got ' .. tostring(version), 2)
  end
  local spec = M.load(spec_file("kfp", version, "kfp_api_single_file.swagger.json"),
    with_defaults(opts, { strict_request = true }))
  local prefix = "/apis/" .. version
  local healthz = { type = "object", properties = {
    commit_sha = str("server build commit"), tag_name = str("server release tag"),
    multi_user = { type = "boolean" },
  } }
  if version == "v2beta1" then healthz.properties.pipeline_store = str("database or kubernetes") end
  spec:set_response("GET", prefix .. "/healthz", 200, healthz)
  local upload_error = { type = "object", properties = {
    error_message = str("what failed"), error_details = str("the cause") } }
  for _, p in ipairs({ "/pipelines/upload", "/pipelines/upload_version" }) do
    spec:set_response("POST", prefix .. p, "default", upload_error)
  end
  return spec
end

local function k8s_facts(spec, opts_error_schema)
  -- Quantities are written as strings but numbers decode too; a patch body
  -- may be a JSON patch (an array).
  spec:set_definition("io.k8s.apimachinery.pkg.api.resource.Quantity",
    { oneOf = { { type = "string" }, { type = "number" } } })
  spec:set_definition("io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    { type = "string", format = "int-or-string" })
  spec:set_definition("io.k8s.apimachinery.pkg.apis.meta.v1.Patch", {})
  if opts_error_schema == nil then
    spec.opts.error_schema = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
  end
  return spec
end

--- The Argo Server API (specs/argo/swagger.json). IntOrString and
-- Quantity take what Kubernetes takes; request bodies are strict.
function M.argo(opts)
  local spec = M.load(spec_file("argo", "swagger.json"), with_defaults(opts, { strict_request = true }))
  spec:set_definition("io.k8s.apimachinery.pkg.api.resource.Quantity",
    { oneOf = { { type = "string" }, { type = "number" } } })
  spec:set_definition("io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    { type = "string", format = "int-or-string" })
  return spec
end

--- The Kubernetes API (OpenAPI v2): the 1.32 subset by default,
-- `{ full = true }` for the whole 1.32 swagger. JSON null is accepted
-- (the server writes `creationTimestamp: null`), undocumented error
-- statuses are checked against meta/v1 Status, request bodies are strict.
function M.k8s(opts)
  opts = opts or {}
  local file = opts.full and "swagger-v1.32.json" or "k8s-subset-v1.32-swagger.json"
  local o = {}
  for k, v in pairs(opts) do if k ~= "full" then o[k] = v end end
  local spec = M.load(spec_file("k8s", file), with_defaults(o, { strict_request = true, allow_null = true }))
  return k8s_facts(spec, o.error_schema)
end

--- One Kubernetes OpenAPI v3 group document from the fixtures:
-- group "api/v1" or "apis/batch/v1".
function M.k8s_v3(group, opts)
  local name = (group or "api/v1"):gsub("/", "__") .. "_openapi.json"
  local spec = M.load(spec_file("k8s", "openapi-v3-fixture", name),
    with_defaults(opts, { strict_request = true, allow_null = true }))
  return k8s_facts(spec, (opts or {}).error_schema)
end

------------------------------------------------------------------------
-- Recorder
------------------------------------------------------------------------

local Recorder = {}
Recorder.__index = Recorder

--- A recorder checks request/response pairs against one spec, keeps every
-- violation and counts the operations it saw.
-- @param spec a spec from load/kfp/argo/k8s
-- @param opts table|nil per-call options passed to every check
function M.recorder(spec, opts)
  if getmetatable(spec) ~= Spec then error("kb.openapi.recorder: expected a spec", 2) end
  return setmetatable({ spec = spec, opts = opts or {}, seen = {}, list = {}, checks = 0 }, Recorder)
end

local function with_opts(t, opts)
  local c = {}
  for k, v in pairs(opts) do c[k] = v end
  for k, v in pairs(t) do c[k] = v end
  return c
end

--- Checks one exchange. Either part may be nil; the response takes method
-- and path from the request when it has none.
-- @param request table as for validate_request
-- @param response table|nil { status =, body = }
-- @return ok, errors (this exchange only, with "METHOD path" prefixes)
function Recorder:check(request, response)
  local errs, op = {}, nil
  self.checks = self.checks + 1
  if request then
    local label = request.method:upper() .. " " .. request.path
    local _, e, o = self.spec:validate_request(with_opts(request, self.opts))
    op = o
    for _, m in ipairs(e) do errs[#errs + 1] = label .. " request: " .. m end
  end
  -- An unknown operation is reported once, by the request.
  if response and (op or not request) then
    local r = with_opts(response, self.opts)
    r.method = r.method or (request and request.method)
    r.path = r.path or (request and request.path)
    if type(r.method) ~= "string" or type(r.path) ~= "string" then
      error("recorder:check: the response needs method and path when there is no request", 2)
    end
    local label = r.method:upper() .. " " .. r.path
    local _, e, o = self.spec:validate_response(r)
    op = op or o
    for _, m in ipairs(e) do errs[#errs + 1] = label .. " response " .. tostring(r.status) .. ": " .. m end
  end
  if op then self.seen[op.key] = (self.seen[op.key] or 0) + 1 end
  for _, m in ipairs(errs) do self.list[#self.list + 1] = m end
  return #errs == 0, errs
end

--- Every violation recorded so far (a copy).
function Recorder:violations()
  return table.move(self.list, 1, #self.list, 1, {})
end

--- Raises a kb "openapi" error listing every violation, if there is any.
function Recorder:assert_clean()
  local n = #self.list
  if n == 0 then return true end
  fail("%d API violation%s in %d checked exchange%s:\n  %s", n, n == 1 and "" or "s",
    self.checks, self.checks == 1 and "" or "s", concat(self.list, "\n  "))
end

local function selector(filter)
  if filter == nil then return function() return true end end
  if type(filter) == "function" then return filter end
  if type(filter) == "string" then
    return function(key, op) return op.path:sub(1, #filter) == filter end
  end
  if type(filter) == "table" then
    local set = {}
    for _, k in ipairs(filter) do set[k] = true end
    return function(key) return set[key] == true end
  end
  error("coverage filter must be nil, a path prefix, a list of \"METHOD /path\" keys or a function", 3)
end

--- Which operations were seen. `filter` limits the list: a path prefix
-- ("/apis/v2beta1/runs"), a list of keys ("GET /apis/v2beta1/runs/{run_id}")
-- or a function(key, op) -> bool.
-- @return { seen = {keys}, not_seen = {keys}, calls = {key = count} }
function Recorder:coverage(filter)
  local keep = selector(filter)
  local seen, not_seen, calls = {}, {}, {}
  local known = {}
  for _, op in ipairs(self.spec:operations()) do
    known[op.key] = true
    if keep(op.key, op) then
      if self.seen[op.key] then
        seen[#seen + 1] = op.key
        calls[op.key] = self.seen[op.key]
      else
        not_seen[#not_seen + 1] = op.key
      end
    end
  end
  if type(filter) == "table" then
    for _, k in ipairs(filter) do
      if not known[k] then fail("coverage: %s is not an operation of %s", k, self.spec.source) end
    end
  end
  return { seen = seen, not_seen = not_seen, calls = calls }
end

--- Raises a kb "openapi" error naming every selected operation that was
-- never checked (filter as for coverage).
function Recorder:assert_covered(filter)
  local cov = self:coverage(filter)
  if #cov.not_seen == 0 then return cov end
  fail("%d operation%s never checked:\n  %s", #cov.not_seen, #cov.not_seen == 1 and "" or "s",
    concat(cov.not_seen, "\n  "))
end

M.Spec = Spec
return M
