-- The echoing server of tests/e2e/secrets_everywhere.sh: a loopback
-- kb.httpd answering every request with 401 and a body that quotes what it
-- received (the request line with its query, the Authorization and Cookie
-- headers, and their bearer tokens plain and in base64), as a misconfigured
-- proxy or API server can. Writes its URL to PORT_FILE, serves for at most
-- LIFETIME seconds (the test kills it before).
local kb = require "kb"
local u = require "kb.k8s.util"

return {
  params = { port_file = "", lifetime = 120 },
  run = function(p)
    local srv = kb.httpd.listen { host = "127.0.0.1", port = 0, handler = function(req)
      local h = req.headers or {}
      local auth = h.authorization or ""
      local bare = auth:match("^%S+%s+(.*)$") or auth
      local echoed = string.format("%s %s?%s auth=%s bare=%s b64=%s cookie=%s", req.method, req.path,
        req.query or "", auth, bare, u.b64encode(bare), h.cookie or "")
      return 401, kb.json.encode { code = 16, message = "unauthenticated: " .. echoed,
        kind = "Status", status = "Failure", reason = "Unauthorized" },
        { ["content-type"] = "application/json" }
    end }
    kb.fs.write(p.port_file, srv.url .. "\n")
    kb.sleep(p.lifetime)
    srv:close()
  end,
}
