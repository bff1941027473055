--- http_storm: fire N HTTP GETs with at most C in flight and report the
-- latency distribution. With no `url` it starts its own loopback server, so
-- it runs anywhere; give `url=http://host:port/path` to hit a real endpoint.
-- rate=R spaces the requests: request i is sent (i - 1) / R seconds after
-- the start (open loop; a full pool delays it), else as fast as the pool
-- allows. Sharded (kbrun --shard I/N, kb.shard.items), each shard sends
-- requests I+1, I+1+N, ... at their times in the same schedule, so the
-- shards together send exactly what one unsharded run sends, and
-- `kbrun merge` adds their counts (concurrency is per shard).
--
-- The connection parameters (ca_file, client_cert/client_key, insecure,
-- token_file, cookie_file, header, request_timeout, proxy) are
-- kb.connection's, as in every bundled scenario (docs/security.md
-- "Connection parameters").
--
--   kbrun scenarios/http_storm.lua requests=10000 concurrency=10000
local kb = require "kb"
local connection = require "kb.connection"

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
  params = connection.params {
    url = "",           -- empty: a loopback server started by the scenario
    requests = 10000,   -- total GETs (over all shards)
    concurrency = 10000, -- at most this many in flight
    request_timeout = 30, -- seconds per request
    rate = 0.0,         -- requests per second over all shards (0: as fast as concurrency allows)
  },
  thresholds = { success_rate = 1.0 },

  run = function(p)
    local server = p.url == "" and start_local_server() or nil
    local url = server and (server.url .. "/status") or p.url
    local opts = connection.request_options(p)
    local latency = kb.metrics.histogram("http.get")
    local ok_count = kb.metrics.counter("http.requests", { outcome = "ok" })

    local mine = kb.shard.items(p.requests, "requests") -- this shard's requests
    local pool = kb.pool(p.concurrency)
    local started = kb.now()
    for _, i in ipairs(mine) do
      if p.rate > 0 then -- request i's place in the schedule of all shards
        local wait = started + (i - 1) / p.rate - kb.now()
        if wait > 0 then kb.sleep(wait) end
      end
      pool:spawn(function()
        local ok, res = pcall(kb.http.get, url, opts)
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
    local n, succeeded = #mine, ok_count:value()
    kb.log.info("%d requests in %.2f s (%.0f req/s): p50 %.2f ms, p90 %.2f ms, p99 %.2f ms",
      s.count, elapsed, elapsed > 0 and s.count / elapsed or 0, (s.p50 or 0) * 1e3, (s.p90 or 0) * 1e3,
      (s.p99 or 0) * 1e3)
    -- counts of this shard's requests; kbrun merge adds them, recomputes
    -- success_rate from them and the latency figures from the merged
    -- histogram the table names (metric)
    return {
      requests = n,
      succeeded = succeeded,
      failed = n - succeeded,
      success_rate = n > 0 and succeeded / n or 1,
      requests_per_second = elapsed > 0 and s.count / elapsed or 0,
      elapsed = elapsed,
      latency = { metric = "http.get", p50 = s.p50, p90 = s.p90, p99 = s.p99, max = s.max },
      -- how the endpoint was reached (never a secret; the loopback server's
      -- port differs per shard, so only a given url= is named)
      connection = connection.describe(p, p.url ~= "" and p.url or nil),
    }
  end,
}
