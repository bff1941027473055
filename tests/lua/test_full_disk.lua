-- A full disk (docs/results.md, "When a result file cannot be written"):
-- kb.csv writers and kb.journal never raise for a failed write, keep what
-- the disk refused in memory, in order, tell kb.outputs (path and the
-- system's message), and write it all when space is back; an appender's
-- write is whole or nothing. On a real full filesystem: a small tmpfs,
-- mounted by the test (root, or a namespace that allows it); without one
-- every case says so and fails nothing (the e2e full_disk test is skipped
-- the same way).
local T = require "kb.testing"
local fs = require "kb.fs"
local csv = require "kb.csv"
local journal = require "kb.journal"
local outputs = require "kb.outputs"

local base = fs.tmpdir("kbrun-test-full-disk")
local mnt = fs.mkdir(fs.join(base, "mnt"))
local mounted = os.execute(string.format("mount -t tmpfs -o size=32k tmpfs '%s' 2>/dev/null", mnt)) == true
if not mounted then io.stderr:write("test_full_disk: cannot mount a tmpfs; cases skipped\n") end

local FILLER = fs.join(mnt, "filler")

-- Fills the tmpfs: appends 4 KiB blocks to the filler until the disk says
-- ENOSPC (each block is whole or absent: tmpfs allocates pages).
local function fill()
  local block = string.rep("f", 4096)
  for _ = 1, 64 do
    local ok, err = pcall(fs.append, FILLER, block)
    if not ok then
      T.eq(err.code, "ENOSPC", tostring(err))
      return
    end
  end
  error("the tmpfs never filled up")
end

local function free() fs.remove(FILLER) end

local cases = 0
local function scratch()
  cases = cases + 1
  return fs.mkdir(fs.join(mnt, "case" .. cases))
end

local function failure_of(path)
  for _, f in ipairs(outputs.failed()) do
    if f.path == fs.abspath(path) then return f end
  end
  return nil
end

local function case(name, fn)
  T.case(name, function()
    if not mounted then return end
    local ok, err = pcall(fn)
    pcall(free)
    -- the next case starts on an empty disk with nothing left registered
    pcall(fs.remove, fs.join(mnt, "case" .. cases), { recursive = true })
    for _, f in ipairs(outputs.failed()) do
      if f.path:sub(1, #mnt) == mnt then outputs.resolve(f.path) end
    end
    if not ok then error(err, 0) end
  end)
end

case("a csv writer keeps the rows a full disk refused and writes them in order later", function()
  local dir = scratch()
  local path = fs.join(dir, "latencies.csv")
  local w = csv.writer(path, { "op", "latency" })
  w:write { "run.create", 0.25 }
  fill()
  local rows = { { "run.create", 0.25 } }
  -- ~16 KiB: more than the rest of the file's last page (written still)
  for i = 1, 1000 do
    rows[#rows + 1] = { "run.get", i / 1000 }
    w:write(rows[#rows]) -- never raises
  end
  T.eq(w.rows, 1001)
  local f = failure_of(path)
  T.ok(f, "the failure is registered")
  T.eq(f.error, "No space left on device")
  T.eq(f.code, "ENOSPC")
  T.contains(f.message, path)
  local held = tonumber(f.unsaved:match("^(%d+) rows$"))
  T.ok(held and held > 500, f.unsaved)
  local partial = csv.parse(fs.read(path))
  T.eq(#partial, 1 + 1001 - held, "the rows on disk are whole, the rest held")
  free()
  w:close() -- the last try: everything goes out, in order
  T.eq(failure_of(path), nil, "resolved once written")
  T.eq(fs.read(path), csv.encode(rows, { "op", "latency" }))
end)

case("a buffered csv writer keeps a refused flush row by row and writes it in order later", function()
  local dir = scratch()
  local path = fs.join(dir, "latencies.csv")
  local w = csv.writer(path, { "op", "latency" }, { buffered = true })
  w:write { "run.create", 0.25 }
  w:flush()
  fill()
  local rows = { { "run.create", 0.25 } }
  for i = 1, 1000 do
    rows[#rows + 1] = { "run.get", i / 1000 }
    w:write(rows[#rows]) -- never raises; the 512th makes a flush the disk refuses
  end
  w:flush()
  local f = failure_of(path)
  T.ok(f, "the failure is registered")
  T.eq(f.code, "ENOSPC")
  local held = tonumber(f.unsaved:match("^(%d+) rows$"))
  T.ok(held and held >= 500, f.unsaved)
  T.eq(#csv.parse(fs.read(path)), 1 + 1001 - held, "the rows on disk are whole, the rest held")
  free()
  w:close()
  T.eq(failure_of(path), nil, "resolved once written")
  T.eq(fs.read(path), csv.encode(rows, { "op", "latency" }))
end)

case("a csv writer created on a full disk writes its header and rows at the end", function()
  local dir = scratch()
  local path = fs.join(dir, "latencies.csv")
  fill()
  local w = csv.writer(path, { "op", "latency" })
  w:write { "a", 1 }
  w:write { op = "b", latency = 2 }
  T.eq(failure_of(path).unsaved, "the header and 2 rows")
  w:close()
  T.eq(failure_of(path).unsaved, "the header and 2 rows", "still full at close")
  free()
  outputs.retry()
  T.eq(failure_of(path), nil, "outputs.retry writes what close could not")
  T.eq(fs.read(path), "op,latency\na,1\nb,2\n")
end)

case("a buffered journal holds its records while the disk is full, then writes all", function()
  local dir = scratch()
  local path = fs.join(dir, "journal.jsonl")
  local j = journal.open(path, { interval = 60 })
  j:write { n = 0 }
  j:flush()
  fill()
  for i = 1, 100 do
    j:write { n = i, pad = string.rep("p", 100) }
    if i % 10 == 0 then j:flush() end -- each flush fails, nothing raises
  end
  local f = failure_of(path)
  T.ok(f, "registered")
  T.eq(f.error, "No space left on device")
  local held = tonumber(f.unsaved:match("^(%d+) records$"))
  T.ok(held and held >= 50, f.unsaved)
  local partial, skipped0 = journal.read(path)
  T.eq(skipped0, 0, "no half line")
  T.eq(#partial, 101 - held)
  free()
  j:flush()
  T.eq(failure_of(path), nil)
  local records, skipped = journal.read(path)
  T.eq(skipped, 0)
  T.eq(#records, 101)
  for i, r in ipairs(records) do T.eq(r.n, i - 1) end
  j:close()
end)

case("a write-through journal closed on a full disk is written by outputs.retry", function()
  local dir = scratch()
  local path = fs.join(dir, "journal.jsonl")
  local j = journal.open(path)
  fill()
  for i = 1, 20 do j:write { n = i, pad = string.rep("x", 100) } end
  j:close()
  T.eq(failure_of(path).unsaved, "20 records")
  outputs.retry()
  T.eq(failure_of(path).unsaved, "20 records", "still full")
  free()
  outputs.retry()
  T.eq(failure_of(path), nil)
  local records = journal.read(path)
  T.eq(#records, 20)
  T.eq(records[20].n, 20)
end)

case("an appender's write is whole or nothing on a full disk", function()
  local dir = scratch()
  local path = fs.join(dir, "x.log")
  local a <close> = fs.open_append(path)
  a:write("first\n")
  fill()
  free()
  -- write records until one does not fit
  local big = string.rep("y", 20 * 1024 - 1) .. "\n"
  local ok, err = pcall(a.write, a, big)
  while ok do ok, err = pcall(a.write, a, big) end
  T.eq(err.code, "ENOSPC")
  local size = fs.stat(path).size
  T.eq((size - 6) % #big, 0, "the cut record was taken back")
  T.eq(fs.read(path):sub(-1), "\n", "ends whole")
end)

case("kb.fs.append is whole or nothing on a full disk", function()
  local dir = scratch()
  local path = fs.join(dir, "report.csv")
  fs.append(path, "a,b\n")
  local row = string.rep("1", 20 * 1024 - 1) .. "\n"
  local ok, err = pcall(fs.append, path, row)
  while ok do ok, err = pcall(fs.append, path, row) end
  T.eq(err.code, "ENOSPC")
  T.eq((fs.stat(path).size - 4) % #row, 0, "the cut row was taken back")
  T.eq(fs.read(path):sub(-1), "\n")
end)

T.case("kb.fs tells the write hook of failures and completed writes", function()
  local seen = {}
  local old = fs.set_write_hook(function(p, e) seen[#seen + 1] = { p, e and e.code or "ok" } end)
  local dir = fs.tmpdir("kbrun-hook")
  pcall(fs.write, fs.join(dir, "missing", "x"), "data")
  fs.write(fs.join(dir, "y"), "data")
  fs.append(fs.join(dir, "z"), "data")
  fs.set_write_hook(old)
  fs.remove(dir, { recursive = true })
  T.same(seen, { { fs.join(dir, "missing", "x"), "ENOENT" }, { fs.join(dir, "y"), "ok" },
    { fs.join(dir, "z"), "ok" } })
end)

local ok, err = pcall(T.run)
if mounted then os.execute(string.format("umount '%s'", mnt)) end
fs.remove(base, { recursive = true })
if not ok then error(err, 0) end
