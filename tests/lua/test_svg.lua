-- kb.report.svg: number and unit formatting, ticks, scales, KDE, binning, and the
-- plots themselves (well-formed, bar heights, markers, escaping, determinism).
local T = require "kb.testing"
local svg = require "kb.report.svg"
local check_xml = require "xml_check"

local function well_formed(text, what)
  local ok, err = check_xml(text)
  T.ok(ok, (what or "svg") .. ": " .. tostring(err))
  T.eq(text:sub(1, 4), "<svg", what)
  T.eq(text:sub(-6), "</svg>", what)
end

local function labels(ticks)
  local out = {}
  for i, t in ipairs(ticks) do out[i] = t.label end
  return out
end

local function count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

-- Deterministic standard normal numbers (Box-Muller over an LCG).
local function normals(seed)
  local s = seed
  local function u()
    s = (s * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return ((s >> 11) + 0.5) / (1 << 52)
  end
  return function()
    return math.sqrt(-2 * math.log(u())) * math.cos(2 * math.pi * u())
  end
end

-- Trapezoid integral of a KDE over its grid.
local function integral(k)
  local sum = 0
  for i = 2, #k.x do sum = sum + (k.x[i] - k.x[i - 1]) * (k.y[i] + k.y[i - 1]) / 2 end
  return sum
end

T.case("format_value picks a unit that keeps 1-3 digits", function()
  T.eq(svg.format_value(0.0000123, "s"), "12.3 µs")
  T.eq(svg.format_value(0.0123, "s"), "12.3 ms")
  T.eq(svg.format_value(0.001, "s"), "1 ms")
  T.eq(svg.format_value(1.5, "s"), "1.5 s")
  T.eq(svg.format_value(119, "s"), "119 s")
  T.eq(svg.format_value(150, "s"), "2.5 min")
  T.eq(svg.format_value(9000, "s"), "2.5 h")
  T.eq(svg.format_value(0, "s"), "0 s")
  T.eq(svg.format_value(nil, "s"), "-")
  T.eq(svg.format_value(12345), "12.3k")
  T.eq(svg.format_value(2500000), "2.5M")
  T.eq(svg.format_value(42), "42")
  T.eq(svg.format_value(0.25), "0.25")
  T.eq(svg.format_value(3, "req/s"), "3 req/s")
  T.eq(svg.format_value(99.5, "%"), "99.5%")
end)

T.case("nice steps", function()
  T.eq(svg.nice_step(0.7), 1)
  T.eq(svg.nice_step(1.7), 2)
  T.eq(svg.nice_step(2.2), 2.5)
  T.eq(svg.nice_step(3), 5)
  T.eq(svg.nice_step(7), 10)
  T.near(svg.nice_step(0.00042), 0.0005, 1e-15)
  T.eq(svg.nice_step(0), 1)
end)

T.case("log axis 0.001 .. 10 s has a tick per decade", function()
  local major, minor = svg.log_ticks(0.001, 10, "s")
  T.same(labels(major), { "1 ms", "10 ms", "100 ms", "1 s", "10 s" })
  T.eq(#minor, 4 * 8) -- 2..9 in each of the four decades
  T.near(major[1].value, 0.001, 1e-18)
  T.near(major[5].value, 10, 1e-12)
end)

T.case("short log axis adds 2x and 5x ticks", function()
  local major = svg.log_ticks(0.004, 0.3, "s")
  T.same(labels(major), { "5 ms", "10 ms", "20 ms", "50 ms", "100 ms", "200 ms" })
  T.same(labels((svg.log_ticks(2e-6, 3e-5, "s"))), { "2 µs", "5 µs", "10 µs", "20 µs" })
end)

T.case("linear ticks share one unit", function()
  T.same(labels(svg.linear_ticks(0, 0.35, 7, "s")),
    { "0 ms", "50 ms", "100 ms", "150 ms", "200 ms", "250 ms", "300 ms", "350 ms" })
  T.same(labels(svg.linear_ticks(0, 1, 5)), { "0.0", "0.2", "0.4", "0.6", "0.8", "1.0" })
  T.same(labels(svg.linear_ticks(0.0004, 0.0016, 3, "s")), { "0.5 ms", "1.0 ms", "1.5 ms" })
  -- above 10 minutes, minutes with nice steps
  T.same(labels(svg.linear_ticks(0, 3600, 4, "s")), { "0 min", "20 min", "40 min", "60 min" })
  T.same(labels(svg.linear_ticks(0, 300, 3, "s")), { "0 s", "100 s", "200 s", "300 s" })
  T.same(labels(svg.linear_ticks(0, 10, 4, nil, { integer = true })), { "0", "5", "10" })
  T.same(labels(svg.linear_ticks(0, 3, 5, nil, { integer = true })), { "0", "1", "2", "3" })
  T.same(labels(svg.linear_ticks(0, 40000, 2)), { "0", "20k", "40k" })
end)

T.case("scales map and invert", function()
  local lin = svg.scale("linear", 0, 10, 100, 200)
  T.eq(lin:map(0), 100)
  T.eq(lin:map(5), 150)
  T.eq(lin:map(10), 200)
  T.near(lin:inverse(125), 2.5, 1e-12)
  local lg = svg.scale("log", 0.001, 10, 0, 400)
  T.near(lg:map(0.001), 0, 1e-9)
  T.near(lg:map(0.1), 200, 1e-9)
  T.near(lg:map(10), 400, 1e-9)
  T.eq(lg:map(0), nil)
  T.near(lg:inverse(300), 1, 1e-9)
  -- inverted range (a y axis)
  local y = svg.scale("linear", 0, 100, 300, 50)
  T.eq(y:map(0), 300)
  T.eq(y:map(100), 50)
end)

T.case("tick labels thin out instead of overlapping", function()
  local s = svg.scale("log", 1e-6, 1e3, 0, 200) -- 9 decades in 200 px
  local ticks, minor = s:ticks("s")
  T.ok(#ticks >= 2 and #ticks < 10, "decimated: " .. #ticks)
  T.eq(#minor, 0)
  local prev = -math.huge
  for _, t in ipairs(ticks) do
    local x, w = s:map(t.value), svg.text_width(t.label, 11)
    T.ok(x - w / 2 >= prev + 8 - 1e-9, "labels overlap at " .. t.label)
    prev = x + w / 2
  end
  local l = svg.scale("linear", 0, 1000, 0, 120)
  local lt = l:ticks(nil)
  T.ok(#lt >= 2 and #lt <= 4, "few linear ticks: " .. #lt)
end)

T.case("Silverman bandwidth", function()
  local v = {}
  for i = 1, 100 do v[i] = i end
  -- sd = 29.01 < IQR/1.34 = 36.94
  local sd = math.sqrt(100 * 101 / 12)
  T.near(svg.silverman(v), 0.9 * sd * 100 ^ -0.2, 1e-9)
  -- weights count like repeated values
  T.near(svg.silverman({ 1, 2, 3 }, { 2, 2, 2 }), svg.silverman({ 1, 1, 2, 2, 3, 3 }), 1e-12)
  -- identical values still get a positive bandwidth
  T.ok(svg.silverman({ 5, 5, 5 }) > 0)
  T.ok(svg.silverman({ 0, 0 }) > 0)
end)

T.case("KDE integrates to 1 over its support", function()
  local rnd = normals(11)
  local v = {}
  for i = 1, 500 do v[i] = 3 + 2 * rnd() end
  local k = svg.kde(v)
  T.eq(#k.x, 200)
  T.near(integral(k), 1, 0.01, "kde")
  -- the mode of a normal sample is near its centre
  local best = 1
  for i = 2, #k.y do if k.y[i] > k.y[best] then best = i end end
  T.near(k.x[best], 3, 0.6, "mode")
  -- many points take the binned path and still integrate to 1
  local many = {}
  for i = 1, 5000 do many[i] = rnd() end
  T.near(integral(svg.kde(many, { points = 300 })), 1, 0.01, "binned kde")
  -- weighted: counts at bin middles, in log10 space
  local kb_bins = { { low = 0.001, high = 0.002, count = 5 }, { low = 0.002, high = 0.004, count = 20 },
    { low = 0.004, high = 0.008, count = 9 }, { low = 0, high = 0, count = 3 } }
  local kl = svg.kde_bins(kb_bins, { log = true })
  T.near(integral(kl), 1, 0.01, "log kde of bins")
  T.ok(kl.x[1] < -2.5 and kl.x[#kl.x] > -2.3, "log10 space")
  T.near(integral(svg.kde_bins(kb_bins)), 1, 0.01, "linear kde of bins")
  T.same(svg.kde({}), { x = {}, y = {}, bandwidth = 0 })
end)

-- The KDE as every grid point over every point (or bin) computes it: what
-- kb.report.svg's windowed sum must equal exactly.
local function kde_reference(values, m)
  local n, h = #values, svg.silverman(values)
  local vmin, vmax = math.huge, -math.huge
  for i = 1, n do vmin, vmax = math.min(vmin, values[i]), math.max(vmax, values[i]) end
  local lo, hi = vmin - 3 * h, vmax + 3 * h
  local xs, ws = values, nil
  if n > 2000 then
    local nb, span, acc = 1024, vmax - vmin, {}
    for i = 1, n do
      local j = math.floor((values[i] - vmin) / span * (nb - 1) + 0.5)
      acc[j] = (acc[j] or 0) + 1
    end
    xs, ws = {}, {}
    for j = 0, nb - 1 do
      if acc[j] then xs[#xs + 1], ws[#ws + 1] = vmin + span * j / (nb - 1), acc[j] end
    end
  end
  local ys, norm = {}, 1 / (n * h * math.sqrt(2 * math.pi))
  for i = 0, m - 1 do
    local x, s = lo + (hi - lo) * i / math.max(1, m - 1), 0
    for j = 1, #xs do
      local z = (x - xs[j]) / h
      if z > -8 and z < 8 then s = s + (ws and ws[j] or 1) * math.exp(-0.5 * z * z) end
    end
    ys[i + 1] = s * norm
  end
  return ys
end

T.case("the binned KDE sums only the bins within reach, to the same figures", function()
  local rnd = normals(7)
  for _, case in ipairs({ { n = 2500, spread = 1 }, { n = 20000, spread = 50 }, { n = 3000, spread = 1e-6 } }) do
    local v = {}
    -- a long tail, so most bins are out of reach of most grid points
    for i = 1, case.n do v[i] = math.exp(case.spread * 0.1 * rnd()) * case.spread end
    local k, ref = svg.kde(v), kde_reference(v, 200)
    for i = 1, 200 do T.eq(k.y[i], ref[i], "n = " .. case.n .. ", grid point " .. i) end
  end
  -- equal weights (sorted without a comparator) give what distinct ones do
  local v, w, w3, nudged = {}, {}, {}, {}
  for i = 1, 3000 do v[i], w[i], w3[i], nudged[i] = math.floor(rnd() * 50) / 10, 1, 3, 1 end
  nudged[1] = 1 + 1e-12 -- not uniform: the comparator path, the same figure within rounding
  T.eq(svg.silverman(v), svg.silverman(v, w))
  T.near(svg.silverman(v, nudged), svg.silverman(v, w), 1e-9)
  local v3 = {}
  for i = 1, 3000 do for k = 1, 3 do v3[#v3 + 1] = v[i] end end
  T.near(svg.silverman(v, w3), svg.silverman(v3), 1e-9)
end)

T.case("linear and log bins", function()
  local pts = {}
  for i = 1, 100 do pts[i] = { value = i / 100, count = 1 } end
  local bins = svg.linear_bins(pts, 10)
  local total = 0
  for i, b in ipairs(bins) do
    total = total + b.count
    T.near(b.high - b.low, 0.1, 1e-12, "equal width")
    if i > 1 then T.near(b.low, bins[i - 1].high, 1e-12) end
  end
  T.eq(total, 100)
  T.ok(bins[1].low <= 0.01 and bins[#bins].high >= 1, "covers the data")
  local lb = svg.log_bins({ { value = 0, count = 2 }, { value = 0.001, count = 1 }, { value = 1, count = 3 } }, 3)
  T.same(lb[1], { low = 0, high = 0, count = 2 })
  T.eq(#lb, 4)
  T.near(lb[2].low, 0.001, 1e-15)
  T.near(lb[2].high, 0.01, 1e-12)
  T.eq(lb[2].count, 1)
  T.eq(lb[4].count, 3)
  -- one distinct value sits in the middle of its axis
  local one = svg.linear_bins({ { value = 0.5, count = 100 } })
  local full
  for i, b in ipairs(one) do if b.count > 0 then full = i end end
  T.ok(one[1].low < 0.5 and one[#one].high > 0.5, "around the value")
  T.ok(full > 1 and full < #one, "not at an edge: bin " .. full .. " of " .. #one)
  T.eq(one[full].count, 100)
end)

-- Heights of the bars, in document order.
local function bar_heights(text)
  local out = {}
  for h in text:gmatch('<rect class="bar" x="[^"]*" y="[^"]*" width="[^"]*" height="([^"]*)"') do
    out[#out + 1] = tonumber(h)
  end
  return out
end

T.case("histogram bar heights match bin counts", function()
  local bins = { { low = 0, high = 1, count = 5 }, { low = 1, high = 2, count = 10 },
    { low = 2, high = 3, count = 0 }, { low = 3, high = 4, count = 20 } }
  local text = svg.histogram { title = "h", bins = bins, scale = "linear", rug = false }
  well_formed(text, "histogram")
  local h = bar_heights(text)
  T.eq(#h, 3) -- empty bins draw nothing
  local per = h[3] / 20
  T.near(h[1], 5 * per, 0.11)
  T.near(h[2], 10 * per, 0.11)
  T.ok(per > 5, "bars are tall enough to see: " .. per)
  -- hover titles give the exact count
  T.contains(text, "<title>3 – 4: 20</title>")
  -- the y axis reaches at least the largest count
  T.ok(text:find('>20</text>', 1, true) or text:find('>25</text>', 1, true), "y tick at the top")
end)

T.case("histogram from samples on a log axis with rug, KDE and markers", function()
  local rnd = normals(5)
  local samples = {}
  for i = 1, 400 do samples[i] = 0.01 * math.exp(1.5 * rnd()) end
  samples[#samples + 1] = 0 -- cannot show on a log axis
  local text = svg.histogram { title = "run.get", unit = "s", samples = samples, kde = true,
    markers = { { value = 0.01, label = "p50 10 ms" }, { value = 0.02, label = "p90 20 ms" },
      { value = 1e4, label = "limit", kind = "threshold" } } }
  well_formed(text, "log histogram")
  -- plain numbers on the ticks, the unit in the axis title
  T.contains(text, 'data-value="0.01" text-anchor="middle">10</text>')
  T.contains(text, 'data-value="0.1" text-anchor="middle">100</text>')
  T.contains(text, '>duration (ms)</text>')
  T.contains(text, 'class="kde"')
  T.contains(text, 'class="rug"')
  T.contains(text, ">p50 10 ms</text>")
  T.contains(text, ">p90 20 ms</text>")
  T.contains(text, ">limit ›</text>") -- far beyond the data: points off the edge
  T.contains(text, "1 zero value not shown (log axis)")
  T.eq(count(text, 'class="marker"'), 2) -- no line for the clipped one
  -- one rug mark per distinct pixel at most
  local marks = 0
  for d in text:gmatch('<g class="rug">(.-)</g>') do marks = marks + count(d, "M") end
  T.ok(marks > 50 and marks <= 400, "rug marks: " .. marks)
  local total = 0
  for _, h in ipairs(bar_heights(text)) do total = total + h end
  T.ok(total > 0)
end)

T.case("marker labels never share a row when they would overlap", function()
  local text = svg.histogram { bins = { { low = 0, high = 1, count = 3 } }, scale = "linear",
    markers = { { value = 0.50, label = "p50 500 ms" }, { value = 0.51, label = "p90 510 ms" },
      { value = 0.52, label = "p99 520 ms" } } }
  well_formed(text, "markers")
  local ys = {}
  for y in text:gmatch('<text x="[^"]*" y="([^"]*)" class="marker%-label"') do ys[#ys + 1] = y end
  T.eq(#ys, 3)
  T.ok(ys[1] ~= ys[2] and ys[2] ~= ys[3] and ys[1] ~= ys[3], "three rows")
end)

T.case("text is escaped everywhere", function()
  local evil = 'a<b & "c" \'d\'\1'
  local texts = {
    svg.histogram { title = evil, subtitle = evil, xlabel = evil, samples = { 1, 2, 3 },
      markers = { { value = 2, label = evil } } },
    svg.bars { title = evil, categories = { { label = evil, value = 3 } } },
    svg.lines { title = evil, series = { { name = evil, points = { { x = 1, y = 2 }, { x = 2, y = 3 } } } },
      x = { label = evil }, y = { label = evil } },
    svg.heatmap { title = evil, rows = { evil }, cols = { evil }, values = { { 1 } }, xlabel = evil, ylabel = evil },
  }
  for i, text in ipairs(texts) do
    well_formed(text, "plot " .. i)
    T.contains(text, "a&lt;b &amp; &quot;c&quot; &#39;d&#39;", "plot " .. i)
    T.ok(not text:find("a<b", 1, true), "raw text in plot " .. i)
    T.ok(not text:find("\1", 1, true), "control byte in plot " .. i)
  end
  T.eq(svg.escape("<&>\"'"), "&lt;&amp;&gt;&quot;&#39;")
end)

T.case("count plot", function()
  local text = svg.bars { title = "outcomes", categories = {
    { label = "Succeeded", value = 48 }, { label = "Failed", value = 2 } } }
  well_formed(text, "bars")
  local h = bar_heights(text)
  T.eq(#h, 2)
  T.near(h[1] / h[2], 24, 0.5)
  T.contains(text, ">48</text>")
  T.contains(text, ">Failed</text>")
  T.contains(text, 'fill="' .. svg.colors.good .. '"')
  T.contains(text, 'fill="' .. svg.colors.bad .. '"')
end)

T.case("line plot with error bars and legend", function()
  local text = svg.lines { title = "sweep", x = { scale = "log", label = "concurrency" },
    y = { unit = "s", label = "latency" }, series = {
      { name = "p50", points = { { x = 10, y = 0.2, err = 0.02 }, { x = 1, y = 0.1, err = 0.01 }, { x = 100, y = 0.5, lo = 0.4, hi = 0.7 } } },
      { name = "p99", points = { { x = 1, y = 0.3 }, { x = 100, y = 1.2 } } },
    } }
  well_formed(text, "lines")
  T.eq(count(text, "<circle "), 5)
  T.eq(count(text, 'class="errorbar"'), 3)
  T.eq(count(text, 'class="line"'), 2)
  T.contains(text, ">p50</text>")
  T.contains(text, ">p99</text>")
  T.contains(text, ">10</text>") -- log x ticks
  T.contains(text, ">latency (s)</text>")
  T.contains(text, ">concurrency</text>")
end)

T.case("heat map", function()
  local text = svg.heatmap { title = "grid", rows = { "1", "2" }, cols = { "a", "b", "c" },
    values = { { 0.1, 0.2, 0.3 }, { 0.4, nil, 1.2 } }, unit = "s" }
  well_formed(text, "heatmap")
  T.eq(count(text, 'class="cell"'), 5)
  T.eq(count(text, 'class="cell nodata"'), 1)
  T.contains(text, "100 ms")
  T.contains(text, "1.2 s")
  local lo, hi = svg.color_at(0), svg.color_at(1)
  T.eq(lo, "#440154")
  T.eq(hi, "#fde725")
  T.contains(text, 'fill="' .. lo .. '"')
  T.contains(text, 'fill="' .. hi .. '"')
  -- two heat maps of different data never share <defs> ids
  local other = svg.heatmap { title = "grid2", rows = { "x" }, cols = { "y" }, values = { { 5 } } }
  local id1, id2 = text:match('linearGradient id="([^"]+)"'), other:match('linearGradient id="([^"]+)"')
  T.ok(id1 and id2 and id1 ~= id2, "distinct gradient ids")
end)

T.case("empty plots are valid and say so", function()
  local plots = {
    svg.histogram { title = "nothing", bins = {} },
    svg.histogram { title = "nothing", samples = {}, scale = "log", kde = true },
    svg.bars { title = "none", categories = {} },
    svg.lines { title = "none", series = {} },
    svg.heatmap { title = "none", rows = {}, cols = {} },
  }
  for i, text in ipairs(plots) do
    well_formed(text, "empty " .. i)
    T.contains(text, "no data", "empty " .. i)
  end
  -- a single value, a single distinct value
  well_formed(svg.histogram { samples = { 0.5 }, kde = true }, "one value")
  well_formed(svg.histogram { samples = { 0.5, 0.5, 0.5 }, kde = true, unit = "s" }, "one distinct value")
end)

-- The tick labels of an axis group (class "x-axis" or "y-axis") with
-- their data-value: list of { label, value }.
local function axis_ticks(text, which)
  local g = text:match('<g class="' .. which:gsub("%-", "%%-") .. '">(.-)</g>')
  local out = {}
  for v, l in (g or ""):gmatch('class="tick" data%-value="([^"]*)"[^>]*>([^<]*)</text>') do
    out[#out + 1] = { l, tonumber(v) }
  end
  return out, g and g:match('class="axis%-title"[^>]*>([^<]*)</text>')
end

T.case("axes: plain-number ticks, the unit in the title, one unit per axis", function()
  -- run durations of 9-12 minutes: ticks in minutes, title says so
  local d = {}
  for i = 1, 50 do d[i] = 540 + 180 * ((i * 0.618034) % 1) end
  local text = svg.histogram { samples = d, unit = "s", xlabel = "run.duration", kde = true }
  local ticks, title = axis_ticks(text, "x-axis")
  T.eq(title, "run.duration (min)")
  T.ok(#ticks >= 3, "x ticks")
  for _, t in ipairs(ticks) do
    T.eq(tonumber(t[1]) * 60, t[2], "tick " .. t[1] .. " min stands for its value in seconds")
  end
  local yt, ytitle = axis_ticks(text, "y-axis")
  T.eq(ytitle, "count")
  -- the KDE's peak is inside the y range: no point at the plot's top
  local top = tonumber(text:match('<g class="y%-axis">.-<line x1="[%d.]+" y1="([%d.]+)" x2="[%d.]+" y2="[%d.]+" stroke="#444"/>'))
  local kde_top = math.huge
  for y in text:match('class="kde" d="([^"]*)"'):gmatch("[ML][%d.]+ ([%d.]+)") do kde_top = math.min(kde_top, tonumber(y)) end
  T.ok(top and kde_top > top + 1, "KDE top " .. kde_top .. " below the axis top " .. tostring(top))
  T.ok(#yt >= 2, "y ticks")
  -- 90.5-91 ms: labels of a narrow axis do not collide (estimated widths)
  local narrow = {}
  for i = 1, 40 do narrow[i] = 0.0905 + 0.0005 * ((i * 0.618034) % 1) end
  local nt = axis_ticks(svg.histogram { samples = narrow, unit = "s", width = 600 }, "x-axis")
  T.ok(#nt >= 2 and #nt <= 8, #nt .. " ticks on a 600 px axis")
end)

T.case("lines: auto log y for one outlying level, shared domain, legend in its own band", function()
  local pts = {}
  for i, y in ipairs({ 0.2, 0.25, 0.3, 0.28, 40 }) do pts[i] = { x = 2 ^ (i + 2), y = y } end
  local text = svg.lines { series = { { name = "run.list p99", points = pts } }, x = { scale = "log", label = "concurrent runs" },
    y = { unit = "s", label = "p99" } }
  well_formed(text, "auto log")
  local yt = axis_ticks(text, "y-axis")
  local decades = 0
  for _, t in ipairs(yt) do
    local l = math.log(t[2], 10)
    if math.abs(l - math.floor(l + 0.5)) < 1e-9 then decades = decades + 1 end
  end
  T.ok(decades >= 2, "log y axis: " .. #yt .. " ticks, " .. decades .. " at powers of ten")
  -- x ticks at the levels themselves (8 ... 128)
  local xt = axis_ticks(text, "x-axis")
  T.eq(xt[1][2], 8)
  T.eq(xt[#xt][2], 128)
  -- a given domain is kept (panels of one metric share it)
  local a = svg.lines { series = { { name = "a", points = { { x = 1, y = 1 }, { x = 2, y = 2 } } } }, y = { domain = { 0, 10 }, scale = "linear" } }
  local b = svg.lines { series = { { name = "a", points = { { x = 1, y = 5 }, { x = 2, y = 9 } } } }, y = { domain = { 0, 10 }, scale = "linear" } }
  local ta, tb = axis_ticks(a, "y-axis"), axis_ticks(b, "y-axis")
  T.same(ta, tb)
  T.eq(ta[#ta][2], 10)
  -- the legend's band ends above the plot area
  local legend_y = tonumber(a:match('<g class="legend">.-<text x="[%d.]+" y="([%d.]+)"'))
  local area_top = tonumber(a:match('<g class="y%-axis">.-<line x1="[%d.]+" y1="([%d.]+)" x2="[%d.]+" y2="[%d.]+" stroke="#444"/>'))
  T.ok(legend_y + 4 < area_top, "legend baseline " .. legend_y .. " above the plot top " .. area_top)
end)

T.case("output is deterministic", function()
  local function make()
    local rnd = normals(3)
    local s = {}
    for i = 1, 300 do s[i] = math.exp(rnd()) end
    return svg.histogram { title = "x", samples = s, kde = true, unit = "s", markers = { { value = 1, label = "p50" } } }
  end
  T.eq(make(), make())
  local a = svg.heatmap { rows = { "r" }, cols = { "c" }, values = { { 1 } } }
  T.eq(a, svg.heatmap { rows = { "r" }, cols = { "c" }, values = { { 1 } } })
end)

T.run()
