--- Runs the examples of docs/lua-api.md and docs/scenarios.md, so the
-- documentation cannot drift from the code silently.
--
-- A fenced block takes part when its first line is a marker comment:
--
--   ```lua
--   -- doctest
--   ...                     a snippet: run with load() inside a kb task of
--   ```                     this process (so it may suspend); it must not
--                           raise. Every print() in it must be matched, in
--                           order, by a `--> expected` comment in the block.
--
--   ```lua
--   -- doctest: file NAME
--   ...                     written to NAME in the document's work folder
--   ```                     (a scenario or library used by later blocks)
--
--   ```sh
--   # doctest
--   kbrun -q api_get.lua requests=200        # exit 0 (the default)
--   # => text the output must contain
--   ```                     each command line runs with sh -c in the work
--                           folder, `kbrun` being the binary under test
--
-- Expected texts compare with runs of blanks collapsed (print's tabs read as
-- spaces), and `...` stands for any text. Each document has its own work
-- folder, so its blocks run in order like a reader would type them.
local kb = require "kb"
local T = require "kb.testing"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local ROOT = os.getenv("KBRUN_SOURCE_DIR") or kb.fs.abspath(here .. "/../..")
local DOCS = { "docs/lua-api.md", "docs/scenarios.md" }
local SNIPPET_TIMEOUT = 60 -- scenario seconds, generous: examples take milliseconds

-- ---- the kbrun binary under test ---------------------------------------------

local function kbrun_binary()
  local bin = os.getenv("KBRUN_BIN")
  if bin and bin ~= "" then return bin end
  -- The shell's parent is this kbrun process.
  local r = kb.process.run { cmd = { "sh", "-c", "readlink /proc/$PPID/exe" }, check = true }
  return (r.stdout:gsub("%s+$", ""))
end

-- ---- parsing ------------------------------------------------------------------

--- The fenced blocks of a markdown text: {lang, first (line number of the
-- first code line), lines = {...}}.
local function fenced_blocks(text)
  local blocks, current, n = {}, nil, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if current then
      if line:match("^%s*```%s*$") then
        blocks[#blocks + 1] = current
        current = nil
      else
        current.lines[#current.lines + 1] = line
      end
    else
      local lang = line:match("^%s*```%s*([%w_+-]*)%s*$")
      if lang then current = { lang = lang, first = n + 1, lines = {} } end
    end
  end
  assert(current == nil, "unterminated code fence")
  return blocks
end

--- The doctest marker of a block: kind ("snippet", "file", "sh") and its
-- argument, or nil for an ordinary block.
local function marker(block)
  local first = block.lines[1] or ""
  if block.lang == "lua" then
    local rest = first:match("^%-%-%s*doctest(.*)$")
    if not rest then return nil end
    if rest:match("^%s*$") then return "snippet" end
    local name = rest:match("^:%s*file%s+(%S+)%s*$")
    if name then return "file", name end
    error(string.format("unknown doctest marker '%s'", first))
  elseif block.lang == "sh" then
    if first:match("^#%s*doctest%s*$") then return "sh" end
  end
  return nil
end

local function normalise(s)
  return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))
end

