-- kb.httpd: loopback servers whose handlers run as kb tasks, exercised
-- through kb.http.
local kb = require "kb"
local T = require "kb.testing"
local httpd = require "kb.httpd"
local http = require "kb.http"

-- Runs fn(srv) against a server with `handler` (and extra listen options),
-- closing it afterwards even if fn fails.
local function with_server(handler, fn, opts)
  opts = opts or {}
  opts.handler = handler
  local srv = httpd.listen(opts)
  local ok, err = pcall(fn, srv)
  srv:close()
  if not ok then error(err, 0) end
end

-- Polls cond() on the scenario clock for up to `seconds`.
local function eventually(cond, seconds)
  local deadline = kb.now() + (seconds or 5)
  while not cond() do
    if kb.now() > deadline then return false end
    kb.sleep(0.01)
  end
  return true
end

T.case("request fields and a status, body, headers response", function()
  local seen
  with_server(function(req)
    seen = req
    return 200, "hello " .. req.method, { ["X-Answer"] = 42, ["Content-Type"] = "text/plain" }
  end, function(srv)
    T.eq(srv.url, "http://127.0.0.1:" .. srv.port)
    T.ok(srv.port > 0)
    T.eq(srv.host, "127.0.0.1")
    local r = http.request{ method = "GET", url = srv.url .. "/a/b?x=1&y=two",
      headers = { ["X-Test"] = "yes" } }
    T.eq(r.status, 200)
    T.eq(r.body, "hello GET")
    T.eq(r.headers["x-answer"], "42")
    T.eq(r.headers["content-type"], "text/plain")
    T.eq(seen.method, "GET")
    T.eq(seen.path, "/a/b")
    T.eq(seen.query, "x=1&y=two")
    T.eq(seen.target, "/a/b?x=1&y=two")
    T.eq(seen.headers["x-test"], "yes")
    T.eq(seen.headers["X-Test"], nil)
    T.eq(seen.body, "")
    T.ok(seen.remote:match("^127%.0%.0%.1:%d+$"), seen.remote)
    T.eq(srv.requests, 1)
  end)
end)

