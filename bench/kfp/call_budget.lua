--- bench/kfp/call_budget.lua: what each part of a storm's status poll
-- costs the client, without the HTTP request: the per-call budget behind
-- bench/kfp.md's "Client cost". Each part runs `n` times in a loop and
-- prints its CPU time per call (os.clock: user + system of the process).
--
--   kbrun -q bench/kfp/call_budget.lua            # n = 50000
--   kbrun -q bench/kfp/call_budget.lua n=200000
--
-- The answer every part works on is a real GetRun answer (v2beta1): the
-- embedded simulator runs the 10-step benchmark pipeline once and the
-- run is fetched. kb.kfp's part replaces the client's HTTP send with that
-- canned answer, so it is kb.kfp's own work (options, retry, metrics,
-- decoding, the run mapping); the plain HTTP GET costs on top (bench/http,
-- bench/kfp/client_cost.sh's GET loop).
local kb = require "kb"
local kfp = require "kb.kfp"
local csv = require "kb.csv"
local json = require "kb.json"
local journal = require "kb.journal"
local secrets = require "kb.secrets"
local target = require "kb.target"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

return {
  name = "call_budget",
  params = { n = 50000 },

  run = function(p)
    local n = p.n
    -- one real run of the benchmark pipeline, and its GetRun answer
    local url = target.resolve("sim")
    local c = kfp.client{ host = url, api = "v2beta1" }
    local pl = c:upload_pipeline{ name = "budget",
      file = HERE .. "/../../tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml" }
    local run = c:create_run{ name = "budget", pipeline_id = pl.id }
    c:wait_run(run.id, { interval = 30 })
    local body = kb.http.get(url .. "/apis/v2beta1/runs/" .. run.id).body

    local rows = {}
    local function part(name, f)
      collectgarbage()
      local t0 = os.clock()
      for i = 1, n do f(i) end
      local us = (os.clock() - t0) / n * 1e6
      rows[#rows + 1] = { name, us }
      print(string.format("%-44s %7.2f us", name, us))
    end

    local canned = { status = 200, body = body, time = { total = 0.001 }, headers = {} }
    local offline = kfp.client{ host = "http://127.0.0.1:9", api = "v2beta1" }
    offline._send = function() return canned end
    local status_only = { status_only = true }
    part("kb.kfp get_run, status_only (no HTTP)", function() offline:get_run(run.id, status_only) end)
    local skip = { skip = { pipeline_spec = true, run_details = true } }
    part("  of it: kb.json.decode of the answer", function() json.decode(body, skip) end)

    local dir = kb.fs.tmpdir("kbrun-call-budget")
    local w = csv.writer(kb.fs.join(dir, "latencies.csv"),
      { "op", "start", "latency", "status", "error_class", "error" })
    part("a latencies.csv row (encoded, one write)", function(i)
      w:write{ "poll.run.get", i * 0.0123456789, 0.000123456789 * i, 200, nil, nil }
    end)
    w:close()
    part("  of it: kb.csv.encode_row", function(i)
      csv.encode_row{ "poll.run.get", i * 0.0123456789, 0.000123456789 * i, 200, nil, nil, n = 6 }
    end)
    local j = journal.open(kb.fs.join(dir, "journal.jsonl"), { interval = 0.05 })
    part("a journal call line (scrubbed, encoded, buffered)", function(i)
      j:write{ event = "call", op = "poll.run.get", t = i * 0.0123456789,
        latency = 0.000123456789 * i, status = 200 }
      if i % 4096 == 0 then j:flush() end
    end)
    local call_line = require("kb.kfp.storm_record").call_line
    part("the storm's call line (built, journal:write_line)", function(i)
      j:write_line(call_line("poll.run.get", i * 0.0123456789, 0.000123456789 * i, 200))
      if i % 4096 == 0 then j:flush() end
    end)
    j:close()
    part("  of it: kb.secrets.encode_json", function(i)
      secrets.encode_json{ event = "call", op = "poll.run.get", t = i * 0.0123456789,
        latency = 0.000123456789 * i, status = 200 }
    end)
    part("  of it: kb.json.encode", function(i)
      json.encode{ event = "call", op = "poll.run.get", t = i * 0.0123456789,
        latency = 0.000123456789 * i, status = 200 }
    end)
    local h = kb.hist.new()
    part("a histogram record", function(i) h:record(i * 1e-6) end)
    -- as kb.kfp's are: registered, so journaled and in the time series
    local registered = require("kb.metrics").histogram("budget.registered")
    part("a registered histogram's record", function(i) registered:record(i * 1e-6) end)
    local pool = kb.pool(1000)
    part("a task per item (pool:spawn)", function() pool:spawn(function() end) end)
    pool:wait()
    local items = {}
    for i = 1, n do items[i] = i end
    local t0 = os.clock()
    kb.pool(1000):map(items, function() end)
    local us = (os.clock() - t0) / n * 1e6
    rows[#rows + 1] = { "an item of pool:map", us }
    print(string.format("%-44s %7.2f us", "an item of pool:map", us))
    kb.fs.remove(dir, { recursive = true })
    return { n = n, parts = rows }
  end,
}
