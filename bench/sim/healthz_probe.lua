--- A healthz prober in a process of its own (the bench's client is busy
-- decoding lists, which would count as the server's wait): GET /healthz
-- back to back, one line "end_unix_seconds wait_seconds" per request in
-- `out`, until the file `stop` exists. Started by bench/sim/k8s_view.sh.
--
--   kbrun bench/sim/healthz_probe.lua url=http://127.0.0.1:PORT out=FILE stop=FILE
local kb = require "kb"

return {
  name = "healthz_probe",
  params = { url = "", out = "", stop = "" },
  run = function(p)
    local f = assert(io.open(p.out, "w"))
    f:setvbuf("line")
    local n = 0
    while not kb.fs.exists(p.stop) do
      local t0 = kb.time()
      local r = kb.http.get(p.url .. "/healthz", { timeout = 600 })
      local t1 = kb.time()
      assert(r.status == 200, "healthz: " .. tostring(r.status))
      f:write(string.format("%.6f %.6f\n", t1, t1 - t0))
      n = n + 1
      kb.sleep(0.002)
    end
    f:close()
    return { requests = n }
  end,
}
