--- Test fixture: the embedded simulator, a kubeconfig for it and kb.k8s
-- clients on it, as the Kubernetes/Argo tests start them.
--
--   local fx = require("k8s_sim").start("k8s-client") -- tmpdir name
--   fx.sim, fx.kubeconfig, fx.client { namespace = "x" }
local kb = require "kb"
local k8s = require "kb.k8s"

local M = {}

--- start(name [, sim_opts]) -> {sim, kubeconfig, dir, client(opts)}; the
-- simulator runs the fast profile unless sim_opts says otherwise.
function M.start(name, sim_opts)
  local sim = kb.sim.start(sim_opts or { profile = "fast" })
  local dir = kb.fs.tmpdir(name)
  local kubeconfig = sim:write_kubeconfig(kb.fs.join(dir, "kubeconfig"))
  local function client(opts)
    -- 3000 scenario seconds: 5 s real at x600. The client's default (30 s,
    -- i.e. the 250 ms real floor) times calls out on a loaded 2-core
    -- machine; a test of timeouts gives its own.
    local o = { kubeconfig = kubeconfig, timeout = 3000 }
    for k, v in pairs(opts or {}) do o[k] = v end
    return k8s.client(o)
  end
  return { sim = sim, kubeconfig = kubeconfig, dir = dir, client = client }
end

return M
