--- kb.openapi: checks HTTP requests and responses against Swagger 2.0 and
-- OpenAPI 3 documents, so tests can prove that kbrun's clients send, and
-- its simulator answers, what the real APIs define.
--
--   local openapi = require "kb.openapi"
--   local kfp = openapi.kfp("v2beta1")
--   local ok, errs = kfp:validate_request{ method = "POST", path = "/apis/v2beta1/runs",
--                                          body = { display_name = "r1" } }
--   local ok, errs = kfp:validate_response{ method = "GET", path = "/apis/v2beta1/runs/x",
--                                           status = 200, body = run }
--
-- Errors are strings "<location>: <message>". Locations read like JSON
-- paths: `body.runs[0].state` (array indices count from 0, as in the JSON
-- text), `body.metadata.labels["app.kubernetes.io/name"]`, `query.page_size`,
-- `path.run_id`, `header.content-type`. See docs/openapi.md for every
-- message and option.
--
-- The parts: kb.openapi.values (JSON types, formats, messages),
-- kb.openapi.document (documents, $ref, options), kb.openapi.schema (schema
-- validation), kb.openapi.paths (operations, path matching) and
-- kb.openapi.messages (requests, responses). This module makes the spec
-- objects' methods from them and holds the bundled specs and the recorder.
local fs = require "kb.fs"
local json = require "kb.json"
local V = require "kb.openapi.values"
local D = require "kb.openapi.document"
local S = require "kb.openapi.schema"
local P = require "kb.openapi.paths"
local R = require "kb.openapi.messages"

local M = {}

local format, concat = string.format, table.concat
local fail = V.fail

-- The spec object's methods, from the parts.
local Spec = D.Spec
Spec.set_definition, Spec.set_response = D.set_definition, D.set_response
Spec.validate = S.validate
Spec.operation, Spec.operations = P.operation, P.operations
Spec.validate_request, Spec.validate_response = R.validate_request, R.validate_response

M.load = D.load

------------------------------------------------------------------------
-- Shared specs
------------------------------------------------------------------------

