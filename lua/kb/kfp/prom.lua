--- kb.kfp.prom: the Prometheus text a KFP API server serves on /metrics,
-- as plain tables, the difference between two scrapes, and the server-side
-- view of a benchmark it gives (per-handler counters, gRPC handling times).
--
--   local prom = require "kb.kfp.prom"
--   local before = prom.parse(text1)          -- later: after = prom.parse(text2)
--   local d = prom.delta(before, after)        -- { [key] = after - before } (counters)
--   local grpc = prom.grpc(before, after)      -- { ["run.create"] = {count, mean, p50, ...} }
--   prom.quantile(0.5, { {le = 0.1, count = 3}, {le = 0.3, count = 10}, ... })
--
-- KFP serves go-grpc-prometheus' grpc_server_handling_seconds histogram
-- (buckets 0.005 ... 300 s) for every gRPC method behind the REST gateway,
-- grpc_server_handled_total{grpc_code} and per-handler counters such as
-- run_server_create_requests (shared/notes/kfp.md §4). Quantiles from
-- buckets are estimates: linear inside the bucket, as PromQL's
-- histogram_quantile computes them.
local M = {}

local function unescape(s)
  return (s:gsub("\\(.)", { n = "\n", ["\\"] = "\\", ['"'] = '"' }))
end

