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

--- Parses `key=value` arguments into a table. Returns nil and a message
-- for the first malformed one.
function M.parse_assignments(list)
  local out = {}
  for _, arg in ipairs(list) do
    local key, value = arg:match("^([%a_][%w_.%-]*)=(.*)$")
    if not key then
      return nil, string.format("'%s' is not a key=value parameter "
        .. "(options go before the scenario file, parameters after it)", arg)
    end
    out[key] = M.typed(value)
  end
  return out
end

local function describe_type(v)
  return math.type(v) or type(v)
end

--- Merges defaults <- file <- command line. With declared defaults, a
-- parameter the scenario does not know is refused (typos cost runs), and a
-- value is converted to the default's type where that is lossless.
-- Returns the merged table, or nil and a message.
function M.merge(defaults, from_file, from_cli)
  local merged = {}
  for k, v in pairs(defaults or {}) do merged[k] = v end
  for _, layer in ipairs({ from_file or {}, from_cli or {} }) do
    for k, v in pairs(layer) do
      local default = defaults and defaults[k]
      if defaults and next(defaults) ~= nil and default == nil then
        local known = {}
        for name in pairs(defaults) do known[#known + 1] = name end
        table.sort(known)
        return nil, string.format("unknown parameter '%s' (this scenario takes: %s)",
          k, table.concat(known, ", "))
      end
      if default ~= nil and type(default) ~= type(v) then
        if type(default) == "string" then
          v = tostring(v)
        elseif type(default) == "number" and type(v) == "string" and tonumber(v) then
          v = tonumber(v)
        else
          return nil, string.format("parameter '%s' wants a %s (like its default %s), got %s '%s'",
            k, describe_type(default), tostring(default), describe_type(v), tostring(v))
        end
      end
      merged[k] = v
    end
  end
  return merged
end

return M
