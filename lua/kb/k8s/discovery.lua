--- kb.k8s.discovery: resolves what a caller names ("Pod", "pods", "po",
-- "deployments.apps", "jobs.v1.batch", "TFJob", {group, version, resource})
-- to a resource of the server, with the legacy discovery documents kubectl
-- reads: /api/v1, /apis, then /apis/<group>/<version> of each group when a
-- lookup needs it. Documents are cached for the life of the client; a name
-- that is not found drops the cache and looks once more (a CRD may just
-- have been installed).
--
-- A resolved resource: { group, version, resource, kind, namespaced,
-- api_version ("v1", "batch/v1"), prefix ("/api/v1", "/apis/batch/v1"),
-- verbs = {get = true, ...} }.
local u = require "kb.k8s.util"

local M = {}

local Discovery = {}
Discovery.__index = Discovery

--- d = discovery.new(get) where get(path, op) returns a decoded document
-- or raises (not_found for a missing group version).
function M.new(get)
  return setmetatable({ get = get, gv = {}, groups = nil }, Discovery)
end

function Discovery:reset()
  self.gv, self.groups = {}, nil
end

local function split_gv(api_version)
  local g, v = api_version:match("^(.-)/([^/]+)$")
  if g then return g, v end
  return "", api_version
end

-- The resources of a group version: list of resolved entries (cached).
-- nil when the server does not serve it.
function Discovery:group_version(group, version)
  local key = group == "" and version or (group .. "/" .. version)
  local cached = self.gv[key]
  if cached ~= nil then return cached or nil end
  local path = group == "" and ("/api/" .. version) or ("/apis/" .. key)
  local ok, doc = pcall(self.get, path, "discovery")
  if not ok then
    if u.is_error(doc) and doc.class == "not_found" then
      self.gv[key] = false
      return nil
    end
    error(doc, 0)
  end
  local list = {}
  for _, r in ipairs(type(doc.resources) == "table" and doc.resources or {}) do
    if type(r.name) == "string" and not r.name:find("/", 1, true) then
      local verbs = {}
      for _, v in ipairs(type(r.verbs) == "table" and r.verbs or {}) do verbs[v] = true end
      local shorts = {}
      for _, s in ipairs(type(r.shortNames) == "table" and r.shortNames or {}) do
        shorts[#shorts + 1] = s:lower()
      end
      local kind = type(r.kind) == "string" and r.kind or r.name
      local singular = type(r.singularName) == "string" and r.singularName ~= ""
        and r.singularName or kind:lower()
      list[#list + 1] = {
        group = group, version = version, resource = r.name, kind = kind,
        namespaced = r.namespaced == true, api_version = key,
        prefix = path, verbs = verbs, singular = singular, short_names = shorts,
      }
    end
  end
  self.gv[key] = list
  return list
end

-- {group = {preferred version, versions...}} in server order (cached).
function Discovery:group_list()
  if self.groups then return self.groups end
  local doc = self.get("/apis", "discovery")
  local groups = {}
  for _, g in ipairs(type(doc.groups) == "table" and doc.groups or {}) do
    local versions = {}
    local pref = type(g.preferredVersion) == "table" and g.preferredVersion.version
    if pref then versions[1] = pref end
    for _, v in ipairs(type(g.versions) == "table" and g.versions or {}) do
      if v.version ~= pref then versions[#versions + 1] = v.version end
    end
    groups[#groups + 1] = { name = g.name, versions = versions }
  end
  self.groups = groups
  return groups
end

local function matches(r, name)
  if r.resource == name or r.singular == name or r.kind:lower() == name then return true end
  for _, s in ipairs(r.short_names) do
    if s == name then return true end
  end
  return false
end

local function find_in(list, name)
  for _, r in ipairs(list or {}) do
    if matches(r, name) then return r end
  end
end

-- Searches one group (all its versions, preferred first), or every group.
function Discovery:search(name, group, version)
  if group == "" or group == nil and version == nil then
    local r = find_in(self:group_version("", version or "v1"), name)
    if r or group == "" then return r end
  end
  for _, g in ipairs(self:group_list()) do
    if group == nil or g.name == group then
      local versions = version and { version } or g.versions
      for _, v in ipairs(versions) do
        local r = find_in(self:group_version(g.name, v), name)
        if r then return r end
        if group == nil then break end -- other groups: the preferred version only
      end
    end
  end
end

local function describe(spec)
  if type(spec) == "table" then
    return string.format("{group=%q, version=%q, resource=%q}", tostring(spec.group or spec[1]),
      tostring(spec.version or spec[2]), tostring(spec.resource or spec[3]))
  end
  return "'" .. tostring(spec) .. "'"
end

-- name, group, version of a string spec: "pods", "deployments.apps",
-- "jobs.v1.batch".
local function parse_name(spec)
  local name, rest = spec:match("^([^.]+)%.(.+)$")
  if not name then return spec:lower(), nil, nil end
  local version, group = rest:match("^(v%d+[%w]*)%.(.+)$")
  if version then return name:lower(), group, version end
  return name:lower(), rest, nil
end

function Discovery:lookup(spec)
  if type(spec) == "table" then
    local group = spec.group or spec[1] or ""
    local version = spec.version or spec[2]
    local resource = spec.resource or spec[3]
    if type(version) ~= "string" or type(resource) ~= "string" then
      error("kb.k8s: a resource table needs {group, version, resource}, got " .. describe(spec), 0)
    end
    if spec.namespaced ~= nil then
      -- Given in full: no discovery needed (e.g. a server without it).
      local key = group == "" and version or (group .. "/" .. version)
      return {
        group = group, version = version, resource = resource, kind = spec.kind or resource,
        namespaced = spec.namespaced, api_version = key,
        prefix = group == "" and ("/api/" .. version) or ("/apis/" .. key),
        verbs = {}, singular = resource, short_names = {},
      }
    end
    local list = self:group_version(group, version)
    for _, r in ipairs(list or {}) do
      if r.resource == resource then return r end
    end
    return nil
  end
  if type(spec) ~= "string" or spec == "" then
    error("kb.k8s: a kind must be a name (\"Pod\", \"pods\", \"deployments.apps\") or a table "
      .. "{group, version, resource}, got " .. tostring(spec), 0)
  end
  return self:search(parse_name(spec))
end

--- The resource named by spec; raises class not_found when the server
-- has none of that name.
function Discovery:resolve(spec)
  if type(spec) == "table" and spec.prefix and spec.resource then return spec end
  local r = self:lookup(spec)
  if r then return r end
  self:reset()
  r = self:lookup(spec)
  if r then return r end
  u.raise("not_found", string.format("kb.k8s: the server has no resource type %s (is its "
    .. "CustomResourceDefinition installed? kubectl api-resources lists them)", describe(spec)),
    { kind = type(spec) == "string" and spec or nil })
end

--- The resource of an object's apiVersion and kind.
function Discovery:resolve_object(obj)
  if type(obj) ~= "table" or type(obj.apiVersion) ~= "string" or type(obj.kind) ~= "string" then
    error("kb.k8s: an object needs apiVersion and kind", 0)
  end
  local group, version = split_gv(obj.apiVersion)
  local function find()
    for _, r in ipairs(self:group_version(group, version) or {}) do
      if r.kind == obj.kind then return r end
    end
  end
  local r = find()
  if r then return r end
  self.gv[group == "" and version or (group .. "/" .. version)] = nil
  r = find()
  if r then return r end
  u.raise("not_found", string.format("kb.k8s: the server has no kind %s in %s (is its "
    .. "CustomResourceDefinition installed?)", obj.kind, obj.apiVersion),
    { kind = obj.kind, api_version = obj.apiVersion })
end

return M
