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
--
-- The parts, each a module of its own: kb.report.svg_axes (numbers, units,
-- ticks, scales), kb.report.svg_stats (density estimates, binning),
-- kb.report.svg_draw (primitives, frame, legend) and kb.report.svg_plots
-- (the plot kinds). This table is their public functions, so callers need
-- only this one.
local axes = require "kb.report.svg_axes"
local stats = require "kb.report.svg_stats"
local draw = require "kb.report.svg_draw"
local plots = require "kb.report.svg_plots"

return {
  -- text, numbers and units
  escape = axes.escape, px = axes.px, format_number = axes.format_number,
  time_unit = axes.time_unit, format_value = axes.format_value, text_width = axes.text_width,
  -- ticks and scales
  nice_step = axes.nice_step, linear_ticks = axes.linear_ticks, log_ticks = axes.log_ticks,
  scale = axes.scale,
  -- density estimates and binning
  silverman = stats.silverman, kde = stats.kde, kde_bins = stats.kde_bins,
  bin_count = stats.bin_count, linear_bins = stats.linear_bins, log_bins = stats.log_bins,
  -- drawing: font, colours, axis titles, legends
  FONT = draw.FONT, palette = draw.palette, colors = draw.colors,
  axis_title = draw.axis_title, legend = draw.legend,
  -- the plots
  histogram = plots.histogram, bars = plots.bars, lines = plots.lines,
  color_at = plots.color_at, heatmap = plots.heatmap,
}
