-- Cost of h:record from a kbrun scenario (see bench/README.md):
--   kbrun -q -o /tmp/kb-bench bench/hist_record.lua [n=1000000] [runs=7]
-- Prints the median ns per h:record call over `runs` runs of `n` log-uniform
-- values (1 us .. 1 h), with the cost of the bare loop subtracted.
local hist = require "kb.hist"

local function run(p)
  local n, runs = p.n, p.runs
  local vals, s = {}, 12345
  for i = 1, n do
    s = (s * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    vals[i] = 10 ^ ((s >> 11) / (1 << 52) * math.log(3.6e9, 10)) * 1e-6
  end
  local function time(fn)
    local t0 = os.clock()
    fn()
    return (os.clock() - t0) / n * 1e9
  end
  local rec, loop = {}, {}
  for r = 1, runs do
    local h = hist.new()
    rec[r] = time(function() for i = 1, n do h:record(vals[i]) end end)
    assert(h:count() == n)
    local sum = 0
    loop[r] = time(function() for i = 1, n do sum = sum + vals[i] end end)
    collectgarbage()
  end
  table.sort(rec)
  table.sort(loop)
  local mrec, mloop = rec[(runs + 1) // 2], loop[(runs + 1) // 2]
  print(string.format("h:record loop %.1f ns/value, bare loop %.1f ns/value, h:record %.1f ns/call",
    mrec, mloop, mrec - mloop))
  return { record_loop_ns = mrec, bare_loop_ns = mloop, record_ns = mrec - mloop }
end

return {
  name = "hist_record",
  params = { n = 1000000, runs = 7 },
  run = run,
}
