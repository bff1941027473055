--- The Kubernetes view of the simulator at scale (issue 15): N finished KFP
-- runs of the 10-step benchmark pipeline in a standalone `kbrun sim`, then
-- the first Kubernetes request, a full pod list and a paged one, each with
-- a healthz loop beside it (the longest healthz wait is what another client
-- of the single event loop suffers). The simulator's RSS and CPU are read
-- from /proc/<pid>; run it through bench/sim/k8s_view.sh, which starts the
-- simulator and passes its url and pid.
--
--   kbrun bench/sim/k8s_view.lua url=http://127.0.0.1:PORT pid=PID [runs=10000]
local kb = require "kb"
local kfp = require "kb.kfp"

local PIPELINE = (os.getenv("KBRUN_SOURCE_DIR") or ".") .. "/tests/data/sim/v1_argo_benchmark_pipeline_10_nodes.yaml"

local function proc(pid)
  local out = {}
  for line in io.lines("/proc/" .. pid .. "/status") do
    local k, v = line:match("^(Vm%u%u%u?):%s+(%d+)")
    if k then out[k] = tonumber(v) / 1024 end
  end
  local f = assert(io.open("/proc/" .. pid .. "/stat"))
  local stat = f:read("a")
  f:close()
  local fields = {}
  for x in stat:match("%) (.*)"):gmatch("%S+") do fields[#fields + 1] = x end
  out.cpu = (tonumber(fields[12]) + tonumber(fields[13])) / 100 -- utime + stime, clock ticks
  return out
end

-- Runs fn() and returns the healthz waits the prober (healthz_probe.lua,
-- its own process) saw meanwhile as {n, max, p50} (wall seconds), then
-- fn's results.
local probe_file
local function with_healthz(_, fn)
  local t0 = kb.time()
  local res = table.pack(fn())
  local t1 = kb.time()
  kb.sleep(0.2) -- the prober's request in flight at t1 ends
  local waits = {}
  for line in io.lines(probe_file) do
    local e, w = line:match("^(%S+) (%S+)")
    e, w = tonumber(e), tonumber(w)
    if e and e >= t0 and e - w <= t1 then waits[#waits + 1] = w end
  end
  table.sort(waits)
  local hz = { n = #waits, max = waits[#waits] or 0, p50 = waits[(#waits + 1) // 2] or 0 }
  return hz, table.unpack(res, 1, res.n)
end

local function ms(s) return string.format("%.0f ms", s * 1000) end

-- The simulator's own accounting of its Kubernetes view (/metrics).
local function view_metrics(url)
  local text = kb.http.get(url .. "/metrics").body
  local out = {}
  for k, v in text:gmatch("\nkbrun_sim_k8s_([%w_]+) (%d+)") do out[k] = tonumber(v) end
  for k, v in text:gmatch('\nkbrun_sim_k8s_longest_turn_seconds{what="(%w+)"} ([%d.]+)') do
    out["longest_" .. k] = tonumber(v)
  end
  return out
end


return {
  name = "sim_k8s_view",
  params = { url = "", pid = 0, probe = "", runs = 10000, concurrency = 64, page = 500, timeout = 36000 },
  run = function(p)
    assert(p.url ~= "" and p.pid > 0 and p.probe ~= "",
      "url=, pid= and probe= are required (bench/sim/k8s_view.sh)")
    probe_file = p.probe
    local c = kfp.client { host = p.url, api = "v2beta1", timeout = p.timeout }
    local out = { runs = p.runs }
    local w0 = kb.time()
    local finished = 0
    out.runs_healthz = with_healthz(p.url, function()
      local pipeline = c:upload_pipeline { file = PIPELINE, name = "bench-10-steps" }
      local exp = c:create_experiment { name = "bench" }
      local pool = kb.pool(p.concurrency)
      for i = 1, p.runs do
        pool:spawn(function()
          c:create_run { name = "run-" .. i, experiment_id = exp.id, pipeline_id = pipeline.id }
        end)
      end
      pool:wait()
      repeat
        kb.sleep(1)
        finished = 0
        for _, run in ipairs(c:list_all_runs { experiment_id = exp.id, page_size = 1000 }) do
          if run.finished then finished = finished + 1 end
        end
      until finished == p.runs
    end)
    out.runs_wall = kb.time() - w0
    out.kfp_only = proc(p.pid)
    out.view = view_metrics(p.url)
    kb.log.info("view at the runs' end: %d objects, %.1f MB stored, %d trees, backlog %d",
      out.view.objects or -1, (out.view.object_bytes or 0) / 1e6, out.view.object_trees or -1,
      out.view.mirror_backlog or -1)
    kb.log.info("%d runs finished in %.1f s; healthz max %s, p50 %s (%d answered); simulator RSS %.0f MB, CPU %.1f s",
      finished, out.runs_wall, ms(out.runs_healthz.max), ms(out.runs_healthz.p50), out.runs_healthz.n,
      out.kfp_only.VmRSS, out.kfp_only.cpu)

    -- a Kubernetes request made as the runs finish: a view far behind the
    -- model answers it as it stands (docs/simulator.md)
    local hz_end, dt_end, status_end = with_healthz(p.url, function()
      local t0 = kb.time()
      local r = kb.http.get(p.url .. "/api/v1/namespaces/kubeflow/pods?limit=1", { timeout = 600 })
      return kb.time() - t0, r.status
    end)
    assert(status_end == 200, "pod list at the runs' end: " .. tostring(status_end))
    out.at_end = { wall = dt_end, healthz = hz_end, backlog = view_metrics(p.url).mirror_backlog }
    kb.log.info("a Kubernetes request as the runs finished: %s (healthz max %s); backlog after it %d",
      ms(dt_end), ms(hz_end.max), out.at_end.backlog or -1)

    -- the mirror works in the background: how long until it has caught up
    local d0 = kb.time()
    out.drain_healthz = with_healthz(p.url, function()
      while (view_metrics(p.url).mirror_backlog or 0) > 0 do kb.sleep(0.2) end
    end)
    out.drain_wall = kb.time() - d0
    out.drained = proc(p.pid)
    out.view = view_metrics(p.url)
    kb.log.info("mirror caught up %.1f s after the runs finished (healthz max %s); view: %d objects, "
      .. "%.1f MB stored; RSS %.0f MB, CPU %.1f s", out.drain_wall, ms(out.drain_healthz.max),
      out.view.objects or -1, (out.view.object_bytes or 0) / 1e6, out.drained.VmRSS, out.drained.cpu)

    -- the first Kubernetes request
    local hz, dt, status = with_healthz(p.url, function()
      local t0 = kb.time()
      local r = kb.http.get(p.url .. "/api/v1/namespaces/kubeflow/pods?limit=1", { timeout = 600 })
      return kb.time() - t0, r.status
    end)
    assert(status == 200, "first pod list: " .. tostring(status))
    out.first = { wall = dt, healthz = hz, after = proc(p.pid) }
    kb.log.info("first Kubernetes request %s; healthz max %s p50 %s (%d answered); RSS %.0f MB, CPU %.1f s",
      ms(dt), ms(hz.max), ms(hz.p50), hz.n, out.first.after.VmRSS, out.first.after.cpu)

    -- one full list of every pod
    local cpu0 = proc(p.pid).cpu
    local hz2, dt2, bytes = with_healthz(p.url, function()
      local t0 = kb.time()
      local s <close> = kb.http.stream { url = p.url .. "/api/v1/pods", timeout = 600 }
      assert(s.status == 200, "full pod list: " .. tostring(s.status))
      local n = 0
      for piece in s.read, s do n = n + #piece end
      assert(s.state == "ended", "full pod list: " .. s.state)
      return kb.time() - t0, n
    end)
    local after = proc(p.pid)
    out.full = { wall = dt2, bytes = bytes, healthz = hz2, after = after, cpu = after.cpu - cpu0 }
    kb.log.info("full pod list %s, %.0f MB; healthz max %s p50 %s (%d answered); RSS %.0f MB (peak %.0f), CPU %.1f s",
      ms(dt2), bytes / 1e6, ms(hz2.max), ms(hz2.p50), hz2.n, after.VmRSS, after.VmHWM, out.full.cpu)

    -- the same with limit/continue
    cpu0 = proc(p.pid).cpu
    local hz3, pages, items, pmax, pmed, dt3 = with_healthz(p.url, function()
      local t0, cont, n, items_, times = kb.time(), nil, 0, 0, {}
      repeat
        local t1 = kb.time()
        local u = p.url .. "/api/v1/pods?limit=" .. p.page .. (cont and ("&continue=" .. cont) or "")
        local r = kb.http.get(u, { timeout = 600 })
        assert(r.status == 200, "paged pod list: " .. tostring(r.status) .. " " .. r.body:sub(1, 200))
        times[#times + 1] = kb.time() - t1
        n = n + 1
        local _, k = r.body:gsub('"kind":"Pod"', "")
        items_ = items_ + k
        cont = r.body:sub(1, 1000):match('"continue":"([^"]+)"')
      until not cont
      local total = kb.time() - t0
      table.sort(times)
      return n, items_, times[#times], times[(#times + 1) // 2], total
    end)
    after = proc(p.pid)
    out.paged = { pages = pages, items = items, page_max = pmax, page_p50 = pmed, wall = dt3,
      healthz = hz3, after = after, cpu = after.cpu - cpu0 }
    kb.log.info("paged pod list: %d pages of %d, %d pods in %s (page p50 %s, max %s; %.0f pods/s); "
      .. "healthz max %s p50 %s (%d answered); RSS %.0f MB, CPU %.1f s", pages, p.page, items, ms(dt3),
      ms(pmed), ms(pmax), items / dt3, ms(hz3.max), ms(hz3.p50), hz3.n, after.VmRSS, out.paged.cpu)
    local vm = view_metrics(p.url)
    out.longest_turn = { mirror = vm.longest_mirror, list = vm.longest_list }
    kb.log.info("longest loop turn (simulator thread CPU): mirror %s, list slice %s",
      ms(vm.longest_mirror or 0), ms(vm.longest_list or 0))
    return out
  end,
}
