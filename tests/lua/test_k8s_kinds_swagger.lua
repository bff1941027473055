-- Every built-in kind the simulator serves, per the Kubernetes 1.32 swagger
-- (specs/k8s/swagger-v1.32.json, strict: a field the real API lacks is a
-- violation): one object of each created through the REST API of the
-- embedded simulator, read and listed back, the controllers' status
-- included (a Deployment to available, a Service's Endpoints and
-- EndpointSlice, a PodDisruptionBudget's counts, a CronJob's Job).
local kb = require "kb"
local T = require "kb.testing"
local openapi = require "kb.openapi"
local X = require "fidelity_exchange"

local sim = kb.sim.start { profile = "fast", seed = 5, clock = "events" }
local rec = openapi.recorder(openapi.k8s({ full = true, strict_response = true }))
local a = X.new(sim.url, rec)

local NS = "/api/v1/namespaces/default"
local APPS = "/apis/apps/v1/namespaces/default"

-- Polls GET path until ok(body) (bounded: 720 x 5 virtual seconds).
local function until_ok(path, ok)
  local body
  for _ = 1, 720 do
    body = a:call("GET", path, { expect = 200 })
    if ok(body) then return body end
    kb.sleep(5)
  end
  error(path .. ": never reached the state asked for", 2)
end

local POD_TEMPLATE = { metadata = { labels = { app = "web" } }, spec = { containers = { {
  name = "web", image = "nginx", ports = { { name = "http", containerPort = 8080 } },
  resources = { requests = { cpu = "100m", memory = "64Mi" } } } } } }

T.case("workload, service and cluster kinds read back per the swagger", function()
  a:call("POST", "/api/v1/namespaces", { expect = 201, json = { apiVersion = "v1", kind = "Namespace",
    metadata = { name = "team-a" } } })
  a:call("POST", NS .. "/configmaps", { expect = 201, json = { apiVersion = "v1", kind = "ConfigMap",
    metadata = { name = "cm" }, data = { a = "1" } } })
  a:call("POST", NS .. "/secrets", { expect = 201, json = { apiVersion = "v1", kind = "Secret",
    metadata = { name = "s" }, stringData = { p = "x" } } })
  a:call("POST", NS .. "/serviceaccounts", { expect = 201, json = { apiVersion = "v1",
    kind = "ServiceAccount", metadata = { name = "sa" } } })

  a:call("POST", APPS .. "/deployments", { expect = 201, json = { apiVersion = "apps/v1", kind = "Deployment",
    metadata = { name = "web" }, spec = { replicas = 2, selector = { matchLabels = { app = "web" } },
      template = POD_TEMPLATE } } })
  local d = until_ok(APPS .. "/deployments/web", function(b) return (b.status.availableReplicas or 0) == 2 end)
  T.eq(d.status.readyReplicas, 2)
  a:call("GET", APPS .. "/replicasets", { expect = 200 })
  a:call("GET", APPS .. "/deployments/web/scale", { expect = 200 })
  local pods = a:call("GET", NS .. "/pods", { expect = 200, query = { labelSelector = "app=web" } })
  T.eq(#pods.items, 2, "the Deployment's pods")

  a:call("POST", NS .. "/services", { expect = 201, json = { apiVersion = "v1", kind = "Service",
    metadata = { name = "web" }, spec = { selector = { app = "web" },
      ports = { { port = 80, targetPort = "http" } } } } })
  local ep = until_ok(NS .. "/endpoints/web", function(b)
    return b.subsets and b.subsets[1] and #(b.subsets[1].addresses or {}) == 2 end)
  T.eq(ep.subsets[1].ports[1].port, 8080, "the named targetPort")
  a:call("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", { expect = 200 })
  a:call("GET", NS .. "/services/kubernetes", { expect = 200 })

  a:call("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", { expect = 201, json = {
    apiVersion = "policy/v1", kind = "PodDisruptionBudget", metadata = { name = "web" },
    spec = { minAvailable = 1, selector = { matchLabels = { app = "web" } } } } })
  local pdb = until_ok("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
    function(b) return b.status and b.status.currentHealthy == 2 end)
  T.eq(pdb.status.disruptionsAllowed, 1)

  a:call("POST", "/apis/batch/v1/namespaces/default/cronjobs", { expect = 201, json = {
    apiVersion = "batch/v1", kind = "CronJob", metadata = { name = "tick" },
    spec = { schedule = "*/1 * * * *", jobTemplate = { spec = { template = { spec = {
      restartPolicy = "Never", containers = { { name = "c", image = "busybox" } } } } } } } } })
  local cj = until_ok("/apis/batch/v1/namespaces/default/cronjobs/tick",
    function(b) return b.status and b.status.lastScheduleTime end)
  T.ok(cj.status.lastScheduleTime, "a Job was scheduled")
  a:call("GET", "/apis/batch/v1/namespaces/default/jobs", { expect = 200 })

  a:call("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", { expect = 200 })
  a:call("POST", "/api/v1/persistentvolumes", { expect = 201, json = { apiVersion = "v1",
    kind = "PersistentVolume", metadata = { name = "pv1" }, spec = { capacity = { storage = "1Gi" },
      accessModes = { "ReadWriteOnce" }, hostPath = { path = "/tmp/pv1" } } } })
  a:call("GET", "/apis/storage.k8s.io/v1/storageclasses", { expect = 200 })
  a:call("GET", "/apis/scheduling.k8s.io/v1/priorityclasses", { expect = 200 })
  local ssar = a:call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", { expect = 201,
    json = { apiVersion = "authorization.k8s.io/v1", kind = "SelfSubjectAccessReview",
      spec = { resourceAttributes = { verb = "create", resource = "pods" } } } })
  T.eq(ssar.status.allowed, true)
  a:call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", { expect = 201,
    json = { apiVersion = "authentication.k8s.io/v1", kind = "SelfSubjectReview" } })
  for _, path in ipairs { "/api/v1/namespaces", NS .. "/configmaps", NS .. "/secrets",
      NS .. "/serviceaccounts", "/api/v1/persistentvolumes", NS .. "/services", NS .. "/endpoints" } do
    a:call("GET", path, { expect = 200 })
  end
  rec:assert_clean()
end)

T.run()
sim:stop()
