--- kb.kubebench.report: report.csv, one row per experiment, shared by
-- every experiment (and every kbrun process) writing to the same folder.
--
--   local report = require "kb.kubebench.report"
--   report.append("experiments/report.csv", { experiment_id = id,
--     started_at = "2025-01-01T12:00:00Z", status = "passed",
--     result = { images_per_sec = 12.5, gpu = { util = 0.9 } } })
--
-- Rules (what Kubebench's reporter got wrong):
--   * the header is the union of every row's keys: experiment_id,
--     started_at, status first, then the rest sorted bytewise, so the same
--     rows give the same file whatever order they came in;
--   * a row with a new key adds a column: the whole file is rewritten
--     atomically (temp file + rename) and old rows get empty cells; a row
--     without new keys is one O_APPEND write;
--   * every append holds an flock on report.csv.lock, so concurrent
--     experiments and processes never lose or interleave rows;
--   * nested tables are flattened with dotted keys (gpu.util); lists are
--     kept whole as JSON text in one cell.
local csv = require "kb.csv"
local fs = require "kb.fs"
local json = require "kb.json"

local M = {}

M.FIRST = { "experiment_id", "started_at", "status" }
local FIRST_RANK = {}
for i, k in ipairs(M.FIRST) do FIRST_RANK[k] = i end

local ARRAY_MT = getmetatable(json.array())

local function is_list(v)
  return getmetatable(v) == ARRAY_MT or (#v > 0 and next(v, #v) == nil)
end

--- Flattens nested tables into one level with dotted keys. Lists become
-- JSON text; json.null stays (an empty cell).
function M.flatten(t, prefix, out)
  out = out or {}
  for k, v in pairs(t) do
    local key = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    if type(v) == "table" and not is_list(v) and next(v) ~= nil then
      M.flatten(v, key, out)
    elseif type(v) == "table" then
      out[key] = json.encode(v)
    else
      out[key] = v
    end
  end
  return out
end

--- Orders column names: experiment_id, started_at, status, then bytewise.
function M.order(names)
  table.sort(names, function(a, b)
    local ra, rb = FIRST_RANK[a], FIRST_RANK[b]
    if ra or rb then
      if ra and rb then return ra < rb end
      return ra ~= nil
    end
    return a < b
  end)
  return names
end

local function cell(v)
  if v == nil or v == json.null then return "" end
  return v
end

-- Under the lock: reads the file, adds columns if needed, appends the row.
local function append_locked(path, row)
  local text = fs.exists(path) and fs.read(path) or ""
  local rows = text ~= "" and csv.parse(text) or {}
  local header = rows[1] or {}
  local known = {}
  for _, name in ipairs(header) do known[name] = true end
  local missing = {}
  for _, k in ipairs(M.FIRST) do if not known[k] then missing[#missing + 1] = k end end
  for k in pairs(row) do
    if not known[k] and not FIRST_RANK[k] then missing[#missing + 1] = k end
  end
  if #missing == 0 then
    local cells = { n = #header }
    for i, name in ipairs(header) do cells[i] = cell(row[name]) end
    fs.append(path, csv.encode_row(cells) .. "\n")
    return header
  end
  -- new columns: rebuild the whole file in the canonical order
  local columns = {}
  for _, name in ipairs(header) do columns[#columns + 1] = name end
  for _, name in ipairs(missing) do columns[#columns + 1] = name end
  M.order(columns)
  local out = { csv.encode_row(columns) }
  for r = 2, #rows do
    local old, cells = {}, { n = #columns }
    for i, name in ipairs(header) do old[name] = rows[r][i] end
    for i, name in ipairs(columns) do cells[i] = old[name] or "" end
    out[#out + 1] = csv.encode_row(cells)
  end
  local cells = { n = #columns }
  for i, name in ipairs(columns) do cells[i] = cell(row[name]) end
  out[#out + 1] = csv.encode_row(cells)
  fs.write(path, table.concat(out, "\n") .. "\n")
  return columns
end

--- Appends one row (a table, flattened with dotted keys) to the CSV at
-- `path`, creating it and its folder. Returns the file's header.
function M.append(path, row)
  if type(path) ~= "string" or path == "" then
    error("kb.kubebench.report.append: path must be a non-empty string", 2)
  end
  if type(row) ~= "table" then
    error("kb.kubebench.report.append: row must be a table, got " .. type(row), 2)
  end
  local flat = M.flatten(row)
  fs.mkdir(fs.dirname(path))
  return fs.with_lock(path, append_locked, path, flat)
end

--- Reads report.csv back: rows as maps keyed by the header, and the header.
function M.read(path)
  if not fs.exists(path) then return {}, {} end
  return csv.parse(fs.read(path), { header = true })
end

return M
