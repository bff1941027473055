-- Summarises the taxi_50runs experiments of bench/kfp/calibration.sh: per
-- seed the four figures of the published 50-run result (run-duration
-- median, CreateRun/GetRun/DeleteRun p50) and whether each is within the
-- comparison's tolerance, then the median over seeds.
local fs = require "kb.fs"
local json = require "kb.json"

local function median(list)
  local v = {}
  for i, x in ipairs(list) do v[i] = x end
  table.sort(v)
  if #v == 0 then return nil end
  return #v % 2 == 1 and v[(#v + 1) // 2] or (v[#v // 2] + v[#v // 2 + 1]) / 2
end

local function walls(path)
  local t = {}
  if fs.exists(path) then
    for line in fs.read(path):gmatch("[^\n]+") do
      local seed, s = line:match("^(%S+)%s+(%S+)")
      t[tonumber(seed)] = tonumber(s)
    end
  end
  return t
end

return {
  params = { dir = "", wall = "" },
  run = function(p)
    local wall = walls(p.wall)
    local rows, columns, within, all_wall = {}, {}, {}, {}
    for _, name in ipairs(fs.list(p.dir)) do
      local path = fs.join(p.dir, name, "result", "result.json")
      if fs.exists(path) then
        local doc = json.decode(fs.read(path))
        rows[#rows + 1] = doc
      end
    end
    table.sort(rows, function(a, b) return a.seed < b.seed end)
    local ref = rows[1] and rows[1].result.comparison or {}
    local head = { "seed", "status", "real s" }
    for _, c in ipairs(ref) do head[#head + 1] = c.label .. string.format(" (%.3g)", c.published) end
    print(table.concat(head, " | "))
    for _, doc in ipairs(rows) do
      local cells = { tostring(doc.seed), doc.status, wall[doc.seed] and string.format("%.1f", wall[doc.seed]) or "-" }
      all_wall[#all_wall + 1] = wall[doc.seed]
      for i, c in ipairs(doc.result.comparison or {}) do
        columns[i] = columns[i] or {}
        columns[i][#columns[i] + 1] = c.measured
        within[i] = (within[i] or 0) + (c.within and 1 or 0)
        cells[#cells + 1] = string.format("%.3g (%+.0f%%)%s", c.measured, 100 * c.diff, c.within and "" or " !")
      end
      print(table.concat(cells, " | "))
    end
    local cells = { "median", "", all_wall[1] and string.format("%.1f", median(all_wall)) or "-" }
    for i, c in ipairs(ref) do
      local m = median(columns[i])
      cells[#cells + 1] = string.format("%.3g (%+.0f%%), within in %d/%d", m, 100 * (m - c.published) / c.published,
        within[i], #rows)
    end
    print(table.concat(cells, " | "))
    return { experiments = #rows }
  end,
}
