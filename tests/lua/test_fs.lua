-- kb.fs (src/lua/fs.c) and kb.journal (lua/kb/journal.lua).
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local journal = require "kb.journal"

-- A fresh directory for this file's cases.
local root
do
  local out = os.getenv("KBRUN_TEST_OUT")
  if out then
    root = fs.join(fs.abspath(out), "test_fs")
    fs.remove(root, { recursive = true })
    fs.mkdir(root)
  else
    root = fs.tmpdir("kbrun-test-fs")
  end
end

local function path(...) return fs.join(root, ...) end

-- A fresh empty directory per case.
local cases = 0
local function scratch()
  cases = cases + 1
  return fs.mkdir(path("case" .. cases))
end

local function shell(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

T.case("write then read back, no temp file left behind", function()
  local dir = scratch()
  local file = fs.join(dir, "result.json")
  fs.write(file, "first")
  T.eq(fs.read(file), "first")
  fs.write(file, "second, longer")
  T.eq(fs.read(file), "second, longer")
  local binary = "a\0b\255\n" .. string.rep("x", 1 << 20)
  fs.write(file, binary, { sync = false })
  T.eq(fs.read(file), binary)
  fs.write(file, "")
  T.eq(fs.read(file), "")
  T.same(fs.list(dir), { "result.json" })
end)

T.case("write into a missing directory is a clear error", function()
  local dir = scratch()
  local target = fs.join(dir, "missing", "x.txt")
  local err = T.raises(fs.write, nil, target, "data")
  T.eq(err.class, "fs")
  T.eq(err.message, "kb.fs.write: cannot create '" .. target .. "': No such file or directory")
  T.eq(tostring(err), "fs: " .. err.message)
  T.eq(err.path, target)
  T.eq(err.code, "ENOENT")
  T.eq(err.reason, "No such file or directory")
  T.same(fs.list(dir), {})
end)

T.case("write over a directory fails and cleans up its temp file", function()
  local dir = scratch()
  fs.mkdir(fs.join(dir, "sub"))
  local err = T.raises(fs.write, nil, fs.join(dir, "sub"), "x")
  T.eq(err.message, "kb.fs.write: cannot replace '" .. fs.join(dir, "sub") .. "': Is a directory")
  T.same(fs.list(dir), { "sub" })
  err = T.raises(fs.write, nil, dir .. "/", "x")
  T.eq(err.message, "kb.fs.write: cannot write '" .. dir .. "/': Is a directory")
end)

T.case("read errors name the path and the reason", function()
  local dir = scratch()
  local missing = fs.join(dir, "x")
  local err = T.raises(fs.read, nil, missing)
  T.eq(err.message, "kb.fs.read: cannot open '" .. missing .. "': No such file or directory")
  T.eq(err.errno, 2)
  err = T.raises(fs.read, nil, dir)
  T.eq(err.message, "kb.fs.read: cannot read '" .. dir .. "': Is a directory")
  T.raises(fs.read, "bad argument #1 to 'kb.fs.read' (string expected, got no value)")
end)

T.case("read works on files without a size (/proc)", function()
  T.contains(fs.read("/proc/self/status"), "Pid:")
end)

T.case("append adds to the end and creates the file", function()
  local dir = scratch()
  local file = fs.join(dir, "log.txt")
  fs.append(file, "one\n")
  fs.append(file, "two\n")
  T.eq(fs.read(file), "one\ntwo\n")
  local bad = fs.join(dir, "no", "log.txt")
  local err = T.raises(fs.append, nil, bad, "x")
  T.eq(err.message, "kb.fs.append: cannot open '" .. bad .. "': No such file or directory")
end)

T.case("open_append writes each call through", function()
  local dir = scratch()
  local file = fs.join(dir, "j.txt")
  do
    local h <close> = fs.open_append(file)
    T.contains(tostring(h), "kb.fs.appender: " .. file .. " (open)")
    T.eq(h:write("a", "b", 1, "\n"), h)
    T.eq(fs.read(file), "ab1\n") -- visible before close: no user-space buffer
    h:write("c\n"):write("d\n")
    h:sync()
  end
  T.eq(fs.read(file), "ab1\nc\nd\n")
  local h = fs.open_append(file)
  h:close()
  h:close() -- a second close is a no-op
  T.contains(tostring(h), "(closed)")
  T.raises(h.write, "kb.fs appender for '" .. file .. "' is closed", h, "x")
  local err = T.raises(fs.open_append, nil, fs.join(dir, "no", "j.txt"))
  T.eq(err.message, "kb.fs.open_append: cannot open '" .. fs.join(dir, "no", "j.txt") ..
    "': No such file or directory")
end)

T.case("mkdir creates parents and accepts existing directories", function()
  local dir = scratch()
  local deep = fs.join(dir, "a", "b", "c")
  T.eq(fs.mkdir(deep), deep)
  T.eq(fs.exists(deep), "dir")
  T.eq(fs.mkdir(deep), deep)
  T.eq(fs.mkdir(deep .. "/"), deep .. "/")
  T.eq(fs.mkdir(fs.join(dir, "a//x///")), fs.join(dir, "a//x///"))
  T.eq(fs.exists(fs.join(dir, "a", "x")), "dir")
  local file = fs.join(dir, "file")
  fs.write(file, "x")
  local err = T.raises(fs.mkdir, nil, file)
  T.eq(err.message, "kb.fs.mkdir: cannot create directory '" .. file .. "': File exists")
  err = T.raises(fs.mkdir, nil, fs.join(file, "sub", "dir"))
  T.eq(err.message, "kb.fs.mkdir: cannot create directory '" .. fs.join(file, "sub", "dir") ..
    "': Not a directory")
end)

T.case("list is sorted bytewise and encodes as a JSON array", function()
  local dir = scratch()
  for _, name in ipairs({ "b", "a", "C", "a.txt", "10", "9" }) do fs.write(fs.join(dir, name), "") end
  fs.mkdir(fs.join(dir, "sub"))
  T.same(fs.list(dir), { "10", "9", "C", "a", "a.txt", "b", "sub" })
  local empty = fs.mkdir(fs.join(dir, "sub"))
  T.eq(json.encode(fs.list(empty)), "[]")
  local err = T.raises(fs.list, nil, fs.join(dir, "none"))
  T.eq(err.message, "kb.fs.list: cannot list '" .. fs.join(dir, "none") .. "': No such file or directory")
end)

T.case("exists and stat", function()
  local dir = scratch()
  local file = fs.join(dir, "f")
  fs.write(file, "12345")
  T.eq(fs.exists(file), "file")
  T.eq(fs.exists(dir), "dir")
  T.eq(fs.exists("/dev/null"), "other")
  T.eq(fs.exists(fs.join(dir, "none")), false)
  T.eq(fs.exists(fs.join(file, "under-a-file")), false)
  local st = fs.stat(file)
  T.eq(st.type, "file")
  T.eq(st.size, 5)
  T.eq(math.type(st.mode), "integer")
  T.ok(type(st.mtime) == "number" and st.mtime > 1e9, "mtime is a Unix time")
  T.eq(fs.stat(dir).type, "dir")
  local err = T.raises(fs.stat, nil, fs.join(dir, "none"))
  T.eq(err.message, "kb.fs.stat: cannot stat '" .. fs.join(dir, "none") .. "': No such file or directory")
end)

T.case("remove files, empty directories and trees", function()
  local dir = scratch()
  local file = fs.join(dir, "f")
  fs.write(file, "x")
  T.eq(fs.remove(file), true)
  T.eq(fs.remove(file), false)
  T.eq(fs.exists(file), false)

  local tree = fs.join(dir, "tree")
  fs.mkdir(fs.join(tree, "a", "b"))
  fs.write(fs.join(tree, "a", "b", "deep.txt"), "x")
  fs.write(fs.join(tree, "top.txt"), "x")
  local err = T.raises(fs.remove, nil, tree)
  T.eq(err.message, "kb.fs.remove: cannot remove '" .. tree .. "': Directory not empty")
  T.eq(err.code, "ENOTEMPTY")

  -- a symlink inside the tree is removed, its target is not touched
  local outside = fs.mkdir(fs.join(dir, "outside"))
  fs.write(fs.join(outside, "keep.txt"), "keep")
  T.eq(shell("ln -s '" .. outside .. "' '" .. fs.join(tree, "a", "link") .. "' && echo ok"), "ok\n")

  T.eq(fs.remove(tree .. "/", { recursive = true }), true)
  T.eq(fs.exists(tree), false)
  T.eq(fs.read(fs.join(outside, "keep.txt")), "keep")
  T.eq(fs.remove(tree, { recursive = true }), false)

  fs.mkdir(fs.join(dir, "empty"))
  T.eq(fs.remove(fs.join(dir, "empty")), true)
end)

T.case("remove refuses the root, '' and dot paths", function()
  for _, p in ipairs({ "/", "", "//", "/..", ".", "..", root .. "/.", root .. "/..", "/tmp/.." }) do
    T.raises(fs.remove, "kb.fs.remove: refusing to remove '" .. p .. "'", p, { recursive = true })
  end
  T.eq(fs.exists(root), "dir")
end)

T.case("with_lock returns fn's results and always unlocks", function()
  local dir = scratch()
  local target = fs.join(dir, "report.csv")
  local lock = target .. ".lock"
  local probe = "flock -n '" .. lock .. "' true && echo free || echo held"
  local a, b = fs.with_lock(target, function(x, y)
    T.eq(shell(probe), "held\n") -- another process cannot take it
    return x + y, "two"
  end, 40, 2)
  T.eq(a, 42)
  T.eq(b, "two")
  T.eq(fs.exists(lock), "file")
  T.eq(shell(probe), "free\n")

  local err = T.raises(fs.with_lock, "boom", target, function() error("boom") end)
  T.contains(tostring(err), "boom")
  T.eq(shell(probe), "free\n")

  T.raises(fs.with_lock, "kb.fs.with_lock: '" .. lock .. "' is already held by this process",
    target, function() return fs.with_lock(target, function() end) end)
  local other_spelling = fs.join(dir, ".", "report.csv")
  T.raises(fs.with_lock, "kb.fs.with_lock: '" .. other_spelling .. ".lock' is already held",
    target, function() return fs.with_lock(other_spelling, function() end) end)
  T.eq(fs.with_lock(target, function() return "again" end), "again")

  T.raises(fs.with_lock, "attempt to yield across a C-call boundary", target, function() kb.sleep(0) end)
  T.eq(shell(probe), "free\n")

  local missing = fs.join(dir, "no", "report.csv")
  err = T.raises(fs.with_lock, nil, missing, function() end)
  T.eq(err.message, "kb.fs.with_lock: cannot open '" .. missing .. ".lock': No such file or directory")
  T.raises(fs.with_lock, "bad argument #2 to 'kb.fs.with_lock' (function expected, got no value)", target)
end)

T.case("join, dirname, basename, abspath", function()
  T.eq(fs.join("a", "b", "c"), "a/b/c")
  T.eq(fs.join("a/", "/b/", "c/"), "a/b/c/")
  T.eq(fs.join("/", "a"), "/a")
  T.eq(fs.join("", "a", "", "b"), "a/b")
  T.eq(fs.join(), "")
  T.eq(fs.dirname("a/b"), "a")
  T.eq(fs.dirname("a/b/"), "a")
  T.eq(fs.dirname("a"), ".")
  T.eq(fs.dirname("/a"), "/")
  T.eq(fs.dirname("/"), "/")
  T.eq(fs.dirname("a//b"), "a")
  T.eq(fs.dirname(""), ".")
  T.eq(fs.basename("a/b"), "b")
  T.eq(fs.basename("a/b/"), "b")
  T.eq(fs.basename("b"), "b")
  T.eq(fs.basename("/"), "/")
  T.eq(fs.basename(""), "")
  T.eq(fs.abspath("/a/./b/../c//d/"), "/a/c/d")
  T.eq(fs.abspath("/.."), "/")
  T.eq(fs.abspath("/"), "/")
  local cwd = fs.abspath(".")
  T.eq(cwd:sub(1, 1), "/")
  T.eq(fs.abspath("x/../y"), fs.join(cwd, "y"))
end)

T.case("tmpdir makes a fresh private directory", function()
  local a, b = fs.tmpdir(), fs.tmpdir("kbrun-t")
  T.ok(a ~= b)
  T.eq(fs.exists(a), "dir")
  T.contains(fs.basename(b), "kbrun-t-")
  T.eq(fs.stat(a).mode, 448) -- 0700
  T.eq(fs.remove(a), true)
  T.eq(fs.remove(b), true)
  T.raises(fs.tmpdir, "prefix must not contain '/'", "a/b")
end)

T.case("journal: write, read, and a truncated last line", function()
  local dir = scratch()
  local file = fs.join(dir, "output", "journal.jsonl")
  local j = journal.open(file)
  for i = 1, 3 do j:write({ i = i, event = "run.done", note = "line\nbreak" }) end
  T.eq(j.count, 3)
  j:close()
  T.raises(j.write, "kb.journal: '" .. file .. "' is closed", j, {})
  local records, skipped = journal.read(file)
  T.eq(#records, 3)
  T.eq(skipped, 0)
  T.same(records[2], { i = 2, event = "run.done", note = "line\nbreak" })

  fs.append(file, '{"i": 4, "event": "ru') -- a kill in the middle of a write
  records, skipped = journal.read(file)
  T.eq(#records, 3)
  T.eq(skipped, 1)

  do
    local again <close> = journal.open(file) -- ends the partial line first
    again:write({ i = 5 })
  end
  records, skipped = journal.read(file)
  T.eq(#records, 4)
  T.eq(skipped, 1)
  T.eq(records[4].i, 5)

  local err = T.raises(journal.read, nil, fs.join(dir, "none.jsonl"))
  T.eq(err.class, "fs")
end)

T.case("journal: records written before a SIGKILL survive", function()
  local bin = T.ok(os.getenv("KBRUN_BIN"), "KBRUN_BIN names the kbrun binary")
  local dir = scratch()
  local file = fs.join(dir, "journal.jsonl")
  local script = fs.join(dir, "killed.lua")
  fs.write(script, string.format([[
    local journal = require "kb.journal"
    local j = journal.open(%q)
    for i = 1, 3 do j:write({ i = i }) end
    os.execute("kill -KILL $PPID")
    require("kb").sleep(5)
    j:write({ i = "never" })
  ]], file))
  shell(string.format("'%s' -q -o '%s' '%s' >/dev/null 2>&1", bin, fs.join(dir, "out"), script))
  local records, skipped = journal.read(file)
  T.eq(#records, 3)
  T.eq(skipped, 0)
  T.eq(records[3].i, 3)
end)

T.case("big writes and reads run off the loop: other tasks run while they happen", function()
  local dir = scratch()
  local file = fs.join(dir, "big.bin")
  local data = string.rep("0123456789abcdef", 4 << 20) -- 64 MiB
  -- a task that counts loop turns: it runs whenever the loop is free
  local ticks, running = 0, true
  local ticker = kb.spawn(function()
    while running do
      ticks = ticks + 1
      kb.sleep(0)
    end
  end)
  fs.write(file, data) -- with fsync: the thread pool, the task awaits
  local during_write = ticks
  local back = fs.read(file)
  local during_read = ticks - during_write
  running = false
  ticker:wait()
  T.ok(during_write > 0, "the ticker ran while 64 MiB were written and fsynced")
  T.ok(during_read > 0, "the ticker ran while 64 MiB were read")
  T.eq(#back, #data)
  T.ok(back == data, "read back the same bytes")
  T.same(fs.list(dir), { "big.bin" }, "no temp file left")
  -- the errors are the same as on the loop
  local err = T.raises(fs.write, nil, fs.join(dir, "missing", "x"), data)
  T.eq(err.message, "kb.fs.write: cannot create '" .. fs.join(dir, "missing", "x") ..
    "': No such file or directory")
  err = T.raises(fs.read, nil, fs.join(dir, "nope"))
  T.eq(err.code, "ENOENT")
end)

T.case("outside a yieldable task (with_lock's function) big files are read and written in place", function()
  local dir = scratch()
  local file = fs.join(dir, "big.bin")
  local data = string.rep("z", 1 << 20)
  local back = fs.with_lock(file, function()
    fs.write(file, data)
    return fs.read(file)
  end)
  T.ok(back == data)
end)

T.case("an appender that is collected, never closed, is closed without fsync", function()
  -- strace names the file of each fsync/close; without strace (or ptrace)
  -- the case says so and checks nothing
  if not os.execute("command -v strace >/dev/null 2>&1") then
    io.stderr:write("test_fs: no strace; the __gc case is skipped\n")
    return
  end
  local dir = scratch()
  local target = fs.join(dir, "collected.log")
  local script = fs.join(dir, "gc.lua")
  fs.write(script, string.format([[
local fs = require "kb.fs"
do
  local a = fs.open_append(%q)
  a:write("collected, never closed\n")
end
collectgarbage("collect")
collectgarbage("collect")
]], target))
  local trace = fs.join(dir, "strace.txt")
  local r = kb.process.run { cmd = { "strace", "-f", "-y", "-e", "trace=fsync,fdatasync,close", "-o", trace,
    assert(os.getenv("KBRUN_BIN")), "-q", "-o", fs.join(dir, "out"), script }, timeout = 60 }
  if r.code ~= 0 and r.stderr:find("ptrace", 1, true) then
    io.stderr:write("test_fs: strace cannot trace here; the __gc case is skipped\n")
    return
  end
  T.eq(r.code, 0, r.stderr)
  local text = fs.read(trace)
  local name = "<" .. target .. ">"
  T.ok(text:find("close%(%d+" .. name:gsub("%p", "%%%0")), "the collected appender was closed")
  T.ok(not text:find("sync%(%d+" .. name:gsub("%p", "%%%0")), "and not fsynced: " .. text)
  T.eq(fs.read(target), "collected, never closed\n")
end)

T.run()
if not os.getenv("KBRUN_TEST_OUT") then fs.remove(root, { recursive = true }) end
