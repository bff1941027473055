--- kb.report.svg_axes: kb.report.svg's numbers, units, ticks and scales:
-- how a value is written (format_value, format_number, time_unit), how wide
-- a label is (text_width), which ticks an axis gets and how a scale maps a
-- domain onto pixels. kb.report.svg re-exports every function here.
local M = {}

local floor, ceil, abs, sqrt, log = math.floor, math.ceil, math.abs, math.sqrt, math.log
local max, min, huge = math.max, math.min, math.huge
local format = string.format

-- ---- text and numbers -------------------------------------------------------

local ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }

--- Escapes text for XML/HTML content and attribute values; control bytes
-- that XML forbids are dropped.
function M.escape(s)
  s = tostring(s):gsub("[%z\1-\8\11\12\14-\31\127]", "")
  return (s:gsub("[&<>\"']", ESCAPES))
end

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

return M
