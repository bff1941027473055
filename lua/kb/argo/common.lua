--- kb.argo.common: what the parts of kb.argo share: the argoproj.io
-- resources, normalised workflows, and the argument checks.
local json = require "kb.json"
local yaml = require "kb.yaml"
local u = require "kb.k8s.util"

local M = {}


M.GROUP, M.VERSION = "argoproj.io", "v1alpha1"
local GROUP, VERSION = M.GROUP, M.VERSION
M.API_VERSION = GROUP .. "/" .. VERSION
-- Resolved kb.k8s resources (no discovery needed).
M.WORKFLOWS = { group = GROUP, version = VERSION, resource = "workflows", kind = "Workflow",
  namespaced = true, prefix = "/apis/" .. M.API_VERSION, api_version = M.API_VERSION }
M.TEMPLATES = { group = GROUP, version = VERSION, resource = "workflowtemplates",
  kind = "WorkflowTemplate", namespaced = true, prefix = "/apis/" .. M.API_VERSION,
  api_version = M.API_VERSION }
M.TEMPLATE_LABEL = "workflows.argoproj.io/workflow-template"
M.WORKFLOW_LABEL = "workflows.argoproj.io/workflow"

--- Terminal phases: Succeeded, Failed, Error.
M.TERMINAL = { Succeeded = true, Failed = true, Error = true }

-- ---- normalised results -----------------------------------------------------

function M.str(v)
  return type(v) == "string" and v ~= "" and v or nil
end

-- Argo's pod names (POD_NAMES=v2, the default): <wf>-<template>-<hash>,
-- where the hash is the node id's suffix; v1 names are the node id.
function M.pod_name(wf_name, node, v1)
  if node.type ~= "Pod" then return nil end
  local id = node.id
  if v1 or not id then return id end
  if node.name == wf_name then return wf_name end
  local hash = id:sub(1, #wf_name + 1) == wf_name .. "-" and id:sub(#wf_name + 2) or nil
  local tmpl = M.str(node.templateName)
  if not hash or not tmpl then return id end
  return wf_name .. "-" .. tmpl .. "-" .. hash
end

function M.nodes_of(wf_name, status, v1)
  local list = json.array({})
  if type(status.nodes) ~= "table" then return list end
  for id, n in pairs(status.nodes) do
    if type(n) == "table" then
      list[#list + 1] = {
        id = M.str(n.id) or id, name = M.str(n.name), display_name = M.str(n.displayName),
        type = M.str(n.type), template_name = M.str(n.templateName), phase = M.str(n.phase),
        started_at = u.parse_time(n.startedAt), finished_at = u.parse_time(n.finishedAt),
        message = M.str(n.message), progress = M.str(n.progress), boundary_id = M.str(n.boundaryID),
        children = type(n.children) == "table" and n.children or nil,
        pod_name = M.pod_name(wf_name, { type = n.type, id = M.str(n.id) or id, name = n.name,
          templateName = n.templateName }, v1),
      }
    end
  end
  table.sort(list, function(a, b)
    local ta, tb = a.started_at or math.huge, b.started_at or math.huge
    if ta ~= tb then return ta < tb end
    return tostring(a.name) < tostring(b.name)
  end)
  return list
end

--- argo.normalise(workflow object) -> {name, namespace, uid, generate_name,
-- labels, annotations, created_at, resource_version, phase ("" while
-- unknown), finished (phase terminal), succeeded (phase == "Succeeded"),
-- progress ("n/m" or nil), done, total (its numbers), started_at,
-- finished_at, duration (finished_at - started_at), message, nodes (a list
-- sorted by start: {id, name, display_name, type, template_name, phase,
-- started_at, finished_at, message, progress, boundary_id, children,
-- pod_name}), raw (the object)}.
function M.normalise(wf)
  if type(wf) ~= "table" then return nil end
  local m = type(wf.metadata) == "table" and wf.metadata or {}
  local st = type(wf.status) == "table" and wf.status or {}
  local phase = M.str(st.phase) or ""
  local done, total = tostring(st.progress or ""):match("^(%d+)/(%d+)$")
  local started, finished = u.parse_time(st.startedAt), u.parse_time(st.finishedAt)
  local ann = type(m.annotations) == "table" and m.annotations or {}
  local name = M.str(m.name)
  return {
    name = name, namespace = M.str(m.namespace), uid = M.str(m.uid),
    generate_name = M.str(m.generateName),
    labels = type(m.labels) == "table" and m.labels or {}, annotations = ann,
    created_at = u.parse_time(m.creationTimestamp), resource_version = M.str(m.resourceVersion),
    phase = phase, finished = M.TERMINAL[phase] == true, succeeded = phase == "Succeeded",
    progress = M.str(st.progress), done = tonumber(done), total = tonumber(total),
    started_at = started, finished_at = finished,
    duration = started and finished and finished - started or nil,
    message = M.str(st.message),
    nodes = M.nodes_of(name or "", st, ann["workflows.argoproj.io/pod-name-format"] == "v1"),
    raw = wf,
  }
end

function M.normalise_template(t)
  local m = type(t) == "table" and type(t.metadata) == "table" and t.metadata or {}
  return { name = M.str(m.name), namespace = M.str(m.namespace), uid = M.str(m.uid),
    labels = type(m.labels) == "table" and m.labels or {},
    created_at = u.parse_time(m.creationTimestamp), raw = t }
end

function M.esc(v)
  return (tostring(v):gsub("[^%w%-%._~]", function(ch) return string.format("%%%02X", ch:byte()) end))
end

function M.crd_path(res, ns, name)
  return "/apis/" .. M.API_VERSION .. "/namespaces/" .. M.esc(ns) .. "/" .. res.resource
    .. (name and ("/" .. M.esc(name)) or "")
end

function M.check_opts(opts, allowed, fn)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error("kb.argo: " .. fn .. ": options must be a table", 3) end
  for k in pairs(opts) do
    if not allowed[k] then error(string.format("kb.argo: %s: unknown option '%s'", fn, tostring(k)), 3) end
  end
  return opts
end

function M.need_name(name, fn)
  if type(name) ~= "string" or name == "" then
    error("kb.argo: " .. fn .. ": name must be a non-empty string, got " .. tostring(name), 3)
  end
end

-- An object from a table or YAML / JSON text.
function M.object_of(what, kind, fn)
  if type(what) == "string" then
    local ok, doc = pcall(yaml.decode, what)
    if not ok or type(doc) ~= "table" then
      error(string.format("kb.argo: %s: the text is not a YAML mapping: %s", fn,
        tostring(u.is_error(doc) and doc.message or doc)), 3)
    end
    what = doc
  end
  if type(what) ~= "table" then error("kb.argo: " .. fn .. ": takes a " .. kind .. " (a table or YAML text)", 3) end
  if what.kind ~= nil and what.kind ~= kind then
    error(string.format("kb.argo: %s: expected kind %s, got %s", fn, kind, tostring(what.kind)), 3)
  end
  local obj = u.deep_copy(what)
  obj.apiVersion, obj.kind = obj.apiVersion or M.API_VERSION, kind
  if type(obj.metadata) ~= "table" then obj.metadata = {} end
  return obj
end

return M
