--- kb.openapi.document: documents and $ref for kb.openapi: a Swagger 2.0
-- or OpenAPI 3 document read once per process (JSON or YAML) and compiled
-- into its path table, $ref chains resolved (with a spec's overrides), the
-- options checked, and the Spec objects load returns (their methods are
-- set by kb.openapi).
local fs = require "kb.fs"
local json = require "kb.json"
local V = require "kb.openapi.values"

local M = {}

local format, concat, sort = string.format, table.concat, table.sort
local fail, quote = V.fail, V.quote

------------------------------------------------------------------------
-- Documents and $ref
------------------------------------------------------------------------

local docs = {}        -- abspath -> compiled document (shared by its Specs)
local table_docs = setmetatable({}, { __mode = "k" })

local function unescape_pointer(token)
  token = token:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end)
  return (token:gsub("~1", "/"):gsub("~0", "~"))
end

local function lookup_pointer(doc, ref)
  local node = doc
  for token in ref:sub(3):gmatch("[^/]+") do
    if type(node) ~= "table" then return nil end
    node = node[unescape_pointer(token)]
  end
  return node
end

local Spec = {}
Spec.__index = Spec

local MISSING = {}     -- cached result of a $ref that points nowhere

-- Follows a chain of $ref to a schema; returns schema, name of the last
-- definition it went through, or nil, nil, message.
local function resolve(spec, schema)
  local name, seen
  while type(schema) == "table" do
    local ref = schema["$ref"]
    if type(ref) ~= "string" then break end
    seen = seen or {}
    if seen[ref] then return nil, nil, "$ref cycle at " .. quote(ref) end
    seen[ref] = true
    local target = spec.overrides[ref]
    if target == nil then
      local c = spec.compiled
      target = c.refs[ref]
      if target == nil then
        if ref:sub(1, 2) ~= "#/" then return nil, nil, "unsupported $ref " .. quote(ref) .. " (only local refs)" end
        target = lookup_pointer(c.doc, ref)
        if type(target) ~= "table" and type(target) ~= "boolean" then target = MISSING end
        c.refs[ref] = target
      end
      if target == MISSING then return nil, nil, "unresolvable $ref " .. quote(ref) end
    end
    name = ref:match("([^/]+)$")
    schema = target
  end
  return schema, name
end

