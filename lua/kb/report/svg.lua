--- kb.report.svg: a small plotting library that returns SVG documents as strings.
--
--   local svg = require "kb.report.svg"
--   local text = svg.histogram {
--     title = "run.create", unit = "s",
--     points = { { value = 0.12, count = 3 }, ... },  -- or samples = { 0.12, ... }
--     kde = true, rug = true,
--     markers = { { value = 0.2, label = "p90" } },
--   }
--   svg.bars { title = "outcomes", categories = { { label = "Succeeded", value = 48 } } }
--   svg.lines { series = { { name = "p50", points = { { x = 1, y = 0.1, err = 0.01 } } } } }
--   svg.heatmap { rows = { "a" }, cols = { "x", "y" }, values = { { 1, 2 } } }
--
-- Every plot is a complete <svg> element with width/height in px and a
-- viewBox, so it scales inside HTML (CSS `max-width: 100%; height: auto`).
-- Output is deterministic: the same input gives the same bytes (coordinates
-- are rounded to 0.1 px, nothing iterates over hash order). Text is escaped;
-- fonts are the platform's sans-serif, nothing is fetched.
--
-- Units: `unit = "s"` formats values as durations with a unit that keeps
-- 1-3 digits (µs, ms, s, min, h); any other string is appended to the number
-- ("req/s"); nil prints plain numbers (10k, 2.5M for large ones).
local M = {}

local floor, ceil, abs, sqrt, exp, log = math.floor, math.ceil, math.abs, math.sqrt, math.exp, math.log
local max, min, huge = math.max, math.min, math.huge
local format, concat = string.format, table.concat

-- ---- text and numbers -------------------------------------------------------

local ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

--- Escapes text for XML/HTML content and attribute values; control bytes
-- that XML forbids are dropped.
function M.escape(s)
  s = tostring(s):gsub("[%z\1-\8\11\12\14-\31\127]", "")
  return (s:gsub("[&<>\"']", ESCAPES))
end
local esc = M.escape

-- A coordinate: at most one decimal, no "-0", no trailing ".0".
local function px(x)
  if x ~= x or x == huge or x == -huge then return "0" end
  local s = format("%.1f", x)
  if s:sub(-2) == ".0" then s = s:sub(1, -3) end
  if s == "-0" then s = "0" end
  return s
end
M.px = px

local function log10(x) return log(x, 10) end

-- Up to 3 significant digits, never an exponent between 1e-4 and 1e15.
local function sig3(v)
  if v == 0 then return "0" end
  local a = abs(v)
  if a >= 1e15 or a < 1e-4 then return format("%.3g", v) end
  if a >= 999.5 then return format("%.0f", v) end
  return format("%.3g", v)
end

--- A number with up to 3 significant digits; 10k, 2.5M, 1.2G above 9999.
function M.format_number(v)
  if type(v) ~= "number" then return tostring(v) end
  if v ~= v then return "NaN" end
  if math.type(v) == "integer" and abs(v) < 10000 then return tostring(v) end
  local a = abs(v)
  if a >= 1e9 and a < 1e15 then return sig3(v / 1e9) .. "G" end
  if a >= 1e6 and a < 1e15 then return sig3(v / 1e6) .. "M" end
  if a >= 1e4 and a < 1e15 then return sig3(v / 1e3) .. "k" end
  return sig3(v)
end

-- Time units: name, seconds per unit, used below `limit` seconds.
local TIME_UNITS = {
  { "µs", 1e-6, 1e-3 },
  { "ms", 1e-3, 1 },
  { "s", 1, 120 },
  { "min", 60, 7200 },
  { "h", 3600, huge },
}

--- The time unit for a magnitude in seconds: name, seconds per unit.
-- `s_limit` optionally moves the upper bound of "s" (default 120 s).
function M.time_unit(seconds, s_limit)
  local a = abs(seconds)
  for _, u in ipairs(TIME_UNITS) do
    local limit = u[1] == "s" and (s_limit or u[3]) or u[3]
    if a < limit then return u[1], u[2] end
  end
  return "h", 3600
end

--- Formats a value with its unit: format_value(0.0123, "s") -> "12.3 ms".
function M.format_value(v, unit)
  if type(v) ~= "number" then return v == nil and "-" or tostring(v) end
  if unit == "s" then
    if v == 0 then return "0 s" end
    local name, factor = M.time_unit(v)
    return sig3(v / factor) .. " " .. name
  end
  if unit == nil or unit == "" then return M.format_number(v) end
  if unit == "%" then return M.format_number(v) .. "%" end
  return M.format_number(v) .. " " .. unit
end

-- Width of a text in px, on the generous side so that labels spaced by it
-- do not touch: per-character advances of DejaVu Sans / Liberation Sans
-- (the sans-serif fonts of a Debian desktop), in em.
local function char_em(c)
  if c:match("^%d$") then return 0.64 end
  if c == " " or c == "." or c == "," or c == ":" or c == ";" or c == "i" or c == "l" or c == "j" or c == "'" or c == "|" then return 0.32 end
  if c == "m" or c == "w" or c == "M" or c == "W" then return 0.98 end
  if c:match("^%u$") then return 0.72 end
  if c:match("^%l$") then return 0.6 end
  if #c > 1 then return 0.7 end -- µ, ×, –, ≤ and other multibyte characters
  return 0.62
end

local function text_width(s, size)
  local em = 0
  for c in tostring(s):gmatch("[%z\1-\127\194-\244][\128-\191]*") do em = em + char_em(c) end
  return em * size
end
M.text_width = text_width

-- ---- ticks ------------------------------------------------------------------

--- The smallest "nice" step (1, 2, 2.5, 5 x 10^k) at least `raw`.
function M.nice_step(raw)
  if not (raw > 0) then return 1 end
  local e = 10 ^ floor(log10(raw))
  local f = raw / e
  for _, m in ipairs({ 1, 2, 2.5, 5, 10 }) do
    if f <= m * (1 + 1e-9) then return m * e end
  end
  return 10 * e
end

-- Decimals needed to print multiples of step exactly (up to 6).
local function decimals(step)
  for d = 0, 6 do
    local scaled = step * 10 ^ d
    if abs(scaled - floor(scaled + 0.5)) < 1e-6 * max(1, scaled) then return d end
  end
  return 6
end

-- Display unit of a linear axis in seconds: chosen by its largest magnitude,
-- seconds up to 10 minutes so that 0..300 s reads as seconds.
local function axis_time_unit(lo, hi)
  return M.time_unit(max(abs(lo), abs(hi)), 600)
end

