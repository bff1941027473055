--- The MPIJob of Kubeflow's mpi-job-custom prototype (Kubebench's MPI
-- example, mpi-job-dummy.yaml), as a kubeflow.org/v1 MPIJob: one launcher
-- running `command` (comma-separated, as the ksonnet param was), `replicas`
-- workers with gpusPerReplica GPUs each.
local function split(s)
  local list = {}
  for part in tostring(s):gmatch("[^,]+") do list[#list + 1] = part end
  return list
end

return function(p)
  local kb = require "kb"
  local launcher = { name = "mpi", image = p.image, command = split(p.command) }
  if p.args ~= nil and p.args ~= kb.json.null and p.args ~= "" then launcher.args = split(p.args) end
  local worker = { name = "mpi", image = p.image }
  local gpus = tonumber(p.gpusPerReplica) or 0
  if gpus > 0 then worker.resources = { limits = { ["nvidia.com/gpu"] = gpus } } end
  return {
    apiVersion = "kubeflow.org/v1",
    kind = "MPIJob",
    metadata = { name = p.name },
    spec = {
      slotsPerWorker = math.max(gpus, 1),
      runPolicy = { cleanPodPolicy = "Running" },
      mpiReplicaSpecs = {
        Launcher = { replicas = 1, template = { spec = { containers = { launcher } } } },
        Worker = { replicas = p.replicas, template = { spec = { containers = { worker } } } },
      },
    },
  }
end
