-- kb.sweep cells running side by side (parallel = 3) each read their own
-- figures: run storms of 4, 8 and 12 runs on their own simulators, held
-- at a barrier until all three have started (so they certainly overlap),
-- and every figure a cell reports through kb.metrics (the run.create
-- histogram, the storm's server_vs_client and retries, report.csv's
-- run_create_p99, the registry in the cell's result.json) is compared with
-- the cell's own latencies.csv, as is each cell's time series (its
-- result.json's timeseries). Before per-cell metric scopes, the cells
-- read the process-wide registry and reported each other's calls.
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local csv = require "kb.csv"
local json = require "kb.json"
local sweep = require "kb.sweep"
local storm = require "kb.kfp.storm"
local gen = require "kb.kfp.pipeline_gen"

local OUT = fs.tmpdir("kb-sweep-scope")

-- Nearest-rank percentile of a list (what an HDR histogram approximates
-- to its 3 significant digits).
local function rank(list, q)
  local v = {}
  for i, x in ipairs(list) do v[i] = x end
  table.sort(v)
  return v[math.max(1, math.ceil(q * #v))]
end

local function calls_of(dir, op)
  local rows = csv.parse(fs.read(fs.join(dir, "result", "latencies.csv")), { header = true })
  local out = {}
  for _, r in ipairs(rows) do
    if r.op == op and (r.error_class == nil or r.error_class == "") then out[#out + 1] = tonumber(r.latency) end
  end
  return out
end

local function close_to(a, b, what)
  T.ok(type(a) == "number" and type(b) == "number" and math.abs(a - b) <= 0.002 * math.abs(b) + 1e-9,
    string.format("%s: %s vs %s", what, tostring(a), tostring(b)))
end

T.case("parallel storm cells: each cell's figures are its own", function()
  local started = 0
  local r = sweep.run {
    name = "scope", out = OUT, seed = 5, print = false, parallel = 3,
    matrix = { num_runs = { 4, 8, 12 } },
    run = function(cell, ctx)
      local sim = ctx:sim(sweep.cluster { pools = 1, nodes = 3, cpu = 8, memory = "30Gi" })
      started = started + 1
      for _ = 1, 200000 do -- bounded barrier: every cell has started its simulator
        if started >= 3 then break end
        kb.sleep(1)
      end
      T.eq(started, 3, "the three cells run at once")
      local file = ctx.exp:write("config", "pipeline.yaml", gen.pipeline { steps = 3, shape = "diamond",
        name = "scope", cpu = "1", memory = "1Gi", duration = "lognormal:60,90" })
      local s = storm.new(storm.params { host = sim.url, pipeline_file_url = file, num_runs = cell.num_runs,
        run_status_polling_interval_sec = 20, concurrency = 3, timeout = 7200, run_timeout = 0,
        progress = false, scrape_metrics = true, measure_list = false }, { exp = ctx.exp, name = "scope" })
      s:create_pipeline()
      s:create_experiment()
      s:create_runs()
      s:wait_runs()
      s:get_runs()
      local res = s:finish()
      local h = kb.metrics.get("run.create")
      local vs = {}
      for _, row in ipairs(res.server_vs_client) do vs[row.op] = row end
      return {
        create_count = h:count(), create_p99 = h:summary().p99, create_p50 = h:summary().p50,
        get_count = kb.metrics.get("run.get"):count(),
        vs_create_count = vs["run.create"] and vs["run.create"].client.count,
        vs_create_p99 = vs["run.create"] and vs["run.create"].client.p99,
        vs_get_count = vs["run.get"] and vs["run.get"].client.count,
        same_as_ctx = ctx.metrics ~= nil and ctx.metrics:get("run.create") == h,
        runs = res.runs.requested,
      }
    end,
  }
  T.eq(r.failed, 0, "every cell ran")
  local report_rows = csv.parse(fs.read(fs.join(r.dir, "kfp-storm-report.csv")), { header = true })
  local by_exp = {}
  for _, row in ipairs(report_rows) do by_exp[row.experiment_id] = row end
  local sweep_rows = csv.parse(fs.read(r.csv), { header = true })
  T.eq(#sweep_rows, 3)
  local total_creates = 0
  for _, row in ipairs(sweep_rows) do
    local dir = fs.join(r.dir, row.cell .. "-r1")
    local creates, gets = calls_of(dir, "run.create"), calls_of(dir, "run.get")
    local n = tonumber(row.num_runs)
    total_creates = total_creates + #creates
    T.eq(#creates, n, row.cell .. ": its latencies.csv holds its own creates")
    T.eq(tonumber(row.create_count), n, row.cell .. ": kb.metrics run.create count is the cell's")
    T.eq(tonumber(row.vs_create_count), n, row.cell .. ": server_vs_client run.create count")
    T.eq(tonumber(row.get_count), #gets, row.cell .. ": run.get count")
    T.eq(tonumber(row.vs_get_count), #gets, row.cell .. ": server_vs_client run.get count")
    T.eq(row.same_as_ctx, "true", row.cell .. ": ctx.metrics is the registry the cell's tasks record into")
    close_to(tonumber(row.create_p99), rank(creates, 0.99), row.cell .. " create p99")
    close_to(tonumber(row.create_p50), rank(creates, 0.5), row.cell .. " create p50")
    close_to(tonumber(row.vs_create_p99), rank(creates, 0.99), row.cell .. " server_vs_client create p99")
    local rep = by_exp[row.cell .. "-r1"]
    T.ok(rep ~= nil, row.cell .. ": a report.csv row")
    close_to(tonumber(rep.run_create_p99), rank(creates, 0.99), row.cell .. " report.csv run_create_p99")
    T.eq(tonumber(rep.num_runs), n)
    local doc = json.decode(fs.read(fs.join(dir, "result", "result.json")))
    local found
    for _, m in ipairs(doc.registry.metrics) do
      if m.key == "run.create" then found = m end
    end
    T.ok(found, row.cell .. ": result.json's registry has run.create")
    T.eq(found.summary.count, n, row.cell .. ": result.json registry run.create count")
    -- and its own time series (kb.timeseries.within): the cell's creates, no other cell's
    local ts = doc.timeseries
    T.ok(ts and ts.histograms["run.create"], row.cell .. ": result.json has its time series")
    local in_series, created = 0, 0
    for _, x in ipairs(ts.histograms["run.create"]) do in_series = in_series + x.count end
    for _, x in ipairs(ts.counters["storm.created"] or {}) do created = created + x.d end
    T.eq(in_series, n, row.cell .. ": run.create in its intervals")
    T.eq(created, n, row.cell .. ": storm.created in its intervals")
    T.ok(fs.exists(fs.join(dir, "result", "timeseries.csv")) == "file", row.cell .. ": timeseries.csv")
  end
  T.eq(total_creates, 24)
  -- the cells' scopes are added to the sweep's registry when they end
  local h = kb.metrics.get("run.create")
  T.ok(h ~= nil and h:count() >= 24, "the process's registry holds every cell's creates")
end)

T.run()
fs.remove(OUT, { recursive = true })