--- The folder of the API specs kbrun carries (`specs/` of the source tree,
-- installed as share/kbrun/specs): $KBRUN_SPECS_DIR, else
-- $KBRUN_SOURCE_DIR/specs, else ../../../specs from this file
-- (lua/kb/openapi/init.lua: the source tree and the installed layout both
-- put it there). Raises a kb "openapi" error
-- naming every place it looked.
function M.specs_dir()
  local tried = {}
  local env = os.getenv("KBRUN_SPECS_DIR")
  if env and env ~= "" then
    if fs.exists(env) then return env end
    fail("KBRUN_SPECS_DIR=%s does not exist", env)
  end
  local src = os.getenv("KBRUN_SOURCE_DIR")
  if src and src ~= "" then
    local p = fs.join(src, "specs")
    if fs.exists(p) then return p end
    tried[#tried + 1] = p
  end
  local here = package.searchpath("kb.openapi", package.path)
  if here then
    local p = fs.join(fs.dirname(fs.abspath(here)), "..", "..", "..", "specs")
    if fs.exists(p) then return p end
    tried[#tried + 1] = p
  end
  fail("API specs not found (set KBRUN_SPECS_DIR, or KBRUN_SOURCE_DIR to a kbrun checkout); looked in: %s",
    #tried > 0 and concat(tried, ", ") or "nowhere")
end

local function spec_file(...)
  local p = fs.join(M.specs_dir(), ...)
  if not fs.exists(p) then fail("spec file %s is missing", p) end
  return p
end

-- The helpers' defaults under the caller's options; a caller's `strict`
-- also replaces the default of strict_request.
local function with_defaults(opts, defaults)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  opts = opts or {}
  if opts.strict ~= nil then o.strict_request = nil end
  for k, v in pairs(opts) do o[k] = v end
  return o
end

local function str(desc) return { type = "string", description = desc } end

--- KFP's API (v2beta1 or v1beta1) from kfp_api_single_file.swagger.json,
-- with the server facts the swagger lacks: request bodies are strict (the
-- server rejects unknown fields), healthz carries commit_sha and tag_name,
-- the upload endpoints answer errors as {error_message, error_details}.
-- @param version "v2beta1" (default) or "v1beta1"
-- @param opts table|nil options for load (override the defaults)
function M.kfp(version, opts)
  version = version or "v2beta1"
  if version ~= "v2beta1" and version ~= "v1beta1" then
    error('kb.openapi.kfp: version must be "v2beta1" or "v1beta1", got ' .. tostring(version), 2)
  end
  local spec = M.load(spec_file("kfp", version, "kfp_api_single_file.swagger.json"),
    with_defaults(opts, { strict_request = true }))
  local prefix = "/apis/" .. version
  local healthz = { type = "object", properties = {
    commit_sha = str("server build commit"), tag_name = str("server release tag"),
    multi_user = { type = "boolean" },
  } }
  if version == "v2beta1" then healthz.properties.pipeline_store = str("database or kubernetes") end
  spec:set_response("GET", prefix .. "/healthz", 200, healthz)
  local upload_error = { type = "object", properties = {
    error_message = str("what failed"), error_details = str("the cause") } }
  for _, p in ipairs({ "/pipelines/upload", "/pipelines/upload_version" }) do
    spec:set_response("POST", prefix .. p, "default", upload_error)
  end
  return spec
end

local function k8s_facts(spec, opts_error_schema)
  -- Quantities are written as strings but numbers decode too; a patch body
  -- may be a JSON patch (an array).
  spec:set_definition("io.k8s.apimachinery.pkg.api.resource.Quantity",
    { oneOf = { { type = "string" }, { type = "number" } } })
  spec:set_definition("io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    { type = "string", format = "int-or-string" })
  spec:set_definition("io.k8s.apimachinery.pkg.apis.meta.v1.Patch", {})
  if opts_error_schema == nil then
    spec.opts.error_schema = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
  end
  return spec
end

--- The Argo Server API (specs/argo/swagger.json). IntOrString and
-- Quantity take what Kubernetes takes; request bodies are strict.
function M.argo(opts)
  local spec = M.load(spec_file("argo", "swagger.json"), with_defaults(opts, { strict_request = true }))
  spec:set_definition("io.k8s.apimachinery.pkg.api.resource.Quantity",
    { oneOf = { { type = "string" }, { type = "number" } } })
  spec:set_definition("io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    { type = "string", format = "int-or-string" })
  return spec
end

--- The Kubernetes API (OpenAPI v2): the 1.32 subset by default,
-- `{ full = true }` for the whole 1.32 swagger. JSON null is accepted
-- (the server writes `creationTimestamp: null`), undocumented error
-- statuses are checked against meta/v1 Status, request bodies are strict.
function M.k8s(opts)
  opts = opts or {}
  local file = opts.full and "swagger-v1.32.json" or "k8s-subset-v1.32-swagger.json"
  local o = {}
  for k, v in pairs(opts) do if k ~= "full" then o[k] = v end end
  local spec = M.load(spec_file("k8s", file), with_defaults(o, { strict_request = true, allow_null = true }))
  return k8s_facts(spec, o.error_schema)
end

--- One Kubernetes OpenAPI v3 group document from the fixtures:
-- group "api/v1" or "apis/batch/v1".
function M.k8s_v3(group, opts)
  local name = (group or "api/v1"):gsub("/", "__") .. "_openapi.json"
  local spec = M.load(spec_file("k8s", "openapi-v3-fixture", name),
    with_defaults(opts, { strict_request = true, allow_null = true }))
  return k8s_facts(spec, (opts or {}).error_schema)
end

------------------------------------------------------------------------
-- Recorder
------------------------------------------------------------------------

local Recorder = {}
Recorder.__index = Recorder

--- A recorder checks request/response pairs against one spec, keeps every
-- violation and counts the operations it saw.
-- @param spec a spec from load/kfp/argo/k8s
-- @param opts table|nil per-call options passed to every check
function M.recorder(spec, opts)
  if getmetatable(spec) ~= Spec then error("kb.openapi.recorder: expected a spec", 2) end
  return setmetatable({ spec = spec, opts = opts or {}, seen = {}, list = {}, checks = 0 }, Recorder)
end

local function with_opts(t, opts)
  local c = {}
  for k, v in pairs(opts) do c[k] = v end
  for k, v in pairs(t) do c[k] = v end
  return c
end

--- Checks one exchange. Either part may be nil; the response takes method
-- and path from the request when it has none.
-- @param request table as for validate_request
-- @param response table|nil { status =, body = }
-- @return ok, errors (this exchange only, with "METHOD path" prefixes)
function Recorder:check(request, response)
  local errs, op = {}, nil
  self.checks = self.checks + 1
  if request then
    local label = request.method:upper() .. " " .. request.path
    local _, e, o = self.spec:validate_request(with_opts(request, self.opts))
    op = o
    for _, m in ipairs(e) do errs[#errs + 1] = label .. " request: " .. m end
  end
  -- An unknown operation is reported once, by the request.
  if response and (op or not request) then
    local r = with_opts(response, self.opts)
    r.method = r.method or (request and request.method)
    r.path = r.path or (request and request.path)
    if type(r.method) ~= "string" or type(r.path) ~= "string" then
      error("recorder:check: the response needs method and path when there is no request", 2)
    end
    local label = r.method:upper() .. " " .. r.path
    local _, e, o = self.spec:validate_response(r)
    op = op or o
    for _, m in ipairs(e) do errs[#errs + 1] = label .. " response " .. tostring(r.status) .. ": " .. m end
  end
  if op then self.seen[op.key] = (self.seen[op.key] or 0) + 1 end
  for _, m in ipairs(errs) do self.list[#self.list + 1] = m end
  return #errs == 0, errs
end

--- Every violation recorded so far (a copy).
function Recorder:violations()
  return table.move(self.list, 1, #self.list, 1, {})
end

--- Raises a kb "openapi" error listing every violation, if there is any.
function Recorder:assert_clean()
  local n = #self.list
  if n == 0 then return true end
  fail("%d API violation%s in %d checked exchange%s:\n  %s", n, n == 1 and "" or "s",
    self.checks, self.checks == 1 and "" or "s", concat(self.list, "\n  "))
end

local function selector(filter)
  if filter == nil then return function() return true end end
  if type(filter) == "function" then return filter end
  if type(filter) == "string" then
    return function(key, op) return op.path:sub(1, #filter) == filter end
  end
  if type(filter) == "table" then
    local set = {}
    for _, k in ipairs(filter) do set[k] = true end
    return function(key) return set[key] == true end
  end
  error("coverage filter must be nil, a path prefix, a list of \"METHOD /path\" keys or a function", 3)
end

--- Which operations were seen. `filter` limits the list: a path prefix
-- ("/apis/v2beta1/runs"), a list of keys ("GET /apis/v2beta1/runs/{run_id}")
-- or a function(key, op) -> bool.
-- @return { seen = {keys}, not_seen = {keys}, calls = {key = count} }
function Recorder:coverage(filter)
  local keep = selector(filter)
  local seen, not_seen, calls = {}, {}, {}
  local known = {}
  for _, op in ipairs(self.spec:operations()) do
    known[op.key] = true
    if keep(op.key, op) then
      if self.seen[op.key] then
        seen[#seen + 1] = op.key
        calls[op.key] = self.seen[op.key]
      else
        not_seen[#not_seen + 1] = op.key
      end
    end
  end
  if type(filter) == "table" then
    for _, k in ipairs(filter) do
      if not known[k] then fail("coverage: %s is not an operation of %s", k, self.spec.source) end
    end
  end
  return { seen = seen, not_seen = not_seen, calls = calls }
end

--- Raises a kb "openapi" error naming every selected operation that was
-- never checked (filter as for coverage).
function Recorder:assert_covered(filter)
  local cov = self:coverage(filter)
  if #cov.not_seen == 0 then return cov end
  fail("%d operation%s never checked:\n  %s", #cov.not_seen, #cov.not_seen == 1 and "" or "s",
    concat(cov.not_seen, "\n  "))
end

M.Spec = Spec
return M
