--- kb.k8s.request: one attempt of a kb.k8s call: the kb.http options
-- with the client's credentials applied (re-sent once after a 401 when
-- they rotate), the answer decoded, and a failure made a kb error of its
-- class with a hint (whose credentials, which RBAC verb, which kubeconfig
-- field to check). Every attempt is recorded in `<op>.attempt` and counted
-- in k8s.requests. c:request (kb.k8s) runs attempts under the client's
-- retry policy.
local kb = require "kb"
local json = require "kb.json"
local metrics = require "kb.metrics"
local log = require "kb.log"
local u = require "kb.k8s.util"
local retry = require "kb.retry"
local secrets = require "kb.secrets"

local M = {}

local function redact(p, text)
  return secrets.scrub(text, p.auth:secrets())
end

local HINTS = {
  server = "the API server or a webhook failed; retry later or look at the control plane",
  gone = "the resourceVersion is too old (compacted); list again and watch from the list's "
    .. "resourceVersion",
}

local function transport_hint(err, server)
  local class = err.class
  if class == "connect" then
    return "is the API server reachable? check the kubeconfig's server (" .. server .. ")"
  elseif class == "tls" then
    return "TLS failed: check certificate-authority(-data) in the kubeconfig (the server's "
      .. "certificate must chain to it and name the server's host), or the client certificate"
  elseif class == "dns" then
    return "the server's host name does not resolve: check the kubeconfig's server (" .. server .. ")"
  end
end


-- 401 and 403 are both class auth (as in kb.kfp and kb.argo: a caller
-- stops on err.class == "auth"; err.status tells them apart).
local CLASS_BY_STATUS = {
  [400] = "bad_request", [401] = "auth", [403] = "auth", [404] = "not_found",
  [409] = "conflict", [410] = "gone", [422] = "invalid", [429] = "throttled",
}

-- The RBAC verb of a call, for `kubectl auth can-i`.
local CAN_I_VERB = { create = "create", get = "get", list = "list", update = "update",
  patch = "patch", delete = "delete", watch = "watch", check = "get", logs = "get" }

-- The hint of a 401 / 403: whose credentials, and what to check.
local function auth_hint(c, p, req, status, url)
  local who = c.user and string.format("kubeconfig user '%s'", c.user) or "the client"
  if c.context then who = who .. string.format(" (context '%s')", c.context) end
  local what = p.auth:describe() or (c.auth_kind == "client_certificate" and "a client certificate")
  if status == 401 then
    if not what then
      return string.format("no credentials were sent: %s has no token, exec plugin or client "
        .. "certificate", who)
    end
    return string.format("the server rejected the credentials of %s, %s: check that they are "
      .. "current (token expired or revoked? exec plugin logged out? token file rotated?) and "
      .. "meant for this cluster", who, what)
  end
  local resource = req.resource or "-"
  if req.verb == "logs" then resource = "pods/log" end
  local ns = url:match("/namespaces/([^/?]+)")
  return string.format("%s is not allowed to %s %s%s: check its RBAC (Role/ClusterRole "
    .. "bindings); kubectl auth can-i %s %s%s shows it", who, CAN_I_VERB[req.verb] or req.verb,
    resource, ns and (" in namespace " .. ns) or "", CAN_I_VERB[req.verb] or req.verb, resource,
    ns and (" -n " .. ns) or "")
end

local function status_error(c, p, req, method, url, r)
  local status = r.status
  local doc
  if type(r.body) == "string" and r.body:match("^%s*{") then
    local ok, d = pcall(json.decode, r.body)
    if ok and type(d) == "table" then doc = d end
  end
  local msg, reason, causes
  if doc and doc.kind == "Status" then
    msg = type(doc.message) == "string" and doc.message or nil
    reason = type(doc.reason) == "string" and doc.reason or nil
    if type(doc.details) == "table" and type(doc.details.causes) == "table" then
      causes = doc.details.causes
    end
  elseif type(r.body) == "string" and r.body:find("%S") then
    msg = u.trim(r.body:gsub("<[^>]*>", " "), 300)
  end
  msg = redact(p, msg)
  local class = CLASS_BY_STATUS[status] or (status >= 500 and "server") or "http"
  local hint = HINTS[class]
  if status == 401 or status == 403 then hint = auth_hint(c, p, req, status, url) end
  local op = req.op
  local message = string.format("%s: %s %s -> HTTP %d%s%s%s", op, method, url, status,
    reason and (" " .. reason) or "", msg and (": " .. msg) or "",
    hint and (" (" .. hint .. ")") or "")
  return u.error(class, message, {
    status = status, reason = reason, verb = req.verb, resource = req.resource, op = op,
    method = method, url = url, server_message = msg, causes = causes, hint = hint,
    retry_after = retry.retry_after(status, r.headers),
  })
