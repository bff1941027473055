-- kb.hist: recording, percentiles within 3 significant digits, rounding
-- rules, merge, encode/decode, buckets/bins, errors.
local T = require "kb.testing"
local hist = require "kb.hist"

local US = 1e-6

-- A deterministic generator independent of math.random's seed.
local function lcg(seed)
  local s = seed
  return function()
    s = (s * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return (s >> 11) / (1 << 52)
  end
end

-- The exact p-th percentile of a sorted array: the value at rank ceil(p/100*n).
local function exact_percentile(sorted, p)
  local rank = math.max(1, math.ceil(p / 100 * #sorted - 1e-9))
  return sorted[math.min(rank, #sorted)]
end

-- Within the histogram's resolution: HDR reports the top of the bucket
-- (at most 1/1024 above), and values are rounded to whole microseconds.
local function within_resolution(got, exact, what)
  T.ok(got >= exact - 0.5 * US - 1e-12 and got <= exact * (1 + 1 / 1024) + US,
    string.format("%s: %.9g not within resolution of %.9g", what, got, exact))
end

T.case("defaults and layout", function()
  local h = hist.new()
  T.same(h:layout(), { lowest = 1e-6, highest = 3600, digits = 3 })
  T.eq(h:count(), 0)
  T.eq(#h, 0)
  T.ok(hist.is(h))
  T.ok(not hist.is({}))
  local g = hist.new { lowest = 1e-3, highest = 100, digits = 2 }
  T.same(g:layout(), { lowest = 1e-3, highest = 100, digits = 2 })
end)

T.case("empty histogram gives nil statistics", function()
  local h = hist.new()
  T.eq(h:min(), nil)
  T.eq(h:max(), nil)
  T.eq(h:mean(), nil)
  T.eq(h:stddev(), nil)
  T.eq(h:percentile(50), nil)
  T.same(h:summary(), { count = 0, saturated = 0 })
  T.same(h:buckets(), {})
  T.same(h:bins { n = 10 }, {})
  T.contains(tostring(h), "kb.hist: empty (lowest=1e-06 highest=3600 digits=3)")
end)

T.case("percentile rounding rule", function()
  local h = hist.new()
  for i = 1, 10 do h:record(i * US) end
  T.near(h:percentile(0), 1 * US, 1e-15)      -- rank is at least 1
  T.near(h:percentile(10), 1 * US, 1e-15)     -- rank ceil(1.0) = 1
  T.near(h:percentile(10.5), 2 * US, 1e-15)
  T.near(h:percentile(50), 5 * US, 1e-15)
  T.near(h:percentile(50.01), 6 * US, 1e-15)  -- rank ceil(5.001) = 6
  T.near(h:percentile(100), 10 * US, 1e-15)
  h:reset()
  for i = 1, 1000 do h:record(i * US) end
  T.near(h:percentile(99.9), 999 * US, 1e-15) -- not bumped by 99.9's binary error
  -- reported as the highest value of the bucket, capped at the max:
  -- 1.000001 s lies in the bucket 0.999936 .. 1.000447 s
  h:reset()
  h:record(1.000001)
  T.near(h:percentile(50), 1.000001, 1e-12)
  h:record(2)
  T.near(h:percentile(50), 1.000447, 1e-12)
end)

T.case("percentiles on uniform values", function()
  local h = hist.new()
  local vals = {}
  for i = 1, 20000 do
    vals[i] = i * 0.5e-3 -- 0.5 ms .. 10 s
    h:record(vals[i])
  end
  for _, p in ipairs { 0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100 } do
    within_resolution(h:percentile(p), exact_percentile(vals, p), "p" .. p)
  end
  T.eq(h:min(), 0.5e-3)
  T.eq(h:max(), 10.0)
end)

T.case("percentiles across many decades", function()
  local rnd = lcg(7)
  local h = hist.new()
  local vals = {}
  for i = 1, 20000 do
    vals[i] = 10 ^ (rnd() * 8 - 5) -- 10 us .. 1000 s, log-uniform
    h:record(vals[i])
  end
  table.sort(vals)
  for p = 0, 100, 2.5 do
    within_resolution(h:percentile(p), exact_percentile(vals, p), "p" .. p)
  end
  local ps = h:percentiles { 50, 90, 99, 99.9 }
  for _, p in ipairs { 50, 90, 99, 99.9 } do
    T.eq(ps[p], h:percentile(p), "percentiles[" .. p .. "]")
  end
  -- mean and stddev within half a bucket of the exact ones
  local sum, sq = 0, 0
  for _, v in ipairs(vals) do sum, sq = sum + v, sq + v * v end
  local mean = sum / #vals
  T.near(h:mean(), mean, mean / 2048 + US)
  T.near(h:stddev(), math.sqrt(sq / #vals - mean * mean), math.sqrt(sq / #vals) / 2048 + US)
  local s = h:summary()
  T.eq(s.count, 20000)
  T.eq(s.p999, h:percentile(99.9))
  T.eq(s.p95, h:percentile(95))
  T.eq(s.min, h:min())
  T.eq(s.stddev, h:stddev())
end)

T.case("value rounding, zero, below lowest, saturation", function()
  local h = hist.new()
  h:record(0)
  T.eq(h:min(), 0.0)
  h:record(1e-9) -- below lowest counts as lowest
  T.eq(h:count(), 2)
  T.eq(h:percentile(100), 1e-6)
  h:reset()
  h:record(1.4e-6)
  T.near(h:max(), 1e-6, 1e-15) -- nearest microsecond
  h:record(1.6e-6)
  T.near(h:max(), 2e-6, 1e-15)
  h:reset()
  h:record(7200)
  h:record(math.huge, 2)
  T.eq(h:saturated(), 3)
  T.eq(h:count(), 3)
  T.near(h:max(), 3600, 1e-9)
  T.eq(h:summary().saturated, 3)
  h:record(5, 1000000)
  T.eq(#h, 1000003)
  h:record(5, 0)
  T.eq(#h, 1000003)
end)

T.case("argument errors", function()
  local h = hist.new()
  T.raises(function() h:record(-1) end, "value must be >= 0, got -1")
  T.raises(function() h:record(0 / 0) end, "value is NaN")
  T.raises(function() h:record("x") end, "number expected")
  T.raises(function() h:record(1, -1) end, "count must be >= 0")
  T.raises(function() h:record(1, 1.5) end, "number has no integer representation")
  T.raises(function() h:percentile(101) end, "percentile must be between 0 and 100, got 101")
  T.raises(function() h:percentile(-0.5) end, "percentile must be between 0 and 100")
  T.raises(function() h:percentiles { 50, "x" } end, "percentile #2 is a string, not a number")
  T.raises(function() h:record_corrected(1, -0.1) end, "expected interval must be >= 0")
  T.raises(function() h.record({}, 1) end, "kb.hist expected")
  T.raises(function() hist.new { digits = 6 } end, "digits must be an integer from 1 to 5")
  T.raises(function() hist.new { digits = 2.5 } end, "option 'digits' must be an integer")
  T.raises(function() hist.new { lowest = 0 } end, "lowest must be a finite number > 0")
  T.raises(function() hist.new { highest = 1e-6 } end, "highest must be finite and at least 2 * lowest")
  T.raises(function() hist.new { highest = "big" } end, "option 'highest' must be a number")
  T.raises(function() hist.new { digitz = 3 } end, "unknown option 'digitz' (lowest, highest, digits)")
  T.raises(function() hist.new { lowest = 1e-9, highest = 1e10 } end,
    "highest / lowest must be at most 2^62")
  T.raises(function() hist.new { lowest = 1e-9, highest = 1e9, digits = 5 } end,
    "layout needs more than 2^22 counters")
  T.raises(function() h:bins { n = 0 } end, "n must be an integer from 1 to 100000")
end)

T.case("record_corrected back-fills like HdrHistogram", function()
  local h = hist.new()
  h:record_corrected(1.0, 0.01) -- 1.0, 0.99, ..., 0.01
  T.eq(h:count(), 100)
  T.near(h:min(), 0.01, 1e-12)
  T.eq(h:max(), 1.0)
  T.near(h:mean(), 0.505, 0.505 / 2048)
  h:reset()
  h:record_corrected(0.019, 0.01) -- below twice the interval: nothing added
  h:record_corrected(0.5, 0)      -- interval 0: no correction
  T.eq(h:count(), 2)
  h:reset()
  h:record_corrected(10, 0.001, 3) -- 10000 values, 3 times each
  T.eq(h:count(), 30000)
  within_resolution(h:percentile(50), 5.0, "p50")
end)

T.case("merge is exact", function()
  local rnd = lcg(11)
  local a, b, all = hist.new(), hist.new(), hist.new()
  for i = 1, 5000 do
    local v = 10 ^ (rnd() * 9 - 6)
    local which = (i % 2 == 0) and a or b
    which:record(v)
    all:record(v)
  end
  T.eq(a:merge(b), a)
  T.eq(a:encode(), all:encode())
  T.same(a:buckets(), all:buckets())
  T.same(a:summary(), all:summary())
  local c = a:copy()
  c:record(1)
  T.eq(c:count(), a:count() + 1)
  local other = hist.new { digits = 2 }
  local err = T.raises(function() a:merge(other) end,
    "cannot merge histograms with different layouts (lowest=1e-06 highest=3600 digits=3 vs "
      .. "lowest=1e-06 highest=3600 digits=2)")
  T.eq(err.class, "hist")
  T.eq(a:count(), 5000)
end)

T.case("encode and decode round trip", function()
  local rnd = lcg(3)
  local h = hist.new { lowest = 1e-3, highest = 100, digits = 2 }
  h:record(0, 2)
  for _ = 1, 3000 do h:record(rnd() * 50) end
  h:record(500) -- saturated
  local s = h:encode()
  T.ok(s:match("^[A-Za-z0-9+/]+=*$"), "base64")
  local d = hist.decode(s)
  T.same(d:layout(), h:layout())
  T.same(d:buckets(), h:buckets())
  T.same(d:summary(), h:summary())
  T.eq(d:saturated(), 1)
  T.eq(d:encode(), s)
  local e = hist.decode(hist.new():encode())
  T.eq(e:count(), 0)
  T.same(e:layout(), { lowest = 1e-6, highest = 3600, digits = 3 })
end)

T.case("corrupt encodings are rejected", function()
  local h = hist.new()
  for i = 1, 100 do h:record(i * 1e-3) end
  local s = h:encode()
  local err = T.raises(function() hist.decode("garbage!") end,
    "corrupt histogram encoding: invalid base64 character at offset 7")
  T.eq(err.class, "hist")
  T.raises(function() hist.decode("") end,
    "corrupt histogram encoding: base64 length 0 is not a positive multiple of 4")
  T.raises(function() hist.decode("AAAAAAAA") end,
    "corrupt histogram encoding: not a kbrun histogram (bad magic)")
  T.raises(function() hist.decode(s:sub(1, #s - 8)) end, "corrupt histogram encoding")
  T.raises(function() hist.decode({}) end, "string expected")
  -- every truncation and many substitutions fail cleanly or decode to
  -- something self-consistent
  for cut = 4, #s - 4, 4 do
    T.ok(not pcall(hist.decode, s:sub(1, cut)), "truncated at " .. cut)
  end
  local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  local rnd = lcg(5)
  for _ = 1, 500 do
    local i = 1 + math.floor(rnd() * (#s - 2))
    local c = 1 + math.floor(rnd() * 64)
    local m = s:sub(1, i - 1) .. alphabet:sub(c, c) .. s:sub(i + 1)
    local ok, d = pcall(hist.decode, m)
    if ok then
      local n = 0
      for _, b in ipairs(d:buckets()) do n = n + b.count end
      T.eq(n, d:count(), "accepted mutation is consistent")
    else
      T.contains(tostring(d), "corrupt histogram encoding")
    end
  end
end)

T.case("buckets and bins", function()
  local h = hist.new()
  h:record(0, 2)
  h:record(0.001, 3)
  h:record(0.0025)
  h:record(2.0, 4)
  local b = h:buckets()
  T.eq(#b, 4)
  T.same(b[1], { low = 0.0, high = 1e-6, count = 2 })
  T.eq(b[2].count, 3)
  T.near(b[2].low, 0.001, 1e-12)
  T.near(b[2].high, 0.001 + 1e-6, 1e-12)
  T.ok(b[3].low <= 0.0025 and 0.0025 < b[3].high)
  T.ok(b[4].low <= 2.0 and 2.0 < b[4].high and b[4].high - b[4].low <= 2.0 / 1024)
  local bins = h:bins { n = 20 }
  T.eq(#bins, 21) -- the zero bin, then 20 log-spaced bins (factor ~1.46)
  T.same(bins[1], { low = 0, high = 0, count = 2 })
  local total = 0
  for i = 2, #bins do
    total = total + bins[i].count
    T.ok(bins[i].low < bins[i].high)
    if i < #bins then T.eq(bins[i].high, bins[i + 1].low) end
  end
  T.eq(total, 8)
  T.near(bins[2].low, 0.001, 1e-12)
  T.ok(bins[#bins].high >= 2.0)
  T.eq(bins[2].count, 3)
  T.eq(bins[#bins].count, 4)
  T.eq(#hist.new():bins(), 0)
  local only_zero = hist.new()
  only_zero:record(0)
  T.same(only_zero:bins(), { { low = 0, high = 0, count = 1 } })
  T.eq(#h:bins(), 41) -- default n = 40, plus the zero bin
end)

T.case("tostring and len", function()
  local h = hist.new()
  h:record(0.25, 3)
  T.eq(#h, 3)
  T.eq(tostring(h), "kb.hist: count=3 min=0.25 p50=0.25 p99=0.25 max=0.25 s")
  T.eq(h:mean(), 0.25) -- one repeated value is exact
  T.eq(h:stddev(), 0.0)
  T.eq(h:reset(), h)
  T.eq(#h, 0)
end)

-- kb.hist.ranks against the rules kb.timeseries had in Lua (table.sort,
-- then the nearest rank over the values, or over the counts when weighted)
local function reference_ranks(v, w, qs)
  local n = #v
  if n == 0 then return { 0 } end
  local out = {}
  if not w then
    local sorted = table.move(v, 1, n, 1, {})
    table.sort(sorted)
    out[1] = n
    for i, q in ipairs(qs) do
      local r = math.ceil(q * n)
      out[i + 1] = sorted[r < 1 and 1 or r > n and n or r]
    end
    out[#qs + 2] = sorted[n]
    return out
  end
  local idx, total = {}, 0
  for i = 1, n do
    idx[i] = i
    total = total + (w[i] or 1)
  end
  table.sort(idx, function(a, b) return v[a] < v[b] end)
  out[1] = total
  for k, q in ipairs(qs) do
    local want, acc = math.max(1, math.ceil(q * total)), 0
    for _, i in ipairs(idx) do
      acc = acc + (w[i] or 1)
      if acc >= want then out[k + 1] = v[i] break end
    end
  end
  out[#qs + 2] = v[idx[n]]
  return out
end

T.case("ranks: nearest-rank quantiles of raw values, as the Lua rules give them", function()
  local rand = lcg(7)
  local qs = { 0.5, 0.9, 0.99, 0, 1 }
  for trial = 1, 400 do
    local n = trial % 50 == 0 and 0 or (trial % 7 == 0 and 1 or 1 + math.floor(rand() * 300))
    local v, w = {}, nil
    for i = 1, n do
      -- ties often (a few distinct values), else spread over decades
      v[i] = trial % 3 == 0 and math.floor(rand() * 4) / 8 or 10 ^ (rand() * 6 - 5)
    end
    if trial % 2 == 0 then
      w = {}
      for i = 1, n do
        if rand() < 0.3 then w[i] = 1 + math.floor(rand() * 5) end
      end
    end
    local got = table.pack(hist.ranks(v, w, table.unpack(qs)))
    local want = reference_ranks(v, w, qs)
    T.eq(got.n, n == 0 and 1 or #qs + 2, "results of trial " .. trial)
    for i = 1, #want do T.eq(got[i], want[i], string.format("trial %d result %d", trial, i)) end
    T.eq(math.type(got[1]), "integer", "count")
  end
  -- the values are not moved
  local v = { 3, 1, 2 }
  T.same({ hist.ranks(v, nil, 0.5) }, { 3, 2, 3 })
  T.same(v, { 3, 1, 2 })
  -- fractional weights: a float total
  T.same({ hist.ranks({ 1, 2 }, { 0.5, 1.5 }, 0.5) }, { 2.0, 2, 2 })
end)

T.case("ranks: errors", function()
  T.raises(hist.ranks, "values[2] is not a number", { 1, "x" }, nil, 0.5)
  T.raises(hist.ranks, "weights[1] is not a positive number", { 1 }, { 0 }, 0.5)
  T.raises(hist.ranks, "weights[1] is not a positive number", { 1 }, { "a" }, 0.5)
  T.raises(hist.ranks, "a quantile is within [0, 1]", { 1 }, nil, 1.5)
  T.raises(hist.ranks, "1 to 16 quantiles", { 1 }, nil)
  T.raises(hist.ranks, "table expected", "x", nil, 0.5)
end)

T.run()
