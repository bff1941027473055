-- Large Kubernetes lists do not hold the simulator's loop: a JSON list of
-- 5,000 objects is written in slices of 500, one per loop turn, and a
-- healthz sent once the list's head has arrived is answered while the list
-- is still being written (the simulator's own count of slices, not a clock).
-- The streamed list is the same list a paged read gives.
local kb = require "kb"
local T = require "kb.testing"

local N = 5000
local sim = kb.sim.start { profile = "fast" }
local base = sim.url .. "/api/v1/namespaces/default/configmaps"

local function slices()
  local text = kb.http.get(sim.url .. "/metrics").body
  return tonumber(text:match("\nkbrun_sim_k8s_list_slices_total (%d+)"))
end

T.case("5,000 configmaps", function()
  local pool = kb.pool(16)
  for i = 1, N do
    pool:spawn(function()
      local r = kb.http.post(base, { apiVersion = "v1", kind = "ConfigMap",
        metadata = { name = string.format("cm-%05d", i) }, data = { k = string.rep("v", 200) } })
      assert(r.status == 201, r.body)
    end)
  end
  pool:wait()
end)

T.case("a healthz is answered between the slices of a large list", function()
  local s0 = slices()
  local s <close> = kb.http.stream { url = base, timeout = 3000 }
  T.eq(s.status, 200)
  T.eq(s.headers["content-type"], "application/json")
  local got, ended = {}, false
  local reader = kb.spawn(function()
    for piece in s.read, s do got[#got + 1] = piece end
    ended = true
  end)
  local hz = kb.http.get(sim.url .. "/healthz")
  T.eq(hz.status, 200)
  T.eq(hz.body, "ok")
  local at_healthz = slices()
  T.ok(not ended, "healthz answered before the list ended")
  reader:wait()
  T.eq(s.state, "ended")
  local total = slices()
  -- 5,000 objects: 10 slices of 500 (no selector: nothing to match first)
  T.eq(total - s0, 10, "loop turns the list took")
  T.ok(at_healthz - s0 < 10, "healthz answered after " .. (at_healthz - s0) .. " of 10 slices")
  local list = kb.json.decode(table.concat(got))
  T.eq(list.kind, "ConfigMapList")
  T.eq(#list.items, N)
  -- the same items, in order, as pages of 1,000 give them
  local names, cont = {}, nil
  repeat
    local page = kb.json.decode(kb.http.get(base .. "?limit=1000" .. (cont and ("&continue=" .. cont) or "")).body)
    for _, it in ipairs(page.items) do names[#names + 1] = it.metadata.name end
    cont = page.metadata.continue
  until not cont
  T.eq(#names, N)
  for i = 1, N do
    if list.items[i].metadata.name ~= names[i] then T.eq(list.items[i].metadata.name, names[i], "item " .. i) end
  end
end)

T.case("a selector is matched in slices too", function()
  local s0 = slices()
  local r = kb.http.get(base .. "?fieldSelector=metadata.name%3Dcm-04999")
  T.eq(r.status, 200)
  local list = kb.json.decode(r.body)
  T.eq(#list.items, 1)
  T.eq(list.items[1].metadata.name, "cm-04999")
  -- the first 500 matched as the request arrives, 9 turns for the rest, 1 to write
  T.eq(slices() - s0, 10, "loop turns the list took")
end)

T.run()
sim:stop()
