--- kb.sweep.journal: the record of a sweep's finished cells, which makes
-- a sweep resumable (docs/sweep.md, "Resuming").
--
--   <sweep dir>/journal.jsonl, one JSON object a line (kb.journal):
--     {"event":"sweep", "hash":..., "definition":{...}, "seed":42, ...}   first line
--     {"event":"resume", ...}                                              each re-run
--     {"event":"start", "key":..., "id":"c003", "repeat":1, ...}           a cell starts
--     {"event":"done", "key":..., "status":"ok", "metrics":{...}, ...}     a cell finished
--
-- Each line is one write(2) before the cell's task goes on, so a SIGKILL
-- loses only the cells still running. A re-run skips every (key, repeat)
-- with a "done" line. The definition's hash (FNV-1a 64 of its canonical
-- JSON) is compared first: a changed definition is refused with the list
-- of what changed.
local json = require "kb.json"
local fs = require "kb.fs"
local kjournal = require "kb.journal"
local sampling = require "kb.sweep.sampling"
local params = require "kb.params"

local M = {}
local format = string.format

--- The canonical text of a definition: JSON with sorted keys.
function M.canonical(def)
  return json.encode(def, { sort_keys = true })
end

--- The hash of a definition: 16 hex digits of FNV-1a 64 of its canonical JSON.
function M.hash(def)
  return sampling.hex64(M.canonical(def))
end

local function short(v)
  if v == nil or v == json.null then return "(none)" end
  local text = type(v) == "table" and json.encode(v, { sort_keys = true }) or
    (type(v) == "string" and format("%q", v) or tostring(v))
  return #text > 80 and (text:sub(1, 77) .. "...") or text
end

local function is_list(t)
  return type(t) == "table" and (t[1] ~= nil or getmetatable(t) == getmetatable(json.array({})))
end

--- What differs between two decoded definitions: a list of
-- "path: old -> new" lines (lists compare whole, maps key by key).
function M.diff(old, new, path, out)
  out = out or {}
  path = path or ""
  if type(old) == "table" and type(new) == "table" and not is_list(old) and not is_list(new) then
    local keys, seen = {}, {}
    for k in pairs(old) do if not seen[k] then keys[#keys + 1], seen[k] = k, true end end
    for k in pairs(new) do if not seen[k] then keys[#keys + 1], seen[k] = k, true end end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      M.diff(old[k], new[k], path == "" and tostring(k) or (path .. "." .. tostring(k)), out)
    end
    return out
  end
  if M.canonical({ v = old }) ~= M.canonical({ v = new }) then
    out[#out + 1] = format("%s: %s -> %s", path == "" and "(definition)" or path, short(old), short(new))
  end
  return out
end

local Journal = {}
Journal.__index = Journal

--- The key of a (cell, repeat) pair in the journal.
function M.run_key(key, rep) return key .. "#" .. rep end

--- Opens the journal of the sweep in `dir` for the definition `def`
-- (a JSON-able table) with its `seed`, creating it if new. Returns the
-- journal: j.done = {[run key] = done record}, j.seed (the seed the sweep
-- started with, which a resumed sweep keeps), j.resumed (true if records
-- existed), j.skipped (partial lines). Raises when the journal was
-- written by another definition, naming the differences.
function M.open(dir, def, seed, opts)
  opts = opts or {}
  local path = fs.join(dir, "journal.jsonl")
  local hash = M.hash(def)
  local self = setmetatable({ path = path, hash = hash, done = {}, started = {}, seed = seed,
    resumed = false, skipped = 0, order = {} }, Journal)
  if fs.exists(path) == "file" then
    local records, skipped = kjournal.read(path)
    self.skipped = skipped
    local head = records[1]
    local finished = false -- a journal without a finished cell holds nothing to keep
    for _, r in ipairs(records) do if r.event == "done" then finished = true; break end end
    if head and head.event == "sweep" and head.hash ~= hash and not finished then
      -- e.g. a first run whose cells refused a parameter: start over
      fs.remove(path)
      records, head, skipped = {}, nil, 0
      self.skipped = 0
    end
    if head and head.event == "sweep" then
      if head.hash ~= hash then
        local changes = M.diff(head.definition, json.decode(M.canonical(def)))
        -- the user's choice to make, not a bug: one message, exit 2 (kb.params.refuse)
        params.refuse("kb.sweep: %s was written by another definition of sweep '%s' (hash %s, now %s): %s. "
          .. "Nothing was run. To finish the old sweep, run it with its old parameters; to start a "
          .. "new one, give another experiments folder (-o DIR), or fresh = true (fresh=true on the "
          .. "command line of scenarios/sweep_taxi.lua) to move the old results aside; a scenario "
          .. "changing what a cell means sets another `version` or `name`",
          path, tostring(def.name), tostring(head.hash), hash,
          #changes > 0 and table.concat(changes, "; ") or "the canonical text differs")
      end
      self.seed = head.seed
      if seed ~= nil and head.seed ~= seed and opts.warn then
        opts.warn(format("sweep '%s': resuming with the journal's seed %s (this run's seed %s is not used)",
          tostring(def.name), tostring(head.seed), tostring(seed)))
      end
      for _, r in ipairs(records) do
        if r.event == "done" and r.key and r["repeat"] then
          local k = M.run_key(r.key, r["repeat"])
          if not self.done[k] then self.order[#self.order + 1] = k end
          self.done[k] = r
        elseif r.event == "start" and r.key then
          self.started[M.run_key(r.key, r["repeat"])] = (self.started[M.run_key(r.key, r["repeat"])] or 0) + 1
        end
      end
      self.resumed = true
    elseif head ~= nil or skipped > 0 then
      params.refuse("kb.sweep: %s is not a sweep journal (its first line is not a sweep header): "
        .. "nothing was run; give the sweep a folder of its own (another `name`, or -o DIR)", path)
    end
  end
  self.out = kjournal.open(path)
  if self.resumed then
    self.out:write{ event = "resume", wall = opts.wall, finished = #self.order }
  else
    self.out:write{ event = "sweep", hash = hash, definition = def, seed = seed, wall = opts.wall,
      kbrun = opts.kbrun }
  end
  return self
end

--- Records that a cell's repeat starts.
function Journal:start(rec)
  rec.event = "start"
  self.out:write(rec)
end

--- Records a finished cell repeat (one line, written before returning).
-- Returns the record as it reads back from the journal, so that the
-- reports of an interrupted and an uninterrupted sweep see the same values.
function Journal:finish(rec)
  rec.event = "done"
  local line = json.encode(rec)
  self.out:write(rec)
  local back = json.decode(line)
  local k = M.run_key(rec.key, rec["repeat"])
  if not self.done[k] then self.order[#self.order + 1] = k end
  self.done[k] = back
  return back
end

--- Closes the file (fsync).
function Journal:close()
  if self.out then self.out:close() end
  self.out = nil
end

Journal.__close = Journal.close

return M
