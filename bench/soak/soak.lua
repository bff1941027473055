--- Soak: KFP run storms against the embedded simulator, one after another,
-- for `minutes` of real time, sampling kbrun's resident memory (client and
-- simulator share the process) after each storm. Flat memory means nothing
-- accumulates per storm: not in the client, the HTTP layers, the
-- histograms' registry, nor in the simulator once runs are deleted.
--
--   kbrun bench/soak/soak.lua minutes=10 [runs=20] [profile=fast] [k8s=true]
--
-- k8s=true also lists the pods and workflows through the Kubernetes API
-- after each storm, which keeps the simulator's Kubernetes view (a JSON
-- object per pod, watch history) live: it must stay flat too.
local kb = require "kb"
local storm = require "kb.kfp.storm"

local HERE = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local TAXI = HERE .. "../../scenarios/pipelines/taxi_updated_pool.yaml"

local function rss_mb()
  for line in io.lines("/proc/self/status") do
    local v = line:match("^VmRSS:%s+(%d+)")
    if v then return tonumber(v) / 1024 end
  end
end

return {
  name = "soak",
  -- host: a standalone `kbrun sim` instead of the embedded one, so this
  -- process's memory is the client's alone.
  params = { minutes = 10.0, runs = 20, profile = "fast", speed = 600, host = "", k8s = false },
  run = function(p)
    local sim = p.host == "" and kb.sim.start { profile = p.profile, speed = p.speed, seed = 3 }
      or { url = p.host, stop = function() end }
    local t_end = kb.time() + p.minutes * 60
    local samples, i = {}, 0
    local csv = kb.csv.writer(kb.exp:path("result", "rss.csv"), { "storm", "wall_s", "rss_mb" })
    local wall0 = kb.time()
    while kb.time() < t_end do
      i = i + 1
      local params = storm.params { host = sim.url, num_runs = p.runs, api = "v2beta1",
        pipeline_file_url = TAXI,
        run_status_polling_interval_sec = 30, scrape_metrics = false, progress = "false" }
      local s = storm.new(params, { quiet = true })
      s:create_pipeline(); s:create_experiment(); s:create_runs(); s:wait_runs()
      s:get_runs(); s:delete_runs(); s:cleanup()
      if p.k8s then
        for _, path in ipairs { "/api/v1/pods", "/apis/argoproj.io/v1alpha1/workflows" } do
          local r = kb.http.get(sim.url .. path)
          assert(r.status == 200, path .. ": " .. r.status)
        end
      end
      collectgarbage()
      local rss = rss_mb()
      samples[#samples + 1] = rss
      csv:write { i, string.format("%.1f", kb.time() - wall0), string.format("%.1f", rss) }
    end
    csv:close()
    sim:stop()
    local n = #samples
    local q = math.max(1, n // 4)
    local first, last = 0, 0
    for k = 1, q do first = first + samples[k] end
    for k = n - q + 1, n do last = last + samples[k] end
    first, last = first / q, last / q
    kb.log.info("%d storms of %d runs in %.1f min: RSS first quarter %.1f MB, last quarter %.1f MB",
      n, p.runs, (kb.time() - wall0) / 60, first, last)
    return { storms = n, runs_per_storm = p.runs, rss_first_quarter_mb = first,
      rss_last_quarter_mb = last, rss_growth_mb = last - first, minutes = p.minutes }
  end,
}
