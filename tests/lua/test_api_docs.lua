--- Keeps docs/lua-api.md and the functions the kb.* modules export in step.
--
-- Every module is loaded through this kbrun: the C modules (package.preload
-- entries named kb.*) and every lua/kb/**/*.lua. The rules (also written in
-- the header of docs/lua-api.md):
--
--   * A module is *documented* by a section of lua-api.md (a `##` or `###`
--     heading naming it, e.g. "## kb.http: HTTP client"; the section runs
--     to the next heading of the same or a higher level, and a heading may
--     name several modules). It is *internal* when the table of the section
--     "Internal modules" lists it. Every module is one or the other.
--   * Every function a documented module exports (a function-valued field
--     of the table `require` returns) whose name does not start with `_`
--     is named in the first column of a table of its section whose header's
--     first cell starts with "function". A name there is the leading
--     identifier of a code span (`kb.http.get(url)`, `csv.parse(text)`,
--     `read(path)`: get, parse, read); its prefix before the last dot
--     says the module when it names one (`svg.lines` is kb.report.svg's).
--   * Every name such a table gives exists in its module.
local kb = require "kb"
local T = require "kb.testing"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local ROOT = os.getenv("KBRUN_SOURCE_DIR") or kb.fs.abspath(here .. "/../..")
local DOC = ROOT .. "/docs/lua-api.md"

-- ---- the modules ------------------------------------------------------------

local function lua_files(dir, prefix, out)
  for _, name in ipairs(kb.fs.list(dir)) do
    local path = dir .. "/" .. name
    if kb.fs.exists(path) == "dir" then
      lua_files(path, prefix .. name .. ".", out)
    elseif name:match("%.lua$") then
      local mod = prefix .. name:gsub("%.lua$", "")
      -- a folder's init.lua is the folder's module (kb/argo/init.lua: kb.argo)
      out[#out + 1] = mod == "kb.init" and "kb" or mod:gsub("%.init$", "")
    end
  end
  return out
end

--- Every kb module name, sorted.
local function module_names()
  local names, seen = {}, {}
  for name in pairs(package.preload) do
    if name:match("^kb%.") then names[#names + 1] = name; seen[name] = true end
  end
  for _, name in ipairs(lua_files(ROOT .. "/lua/kb", "kb.", {})) do
    if not seen[name] then names[#names + 1] = name; seen[name] = true end
  end
  table.sort(names)
  return names
end

--- The public functions of a loaded module: sorted names.
local function public_functions(mod)
  local out = {}
  if type(mod) ~= "table" then return out end
  for k, v in pairs(mod) do
    if type(k) == "string" and type(v) == "function" and k:sub(1, 1) ~= "_" then out[#out + 1] = k end
  end
  table.sort(out)
  return out
end

-- ---- the document -----------------------------------------------------------

local function kb_names(text)
  local out = {}
  for name in text:gmatch("kb[%w_.]*") do
    name = name:gsub("%.+$", "")
    if name == "kb" or name:match("^kb%.") then out[#out + 1] = name end
  end
  return out
end

--- Parses lua-api.md: sections = list of {modules = {names}, line, rows =
-- {{names = {...}, line}}}, internal = {[module] = line}.
local function parse_doc(text)
  local sections, internal = {}, {}
  local stack = {} -- open sections by heading level
  local lines, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do n = n + 1; lines[n] = line end
  local in_fence, in_internal, internal_level = false, false, nil
  local i = 1
  while i <= n do
    local line = lines[i]
    if line:match("^%s*```") then in_fence = not in_fence end
    local hashes, title = line:match("^(#+)%s+(.*)$")
    if not in_fence and hashes and #hashes >= 2 then
      local level = #hashes
      for l = level, 6 do stack[l] = nil end
      if in_internal and level <= internal_level then in_internal = false end
      if title:match("^Internal modules") then
        in_internal, internal_level = true, level
      else
        local mods = {}
        -- the module names before a ':' (or the whole title): "kb.report and kb.report.svg"
        for _, name in ipairs(kb_names(title:match("^([^:]*)") or title)) do mods[#mods + 1] = name end
        if #mods > 0 then
          stack[level] = { modules = mods, line = i, rows = {} }
          sections[#sections + 1] = stack[level]
        end
      end
      i = i + 1
    elseif not in_fence and line:match("^|") then
      -- a table: its header, the separator, the rows
      local header = line
      local first = (header:match("^|%s*([^|]*)") or ""):lower()
      local section
      for l = 6, 2, -1 do if stack[l] then section = stack[l]; break end end
      i = i + 2
      while i <= n and lines[i]:match("^|") do
        local cell = lines[i]:match("^|%s*([^|]*)") or ""
        if in_internal then
          for _, name in ipairs(kb_names(cell)) do internal[name] = i end
        elseif section and first:match("^function") then
          local names = {}
          for span in cell:gmatch("`([^`]*)`") do
            local chain = span:match("^[%a_][%w_.]*") or span:match("^%.[%a_][%w_]*")
            if chain then names[#names + 1] = chain end
          end
          section.rows[#section.rows + 1] = { names = names, line = i }
        end
        i = i + 1
      end
    else
      i = i + 1
    end
  end
  return sections, internal
end

-- ---- the check --------------------------------------------------------------

--- The problems, as sorted messages.
local function check()
  local text = kb.fs.read(DOC)
  local sections, internal = parse_doc(text)
  local names = module_names()
  local mods, failed = {}, {}
  for _, name in ipairs(names) do
    local ok, mod = pcall(require, name)
    if ok then mods[name] = mod else failed[#failed + 1] = name .. ": " .. tostring(mod) end
  end
  local problems = {}
  local function say(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
  for _, f in ipairs(failed) do say("cannot load %s", f) end

  -- documented[module][fn] = line of lua-api.md
  local documented, has_section = {}, {}
  for _, s in ipairs(sections) do
    for _, m in ipairs(s.modules) do has_section[m] = has_section[m] or s.line end
    for _, row in ipairs(s.rows) do
      for _, chain in ipairs(row.names) do
        local prefix, fn = chain:match("^(.-)%.?([%a_][%w_]*)$")
        -- which of the section's modules: the one the prefix names, else
        -- the first that has the name
        local target
        for _, m in ipairs(s.modules) do
          if prefix ~= "" and (prefix == m or m:match("([%w_]+)$") == prefix:match("([%w_]+)$")) then target = m end
        end
        if not target then
          for _, m in ipairs(s.modules) do
            if mods[m] and type(mods[m]) == "table" and mods[m][fn] ~= nil then target = m; break end
          end
        end
        target = target or s.modules[1]
        local mod = mods[target]
        if mod == nil then
          say("lua-api.md:%d: `%s`: there is no module %s", row.line, chain, target)
        elseif type(mod) ~= "table" or mod[fn] == nil then
          say("lua-api.md:%d: `%s`: %s has no %s (a documented function that does not exist)",
            row.line, chain, target, fn)
        else
          documented[target] = documented[target] or {}
          documented[target][fn] = row.line
        end
      end
    end
  end

  for _, name in ipairs(names) do
    if mods[name] ~= nil then
      if internal[name] and has_section[name] then
        say("%s is listed as internal (lua-api.md:%d) and has a section (lua-api.md:%d): one or the other",
          name, internal[name], has_section[name])
      elseif not internal[name] then
        if not has_section[name] then
          say("%s has no section in lua-api.md and is not listed under 'Internal modules'", name)
        else
          for _, fn in ipairs(public_functions(mods[name])) do
            if not (documented[name] and documented[name][fn]) then
              say("%s.%s is exported but not documented (a function table in the section of lua-api.md:%d)",
                name, fn, has_section[name])
            end
          end
        end
      end
    end
  end
  for name, line in pairs(internal) do
    if mods[name] == nil then say("lua-api.md:%d: internal module %s does not exist", line, name) end
  end
  table.sort(problems)
  return problems, names, sections, internal
end

T.case("every kb module loads and is either documented or internal; every public function is documented, every documented one exists", function()
  local problems, names = check()
  T.ok(#names >= 60, "modules found: " .. #names)
  if #problems > 0 then
    error(#problems .. " problem(s) between docs/lua-api.md and the modules:\n  "
      .. table.concat(problems, "\n  "), 0)
  end
end)

T.case("the parser reads what the rules say (a made-up document)", function()
  local doc = table.concat({
    "# title",
    "## kb.alpha: first",
    "| function | |", "|---|---|",
    "| `kb.alpha.one(x)`, `.two` | |",
    "| `alpha.three` | |",
    "### sub",
    "| function | returns |", "|---|---|",
    "| `four(y)` | |",
    "",
    "| method | |", "|---|---|",
    "| `obj:five()` | |",
    "## kb.beta and kb.gamma",
    "| function | |", "|---|---|",
    "| `gamma.six` | `seven` |",
    "```",
    "## kb.fenced",
    "```",
    "## Internal modules",
    "| module | |", "|---|---|",
    "| `kb.delta`, `kb.epsilon.x` | |",
    "## kb.zeta",
  }, "\n")
  local sections, internal = parse_doc(doc)
  local got = {}
  for _, s in ipairs(sections) do got[#got + 1] = table.concat(s.modules, "+") end
  T.eq(table.concat(got, " "), "kb.alpha kb.beta+kb.gamma kb.zeta")
  T.same(sections[1].modules, { "kb.alpha" })
  T.same(sections[1].rows[1].names, { "kb.alpha.one", ".two" })
  T.same(sections[1].rows[2].names, { "alpha.three" })
  T.same(sections[1].rows[3].names, { "four" }) -- a subsection belongs to its section
  T.eq(#sections[1].rows, 3) -- the method table is not a function table
  T.same(sections[2].modules, { "kb.beta", "kb.gamma" })
  T.same(sections[2].rows[1].names, { "gamma.six" }) -- only the first column
  T.same(sections[3].modules, { "kb.zeta" }) -- a heading after the internal list ends it
  T.ok(internal["kb.delta"] and internal["kb.epsilon.x"])
  T.eq(internal["kb.zeta"], nil)
end)

T.run()
