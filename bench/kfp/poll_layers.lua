--- bench/kfp/poll_layers.lua: what each layer of a storm's status poll
-- costs the client with its HTTP request, as a storm makes it: `conc`
-- tasks at once against a standalone simulator (a separate process, so
-- os.clock, this process's user + system CPU, counts only the client).
-- Each layer runs n calls and prints its CPU per call and the bytes the
-- Lua heap allocated per call (measured on 500 calls with the collector
-- stopped). call_budget.lua measures the same parts without HTTP, one
-- call at a time; the difference is what a thousand interleaved tasks
-- cost the caches and the collector.
--
--   kbrun sim --listen 127.0.0.1:23456 &
--   kbrun -q bench/kfp/poll_layers.lua host=http://127.0.0.1:23456
--   kbrun -q bench/kfp/poll_layers.lua host=... n=100000 conc=1000 only=decode
local kb = require "kb"
local kfp = require "kb.kfp"
local json = require "kb.json"

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."

return {
  name = "poll_layers",
  params = { host = "http://127.0.0.1:23456", n = 20000, conc = 500, only = "" },

  run = function(p)
    local c = kfp.client{ host = p.host, api = "v2beta1" }
    local pl = c:upload_pipeline{ name = "poll-layers-" .. os.time(),
      file = HERE .. "/../../tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml" }
    local run = c:create_run{ name = "poll-layers", pipeline_id = pl.id }
    c:wait_run(run.id, { interval = 30 })
    local url = p.host .. "/apis/v2beta1/runs/" .. run.id
    local body = kb.http.get(url).body
    print(string.format("a GetRun answer: %d bytes", #body))

    local rows = {}
    local function layer(name, f)
      if p.only ~= "" and not name:find(p.only, 1, true) then return end
      local function in_tasks(calls, tasks)
        local pool = kb.pool(tasks)
        for _ = 1, tasks do pool:spawn(function() for _ = 1, calls // tasks do f() end end) end
        pool:wait()
      end
      collectgarbage()
      collectgarbage("stop")
      local k0 = collectgarbage("count")
      in_tasks(500, 10)
      local bytes = (collectgarbage("count") - k0) * 1024 / 500
      collectgarbage("restart")
      collectgarbage()
      local t0 = os.clock()
      in_tasks(p.n, p.conc)
      local us = (os.clock() - t0) / (p.n // p.conc * p.conc) * 1e6
      rows[#rows + 1] = { name, us, bytes }
      print(string.format("%-44s %7.2f us %7.0f B a call", name, us, bytes))
    end

    local skip = { skip = { pipeline_spec = true, run_details = true } }
    local status_only = { status_only = true }
    local path = "/runs/" .. run.id
    layer("decode only (no HTTP), in the tasks", function() json.decode(body, skip) kb.sleep(0) end)
    layer("kb.http.get healthz", function() kb.http.get(p.host .. "/apis/v2beta1/healthz") end)
    layer("kb.http.get of the run", function() kb.http.get(url) end)
    layer("kb.http.get of the run, decoded", function() json.decode(kb.http.get(url).body, skip) end)
    layer("kb.kfp request, raw", function() c:request{ op = "layers", path = path, raw = true } end)
    layer("kb.kfp request, decoded", function() c:request{ op = "layers", path = path, skip = skip.skip } end)
    layer("kb.kfp get_run, status_only", function() c:get_run(run.id, status_only) end)
    return { n = p.n, conc = p.conc, layers = rows }
  end,
}
