-- kb.kfp.pipeline (lua/kb/kfp/pipeline_gen.lua): shapes, both manifest
-- formats, the Argo schema, and runs of the generated pipelines on the
-- embedded simulator (v1 Argo YAML and v2 IR).
local T = require "kb.testing"
local kb = require "kb"
local kfp = require "kb.kfp"
local gen = require "kb.kfp.pipeline_gen"
local yaml = require "kb.yaml"
local openapi = require "kb.openapi"

local function deps_text(deps)
  local out = {}
  for i, d in ipairs(deps) do out[i] = i .. ":" .. table.concat(d, ",") end
  return table.concat(out, " ")
end

T.case("shapes give the expected DAG", function()
  T.eq(deps_text(gen.edges(4, "chain")), "1: 2:1 3:2 4:3")
  T.eq(deps_text(gen.edges(4, "fan-out")), "1: 2:1 3:1 4:1")
  T.eq(deps_text(gen.edges(5, "diamond")), "1: 2:1 3:1 4:1 5:2,3,4")
  T.eq(deps_text(gen.edges(2, "diamond")), "1: 2:1", "a diamond of 2 is a chain")
  T.eq(deps_text(gen.edges(1, "random")), "1:")
  local r = gen.edges(30, "random", 7, 3)
  for i = 2, 30 do
    T.ok(#r[i] >= 1 and #r[i] <= 3, "fan-in of step " .. i)
    for _, d in ipairs(r[i]) do T.ok(d < i, "edges point backwards (acyclic)") end
  end
  T.eq(deps_text(gen.edges(30, "random", 7, 3)), deps_text(r), "same seed, same DAG")
  T.ok(deps_text(gen.edges(30, "random", 8, 3)) ~= deps_text(r), "another seed, another DAG")
end)

T.case("v1: an Argo Workflow that validates against the Argo schema", function()
  local argo = openapi.argo()
  for _, shape in ipairs(gen.SHAPES) do
    local text, doc = gen.pipeline{ steps = 6, shape = shape, cpu = "500m", memory = "256Mi",
      cpu_limit = 1, duration = "lognormal:60,90", node_selector = "pool-2" }
    local ok, errs = argo:validate("io.argoproj.workflow.v1alpha1.Workflow", doc)
    T.ok(ok, shape .. ": " .. table.concat(errs, "; "))
    local back = yaml.decode(text)
    T.eq(back.kind, "Workflow")
    T.eq(#back.spec.templates, 7, "a DAG template and one per step")
    local step = back.spec.templates[2]
    T.eq(step.container.resources.requests.cpu, "500m")
    T.eq(step.container.resources.limits.cpu, "1")
    T.eq(step.nodeSelector["cloud.google.com/gke-nodepool"], "pool-2")
    T.eq(step.metadata.annotations["sim.kbrun.io/duration"], "lognormal:60,90")
    T.eq(step.container.command[3], "sleep 60", "a real cluster sleeps the median")
  end
  T.eq(gen.pipeline{ steps = 3 }, gen.pipeline{ steps = 3 }, "deterministic bytes")
end)

T.case("v2: IR with a platform spec", function()
  local text, docs = gen.pipeline{ format = "v2", steps = 4, shape = "diamond", cpu = 0.5,
    memory = "1Gi", duration = 30, node_selector = { team = "ml" } }
  local back = yaml.decode_all(text)
  T.eq(#back, 2)
  T.eq(#docs, 2)
  local ir = back[1]
  T.eq(ir.pipelineInfo.name, "synthetic-diamond-4")
  T.eq(ir.schemaVersion, "2.1.0")
  T.eq(table.concat(ir.root.dag.tasks["step-4"].dependentTasks, ","), "step-2,step-3")
  T.eq(ir.deploymentSpec.executors["exec-step-1"].container.resources.resourceCpuRequest, "0.5")
  local plat = back[2].platforms.kubernetes.deploymentSpec.executors["exec-step-2"]
  T.eq(plat.nodeSelector.labels.team, "ml")
  T.eq(plat.podMetadata.annotations["sim.kbrun.io/duration"], "fixed:30")
  local single = yaml.decode_all((gen.pipeline{ format = "v2", steps = 2 }))
  T.eq(#single, 1, "no platform spec without selector or duration")
end)

T.case("bad options say what is wrong", function()
  T.raises(function() gen.pipeline{ steps = 0 } end, "kb.kfp.pipeline: steps must be an integer from 1 to 10000, got 0")
  T.raises(function() gen.pipeline{ steps = 2.5 } end, "steps must be an integer")
  T.raises(function() gen.pipeline{ shape = "star" } end,
    "shape must be one of chain, fan-out, diamond, random, got star")
  T.raises(function() gen.pipeline{ format = "v3" } end, "format must be v1 or v2, got v3")
  T.raises(function() gen.pipeline{ cpu = "lots" } end, "cpu must be a Kubernetes quantity")
  T.raises(function() gen.pipeline{ duration = "weibull:3,4" } end, 'unknown model "weibull"')
  T.raises(function() gen.pipeline{ duration = -1 } end, "duration must be >= 0 seconds")
  T.raises(function() gen.pipeline{ name = "Bad Name" } end, "name must be lower-case")
  T.raises(function() gen.pipeline{ node_selector = 3 } end, "node_selector must be a pool name")
  T.raises(function() gen.pipeline("x") end, "wants a table of options")
end)

T.case("kb.kfp.pipeline is the generator", function()
  T.eq(kfp.pipeline, gen.pipeline)
end)

-- Uploads a generated pipeline to a fresh simulator, runs it and returns
-- the finished run and the pods the simulator scheduled.
local function run_on_sim(opts, api)
  local sim <close> = kb.sim.start{ profile = "fast", speed = 600, seed = 3,
    config = { cluster = { pools = { { name = "pool-1", nodes = 1, cpu = 4, memory = "16Gi" },
      { name = "pool-2", nodes = 2, cpu = 4, memory = "16Gi" } } } } }
  local c = kfp.client{ host = sim.url, api = api }
  local text = gen.pipeline(opts)
  local p = c:upload_pipeline{ content = text, filename = "gen.yaml", name = "gen-" .. api }
  local e = c:create_experiment{ name = "gen-" .. api }
  local r = c:create_run{ name = "r", experiment_id = e.id, pipeline_id = p.id,
    pipeline_version_id = p.default_version_id }
  r = c:wait_run(r.id, { interval = 5, timeout = 3600 })
  local pods = kb.json.decode(kb.http.get(sim.url .. "/api/v1/namespaces/kubeflow/pods").body)
  return r, pods
end

T.case("v1 and v2 pipelines run on the simulator", function()
  for _, case in ipairs({ { "v1", "v1beta1" }, { "v2", "v2beta1" } }) do
    local r, pods = run_on_sim({ format = case[1], steps = 5, shape = "diamond", cpu = "1",
      duration = 60, node_selector = "pool-2" }, case[2])
    T.eq(r.state, "Succeeded", case[1] .. " run state")
    -- 5 steps of 60 s, diamond: critical path 3 x 60 s (fast profile: no overheads)
    T.ok(r.finished_at - r.created_at >= 180, case[1] .. ": the run took its critical path, got "
      .. tostring(r.finished_at - r.created_at))
    local on_pool2 = 0
    for _, pod in ipairs(pods.items or {}) do
      -- v2 driver pods have no selector; the steps' pods must follow theirs
      local tmpl = pod.metadata.annotations and pod.metadata.annotations["workflows.argoproj.io/node-name"] or pod.metadata.name
      if not tmpl:find("driver", 1, true) then
        T.ok((pod.spec.nodeName or ""):find("pool-2", 1, true), "step pod " .. pod.metadata.name .. " on pool-2, got "
          .. tostring(pod.spec.nodeName))
        on_pool2 = on_pool2 + 1
      end
    end
    T.ok(on_pool2 >= 5, case[1] .. ": the steps ran on pool-2, got " .. on_pool2)
  end
end)

T.run()
