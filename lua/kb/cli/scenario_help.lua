--- kb.cli.scenario_help: what `kbrun SCENARIO.lua --help` (or `kbrun help
-- SCENARIO.lua`) prints, without running anything or writing a folder:
-- the scenario's description (the comment block it starts with), every
-- parameter with its type, default and the comment at its declaration
-- (in the scenario file, else in the library module that declares it, as
-- kb.kfp.storm does for the storm's parameters), and its thresholds.
local M = {}

local format, concat = string.format, table.concat

-- The leading comment block of a source, without its comment markers.
local function description(source)
  local lines = {}
  for line in (source .. "\n"):gmatch("([^\n]*)\n") do
    if not (#lines == 0 and line:match("^#!")) then
      local text = line:match("^%-%-%-?%s?(.*)$")
      if not text then break end
      lines[#lines + 1] = text
    end
  end
  while #lines > 0 and lines[#lines]:match("^%s*$") do lines[#lines] = nil end
  return concat(lines, "\n")
end

local function read(path)
  local f = path and io.open(path, "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

-- The sources to look for declarations in: the scenario, then the loaded
-- kb library modules (their files, in name order).
local function sources(scenario_path)
  local list = { { path = scenario_path, text = read(scenario_path) or "" } }
  local names = {}
  for name in pairs(package.loaded) do
    if type(name) == "string" and name:match("^kb%.") then names[#names + 1] = name end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    local path = package.searchpath(name, package.path)
    local text = path and read(path)
    if text then list[#list + 1] = { path = path, text = text } end
  end
  return list
end

-- The comment at `key`'s declaration (`key = value, -- comment`, in the
-- first source that comments it) and the position of its declaration in
-- the scenario file (nil when the scenario does not declare it).
local function declaration(list, key)
  local decl = "\n[ \t]*" .. key:gsub("%W", "%%%0") .. "[ \t]*="
  local at = ("\n" .. list[1].text):find(decl)
  for _, src in ipairs(list) do
    local _, _, comment = ("\n" .. src.text):find(decl .. "[^\n]-%-%-[ \t]*([^\n]*)")
    if comment then return comment, at end
  end
  return nil, at
end

local function type_of(v)
  if math.type(v) then return math.type(v) end
  return type(v)
end

local function show(v)
  local text = type(v) == "string" and format("%q", v) or tostring(v)
  return #text > 60 and text:sub(1, 57) .. "..." or text
end

local function threshold_text(spec)
  if type(spec) ~= "table" then return ">= " .. tostring(spec) end
  local parts = {}
  for _, stat in ipairs(require("kb.k8s.util").sorted_keys(spec)) do
    local v = spec[stat]
    if stat == "min" then parts[#parts + 1] = ">= " .. tostring(v)
    elseif stat == "max" then parts[#parts + 1] = "<= " .. tostring(v)
    elseif type(v) == "number" then parts[#parts + 1] = format("%s <= %s", stat, tostring(v))
    else parts[#parts + 1] = format("%s = %s", stat, tostring(v)) end
  end
  return concat(parts, ", ")
end

--- text(path, scenario) -> the help text of the scenario table loaded from
-- the file at path.
function M.text(path, scenario)
  local list = sources(path)
  local out = {}
  local desc = description(list[1].text)
  out[#out + 1] = desc ~= "" and desc or format("%s (no description: the file starts with no comment)", path)
  local params = type(scenario) == "table" and type(scenario.params) == "table" and scenario.params or {}
  local secret = {}
  local ok, plain, names = pcall(require("kb.secrets").params, params) -- {default =, secret = true}
  if ok then params = plain end
  for _, name in ipairs(ok and names or {}) do secret[name] = true end
  local rows = {}
  for key, default in pairs(params) do
    if type(key) == "string" then
      local comment, at = declaration(list, key)
      if secret[key] then comment = "(secret: never written) " .. (comment or "") end
      rows[#rows + 1] = { key = key, default = default, comment = comment, at = at }
    end
  end
  -- the scenario's own order first, then the rest by name
  table.sort(rows, function(a, b)
    if (a.at ~= nil) ~= (b.at ~= nil) then return a.at ~= nil end
    if a.at and b.at and a.at ~= b.at then return a.at < b.at end
    return a.key < b.key
  end)
  out[#out + 1] = ""
  if #rows == 0 then
    out[#out + 1] = "parameters: none"
  else
    out[#out + 1] = "parameters (key=value on the command line, or --params FILE.yaml):"
    local w = 0 -- the declarations' column, at most 44 wide (longer ones overflow it)
    for _, r in ipairs(rows) do w = math.min(44, math.max(w, #r.key + #show(r.default) + 3)) end
    for _, r in ipairs(rows) do
      local decl = format("%s = %s", r.key, show(r.default))
      local line = format("  %s%s  %-8s %s", decl, (" "):rep(w - #decl), type_of(r.default), r.comment or "")
      out[#out + 1] = (line:gsub("%s+$", ""))
    end
  end
  local th = type(scenario) == "table" and scenario.thresholds
  if type(th) == "table" and next(th) then
    out[#out + 1] = ""
    out[#out + 1] = "thresholds (a failed one exits 99):"
    for _, name in ipairs(require("kb.k8s.util").sorted_keys(th)) do
      out[#out + 1] = format("  %s %s", name, threshold_text(th[name]))
    end
  end
  return concat(out, "\n") .. "\n"
end

return M
