--- kb.journal: an append-only JSON-lines file of results as they happen.
--
--   local journal = require "kb.journal"
--   local j = journal.open(exp:path("output", "journal.jsonl"))
--   j:write({ t = kb.now(), event = "run.done", run = id, seconds = 12.5 })
--   j:close()
--
--   local records, skipped = journal.read(path)
--
-- Each :write encodes one record with kb.json (compact, so one line) and
-- hands "<json>\n" to the kernel in a single write(2) before returning: a
-- SIGKILL of kbrun loses nothing written before it. (A machine crash can
-- still lose what the disk had not stored; :sync() and :close() fsync.)
--
-- A kill in the middle of a write(2) can leave a partial last line.
-- journal.read skips lines that are not valid JSON and returns how many it
-- skipped; journal.open ends such a partial line first, so records
-- appended by a resumed run are never glued to it.
local fs = require "kb.fs"
local json = require "kb.json"

local M = {}

local Journal = {}
Journal.__index = Journal

-- Does the file end in the middle of a line?
local function ends_mid_line(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local last = f:seek("end", -1) and f:read(1)
  f:close()
  return last ~= nil and last ~= "\n"
end

--- Opens (creating it and its directory if needed) a journal for appending.
function M.open(path)
  if type(path) ~= "string" then error("kb.journal.open: path must be a string", 2) end
  fs.mkdir(fs.dirname(path))
  local partial = ends_mid_line(path)
  local out = fs.open_append(path)
  if partial then out:write("\n") end
  return setmetatable({ path = path, out = out, count = 0 }, Journal)
end

--- Appends one record (any value kb.json can encode) as one line.
function Journal:write(record)
  if not self.out then error(string.format("kb.journal: '%s' is closed", self.path), 2) end
  local line = json.encode(record)
  self.out:write(line, "\n")
  self.count = self.count + 1
  return self
end

--- Forces the records written so far to disk (fsync).
function Journal:sync()
  if self.out then self.out:sync() end
end

--- Syncs and closes the journal; further writes raise. Also runs at the
-- end of a `local j <close> = journal.open(...)` scope.
function Journal:close()
  if not self.out then return end
  local out = self.out
  self.out = nil
  out:close()
end

Journal.__close = Journal.close

--- Reads every record of a journal. Returns the list of records and the
-- number of lines skipped because they were not valid JSON (a partial line
-- left by a kill mid-write). Blank lines are ignored. A missing file raises
-- a kb error of class "fs".
function M.read(path)
  local text = fs.read(path)
  local records, skipped = {}, 0
  for line in text:gmatch("[^\n]+") do
    if line:find("%S") then
      local ok, value = pcall(json.decode, line)
      if ok then
        records[#records + 1] = value
      else
        skipped = skipped + 1
      end
    end
  end
  return records, skipped
end

return M
