--- Kubebench's MPI example (mpi-job-dummy.yaml: Horovod tf_cnn_benchmarks,
-- 1 worker with 1 GPU) as a kubeflow.org/v1 MPIJob, with a container post
-- job run as a Kubernetes Job. Against the embedded simulator it uses a
-- cluster with a GPU pool (kubebench/sim-gpu.yaml) unless --sim-config is
-- given.
-- A real cluster: kubeconfig= (and context=), or host=URL; the connection
-- parameters (ca_file, client_cert/client_key, insecure, token_file,
-- request_timeout, proxy) are kb.connection's (docs/security.md).
--
--   kbrun scenarios/kubebench_mpi.lua replicas=2
local kubebench = require "kb.kubebench"

-- not `return kubebench.scenario{...}`: a tail call would hide this file,
-- which relative paths start from
local scenario = kubebench.scenario {
  name = "kubebench_mpi",
  experiment = "kubebench/mpi.yaml",
  sim_config = "kubebench/sim-gpu.yaml",
}

return scenario
