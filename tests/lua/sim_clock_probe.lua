--- Child of test_sim_clock.lua: times GETs on the simulator's KFP,
-- Kubernetes and argo-server surfaces with res.time.total and prints the
-- median of each as JSON, and the median of kb.now() taken around each call. PROBE_URL names a standalone `kbrun sim` (this
-- process then runs on the real clock); without it, the embedded simulator
-- starts with kbrun's --sim-speed and --sim-config.
local kb = require "kb"
local target = require "kb.target"

local SAMPLES = 15
local PATHS = {
  kfp = "/apis/v2beta1/runs?page_size=1",
  k8s = "/api/v1/namespaces/default",
  argo = "/api/v1/workflows/default/no-such-workflow",
}

local url = os.getenv("PROBE_URL")
if not url or url == "" then url = target.resolve("sim") end

local function median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) // 2] or (xs[n // 2] + xs[n // 2 + 1]) / 2
end

local out = {}
for surface, path in pairs(PATHS) do
  local times, around = {}, {}
  for i = 1, SAMPLES do
    local t0 = kb.now()
    local res = kb.http.get(url .. path, { timeout = 60 })
    around[i] = kb.now() - t0
    times[i] = res.time.total
  end
  out[surface] = median(times)
  out[surface .. "_now"] = median(around) -- kb.now() taken around the call
end
out.clock = require("kb.core").clock_kind()
print(kb.json.encode(out))
