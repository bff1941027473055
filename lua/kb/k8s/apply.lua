--- kb.k8s.apply: kubectl's client-side apply for multi-document YAML or
-- object tables.
--
--   for _, r in ipairs(c:apply(kb.fs.read("job.yaml"))) do
--     print(r.action, r.object.kind, r.object.metadata.name)
--   end
--
-- Each object gets the annotation kubectl.kubernetes.io/last-applied-
-- configuration (its JSON, without that annotation) and is created. When
-- it already exists (409 AlreadyExists), a patch is computed from the last
-- applied configuration stored on the live object to the new one, as
-- kubectl does: changed and new fields are set, fields that were applied
-- before and are gone now are deleted (null). Built-in types (core, apps,
-- batch, ...) are patched with a strategic merge patch, custom resources
-- with a JSON merge patch. An object whose configuration equals the last
-- applied one is left alone ("unchanged", no request).
--
-- Limitation: lists are sent whole; with a strategic merge patch the
-- server merges list items by their keys (containers by name), so an item
-- removed from the YAML is not removed from the live object (kubectl adds
-- $setElementOrder / $patch: delete directives for that; kbrun does not).
local json = require "kb.json"
local u = require "kb.k8s.util"

local M = {}

local ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
M.ANNOTATION = ANNOTATION

-- Groups whose types the server patches strategically (built-in types).
local BUILTIN = {
  [""] = true, apps = true, batch = true, autoscaling = true, policy = true,
  ["networking.k8s.io"] = true, ["rbac.authorization.k8s.io"] = true,
  ["storage.k8s.io"] = true, ["scheduling.k8s.io"] = true, ["coordination.k8s.io"] = true,
  ["discovery.k8s.io"] = true, ["node.k8s.io"] = true, ["events.k8s.io"] = true,
  ["certificates.k8s.io"] = true, ["admissionregistration.k8s.io"] = true,
}

local function is_map(v)
  return type(v) == "table" and not u.is_array(v)
end

--- The merge patch turning `old` (the last applied configuration) into
-- `new`: new or changed fields, and json.null for fields that are gone.
-- nil when nothing changed.
function M.diff(old, new)
  local patch, changed = {}, false
  for k, v in pairs(new) do
    local o = old[k]
    if is_map(v) and is_map(o) then
      local sub = M.diff(o, v)
      if sub then patch[k], changed = sub, true end
    elseif not u.deep_equal(o, v) then
      patch[k], changed = v, true
    end
  end
  for k in pairs(old) do
    if new[k] == nil then patch[k], changed = json.null, true end
  end
  return changed and patch or nil
end

-- The object as the user gave it, without the annotation: what is stored
-- as the last applied configuration.
local function applied_config(obj)
  local copy = u.deep_copy(obj)
  local m = copy.metadata
  if type(m) == "table" and type(m.annotations) == "table" then
    m.annotations[ANNOTATION] = nil
    if next(m.annotations) == nil then m.annotations = nil end
  end
  return copy
end

local function objects_of(what)
  if type(what) == "string" then return require("kb.k8s").objects(what) end
  if type(what) ~= "table" then
    error("kb.k8s: apply takes YAML text, an object or a list of objects", 3)
  end
  if what.kind ~= nil or what.apiVersion ~= nil then return { what } end
  return what
end

local function apply_one(c, obj, opts)
  if type(obj) ~= "table" or type(obj.metadata) ~= "table" or type(obj.metadata.name) ~= "string" then
    error("kb.k8s: apply: every object needs metadata.name (generateName cannot be applied)", 0)
  end
  local res = c:resource_of(obj)
  local config = applied_config(obj)
  local text = json.encode(config)
  local body = u.deep_copy(config)
  body.metadata.annotations = body.metadata.annotations or {}
  body.metadata.annotations[ANNOTATION] = text
  local ns = res.namespaced and (opts.namespace or obj.metadata.namespace or c.namespace) or nil
  local name = obj.metadata.name
  local ok, created = pcall(c.create, c, body, { namespace = ns, field_manager = opts.field_manager
    or "kbrun-client-side-apply" })
  if ok then return { object = created, action = "created" } end
  if not (u.is_error(created) and created.class == "conflict" and created.reason == "AlreadyExists") then
    error(created, 0)
  end
  local live = c:get(res, name, { namespace = ns })
  local lm = type(live.metadata) == "table" and live.metadata or {}
  local last = type(lm.annotations) == "table" and lm.annotations[ANNOTATION]
  local old = {}
  if type(last) == "string" then
    local okd, d = pcall(json.decode, last)
    if okd and type(d) == "table" then old = d end
  end
  local patch = M.diff(old, config)
  if not patch then return { object = live, action = "unchanged" } end
  patch.metadata = type(patch.metadata) == "table" and patch.metadata or {}
  patch.metadata.annotations = type(patch.metadata.annotations) == "table"
    and patch.metadata.annotations or {}
  patch.metadata.annotations[ANNOTATION] = text
  local ptype = BUILTIN[res.group] and "strategic" or "merge"
  local patched = c:patch(res, name, patch, { type = ptype, namespace = ns,
    field_manager = opts.field_manager or "kbrun-client-side-apply" })
  return { object = patched, action = "configured" }
end

--- apply(c, what [, opts]) -> list of {object, action}. what: YAML text
-- (several documents; List kinds are flattened), one object, or a list of
-- objects. opts: namespace (for objects without one), field_manager.
function M.apply(c, what, opts)
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "namespace" and k ~= "field_manager" then
      error(string.format("kb.k8s: apply: unknown option '%s'", tostring(k)), 3)
    end
  end
  local out = {}
  for _, obj in ipairs(objects_of(what)) do out[#out + 1] = apply_one(c, obj, opts) end
  return out
end

return M