end

local function count_error(verb, resource, class)
  metrics.counter("k8s.errors", { verb = verb, resource = resource or "-", class = class }):inc()
end

-- The kb.http options of one request, credentials applied (the auth
-- provider may raise: an exec plugin that fails).
local function http_options(c, p, req, method, url, body, ctype)
  local headers = { Accept = req.accept or "application/json", ["User-Agent"] = p.user_agent }
  if ctype then headers["Content-Type"] = ctype end
  local o = { method = method, url = url, headers = headers, query = req.query, body = body,
    timeout = req.timeout or c.timeout, compressed = p.compressed,
    http2 = p.http2 or nil }
  for k, v in pairs(p.tls) do o[k] = v end
  p.auth:apply(headers, o)
  return o
end

-- A kb.http transport error, named after the call and with a hint.
local function transport_error(c, req, r)
  r.verb, r.resource, r.op = req.verb, req.resource, req.op
  r.hint = transport_hint(r, c.server) or r.hint
  if r.hint and not tostring(r.message):find(r.hint, 1, true) then
    r.message = tostring(r.message) .. " (" .. r.hint .. ")"
  end
  return r
end

-- Sends one request: true, response (a stream with req.stream), or
-- false, error; then the seconds it took.
local function send(c, p, req, o)
  local t0 = kb.now()
  local ok, r = pcall(req.stream and p.stream or p.send, o)
  if ok and req.stream and (r.status < 200 or r.status > 299) then ok, r = pcall(u.read_whole, r) end
  if ok then return true, r, r.time and r.time.total or (kb.now() - t0) end
  if u.is_error(r) and not kb.is_cancelled(r) then
    transport_error(c, req, r)
    if not req.no_histogram then metrics.histogram(req.op .. ".attempt"):record(kb.now() - t0) end
  end
  return false, r, kb.now() - t0
end

-- The JSON document of a successful answer (the text with raw, the
-- stream itself with stream): true, doc, or false, error.
local function decode(p, req, method, url, r)
  if req.stream then return true, r end
  if req.raw then return true, r.body end
  if not r.body:find("%S") then return true, {} end
  local okd, d = pcall(json.decode, r.body)
  if okd and type(d) == "table" then return true, d end
  return false, u.error("protocol", string.format("%s: %s %s -> HTTP %d with a body that "
    .. "is not JSON (%s): %s", req.op, method, url, r.status,
    tostring(r.headers["content-type"] or "no content type"),
    u.trim(redact(p, r.body), 120)), { status = r.status, verb = req.verb,
    resource = req.resource, url = url })
end

-- One attempt (with one re-send after a 401 when the credentials rotate):
-- true, doc, response, or false, error (as pcall), then the attempt's
-- time. Every attempt is recorded in `<op>.attempt`.
local function attempt(c, p, req, method, url, body, ctype)
  local verb, resource = req.verb, req.resource
  local tries, spent = 0, 0
  while true do
    tries = tries + 1
    local oka, o = pcall(http_options, c, p, req, method, url, body, ctype)
    if not oka then
      if u.is_error(o) then o.verb, o.resource = verb, resource end
      return false, o, nil, spent
    end
    local ok, r, elapsed = send(c, p, req, o)
    spent = spent + elapsed
    if not ok then return false, r, nil, spent end
    if not req.no_histogram then metrics.histogram(req.op .. ".attempt"):record(elapsed) end
    local status = r.status
    metrics.counter("k8s.requests", { verb = verb, resource = resource or "-",
      status = tostring(status) }):inc()
    if log.enabled("debug") then
      log.debug("k8s %s %s %s -> %d in %.3f s", req.op, method, url, status, elapsed)
    end
    if status == 401 and tries == 1 and p.auth:invalidate() then
      log.debug("k8s %s: 401, retrying with fresh credentials", req.op)
    elseif status < 200 or status > 299 then
      return false, status_error(c, p, req, method, url, r), nil, spent
    else
      local okd, doc = decode(p, req, method, url, r)
      if not okd then return false, doc, nil, spent end
      return true, doc, r, spent
    end
  end
end

M.attempt, M.count_error = attempt, count_error

return M
