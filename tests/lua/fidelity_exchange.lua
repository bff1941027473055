--- fidelity_exchange: raw HTTP exchanges with one server, each checked
-- against an API spec by a kb.openapi recorder. test_api_fidelity.lua
-- drives the simulator's KFP, Argo and Kubernetes endpoints with it.
--
--   local X = require "fidelity_exchange"
--   local api = X.new(sim.url, openapi.recorder(openapi.kfp("v2beta1", {strict_response = true})))
--   local run = api:call("POST", "/apis/v2beta1/runs", { json = { display_name = "r" }, expect = 200 })
--   local err = api:call("POST", "/apis/v2beta1/runs", { json = '{"bogus":1}', expect = 400,
--                        invalid_request = true })
--
-- Every call names the status it expects; the request is validated too
-- unless it is a deliberately invalid one (`invalid_request`), whose
-- response is still checked. Bodies are sent as the exact JSON text the
-- validator sees.
local kb = require "kb"

local M = {}

local Api = {}
Api.__index = Api

--- A caller for one server and one recorder.
-- @param base string the server's URL (no trailing slash)
-- @param rec a kb.openapi recorder
function M.new(base, rec)
  return setmetatable({ base = base, rec = rec, calls = 0 }, Api)
end

local function form_of(parts)
  local form = {}
  for _, p in ipairs(parts) do form[p.name] = p.data or p.file end
  return form
end

--- One exchange.
-- @param method string
-- @param path string, without query
-- @param o table: expect (status, required), query (table), json (JSON
--   text or a Lua value, sent as application/json), multipart (parts as
--   for kb.http), headers, invalid_request (skip the request check)
-- @return the decoded body (nil when it is not JSON), the kb.http response
function Api:call(method, path, o)
  assert(type(o) == "table" and o.expect, "call: expect (the status) is required")
  local text = o.json
  if text ~= nil and type(text) ~= "string" then text = kb.json.encode(text) end
  local headers = {}
  for k, v in pairs(o.headers or {}) do headers[k] = v end
  if text ~= nil then headers["Content-Type"] = "application/json" end
  local res = kb.http.request { method = method, url = self.base .. path, query = o.query,
    headers = headers, body = text, multipart = o.multipart, timeout = 600 }
  self.calls = self.calls + 1
  local request
  if not o.invalid_request then
    request = { method = method, path = path, query = o.query, headers = headers,
      body = o.multipart and form_of(o.multipart) or text }
  end
  self.rec:check(request, { method = method, path = path, status = res.status, body = res.body })
  local where = string.format("%s %s", method, path)
  if res.status ~= o.expect then
    error(string.format("%s: expected status %d, got %d: %s", where, o.expect, res.status,
      res.body:sub(1, 300)), 2)
  end
  local ct = res.headers["content-type"] or ""
  if not ct:find("application/json", 1, true) then
    error(string.format("%s: Content-Type %q, expected application/json", where, ct), 2)
  end
  local ok, body = pcall(kb.json.decode, res.body)
  return ok and body or nil, res
end

--- Checks a response obtained some other way (a stream's messages).
function Api:check_response(method, path, status, body)
  return self.rec:check(nil, { method = method, path = path, status = status, body = body })
end

return M
