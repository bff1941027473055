--- kb.report.svg_stats: the statistics kb.report.svg's histograms draw:
-- kernel density estimates (Silverman's bandwidth) and binning, equal-width
-- or logarithmic. kb.report.svg re-exports every public function here.
local axes = require "kb.report.svg_axes"

local M = {}

local floor, ceil, abs, sqrt, exp, log = math.floor, math.ceil, math.abs, math.sqrt, math.exp, math.log
local max, min, huge = math.max, math.min, math.huge

local function log10(x) return log(x, 10) end

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

-- Are all weights the same (a report's raw samples count 1 each)?
local function uniform(weights, n)
  local w = weights[1]
  for i = 2, n do
    if weights[i] ~= w then return false end
  end
  return true
end

--- Silverman's rule of thumb bandwidth of (optionally weighted) values:
-- 0.9 * min(sd, IQR / 1.34) * n^(-1/5). Never 0: identical values get a
-- bandwidth from their magnitude.
function M.silverman(values, weights)
  local xs, ws, n, sum = {}, {}, 0, 0
  if weights and not uniform(weights, #values) then
    local idx = {}
    for i = 1, #values do idx[i] = i end
    table.sort(idx, function(a, b) return values[a] < values[b] end)
    for i, j in ipairs(idx) do
      xs[i], ws[i] = values[j], weights[j]
    end
  else -- the same weight for all (10,000s of raw samples): no comparator to call
    xs = table.move(values, 1, #values, 1, xs)
    table.sort(xs)
    local w = weights and weights[1] or 1
    for i = 1, #xs do ws[i] = w end
  end
  for i = 1, #xs do
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
  local xs, ws, ascending = values, weights, false
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
      ascending = true
    end
  end
  local m = opts.points or 200
  local gx, gy = {}, {}
  local norm = 1 / (total * h * sqrt(2 * math.pi))
  -- Terms beyond 8 bandwidths count nothing. Over ascending xs (the bins)
  -- those that count are a window that moves up with x: its first term is
  -- found by walking on, not by testing every bin at every grid point.
  local windowed, first, nx = ascending and h > 0 and hi >= lo, 1, #xs
  for i = 0, m - 1 do
    local x = lo + (hi - lo) * i / max(1, m - 1)
    local s = 0
    if windowed then
      while first <= nx and (x - xs[first]) / h >= 8 do first = first + 1 end
      for j = first, nx do
        local z = (x - xs[j]) / h
        if z <= -8 then break end
        s = s + ws[j] * exp(-0.5 * z * z)
      end
    else
      for j = 1, nx do
        local z = (x - xs[j]) / h
        if z > -8 and z < 8 then s = s + (ws and ws[j] or 1) * exp(-0.5 * z * z) end
      end
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
  local step = axes.nice_step((hi - lo) / n)
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
M.points_of = points_of

return M
