-- scenarios/sweep_taxi.lua on the simulator, reduced to 4 cells: every
-- cell runs a storm on its own simulated cluster, and the run duration
-- grows with the runs when the pool is too small (1 node) and much less
-- with 3 nodes. Values come from the simulator's model, not from timing.
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local scenario = dofile(fs.join(SRC, "scenarios", "sweep_taxi.lua"))
local OUT = fs.tmpdir("kb-sweep-taxi")

T.case("sweep_taxi: durations grow when the pool is too small", function()
  local p = {}
  for k, v in pairs(scenario.params) do p[k] = v end
  p.num_runs, p.pools, p.nodes, p.steps, p.parallel = "10,40", "1", "1,3", "4", 2
  local saved = rawget(kb, "exp")
  kb.exp = { out = OUT }
  local ok, r = pcall(scenario.run, p)
  kb.exp = saved
  T.ok(ok, tostring(r))
  T.eq(r.runs, 4)
  T.eq(r.failed, 0)
  local rows = csv.parse(fs.read(r.csv), { header = true })
  local d = {}
  for _, row in ipairs(rows) do
    T.eq(row.success_rate, "1", "every run succeeded in cell " .. row.cell)
    d[row.nodes .. "/" .. row.num_runs] = tonumber(row.duration_p50)
  end
  T.ok(d["1/40"] > 1.8 * d["1/10"], string.format("1 node: 40 runs take much longer than 10 (%s vs %s)", d["1/40"], d["1/10"]))
  T.ok(d["1/40"] > 1.8 * d["3/40"], string.format("40 runs: 1 node much slower than 3 (%s vs %s)", d["1/40"], d["3/40"]))
  T.ok(d["3/40"] - d["3/10"] < d["1/40"] - d["1/10"], "3 nodes grow less")
  local html = fs.read(r.html)
  T.contains(html, "duration_p50 vs num_runs")
  T.contains(html, "nodes = 1")
  T.contains(html, "duration_p50 by nodes and num_runs")
  T.ok(fs.exists(fs.join(r.dir, "c001-r1", "result", "runs.csv")), "each cell keeps its storm's runs.csv")
  T.ok(fs.exists(fs.join(r.dir, "kfp-storm-report.csv")), "cells append their row to the sweep's kfp-storm-report.csv")
end)

-- The docs' promise: on the fast-forwarding clock the same seed gives the
-- same figures, cell by cell, even with cells running side by side.
T.case("sweep_taxi: the same seed reproduces every cell's figures", function()
  local sheets = {}
  for i = 1, 2 do
    local p = {}
    for k, v in pairs(scenario.params) do p[k] = v end
    p.num_runs, p.pools, p.nodes, p.steps, p.parallel = "10,20", "1", "1,2", "3", 2
    p.seed, p.fresh = 42, true
    local saved = rawget(kb, "exp")
    kb.exp = { out = fs.join(OUT, "same-seed-" .. i) }
    local ok, r = pcall(scenario.run, p)
    kb.exp = saved
    T.ok(ok, tostring(r))
    T.eq(r.failed, 0)
    sheets[i] = csv.parse(fs.read(r.csv), { header = true })
  end
  T.eq(#sheets[1], 4)
  T.eq(#sheets[2], #sheets[1])
  local compared = 0
  for n, row in ipairs(sheets[1]) do
    local other = sheets[2][n]
    T.eq(other.cell, row.cell)
    for k, v in pairs(row) do
      if k:match("^duration") or k:match("^create") or k == "success_rate" or k:match("lag") then
        -- equal; in one process the second sweep's clock starts later, so
        -- the same sums carry other rounding in the last bits
        local a, b = tonumber(v), tonumber(other[k])
        T.ok(a and b and math.abs(a - b) <= 1e-9 * math.max(1, math.abs(a)),
          string.format("cell %s %s: %s vs %s", row.cell, k, v, other[k]))
        compared = compared + 1
      end
    end
  end
  T.ok(compared >= 8, "figures compared: " .. compared)
end)

T.run()
fs.remove(OUT, { recursive = true })
