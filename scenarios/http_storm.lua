--- http_storm: fire N HTTP GETs with at most C in flight and report the
-- latency distribution. With no `url` it starts its own loopback server, so
-- it runs anywhere; give `url=http://host:port/path` to hit a real endpoint.
--
--   kbrun scenarios/http_storm.lua requests=10000 concurrency=10000
local kb = require "kb"

local BODY = '{"kind":"Status","apiVersion":"v1","status":"Success","message":"ok"}'

local function start_local_server()
  return kb.httpd.listen {
    host = "127.0.0.1",
    port = 0,
    handler = function()
      return 200, BODY, { ["content-type"] = "application/json" }
    end,
  }
end

return {
  name = "http_storm",
  params = {
    url = "",           -- empty: a loopback server started by the scenario
    requests = 10000,   -- total GETs
    concurrency = 10000, -- at most this many in flight
    timeout = 30,       -- seconds per request
  },
  thresholds = { success_rate = 1.0 },

  run = function(p)
    local server = p.url == "" and start_local_server() or nil
    local url = server and (server.url .. "/status") or p.url
    local latency = kb.metrics.histogram("http.get")
    local ok_count = kb.metrics.counter("http.requests", { outcome = "ok" })

    local pool = kb.pool(p.concurrency)
    local started = kb.now()
    for _ = 1, p.requests do
      pool:spawn(function()
        local ok, res = pcall(kb.http.get, url, { timeout = p.timeout })
        if ok then
          latency:record(res.time.total)
          kb.metrics.counter("http.status", { code = tostring(res.status) }):inc()
          if res.status == 200 then ok_count:inc() end
        else
          kb.metrics.counter("http.errors", { class = type(res) == "table" and res.class or "lua" }):inc()
        end
      end)
    end
    pool:wait()
    local elapsed = kb.now() - started
    if server then server:close() end

    local s = latency:summary()
    kb.log.info("%d requests in %.2f s (%.0f req/s): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms",
      s.count, elapsed, s.count / elapsed, s.p50 * 1e3, s.p90 * 1e3, s.p99 * 1e3)
    return {
      requests = p.requests,
      succeeded = ok_count:value(),
      success_rate = ok_count:value() / p.requests,
      requests_per_second = s.count / elapsed,
      latency = { p50 = s.p50, p90 = s.p90, p99 = s.p99, max = s.max },
    }
  end,
}
