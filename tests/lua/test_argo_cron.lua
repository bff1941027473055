-- argo-server's cron workflows on the embedded simulator's virtual clock
-- (events clock: kb.sleep jumps, so minutes of schedule take no real time):
-- the controller spawns one Workflow per schedule time, named and labelled
-- as argo does, honours concurrencyPolicy and suspend; validation in argo's
-- words.
local kb = require "kb"
local T = require "kb.testing"
local json = require "kb.json"

local fx = require("k8s_sim").start("argo-cron")
local sim = fx.sim
local NS = "default"
local CRON = sim.url .. "/api/v1/cron-workflows/" .. NS

local function call(method, url, body)
  local r = kb.http.request { method = method, url = url,
    body = body and json.encode(body) or nil, headers = { ["Content-Type"] = "application/json" } }
  return r.status, r.body ~= "" and json.decode(r.body) or nil
end

-- schedule: a string (v3.5's spec.schedule) or a list (v3.6's spec.schedules).
local function cron(name, schedule, secs, policy)
  local one = type(schedule) == "string" and schedule or nil
  local many = type(schedule) == "table" and schedule or nil
  return { metadata = { name = name }, spec = { schedule = one, schedules = many, concurrencyPolicy = policy,
    workflowMetadata = { labels = { suite = "cron" } },
    workflowSpec = { entrypoint = "main", templates = {
      { name = "main", metadata = { annotations = { ["sim.kbrun.io/duration"] = "fixed:" .. secs } },
        container = { image = "busybox:1.36" } } } } } }
end

-- The Workflows a cron spawned, by its label, sorted by name.
local function children(name)
  local _, l = call("GET", sim.url .. "/api/v1/workflows/" .. NS,
    nil)
  local out = {}
  for _, w in ipairs(l.items or {}) do
    if w.metadata.labels["workflows.argoproj.io/cron-workflow"] == name then out[#out + 1] = w end
  end
  table.sort(out, function(a, b) return a.metadata.name < b.metadata.name end)
  return out
end

-- The schedule's times are minute boundaries of the simulator's unix
-- time (its epoch is when it started): start each case 1 s past one, so
-- which boundaries a sleep crosses does not depend on when the test ran.
local function align()
  local st = json.decode(kb.http.get(sim.url .. "/sim/v1/status").body)
  local now = st.epoch + st.sim_time
  kb.sleep(60 - now % 60 + 1)
end

local function secs(ts)
  local y, mo, d, h, mi, s = ts:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)Z$")
  return os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = s }
end

T.case("*/1 spawns exactly N workflows in N simulated minutes, named and labelled as argo does", function()
  align()
  local st, created = call("POST", CRON, { namespace = NS, cronWorkflow = cron("every", "*/1 * * * *", 10) })
  T.eq(st, 200)
  T.eq(created.kind, "CronWorkflow")
  kb.sleep(5 * 60)
  local wfs = children("every")
  T.eq(#wfs, 5)
  local last = 0
  for _, w in ipairs(wfs) do
    local t = tonumber(w.metadata.name:match("^every%-(%d+)$"))
    T.ok(t, w.metadata.name)
    T.eq(t % 60, 0, "a minute boundary")
    T.ok(t > last, "one per minute")
    if last > 0 then T.eq(t - last, 60) end
    last = t
    T.eq(secs(w.metadata.annotations["workflows.argoproj.io/scheduled-time"]), t)
    T.eq(w.metadata.labels.suite, "cron", "workflowMetadata labels")
    T.eq(w.metadata.ownerReferences[1].kind, "CronWorkflow")
    T.eq(w.metadata.ownerReferences[1].uid, created.metadata.uid)
  end
  kb.sleep(15) -- the last one (10 s) is done; the next is 45 s away
  for _, w in ipairs(children("every")) do T.eq(w.status.phase, "Succeeded") end
  T.eq(#children("every"), 5)
  local _, got = call("GET", CRON .. "/every")
  T.eq(secs(got.status.lastScheduledTime), last)
  T.same(got.status.active, {})

  -- suspended: the minutes pass without a workflow; resumed: the next one
  local s, body = call("PUT", CRON .. "/every/suspend", { namespace = NS, name = "every" })
  T.eq(s, 200)
  T.eq(body.spec.suspend, true)
  kb.sleep(3 * 60)
  T.eq(#children("every"), 5)
  s, body = call("PUT", CRON .. "/every/resume", {})
  T.eq(s, 200)
  T.eq(body.spec.suspend, false)
  kb.sleep(60)
  T.eq(#children("every"), 6)
  T.eq(call("DELETE", CRON .. "/every"), 200)
  T.eq(call("GET", CRON .. "/every"), 404)
end)

T.case("concurrencyPolicy Forbid skips while one runs; Replace terminates it", function()
  align()
  call("POST", CRON, { cronWorkflow = cron("forbid", { "* * * * *" }, 90, "Forbid") })
  kb.sleep(5 * 60)
  -- 90 s runs at minutes 1, 3, 5: minutes 2 and 4 found one active
  T.eq(#children("forbid"), 3)
  call("DELETE", CRON .. "/forbid")

  call("POST", CRON, { cronWorkflow = cron("replace", { "0 0 1 1 *", "* * * * *" }, 90, "Replace") })
  kb.sleep(2 * 60)
  local wfs = children("replace")
  T.eq(#wfs, 2)
  T.eq(wfs[1].status.phase, "Failed")
  T.eq(wfs[1].status.message, "Stopped with strategy 'Terminate'")
  T.eq(wfs[2].status.phase, "Running", json.encode(wfs[2].status))
  local _, got = call("GET", CRON .. "/replace")
  T.eq(#got.status.active, 1)
  T.eq(got.status.active[1].name, wfs[2].metadata.name)
  call("DELETE", CRON .. "/replace")
end)

T.case("validation and lint in argo's words; list and get", function()
  local st, body = call("POST", CRON, { cronWorkflow = cron("bad", "* * *", 5) })
  T.eq(st, 400)
  T.eq(body.code, 3)
  T.eq(body.message, "cron schedule * * * is malformed: expected exactly 5 fields, found 3: [* * *]")
  st, body = call("POST", CRON .. "/lint", { cronWorkflow = cron("bad", "* * * * *", 5, "Sometimes") })
  T.eq(st, 400)
  T.eq(body.message, "'Sometimes' is not a valid concurrencyPolicy")
  local nosched = cron("nosched", "", 5)
  st, body = call("POST", CRON, { cronWorkflow = nosched })
  T.eq(body.message, "cron workflow must have at least one schedule")
  local badwf = cron("badwf", "@hourly", 5)
  badwf.spec.workflowSpec.entrypoint = "nope"
  T.eq(select(2, call("POST", CRON, { cronWorkflow = badwf })).message, "template name 'nope' undefined")
  st, body = call("POST", CRON .. "/lint", { cronWorkflow = cron("ok", "@hourly", 5) })
  T.eq(st, 200)
  T.eq(body.metadata.name, "ok")
  T.eq(call("GET", CRON .. "/ok"), 404, "lint stores nothing")
  call("POST", CRON, { cronWorkflow = cron("listed", "0 0 1 1 *", 5) })
  local _, l = call("GET", CRON)
  local names = {}
  for _, c in ipairs(l.items) do names[#names + 1] = c.metadata.name end
  T.same(names, { "listed" })
  T.eq(select(2, call("GET", CRON .. "/listed")).spec.schedule, "0 0 1 1 *")
end)

T.run()
