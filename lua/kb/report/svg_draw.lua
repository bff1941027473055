--- kb.report.svg_draw: kb.report.svg's drawing primitives: the font and
-- colours, text, lines and rectangles, the frame of a plot (title, axes,
-- "no data"), legends and the placing of marker labels. kb.report.svg
-- re-exports FONT, palette, colors, axis_title and legend; the rest is for
-- kb.report.svg_plots.
local axes = require "kb.report.svg_axes"

local M = {}

local max = math.max
local format, concat = string.format, table.concat
local esc, px, text_width = axes.escape, axes.px, axes.text_width

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

M.text, M.line, M.rect, M.new_plot, M.place_labels = text, line, rect, new_plot, place_labels

return M
