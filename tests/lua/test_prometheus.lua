-- kb.prometheus (exposition format, exporter, query client), kb.live (the
-- status line) and kb.kfp.prom_query (the storm's prometheus_url mode)
-- against kb.httpd mocks of Prometheus's API. The exposition is read back
-- with kb.kfp.prom's parser.
local T = require "kb.testing"
local kb = require "kb"
local json = require "kb.json"
local metrics = require "kb.metrics"
local prom = require "kb.kfp.prom"
local prometheus = require "kb.prometheus"
local live = require "kb.live"
local pq = require "kb.kfp.prom_query"

local function fresh()
  metrics.clear()
  for _, name in ipairs({ "storm", "test", "bad", "broken" }) do prometheus.collector(name, nil) end
end

-- The buckets of one histogram series in a parsed scrape, sorted by le.
local function buckets_of(scrape, name, labels)
  local out = {}
  for _, s in pairs(scrape.samples) do
    if s.name == name .. "_bucket" then
      local match = true
      for k, v in pairs(labels or {}) do
        if s.labels[k] ~= v then match = false end
      end
      if match then
        out[#out + 1] = { le = s.labels.le == "+Inf" and math.huge or tonumber(s.labels.le),
          count = s.value }
      end
    end
  end
  table.sort(out, function(a, b) return a.le < b.le end)
  return out
end

local function value(scrape, name, labels)
  local s = scrape.samples[prom.key(name, labels)]
  return s and s.value
end

T.case("names, label names, escaping, numbers", function()
  T.eq(prometheus.metric_name("run.create", "histogram"), "kbrun_run_create_seconds")
  T.eq(prometheus.metric_name("poll.run.get", "histogram"), "kbrun_poll_run_get_seconds")
  T.eq(prometheus.metric_name("k8s.exec-plugin/x", "histogram"), "kbrun_k8s_exec_plugin_x_seconds")
  T.eq(prometheus.metric_name("kfp.errors", "counter"), "kbrun_kfp_errors_total")
  T.eq(prometheus.metric_name("http.requests_total", "counter"), "kbrun_http_requests_total")
  T.eq(prometheus.metric_name("runs.in_flight", "gauge"), "kbrun_runs_in_flight")
  T.eq(prometheus.label_name("a.b"), "a_b")
  T.eq(prometheus.label_name("__x"), "x__x")
  T.eq(prometheus.label_name("le", "histogram"), "exported_le")
  T.eq(prometheus.label_name("le", "counter"), "le")
  T.eq(prometheus.escape('a"b\\c\nd'), 'a\\"b\\\\c\\nd')
  T.eq(prometheus.escape(200.0), "200")
  T.eq(prometheus.number(3), "3")
  T.eq(prometheus.number(2.0), "2")
  T.eq(prometheus.number(0.25), "0.25")
  T.eq(prometheus.number(math.huge), "+Inf")
  T.eq(prometheus.number(-math.huge), "-Inf")
  T.eq(prometheus.number(0 / 0), "NaN")
end)

T.case("HDR to cumulative buckets on the ladder", function()
  local h = require("kb.hist").new()
  for _, v in ipairs({ 0.001, 0.0011, 0.004, 0.3, 400, 5000 }) do h:record(v) end
  local c = prometheus.cumulative(h)
  T.eq(#c, #prometheus.LADDER + 1)
  local by = {}
  for _, b in ipairs(c) do by[b.le] = b.count end
  T.eq(by[0.001], 1, "a value on a bound counts in that bucket")
  T.eq(by[0.0025], 2)
  T.eq(by[0.005], 3)
  T.eq(by[0.25], 3)
  T.eq(by[0.5], 4)
  T.eq(by[300], 4)
  T.eq(by[600], 5)
  T.eq(by[3600], 6, "above the layout's top (3600 s) a value saturates there")
  T.eq(by[math.huge], 6)
  T.eq(#prometheus.cumulative(require("kb.hist").new()), #prometheus.LADDER + 1)
  T.eq(prometheus.cumulative(require("kb.hist").new())[1].count, 0)
end)

T.case("the exposition parses back: kinds, cumulative buckets, sums, escaping", function()
  fresh()
  local h = metrics.histogram("run.create")
  local values = { 0.002, 0.003, 0.02, 0.02, 0.15, 0.9, 2, 45 }
  local total = 0
  for _, v in ipairs(values) do
    h:record(v)
    total = total + v
  end
  metrics.histogram("http.get", { path = "/a" }):record(0.004)
  metrics.histogram("http.get", { path = "/b" }):record(0.5)
  metrics.counter("kfp.errors", { op = "run.get", class = "timeout" }):inc(3)
  metrics.counter("poll.kfp.errors", { op = "run.get", class = "timeout" }):inc(2)
  metrics.counter("k8s.errors", { verb = "get", resource = "pods", class = "connect" }):inc()
  metrics.counter("k8s.requests", { verb = "get" }):inc(7)
  metrics.counter("odd", { note = 'say "hi"\\ \nnow' }):inc()
  metrics.gauge("runs.in_flight"):set(4)
  local text = prometheus.render()
  local scrape = prom.parse(text)
  T.eq(scrape.skipped, 0, "every line parses")
  T.eq(scrape.types.kbrun_run_create_seconds, "histogram")
  T.eq(scrape.types.kbrun_kfp_errors_total, "counter")
  T.eq(scrape.types.kbrun_runs_in_flight, "gauge")
  T.eq(value(scrape, "kbrun_up"), 1)
  T.eq(value(scrape, "kbrun_http_requests_in_flight"), 0)
  T.ok(value(scrape, "kbrun_tasks_live") >= 1, "live tasks")
  T.eq(value(scrape, "kbrun_runs_in_flight"), 4)
  T.eq(value(scrape, "kbrun_k8s_requests_total", { verb = "get" }), 7)
  T.eq(value(scrape, "kbrun_errors_total", { class = "timeout" }), 5, "errors by class over *errors counters")
  T.eq(value(scrape, "kbrun_errors_total", { class = "connect" }), 1)
  T.eq(value(scrape, "kbrun_odd_total", { note = 'say "hi"\\ \nnow' }), 1, "escaped label round-trips")
  T.contains(text, 'note="say \\"hi\\"\\\\ \\nnow"')
  -- buckets: cumulative, monotone, +Inf = _count
  local b = buckets_of(scrape, "kbrun_run_create_seconds")
  T.eq(#b, #prometheus.LADDER + 1)
  for i = 2, #b do T.ok(b[i].count >= b[i - 1].count, "monotone at le=" .. b[i].le) end
  T.eq(b[#b].le, math.huge)
  T.eq(b[#b].count, #values)
  T.eq(value(scrape, "kbrun_run_create_seconds_count"), #values)
  T.near(value(scrape, "kbrun_run_create_seconds_sum"), total, total * 1e-3, "sum from the HDR mean")
  T.near(prom.quantile(0.5, b), 0.1, 0.1, "median from the buckets, as PromQL estimates it")
  local a = buckets_of(scrape, "kbrun_http_get_seconds", { path = "/a" })
  T.eq(a[#a].count, 1)
  T.eq(buckets_of(scrape, "kbrun_http_get_seconds", { path = "/b" })[#a].count, 1)
  -- one TYPE line per family, its series together
  local _, ntype = text:gsub("# TYPE kbrun_http_get_seconds ", "")
  T.eq(ntype, 1)
  local first = text:find("kbrun_http_get_seconds_bucket{path=\"/a\"", 1, true)
  local second = text:find("kbrun_http_get_seconds_bucket{path=\"/b\"", 1, true)
  local other = text:find("# TYPE", first, true)
  T.ok(first and second and other and second < other, "a family's series are contiguous")
  T.ok(text:sub(-1) == "\n", "ends with a newline")
end)

T.case("conflicting names, collectors and their failures", function()
  fresh()
  metrics.counter("a"):inc()            -- kbrun_a_total, a counter
  metrics.gauge("a_total"):set(5)       -- the same name as a gauge: left out, noted
  prometheus.collector("test", function()
    return { { name = "kbrun_storm_runs", kind = "gauge", help = "runs", labels = { state = "Running" }, value = 3 },
      { name = "kbrun_storm_runs", kind = "gauge", labels = { state = "Succeeded" }, value = 2 } }
  end)
  prometheus.collector("broken", function() error("boom") end)
  prometheus.collector("bad", function() return { { name = "1bad name", kind = "gauge", value = 1 } } end)
  local text = prometheus.render()
  local scrape = prom.parse(text)
  T.eq(scrape.types.kbrun_a_total, "counter")
  T.eq(value(scrape, "kbrun_a_total"), 1)
  T.contains(text, "# kbrun: kbrun_a_total is a counter, a gauge of the same name was left out")
  T.eq(value(scrape, "kbrun_storm_runs", { state = "Running" }), 3)
  T.eq(value(scrape, "kbrun_storm_runs", { state = "Succeeded" }), 2)
  T.contains(text, "# kbrun: collector broken failed:")
  T.contains(text, "boom")
  T.contains(text, "# kbrun: collector bad: bad sample 1bad name")
  prometheus.collector("test", nil)
  T.eq(value(prom.parse(prometheus.render()), "kbrun_storm_runs", { state = "Running" }), nil)
  T.raises(function() prometheus.collector("x", 3) end, "fn must be a function or nil")
  fresh()
end)

T.case("listen addresses", function()
  local host, port = prometheus.parse_listen("127.0.0.1:9464")
  T.eq(host, "127.0.0.1")
  T.eq(port, 9464)
  host, port = prometheus.parse_listen(":0")
  T.eq(host, "127.0.0.1")
  T.eq(port, 0)
  host, port = prometheus.parse_listen("[::1]:80")
  T.eq(host, "::1")
  T.eq(port, 80)
  local none, why = prometheus.parse_listen("localhost")
  T.eq(none, nil)
  T.eq(why, "wants HOST:PORT (e.g. 127.0.0.1:9464), got 'localhost'")
  T.eq(prometheus.parse_listen("127.0.0.1:70000"), nil)
  local err = T.raises(function() prometheus.observe{ metrics_listen = "nope" } end)
  T.eq(tostring(err), "--metrics-listen wants HOST:PORT (e.g. 127.0.0.1:9464), got 'nope'")
end)

T.case("the exporter serves /metrics; a taken port is refused", function()
  fresh()
  metrics.histogram("run.get"):record(0.01)
  local exp = prometheus.start{ host = "127.0.0.1", port = 0 }
  T.ok(exp.port > 0, "a port was picked")
  T.eq(exp.url, "http://127.0.0.1:" .. exp.port .. "/metrics")
  local r = kb.http.get(exp.url)
  T.eq(r.status, 200)
  T.eq(r.headers["content-type"], prometheus.CONTENT_TYPE)
  local scrape = prom.parse(r.body)
  T.eq(value(scrape, "kbrun_run_get_seconds_count"), 1)
  T.eq(value(scrape, "kbrun_http_requests_in_flight"), 1, "the scrape itself is in flight")
  T.eq(exp.scrapes, 1)
  T.eq(kb.http.get((exp.url:gsub("/metrics$", "/other"))).status, 404)
  T.eq(kb.http.post(exp.url, "x").status, 405)
  T.eq(kb.http.get((exp.url:gsub("/metrics$", "/"))).status, 200)
  -- the same port again: the error a user of --metrics-listen sees
  local err = T.raises(function()
    prometheus.observe{ metrics_listen = "127.0.0.1:" .. exp.port }
  end)
  T.contains(tostring(err), "--metrics-listen 127.0.0.1:" .. exp.port .. ": ")
  local obs = prometheus.observe{ metrics_listen = "127.0.0.1:0", tty = false }
  T.ok(obs.exporter and obs.exporter.port > 0, "observe started an exporter")
  T.eq(obs.live, nil, "no status line without a TTY")
  obs:stop()
  exp:stop()
  exp:stop() -- idempotent
  local ok, e = pcall(kb.http.get, exp.url, { timeout = 5 })
  T.eq(ok, false)
  T.eq(e.class, "connect")
  fresh()
end)

-- A mock of Prometheus's HTTP API: answer(req) -> status, body.
local function mock(answer)
  local seen = {}
  local srv = kb.httpd.listen{ handler = function(req)
    local params = {}
    for k, v in req.query:gmatch("([^&=]+)=([^&]*)") do
      params[k] = v:gsub("%%(%x%x)", function(x) return string.char(tonumber(x, 16)) end)
    end
    seen[#seen + 1] = { path = req.path, params = params }
    local status, body = answer(req, params)
    return status, type(body) == "table" and json.encode(body) or body,
      { ["content-type"] = "application/json" }
  end }
  return srv, seen
end

local function vector(list)
  local result = {}
  for i, s in ipairs(list) do result[i] = { metric = s[1], value = { 1700000000.5, s[2] } } end
  return { status = "success", data = { resultType = "vector", result = result } }
end

T.case("query client: vectors, matrices, scalars and the request", function()
  local srv, seen = mock(function(req, p)
    if req.path == "/api/v1/query_range" then
      return 200, { status = "success", data = { resultType = "matrix", result = {
        { metric = { job = "kbrun" }, values = { { 1700000000, "1" }, { 1700000001, "NaN" } } } } } }
    end
    if p.query == "scalar(1)" then
      return 200, { status = "success", data = { resultType = "scalar", result = { 1700000000, "1.5" } } }
    end
    return 200, vector{ { { __name__ = "kbrun_up", job = "kbrun" }, "1" }, { { job = "x" }, "+Inf" } }
  end)
  local v = prometheus.query(srv.url .. "/", "kbrun_up", 1700000000.25)
  T.eq(v.type, "vector")
  T.eq(#v.result, 2)
  T.eq(v.result[1].metric.job, "kbrun")
  T.eq(v.result[1].value, 1)
  T.eq(v.result[1].time, 1700000000.5)
  T.eq(v.result[2].value, math.huge)
  T.eq(seen[1].path, "/api/v1/query")
  T.eq(seen[1].params.query, "kbrun_up")
  T.eq(seen[1].params.time, "1700000000.250")
  local s = prometheus.query(srv.url, "scalar(1)")
  T.eq(s.type, "scalar")
  T.eq(s.value, 1.5)
  T.eq(seen[2].params.time, nil, "no time: the server's now")
  local m = prometheus.query_range(srv.url, "kbrun_up", 1700000000, 1700000060, 15)
  T.eq(m.type, "matrix")
  T.eq(m.result[1].values[1][2], 1)
  T.ok(m.result[1].values[2][2] ~= m.result[1].values[2][2], "NaN stays NaN")
  T.eq(seen[3].path, "/api/v1/query_range")
  T.eq(seen[3].params.start, "1700000000.000")
  T.eq(seen[3].params["end"], "1700000060.000")
  T.eq(seen[3].params.step, "15")
  T.raises(function() prometheus.query(srv.url, "") end, "expr must be a non-empty string")
  T.raises(function() prometheus.query_range(srv.url, "up", 1, 2, 0) end, "step")
  srv:close()
end)

T.case("query client: errors are classified with the message a user sees", function()
  local srv = mock(function(_, p)
    if p.query == "sum(" then
      return 400, { status = "error", errorType = "bad_data", error = "1:5: parse error: unclosed left parenthesis" }
    elseif p.query == "slow" then
      return 503, { status = "error", errorType = "timeout", error = "query timed out in expression evaluation" }
    elseif p.query == "html" then
      return 404, "<html>not found</html>"
    elseif p.query == "nodata" then
      return 200, { status = "success" }
    elseif p.query == "badvalue" then
      return 200, { status = "success", data = { resultType = "vector", result = { { metric = {}, value = { 1, 2 } } } } }
    end
    return 200, vector{}
  end)
  local function err_of(expr)
    local ok, e = pcall(prometheus.query, srv.url, expr)
    T.eq(ok, false, expr .. " fails")
    return e
  end
  local e = err_of("sum(")
  T.eq(e.class, "bad_data")
  T.eq(e.status, 400)
  T.eq(e.message, "kb.prometheus: query 'sum(': bad_data: 1:5: parse error: unclosed left parenthesis")
  T.eq(err_of("slow").class, "timeout")
  e = err_of("html")
  T.eq(e.class, "http")
  T.eq(e.message, "kb.prometheus: query 'html': HTTP 404, not a Prometheus API answer (is "
    .. srv.url .. " a Prometheus server?)")
  e = err_of("nodata")
  T.eq(e.class, "decode")
  T.eq(e.message, "kb.prometheus: query 'nodata': the answer has no data.resultType")
  T.eq(err_of("badvalue").message, "kb.prometheus: query 'badvalue': malformed vector")
  T.eq(#prometheus.query(srv.url, "empty").result, 0)
  local url = srv.url
  srv:close()
  local ok, ce = pcall(prometheus.query, url, "up", nil, { timeout = 5 })
  T.eq(ok, false)
  T.eq(ce.class, "unreachable")
  T.eq(ce.cause, "connect")
  T.contains(ce.message, "kb.prometheus: query 'up': ")
end)

-- A mock Prometheus holding KFP's and the API server's figures.
local function kfp_prometheus()
  return mock(function(_, p)
    local q = p.query
    if q:find("grpc_server_handling_seconds_count", 1, true) then
      return 200, vector{ { { grpc_method = "CreateRunV1", grpc_service = "api.RunService" }, "20" },
        { { grpc_method = "GetRunV1", grpc_service = "api.RunService" }, "100" },
        { { grpc_method = "DeleteRunV1", grpc_service = "api.RunService" }, "0" } }
    elseif q:find("grpc_server_handling_seconds_sum", 1, true) then
      return 200, vector{ { { grpc_method = "CreateRunV1" }, "2" }, { { grpc_method = "GetRunV1" }, "5" } }
    elseif q:find("grpc_server_handled_total", 1, true) then
      return 200, vector{ { { grpc_method = "CreateRunV1", grpc_code = "OK" }, "18" },
        { { grpc_method = "CreateRunV1", grpc_code = "Unavailable" }, "2" } }
    elseif q:find("histogram_quantile", 1, true) and q:find("grpc", 1, true) then
      local v = ({ ["0.5"] = "0.08", ["0.9"] = "0.2", ["0.99"] = "0.45" })[q:match("histogram_quantile%(([%d.]+)")]
      return 200, vector{ { { grpc_method = "CreateRunV1" }, v }, { { grpc_method = "GetRunV1" }, "NaN" } }
    elseif q:find("apiserver_request_duration_seconds_count", 1, true) then
      return 200, vector{ { { verb = "GET", resource = "pods" }, "50" }, { { verb = "LIST", resource = "workflows" }, "5" },
        { { verb = "WATCH", resource = "nodes" }, "0" } }
    elseif q:find("apiserver", 1, true) then
      return 200, vector{ { { verb = "GET", resource = "pods" }, "0.01" }, { { verb = "LIST", resource = "workflows" }, "0.3" } }
    end
    return 400, { status = "error", errorType = "bad_data", error = "unexpected " .. q }
  end)
end

T.case("prom_query: KFP's and the API server's figures of a window", function()
  fresh()
  local srv, seen = kfp_prometheus()
  local f = pq.figures(srv.url, 1700000000, 1700000090.2)
  T.eq(f.available, true)
  T.eq(f.source, "prometheus")
  T.eq(f.window.range, "151s", "the window plus the margin before it (the scrape before the first calls)")
  for _, s in ipairs(seen) do
    T.eq(s.params.time, "1700000090.200", "every query at the window's end")
    if s.params.query:find("grpc_server_handling_seconds_count", 1, true) then
      T.eq(s.params.query, "sum by (grpc_method, grpc_service) (increase(grpc_server_handling_seconds_count[151s]))")
    end
  end
  T.contains(pq.expressions("91s").grpc_p99,
    "histogram_quantile(0.99, sum by (le, grpc_method) (rate(grpc_server_handling_seconds_bucket[91s])))")
  local c = f.grpc["run.create"]
  T.eq(c.method, "CreateRunV1")
  T.eq(c.count, 20)
  T.eq(c.mean, 0.1)
  T.eq(c.p50, 0.08)
  T.eq(c.p90, 0.2)
  T.eq(c.p99, 0.45)
  T.eq(c.errors, 2)
  T.eq(c.codes.Unavailable, 2)
  T.eq(f.grpc["run.get"].count, 100)
  T.eq(f.grpc["run.get"].p50, nil, "NaN quantiles are left out")
  T.eq(f.grpc["run.delete"], nil, "no calls, no row")
  T.eq(#f.apiserver, 2)
  T.eq(f.apiserver[1].verb, "GET")
  T.eq(f.apiserver[1].count, 50)
  T.eq(f.apiserver[1].p99, 0.01)
  T.eq(f.apiserver[2].resource, "workflows")
  -- next to the client side, in the storm's result and report
  metrics.histogram("run.create"):record(0.012)
  local report = require "kb.kfp.storm_report"
  local rows = report.server_vs_client(f)
  T.eq(rows[1].op, "run.create")
  T.eq(rows[1].client.count, 1)
  T.eq(rows[1].server.p99, 0.45)
  local sec = pq.report_section{ server_metrics = f, server_vs_client = rows }
  T.eq(sec.title, "Server-side vs client-side (Prometheus)")
  T.contains(sec.html, "<td>CreateRunV1</td><td>20</td><td>80.0 ms</td><td>200.0 ms</td><td>450.0 ms</td><td>2</td>")
  T.contains(sec.html, "<td>GET</td><td>pods</td><td>50</td>")
  local storm_sec = report.report{ result = { server_metrics = f, server_vs_client = rows } }
  local found = false
  for _, s in ipairs(storm_sec.sections) do
    if s.title == sec.title then found = true end
  end
  T.ok(found, "storm.report uses the Prometheus section")
  srv:close()
  fresh()
end)

T.case("prom_query: an unreachable Prometheus is noted, not fatal", function()
  local srv = kb.httpd.listen{ handler = function() return 200, "" end }
  local url = srv.url
  srv:close()
  local f = pq.figures(url, 100, 160)
  T.eq(f.available, false)
  T.contains(f.reason, "kb.prometheus: query 'sum by (grpc_method, grpc_service) (increase(grpc_server_handling_seconds_count[120s]))': ")
  T.contains(f.reason, "(unreachable)")
  local sec = pq.report_section{ server_metrics = f }
  T.contains(sec.html, "No server metrics from Prometheus: kb.prometheus: query")
end)

T.case("prom_query.publish: runs by state and progress", function()
  fresh()
  local s = { runs = {
    { create_error = "boom" }, {}, { id = "a", state = "Running" }, { id = "b", state = "Succeeded", finished = true },
    { id = "c", state = "Succeeded", finished = true }, { id = "d", state = "Running", timed_out = true } },
    progress = { tty = true } }
  live.progress(nil)
  pq.publish(s)
  local scrape = prom.parse(prometheus.render())
  T.eq(value(scrape, "kbrun_storm_runs", { state = "NotCreated" }), 1)
  T.eq(value(scrape, "kbrun_storm_runs", { state = "Creating" }), 1)
  T.eq(value(scrape, "kbrun_storm_runs", { state = "Running" }), 1)
  T.eq(value(scrape, "kbrun_storm_runs", { state = "Succeeded" }), 2)
  T.eq(value(scrape, "kbrun_storm_runs", { state = "TimedOut" }), 1)
  T.eq(value(scrape, "kbrun_storm_runs_requested"), 6)
  T.eq(s.progress.tty, true, "no live line running: the storm's own line stays")
  fresh()
end)

T.case("live: recent p99 and the status line", function()
  local before = { { low = 0.001, high = 0.0011, count = 5 }, { low = 0.01, high = 0.011, count = 1 } }
  local after = { { low = 0.001, high = 0.0011, count = 5 }, { low = 0.01, high = 0.011, count = 2 },
    { low = 0.2, high = 0.21, count = 1 } }
  T.eq(live.recent_quantile(0.99, before, after), 0.21, "only what was added counts")
  T.eq(live.recent_quantile(0.5, before, after), 0.011)
  T.eq(live.recent_quantile(0.99, after, after), nil)
  T.eq(live.recent_quantile(0.99, nil, before), 0.011)
  local line = live.line({ progress = { done = 12, total = 50, noun = "runs" }, in_flight = 8,
    busiest = { name = "run.create", p99 = 0.134, rate = 31 }, errors = { connect = 2, timeout = 0 },
    elapsed = 14.2 }, 200)
  T.eq(line, "kbrun | runs 12/50 | in flight 8 | run.create p99 134 ms (31/s) | errors 2 (connect 2) | 14 s")
  T.eq(live.line({ in_flight = 0, elapsed = 0 }), "kbrun | in flight 0 | errors 0 | 0 s")
  T.eq(live.line({ progress = { done = 40, total = 600, noun = "runs" }, load = { rate = 2, running = 35, dropped = 3 },
    in_flight = 2, elapsed = 61 }, 200), "kbrun | runs 40/600 | rate 2.0/s | running 35 | dropped 3 | in flight 2 | errors 0 | 61 s")
  local cut = live.line({ in_flight = 0, elapsed = 0, busiest = { name = string.rep("x", 200), p99 = 2 } }, 40)
  T.eq(#cut, 39)
  T.eq(cut:sub(-1), "~")
end)

T.case("live: a storm's current arrival rate, running and dropped from its storm.* metrics", function()
  fresh()
  local sim <close> = kb.sim.start { profile = "fast" } -- the events clock: kb.now() exact
  local out = { write = function() end, flush = function() end }
  local l = live.start{ interval = 60, out = out, width = 200 }
  T.eq(l:load(), nil, "no storm: nothing shown")
  local started, dropped = metrics.counter("storm.arrivals.started"), metrics.counter("storm.arrivals.dropped")
  local running = metrics.gauge("storm.in_flight")
  started:inc(10)
  running:set(7)
  local first = l:load()
  T.eq(first.running, 7)
  T.eq(first.dropped, 0)
  T.eq(first.rate, nil, "no rate before a second look")
  kb.sleep(0.5)
  started:inc(3)
  dropped:inc(2)
  local second = l:load()
  T.eq(second.rate, 10, "5 arrivals in 0.5 s of the scenario clock")
  T.eq(second.dropped, 2)
  T.eq(l:load().rate, 10, "no time passed: the last rate stays")
  l:stop()
  fresh()
end)

T.case("live: draws on its output while running, clears it when stopped", function()
  fresh()
  local writes = {}
  local out = { write = function(_, ...) for _, s in ipairs({ ... }) do writes[#writes + 1] = s end end,
    flush = function() end }
  live.progress(function() return 3, 4, "runs" end)
  metrics.counter("kfp.errors", { class = "connect", op = "run.get" }):inc()
  local h = metrics.histogram("run.get")
  local l = live.start{ interval = 0.05, out = out, width = 200 }
  T.ok(live.running(), "running")
  for _ = 1, 10 do
    h:record(0.02)
    kb.sleep(0.02)
  end
  l:stop()
  l:stop()
  T.ok(not live.running(), "stopped")
  local text = table.concat(writes)
  T.contains(text, "kbrun | runs 3/4 | in flight 0 | run.get p99 20 ms")
  T.contains(text, "errors 1 (connect 1)")
  T.eq(writes[#writes], "\r\27[K", "the line is cleared at the end")
  live.progress(nil)
  fresh()
end)

T.run()
