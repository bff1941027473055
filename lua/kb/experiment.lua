--- kb.experiment: the folder of one experiment and its files.
--
--   <out>/<id>/config/   resolved parameters, generated manifests
--   <out>/<id>/output/   raw outputs (journal.jsonl, logs)
--   <out>/<id>/result/   result.json and the derived reports
--
-- Everything written through an experiment passes kb.secrets' scrubber
-- (docs/security.md): write_json encodes with secrets.encode_json, write
-- scrubs the text.
local fs = require "kb.fs"
local secrets = require "kb.secrets"

local M = {}
local Experiment = {}
Experiment.__index = Experiment

local ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"

-- The id suffix must differ between runs even with the same --seed, so it
-- comes from the kernel, not from math.random.
local function random_suffix(n)
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(n) or tostring(os.time()):rep(n)
  if f then f:close() end
  local out = {}
  for i = 1, n do
    local b = bytes:byte(i) % #ALPHABET + 1
    out[i] = ALPHABET:sub(b, b)
  end
  return table.concat(out)
end

--- Lower-cases a name and replaces everything but [a-z0-9-] with '-', as
-- Kubebench names experiments; never empty, never a path.
function M.sanitize(name)
  local s = tostring(name):lower():gsub("[^a-z0-9-]", "-"):gsub("^-+", ""):gsub("-+$", "")
  if s == "" then s = "experiment" end
  return s:sub(1, 40)
end

--- `<name>-YYYYMMDDhhmm-xxxx` (UTC), Kubebench's experiment id format.
function M.new_id(name)
  return string.format("%s-%s-%s", M.sanitize(name), os.date("!%Y%m%d%H%M"), random_suffix(4))
end

--- Creates the experiment folders under `out` and returns the experiment.
-- opts: out (folder), name, id (optional, sanitized). From then on every
-- failed kb.fs write of a file in the experiment's folder is recorded by
-- kb.outputs (kbrun's exit code then says the results are not fully saved).
function M.create(opts)
  local id = opts.id and M.sanitize(opts.id) or M.new_id(opts.name or "experiment")
  local dir = fs.join(opts.out, id)
  local exp = setmetatable({
    id = id,
    dir = dir,
    config_dir = fs.join(dir, "config"),
    output_dir = fs.join(dir, "output"),
    result_dir = fs.join(dir, "result"),
    out = opts.out,
  }, Experiment)
  for _, d in ipairs({ exp.config_dir, exp.output_dir, exp.result_dir }) do fs.mkdir(d) end
  require("kb.outputs").watch(dir)
  return exp
end

--- Path of a file inside one of the experiment's folders, refusing names
-- that would escape it.
function Experiment:path(folder, name)
  assert(folder == "config" or folder == "output" or folder == "result", "unknown folder " .. tostring(folder))
  if name:find("..", 1, true) or name:sub(1, 1) == "/" then
    error(string.format("file name '%s' would leave the experiment folder", name), 2)
  end
  return fs.join(self.dir, folder, name)
end

--- Writes a JSON document atomically into one of the folders, scrubbed
-- (kb.secrets.encode_json: no credential, registered secret or protected
-- parameter is written).
function Experiment:write_json(folder, name, value)
  local path = self:path(folder, name)
  fs.write(path, secrets.encode_json(value, { pretty = true }) .. "\n")
  return path
end

--- Writes text atomically into one of the folders, scrubbed
-- (kb.secrets.scrub).
function Experiment:write(folder, name, text)
  local path = self:path(folder, name)
  fs.write(path, secrets.scrub(text))
  return path
end

return M
