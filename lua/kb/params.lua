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

local function describe_type(v)
  local t = math.type(v) or type(v)
  return (t:match("^[aeiou]") and "an " or "a ") .. t
end

--- Merges defaults <- file <- command line. With declared defaults, a
-- parameter the scenario does not know is refused (typos cost runs); a
-- string default takes the command line's text as written, anything else
-- must already have the default's type (an integer default refuses 1.5).
-- Returns the merged table, or nil and a message.
function M.merge(defaults, from_file, from_cli)
  local merged = {}
  for k, v in pairs(defaults or {}) do merged[k] = v end
  for _, layer in ipairs({ from_file or {}, from_cli or {} }) do
    local raw = raw_text[layer] or {}
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
          local d = require("kb.k8s.util").edit_distance(k:lower(), name:lower())
          if not near_d or d < near_d or (d == near_d and name < near) then near, near_d = name, d end
        end
        table.sort(known)
        local hint = near_d and near_d <= math.max(2, #k // 3) and string.format(", did you mean '%s'?", near) or ""
        return nil, string.format("unknown parameter '%s'%s (this scenario takes: %s)",
          k, hint, table.concat(known, ", "))
      end
      if default ~= nil and type(default) == "string" and raw[k] ~= nil then
        v = raw[k]
      elseif math.type(default) == "integer" and math.type(v) == "float" then
        return nil, string.format("parameter '%s' wants an integer (like its default %d), got %s",
          k, default, tostring(v))
      end
      if default ~= nil and type(default) ~= type(v) then
        if type(default) == "string" and type(v) ~= "table" then
          v = tostring(v)
        else
          return nil, string.format("parameter '%s' wants %s (like its default %s), got %s '%s'",
            k, describe_type(default), tostring(default), describe_type(v), tostring(v))
        end
      end
      merged[k] = v
    end
  end
  return merged
end

return M
