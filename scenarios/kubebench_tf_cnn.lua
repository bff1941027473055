--- Kubebench's tf-cnn-dummy example: a TFJob with 1 worker and 0 parameter
-- servers running tf_cnn_benchmarks (resnet50, batch 2, 20 batches),
-- params exactly as in Kubebench's examples/config/tf-cnn/tf-cnn-dummy.yaml.
-- Against the embedded simulator by default; host=URL for a real cluster
-- (through `kubectl proxy`).
-- A real cluster: kubeconfig= (and context=), or host=URL; the connection
-- parameters (ca_file, client_cert/client_key, insecure, token_file,
-- request_timeout, proxy) are kb.connection's (docs/security.md).
--
--   kbrun scenarios/kubebench_tf_cnn.lua                 # experiments/tf-cnn-dummy-<date>-<xxxx>/..., experiments/report.csv
--   kbrun scenarios/kubebench_tf_cnn.lua num_worker=2 num_ps=1
--   kbrun render scenarios/kubebench_tf_cnn.lua          # the manifests, nothing created
local kubebench = require "kb.kubebench"

-- not `return kubebench.scenario{...}`: a tail call would hide this file,
-- which relative paths start from
local scenario = kubebench.scenario {
  name = "kubebench_tf_cnn",
  experiment = "kubebench/tf-cnn.yaml",
}

return scenario
