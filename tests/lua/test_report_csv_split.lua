--- One report per kind of experiment: a KFP storm (taxi_50runs, 3 runs)
-- and a Kubebench experiment (kubebench_tf_cnn) in the same experiments
-- folder. report.csv is Kubebench's alone, with exactly the columns of its
-- record's row (docs/kubebench.md); the storm's row goes to
-- kfp-storm-report.csv with its status filled ("succeeded": every run
-- did) and counts equal to its result.json.
local kb = require "kb"
local T = require "kb.testing"
local csv = require "kb.csv"
local kubebench = require "kb.kubebench"
local kreport = require "kb.kubebench.report"

local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
local out = kb.fs.join(kb.fs.tmpdir("kbrun-test-report-csv"), "experiments")

local function run(scenario, ...)
  local cmd = { bin, "-q", "-o", out, "--seed", "11", kb.fs.join(src, "scenarios", scenario), ... }
  local r = kb.process.run { cmd = cmd, timeout = 240 }
  T.eq(r.code, 0, scenario .. ": " .. r.stderr)
end

local function result_of(prefix)
  for _, e in ipairs(kb.fs.list(out)) do
    local p = kb.fs.join(out, e, "result", "result.json")
    if e:sub(1, #prefix) == prefix and kb.fs.exists(p) then return kb.json.decode(kb.fs.read(p)) end
  end
  error("no experiment " .. prefix .. "* in " .. out)
end

T.case("a storm and a Kubebench experiment: one report each, status always filled", function()
  run("taxi_50runs.lua", "num_runs=3", "progress=false")
  run("kubebench_tf_cnn.lua")
  local storm = result_of("taxi-50runs-")
  local kbx = result_of("tf-cnn-dummy-")
  -- report.csv: Kubebench's row only, its documented columns only
  local rows, header = kreport.read(kb.fs.join(out, "report.csv"))
  T.eq(#rows, 1)
  T.eq(rows[1].experiment_id, kbx.experiment_id)
  T.eq(rows[1].status, "passed")
  local want = {}
  for k in pairs(kreport.flatten(kubebench.report_row(kbx.result))) do want[#want + 1] = k end
  T.same(header, kreport.order(want), "report.csv's columns are the record's row's")
  -- kfp-storm-report.csv: the storm's row, status filled
  local srows = csv.parse(kb.fs.read(kb.fs.join(out, "kfp-storm-report.csv")), { header = true })
  T.eq(#srows, 1)
  local row = srows[1]
  T.eq(row.experiment_id, storm.experiment_id)
  T.eq(row.status, "succeeded")
  T.eq(tonumber(row.num_runs), 3)
  T.eq(tonumber(row.succeeded), storm.result.runs.succeeded)
  T.eq(tonumber(row.succeeded), 3)
  for _, r in ipairs(srows) do T.ok(r.status ~= "", "status filled") end
end)

T.run()
