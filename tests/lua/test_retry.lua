-- kb.retry: the policy (classification, delays, budget) and its use by
-- kb.kfp and kb.k8s against the embedded simulator, with a scripted
-- transport in front of it that fails chosen requests (before sending
-- them, or after the server acted on them).
local kb = require "kb"
local T = require "kb.testing"
local retry = require "kb.retry"
local kfp = require "kb.kfp"
local k8s = require "kb.k8s"
local metrics = require "kb.metrics"

local fx = require("k8s_sim").start("retry")
local sim, KUBECONFIG = fx.sim, fx.kubeconfig

local ErrorMeta = getmetatable(kb.cancelled)
local function transport_error(class)
  return setmetatable({ class = class, message = class .. " (injected by the test)" }, ErrorMeta)
end

-- A kb.http client-like object: plan[n] says what happens to the n-th
-- request that matches(o): "503", "429", "502", "500" (answered so, not
-- sent), "connect" (not sent), "reset" / "timeout" (sent, the server acts
-- on it, the answer is lost). f.log holds "METHOD path" of every request.
local function flaky(plan, matches)
  local f = { n = 0, log = {}, sent = 0 }
  f.request = function(_, o)
    local path = o.url:gsub("^https?://[^/]+", "")
    f.log[#f.log + 1] = o.method .. " " .. path
    local action
    if not matches or matches(o, path) then
      f.n = f.n + 1
      action = plan[f.n]
    end
    if action and action:match("^%d+$") then
      return { status = tonumber(action), headers = { ["retry-after"] = plan.retry_after },
        body = '{"code": 14, "message": "injected ' .. action .. '"}', time = { total = 0.001 } }
    elseif action == "connect" then
      error(transport_error("connect"), 0)
    end
    f.sent = f.sent + 1
    local r = kb.http.request(o)
    if action == "reset" or action == "timeout" then error(transport_error(action), 0) end
    return r
  end
  return f
end

local function count(name, labels)
  local m = metrics.get(name, labels)
  if not m then return 0 end
  return m.count and m:count() or m:value()
end

local FAST = { base = 0.001, max_delay = 0.05 }

local function client(prefix, f, policy)
  return kfp.client{ host = sim.url, api = "v2beta1", metrics_prefix = prefix, http = f,
    retry = policy == nil and FAST or policy }
end

local PIPELINE = kb.fs.read("../scenarios/pipelines/taxi_updated_pool.yaml")

local function pipeline(c)
  return c:upload_pipeline{ name = "p-" .. math.random(1e9), content = PIPELINE,
    filename = "taxi.yaml" }
end

-- ---- the policy ----------------------------------------------------------------------

T.case("policy: defaults and option errors", function()
  local p = retry.policy()
  T.eq(p.max_attempts, 5)
  T.eq(p.base, 0.2)
  T.eq(p.max_delay, 10)
  T.eq(p.jitter, "full")
  T.same(p.budget_spec, { ratio = 0.2, min = 10, window = 100 })
  T.eq(retry.policy(p), p)
  T.eq(retry.resolve(false), nil)
  T.eq(retry.resolve(nil).max_attempts, 5)
  T.eq(retry.resolve({ max_attempts = 2 }).max_attempts, 2)
  T.contains(tostring(p), "max_attempts = 5")
  T.raises(function() retry.policy{ max_attempt = 3 } end, "kb.retry.policy: unknown option 'max_attempt'")
  T.raises(function() retry.policy{ max_attempts = 0 } end,
    "kb.retry.policy: max_attempts must be an integer >= 1, got 0")
  T.raises(function() retry.policy{ base = -1 } end, "kb.retry.policy: base must be a number >= 0, got -1")
  T.raises(function() retry.policy{ jitter = "some" } end,
    "kb.retry.policy: jitter must be \"full\", \"equal\" or \"none\", got some")
  T.raises(function() retry.policy{ budget = 3 } end,
    "kb.retry.policy: budget must be a table {ratio =, min =, window =} or false")
  T.raises(function() retry.policy{ budget = { size = 1 } } end, "kb.retry.policy: unknown budget option 'size'")
  T.raises(function() retry.resolve("yes", "kb.kfp.client") end,
    "kb.kfp.client: retry must be a kb.retry.policy, a table of its options, true or false, got string")
  T.raises(function() kfp.client{ host = sim.url, retry = { tries = 2 } } end,
    "kb.retry.policy: unknown option 'tries'")
  T.raises(function() k8s.client{ kubeconfig = KUBECONFIG, retry = 7 } end,
    "kb.k8s.client: retry must be a kb.retry.policy")
end)

T.case("classify: transient statuses and classes, idempotency, Retry-After", function()
  local p = retry.policy{ jitter = "none", base = 0.5, max_delay = 4 }
  local ok, delay, reason, check = p:classify({ status = 503 }, "GET", 1)
  T.eq(ok, true); T.eq(delay, 0.5); T.eq(reason, "503"); T.eq(check, false)
  ok, delay = p:classify({ status = 502 }, "DELETE", 3)
  T.eq(ok, true); T.eq(delay, 2)
  ok, delay = p:classify({ status = 504 }, "GET", 10)
  T.eq(delay, 4, "capped at max_delay")
  -- Retry-After (a response's header or an error's field), capped
  ok, delay, reason = p:classify({ status = 429, headers = { ["retry-after"] = "2" } }, "GET", 1)
  T.eq(ok, true); T.eq(delay, 2); T.eq(reason, "429")
  ok, delay = p:classify({ status = 429, retry_after = 60 }, "GET", 1)
  T.eq(delay, 4)
  ok, delay = p:classify({ status = 503, headers = { ["retry-after"] = "Wed, 21 Oct 2015 07:28:00 GMT" } },
    "GET", 1)
  T.eq(delay, 0, "an HTTP date in the past: at once")
  ok, delay = p:classify({ status = 503, headers = { ["retry-after"] = "Wed, 21 Oct 2015 07:28:03 GMT",
    date = "Wed, 21 Oct 2015 07:28:00 GMT" } }, "GET", 1)
  -- 3 wall-clock seconds are 3 * speed scenario seconds (x600 here): capped
  T.eq(delay, math.min(4, 3 * require("kb.core").clock_speed()), "an HTTP date, from the answer's Date")
  ok, delay = p:classify({ status = 503, headers = { ["retry-after"] = "soon" } }, "GET", 1)
  T.eq(delay, 0.5, "a Retry-After that is neither form falls back to the backoff")
  -- not transient
  for _, x in ipairs({ { status = 500 }, { status = 404 }, { status = 409 }, { class = "tls" },
      { class = "dns" }, { class = "protocol" } }) do
    ok, delay, reason, check = p:classify(x, "GET", 1)
    T.eq(ok, false); T.eq(reason, nil); T.eq(check, false)
  end
  T.eq((p:classify(kb.cancelled, "GET", 1)), false)
  -- transport classes
  for _, class in ipairs({ "connect", "reset", "timeout" }) do
    ok, _, reason = p:classify({ class = class }, "GET", 1)
    T.eq(ok, true, class); T.eq(reason, class)
  end
  -- a POST: re-sent only when the server cannot have acted on it
  ok, _, reason, check = p:classify({ class = "connect" }, "POST", 1)
  T.eq(ok, true); T.eq(check, false)
  ok, _, reason, check = p:classify({ status = 429 }, "POST", 1)
  T.eq(ok, true); T.eq(check, false)
  for _, x in ipairs({ { class = "reset" }, { class = "timeout" }, { status = 503 } }) do
    ok, _, reason, check = p:classify(x, "POST", 1)
    T.eq(ok, false, reason); T.eq(check, true, reason)
  end
  T.eq((retry.classify({ status = 503 }, "get")), true, "the default policy, any case of method")
end)

T.case("backoff: exponential, capped, jittered within bounds", function()
  local none = retry.policy{ jitter = "none", base = 0.2, max_delay = 1 }
  T.eq(none:backoff(1), 0.2)
  T.eq(none:backoff(2), 0.4)
  T.eq(none:backoff(3), 0.8)
  T.eq(none:backoff(4), 1)
  local full, equal = retry.policy{ base = 1, max_delay = 8 }, retry.policy{ jitter = "equal", base = 1 }
  for _ = 1, 200 do
    local d = full:backoff(3)
    T.ok(d >= 0 and d <= 4, "full jitter in [0, 4]: " .. d)
    d = equal:backoff(3)
    T.ok(d >= 2 and d <= 4, "equal jitter in [2, 4]: " .. d)
  end
end)

T.case("budget: min tokens, ratio per request, capped", function()
  local b = retry.policy{ budget = { ratio = 0.5, min = 2, window = 4 } }:budget()
  T.eq(b.tokens, 2); T.eq(b.cap, 4)
  T.eq(b:withdraw(), true); T.eq(b:withdraw(), true); T.eq(b:withdraw(), false)
  b:deposit(); T.eq(b:withdraw(), false, "half a token")
  b:deposit(); T.eq(b:withdraw(), true)
  for _ = 1, 100 do b:deposit() end
  T.eq(b.tokens, 4)
  T.contains(tostring(b), "4.0 of 4.0 tokens")
  T.eq(retry.policy{ budget = false }:budget(), nil)
end)

-- ---- kb.kfp ---------------------------------------------------------------------------

T.case("kfp: a GET retried on 503s; the logical call and the attempts recorded apart", function()
  local f = flaky({ "503", "503" }, function(o) return o.method == "GET" end)
  local c = client("t1.", f)
  local p = pipeline(c)
  local got, resp = c:request{ op = "pipeline.get", path = "/pipelines/" .. p.id }
  T.eq(got.pipeline_id, p.id)
  T.eq(resp.attempts, 3)
  T.eq(count("t1.kfp.retries", { op = "pipeline.get", reason = "503" }), 2)
  T.eq(count("t1.kfp.requests", { op = "pipeline.get", status = "503" }), 2)
  T.eq(count("t1.kfp.requests", { op = "pipeline.get", status = "200" }), 1)
  T.eq(count("t1.pipeline.get"), 1, "one logical call")
  T.eq(count("t1.pipeline.get.attempt"), 3, "three attempts")
  T.eq(metrics.get("t1.kfp.errors", { op = "pipeline.get", class = "server" }), nil)
  T.ok(resp.elapsed >= resp.time.total, "the logical time holds every attempt")
end)

T.case("kfp: 429 honours Retry-After; gives up after max_attempts with the last error", function()
  local f = flaky({ "429", "429", "429", retry_after = "0.02" }, function(o) return o.method == "GET" end)
  local c = client("t2.", f, { max_attempts = 3, base = 0.001, max_delay = 1 })
  local t0 = kb.now()
  local err = T.raises(function() c:get_pipeline("nope") end, "HTTP 429: injected 429")
  T.ok(kb.now() - t0 >= 0.04 - 1e-9, "two Retry-After delays of 0.02 s")
  T.eq(err.class, "throttled")
  T.eq(err.attempts, 3)
  T.eq(count("t2.kfp.retries", { op = "pipeline.get", reason = "429" }), 2)
  T.eq(count("t2.kfp.errors", { op = "pipeline.get", class = "throttled" }), 1, "one failed call")
  T.eq(count("t2.pipeline.get.attempt"), 3)
  T.eq(metrics.get("t2.pipeline.get"), nil)
end)

T.case("kfp: not retried: a 500, a 404, a POST action after a 503, retry = false", function()
  local f = flaky({ "500" })
  local c = client("t3.", f)
  T.raises(function() c:get_run("r1") end, "HTTP 500")
  T.eq(#f.log, 1)
  local err = T.raises(function() client("t3.", flaky({})):get_run("no-such-run") end)
  T.eq(err.class, "not_found"); T.eq(err.attempts, 1)
  f = flaky({ "503" })
  err = T.raises(function() client("t3.", f):terminate_run("r1") end, "HTTP 503")
  T.eq(#f.log, 1, "terminate is not idempotent and has no lookup")
  f = flaky({ "503" })
  T.raises(function() client("t3.", f, false):get_run("r1") end, "HTTP 503")
  T.eq(#f.log, 1)
  T.eq(count("t3.kfp.retries", { op = "run.get", reason = "503" }), 0)
end)

T.case("kfp: a create refused at connect is re-sent; a 503 is looked up first, then re-sent", function()
  local f = flaky({ "connect" }, function(o) return o.method == "POST" end)
  local c = client("t4.", f)
  local e = c:create_experiment{ name = "exp-connect" }
  T.ok(e.id)
  T.same(f.log, { "POST /apis/v2beta1/experiments", "POST /apis/v2beta1/experiments" })
  T.eq(count("t4.kfp.retries", { op = "experiment.create", reason = "connect" }), 1)
  f = flaky({ "503" }, function(o) return o.method == "POST" end)
  c = client("t4.", f)
  local p = pipeline(c)
  T.same(f.log, { "POST /apis/v2beta1/pipelines/upload", "GET /apis/v2beta1/pipelines",
    "POST /apis/v2beta1/pipelines/upload" })
  T.eq(count("t4.kfp.retries", { op = "pipeline.upload", reason = "503" }), 1)
  T.eq(count("t4.pipeline.upload.check"), 1, "the lookup is its own op")
  T.eq(count("t4.kfp.recovered", { op = "pipeline.upload" }), 0)
  local runs = c:list_runs{ experiment_id = e.id }
  T.eq(#runs.items, 0)
  T.ok(p.id)
end)

T.case("kfp: a create whose answer is lost is found by name, not made twice", function()
  local c0 = client("t5.", nil)
  local p = pipeline(c0)
  local e = c0:create_experiment{ name = "exp-lost" }
  for _, class in ipairs({ "reset", "timeout" }) do
    local f = flaky({ class }, function(o) return o.method == "POST" end)
    local c = client("t5.", f)
    local name = "run-" .. class
    local r = c:create_run{ name = name, experiment_id = e.id, pipeline_id = p.id }
    T.eq(r.name, name)
    T.ok(r.id)
    T.eq(f.sent, 2, "the POST and the lookup")
    T.same(f.log, { "POST /apis/v2beta1/runs", "GET /apis/v2beta1/runs" })
  end
  local runs = c0:list_runs{ experiment_id = e.id }
  T.eq(#runs.items, 2, "one run per create")
  T.eq(count("t5.kfp.recovered", { op = "run.create" }), 2)
  T.eq(count("t5.run.create"), 2, "a recovered create is one logical call")
  -- v1beta1 looks up by name as well
  local f = flaky({ "reset" }, function(o) return o.method == "POST" end)
  local c1 = kfp.client{ host = sim.url, api = "v1beta1", metrics_prefix = "t5v1.", http = f, retry = FAST }
  local r = c1:create_run{ name = "run-v1", experiment_id = e.id, pipeline_id = p.id }
  T.eq(r.name, "run-v1")
  T.eq(count("t5v1.kfp.recovered", { op = "run.create" }), 1)
  T.eq(#c0:list_runs{ experiment_id = e.id }.items, 3)
end)

T.case("kfp: an empty budget raises at once and is counted", function()
  local f = flaky({ "503", "503", "503", "503" }, function(o) return o.method == "GET" end)
  local c = client("t6.", f, { base = 0.001, budget = { ratio = 0, min = 1 } })
  local err = T.raises(function() c:get_run("r1") end, "HTTP 503")
  T.eq(err.attempts, 2)
  T.eq(err.budget_exhausted, true)
  T.eq(count("t6.kfp.retry_budget_exhausted", { op = "run.get" }), 1)
  T.eq(count("t6.kfp.retries", { op = "run.get", reason = "503" }), 1)
end)

-- ---- kb.k8s ---------------------------------------------------------------------------

local function cm(meta)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = meta, data = { k = "v" } }
end

T.case("k8s: GETs retried; a create whose answer is lost is found by name", function()
  local f = flaky({ "503", "504" }, function(o) return o.method == "GET" and o.url:find("configmaps") end)
  local c = k8s.client{ kubeconfig = KUBECONFIG, http = f, retry = FAST }
  local list = c:list("configmaps")
  T.ok(list.items)
  T.eq(count("k8s.retries", { op = "k8s.list.configmaps", reason = "503" }), 1)
  T.eq(count("k8s.retries", { op = "k8s.list.configmaps", reason = "504" }), 1)
  f = flaky({ "reset" }, function(o) return o.method == "POST" end)
  c = k8s.client{ kubeconfig = KUBECONFIG, http = f, retry = FAST }
  c:resource("configmaps") -- discovery first
  f.sent, f.log = 0, {}
  local obj = c:create(cm({ name = "retry-by-name" }))
  T.eq(obj.metadata.name, "retry-by-name")
  T.eq(count("k8s.recovered", { op = "k8s.create.configmaps" }), 1)
  T.eq(f.sent, 2, "the POST and the GET by name")
end)

T.case("k8s: a generateName create is found by its create-id label", function()
  local f = flaky({ "timeout" }, function(o) return o.method == "POST" end)
  local c = k8s.client{ kubeconfig = KUBECONFIG, http = f, retry = FAST }
  local obj = c:create(cm({ generateName = "retry-gen-", labels = { app = "x" } }))
  T.ok(obj.metadata.name:match("^retry%-gen%-"))
  T.eq(obj.metadata.labels.app, "x")
  T.ok(obj.metadata.labels[k8s.CREATE_ID_LABEL], "the label")
  T.eq(obj.kind, "ConfigMap")
  local plain = k8s.client{ kubeconfig = KUBECONFIG }
  local all = plain:list("configmaps", { label_selector = { app = "x" } })
  T.eq(#all.items, 1, "made once")
  -- a 503 on a create (not found by the lookup) is re-sent once
  f = flaky({ "503" }, function(o) return o.method == "POST" end)
  c = k8s.client{ kubeconfig = KUBECONFIG, http = f, retry = FAST }
  c:resource("configmaps")
  f.sent, f.log = 0, {}
  c:create(cm({ name = "retry-503" }))
  T.eq(#f.log, 3, "POST, GET by name (404), POST")
  T.eq(count("k8s.retries", { op = "k8s.create.configmaps", reason = "503" }), 1)
  -- without a policy the failure is the answer
  f = flaky({ "reset" }, function(o) return o.method == "POST" end)
  c = k8s.client{ kubeconfig = KUBECONFIG, http = f, retry = false }
  local err = T.raises(function() c:create(cm({ name = "retry-off" })) end, "reset (injected by the test)")
  T.eq(err.class, "reset")
end)

T.run()
