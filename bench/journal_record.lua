-- Cost of journaling measurements (see bench/journal.md):
--   kbrun -q -o /tmp/kb-bench bench/journal_record.lua [n=200000] [runs=5]
-- Prints median ns per value for: h:record on a plain kb.hist; h:record on
-- a registered histogram while kbrun's run journal is attached (the value
-- noted, batches encoded and written at each flush, flush time included);
-- counter:inc likewise; and one kb.json.encode + write(2) per record
-- (a write-through journal line), for comparison.
local kb = require "kb"
local hist = require "kb.hist"
local metrics = require "kb.metrics"
local journal = require "kb.journal"

local function run(p)
  local n, runs = p.n, p.runs
  local vals, s = {}, 12345
  for i = 1, n do
    s = (s * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    vals[i] = 10 ^ ((s >> 11) / (1 << 52) * math.log(3.6e9, 10)) * 1e-6
  end
  local j = metrics.journal()
  assert(j, "run this with kbrun: it attaches the run journal")
  local function time(fn)
    collectgarbage()
    local t0 = os.clock()
    fn()
    return (os.clock() - t0) / n * 1e9
  end
  local function median(fn)
    local t = {}
    for r = 1, runs do t[r] = fn(r) end
    table.sort(t)
    return t[(runs + 1) // 2]
  end
  local plain = median(function()
    local h = hist.new()
    -- detached: the journal wrapper's lookup only
    return time(function() for i = 1, n do h:record(vals[i]) end end)
  end)
  local journaled = median(function(r)
    local h = metrics.histogram("bench.journal", { r = r })
    return time(function()
      for i = 1, n do h:record(vals[i]) end
      j:flush()
    end)
  end)
  local counted = median(function(r)
    local c = metrics.counter("bench.counter", { r = r })
    return time(function()
      for _ = 1, n do c:inc() end
      j:flush()
    end)
  end)
  local wt = journal.open(kb.exp:path("output", "bench-write-through.jsonl"))
  local lines = median(function()
    return time(function()
      for i = 1, n do wt:write({ k = "h", m = "bench", t = 1.5, v = vals[i] }) end
    end)
  end)
  wt:close()
  local out = {
    string.format("h:record, plain kb.hist (wrapper lookup): %7.0f ns/value", plain),
    string.format("h:record, journaled (incl. flushes):      %7.0f ns/value", journaled),
    string.format("counter:inc, journaled (incl. flushes):   %7.0f ns/inc", counted),
    string.format("one JSON line + write(2) per record:      %7.0f ns/record", lines),
  }
  print(table.concat(out, "\n"))
  return { plain_ns = plain, journaled_ns = journaled, counter_ns = counted, line_ns = lines }
end

return { name = "journal_record", params = { n = 200000, runs = 5 }, run = run }
