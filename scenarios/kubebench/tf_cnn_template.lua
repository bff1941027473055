--- The TFJob of Kubebench's kubebench-example-tfcnn prototype, as a Lua
-- template: num_worker workers, num_ps parameter servers (none when 0),
-- the tf_cnn_benchmarks flags from the params unless `args` is given.
-- kbrun sets metadata.name (the experiment ID), the namespace, the
-- volumes and the KUBEBENCH_* environment afterwards.
local FLAGS = { "model", "batch_size", "num_batches", "variable_update", "num_gpus",
  "local_parameter_device", "device", "data_format", "forward_only" }

local function flags(p)
  local kb = require "kb"
  if p.args ~= nil and p.args ~= kb.json.null and p.args ~= "" then
    local list = {}
    for part in tostring(p.args):gmatch("[^,]+") do list[#list + 1] = part end
    return list
  end
  local list = {}
  for _, name in ipairs(FLAGS) do
    if p[name] ~= nil and p[name] ~= kb.json.null then
      list[#list + 1] = string.format("--%s=%s", name, tostring(p[name]))
    end
  end
  return list
end

local function replica(p, n)
  return {
    replicas = n,
    restartPolicy = "Never",
    template = { spec = { containers = { {
      name = "tensorflow",
      image = p.image,
      args = flags(p),
    } } } },
  }
end

return function(p)
  local specs = { Worker = replica(p, p.num_worker) }
  if (tonumber(p.num_ps) or 0) > 0 then specs.PS = replica(p, p.num_ps) end
  return {
    apiVersion = "kubeflow.org/v1",
    kind = "TFJob",
    metadata = { name = p.name },
    spec = { tfReplicaSpecs = specs },
  }
end
