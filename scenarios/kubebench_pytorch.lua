--- A PyTorchJob experiment (1 master, 2 workers) from a YAML template with
-- ${param} placeholders; the post job parses the replicas' logs in-process.
-- A real cluster: kubeconfig= (and context=), or host=URL; the connection
-- parameters (ca_file, client_cert/client_key, insecure, token_file,
-- request_timeout, proxy) are kb.connection's (docs/security.md).
--
--   kbrun scenarios/kubebench_pytorch.lua num_worker=4
local kubebench = require "kb.kubebench"

-- not `return kubebench.scenario{...}`: a tail call would hide this file,
-- which relative paths start from
local scenario = kubebench.scenario {
  name = "kubebench_pytorch",
  experiment = "kubebench/pytorch.yaml",
}

return scenario