--- True when `actual` matches `expected` once both have their runs of
-- blanks collapsed; "..." in `expected` matches any text.
local function expect_match(actual, expected)
  local parts = {}
  for piece in (normalise(expected) .. "..."):gmatch("(.-)%.%.%.") do
    parts[#parts + 1] = (piece:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"))
  end
  return normalise(actual):find("^" .. table.concat(parts, ".-") .. "$") ~= nil
end

-- ---- running ------------------------------------------------------------------

local function where(doc, block, offset)
  return string.format("%s:%d", doc, block.first + (offset or 0))
end

--- Runs a Lua snippet in a task and checks what it printed. Raises with
-- the document's name and line.
local function run_snippet(doc, block)
  -- Padded so that Lua's line numbers are the document's.
  local code = string.rep("\n", block.first - 1) .. table.concat(block.lines, "\n")
  local expected = {}
  for _, line in ipairs(block.lines) do
    local e = line:match("%-%->%s?(.*)$")
    if e then expected[#expected + 1] = e end
  end
  local printed = {}
  local env = setmetatable({
    print = function(...)
      local parts = table.pack(...)
      for i = 1, parts.n do parts[i] = tostring(parts[i]) end
      printed[#printed + 1] = table.concat(parts, "\t", 1, parts.n)
    end,
  }, { __index = _G })
  local fn, err = load(code, "=" .. doc, "t", env)
  T.ok(fn, err)
  -- Each snippet starts from a clean slate of process-wide state.
  kb.metrics.clear()
  local level = kb.log.level()
  local ok, e = pcall(kb.timeout, SNIPPET_TIMEOUT, fn)
  kb.log.level(level)
  kb.metrics.clear()
  if not ok then error(string.format("%s: the example raised: %s", where(doc, block), tostring(e)), 0) end
  if #printed ~= #expected then
    error(string.format("%s: %d print() call(s) but %d '-->' line(s); printed:\n  %s",
      where(doc, block), #printed, #expected, table.concat(printed, "\n  ")), 0)
  end
  for i = 1, #printed do
    if not expect_match(printed[i], expected[i]) then
      error(string.format("%s: print #%d gave\n  %s\nbut the document says\n  %s",
        where(doc, block), i, printed[i], expected[i]), 0)
    end
  end
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- Runs the command lines of a `# doctest` sh block in the work folder.
local function run_shell(doc, block, workdir, bindir)
  local i = 2
  while i <= #block.lines do
    local line = block.lines[i]
    if line:match("^%s*$") or line:match("^%s*#") then
      i = i + 1
    else
      local command = line:gsub("%s+#%s*exit%s+%d+%s*$", "")
      local want = tonumber(line:match("#%s*exit%s+(%d+)%s*$")) or 0
      local musts = {}
      local j = i + 1
      while block.lines[j] and block.lines[j]:match("^%s*#%s*=>") do
        musts[#musts + 1] = block.lines[j]:match("^%s*#%s*=>%s?(.*)$")
        j = j + 1
      end
      local r = kb.process.run {
        cmd = { "sh", "-c", "PATH=" .. shell_quote(bindir) .. ":$PATH; " .. command .. " 2>&1" },
        cwd = workdir, timeout = SNIPPET_TIMEOUT,
      }
      if r.code ~= want then
        error(string.format("%s: `%s` exited with %d, the document says %d; output:\n%s",
          where(doc, block, i - 1), command, r.code, want, r.stdout), 0)
      end
      for _, text in ipairs(musts) do
        if not normalise(r.stdout):find(normalise(text), 1, true) then
          error(string.format("%s: the output of `%s` lacks '%s'; output:\n%s",
            where(doc, block, i - 1), command, text, r.stdout), 0)
        end
      end
      i = j
    end
  end
end

-- ---- the harness's own checks -------------------------------------------------

T.case("the block parser finds fences, languages and markers", function()
  local blocks = fenced_blocks("text\n```lua\n-- doctest\nprint(1) --> 1\n```\n\n```sh\n# doctest\nkbrun x\n```\n```\nplain\n```\n")
  T.eq(#blocks, 3)
  T.eq(blocks[1].lang, "lua")
  T.eq(blocks[1].first, 3)
  T.eq(marker(blocks[1]), "snippet")
  T.eq(marker(blocks[2]), "sh")
  T.eq(marker(blocks[3]), nil)
  local kind, name = marker({ lang = "lua", lines = { "-- doctest: file lib/x.lua" } })
  T.eq(kind, "file")
  T.eq(name, "lib/x.lua")
  T.raises(function() marker({ lang = "lua", lines = { "-- doctest: frobnicate" } }) end,
    "unknown doctest marker")
  T.raises(function() fenced_blocks("```lua\nx\n") end, "unterminated code fence")
end)

T.case("expected outputs match with blanks collapsed and ... as a wildcard", function()
  T.ok(expect_match("200\tOK", "200  OK"))
  T.ok(expect_match("http://127.0.0.1:41234", "http://127.0.0.1:..."))
  T.ok(expect_match("a (b) [c] 50%", "a (b) [c] 50%"))
  T.ok(expect_match("", ""))
  T.ok(not expect_match("200", "201"))
  T.ok(not expect_match("200 extra", "200"))
  T.ok(expect_match("one two three", "one ... three"))
end)

T.case("a snippet whose output differs from its --> line fails", function()
  local block = { first = 10, lines = { "-- doctest", "print(1 + 1) --> 3" } }
  T.raises(function() run_snippet("x.md", block) end, "x.md:10: print #1 gave")
  block = { first = 10, lines = { "-- doctest", "print(1)", "print(2) --> 2" } }
  T.raises(function() run_snippet("x.md", block) end, "2 print() call(s) but 1 '-->' line(s)")
  block = { first = 10, lines = { "-- doctest", "error('nope', 0)" } }
  T.raises(function() run_snippet("x.md", block) end, "x.md:10: the example raised: nope")
  block = { first = 10, lines = { "-- doctest", "local x = nil", "x.y = 1" } }
  T.raises(function() run_snippet("x.md", block) end, "x.md:12: attempt to index")
end)

-- ---- links between documents -------------------------------------------------

--- GitHub's anchor of a heading: lower case, punctuation dropped, blanks
-- become hyphens.
local function slug(heading)
  return (heading:lower():gsub("[^%w%- _]", ""):gsub(" ", "-"))
end

local function anchors_of(text)
  local set, in_code = {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*```") then in_code = not in_code end
    local heading = not in_code and line:match("^#+%s+(.-)%s*$")
    if heading then set[slug(heading)] = true end
  end
  return set
end

T.case("anchors are GitHub's", function()
  T.eq(slug("kb: tasks, time and concurrency"), "kb-tasks-time-and-concurrency")
  T.eq(slug("kb.http: HTTP client"), "kbhttp-http-client")
  T.eq(slug("Errors, exit codes and Ctrl-C"), "errors-exit-codes-and-ctrl-c")
end)

T.case("links between the documents point at files and headings that exist", function()
  local docs_dir = kb.fs.join(ROOT, "docs")
  for _, name in ipairs(kb.fs.list(docs_dir)) do
    if name:match("%.md$") then
      local text = kb.fs.read(kb.fs.join(docs_dir, name))
      for target in text:gmatch("%]%(([^)%s]+)%)") do
        local file, anchor = target:match("^([^#]*)#?(.*)$")
        if not file:match("^%a+:") and (file == "" or file:match("%.md$")) then
          local path = file == "" and kb.fs.join(docs_dir, name) or kb.fs.join(docs_dir, file)
          T.ok(kb.fs.exists(path), string.format("docs/%s links to %s, which does not exist", name, target))
          if anchor ~= "" then
            T.ok(anchors_of(kb.fs.read(path))[anchor],
              string.format("docs/%s links to %s: no such heading", name, target))
          end
        end
      end
    end
  end
end)

-- ---- the documents ------------------------------------------------------------

local bin = kbrun_binary()
local bindir = kb.fs.dirname(bin)
-- sh blocks call `kbrun`: make sure that name is the binary under test.
local linkdir = kb.fs.tmpdir("kbrun-docs-bin")
if kb.fs.basename(bin) ~= "kbrun" then
  kb.process.run { cmd = { "ln", "-s", bin, kb.fs.join(linkdir, "kbrun") }, check = true }
  bindir = linkdir
end

for _, doc in ipairs(DOCS) do
  local text = kb.fs.read(kb.fs.join(ROOT, doc))
  local blocks = fenced_blocks(text)
  local tagged = 0
  local workdir = kb.fs.tmpdir("kbrun-docs")
  for _, block in ipairs(blocks) do
    local kind, arg = marker(block)
    if kind then tagged = tagged + 1 end
    if kind == "snippet" then
      T.case(where(doc, block), function() run_snippet(doc, block) end)
    elseif kind == "file" then
      T.case(where(doc, block) .. " (file " .. arg .. ")", function()
        local path = kb.fs.join(workdir, arg)
        kb.fs.mkdir(kb.fs.dirname(path))
        kb.fs.write(path, table.concat(block.lines, "\n", 2) .. "\n", { sync = false })
      end)
    elseif kind == "sh" then
      T.case(where(doc, block) .. " (sh)", function() run_shell(doc, block, workdir, bindir) end)
    end
  end
  T.case(doc .. " has examples under test", function()
    T.ok(tagged >= 10, string.format("%s: only %d doctest blocks", doc, tagged))
  end)
  T.case(doc .. ": clean up", function() kb.fs.remove(workdir, { recursive = true }) end)
end

T.case("clean up", function() kb.fs.remove(linkdir, { recursive = true }) end)

T.run()
