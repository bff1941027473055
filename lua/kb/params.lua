--- kb.params: scenario parameters from the command line, a params file and
-- the scenario's defaults (command line over file over defaults).
local M = {}

--- Types a command-line value: true/false, numbers (integers stay
-- integers), everything else a string. Quote nothing: `name=007` is 7,
-- write `name=s:007` to force a string.
function M.typed(text)
  if text == "true" then return true end
  if text == "false" then return false end
  if text:sub(1, 2) == "s:" then return text:sub(3) end
  local n = math.tointeger(text) or tonumber(text)
  if n ~= nil and text:match("^%s*[-+]?[%d.]") then return n end
  return text
end

-- The text each command-line value was typed from, so a string default
-- receives `007` as "007", not as the number 7 printed back.
local raw_text = setmetatable({}, { __mode = "k" })

--- Parses `key=value` arguments into a table. Returns nil and a message
-- for the first malformed one.
function M.parse_assignments(list)
  local out, raw = {}, {}
  for _, arg in ipairs(list) do
    local key, value = arg:match("^([%a_][%w_.%-]*)=(.*)$")
    if not key then
      return nil, string.format("'%s' is not a key=value parameter "
        .. "(parameters are key=value, options start with -)", arg)
    end
    out[key] = M.typed(value)
    raw[key] = value
  end
  raw_text[out] = raw
  return out
end

-- ---- usage errors ---------------------------------------------------------------
-- The user's mistakes (a bad parameter, a params file kbrun cannot use, a
-- sweep resume that would mix definitions) are errors of class "usage":
-- kbrun (kb.runner) prints their message alone, without a Lua traceback,
-- and exits 2; with `discard` the experiment folder is removed again.
-- Errors inside scenario code keep their traceback.

M.UsageError = { __name = "kb.usage_error" }
M.UsageError.__index = M.UsageError
M.UsageError.__tostring = function(e) return e.message end

--- params.usage_error(message [, discard]) -> the error object
-- {class = "usage", message, discard}; raise it with error(e, 0).
function M.usage_error(message, discard)
  return setmetatable({ class = "usage", message = message, discard = discard }, M.UsageError)
end

-- Nothing measured yet in the process's registry: a refusal then leaves
-- nothing worth keeping (its experiment folder holds only the parameters).
local function nothing_measured()
  local ok, metrics = pcall(require, "kb.metrics")
  if not ok then return true end
  for _, m, e in metrics.each() do
    local v
    if e.kind == "histogram" then v = m:count() else v = m:value() end
    if v ~= 0 then return false end
  end
  return true
end

--- params.refusal(message) -> a usage error for a library refusing how it
-- was called (a bad parameter value, a refused sweep resume, a busy sweep
-- folder): the experiment folder is removed again when nothing was
-- measured yet, kept otherwise. Add fields to it, then error(e, 0).
function M.refusal(message)
  return M.usage_error(message, nothing_measured())
end

--- params.refuse(fmt, ...): raises params.refusal(string.format(fmt, ...)).
function M.refuse(fmt, ...)
  error(M.refusal(string.format(fmt, ...)), 0)
end

local function describe_type(v)
  if type(v) == "table" then
    if next(v) == nil then return "an empty table" end
    return v[1] ~= nil and "a list" or "a mapping"
  end
  local t = math.type(v) or type(v)
  return (t:match("^[aeiou]") and "an " or "a ") .. t
end

local function show(v)
  if type(v) == "string" then
    if #v > 40 then v = v:sub(1, 37) .. "..." end
    return "'" .. v .. "'"
  end
  return tostring(v)
end

-- How to write a value of the default's type, on the command line and in a
-- params file.
local function advice(k, default, from_file)
  local example
  if type(default) == "boolean" then
    example = from_file and string.format("%s: true or %s: false", k, k) or string.format("%s=true or %s=false", k, k)
  elseif math.type(default) == "integer" then
    example = from_file and string.format("%s: %d", k, default) or string.format("%s=%d", k, default)
  elseif type(default) == "number" then
    example = from_file and string.format("%s: %s", k, tostring(default)) or string.format("%s=%s", k, tostring(default))
  else
    return nil
  end
  return "write it like " .. example
end

--- Merges defaults <- file <- command line. A default may be declared
-- `{default = v, secret = true}`: the parameter's value is then never
-- written (kb.secrets.protect; docs/security.md). With declared defaults, a
-- parameter the scenario does not know is refused (typos cost runs); a
-- string default takes the command line's text as written, anything else
-- must already have the default's type (an integer default refuses 1.5).
-- opts.file names the params file in messages. Returns the merged table,
-- or nil and a message that says how to write the value.
function M.merge(defaults, from_file, from_cli, opts)
  -- {default = v, secret = true}: a secret parameter, never written
  local secret_names
  defaults, secret_names = require("kb.secrets").params(defaults)
  local merged = {}
  local file_name = opts and opts.file
  for k, v in pairs(defaults or {}) do merged[k] = v end
  for li, layer in ipairs({ from_file or {}, from_cli or {} }) do
    local raw = raw_text[layer] or {}
    local in_file = li == 1
    local where = in_file and (file_name and (file_name .. ": ") or "the params file: ") or ""
    local keys = {} -- in name order, so the error names the same key every time
    for k in pairs(layer) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local v = layer[k]
      local default = defaults and defaults[k]
      if defaults and next(defaults) ~= nil and default == nil then
        local known, near, near_d = {}, nil, nil
        for name in pairs(defaults) do
          known[#known + 1] = name
          local d = require("kb.k8s.util").edit_distance(tostring(k):lower(), name:lower())
          if not near_d or d < near_d or (d == near_d and name < near) then near, near_d = name, d end
        end
        table.sort(known)
        local hint = near_d and near_d <= math.max(2, #tostring(k) // 3) and string.format(", did you mean '%s'?", near) or ""
        return nil, string.format("%sunknown parameter '%s'%s (this scenario takes: %s)",
          where, tostring(k), hint, table.concat(known, ", "))
      end
      if default ~= nil and type(default) == "string" and raw[k] ~= nil then
        v = raw[k]
      elseif math.type(default) == "integer" and math.type(v) == "float" then
        return nil, string.format("%sparameter '%s' wants an integer (like its default %d), got %s: %s",
          where, k, default, tostring(v), advice(k, default, in_file))
      end
      if default ~= nil and type(default) ~= type(v) then
        if type(default) == "string" and type(v) ~= "table" then
          v = tostring(v)
        elseif type(default) == "string" then
          -- a YAML mapping or list where the scenario takes text (a JSON or
          -- YAML document the scenario decodes itself, e.g. pipeline_params)
          return nil, string.format("%sparameter '%s' wants a string (its default is %s), got %s: "
            .. "to pass a mapping or a list as text, quote it (%s: '{\"a\": 1}') or write it as "
            .. "a YAML block (%s: |, the text indented on the lines below)",
            where, k, show(default), describe_type(v), k, k)
        else
          local how = advice(k, default, in_file)
          return nil, string.format("%sparameter '%s' wants %s (like its default %s), got %s%s%s",
            where, k, describe_type(default), show(default), describe_type(v),
            type(v) == "table" and "" or (" " .. show(v)), how and (": " .. how) or "")
        end
      end
      merged[k] = v
    end
  end
  if secret_names then require("kb.secrets").protect(merged, secret_names) end
  return merged
end

return M
