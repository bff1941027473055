--- kb.openapi.schema: kb.openapi's schema validation: a value checked
-- against a schema (types, formats, bounds, enums, objects and their
-- unknown properties, allOf/anyOf/oneOf), the per-call context of a check
-- and spec:validate.
local json = require "kb.json"
local V = require "kb.openapi.values"
local D = require "kb.openapi.document"

local M = {}

local format, concat, sort = string.format, table.concat, table.sort
local null = json.null
local quote, got, show, child, jtype = V.quote, V.got, V.show, V.child, V.jtype
local is_date_time, is_date, is_base64 = V.is_date_time, V.is_date, V.is_base64
local int64_string_ok, int_in_range = V.int64_string_ok, V.int_in_range
local resolve, lookup_pointer, schema_ref = D.resolve, D.lookup_pointer, D.schema_ref

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
function M.validate(self, schema, value, where, opts)
  schema = to_schema(self, schema, "spec:validate")
  local ctx = make_ctx(self, opts or {}, nil)
  check(ctx, schema, value, where or "value", false, 0)
  return #ctx.errors == 0, ctx.errors
end

M.add = add
M.check = check
M.make_ctx = make_ctx
M.to_schema = to_schema

return M