-- The labels of `{a="x",b="y"}` (text between the braces) as a table.
local function parse_labels(text)
  local labels, pos = {}, 1
  while pos <= #text do
    local name, stop = text:match("^%s*([%a_][%w_]*)%s*=%s*\"()", pos)
    if not name then break end
    local value, i = {}, stop
    while i <= #text do
      local ch = text:sub(i, i)
      if ch == "\\" then
        value[#value + 1] = text:sub(i, i + 1)
        i = i + 2
      elseif ch == '"' then
        break
      else
        value[#value + 1] = ch
        i = i + 1
      end
    end
    labels[name] = unescape(table.concat(value))
    pos = (text:find(",", i + 1, true) or #text) + 1
  end
  return labels
end

local function number_of(text)
  if text == "+Inf" or text == "Inf" then return math.huge end
  if text == "-Inf" then return -math.huge end
  if text == "NaN" then return 0 / 0 end
  return tonumber(text)
end

--- The key of a sample: its name and its labels sorted by name, e.g.
-- `grpc_server_handled_total{grpc_code="OK",grpc_method="GetRun"}`.
function M.key(name, labels)
  local names = {}
  for k in pairs(labels or {}) do names[#names + 1] = k end
  if #names == 0 then return name end
  table.sort(names)
  local parts = {}
  for i, k in ipairs(names) do parts[i] = string.format('%s=%q', k, labels[k]) end
  return name .. "{" .. table.concat(parts, ",") .. "}"
end

-- One sample line: name, labels, value; nil for a line that is not one.
local function parse_sample(line)
  local name, rest = line:match("^([%a_:][%w_:]*)(.*)$")
  if not name then return nil end
  local labels = {}
  if rest:sub(1, 1) == "{" then
    local close = rest:find("}%s", 2) or rest:find("}$", 2)
    if not close then return nil end
    labels = parse_labels(rest:sub(2, close - 1))
    rest = rest:sub(close + 1)
  end
  local value = number_of(rest:match("^%s+(%S+)") or "")
  if value == nil then return nil end
  return name, labels, value
end

--- Parses exposition text into { samples = { [key] = {name, labels,
-- value} }, types = { [family] = "counter" | "gauge" | "histogram" | ... } }.
-- Lines it cannot read are skipped (and counted in .skipped).
function M.parse(text)
  local out = { samples = {}, types = {}, skipped = 0 }
  for line in tostring(text):gmatch("[^\n]+") do
    local family, kind = line:match("^#%s*TYPE%s+(%S+)%s+(%S+)")
    if family then
      out.types[family] = kind
    elseif line:find("%S") and not line:match("^%s*#") then
      local name, labels, value = parse_sample(line)
      if name then
        out.samples[M.key(name, labels)] = { name = name, labels = labels, value = value }
      else
        out.skipped = out.skipped + 1
      end
    end
  end
  return out
end

-- The family of a sample name (histogram series end in _bucket/_sum/_count).
local function family_of(scrape, name)
  if scrape.types[name] then return name end
  local base = name:match("^(.-)_bucket$") or name:match("^(.-)_sum$") or name:match("^(.-)_count$")
  if base and scrape.types[base] then return base end
  return name
end

--- The kind of a sample: "counter", "gauge", "histogram", "summary" or
-- "untyped" (then a name ending in _total counts as a counter).
function M.kind(scrape, name)
  local kind = scrape.types[family_of(scrape, name)]
  if kind == nil or kind == "untyped" then
    return name:match("_total$") and "counter" or "untyped"
  end
  return kind
end

--- The change of every cumulative series (counters, histogram and summary
-- series) from scrape a to scrape b: { [key] = {name, labels, value} }.
-- A series missing from a counts from 0; one that went down (the server
-- restarted) counts from 0 too. Zero changes are left out.
function M.delta(a, b)
  local out = {}
  for key, s in pairs(b.samples) do
    local kind = M.kind(b, s.name)
    if kind == "counter" or kind == "histogram" or kind == "summary" then
      local before = a.samples[key] and a.samples[key].value or 0
      local d = s.value >= before and s.value - before or s.value
      if d ~= 0 then out[key] = { name = s.name, labels = s.labels, value = d } end
    end
  end
  return out
end

--- Gauges of both scrapes: { [key] = {name, labels, before, after} }.
function M.gauges(a, b)
  local out = {}
  for key, s in pairs(b.samples) do
    if M.kind(b, s.name) == "gauge" then
      out[key] = { name = s.name, labels = s.labels, after = s.value,
        before = a.samples[key] and a.samples[key].value or nil }
    end
  end
  return out
end

--- The q-quantile (0..1) of cumulative buckets {le, count} sorted by le,
-- interpolated linearly inside its bucket (the first bucket from 0, as
-- PromQL does); nil without observations. A quantile in the +Inf bucket is
-- the highest finite bound.
function M.quantile(q, buckets)
  local n = #buckets > 0 and buckets[#buckets].count or 0
  if n <= 0 then return nil end
  local rank = q * n
  local prev_le, prev_count = 0, 0
  for _, b in ipairs(buckets) do
    if b.count >= rank then
      if b.le == math.huge then return prev_le end
      if b.count == prev_count then return b.le end
      return prev_le + (b.le - prev_le) * (rank - prev_count) / (b.count - prev_count)
    end
    prev_le, prev_count = b.le, b.count
  end
  return prev_le
end

--- kbrun's op name of a gRPC method: CreateRun -> run.create, ListRunsV1
-- -> run.list, GetPipelineVersion -> pipeline_version.get.
function M.op_name(method)
  local m = tostring(method):gsub("V1$", "")
  local verb, noun = m:match("^(%u%l*)(%u.*)$")
  if not verb then return m end
  if verb == "List" then noun = noun:gsub("ies$", "y"):gsub("s$", "") end
  noun = noun:gsub("(%l)(%u)", "%1_%2"):lower()
  return noun .. "." .. verb:lower()
end

local function method_entry(out, labels)
  local op = M.op_name(labels.grpc_method)
  local e = out[op]
  if not e then
    e = { method = labels.grpc_method, service = labels.grpc_service, count = 0, sum = 0,
      codes = {}, buckets = {} }
    out[op] = e
  end
  return e
end

--- The server-side view per op from two scrapes: { [op] = {method,
-- service, count, sum, mean, p50, p90, p99, codes = {OK = n, ...},
-- errors} } from grpc_server_handling_seconds and grpc_server_handled_total.
-- Bucket quantiles are estimates (see M.quantile).
function M.grpc(a, b)
  local out = {}
  for _, s in pairs(M.delta(a, b)) do
    local l = s.labels
    if l.grpc_method then
      local e = method_entry(out, l)
      if s.name == "grpc_server_handling_seconds_bucket" then
        local le = number_of(l.le or "")
        if le then e.buckets[#e.buckets + 1] = { le = le, count = s.value } end
      elseif s.name == "grpc_server_handling_seconds_sum" then
        e.sum = e.sum + s.value
      elseif s.name == "grpc_server_handling_seconds_count" then
        e.count = e.count + s.value
      elseif s.name == "grpc_server_handled_total" then
        e.codes[l.grpc_code or "?"] = (e.codes[l.grpc_code or "?"] or 0) + s.value
      end
    end
  end
  for _, e in pairs(out) do
    table.sort(e.buckets, function(x, y) return x.le < y.le end)
    e.mean = e.count > 0 and e.sum / e.count or nil
    e.p50, e.p90, e.p99 = M.quantile(0.5, e.buckets), M.quantile(0.9, e.buckets),
      M.quantile(0.99, e.buckets)
    e.errors = 0
    for code, n in pairs(e.codes) do
      if code ~= "OK" then e.errors = e.errors + n end
    end
    e.buckets = nil
  end
  return out
end

--- KFP's per-handler request counters that changed between two scrapes:
-- { run_server_create_requests = 50, ... } (series without labels only).
function M.handler_counters(a, b)
  local out = {}
  for _, s in pairs(M.delta(a, b)) do
    if next(s.labels) == nil and s.name:match("_requests$") then out[s.name] = s.value end
  end
  return out
end

return M
