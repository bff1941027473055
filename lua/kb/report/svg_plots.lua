--- kb.report.svg_plots: kb.report.svg's plot kinds: histogram (with
-- density curves, rug and markers), bars (categorical counts), lines (series
-- over x, with error bars and regressions marked) and heatmap. kb.report.svg
-- re-exports each.
local axes = require "kb.report.svg_axes"
local stats = require "kb.report.svg_stats"
local draw = require "kb.report.svg_draw"

local M = {}

local floor, ceil, abs, sqrt, log = math.floor, math.ceil, math.abs, math.sqrt, math.log
local max, min, huge = math.max, math.min, math.huge
local format, concat = string.format, table.concat
local esc, px, text_width = axes.escape, axes.px, axes.text_width
local text, line, rect, new_plot, place_labels = draw.text, draw.line, draw.rect, draw.new_plot, draw.place_labels
local points_of = stats.points_of

local function log10(x) return log(x, 10) end

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
    bins = kind == "log" and stats.log_bins(points, o.nbins) or stats.linear_bins(points, o.nbins)
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
  local probe = axes.scale(kind, lo, hi, left, W - right)
  local items = {}
  for i, m in ipairs(markers) do
    local x = type(m.value) == "number" and probe:map(m.value) or nil
    local label = m.label or axes.format_value(m.value, unit)
    local arrow = nil
    if x == nil or x < left then x, arrow = left, "‹ " elseif x > W - right then x, arrow = W - right, " ›" end
    if arrow == "‹ " then label = arrow .. label elseif arrow then label = label .. arrow end
    items[i] = { x = x, label = label, clipped = arrow ~= nil }
  end
  local placed, rows = place_labels(items, left, W - right, 10.5)
  local p = new_plot(o, { left = left, right = right, bottom = 46, band = rows * 13 })
  local xs = axes.scale(kind, lo, hi, p.x0, p.x1)
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
      kde_curve = stats.kde(us, { weights = rws, lo = xs.u0, hi = xs.u1, points = 160 })
      kde_scale = weight * bw_u
      for i = 1, #kde_curve.y do kde_peak = max(kde_peak, kde_curve.y[i] * kde_scale) end
    end
  end
  cmax = max(cmax, kde_peak)

  local ystep = axes.nice_step(max(1, cmax) / 5)
  if ystep < 1 then ystep = 1 end
  if ystep % 1 ~= 0 then ystep = ystep * 2 end
  local ytop = max(ystep, ceil(max(1, cmax) * 1.04 / ystep) * ystep)
  local ys = axes.scale("linear", 0, ytop, base, p.y0)
  p:y_axis(ys, nil, o.ylabel or "count", { integer = true, n = 5 })
  p:x_axis(xs, unit, o.xlabel or (unit == "s" and "duration" or "value"))
  if empty then p:empty(o.empty_text) end

  -- bars
  local color = o.color or draw.palette[1]
  local parts = { format('<g class="bars" fill="%s" fill-opacity="0.78" stroke="#fff" stroke-width="0.6">', color) }
  for _, b in ipairs(shown) do
    if b.count > 0 then
      local xa, xb = xs:map(b.low), xs:map(b.high)
      if xb - xa < 2 then xa, xb = (xa + xb) / 2 - 1, (xa + xb) / 2 + 1 end
      local y = ys:map(b.count)
      local range = b.low == b.high and axes.format_value(b.low, unit)
        or (axes.format_value(b.low, unit) .. " – " .. axes.format_value(b.high, unit))
      parts[#parts + 1] = format('<rect class="bar" x="%s" y="%s" width="%s" height="%s"%s><title>%s: %s</title></rect>',
        px(xa), px(y), px(xb - xa), px(base - y), (xb - xa) > 4 and "" or ' stroke="none"',
        esc(range), esc(axes.format_number(b.count)))
    end
  end
  parts[#parts + 1] = "</g>"
  p:add(concat(parts))
  p:add(line(p.x0, base, p.x1, base, format('stroke="%s"', draw.colors.axis)))

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
    local c = m.color or (m.kind == "threshold" and draw.colors.bad or "#333")
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
    p:add(text(p.x1, p.y0 + 12, format("%s zero value%s not shown (log axis)", axes.format_number(hidden),
      hidden == 1 and "" or "s"), format('text-anchor="end" fill="%s"', draw.colors.muted)))
  end
  return p:finish()
end

-- ---- categorical counts -----------------------------------------------------

local OUTCOME_COLORS = {
  succeeded = draw.colors.good, success = draw.colors.good, passed = draw.colors.good, ok = draw.colors.good, completed = draw.colors.good,
  failed = draw.colors.bad, failure = draw.colors.bad, error = draw.colors.bad, errored = draw.colors.bad,
  timeout = draw.colors.warn, ["timed out"] = draw.colors.warn, interrupted = draw.colors.warn,
  skipped = draw.colors.neutral, canceled = draw.colors.neutral, cancelled = draw.colors.neutral,
  ["not succeeded"] = draw.colors.bad,
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
  local step = axes.nice_step(max(vmax, integer and 1 or 0) / 5)
  if integer and step < 1 then step = 1 end
  if integer and step % 1 ~= 0 then step = step * 2 end
  local top = max(step, ceil(vmax * 1.12 / step) * step)
  local ys = axes.scale("linear", 0, top, p.y1, p.y0)
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
    local col = c.color or OUTCOME_COLORS[tostring(c.label):lower()] or draw.palette[(i - 1) % #draw.palette + 1]
    parts[#parts + 1] = format('<rect class="bar" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s: %s</title></rect>',
      px(cx - bw / 2), px(y), px(bw), px(p.y1 - y), col, esc(c.label), esc(axes.format_value(v, o.unit)))
    parts[#parts + 1] = text(cx, y - 5, axes.format_value(v, o.unit), 'class="value" text-anchor="middle" font-weight="600"')
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
  p:add(line(p.x0, p.y1, p.x1, p.y1, format('stroke="%s"', draw.colors.axis)))
  if o.xlabel then
    p:add(text((p.x0 + p.x1) / 2, p.y1 + 35, o.xlabel, format('text-anchor="middle" fill="%s"', draw.colors.muted)))
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
    local c = s.color or draw.palette[(i - 1) % #draw.palette + 1]
    entries[#entries + 1] = { label = s.name or ("series " .. i), color = c, kind = s.line == false and "points" or "line",
      dash = s.dash }
  end
  local lrows = #entries > 0 and legend_rows(entries, W - 68 - 20) or {}
  local p = new_plot(o, { left = 68, right = 20, bottom = 46, band = #lrows * 16 + (#lrows > 0 and 6 or 0) })
  local x0, x1 = domain(xv, xk, false)
  if xo.domain then x0, x1 = xo.domain[1], xo.domain[2] end
  local y0, y1 = domain(yv, yk, yo.zero ~= false)
  if yo.domain then y0, y1 = yo.domain[1], yo.domain[2] end
  local xs = axes.scale(xk, x0, x1, p.x0, p.x1)
  local ys = axes.scale(yk, y0, y1, p.y1, p.y0)
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
        format('stroke="%s" stroke-width="1" stroke-dasharray="4 3"', draw.colors.muted))))
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
        esc(axes.format_value(pt.x, xo.unit)), esc(axes.format_value(pt.y, yo.unit)))
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
  local cscale = axes.scale(kind, vmin, vmax, 0, 1)
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
          px(x), px(y), px(cw), px(ch), col, esc(rows[r]), esc(cols[c]), esc(axes.format_value(v, o.unit)))
        local label = axes.format_value(v, o.unit)
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
    parts[#parts + 1] = text((p.x0 + p.x1) / 2, p.y1 + 35, o.xlabel, format('text-anchor="middle" fill="%s"', draw.colors.muted))
  end
  if o.ylabel then
    local x, y = 14, (p.y0 + p.y1) / 2
    parts[#parts + 1] = format('<text x="%s" y="%s" transform="rotate(-90 %s %s)" text-anchor="middle" fill="%s">%s</text>',
      px(x), px(y), px(x), px(y), draw.colors.muted, esc(o.ylabel))
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
  local bscale = axes.scale(kind, vmin, vmax, p.y1, p.y0)
  local ticks = bscale:ticks(o.unit, { vertical = true, n = 5 })
  for _, t in ipairs(ticks) do
    local y = bscale:map(t.value)
    parts[#parts + 1] = line(bx + bw, y, bx + bw + 4, y, format('stroke="%s"', draw.colors.axis))
    parts[#parts + 1] = text(bx + bw + 6, y + 4, t.label, 'class="tick"')
  end
  if o.scale_label then
    parts[#parts + 1] = text(bx, p.y0 - 6, o.scale_label, format('fill="%s"', draw.colors.muted))
  end
  p:add(concat(parts, "\n"))
  return p:finish()
end

return M