--- Ticks of a linear axis over [lo, hi]: about n of them at nice values.
-- Returns a list of { value, label }. With unit "s" all labels share one
-- time unit ("0 ms", "50 ms", ...). opts.integer: steps of at least 1.
-- opts.bare: labels are plain numbers in the axis' unit, which the list
-- carries as ticks.unit (the time unit for "s", else `unit`), for an axis
-- title such as "latency (ms)".
function M.linear_ticks(lo, hi, n, unit, opts)
  n = n or 5
  local bare = opts and opts.bare
  local name, factor = nil, 1
  if unit == "s" then name, factor = axis_time_unit(lo, hi) end
  local a, b = lo / factor, hi / factor
  local step = M.nice_step((b - a) / max(1, n))
  if opts and opts.integer then
    if step < 1 then step = 1 end
    if step % 1 ~= 0 then step = step * 2 end -- 2.5 -> 5: counts need whole ticks
  end
  local d = decimals(step)
  local ticks = {}
  local k0 = ceil(a / step - 1e-9)
  for k = k0, k0 + 1000 do
    local u = k * step
    if u > b + step * 1e-9 then break end
    if abs(u) < step * 1e-9 then u = 0 end
    local label
    if bare then
      label = (abs(u) >= 1e4) and M.format_number(u) or format("%." .. d .. "f", u)
    elseif unit == "s" then
      label = format("%." .. d .. "f", u) .. " " .. name
    elseif unit == nil or unit == "" or unit == "%" then
      label = (abs(u) >= 1e4) and M.format_number(u) or format("%." .. d .. "f", u)
      if unit == "%" then label = label .. "%" end
    else
      label = format("%." .. d .. "f", u) .. " " .. unit
    end
    ticks[#ticks + 1] = { value = u * factor, label = label }
  end
  ticks.unit = name or ((unit ~= nil and unit ~= "") and unit or nil)
  ticks.factor = factor
  return ticks
end

--- Ticks of a log axis over [lo, hi] (lo > 0): returns labelled ticks
-- { value, label } at powers of ten (adding 2x and 5x when fewer than three
-- decades show), and unlabelled minor tick values (2..9 x 10^k).
-- opts.bare: plain numbers in one unit for the whole axis (major.unit,
-- chosen by the upper end as on a linear axis), as in linear_ticks.
function M.log_ticks(lo, hi, unit, opts)
  local bare = opts and opts.bare
  local name, factor = nil, 1
  -- a log axis reads best in the unit of its middle (geometric mean)
  if unit == "s" and bare then name, factor = M.time_unit(sqrt(lo * hi), 600) end
  local k0, k1 = ceil(log10(lo) - 1e-9), floor(log10(hi) + 1e-9)
  local major, minor = {}, {}
  major.unit = name or ((unit ~= nil and unit ~= "") and unit or nil)
  major.factor = factor
  local with_subs = (k1 - k0 + 1) < 3
  for k = k0 - 1, k1 do
    local base = 10.0 ^ k
    for m = 1, 9 do
      local v = m * base
      if m == 1 then v = tonumber(format("%.0e", v)) end -- exact decimal powers
      if v >= lo * (1 - 1e-9) and v <= hi * (1 + 1e-9) then
        if m == 1 or (with_subs and (m == 2 or m == 5)) then
          major[#major + 1] = { value = v, label = bare and M.format_number(v / factor) or M.format_value(v, unit) }
        else
          minor[#minor + 1] = v
        end
      end
    end
  end
  return major, minor
end

-- ---- scales -----------------------------------------------------------------

local Scale = {}
Scale.__index = Scale

--- A scale maps a domain [d0, d1] onto pixels [r0, r1]; kind "linear" or
-- "log" (the domain must then be positive). scale:map(v) -> px (nil for
-- v <= 0 on a log scale), scale:inverse(px) -> value.
function M.scale(kind, d0, d1, r0, r1)
  local s = setmetatable({ kind = kind, d0 = d0, d1 = d1, r0 = r0, r1 = r1 }, Scale)
  if kind == "log" then
    s.u0, s.u1 = log10(d0), log10(d1)
  else
    s.u0, s.u1 = d0, d1
  end
  if s.u1 == s.u0 then s.u1 = s.u0 + 1 end
  return s
end

--- The axis coordinate of a value: log10(v) on a log scale, v otherwise.
function Scale:u(v)
  if self.kind == "log" then
    if not (v > 0) then return nil end
    return log10(v)
  end
  return v
end

function Scale:map_u(u)
  return self.r0 + (u - self.u0) / (self.u1 - self.u0) * (self.r1 - self.r0)
end

function Scale:map(v)
  local u = self:u(v)
  if u == nil then return nil end
  return self:map_u(u)
end

function Scale:inverse(p)
  local u = self.u0 + (p - self.r0) / (self.r1 - self.r0) * (self.u1 - self.u0)
  if self.kind == "log" then return 10 ^ u end
  return u
end

-- Labelled ticks that fit along `length` px without overlapping, and
-- minor tick values.
function Scale:ticks(unit, opts)
  opts = opts or {}
  local length = abs(self.r1 - self.r0)
  local size = opts.font_size or 11
  local function fits(ticks)
    if opts.vertical then return #ticks * (size + 6) <= length + size end
    -- as Plot:x_axis places them: centred, or flush at the frame's edges
    local prev
    for _, t in ipairs(ticks) do
      local p, w = self:map(t.value), text_width(t.label, size)
      local a, b = p - w / 2, p + w / 2
      if opts.edge_hi and b > opts.edge_hi then a, b = p - w, p
      elseif opts.edge_lo and a < opts.edge_lo then a, b = p, p + w end
      if prev and a < prev + 10 then return false end
      prev = b
    end
    return true
  end
  local function keep_unit(list, from)
    list.unit, list.factor = from.unit, from.factor
    return list
  end
  if opts.values then
    -- ticks at given values (e.g. the levels of a ramp), thinned to fit
    local all = {}
    local ref = self.kind == "log" and M.log_ticks(self.d0, self.d1, unit, opts) or M.linear_ticks(self.d0, self.d1, 2, unit, opts)
    for _, v in ipairs(opts.values) do
      if v >= min(self.d0, self.d1) and v <= max(self.d0, self.d1) and (self.kind ~= "log" or v > 0) then
        all[#all + 1] = { value = v, label = opts.bare and M.format_number(v / (ref.factor or 1)) or M.format_value(v, unit) }
      end
    end
    table.sort(all, function(a, b) return a.value < b.value end)
    for k = 1, #all do
      local kept = {}
      for i = 1, #all, k do kept[#kept + 1] = all[i] end
      if fits(kept) or #kept <= 2 then return keep_unit(kept, ref), {} end
    end
  end
  if self.kind == "log" then
    local major, minor = M.log_ticks(self.d0, self.d1, unit, opts)
    if #major >= 2 and fits(major) then return major, minor end
    -- keep decades only, then every k-th decade
    local decades = {}
    for _, t in ipairs(major) do
      local l = log10(t.value)
      if abs(l - floor(l + 0.5)) < 1e-9 then decades[#decades + 1] = t end
    end
    for k = 1, #decades do
      local kept = {}
      for i = 1, #decades, k do kept[#kept + 1] = decades[i] end
      if fits(kept) or #kept <= 2 then
        if k > 1 then minor = {} end
        return keep_unit(kept, major), minor
      end
    end
    return keep_unit(decades, major), {}
  end
  for n = opts.n or 8, 2, -1 do
    local ticks = M.linear_ticks(self.d0, self.d1, n, unit, opts)
    if fits(ticks) then return ticks, {} end
  end
  return M.linear_ticks(self.d0, self.d1, 1, unit, opts), {}
end

-- ---- statistics -------------------------------------------------------------

-- Weighted quantile of sorted values.
local function wquantile(xs, ws, total, q)
  local target, acc = q * total, 0
  for i = 1, #xs do
    acc = acc + ws[i]
    if acc >= target then return xs[i] end
  end
  return xs[#xs]
end

--- Silverman's rule of thumb bandwidth of (optionally weighted) values:
-- 0.9 * min(sd, IQR / 1.34) * n^(-1/5). Never 0: identical values get a
-- bandwidth from their magnitude.
function M.silverman(values, weights)
  local idx = {}
  for i = 1, #values do idx[i] = i end
  table.sort(idx, function(a, b) return values[a] < values[b] end)
  local xs, ws, n, sum = {}, {}, 0, 0
  for i, j in ipairs(idx) do
    xs[i] = values[j]
    ws[i] = weights and weights[j] or 1
    n = n + ws[i]
    sum = sum + xs[i] * ws[i]
  end
  if n <= 0 then return 1 end
  local mean, var = sum / n, 0
  for i = 1, #xs do var = var + ws[i] * (xs[i] - mean) ^ 2 end
  local sd = sqrt(var / max(1, n - 1))
  local iqr = (wquantile(xs, ws, n, 0.75) - wquantile(xs, ws, n, 0.25)) / 1.34
  local spread = (iqr > 0 and iqr < sd) and iqr or sd
  if not (spread > 0) then
    spread = abs(mean) > 0 and abs(mean) * 0.05 or 1
  end
  return 0.9 * spread * n ^ (-0.2)
end

--- Gaussian kernel density estimate.
-- opts: weights (list parallel to values), bandwidth (default Silverman),
-- points (grid size, default 200), cut (grid extends this many bandwidths
-- beyond the data, default 3), lo/hi (explicit grid bounds).
-- Returns { x = {...}, y = {...}, bandwidth = h } with y a density that
-- integrates to 1 over the whole line (and ~1 over the default grid).
-- Many points (over 2000) are first binned onto a fine grid.
function M.kde(values, opts)
  opts = opts or {}
  local weights = opts.weights
  local n = #values
  if n == 0 then return { x = {}, y = {}, bandwidth = 0 } end
  local h = opts.bandwidth or M.silverman(values, weights)
  local vmin, vmax, total = huge, -huge, 0
  for i = 1, n do
    vmin, vmax = min(vmin, values[i]), max(vmax, values[i])
    total = total + (weights and weights[i] or 1)
  end
  local cut = opts.cut or 3
  local lo, hi = opts.lo or (vmin - cut * h), opts.hi or (vmax + cut * h)
  local xs, ws = values, weights
  if n > 2000 then -- linear binning keeps the cost at grid x 1024
    local nb, span = 1024, (vmax - vmin)
    if span > 0 then
      local acc = {}
      for i = 1, n do
        local j = floor((values[i] - vmin) / span * (nb - 1) + 0.5)
        acc[j] = (acc[j] or 0) + (weights and weights[i] or 1)
      end
      xs, ws = {}, {}
      for j = 0, nb - 1 do
        if acc[j] then
          xs[#xs + 1] = vmin + span * j / (nb - 1)
          ws[#ws + 1] = acc[j]
        end
      end
    end
  end
  local m = opts.points or 200
  local gx, gy = {}, {}
  local norm = 1 / (total * h * sqrt(2 * math.pi))
  for i = 0, m - 1 do
    local x = lo + (hi - lo) * i / max(1, m - 1)
    local s = 0
    for j = 1, #xs do
      local z = (x - xs[j]) / h
      if z > -8 and z < 8 then s = s + (ws and ws[j] or 1) * exp(-0.5 * z * z) end
    end
    gx[i + 1], gy[i + 1] = x, s * norm
  end
  return { x = gx, y = gy, bandwidth = h }
end

--- KDE of histogram bins ({low, high, count}): each bin's count sits at its
-- middle (geometric middle and log10 space when opts.log). Same options and
-- result as M.kde; with opts.log the x values are log10 of the values.
function M.kde_bins(bins, opts)
  opts = opts or {}
  local values, weights = {}, {}
  for _, b in ipairs(bins) do
    if b.count > 0 then
      if opts.log then
        if b.low > 0 then
          values[#values + 1] = (log10(b.low) + log10(b.high)) / 2
          weights[#weights + 1] = b.count
        end
      else
        values[#values + 1] = (b.low + b.high) / 2
        weights[#weights + 1] = b.count
      end
    end
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.weights = weights
  return M.kde(values, o)
end

-- ---- binning ----------------------------------------------------------------

-- Weighted points {value, count} from raw samples.
local function points_of(samples)
  local pts = {}
  for i, v in ipairs(samples) do pts[i] = { value = v, count = 1 } end
  return pts
end

-- Rice's rule, 2 n^(1/3), within [8, 60].
local function bin_count(n)
  return max(8, min(60, ceil(2 * n ^ (1 / 3))))
end
M.bin_count = bin_count

--- Equal-width bins with nice edges covering the points ({value, count}).
-- n: the wanted number of bins (default by Rice's rule).
function M.linear_bins(points, n)
  local lo, hi, total = huge, -huge, 0
  for _, p in ipairs(points) do
    lo, hi, total = min(lo, p.value), max(hi, p.value), total + p.count
  end
  if total == 0 then return {} end
  n = n or bin_count(total)
  if hi <= lo then -- one distinct value: a few bins centred on it
    local d = lo ~= 0 and abs(lo) * 0.02 or 0.5
    lo, hi, n = lo - d, hi + d, 5
  end
  local step = M.nice_step((hi - lo) / n)
  local start = floor(lo / step + 1e-9) * step
  local nb = max(1, ceil((hi - start) / step - 1e-9))
  if start + nb * step <= hi then nb = nb + 1 end
  local bins = {}
  for i = 1, nb do bins[i] = { low = start + (i - 1) * step, high = start + i * step, count = 0 } end
  for _, p in ipairs(points) do
    local i = min(nb, max(1, floor((p.value - start) / step) + 1))
    bins[i].count = bins[i].count + p.count
  end
  return bins
end

--- Log-spaced bins over the positive points; zeros (and negatives) come
-- first as one {low = 0, high = 0} bin, like kb.hist's h:bins().
function M.log_bins(points, n)
  local lo, hi, zeros, total = huge, 0, 0, 0
  for _, p in ipairs(points) do
    if p.value > 0 then
      lo, hi = min(lo, p.value), max(hi, p.value)
      total = total + p.count
    else
      zeros = zeros + p.count
    end
  end
  local bins = {}
  if zeros > 0 then bins[1] = { low = 0, high = 0, count = zeros } end
  if total == 0 then return bins end
  n = n or bin_count(total)
  if hi <= lo then lo, hi = lo / 1.5, hi * 1.5 end
  local span, first = log(hi / lo), #bins
  for i = 1, n do
    bins[first + i] = { low = lo * exp(span * (i - 1) / n), high = i == n and hi or lo * exp(span * i / n), count = 0 }
  end
  for _, p in ipairs(points) do
    if p.value > 0 then
      local j = min(n, max(1, floor(n * log(p.value / lo) / span) + 1))
      bins[first + j].count = bins[first + j].count + p.count
    end
  end
  return bins
end

-- ---- drawing primitives -----------------------------------------------------

M.FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', 'Liberation Sans', Arial, sans-serif"

--- Colours (a muted, colour-blind-friendlier palette).
M.palette = { "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3",
  "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd" }
M.colors = { text = "#222", muted = "#666", grid = "#e6e6e6", axis = "#444",
  good = "#2e8b57", bad = "#c0392b", warn = "#d68910", neutral = "#8c8c8c" }

local function text(x, y, s, attrs)
  return format('<text x="%s" y="%s"%s>%s</text>', px(x), px(y), attrs and (" " .. attrs) or "", esc(s))
end

local function line(x1, y1, x2, y2, attrs)
  return format('<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>', px(x1), px(y1), px(x2), px(y2), attrs)
end

local function rect(x, y, w, h, attrs)
  return format('<rect x="%s" y="%s" width="%s" height="%s" %s/>', px(x), px(y), px(max(0, w)), px(max(0, h)), attrs)
end

-- A plot under construction: a frame with title, subtitle, a band above
-- the plot area for marker labels and a plot area inside margins.
local Plot = {}
Plot.__index = Plot

local function new_plot(o, margins)
  local W, H = o.width or 640, o.height or 320
  local top = 12
  if o.title then top = top + 18 end
  if o.subtitle then top = top + 16 end
  top = top + (margins.band or 0) + 10
  local p = setmetatable({
    W = W, H = H, out = {},
    x0 = margins.left or 64, x1 = W - (margins.right or 20),
    y0 = top, y1 = H - (margins.bottom or 46),
    band_top = top - (margins.band or 0) - 6,
  }, Plot)
  local label = o.title or o.aria_label or "plot"
  p:add(format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
    'font-family="%s" font-size="11" fill="%s" role="img" aria-label="%s">',
    W, H, W, H, esc(M.FONT), M.colors.text, esc(label)))
  p:add(format('<title>%s</title>', esc(label)))
  p:add(rect(0, 0, W, H, 'fill="#fff"'))
  local y = 12
  if o.title then
    y = y + 14
    p:add(text(12, y, o.title, 'font-size="14" font-weight="600"'))
  end
  if o.subtitle then
    y = y + 16
    p:add(text(12, y, o.subtitle, format('fill="%s"', M.colors.muted)))
  end
  return p
end

function Plot:add(s) self.out[#self.out + 1] = s end

function Plot:finish()
  self:add("</svg>")
  return concat(self.out, "\n")
end

-- The title of an axis: its label and, in parentheses, the unit its tick
-- labels are in ("run.duration (min)").
local function axis_title(label, unit)
  if unit and label then return label .. " (" .. unit .. ")" end
  return label or unit
end
M.axis_title = axis_title

-- A tick label: the number shown and, as data-value, the value it stands
-- for in the data's unit (seconds for "s"), so a reader (or a test) can
-- check that the axis title's unit turns one into the other.
local function tick_text(x, y, t, anchor)
  return format('<text x="%s" y="%s" class="tick" data-value="%s" text-anchor="%s">%s</text>',
    px(x), px(y), format("%.6g", t.value), anchor, esc(t.label))
end

-- Horizontal axis at the bottom of the plot area, with vertical grid lines.
-- Tick labels are plain numbers; the title below carries their unit.
function Plot:x_axis(scale, unit, label, opts)
  opts = opts or {}
  opts.bare, opts.edge_lo, opts.edge_hi = true, 2, self.W - 2
  local ticks, minor = scale:ticks(unit, opts)
  local y = self.y1
  local parts = {}
  for _, t in ipairs(ticks) do
    local x = scale:map(t.value)
    if opts.grid ~= false then
      parts[#parts + 1] = line(x, self.y0, x, y, format('stroke="%s"', M.colors.grid))
    end
  end
  for _, v in ipairs(minor) do
    local x = scale:map(v)
    parts[#parts + 1] = line(x, y, x, y + 3, format('stroke="%s"', M.colors.axis))
  end
  parts[#parts + 1] = line(self.x0, y, self.x1, y, format('stroke="%s"', M.colors.axis))
  for _, t in ipairs(ticks) do
    local x = scale:map(t.value)
    parts[#parts + 1] = line(x, y, x, y + 5, format('stroke="%s"', M.colors.axis))
    local w, anchor = text_width(t.label, 11), "middle"
    if x + w / 2 > self.W - 2 then anchor = "end" elseif x - w / 2 < 2 then anchor = "start" end
    parts[#parts + 1] = tick_text(x, y + 17, t, anchor)
  end
  local title = axis_title(label, ticks.unit)
  if title then
    parts[#parts + 1] = text((self.x0 + self.x1) / 2, y + 35, title,
      format('class="axis-title" text-anchor="middle" fill="%s"', M.colors.muted))
  end
  self:add('<g class="x-axis">' .. concat(parts) .. '</g>')
end

-- Vertical axis on the left with horizontal grid lines; its title,
-- rotated, carries the unit of the tick labels.
function Plot:y_axis(scale, unit, label, opts)
  opts = opts or {}
  opts.vertical, opts.bare = true, true
  local ticks = scale:ticks(unit, opts)
  local parts = {}
  local widest = 0
  for _, t in ipairs(ticks) do
    local y = scale:map(t.value)
    parts[#parts + 1] = line(self.x0, y, self.x1, y, format('stroke="%s"', M.colors.grid))
    parts[#parts + 1] = tick_text(self.x0 - 6, y + 4, t, "end")
    widest = max(widest, text_width(t.label, 11))
  end
  parts[#parts + 1] = line(self.x0, self.y0, self.x0, self.y1, format('stroke="%s"', M.colors.axis))
  local title = axis_title(label, ticks.unit)
  if title then
    local x = max(10, self.x0 - widest - 16)
    local y = (self.y0 + self.y1) / 2
    parts[#parts + 1] = format('<text x="%s" y="%s" class="axis-title" transform="rotate(-90 %s %s)" text-anchor="middle" fill="%s">%s</text>',
      px(x), px(y), px(x), px(y), M.colors.muted, esc(title))
  end
  self:add('<g class="y-axis">' .. concat(parts) .. '</g>')
end

-- "no data" in the middle of the plot area.
function Plot:empty(msg)
  self:add(text((self.x0 + self.x1) / 2, (self.y0 + self.y1) / 2, msg or "no data",
    format('class="empty" text-anchor="middle" font-size="13" fill="%s"', M.colors.muted)))
end

--- A horizontal legend: entries { label, color, kind = "box"|"line"|"dot" }
-- laid out right-aligned so that it ends at x_right, baseline y.
function M.legend(entries, x_right, y)
  local widths, total = {}, 0
  for i, e in ipairs(entries) do
    widths[i] = 18 + text_width(e.label, 11)
    total = total + widths[i] + (i > 1 and 14 or 0)
  end
  local x = x_right - total
  local parts = { '<g class="legend">' }
  for i, e in ipairs(entries) do
    local c = e.color or M.palette[i]
    if e.kind == "line" then
      parts[#parts + 1] = line(x, y - 4, x + 14, y - 4, format('stroke="%s" stroke-width="2"%s', c,
        e.dash and format(' stroke-dasharray="%s"', e.dash) or ""))
    elseif e.kind == "dot" then
      parts[#parts + 1] = format('<circle cx="%s" cy="%s" r="3.5" fill="%s"/>', px(x + 7), px(y - 4), c)
    else
      parts[#parts + 1] = rect(x + 2, y - 10, 11, 11, format('fill="%s"', c))
    end
    parts[#parts + 1] = text(x + 18, y, e.label)
    x = x + widths[i] + 14
  end
  parts[#parts + 1] = "</g>"
  return concat(parts)
end

-- Greedy rows for marker labels so that none overlap: returns, per marker,
-- its row (0-based), x and text-anchor.
local function place_labels(items, x0, x1, size)
  local order = {}
  for i = 1, #items do order[i] = i end
  table.sort(order, function(a, b)
    if items[a].x ~= items[b].x then return items[a].x < items[b].x end
    return a < b
  end)
  local row_end = {}
  local placed = {}
  for _, i in ipairs(order) do
    local it = items[i]
    local w = text_width(it.label, size)
    local anchor, left = "middle", it.x - w / 2
    if left < x0 - 40 then anchor, left = "start", it.x - 2 end
    if left + w > x1 + 16 then anchor, left = "end", it.x - w + 2 end
    local row = 0
    while row_end[row] and row_end[row] + 6 > left do row = row + 1 end
    row_end[row] = left + w
    placed[i] = { row = row, anchor = anchor }
  end
  local rows = 0
  for _, pl in pairs(placed) do rows = max(rows, pl.row + 1) end
  return placed, rows
end

-- ---- histogram --------------------------------------------------------------

-- Rug marks at pixel positions with weights: quantised to whole pixels and
-- drawn as one path per opacity level, so 100k samples cost at most ~width
-- marks.
local function rug(p, xs, ws, y_top, y_bot, color)
  local acc, keys, wmax = {}, {}, 0
  for i, x in ipairs(xs) do
    local k = floor(x + 0.5)
    if not acc[k] then keys[#keys + 1] = k; acc[k] = 0 end
    acc[k] = acc[k] + (ws and ws[i] or 1)
    wmax = max(wmax, acc[k])
  end
  if #keys == 0 then return end
  table.sort(keys)
  local levels = { {}, {}, {}, {} }
  for _, k in ipairs(keys) do
    local level = 4
    if wmax > 1 then level = min(4, 1 + floor(3 * log(acc[k]) / log(wmax) + 0.5)) end
    local l = levels[level]
    l[#l + 1] = format("M%d %sv%s", k, px(y_top), px(y_bot - y_top))
  end
  local opacity = { 0.3, 0.5, 0.7, 0.95 }
  local parts = { '<g class="rug">' }
  for i, l in ipairs(levels) do
    if #l > 0 then
      parts[#parts + 1] = format('<path d="%s" stroke="%s" stroke-opacity="%s" stroke-width="1"/>',
        concat(l), color, opacity[i])
    end
  end
  parts[#parts + 1] = "</g>"
  p:add(concat(parts))
end

--- A histogram with optional rug, KDE and vertical markers.
-- o.bins: list of {low, high, count} (drawn as given); or o.samples (raw
--   values) / o.points ({value, count} weighted values), binned here.
-- o.samples / o.points also give the rug and the KDE when present; without
--   them the bins' middles do.
-- o.scale: "linear", "log" or "auto" (log when max/min >= 30).
-- o.unit ("s" for durations), o.kde (bool), o.rug (default true),
-- o.markers: list of { value, label, color, dash, kind = "percentile"|"threshold" },
-- o.title, o.subtitle, o.xlabel, o.ylabel ("count"), o.width, o.height, o.color.
-- Zero values cannot show on a log axis; they are counted in the subtitle.
function M.histogram(o)
  local unit = o.unit
  local points = o.points or (o.samples and points_of(o.samples)) or nil
  local bins = o.bins
  -- the data's positive range decides the scale
  local pmin, vmax, total = huge, -huge, 0
  local function see(v, c)
    if c > 0 then
      if v > 0 then pmin = min(pmin, v) end
      vmax = max(vmax, v)
      total = total + c
    end
  end
  if bins then
    for _, b in ipairs(bins) do
      see(b.low, b.count)
      see(b.high, b.count)
    end
  elseif points then
    for _, pt in ipairs(points) do see(pt.value, pt.count) end
  end
  local kind = o.scale or "auto"
  if kind == "auto" then kind = (pmin < huge and vmax / pmin >= 30) and "log" or "linear" end
  if not bins and points then
    bins = kind == "log" and M.log_bins(points, o.nbins) or M.linear_bins(points, o.nbins)
  end
  bins = bins or {}

  -- bins that can be drawn, and the zero bin on a log axis
  local shown, hidden = {}, 0
  for _, b in ipairs(bins) do
    if kind == "log" and not (b.low > 0) then
      hidden = hidden + b.count
    else
      shown[#shown + 1] = b
    end
  end
  local lo, hi, cmax = huge, -huge, 0
  for _, b in ipairs(shown) do
    lo, hi, cmax = min(lo, b.low), max(hi, b.high), max(cmax, b.count)
  end
  local empty = lo == huge
  if empty then
    if kind == "log" then lo, hi = 1e-3, 1 else lo, hi = 0, 1 end
  elseif hi <= lo then
    if kind == "log" then lo, hi = lo / 2, hi * 2 else lo, hi = lo - 0.5, hi + 0.5 end
  end
  -- markers close to the data widen the domain; far ones point off the edge
  local markers = o.markers or {}
  for _, m in ipairs(markers) do
    local v = m.value
    if type(v) == "number" and not empty then
      if kind == "log" then
        if v > 0 and v < lo and v >= lo / 3 then lo = v / 1.05 end
        if v > hi and v <= hi * 3 then hi = v * 1.05 end
      else
        local span = hi - lo
        if v < lo and v >= lo - 0.5 * span then lo = v - 0.02 * span end
        if v > hi and v <= hi + 0.5 * span then hi = v + 0.02 * span end
      end
    end
  end

  -- marker label rows decide the band above the plot area
  local W = o.width or 640
  local left, right = 64, 24
  local probe = M.scale(kind, lo, hi, left, W - right)
  local items = {}
  for i, m in ipairs(markers) do
    local x = type(m.value) == "number" and probe:map(m.value) or nil
    local label = m.label or M.format_value(m.value, unit)
    local arrow = nil
    if x == nil or x < left then x, arrow = left, "‹ " elseif x > W - right then x, arrow = W - right, " ›" end
    if arrow == "‹ " then label = arrow .. label elseif arrow then label = label .. arrow end
    items[i] = { x = x, label = label, clipped = arrow ~= nil }
  end
  local placed, rows = place_labels(items, left, W - right, 10.5)
  local p = new_plot(o, { left = left, right = right, bottom = 46, band = rows * 13 })
  local xs = M.scale(kind, lo, hi, p.x0, p.x1)
  local rug_h = (o.rug ~= false) and 10 or 0
  local base = p.y1 - rug_h - (rug_h > 0 and 2 or 0)
  -- values for rug and KDE: samples, weighted points, or bin middles
  local rvals, rws = {}, {}
  if points then
    for _, pt in ipairs(points) do
      if pt.count > 0 and (kind ~= "log" or pt.value > 0) then
        rvals[#rvals + 1], rws[#rws + 1] = pt.value, pt.count
      end
    end
  else
    for _, b in ipairs(shown) do
      if b.count > 0 then
        local mid = kind == "log" and sqrt(b.low * b.high) or (b.low + b.high) / 2
        rvals[#rvals + 1], rws[#rws + 1] = mid, b.count
      end
    end
  end

  -- KDE in axis space, scaled to counts per (average) bin; its peak is
  -- part of the y range, so the curve is never cut at the top
  local kde_curve, kde_scale, kde_peak = nil, 0, 0
  if o.kde and #rvals >= 2 and #shown > 0 then
    local us = {}
    for i, v in ipairs(rvals) do us[i] = xs:u(v) end
    local distinct = false
    for i = 2, #us do if us[i] ~= us[1] then distinct = true break end end
    if distinct then
      local weight = 0
      for _, w in ipairs(rws) do weight = weight + w end
      local bw_u = (xs:u(hi) - xs:u(lo)) / #shown
      kde_curve = M.kde(us, { weights = rws, lo = xs.u0, hi = xs.u1, points = 160 })
      kde_scale = weight * bw_u
      for i = 1, #kde_curve.y do kde_peak = max(kde_peak, kde_curve.y[i] * kde_scale) end
    end
  end
  cmax = max(cmax, kde_peak)

  local ystep = M.nice_step(max(1, cmax) / 5)
  if ystep < 1 then ystep = 1 end
  if ystep % 1 ~= 0 then ystep = ystep * 2 end
  local ytop = max(ystep, ceil(max(1, cmax) * 1.04 / ystep) * ystep)
  local ys = M.scale("linear", 0, ytop, base, p.y0)
  p:y_axis(ys, nil, o.ylabel or "count", { integer = true, n = 5 })
  p:x_axis(xs, unit, o.xlabel or (unit == "s" and "duration" or "value"))
  if empty then p:empty(o.empty_text) end

  -- bars
  local color = o.color or M.palette[1]
  local parts = { format('<g class="bars" fill="%s" fill-opacity="0.78" stroke="#fff" stroke-width="0.6">', color) }
  for _, b in ipairs(shown) do
    if b.count > 0 then
      local xa, xb = xs:map(b.low), xs:map(b.high)
      if xb - xa < 2 then xa, xb = (xa + xb) / 2 - 1, (xa + xb) / 2 + 1 end
      local y = ys:map(b.count)
      local range = b.low == b.high and M.format_value(b.low, unit)
        or (M.format_value(b.low, unit) .. " – " .. M.format_value(b.high, unit))
      parts[#parts + 1] = format('<rect class="bar" x="%s" y="%s" width="%s" height="%s"%s><title>%s: %s</title></rect>',
        px(xa), px(y), px(xb - xa), px(base - y), (xb - xa) > 4 and "" or ' stroke="none"',
        esc(range), esc(M.format_number(b.count)))
    end
  end
  parts[#parts + 1] = "</g>"
  p:add(concat(parts))
  p:add(line(p.x0, base, p.x1, base, format('stroke="%s"', M.colors.axis)))

  if kde_curve then
    local d = {}
    for i = 1, #kde_curve.x do
      local y = max(ys:map(kde_curve.y[i] * kde_scale), p.y0)
      d[i] = (i == 1 and "M" or "L") .. px(xs:map_u(kde_curve.x[i])) .. " " .. px(y)
    end
    p:add(format('<path class="kde" d="%s" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round"/>',
      concat(d), o.kde_color or "#1f3b6e"))
  end

  if rug_h > 0 and #rvals > 0 then
    local rx = {}
    for i, v in ipairs(rvals) do rx[i] = xs:map(v) end
    rug(p, rx, rws, base + 2, p.y1 - 1, o.rug_color or "#1f3b6e")
  end

  -- markers: a vertical line from the label row to the baseline
  -- all lines first, then the labels with a white halo over any line
  -- crossing them
  local mparts, labels = { '<g class="markers">' }, {}
  for i, m in ipairs(markers) do
    local it, pl = items[i], placed[i]
    local x = xs:map(m.value) or p.x0
    x = min(max(x, p.x0), p.x1)
    local c = m.color or (m.kind == "threshold" and M.colors.bad or "#333")
    local label_y = p.band_top + pl.row * 13 + 10
    if not it.clipped then
      mparts[#mparts + 1] = line(x, label_y + 3, x, base, format('class="marker" stroke="%s" stroke-width="%s"%s',
        c, m.kind == "threshold" and "1.8" or "1.2",
        (m.dash or m.kind ~= "threshold") and format(' stroke-dasharray="%s"', m.dash or "4 3") or ""))
    end
    labels[#labels + 1] = text(x, label_y, it.label, format('class="marker-label" text-anchor="%s" fill="%s"%s',
      pl.anchor, c, m.kind == "threshold" and ' font-weight="600"' or ""))
  end
  mparts[#mparts + 1] = '<g font-size="10.5" stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">'
  mparts[#mparts + 1] = concat(labels)
  mparts[#mparts + 1] = "</g></g>"
  if #markers > 0 then p:add(concat(mparts)) end

  if hidden > 0 then
    p:add(text(p.x1, p.y0 + 12, format("%s zero value%s not shown (log axis)", M.format_number(hidden),
      hidden == 1 and "" or "s"), format('text-anchor="end" fill="%s"', M.colors.muted)))
  end
  return p:finish()
end

-- ---- categorical counts -----------------------------------------------------

local OUTCOME_COLORS = {
  succeeded = M.colors.good, success = M.colors.good, passed = M.colors.good, ok = M.colors.good, completed = M.colors.good,
  failed = M.colors.bad, failure = M.colors.bad, error = M.colors.bad, errored = M.colors.bad,
  timeout = M.colors.warn, ["timed out"] = M.colors.warn, interrupted = M.colors.warn,
  skipped = M.colors.neutral, canceled = M.colors.neutral, cancelled = M.colors.neutral,
  ["not succeeded"] = M.colors.bad,
}

--- A bar per category (a seaborn count plot): o.categories = list of
-- { label, value, color }; colours default by outcome name (succeeded green,
-- failed red, ...) then the palette. o.title, o.subtitle, o.ylabel, o.unit.
function M.bars(o)
  local cats = o.categories or {}
  local W = o.width or 640
  local p = new_plot(o, { left = 64, right = 20, bottom = 40, band = 0 })
  local vmax = 0
  for _, c in ipairs(cats) do vmax = max(vmax, c.value or 0) end
  local integer = true
  for _, c in ipairs(cats) do if math.type(c.value) ~= "integer" then integer = false end end
  local step = M.nice_step(max(vmax, integer and 1 or 0) / 5)
  if integer and step < 1 then step = 1 end
  if integer and step % 1 ~= 0 then step = step * 2 end
  local top = max(step, ceil(vmax * 1.12 / step) * step)
  local ys = M.scale("linear", 0, top, p.y1, p.y0)
  p:y_axis(ys, o.unit, o.ylabel or "count", { integer = integer, n = 5 })
  if #cats == 0 then
    p:empty()
    return p:finish()
  end
  local slot = (p.x1 - p.x0) / #cats
  local bw = min(120, slot * 0.6)
  local parts = { '<g class="bars">' }
  for i, c in ipairs(cats) do
    local cx = p.x0 + slot * (i - 0.5)
    local v = c.value or 0
    local y = ys:map(v)
    local col = c.color or OUTCOME_COLORS[tostring(c.label):lower()] or M.palette[(i - 1) % #M.palette + 1]
    parts[#parts + 1] = format('<rect class="bar" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s: %s</title></rect>',
      px(cx - bw / 2), px(y), px(bw), px(p.y1 - y), col, esc(c.label), esc(M.format_value(v, o.unit)))
    parts[#parts + 1] = text(cx, y - 5, M.format_value(v, o.unit), 'class="value" text-anchor="middle" font-weight="600"')
    local label = tostring(c.label)
    local maxw = slot - 4
    if text_width(label, 11) > maxw then
      local keep = max(1, floor(maxw / (11 * 0.58)) - 1)
      label = label:sub(1, keep) .. "…"
    end
    parts[#parts + 1] = text(cx, p.y1 + 17, label, 'class="category" text-anchor="middle"')
  end
  parts[#parts + 1] = "</g>"
  p:add(concat(parts))
  p:add(line(p.x0, p.y1, p.x1, p.y1, format('stroke="%s"', M.colors.axis)))
  if o.xlabel then
    p:add(text((p.x0 + p.x1) / 2, p.y1 + 35, o.xlabel, format('text-anchor="middle" fill="%s"', M.colors.muted)))
  end
  return p:finish()
end

-- ---- line plot --------------------------------------------------------------

-- Domain of a list of values with a little padding (none below 0 for
-- positive data on a linear axis, which then starts at 0 when near it).
local function domain(values, kind, zero)
  local lo, hi = huge, -huge
  for _, v in ipairs(values) do
    if kind ~= "log" or v > 0 then lo, hi = min(lo, v), max(hi, v) end
  end
  if lo == huge then return kind == "log" and 1 or 0, kind == "log" and 10 or 1 end
  if kind == "log" then
    if hi <= lo then return lo / 2, hi * 2 end
    local f = (hi / lo) ^ 0.04
    return lo / f, hi * f
  end
  if hi <= lo then
    local d = lo ~= 0 and abs(lo) * 0.1 or 1
    return lo - d, hi + d
  end
  local pad = (hi - lo) * 0.04
  if zero and lo >= 0 then return 0, hi + pad end
  return lo - pad, hi + pad
end

-- Legend entries laid out left to right in rows no wider than `width`:
-- returns rows (lists of {entry, x offset}) and the row count.
local function legend_rows(entries, width)
  local rows, x = { {} }, 0
  for _, e in ipairs(entries) do
    local w = 18 + text_width(e.label, 11)
    if x > 0 and x + w > width then rows[#rows + 1], x = {}, 0 end
    local row = rows[#rows]
    row[#row + 1] = { entry = e, x = x }
    x = x + w + 14
  end
  return rows
end

--- Several series of points with optional error bars.
-- o.series = list of { name, color, dash, line, points = list of { x, y, err }
--   (symmetric) or { x, y, lo, hi } }; points are drawn in x order, joined
--   by a line unless line = false (marks, e.g. kbrun report --history's
--   regressions; the legend then shows a dot).
-- o.x / o.y = { scale = "linear"|"log"|"auto", unit, label, zero (y: start
--   at 0, default true for linear), domain = { lo, hi } (a fixed range, e.g.
--   the same for every panel of a figure), ticks = "data" (x: a tick at
--   each distinct x; the default when there are at most 16) }.
-- y.scale defaults to "auto": log when the positive values span 30x or
-- more, so one level far above the rest does not flatten the others.
-- The legend has a band of its own between the subtitle and the plot
-- area (wrapping into rows), so it never covers the data.
-- o.marks = list of { x, label }: dashed vertical lines (stage boundaries).
-- o.title, o.subtitle, o.width, o.height.
function M.lines(o)
  local xo, yo = o.x or {}, o.y or {}
  local xv, yv = {}, {}
  local series = o.series or {}
  for _, s in ipairs(series) do
    for _, pt in ipairs(s.points or {}) do
      xv[#xv + 1] = pt.x
      if pt.y then yv[#yv + 1] = pt.y end
      local lo_, hi_ = pt.lo or (pt.err and pt.y - pt.err), pt.hi or (pt.err and pt.y + pt.err)
      if lo_ then yv[#yv + 1] = lo_ end
      if hi_ then yv[#yv + 1] = hi_ end
    end
  end
  local function auto(kind, values, dom)
    if kind ~= nil and kind ~= "auto" then return kind end
    local lo, hi = huge, -huge
    for _, v in ipairs(dom or values) do
      if v <= 0 then return "linear" end
      lo, hi = min(lo, v), max(hi, v)
    end
    return (lo < huge and hi / lo >= 30) and "log" or "linear"
  end
  local xk = auto(xo.scale or "linear", xv, xo.domain)
  local yk = auto(yo.scale, yv, yo.domain)
  local W = o.width or 640
  local entries = {}
  for i, s in ipairs(series) do
    local c = s.color or M.palette[(i - 1) % #M.palette + 1]
    entries[#entries + 1] = { label = s.name or ("series " .. i), color = c, kind = s.line == false and "points" or "line",
      dash = s.dash }
  end
  local lrows = #entries > 0 and legend_rows(entries, W - 68 - 20) or {}
  local p = new_plot(o, { left = 68, right = 20, bottom = 46, band = #lrows * 16 + (#lrows > 0 and 6 or 0) })
  local x0, x1 = domain(xv, xk, false)
  if xo.domain then x0, x1 = xo.domain[1], xo.domain[2] end
  local y0, y1 = domain(yv, yk, yo.zero ~= false)
  if yo.domain then y0, y1 = yo.domain[1], yo.domain[2] end
  local xs = M.scale(xk, x0, x1, p.x0, p.x1)
  local ys = M.scale(yk, y0, y1, p.y1, p.y0)
  p:y_axis(ys, yo.unit, yo.label or (yo.unit == "s" and "duration" or "value"))
  local xdistinct, xseen = {}, {}
  for _, v in ipairs(xv) do
    if not xseen[v] then xseen[v], xdistinct[#xdistinct + 1] = true, v end
  end
  local xopts = nil
  if xo.ticks == "data" or (xo.ticks == nil and #xdistinct <= 16 and #xdistinct >= 2) then
    xopts = { values = xdistinct }
  end
  p:x_axis(xs, xo.unit, xo.label or (xo.unit == "s" and "duration" or "value"), xopts)
  if #xv == 0 then p:empty() end
  for _, m in ipairs(o.marks or {}) do
    local x = xs:map(m.x)
    if x then
      p:add(format('<g class="mark"><title>%s</title>%s</g>', esc(m.label or ""), line(x, p.y0, x, p.y1,
        format('stroke="%s" stroke-width="1" stroke-dasharray="4 3"', M.colors.muted))))
    end
  end
  for i, row in ipairs(lrows) do
    local y = p.band_top + (i - 1) * 16 + 11
    local parts = { '<g class="legend">' }
    for _, it in ipairs(row) do
      local e, x = it.entry, p.x0 + it.x
      if e.kind == "points" then
        parts[#parts + 1] = format('<circle cx="%s" cy="%s" r="4" fill="%s"/>', px(x + 7), px(y - 4), e.color)
      else
        parts[#parts + 1] = line(x, y - 4, x + 14, y - 4, format('stroke="%s" stroke-width="2"%s', e.color,
          e.dash and format(' stroke-dasharray="%s"', e.dash) or ""))
      end
      parts[#parts + 1] = text(x + 18, y, e.label)
    end
    parts[#parts + 1] = "</g>"
    p:add(concat(parts))
  end
  for i, s in ipairs(series) do
    local c = entries[i].color
    local pts = {}
    for _, pt in ipairs(s.points or {}) do
      if xs:map(pt.x) and pt.y and ys:map(pt.y) then pts[#pts + 1] = pt end
    end
    table.sort(pts, function(a, b) return a.x < b.x end)
    local parts = { format('<g class="series" stroke="%s" fill="%s">', c, c) }
    for _, pt in ipairs(pts) do
      local lo_, hi_ = pt.lo or (pt.err and pt.y - pt.err), pt.hi or (pt.err and pt.y + pt.err)
      if lo_ and hi_ then
        local x = xs:map(pt.x)
        local ya, yb = ys:map(max(lo_, yk == "log" and ys.d0 or lo_)) or p.y1, ys:map(hi_) or p.y0
        parts[#parts + 1] = format('<path class="errorbar" d="M%s %sV%sM%s %sH%sM%s %sH%s" stroke-width="1.2" fill="none"/>',
          px(x), px(ya), px(yb), px(x - 4), px(ya), px(x + 4), px(x - 4), px(yb), px(x + 4))
      end
    end
    local d = {}
    for i2, pt in ipairs(pts) do
      d[#d + 1] = (i2 == 1 and "M" or "L") .. px(xs:map(pt.x)) .. " " .. px(ys:map(pt.y))
    end
    if #d > 1 and s.line ~= false then
      parts[#parts + 1] = format('<path class="line" d="%s" fill="none" stroke-width="2"%s/>', concat(d),
        s.dash and format(' stroke-dasharray="%s"', s.dash) or "")
    end
    for _, pt in ipairs(pts) do
      parts[#parts + 1] = format('<circle cx="%s" cy="%s" r="3.2"><title>%s: %s, %s</title></circle>',
        px(xs:map(pt.x)), px(ys:map(pt.y)), esc(s.name or ("series " .. i)),
        esc(M.format_value(pt.x, xo.unit)), esc(M.format_value(pt.y, yo.unit)))
    end
    parts[#parts + 1] = "</g>"
    p:add(concat(parts))
  end
  return p:finish()
end

-- ---- heat map ---------------------------------------------------------------

-- Viridis-like sequential colour stops.
local STOPS = {
  { 0x44, 0x01, 0x54 }, { 0x48, 0x28, 0x78 }, { 0x3e, 0x4a, 0x89 }, { 0x31, 0x68, 0x8e },
  { 0x26, 0x82, 0x8e }, { 0x1f, 0x9e, 0x89 }, { 0x35, 0xb7, 0x79 }, { 0x6d, 0xcd, 0x59 },
  { 0xb4, 0xde, 0x2c }, { 0xfd, 0xe7, 0x25 },
}

--- The colour at t in [0, 1] of the sequential scale: "#rrggbb" and its
-- relative luminance (to choose black or white text on it).
function M.color_at(t)
  t = min(1, max(0, t ~= t and 0 or t))
  local f = t * (#STOPS - 1)
  local i = min(#STOPS - 2, floor(f))
  local a, b, w = STOPS[i + 1], STOPS[i + 2], f - i
  local rgb = {}
  for k = 1, 3 do rgb[k] = floor(a[k] + (b[k] - a[k]) * w + 0.5) end
  local lum = (0.2126 * rgb[1] + 0.7152 * rgb[2] + 0.0722 * rgb[3]) / 255
  return format("#%02x%02x%02x", rgb[1], rgb[2], rgb[3]), lum
end

--- A grid of coloured cells with a colour scale.
-- o.rows, o.cols: lists of labels; o.values[r][c]: number or nil (no data,
-- drawn hatched grey). o.unit, o.log (colour by log10), o.title,
-- o.subtitle, o.xlabel, o.ylabel, o.scale_label, o.width, o.height.
function M.heatmap(o)
  local rows, cols = o.rows or {}, o.cols or {}
  local widest = 0
  for _, r in ipairs(rows) do widest = max(widest, text_width(r, 11)) end
  local left = max(48, min(200, widest + 16)) + (o.ylabel and 18 or 0)
  local p = new_plot(o, { left = left, right = 96, bottom = 46, band = 0 })
  local nr, nc = #rows, #cols
  local vmin, vmax = huge, -huge
  for r = 1, nr do
    for c = 1, nc do
      local v = o.values and o.values[r] and o.values[r][c]
      if type(v) == "number" and v == v and (not o.log or v > 0) then vmin, vmax = min(vmin, v), max(vmax, v) end
    end
  end
  if nr == 0 or nc == 0 or vmin == huge then
    p:empty()
    return p:finish()
  end
  local kind = o.log and "log" or "linear"
  if vmax <= vmin then
    if kind == "log" then vmin, vmax = vmin / 2, vmax * 2 else vmin, vmax = vmin - 1, vmax + 1 end
  end
  -- ids for <defs> must be unique in an HTML page holding several heat
  -- maps, and the same for the same input (deterministic output)
  local h = 2166136261
  for c in (tostring(o.title) .. "|" .. nr .. "|" .. nc .. "|" .. vmin .. "|" .. vmax):gmatch(".") do
    h = ((h ~ c:byte()) * 16777619) & 0xffffffff
  end
  local nodata_id, grad_id = format("kb-nodata-%08x", h), format("kb-cscale-%08x", h)
  local cscale = M.scale(kind, vmin, vmax, 0, 1)
  local cw, ch = (p.x1 - p.x0) / nc, (p.y1 - p.y0) / nr
  local parts = { '<defs><pattern id="' .. nodata_id .. '" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' ..
    '<rect width="6" height="6" fill="#eee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#ccc" stroke-width="2"/></pattern></defs>',
    '<g class="cells">' }
  for r = 1, nr do
    for c = 1, nc do
      local v = o.values and o.values[r] and o.values[r][c]
      local x, y = p.x0 + (c - 1) * cw, p.y0 + (r - 1) * ch
      if type(v) == "number" and v == v and cscale:map(v) then
        local col, lum = M.color_at(cscale:map(v))
        parts[#parts + 1] = format('<rect class="cell" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %s: %s</title></rect>',
          px(x), px(y), px(cw), px(ch), col, esc(rows[r]), esc(cols[c]), esc(M.format_value(v, o.unit)))
        local label = M.format_value(v, o.unit)
        if cw >= text_width(label, 10.5) + 6 and ch >= 15 then
          parts[#parts + 1] = text(x + cw / 2, y + ch / 2 + 4, label,
            format('text-anchor="middle" font-size="10.5" fill="%s"', lum > 0.5 and "#111" or "#fff"))
        end
      else
        parts[#parts + 1] = format('<rect class="cell nodata" x="%s" y="%s" width="%s" height="%s" fill="url(#%s)"><title>%s, %s: no data</title></rect>',
          px(x), px(y), px(cw), px(ch), nodata_id, esc(rows[r]), esc(cols[c]))
      end
    end
  end
  parts[#parts + 1] = "</g>"
  -- row and column labels
  parts[#parts + 1] = '<g class="labels">'
  for r = 1, nr do
    parts[#parts + 1] = text(p.x0 - 6, p.y0 + (r - 0.5) * ch + 4, rows[r], 'text-anchor="end"')
  end
  local step = 1
  local cwid = 0
  for _, c in ipairs(cols) do cwid = max(cwid, text_width(c, 11)) end
  while cwid + 6 > cw * step and step < nc do step = step + 1 end
  for c = 1, nc, step do
    parts[#parts + 1] = text(p.x0 + (c - 0.5) * cw, p.y1 + 16, cols[c], 'text-anchor="middle"')
  end
  parts[#parts + 1] = "</g>"
  if o.xlabel then
    parts[#parts + 1] = text((p.x0 + p.x1) / 2, p.y1 + 35, o.xlabel, format('text-anchor="middle" fill="%s"', M.colors.muted))
  end
  if o.ylabel then
    local x, y = 14, (p.y0 + p.y1) / 2
    parts[#parts + 1] = format('<text x="%s" y="%s" transform="rotate(-90 %s %s)" text-anchor="middle" fill="%s">%s</text>',
      px(x), px(y), px(x), px(y), M.colors.muted, esc(o.ylabel))
  end
  -- colour scale: a vertical gradient bar with ticks
  local bx, bw = p.x1 + 16, 14
  local grad = { format('<defs><linearGradient id="%s" x1="0" y1="1" x2="0" y2="0">', grad_id) }
  for i = 0, 10 do
    grad[#grad + 1] = format('<stop offset="%s" stop-color="%s"/>', px(i / 10), (M.color_at(i / 10)))
  end
  grad[#grad + 1] = "</linearGradient></defs>"
  parts[#parts + 1] = concat(grad)
  parts[#parts + 1] = rect(bx, p.y0, bw, p.y1 - p.y0, format('fill="url(#%s)" stroke="#999" stroke-width="0.5"', grad_id))
  local bscale = M.scale(kind, vmin, vmax, p.y1, p.y0)
  local ticks = bscale:ticks(o.unit, { vertical = true, n = 5 })
  for _, t in ipairs(ticks) do
    local y = bscale:map(t.value)
    parts[#parts + 1] = line(bx + bw, y, bx + bw + 4, y, format('stroke="%s"', M.colors.axis))
    parts[#parts + 1] = text(bx + bw + 6, y + 4, t.label, 'class="tick"')
  end
  if o.scale_label then
    parts[#parts + 1] = text(bx, p.y0 - 6, o.scale_label, format('fill="%s"', M.colors.muted))
  end
  p:add(concat(parts, "\n"))
  return p:finish()
end

return M