T.case("POST body and a table response", function()
  with_server(function(req)
    return { status = 201, body = "got " .. #req.body .. ": " .. req.body,
      headers = { ["Set-Cookie"] = { "a=1", "b=2" } } }
  end, function(srv)
    local r = http.request{ method = "POST", url = srv.url .. "/items", body = "payload" }
    T.eq(r.status, 201)
    T.eq(r.body, "got 7: payload")
    T.same(r.headers["set-cookie"], { "a=1", "b=2" })
    -- A body of a few MiB (curl sends Expect: 100-continue for it).
    local big = string.rep("0123456789abcdef", 256 * 1024)
    r = http.request{ method = "PUT", url = srv.url .. "/big", body = big }
    T.eq(r.status, 201)
    T.eq(r.body:sub(1, 13), "got 4194304: ")
    T.eq(#r.body, 13 + #big)
  end)
end)

T.case("handlers may sleep, and run concurrently", function()
  local running, peak = 0, 0
  with_server(function(req)
    running = running + 1
    if running > peak then peak = running end
    kb.sleep(0.05)
    running = running - 1
    return 200, "slept " .. req.query
  end, function(srv)
    local tasks = {}
    for i = 1, 20 do
      tasks[i] = kb.spawn(function()
        return http.request{ url = srv.url .. "/s?" .. i }
      end)
    end
    local results = kb.all(tasks)
    for i, r in ipairs(results) do
      T.eq(r.status, 200)
      T.eq(r.body, "slept " .. i)
    end
    T.ok(peak > 1, "handlers overlapped (peak " .. peak .. ")")
    T.eq(srv.requests, 20)
  end)
end)

T.case("chunked streaming response", function()
  with_server(function(req)
    return { chunks = { "one,", "two,", "three" }, chunk_delay = 0.02,
      headers = { ["Content-Type"] = "text/plain" } }
  end, function(srv)
    local t0 = kb.now()
    local r = http.request{ url = srv.url .. "/watch" }
    T.eq(r.status, 200)
    T.eq(r.body, "one,two,three")
    T.eq(r.headers["transfer-encoding"], "chunked")
    T.ok(kb.now() - t0 >= 0.03, "the delays were applied")
  end)
end)

T.case("reset after a partial response", function()
  with_server(function(req)
    return { reset = true, partial = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc" }
  end, function(srv)
    local err = T.raises(function() http.request{ url = srv.url .. "/fault" } end)
    T.ok(err.class == "reset" or err.class == "protocol", "class " .. tostring(err.class))
  end)
end)

T.case("handler errors become 500 responses", function()
  with_server(function(req)
    if req.path == "/boom" then error("boom in the handler") end
    if req.path == "/nil" then return nil end
    if req.path == "/nothing" then return end
    if req.path == "/status" then return 42, "x" end
    if req.path == "/body" then return 200, { "not a string" } end
    if req.path == "/header" then return 200, "x", { ["X-Bad"] = true } end
    if req.path == "/crlf" then return 200, "x", { ["X-Bad"] = "a\r\nInjected: 1" } end
    return 200, "fine"
  end, function(srv)
    local function get(path) return http.request{ url = srv.url .. path } end
    local r = get("/boom")
    T.eq(r.status, 500)
    T.contains(r.body, "boom in the handler")
    T.ok(not r.body:find("stack traceback", 1, true), "no traceback in the body")
    r = get("/nil")
    T.eq(r.status, 500)
    T.contains(r.body,
      "the handler returned nil; expected status, body, headers or a response table")
    r = get("/nothing")
    T.eq(r.status, 500)
    T.contains(r.body, "the handler returned nothing; expected")
    r = get("/status")
    T.eq(r.status, 500)
    T.contains(r.body, "the handler returned an invalid status 42 (expected an integer 100..999)")
    r = get("/body")
    T.eq(r.status, 500)
    T.contains(r.body, "the response body must be a string, got table")
    r = get("/header")
    T.eq(r.status, 500)
    T.contains(r.body, "response header 'X-Bad' must be a string or a number, got boolean")
    r = get("/crlf")
    T.eq(r.status, 500)
    T.contains(r.body, "invalid response header")
    T.eq(r.headers["injected"], nil)
    -- The server goes on serving.
    r = get("/ok")
    T.eq(r.status, 200)
    T.eq(r.body, "fine")
  end)
end)

T.case("request body limit", function()
  with_server(function(req) return 200, "ok" end, function(srv)
    local r = http.request{ method = "POST", url = srv.url .. "/", body = string.rep("x", 20) }
    T.eq(r.status, 413)
    T.contains(r.body, "request body larger than 10 bytes")
    r = http.request{ method = "POST", url = srv.url .. "/", body = "0123456789" }
    T.eq(r.status, 200)
  end, { max_body = 10 })
end)

T.case("a client that leaves cancels the handler task", function()
  local started, cancelled = false, false
  with_server(function(req)
    started = true
    local ok, err = pcall(kb.sleep, 30)
    cancelled = not ok and kb.is_cancelled(err)
    if not ok then error(err, 0) end
    return 200, "too late"
  end, function(srv)
    local err = T.raises(function()
      http.request{ url = srv.url .. "/slow", timeout = 0.2 }
    end)
    T.eq(err.class, "timeout")
    T.ok(started, "the handler ran")
    T.ok(eventually(function() return cancelled end), "the handler task was cancelled")
  end)
end)

T.case("close, then the port refuses connections", function()
  local srv = httpd.listen{ handler = function() return 204 end }
  local url = srv.url
  T.eq(http.request{ url = url .. "/" }.status, 204)
  T.contains(tostring(srv), "(open)")
  srv:close()
  T.contains(tostring(srv), "(closed)")
  srv:close() -- twice is harmless
  local err = T.raises(function() http.request{ url = url .. "/" } end)
  T.eq(err.class, "connect")
end)

T.case("listen errors", function()
  local srv = httpd.listen{ handler = function() return 200 end }
  local err = T.raises(function()
    httpd.listen{ port = srv.port, handler = function() return 200 end }
  end, "kb.httpd.listen: cannot listen on 127.0.0.1 port " .. srv.port)
  T.eq(err.class, "listen")
  T.contains(err.message, "address already in use")
  T.eq(err.port, srv.port)
  srv:close()
  T.raises(function() httpd.listen{ host = "nowhere", handler = print } end,
    "cannot listen on nowhere port 0: invalid argument")
  T.raises(function() httpd.listen{} end, "option 'handler' must be a function, got nil")
  T.raises(function() httpd.listen{ port = 70000, handler = print } end,
    "port 70000 out of range")
  T.raises(function() httpd.listen{ port = "x", handler = print } end,
    "option 'port' must be a number")
end)

T.case("parse_multipart", function()
  local ct = 'multipart/form-data; boundary="XyZ"'
  local body = table.concat({
    "--XyZ",
    'Content-Disposition: form-data; name="title"',
    "",
    "hello",
    "--XyZ",
    'Content-Disposition: form-data; name="file"; filename="a.bin"',
    "Content-Type: application/octet-stream",
    "",
    "bin\r\n\0data",
    "--XyZ--",
    "",
  }, "\r\n")
  local parts = httpd.parse_multipart(ct, body)
  T.eq(#parts, 2)
  T.eq(parts[1].name, "title")
  T.eq(parts[1].data, "hello")
  T.eq(parts[1].filename, nil)
  T.eq(parts[2].filename, "a.bin")
  T.eq(parts[2].content_type, "application/octet-stream")
  T.eq(parts[2].headers["content-type"], "application/octet-stream")
  T.eq(parts[2].data, "bin\r\n\0data")

  local err = T.raises(function() httpd.parse_multipart("text/plain", body) end,
    'multipart: Content-Type is not multipart/...: "text/plain"')
  T.eq(err.class, "multipart")
  T.raises(function() httpd.parse_multipart("multipart/form-data", body) end,
    "multipart: Content-Type has no boundary")
  T.raises(function() httpd.parse_multipart(ct, "--XyZ\r\n\r\nx") end,
    "multipart: part 1: no Content-Disposition header")
  T.raises(function() httpd.parse_multipart(ct, body, 1) end, "multipart: more than 1 parts")
end)

T.case("multipart upload through kb.http, and build_multipart", function()
  local got
  with_server(function(req)
    got = httpd.parse_multipart(req.headers["content-type"], req.body)
    return 200, tostring(#got)
  end, function(srv)
    local r = http.request{ method = "POST", url = srv.url .. "/upload", multipart = {
      { name = "pipeline", data = "a: 1\n", filename = "p.yaml",
        content_type = "application/x-yaml" },
      { name = "note", data = "hi" },
    } }
    T.eq(r.status, 200)
    T.eq(r.body, "2")
    T.eq(got[1].name, "pipeline")
    T.eq(got[1].filename, "p.yaml")
    T.eq(got[1].content_type, "application/x-yaml")
    T.eq(got[1].data, "a: 1\n")
    T.eq(got[2].name, "note")
    T.eq(got[2].data, "hi")
  end)
  local body, ct = httpd.build_multipart{ { name = "a", data = "1" },
    { name = "f", data = "x\r\n--y", filename = "f.txt" } }
  T.ok(ct:match("^multipart/form%-data; boundary=kbrun%-%w+$"), ct)
  local parts = httpd.parse_multipart(ct, body)
  T.eq(#parts, 2)
  T.eq(parts[2].data, "x\r\n--y")
  T.eq(parts[2].content_type, "application/octet-stream")
  T.raises(function() httpd.build_multipart{ { data = "x" } } end,
    "kb.httpd.build_multipart: part 1 has no name")
  T.raises(function() httpd.build_multipart{ { name = "n", data = 5 } } end,
    "part 1: 'data' must be a string, got number")
end)

T.run()
