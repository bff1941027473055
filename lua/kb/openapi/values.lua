--- kb.openapi.values: what kb.openapi's checks say about a JSON value:
-- its JSON type (an empty Lua table fits both array and object), how a
-- value and a location are printed in messages, the string formats
-- (date-time, date, byte, int64 as a string) and integer ranges; and the
-- "openapi" error class.
local json = require "kb.json"

local M = {}

local format = string.format
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

M.fail = fail
M.quote = quote
M.got = got
M.show = show
M.child = child
M.jtype = jtype
M.is_date_time = is_date_time
M.is_date = is_date
M.is_base64 = is_base64
M.int64_string_ok = int64_string_ok
M.int_in_range = int_in_range
M.INT_RANGE = INT_RANGE

return M
