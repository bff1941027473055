--- bench/http/kbrun_load.lua: closed-loop HTTP GET load, kbrun's side of the
-- wrk comparison in bench/http/run.sh. `connections` tasks each loop on
-- kb.http.get for `duration` seconds; prints one summary line:
--
--   kbrun_load requests=412345 errors=0 seconds=10.00 rps=41234 p50_ms=1.45 p99_ms=3.10
--
--   kbrun bench/http/kbrun_load.lua url=http://127.0.0.1:8080/small.json connections=64 duration=10
local kb = require "kb"

return {
  name = "http_load",
  params = {
    url = "http://127.0.0.1:8080/small.json",
    connections = 64, -- concurrent tasks (one keep-alive connection each)
    duration = 10,    -- seconds
  },

  run = function(p)
    local hist = kb.hist.new()
    local get = kb.http.get
    local stop = kb.now() + p.duration
    local requests, errors = 0, 0

    local function worker()
      local now = kb.now
      while true do
        local t0 = now()
        if t0 >= stop then return end
        local ok, res = pcall(get, p.url)
        local t1 = now()
        if ok and res.status == 200 then
          hist:record(t1 - t0)
          requests = requests + 1
        else
          errors = errors + 1
          if errors == 1 then io.stderr:write("first error: ", tostring(ok and res.status or res), "\n") end
        end
      end
    end

    local started = kb.now()
    local tasks = {}
    for i = 1, p.connections do tasks[i] = kb.spawn(worker) end
    kb.all(tasks)
    local seconds = kb.now() - started

    local s = hist:summary()
    local line = string.format("kbrun_load requests=%d errors=%d seconds=%.2f rps=%.0f p50_ms=%.3f p99_ms=%.3f",
      requests, errors, seconds, requests / seconds, (s.p50 or 0) * 1e3, (s.p99 or 0) * 1e3)
    print(line)
    return { requests = requests, errors = errors, seconds = seconds, rps = requests / seconds,
      p50 = s.p50, p99 = s.p99 }
  end,
}
