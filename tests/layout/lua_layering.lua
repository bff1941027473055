--- The Lua modules keep the map of docs/design-notes.md ("The Lua side:
-- lua/kb"): every `require` of a kb module in lua/kb/**/*.lua (lazy ones
-- too, comments and strings not) is allowed by the map's row for its
-- folder (and for its file, when the file has one), else the test names
-- the file and line. The rules are read from the document itself, so the
-- document and the check cannot drift apart:
--
--   * a row's first cell names `lua/kb/*.lua` (the top-level files),
--     `lua/kb/NAME/` (a folder) or `lua/kb/NAME.lua` (one file, adding to
--     its folder's row); every folder and top-level file must have a row;
--   * its "may require" cell grants *the C modules* (package.preload's
--     kb.* entries), *the runtime* (`kb` and the modules of lua/kb/*.lua
--     but kb.runner), and each code span naming a module: `kb.x` is that
--     module, `kb.x.*` kb.x and every module under it;
--   * a require of a module that does not exist fails too, and so does a
--     code span that names none (a stale row).
-- Run by kbrun: ctest layout.lua_layering.
local kb = require "kb"
local T = require "kb.testing"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local ROOT = os.getenv("KBRUN_SOURCE_DIR") or kb.fs.abspath(here .. "/../..")
local DOC = "docs/design-notes.md"
local HEADING = "### The Lua side: `lua/kb`"

-- ---- the requires of a Lua source ---------------------------------------------

-- The tokens of Lua source `text`: {kind = "name"|"string"|"op", value,
-- line}; comments dropped, strings decoded only as far as a module name
-- needs (escapes kept as they are).
local function tokens(text)
  local out, i, line, n = {}, 1, 1, #text
  local function add(kind, value) out[#out + 1] = { kind = kind, value = value, line = line } end
  local function count_lines(a, b)
    local _, k = text:sub(a, b):gsub("\n", "")
    line = line + k
  end
  local function long_bracket(at) -- "[==[" at `at`: the position after its "]==]"
    local eq = text:match("^%[(=*)%[", at)
    if not eq then return nil end
    local _, stop = text:find("]" .. eq .. "]", at + #eq + 2, true)
    return (stop or n) + 1
  end
  while i <= n do
    local c = text:sub(i, i)
    if c == "\n" then
      line, i = line + 1, i + 1
    elseif c:match("%s") then
      i = i + 1
    elseif text:sub(i, i + 1) == "--" then
      local stop = long_bracket(i + 2)
      if stop then
        count_lines(i, stop - 1)
        i = stop
      else
        i = (text:find("\n", i, true) or n + 1)
      end
    elseif c == '"' or c == "'" then
      local j, start = i + 1, line
      while j <= n do
        local d = text:sub(j, j)
        if d == "\\" then j = j + 2
        elseif d == c or d == "\n" then break
        else j = j + 1 end
      end
      local value = text:sub(i + 1, j - 1)
      count_lines(i, j - 1)
      out[#out + 1] = { kind = "string", value = value, line = start }
      i = j + 1
    elseif c == "[" and long_bracket(i) then
      local stop, start = long_bracket(i), line
      local eq = text:match("^%[(=*)%[", i)
      out[#out + 1] = { kind = "string", value = text:sub(i + #eq + 2, stop - #eq - 3), line = start }
      count_lines(i, stop - 1)
      i = stop
    elseif c:match("[%a_]") then
      local name = text:match("^[%w_]+", i)
      add("name", name)
      i = i + #name
    elseif text:sub(i, i + 1) == ".." then
      add("op", "..")
      i = i + 2
    else
      add("op", c)
      i = i + 1
    end
  end
  return out
end

local function is_module_name(s) return s == "kb" or s:match("^kb%.[%w_.]*[%w_]$") ~= nil end

--- The kb modules `text` requires: list of {name, line}. Forms:
-- require "m", require 'm', require("m"), require(cond and "a" or "b")
-- (every name in the parentheses), pcall(require, "m"). A name built at
-- run time ("kb." .. x) is skipped.
local function requires(text)
  local toks, out = tokens(text), {}
  local function take(t, nxt)
    if t.kind == "string" and is_module_name(t.value) and not (nxt and nxt.value == "..") then
      out[#out + 1] = { name = t.value, line = t.line }
    end
  end
  for k, t in ipairs(toks) do
    if t.kind == "name" and t.value == "require" and not (toks[k - 1] and toks[k - 1].value == ".") then
      local nxt = toks[k + 1]
      if nxt and nxt.kind == "string" then
        take(nxt, toks[k + 2])
      elseif nxt and nxt.value == "," and toks[k + 2] then -- pcall(require, "m")
        take(toks[k + 2], toks[k + 3])
      elseif nxt and nxt.value == "(" then
        local depth, j = 1, k + 2
        while toks[j] and depth > 0 do
          local v = toks[j].value
          if toks[j].kind == "op" and v == "(" then depth = depth + 1
          elseif toks[j].kind == "op" and v == ")" then depth = depth - 1
          else take(toks[j], toks[j + 1]) end
          j = j + 1
        end
      end
    end
  end
  return out
end

-- ---- the map ---------------------------------------------------------------------

--- The rows of the map in design-notes text: list of {key (first cell's
-- code span), cell (the last one), line}.
local function parse_map(text)
  local rows, in_section, in_table, n = {}, false, false, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:match("^#") then
      if in_section and #rows > 0 then break end
      in_section = line == HEADING
    elseif in_section and line:match("^|") then
      local cells = {}
      for cell in line:gmatch("|([^|]*)") do cells[#cells + 1] = cell end
      if cells[#cells]:match("^%s*$") then cells[#cells] = nil end
      if not in_table then
        in_table = cells[1]:match("folder") ~= nil
      elseif not line:match("^|%-") then
        rows[#rows + 1] = { key = cells[1]:match("`([^`]*)`"), cell = cells[#cells], line = n }
      end
    elseif in_table and #rows > 0 then
      break
    end
  end
  return rows
end

--- A grant of a cell: {c = true?, runtime = true?, patterns = {...}}.
local function grants(cell)
  local g = { c = cell:find("*the C modules*", 1, true) ~= nil,
    runtime = cell:find("*the runtime*", 1, true) ~= nil, patterns = {} }
  for span in cell:gmatch("`([^`]*)`") do
    if is_module_name(span) or span:match("^kb%.[%w_.]*%.%*$") or span == "kb.*" then
      g.patterns[#g.patterns + 1] = span
    end
  end
  return g
end

local function matches(pattern, name)
  local base = pattern:match("^(.-)%.%*$")
  if not base then return pattern == name end
  return name == base or name:sub(1, #base + 1) == base .. "."
end

-- ---- the tree --------------------------------------------------------------------

--- Every module of lua/kb under root: {[name] = {path (relative to root),
-- folder ("" for the top level, else its first folder)}}.
local function tree(root)
  local mods = {}
  local function walk(dir, prefix, folder)
    for _, entry in ipairs(kb.fs.list(root .. "/" .. dir)) do
      local path = dir .. "/" .. entry
      if kb.fs.exists(root .. "/" .. path) == "dir" then
        walk(path, prefix .. entry .. ".", folder or entry)
      elseif entry:match("%.lua$") then
        local name = (prefix .. entry:gsub("%.lua$", "")):gsub("%.init$", "")
        mods[name] = { path = path, folder = folder or "" }
      end
    end
  end
  walk("lua/kb", "kb.", nil)
  return mods
end

--- The problems of the tree under root against the map in doc_text, as
-- sorted messages. c_modules: {[name] = true}.
local function check(root, doc_text, c_modules)
  local problems = {}
  local function say(fmt, ...) problems[#problems + 1] = string.format(fmt, ...) end
  local mods = tree(root)
  local rows = parse_map(doc_text)
  if #rows == 0 then say("%s: no map under %q", DOC, HEADING) end
  local by_folder, by_file = {}, {}
  for _, row in ipairs(rows) do
    local g = grants(row.cell)
    local key = row.key or ""
    local folder = key:match("^lua/kb/([%w_]+)/$")
    if key == "lua/kb/*.lua" then by_folder[""] = g
    elseif folder then by_folder[folder] = g
    elseif key:match("^lua/kb/.+%.lua$") then by_file[key] = g
    else say("%s:%d: the first cell names no folder or file of lua/kb (%s)", DOC, row.line, key) end
    for _, pat in ipairs(g.patterns) do
      local any = c_modules[pat] ~= nil
      for name in pairs(mods) do any = any or matches(pat, name) end
      for name in pairs(c_modules) do any = any or matches(pat, name) end
      if not any then say("%s:%d: `%s` names no module", DOC, row.line, pat) end
    end
    if (folder or key == "lua/kb/*.lua") and not by_file[key] then
      local seen = false
      for _, m in pairs(mods) do seen = seen or (m.folder == (folder or "")) end
      if not seen then say("%s:%d: %s holds no module", DOC, row.line, key) end
    elseif by_file[key] and kb.fs.exists(root .. "/" .. key) ~= "file" then
      say("%s:%d: %s does not exist", DOC, row.line, key)
    end
  end
  local function allowed(g, name)
    if not g then return false end
    if g.c and c_modules[name] then return true end
    if g.runtime and mods[name] and mods[name].folder == "" and name ~= "kb.runner" then return true end
    for _, pat in ipairs(g.patterns) do
      if matches(pat, name) then return true end
    end
    return false
  end
  local names, seen = {}, 0
  for name in pairs(mods) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local m = mods[name]
    local g, own = by_folder[m.folder], by_file[m.path]
    if not g then
      say("%s: its folder (%s) has no row in %s's map", m.path,
        m.folder == "" and "lua/kb/*.lua" or ("lua/kb/" .. m.folder .. "/"), DOC)
    else
      for _, r in ipairs(requires(kb.fs.read(root .. "/" .. m.path))) do
        seen = seen + 1
        if not mods[r.name] and not c_modules[r.name] then
          say("%s:%d: requires %s, which is no module", m.path, r.line, r.name)
        elseif not (allowed(g, r.name) or allowed(own, r.name)) then
          say("%s:%d: requires %s, which %s may not (%s's map)", m.path, r.line, r.name,
            own and m.path or (m.folder == "" and "lua/kb/*.lua" or ("lua/kb/" .. m.folder .. "/")), DOC)
        end
      end
    end
  end
  table.sort(problems)
  return problems, names, seen
end

local function c_modules()
  local out = {}
  for name in pairs(package.preload) do
    if is_module_name(name) then out[name] = true end
  end
  return out
end

-- ---- the cases -------------------------------------------------------------------

T.case("every require in lua/kb/**/*.lua is one docs/design-notes.md's map allows", function()
  local problems, names, seen = check(ROOT, kb.fs.read(ROOT .. "/" .. DOC), c_modules())
  T.ok(#names >= 60, "modules found: " .. #names)
  T.ok(seen >= 400, "requires found: " .. seen)
  print(string.format("lua_layering: %d requires in %d modules, all allowed", seen, #names))
  if #problems > 0 then
    error(#problems .. " require(s) against the map of lua/kb (" .. DOC .. ", \"The Lua side\"):\n  "
      .. table.concat(problems, "\n  "), 0)
  end
end)

T.case("the forms of require are found, with their lines; comments and computed names are not", function()
  local src = table.concat({
    'local a = require "kb.a"',
    "local b = require('kb.b').f('kb.not')",
    'local ok, c = pcall(require, "kb.c")',
    '-- local x = require "kb.commented"',
    '--[[ require "kb.long_comment"',
    ']] local d = require(cond and "kb.d1" or "kb.d2")',
    'local s = [[ require "kb.in_string" ]]',
    'local e = require("kb." .. name)',
    'local f = "require \\"kb.quoted\\""; local g = require [[kb.g]]',
    'local h = x.require "kb.method"',
  }, "\n")
  local got = {}
  for _, r in ipairs(requires(src)) do got[#got + 1] = r.name .. ":" .. r.line end
  T.same(got, { "kb.a:1", "kb.b:2", "kb.c:3", "kb.d1:6", "kb.d2:6", "kb.g:9" })
end)

T.case("a require the map forbids fails, naming file and line (a made-up tree)", function()
  local root = kb.fs.tmpdir("lua_layering")
  local function write(path, text)
    kb.fs.mkdir(root .. "/" .. path:match("^(.*)/[^/]*$"))
    kb.fs.write(root .. "/" .. path, text)
  end
  write("lua/kb/init.lua", 'local core = require "kb.core"\n')
  write("lua/kb/params.lua", 'local kb = require "kb"\n')
  write("lua/kb/runner.lua", 'local r = require "kb.report"\n')
  write("lua/kb/report/init.lua", 'local p = require "kb.params"\nlocal m = require "kb.core"\n')
  write("lua/kb/k8s/init.lua", 'local r = require "kb.runner"\nlocal t = require "kb.nothing"\n')
  local doc = table.concat({
    "# Design", HEADING, "", "| folder | what | may require |", "|---|---|---|",
    "| `lua/kb/*.lua` | runtime | *the C modules*, *the runtime* |",
    "| `lua/kb/runner.lua` | runner | also `kb.report.*` |",
    "| `lua/kb/report/` | report | *the C modules*, the runtime's leaves `kb.thresholds`; `kb.report.*` |",
    "| `lua/kb/k8s/` | k8s | *the runtime*, `kb.k8s.*` |",
    "", "### Next", "| folder | what | may require |", "|---|---|---|", "| `lua/kb/x/` | | |",
  }, "\n")
  local problems = check(root, doc, { ["kb.core"] = true })
  T.same(problems, {
    "docs/design-notes.md:8: `kb.thresholds` names no module",
    "lua/kb/k8s/init.lua:1: requires kb.runner, which lua/kb/k8s/ may not (docs/design-notes.md's map)",
    "lua/kb/k8s/init.lua:2: requires kb.nothing, which is no module",
    "lua/kb/report/init.lua:1: requires kb.params, which lua/kb/report/ may not (docs/design-notes.md's map)",
  })
  kb.fs.remove(root, { recursive = true })
end)

T.run()
