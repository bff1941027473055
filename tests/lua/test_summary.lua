--- kb.report.summary's histogram table: `.attempt` twins only where retries made
-- them differ, side calls (aux.*) after the scenario's own operations, rows
-- in the order the run first recorded them (checked against a real taxi
-- run's journal), the scenario's verdict under the status line.
local T = require "kb.testing"
local summary = require "kb.report.summary"

local function hist(name, count, max, labels)
  return { kind = "histogram", name = name, labels = labels or {},
    summary = { count = count, p50 = max / 2, p90 = max, p99 = max, max = max } }
end

local function names(lines)
  local out = {}
  for i = 2, #lines do out[#out + 1] = lines[i]:match("^(%S+)") end
  return table.concat(out, " ")
end

T.case("an .attempt twin is hidden where it equals its call, shown where retries happened", function()
  local lines = summary.histogram_lines { metrics = {
    hist("run.create", 50, 0.66), hist("run.create.attempt", 50, 0.66),      -- no retries
    hist("run.get", 50, 1.9), hist("run.get.attempt", 53, 0.9),              -- 3 retries
    hist("aux.run.list", 1, 0.3), hist("aux.run.list.attempt", 1, 0.3),
    hist("poll.run.get", 498, 0.23),
  } }
  T.eq(lines[1]:match("^(%S+)"), "histogram")
  T.eq(names(lines), "poll.run.get run.create run.get run.get.attempt aux.run.list")
end)

T.case("labelled twins compare with their own call", function()
  local lines = summary.histogram_lines { metrics = {
    hist("op", 2, 1, { code = "200" }), hist("op.attempt", 2, 1, { code = "200" }),
    hist("op", 3, 1, { code = "500" }), hist("op.attempt", 5, 1, { code = "500" }),
  } }
  T.eq(names(lines), "op{code=200} op{code=500} op.attempt{code=500}")
end)

T.case("counters: the side calls' after the scenario's own", function()
  local lines = summary.counter_lines { metrics = {
    { kind = "counter", name = "aux.kfp.requests", labels = { op = "run.list" }, value = 1 },
    { kind = "counter", name = "kfp.requests", labels = { op = "run.create" }, value = 50 },
  } }
  T.eq(#lines, 2)
  T.ok(lines[1]:find("^kfp%.requests"), lines[1])
  T.ok(lines[2]:find("^aux%.kfp%.requests"), lines[2])
end)

T.case("rows follow the order the run first recorded them; an .attempt row follows its call", function()
  local order = { ["pipeline.create"] = 1, ["run.get.attempt"] = 2, ["run.get"] = 3, ["run.create"] = 4,
    ["aux.run.list"] = 5, ["poll.run.get"] = 6 }
  local lines = summary.histogram_lines({ metrics = {
    hist("aux.run.list", 1, 0.3), hist("poll.run.get", 498, 0.23), hist("run.create", 50, 0.66),
    hist("run.get", 50, 1.9), hist("run.get.attempt", 53, 0.9), hist("pipeline.create", 1, 0.3),
    hist("zz.unknown", 1, 0.1),
  } }, order)
  T.eq(names(lines), "pipeline.create run.get run.get.attempt run.create poll.run.get zz.unknown aux.run.list")
end)

T.case("kb.metrics.order: registration order of the calling registry", function()
  local metrics = require "kb.metrics"
  local sc = metrics.scope("order-test")
  sc:run(function()
    metrics.histogram("b.second"):record(1)
    metrics.counter("a.third"):inc()
    metrics.histogram("c.first_in_name_order_last"):record(1)
    local o = metrics.order()
    T.ok(o["b.second"] < o["a.third"] and o["a.third"] < o["c.first_in_name_order_last"],
      "order " .. require("kb.json").encode(o))
  end)
end)

T.case("a scenario's verdict is the line under the status, also with -q", function()
  local doc = { experiment_id = "kfp-probe-x", status = "passed", duration = 150,
    clock = { kind = "virtual", speed = 60 }, metrics = { metrics = {} },
    result = { verdict = "the server broke at 64 concurrent runs: run.create p99 40 s > 35 s" } }
  local path = os.tmpname()
  local f = io.open(path, "w")
  local saved = io.stdout
  io.output(f)
  local real = io.stdout
  io.stdout = f -- luacheck: ignore (the summary writes to io.stdout)
  local ok, err = pcall(function()
    summary.print(doc, nil, { order = {} })
    summary.print_quiet(doc, {})
  end)
  io.stdout = real
  io.output(saved)
  f:close()
  T.ok(ok, tostring(err))
  local text = require("kb.fs").read(path)
  os.remove(path)
  local lines = {}
  for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
  T.eq(lines[1], "kfp-probe-x: passed in 2.5 min (virtual clock, x60)")
  T.eq(lines[2], "  the server broke at 64 concurrent runs: run.create p99 40 s > 35 s")
  T.eq(lines[3], "kfp-probe-x: passed in 2.5 min (virtual clock, x60)")
  T.eq(lines[4], lines[2])
end)

-- A real run: taxi_50runs (10 runs) in a child kbrun; its table's rows are
-- in the order of the journal's metric definitions (the first record of
-- each), the scenario's own before aux.*, and its threshold lines carry
-- the values' units.
T.case("taxi_50runs: the printed table follows the journal's first-recorded order", function()
  local kb = require "kb"
  local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
  local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
  local out = kb.fs.tmpdir("kbrun-test-summary")
  local r = kb.process.run { cmd = { bin, "-o", out, "--seed", "3", kb.fs.join(src, "scenarios", "taxi_50runs.lua"),
    "num_runs=10", "progress=false" }, timeout = 240 }
  T.eq(r.code, 0, r.stderr)
  local id
  for _, e in ipairs(kb.fs.list(out)) do
    if kb.fs.exists(kb.fs.join(out, e, "result", "result.json")) then id = e end
  end
  local defs, seen = {}, {}
  for line in kb.fs.read(kb.fs.join(out, id, "output", "journal.jsonl")):gmatch("[^\n]+") do
    local rec = kb.json.decode(line)
    if rec.k == "def" and rec.kind == "histogram" and not seen[rec.m] then
      seen[rec.m] = true
      defs[#defs + 1] = rec.m
    end
  end
  local printed = {}
  local in_table = false
  for line in r.stdout:gmatch("[^\n]*") do
    if line:match("^  histogram ") then in_table = true
    elseif in_table and line == "" then in_table = false
    elseif in_table then printed[#printed + 1] = line:match("^  (%S+)") end
  end
  T.ok(#printed >= 8, "rows: " .. table.concat(printed, " "))
  -- the expected order: the journal's, own operations then aux.*, each
  -- .attempt right after its call, twins without retries not shown
  local shown = {}
  for _, n in ipairs(printed) do shown[n] = true end
  local own, aux = {}, {}
  for _, m in ipairs(defs) do
    local base = m:match("^(.*)%.attempt$")
    if shown[m] and not base then
      local list = m:find("^aux%.") and aux or own
      list[#list + 1] = m
      if shown[m .. ".attempt"] then list[#list + 1] = m .. ".attempt" end
    end
  end
  T.eq(table.concat(printed, " "), table.concat(own, " ") .. " " .. table.concat(aux, " "))
  T.eq(printed[1], "pipeline.create")
  T.eq(printed[2], "experiment.create")
  T.eq(printed[3], "run.create")
  -- thresholds with units: the p99 of run.create as result.json has it
  local doc = kb.json.decode(kb.fs.read(kb.fs.join(out, id, "result", "result.json")))
  local p99
  for _, m in ipairs(doc.metrics.metrics) do
    if m.key == "run.create" then p99 = m.summary.p99 end
  end
  local shown_p99, unit = r.stdout:match("ok   run%.create p99 ([%d.]+) (m?s) <= 2 s")
  T.ok(shown_p99, "threshold line with units in:\n" .. r.stdout)
  T.near(tonumber(shown_p99) * (unit == "ms" and 1e-3 or 1), p99, 0.01 * p99, "run.create p99")
  T.ok(r.stdout:find("ok   success_rate 100%% >= 98%%"), r.stdout)
end)

T.run()