local function compile_routes(doc)
  local base = ""
  if doc.swagger and type(doc.basePath) == "string" and doc.basePath ~= "/" then
    base = doc.basePath:gsub("/$", "")
  end
  local routes, by_len = {}, {}
  for template, item in pairs(doc.paths or {}) do
    local full = base .. template
    local norm = full:gsub("/+$", "")
    if norm == "" then norm = "/" end
    local segs, score, params = {}, {}, {}
    for seg in norm:gmatch("[^/]+") do
      local s = { text = seg }
      if seg:find("{", 1, true) then
        local names, pat, pos, lits = {}, { "^" }, 1, 0
        while true do
          local a, b, name = seg:find("{([^}]+)}", pos)
          local lit = seg:sub(pos, (a or 0) - 1)
          if a == nil then lit = seg:sub(pos) end
          lits = lits + #lit
          pat[#pat + 1] = lit:gsub("%W", "%%%0")
          if a == nil then break end
          pat[#pat + 1] = "(.+)"
          names[#names + 1] = name
          params[#params + 1] = name
          pos = b + 1
        end
        pat[#pat + 1] = "$"
        s.pattern, s.names = concat(pat), names
        score[#score + 1] = lits > 0 and 2 or 1
        s.lits = lits
      else
        score[#score + 1] = 3
        s.lits = #seg
      end
      segs[#segs + 1] = s
    end
    local route = { template = full, segs = segs, score = score, item = item, ops = {}, params = params }
    routes[#routes + 1] = route
    local list = by_len[#segs] or {}
    by_len[#segs] = list
    list[#list + 1] = route
  end
  sort(routes, function(a, b) return a.template < b.template end)
  return routes, by_len
end

local function compile(doc, where)
  if type(doc) ~= "table" then fail("%s is not a JSON/YAML object", where) end
  local version
  if doc.swagger == "2.0" then
    version = 2
  elseif type(doc.openapi) == "string" and doc.openapi:match("^3%.") then
    version = 3
  else
    fail('%s is neither Swagger 2.0 nor OpenAPI 3 (no "swagger": "2.0" or "openapi": "3.x")', where)
  end
  local routes, by_len = compile_routes(doc)
  return { doc = doc, version = version, routes = routes, by_len = by_len, refs = {},
           known = setmetatable({}, { __mode = "k" }), source = where }
end

local function read_doc(path)
  local ok, text = pcall(fs.read, path)
  if not ok then fail("cannot read %s: %s", path, tostring(text)) end
  local decode = json.decode
  if path:match("%.ya?ml$") then decode = require("kb.yaml").decode end
  local okd, doc = pcall(decode, text)
  if not okd then fail("%s: %s", path, tostring(doc)) end
  return doc
end

local OPTION_NAMES = {
  strict = true, strict_request = true, strict_response = true, int64 = true,
  allow_null = true, unknown_query = true, error_schema = true,
}

local function check_options(opts, who)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(who .. ": options must be a table", 3) end
  for k in pairs(opts) do
    if not OPTION_NAMES[k] then error(format("%s: unknown option %s", who, tostring(k)), 3) end
  end
  if opts.int64 ~= nil and opts.int64 ~= "lenient" and opts.int64 ~= "strict" then
    error(who .. ': option int64 must be "lenient" or "strict"', 3)
  end
  if opts.unknown_query ~= nil and opts.unknown_query ~= "error" and opts.unknown_query ~= "ignore" then
    error(who .. ': option unknown_query must be "error" or "ignore"', 3)
  end
  local copy = {}
  for k, v in pairs(opts) do copy[k] = v end
  return copy
end

--- Loads a Swagger 2.0 or OpenAPI 3 document.
-- A path is read once (JSON, or YAML when it ends in .yaml/.yml) and its
-- decoded document and compiled path table are cached for the process;
-- every call returns a new spec object with its own options and overrides.
-- @param src string path, or an already decoded document table
-- @param opts table|nil: strict (bool: unknown properties are errors in
--   requests and responses), strict_request, strict_response (the same for
--   one direction), int64 ("lenient": int64-as-string fields also accept
--   JSON numbers; "strict": they must be strings; default lenient for
--   requests, strict for responses), allow_null (bool: JSON null fits any
--   schema), unknown_query ("error" or "ignore"), error_schema (schema or
--   $ref used for an undocumented status >= 400)
-- @return spec
function M.load(src, opts)
  opts = check_options(opts, "kb.openapi.load")
  local compiled
  if type(src) == "string" then
    local key = fs.abspath(src)
    compiled = docs[key]
    if not compiled then
      compiled = compile(read_doc(key), key)
      docs[key] = compiled
    end
  elseif type(src) == "table" then
    compiled = table_docs[src]
    if not compiled then
      compiled = compile(src, "document")
      table_docs[src] = compiled
    end
  else
    error("kb.openapi.load: expected a path or a document table, got " .. type(src), 2)
  end
  return setmetatable({ compiled = compiled, opts = opts, overrides = {}, responses = {},
                        version = compiled.version, source = compiled.source }, Spec)
end

local function schema_ref(spec, name)
  if spec.version == 2 then return "#/definitions/" .. name end
  return "#/components/schemas/" .. name
end

--- Replaces a named definition (Swagger `#/definitions/NAME`, OpenAPI 3
-- `#/components/schemas/NAME`) for this spec object only: the way to
-- record a server fact the document gets wrong.
-- @param name string definition name
-- @param schema table the schema to use instead
function M.set_definition(self, name, schema)
  if type(name) ~= "string" or type(schema) ~= "table" then
    error("spec:set_definition(name, schema): expected a string and a table", 2)
  end
  self.overrides[schema_ref(self, name)] = schema
end

--- Replaces (or adds) the response schema of one operation and status for
-- this spec object only.
-- @param method string, e.g. "POST"
-- @param template string the path template as in the document
-- @param status string|integer "200", 404 or "default"
-- @param schema table|false the body schema; false = body not checked
function M.set_response(self, method, template, status, schema)
  if type(method) ~= "string" or type(template) ~= "string" or status == nil
     or (type(schema) ~= "table" and schema ~= false) then
    error("spec:set_response(method, template, status, schema): expected two strings, a status and a table or false", 2)
  end
  local key = method:upper() .. " " .. template
  local t = self.responses[key] or {}
  self.responses[key] = t
  t[tostring(status)] = schema
end

M.Spec = Spec
M.resolve = resolve
M.lookup_pointer = lookup_pointer
M.schema_ref = schema_ref

return M
