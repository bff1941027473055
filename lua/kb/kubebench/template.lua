--- kb.kubebench.template: turns a template and a params table into the main
-- job's manifest (what Kubebench's configurator did with ksonnet).
--
--   local template = require "kb.kubebench.template"
--   local manifest = template.render(tmpl, params, ctx)
--
-- A template is either
--   * a Lua function(params, ctx) returning the manifest (a table, or YAML
--     text), ctx = {id =, namespace =, name =}; or
--   * a manifest (a table, or YAML text) with ${param} placeholders.
-- Placeholders are resolved on the decoded tree, never on the text, so a
-- value can never break the YAML:
--   * a string that is exactly "${key}" becomes the param's value with its
--     type (a number, a list, a mapping); when that value is null the map
--     entry or list item is dropped, as Kubebench skipped null params;
--   * "${key}" inside longer text is replaced by the value's text (a number
--     as written, null as ""); a list or mapping there is an error;
--   * "$${key}" is the literal text "${key}";
--   * "${a.b}" reads a nested param.
-- An unknown key is an error naming where it is used and the known keys.
local json = require "kb.json"
local yaml = require "kb.yaml"

local M = {}

local format = string.format
local null = json.null
local ARRAY_MT = getmetatable(json.array())

local Error = { __name = "kb.error" }
Error.__index = Error
Error.__tostring = function(e) return e.class .. ": " .. e.message end

--- Raises a kb error of class "kubebench".
function M.fail(fmt, ...)
  error(setmetatable({ class = "kubebench", message = format(fmt, ...) }, Error), 0)
end
local fail = M.fail

local DROP = {} -- a whole placeholder whose value is null

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

local function lookup(params, key, where)
  local v = params
  for part in key:gmatch("[^.]+") do
    if type(v) ~= "table" then v = nil break end
    v = v[part]
  end
  if v == nil then
    fail("template: %s uses ${%s}, which is not a parameter (params: %s)", where, key,
      table.concat(sorted_keys(params), ", "))
  end
  return v
end

--- The text of a scalar param inside a longer string.
function M.text(v, key, where)
  local t = type(v)
  if v == null then return "" end
  if t == "string" then return v end
  if t == "number" then
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return format("%d", v) end
    return require("kb.csv").format_number(v)
  end
  if t == "boolean" then return tostring(v) end
  fail("template: %s puts ${%s} (a %s) inside text; only a whole value \"${%s}\" may be a list or mapping",
    where, key, t, key)
end

-- Deep copy; lists keep the array mark so they encode as lists.
local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return setmetatable(out, getmetatable(v) == ARRAY_MT and ARRAY_MT or nil)
end
M.copy = copy

local function subst_string(s, params, where)
  local whole = s:match("^%${([%w_.%-]+)}$")
  if whole then
    local v = lookup(params, whole, where)
    if v == null then return DROP end
    return copy(v)
  end
  return (s:gsub("(%$?)%${([%w_.%-]+)}", function(esc, key)
    if esc == "$" then return "${" .. key .. "}" end
    return M.text(lookup(params, key, where), key, where)
  end))
end

local function child_path(where, k)
  if type(k) == "number" then return format("%s[%d]", where, k - 1) end
  if tostring(k):match("^[%a_][%w_]*$") then return where .. "." .. k end
  return format("%s[%q]", where, tostring(k))
end

local function subst(v, params, where)
  if type(v) == "string" then return subst_string(v, params, where) end
  if type(v) ~= "table" then return v end
  if getmetatable(v) == ARRAY_MT or (#v > 0 and next(v, #v) == nil) then
    local out = {}
    for i, x in ipairs(v) do
      local r = subst(x, params, child_path(where, i))
      if r ~= DROP then out[#out + 1] = r end
    end
    return setmetatable(out, ARRAY_MT)
  end
  local out = {}
  for k, x in pairs(v) do
    local key = type(k) == "string" and subst_string(k, params, where) or k
    if type(key) ~= "string" and type(key) ~= "number" then
      fail("template: %s: a key placeholder must give text", where)
    end
    local r = subst(x, params, child_path(where, key))
    if r ~= DROP then out[key] = r end
  end
  return out
end

--- Resolves placeholders in a decoded tree (see above). `name` is used in
-- messages.
function M.substitute(tree, params, name)
  local r = subst(tree, params or {}, name or "manifest")
  return r ~= DROP and r or nil
end

local function decode_manifest(text, name)
  local docs = yaml.decode_all(text, { name = name })
  if #docs ~= 1 then
    fail("template %s: the main job template must be one YAML document, found %d", name, #docs)
  end
  return docs[1]
end

--- Renders a template (function, table or YAML text) with params into a
-- manifest table. ctx is passed to a function template.
function M.render(tmpl, params, ctx)
  ctx = ctx or {}
  local name = ctx.template_name or "template"
  local manifest
  if type(tmpl) == "function" then
    manifest = tmpl(copy(params), ctx)
    if type(manifest) == "string" then manifest = decode_manifest(manifest, name) end
  elseif type(tmpl) == "string" then
    manifest = M.substitute(decode_manifest(tmpl, name), params, name)
  elseif type(tmpl) == "table" then
    manifest = M.substitute(copy(tmpl), params, name)
  else
    fail("template: wants a Lua function, a manifest table or YAML text, got %s", type(tmpl))
  end
  if type(manifest) ~= "table" or type(manifest.kind) ~= "string" then
    fail("template %s: the rendered manifest has no kind (is it a Kubernetes object?)", name)
  end
  return manifest
end

return M
