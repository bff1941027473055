-- kb.http: the HTTP client, against kb.httpd loopback servers.
local kb = require "kb"
local T = require "kb.testing"
local http = require "kb.http"
local httpd = require "kb.httpd"
local json = require "kb.json"

-- Runs fn(srv) against a server with `handler`, closing it afterwards even
-- if fn fails.
local function with_server(handler, fn)
  local srv = httpd.listen { handler = handler }
  local ok, err = pcall(fn, srv)
  srv:close()
  if not ok then error(err, 0) end
end

-- A handler that answers with what it received, as JSON.
local function echo(req)
  return 200, json.encode {
    method = req.method, path = req.path, query = req.query,
    headers = req.headers, body = req.body,
  }, { ["Content-Type"] = "application/json" }
end

-- A port nothing listens on (a server's, after it closed).
local function closed_port()
  local srv = httpd.listen { handler = function() return 204 end }
  local port = srv.port
  srv:close()
  return port
end

T.case("GET: status, body, headers, version and timings", function()
  with_server(function(req)
    return 200, "hello", { ["Content-Type"] = "text/plain", ["X-Answer"] = 42 }
  end, function(srv)
    local r = http.get(srv.url .. "/x")
    T.eq(r.status, 200)
    T.eq(r.body, "hello")
    T.eq(r.headers["content-type"], "text/plain")
    T.eq(r.headers["x-answer"], "42")
    T.eq(r.headers["X-Answer"], nil)
    T.eq(r.version, "1.1")
    for _, k in ipairs { "dns", "connect", "tls", "ttfb", "total" } do
      T.eq(type(r.time[k]), "number", "time." .. k)
      T.ok(r.time[k] >= 0, "time." .. k .. " >= 0")
    end
    T.ok(r.time.ttfb > 0 and r.time.ttfb <= r.time.total, "0 < ttfb <= total")
    T.eq(r.time.tls, 0)
    T.eq(r.redirects, nil)
  end)
end)

T.case("a response's headers and time are built when read, and look as if they always were", function()
  with_server(function()
    return 200, "ok", { ["X-A"] = "1", ["Set-Cookie"] = "c=1" }
  end, function(srv)
    -- pairs sees every field, built before the traversal starts
    local r = http.get(srv.url .. "/p")
    local keys = {}
    for k, v in pairs(r) do
      T.eq(type(k), "string", "no private key shows")
      keys[#keys + 1] = k
      if k == "headers" then T.eq(v["x-a"], "1") end
      if k == "time" then T.ok(v.total > 0 and v.ttfb <= v.total, "time table in pairs") end
    end
    table.sort(keys)
    T.eq(table.concat(keys, ","), "body,headers,status,time,version")
    -- read once, the same table every time; a script's own change stands
    local r2 = http.get(srv.url .. "/q")
    local h = r2.headers
    T.eq(r2.headers, h)
    T.eq(h["set-cookie"][1], "c=1")
    r2.headers = nil
    T.eq(r2.headers, nil, "a removed field is not rebuilt")
    T.eq(type(r2.time), "table")
    r2.time = "mine"
    T.eq(r2.time, "mine")
    local n = 0
    for _ in pairs(r2) do n = n + 1 end
    T.eq(n, 4, "status, body, version, time (headers removed)")
    -- assigned before it was ever read: the script's value wins
    local r3 = http.get(srv.url .. "/r")
    r3.time = 7
    T.eq(r3.time, 7)
    T.eq(r3.headers["x-a"], "1")
    T.eq(r3.other, nil)
    T.eq(r3[1], nil)
    local r4 = http.get(srv.url .. "/s")
    r4.time = 8
    for k, v in pairs(r4) do
      if k == "time" then T.eq(v, 8, "pairs keeps the script's value") end
    end
    T.eq(r4.time, 8)
    T.eq(r4.headers["x-a"], "1")
  end)
end)

T.case("HTTP error statuses are returned, not raised", function()
  with_server(function(req)
    return tonumber(req.path:sub(2)), "status " .. req.path:sub(2)
  end, function(srv)
    for _, code in ipairs { 400, 404, 429, 500, 503 } do
      local r = http.get(srv.url .. "/" .. code)
      T.eq(r.status, code)
      T.eq(r.body, "status " .. code)
    end
  end)
end)

T.case("request headers: strings, numbers, repeated values", function()
  with_server(echo, function(srv)
    local r = http.get(srv.url .. "/h", { headers = {
      ["X-Text"] = "a b", ["X-Num"] = 7, ["X-Many"] = { "one", "two" },
      ["Authorization"] = "Bearer abc", ["X-Empty"] = "",
    } })
    local seen = json.decode(r.body).headers
    T.eq(seen["x-text"], "a b")
    T.eq(seen["x-num"], "7")
    T.eq(seen["x-many"], "one, two")
    T.eq(seen["authorization"], "Bearer abc")
    T.eq(seen["x-empty"], "")
    T.contains(seen["user-agent"], "kbrun/")
    T.eq(seen["expect"], nil)
  end)
end)

T.case("response headers: lower-case, repeated joined, set-cookie a list", function()
  with_server(function(req)
    local cookies = req.path == "/one" and "only=1" or { "a=1; Path=/", "b=2" }
    return 200, "", { ["Set-Cookie"] = cookies, ["X-Dup"] = { "one", "two" }, ["X-Mixed-Case"] = "v" }
  end, function(srv)
    local r = http.get(srv.url .. "/two")
    T.same(r.headers["set-cookie"], { "a=1; Path=/", "b=2" })
    T.eq(r.headers["x-dup"], "one, two")
    T.eq(r.headers["x-mixed-case"], "v")
    r = http.get(srv.url .. "/one")
    T.same(r.headers["set-cookie"], { "only=1" })
  end)
end)

T.case("bodies: large and binary both ways, JSON tables, no default content-type", function()
  with_server(function(req)
    if req.path == "/echo" then return echo(req) end
    return 200, req.body, { ["X-Type"] = req.headers["content-type"] or "-" }
  end, function(srv)
    local bytes = {}
    for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
    local big = string.rep(table.concat(bytes), 8 * 1024) -- 2 MiB, every byte value
    local r = http.post(srv.url .. "/raw", big)
    T.eq(r.status, 200)
    T.eq(#r.body, #big)
    T.ok(r.body == big, "the 2 MiB binary body came back unchanged")
    T.eq(r.headers["x-type"], "-")

    r = http.put(srv.url .. "/raw", "plain", { headers = { ["Content-Type"] = "text/x-mine" } })
    T.eq(r.headers["x-type"], "text/x-mine")

    r = http.post(srv.url .. "/echo", { name = "kb", list = { 1, 2, 3 }, nested = { ok = true } })
    local seen = json.decode(r.body)
    T.eq(seen.headers["content-type"], "application/json")
    T.same(json.decode(seen.body), { name = "kb", list = { 1, 2, 3 }, nested = { ok = true } })

    r = http.request { method = "PATCH", url = srv.url .. "/echo", body = { a = 1 },
      headers = { ["content-type"] = "application/merge-patch+json" } }
    T.eq(json.decode(r.body).headers["content-type"], "application/merge-patch+json")
  end)
end)

T.case("query tables are percent-encoded, sorted and appended", function()
  with_server(echo, function(srv)
    local r = http.get(srv.url .. "/q", { query = {
      z = "last", a = { "1", "2" }, sp = "a b&c=d", u = "é/~", n = 3, f = 1.5, b = true,
    } })
    T.eq(json.decode(r.body).query, "a=1&a=2&b=true&f=1.5&n=3&sp=a%20b%26c%3Dd&u=%C3%A9%2F~&z=last")
    r = http.get(srv.url .. "/q?fixed=1", { query = { x = "y" } })
    T.eq(json.decode(r.body).query, "fixed=1&x=y")
    r = http.get(srv.url .. "/q?", { query = { x = "y" } })
    T.eq(json.decode(r.body).query, "x=y")
  end)
end)

T.case("methods", function()
  with_server(echo, function(srv)
    local u = srv.url .. "/m"
    T.eq(json.decode(http.get(u).body).method, "GET")
    T.eq(json.decode(http.post(u, "x").body).method, "POST")
    T.eq(json.decode(http.put(u, "x").body).method, "PUT")
    T.eq(json.decode(http.patch(u, "x").body).method, "PATCH")
    T.eq(json.decode(http.delete(u).body).method, "DELETE")
    T.eq(json.decode(http.request { method = "OPTIONS", url = u }.body).method, "OPTIONS")
    local seen = json.decode(http.post(u, nil).body)
    T.eq(seen.headers["content-length"], "0")
    local r = http.head(u)
    T.eq(r.status, 200)
    T.eq(r.body, "")
    T.eq(r.headers["content-type"], "application/json")
    -- The handle that served the HEAD serves a GET with a body again.
    T.eq(json.decode(http.get(u).body).method, "GET")
  end)
end)

T.case("multipart upload, from memory and from a file", function()
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write("file\0bytes\r\n")
  f:close()
  with_server(function(req)
    local parts = httpd.parse_multipart(req.headers["content-type"], req.body)
    local out = {}
    for i, p in ipairs(parts) do
      out[i] = { name = p.name, filename = p.filename or json.null,
        content_type = p.content_type or json.null, data = p.data }
    end
    return 200, json.encode(out)
  end, function(srv)
    local r = http.post(srv.url .. "/up", nil, { multipart = {
      { name = "title", data = "hello" },
      { name = "blob", data = "a\0b", filename = "x.bin", content_type = "application/x-test" },
      { name = "doc", file = path, content_type = "text/plain" },
      { name = "renamed", file = path, filename = "report.txt" },
    } })
    T.eq(r.status, 200)
    local parts = json.decode(r.body)
    T.eq(#parts, 4)
    T.eq(parts[1].name, "title")
    T.eq(parts[1].data, "hello")
    T.eq(parts[1].filename, json.null)
    T.eq(parts[2].filename, "x.bin")
    T.eq(parts[2].content_type, "application/x-test")
    T.eq(parts[2].data, "a\0b")
    T.eq(parts[3].filename, path:match("[^/]+$"))
    T.eq(parts[3].content_type, "text/plain")
    T.eq(parts[3].data, "file\0bytes\r\n")
    T.eq(parts[4].filename, "report.txt")
  end)
  os.remove(path)
end)

T.case("redirects: off by default, followed on request, bounded", function()
  with_server(function(req)
    local n = tonumber(req.path:match("^/r/(%d+)$"))
    if n and n > 0 then return 302, "moved", { Location = "/r/" .. (n - 1) } end
    return 200, "landed"
  end, function(srv)
    local r = http.get(srv.url .. "/r/2")
    T.eq(r.status, 302)
    T.eq(r.headers.location, "/r/1")
    T.eq(r.body, "moved")
    r = http.get(srv.url .. "/r/2", { follow_redirects = true })
    T.eq(r.status, 200)
    T.eq(r.body, "landed")
    T.eq(r.redirects, 2)
    T.eq(r.url, srv.url .. "/r/0")
    local err = T.raises(function()
      http.get(srv.url .. "/r/5", { follow_redirects = true, max_redirects = 2 })
    end)
    T.eq(err.class, "too_many_redirects")
    T.contains(err.message, "Maximum (2) redirects followed")
    T.contains(err.message, "raise max_redirects or look for a redirect loop")
  end)
end)

T.case("timeout: class, URL, hint; the clock is the scenario clock", function()
  with_server(function(req)
    kb.sleep(5)
    return 200, "late"
  end, function(srv)
    local t0 = kb.now()
    local err = T.raises(function() http.get(srv.url .. "/slow", { timeout = 0.2 }) end)
    local waited = kb.now() - t0
    T.eq(err.class, "timeout")
    T.eq(err.url, srv.url .. "/slow")
    T.eq(err.method, "GET")
    T.eq(err.curl_code, 28)
    T.contains(err.message, "GET " .. srv.url .. "/slow: Operation timed out after")
    T.contains(err.message, "raise timeout/connect_timeout")
    T.ok(waited >= 0.19, "waited for the timeout")
    T.contains(tostring(err), "timeout: GET ")
  end)
end)

T.case("connection refused names host:port and suggests a check", function()
  local port = closed_port()
  local url = "http://127.0.0.1:" .. port .. "/x"
  local err = T.raises(function() http.get(url) end)
  T.eq(err.class, "connect")
  T.eq(err.url, url)
  T.eq(err.curl_code, 7)
  T.contains(err.message, "127.0.0.1:" .. port)
  T.contains(err.message, "is the server running and listening on 127.0.0.1:" .. port .. "?")
  T.eq(err.hint, "is the server running and listening on 127.0.0.1:" .. port .. "?")
end)

T.case("credentials never appear in errors", function()
  local port = closed_port()
  local err = T.raises(function()
    http.get("http://admin:hunter2@127.0.0.1:" .. port .. "/x?token=s3cret&page=2")
  end)
  T.eq(err.url, "http://[REDACTED]@127.0.0.1:" .. port .. "/x?token=[REDACTED]&page=2")
  T.ok(not tostring(err):find("hunter2", 1, true), "no password in the message")
  T.ok(not tostring(err):find("s3cret", 1, true), "no token in the message")
end)

T.case("reset: connection reset, and a response cut short", function()
  with_server(function(req)
    if req.path == "/partial" then
      return { reset = true, partial = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc" }
    end
    return { reset = true }
  end, function(srv)
    local err = T.raises(function() http.get(srv.url .. "/reset") end)
    T.eq(err.class, "reset")
    T.contains(err.message, "closed the connection before a complete response")
    err = T.raises(function() http.get(srv.url .. "/partial") end)
    T.eq(err.class, "reset")
  end)
end)

T.case("TLS errors: https to a plain HTTP port, missing CA file", function()
  with_server(echo, function(srv)
    local url = "https://127.0.0.1:" .. srv.port .. "/"
    local err = T.raises(function() http.get(url) end)
    T.eq(err.class, "tls")
    T.contains(err.message, "give the server's CA with ca_file=")
    T.contains(err.message, "or insecure=true for testing")
    err = T.raises(function() http.get(url, { ca_file = "/nonexistent/ca.pem" }) end)
    T.eq(err.class, "tls")
  end)
end)

T.case("DNS error for a name that never resolves", function()
  local err = T.raises(function() http.get("http://nonexistent.invalid/") end)
  T.eq(err.class, "dns")
  T.contains(err.message, "nonexistent.invalid")
  T.contains(err.message, "check the host name")
end)

T.case("protocol error: HTTP/2 prior knowledge to an HTTP/1.1 server", function()
  with_server(echo, function(srv)
    local err = T.raises(function() http.get(srv.url .. "/", { http2 = "prior-knowledge" }) end)
    T.ok(err.class == "protocol" or err.class == "reset", "class " .. tostring(err.class))
    -- http2 = true over cleartext stays HTTP/1.1.
    T.eq(http.get(srv.url .. "/", { http2 = true }).version, "1.1")
  end)
end)

T.case("compressed asks for encoded bodies", function()
  with_server(echo, function(srv)
    local seen = json.decode(http.get(srv.url .. "/", { compressed = true }).body)
    T.contains(seen.headers["accept-encoding"], "gzip")
    seen = json.decode(http.get(srv.url .. "/").body)
    T.eq(seen.headers["accept-encoding"], nil)
  end)
end)

T.case("bad arguments", function()
  local u = "http://127.0.0.1:1/"
  T.raises(function() http.get(u, { timout = 1 }) end, "kb.http: unknown option 'timout'")
  T.raises(function() http.get(u, { timeout = -1 }) end, "option 'timeout' must be >= 0 seconds")
  T.raises(function() http.get(u, { timeout = "soon" }) end, "option 'timeout' must be a number")
  T.raises(function() http.get(u, { headers = { ["Bad Name"] = "x" } }) end,
    "kb.http: invalid header name 'Bad Name'")
  T.raises(function() http.get(u, { headers = { X = "a\r\nInjected: 1" } }) end,
    "header 'X' contains a line break")
  T.raises(function() http.get(u, { headers = { X = true } }) end,
    "header 'X' must be a string, a number or a list of them, got boolean")
  T.raises(function() http.get(u, { query = { q = {} , r = print } }) end,
    "query parameter 'r' must be a string, number, boolean")
  T.raises(function() http.post(u, print) end, "body must be a string or a table (sent as JSON), got function")
  T.raises(function() http.post(u, "x", { multipart = { { name = "a", data = "b" } } }) end,
    "body and multipart cannot be used together")
  T.raises(function() http.post(u, nil, { multipart = { { name = "a" } } }) end,
    "multipart part 1 needs exactly one of data= and file=")
  T.raises(function() http.post(u, nil, { multipart = { { data = "a" } } }) end,
    "multipart part 1 needs a name")
  T.raises(function() http.post(u, nil, { multipart = { { name = "a", data = "b", size = 1 } } }) end,
    "multipart part 1: unknown field 'size'")
  local err = T.raises(function()
    http.post(u, nil, { multipart = { { name = "a", file = "/nonexistent/upload.bin" } } })
  end, "kb.http: multipart part 1: cannot read file '/nonexistent/upload.bin': No such file or directory")
  T.eq(err.class, "io")
  T.raises(function() http.request { method = "GE T", url = u } end, "kb.http: invalid method 'GE T'")
  T.raises(function() http.request { method = "GET" } end, "kb.http: a url is needed")
  T.raises(function() http.get(u, { http2 = "yes" }) end,
    "option 'http2' must be true, false or \"prior-knowledge\"")
  T.raises(function() http.get(u, { max_redirects = -1 }) end, "'max_redirects' must be an integer >= 0")
  T.raises(function() http.client { max_conections = 1 } end, "kb.http.client: unknown option 'max_conections'")
  err = T.raises(function() http.get("ftp://127.0.0.1/x") end, "only http:// and https:// URLs are supported")
  T.eq(err.class, "other")
end)

T.case("cancelling the task aborts its request", function()
  local handler_started = false
  with_server(function(req)
    handler_started = true
    kb.sleep(10)
    return 200, "late"
  end, function(srv)
    local task = kb.spawn(function() return http.get(srv.url .. "/slow") end)
    local deadline = kb.now() + 5
    while not handler_started and kb.now() < deadline do kb.sleep(0.01) end
    T.ok(handler_started, "the request reached the server")
    T.eq(http.active(), 1)
    task:cancel()
    local ok, err = pcall(task.wait, task)
    T.ok(not ok and kb.is_cancelled(err), "the task raised kb.cancelled")
    T.eq(http.active(), 0)
    -- kb.timeout cancels the same way.
    err = T.raises(function() kb.timeout(0.1, http.get, srv.url .. "/slow") end)
    T.eq(err.class, "timeout")
    T.eq(http.active(), 0)
  end)
end)

T.case("own clients: connection limit, close", function()
  local remotes, running, peak = {}, 0, 0
  with_server(function(req)
    remotes[req.remote] = true
    running = running + 1
    if running > peak then peak = running end
    kb.sleep(0.01)
    running = running - 1
    return 200, "ok"
  end, function(srv)
    local c = http.client { max_connections = 2 }
    local tasks = {}
    for i = 1, 20 do tasks[i] = kb.spawn(function() return c:get(srv.url .. "/").status end) end
    T.eq(c:active(), 0) -- the tasks have not started yet
    local statuses = kb.all(tasks)
    for i = 1, 20 do T.eq(statuses[i], 200) end
    local n = 0
    for _ in pairs(remotes) do n = n + 1 end
    T.ok(n <= 2, "at most 2 connections (saw " .. n .. ")")
    T.ok(peak <= 2, "at most 2 requests at once (saw " .. peak .. ")")
    T.eq(c:request { url = srv.url .. "/", method = "POST", body = "x" }.status, 200)

    local slow = kb.spawn(function() return c:get(srv.url .. "/") end)
    kb.sleep(0) -- let it start
    T.eq(c:active(), 1)
    T.raises(function() c:close() end, "cannot close a client with requests in flight")
    slow:wait()
    c:close()
    T.contains(tostring(c), "closed")
    T.raises(function() c:get(srv.url .. "/") end, "kb.http: the client is closed")
    c:close() -- twice is harmless

    local kept
    do
      local scoped <close> = http.client()
      kept = scoped
      T.eq(scoped:get(srv.url .. "/").status, 200)
    end
    T.contains(tostring(kept), "closed")
  end)
end)

-- ---- streams ------------------------------------------------------------------

T.case("stream: chunks arrive one by one, before the body ends", function()
  -- The server sends each chunk after the first only once the client has
  -- read the one before (a gate, not a delay): the order of events is the
  -- property, whatever the machine's load.
  local gate = kb.semaphore(0)
  local HOLD = 0.05 -- the client holds the body this long (a lower bound below)
  local function after_gate(text) return function() gate:acquire() return text end end
  with_server(function(req)
    return { chunks = { "one", after_gate("two"), after_gate("three") },
             headers = { ["X-Kind"] = "s" } }
  end, function(srv)
    local s <close> = http.stream { url = srv.url .. "/s", timeout = 30 }
    T.eq(s.status, 200)
    T.eq(s.version, "1.1")
    T.eq(s.headers["x-kind"], "s")
    T.eq(s.headers["transfer-encoding"], "chunked")
    T.eq(s.state, "open")
    T.eq(s.time.total, nil, "no total before the end")
    T.ok(s.time.ttfb > 0, "ttfb")
    local first = s:read()
    T.eq(first, "one")
    T.eq(s.state, "open", "the first chunk came before the rest was sent")
    kb.sleep(HOLD)
    local reads = { first }
    for _ = 1, 2 do
      gate:release()
      reads[#reads + 1] = s:read()
      T.eq(s.state, "open")
    end
    T.same(reads, { "one", "two", "three" }, "one read per chunk")
    T.eq(s:read(), nil)
    T.eq(s.state, "ended")
    T.ok(s.time.total >= s.time.ttfb + HOLD * 0.9, "total counts the body (" ..
      s.time.total .. " s, ttfb " .. s.time.ttfb .. " s)")
    T.contains(tostring(s), "kb.http.stream 200 (ended)")
  end)
end)

T.case("stream: lines across chunk boundaries, the last one unterminated", function()
  with_server(function(req)
    return { chunks = { "al", "pha\nbe", "ta\n\ngam", "ma\ndel", "ta" }, chunk_delay = 0.01 }
  end, function(srv)
    local s = http.stream { url = srv.url .. "/l" }
    local lines = {}
    for line in s:lines() do lines[#lines + 1] = line end
    T.same(lines, { "alpha", "beta", "", "gamma", "delta" })
    T.eq(s:read(), nil)
    s:close()
    -- The client's own method, and a body sent with the request.
    local c = http.client()
    s = c:stream { method = "POST", url = srv.url .. "/l", body = "x" }
    local n = 0
    for _ in s:lines() do n = n + 1 end
    T.eq(n, 5)
    c:close()
  end)
end)

T.case("stream: HTTP error statuses are streams too; a large body with a slow reader", function()
  local piece = string.rep("0123456789abcdef", 4096) -- 64 KiB
  with_server(function(req)
    if req.path == "/missing" then return 404, "no such thing" end
    local chunks = {}
    for i = 1, 64 do chunks[i] = piece end
    return { chunks = chunks }
  end, function(srv)
    local s = http.stream { url = srv.url .. "/missing" }
    T.eq(s.status, 404)
    T.eq(s:read(), "no such thing")
    T.eq(s:read(), nil)
    -- 4 MiB read slowly: the stream pauses at its buffer limit and resumes.
    s = http.stream { url = srv.url .. "/big" }
    local got, reads = {}, 0
    kb.sleep(0.2) -- let the buffer fill
    for chunk in s.read, s do
      reads = reads + 1
      got[#got + 1] = chunk
      T.ok(#chunk <= 2 * 1024 * 1024, "a read holds at most about the buffer limit")
    end
    local body = table.concat(got)
    T.eq(#body, 64 * #piece)
    T.ok(body == string.rep(piece, 64), "the body arrived intact")
    T.ok(reads >= 4, "several reads (" .. reads .. ")")
  end)
end)

T.case("stream: errors before and after the head", function()
  local port = closed_port()
  local err = T.raises(function() http.stream { url = "http://127.0.0.1:" .. port .. "/x" } end)
  T.eq(err.class, "connect")
  T.eq(err.url, "http://127.0.0.1:" .. port .. "/x")
  T.eq(err.method, "GET")
  T.contains(err.message, "is the server running and listening on 127.0.0.1:" .. port .. "?")
  T.eq(http.active(), 0)
  with_server(function(req)
    if req.path == "/cut" then
      return { reset = true, partial = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        .. "6\r\nfirst\n\r\n7\r\nsecond-" }
    end
    if req.path == "/refuse" then return { reset = true } end
    return { chunks = { "x\n", "y\n" }, chunk_delay = 5 }
  end, function(srv)
    -- Reset mid-body: what arrived, then the transfer's error, every time.
    local s = http.stream { url = srv.url .. "/cut" }
    T.eq(s.status, 200)
    T.eq(s:read(), "first\nsecond-")
    err = T.raises(function() s:read() end)
    T.eq(err.class, "reset")
    T.eq(err.url, srv.url .. "/cut")
    T.eq(T.raises(function() s:read() end).class, "reset")
    T.eq(s.state, "failed")
    -- lines(): the complete lines, then the error (the cut line is lost).
    s = http.stream { url = srv.url .. "/cut" }
    local lines = {}
    err = T.raises(function() for line in s:lines() do lines[#lines + 1] = line end end)
    T.same(lines, { "first" })
    T.eq(err.class, "reset")
    -- Reset before the head: stream() raises.
    T.eq(T.raises(function() http.stream { url = srv.url .. "/refuse" } end).class, "reset")
    -- The timeout covers the whole transfer.
    local t0 = kb.now()
    s = http.stream { url = srv.url .. "/slow", timeout = 0.3 }
    T.eq(s:read(), "x\n")
    err = T.raises(function() s:read() end)
    T.eq(err.class, "timeout")
    T.contains(err.message, "raise timeout/connect_timeout")
    T.ok(kb.now() - t0 >= 0.29 and kb.now() - t0 < 4, "timed out after 0.3 s")
    T.eq(http.active(), 0)
  end)
  T.raises(function() http.stream() end, "bad argument #1")
  T.raises(function() http.stream { method = "GET" } end, "kb.http: a url is needed")
  T.raises(function() http.stream { url = "http://127.0.0.1:1/", timout = 1 } end,
    "kb.http: unknown option 'timout'")
end)

T.case("stream: close mid-stream, then the client again", function()
  with_server(function(req)
    if req.path == "/plain" then return 200, "plain" end
    return { chunks = { "a", "b", "c" }, chunk_delay = 0.5 }
  end, function(srv)
    local c = http.client { max_connections = 1 }
    local s = c:stream { url = srv.url .. "/s" }
    T.eq(s:read(), "a")
    T.eq(c:active(), 1)
    T.raises(function() c:close() end, "cannot close a client with requests in flight")
    s:close()
    s:close() -- twice is harmless
    T.eq(c:active(), 0)
    T.eq(s:read(), nil)
    T.eq(s.state, "closed")
    T.eq(c:get(srv.url .. "/plain").body, "plain")
    -- A reader in another task gets nil when the stream is closed.
    s = c:stream { url = srv.url .. "/s" }
    T.eq(s:read(), "a")
    local reader = kb.spawn(function() return s:read() end)
    kb.sleep(0.05)
    T.raises(function() s:read() end, "kb.http: another task is reading this stream")
    s:close()
    T.eq(reader:wait(), nil)
    -- A to-be-closed stream closes at the end of its scope.
    do
      local scoped <close> = c:stream { url = srv.url .. "/s" }
      T.eq(scoped:read(), "a")
    end
    T.eq(c:active(), 0)
    T.eq(c:get(srv.url .. "/plain").body, "plain")
    c:close()
  end)
end)

T.case("stream: cancellation while waiting for the head or for data", function()
  local handler_started = false
  with_server(function(req)
    if req.path == "/late" then
      handler_started = true
      kb.sleep(10)
      return 200, "late"
    end
    return { chunks = { "a", "b" }, chunk_delay = 0.5 }
  end, function(srv)
    local task = kb.spawn(function() return http.stream { url = srv.url .. "/late" } end)
    while not handler_started do kb.sleep(0.01) end
    T.eq(http.active(), 1)
    task:cancel()
    local ok, err = pcall(task.wait, task)
    T.ok(not ok and kb.is_cancelled(err), "stream() raised kb.cancelled")
    T.eq(http.active(), 0)
    T.eq(T.raises(function() kb.timeout(0.1, http.stream, { url = srv.url .. "/late" }) end).class,
      "timeout")
    T.eq(http.active(), 0)

    -- kb.timeout around read(): the wait ends, the stream goes on.
    local s = http.stream { url = srv.url .. "/s" }
    T.eq(s:read(), "a")
    err = T.raises(function() kb.timeout(0.1, s.read, s) end)
    T.eq(err.class, "timeout")
    T.eq(s:read(), "b")
    T.eq(s:read(), nil)

    -- A task cancelled in read() closes its <close> stream.
    local reading = false
    task = kb.spawn(function()
      local st <close> = http.stream { url = srv.url .. "/s" }
      st:read()
      reading = true
      return st:read()
    end)
    while not reading do kb.sleep(0.01) end
    T.eq(http.active(), 1)
    task:cancel()
    T.ok(not pcall(task.wait, task), "cancelled")
    T.eq(http.active(), 0)
    -- Without <close>, the collector closes an abandoned stream.
    task = kb.spawn(function()
      local st = http.stream { url = srv.url .. "/s" }
      return st:read(), st:read()
    end)
    kb.sleep(0.1)
    task:cancel()
    T.ok(not pcall(task.wait, task), "cancelled")
    task = nil
    collectgarbage()
    collectgarbage()
    T.eq(http.active(), 0)
  end)
end)

T.case("10,000 requests in flight at once", function()
  local N = 10000
  with_server(function(req) return 200, "ok" end, function(srv)
    local url = srv.url .. "/many"
    local latencies, failures = {}, {}
    local tasks = {}
    for i = 1, N do
      tasks[i] = kb.spawn(function()
        local t0 = kb.now()
        local ok, r = pcall(http.get, url)
        if ok and r.status == 200 and r.body == "ok" then
          latencies[#latencies + 1] = kb.now() - t0
        else
          failures[#failures + 1] = tostring(ok and r.status or r)
        end
      end)
    end
    -- The tasks start in one pass of the ready queue, before any I/O
    -- callback can finish a request: yielding once puts this task right
    -- behind them, when every request has started and none has ended.
    kb.sleep(0)
    T.eq(http.active(), N, "all requests in flight together")
    kb.all(tasks)
    T.eq(#failures, 0, "failures (first: " .. tostring(failures[1]) .. ")")
    T.eq(#latencies, N)
    T.eq(srv.requests, N)
    T.eq(http.active(), 0)
  end)
end)

-- ---- body limits and request building -------------------------------------------

T.case("max_body: a body over the limit raises body_too_large naming the limit and the URL", function()
  local MiB = 1024 * 1024
  local piece = string.rep("b", MiB)
  with_server(function(req)
    if req.path == "/over-64MiB" then -- 64 MiB + 1 in chunks: the server holds 1 MiB
      local chunks = {}
      for i = 1, 64 do chunks[i] = piece end
      chunks[65] = "b"
      return { chunks = chunks }
    end
    return 200, string.rep("b", tonumber(req.path:match("/(%d+)")))
  end, function(srv)
    T.eq(#http.get(srv.url .. "/1000", { max_body = 1000 }).body, 1000, "exactly at the limit")
    local err = T.raises(function()
      http.get(srv.url .. "/1001?token=s3cret", { max_body = 1000 })
    end)
    T.eq(err.class, "body_too_large")
    T.eq(err.url, srv.url .. "/1001?token=[REDACTED]")
    T.contains(err.message, "GET " .. srv.url .. "/1001?token=[REDACTED]: ")
    T.contains(err.message, "larger than max_body (1000 bytes)")
    T.contains(err.message, "raise the max_body option")
    T.ok(not tostring(err):find("s3cret", 1, true), "no secret in the error")
    T.eq(http.active(), 0)
    -- The connection and the client stay usable.
    T.eq(http.get(srv.url .. "/5").body, "bbbbb")
    -- A request's own limit replaces the default...
    T.eq(#http.get(srv.url .. "/2000", { max_body = 2000 }).body, 2000)
    -- ...which is 64 MiB.
    err = T.raises(function() http.get(srv.url .. "/over-64MiB") end)
    T.eq(err.class, "body_too_large")
    T.contains(err.message, "max_body (67108864 bytes)")
  end)
end)

T.case("max_body: bad values are refused; streams do not take it", function()
  T.raises(function() http.get("http://127.0.0.1:1/", { max_body = 0 }) end,
    "option 'max_body' must be a positive integer")
  T.raises(function() http.get("http://127.0.0.1:1/", { max_body = "1k" }) end,
    "option 'max_body' must be a positive integer")
  T.raises(function() http.get("http://127.0.0.1:1/", { max_body = 1.5 }) end,
    "option 'max_body' must be a positive integer")
  T.raises(function() http.stream { url = "http://127.0.0.1:1/", max_body = 10 } end,
    "option 'max_body' is for whole bodies")
end)

T.case("a request whose building raises is freed (LeakSanitizer checks at exit)", function()
  with_server(echo, function(srv)
    for i = 1, 20 do
      -- The header list passes the check, then raises when the request is
      -- built from it (its second look): after the request was allocated.
      local looks = 0
      local flaky = setmetatable({}, {
        __len = function() return 1 end,
        __index = function()
          looks = looks + 1
          if looks > 1 then error("second look " .. i, 0) end
          return "v"
        end,
      })
      local err = T.raises(function()
        http.get(srv.url .. "/", { headers = { ["X-Flaky"] = flaky } })
      end)
      T.contains(tostring(err), "second look " .. i)
      T.eq(looks, 2)
    end
    T.eq(http.active(), 0)
    T.eq(http.get(srv.url .. "/after").status, 200)
  end)
end)

T.case("stream: a reader woken by close() gets nil; one cancelled before it resumed takes nothing", function()
  local gate
  with_server(function(req)
    local mine = gate -- each stream's own: the server holds "b" until then
    return { chunks = { "a", function() mine:acquire() return "b" end } }
  end, function(srv)
    for _, cancel in ipairs { false, true } do
      gate = kb.semaphore(0)
      local s = http.stream { url = srv.url .. "/s", timeout = 30 }
      T.eq(s:read(), "a")
      local reader = kb.spawn(function() return s:read() end)
      kb.sleep(0)
      T.eq(reader:status(), "awaiting")
      s:close() -- wakes the reader; it runs after this task yields
      if cancel then reader:cancel() end
      local ok, v = pcall(reader.wait, reader)
      if cancel then
        T.ok(not ok and kb.is_cancelled(v), "cancelled: " .. tostring(v))
      else
        T.eq(ok, true)
        T.eq(v, nil)
      end
      T.eq(s.state, "closed")
      T.eq(s:read(), nil)
      gate:release()
    end
    T.eq(http.active(), 0)
  end)
end)

T.run()
