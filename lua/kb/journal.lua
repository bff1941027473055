--- kb.journal: an append-only JSON-lines file of results as they happen.
--
--   local journal = require "kb.journal"
--   local j = journal.open(exp:path("output", "journal.jsonl"))
--   j:write({ t = kb.now(), event = "run.done", run = id, seconds = 12.5 })
--   j:close()
--
--   local records, skipped = journal.read(path)
--
-- Write-through (the default): each :write encodes one record with kb.json
-- (compact, so one line) and hands "<json>\n" to the kernel in a single
-- write(2) before returning: a SIGKILL of kbrun loses nothing written
-- before it. (A machine crash can still lose what the disk had not stored;
-- :sync() and :close() fsync.)
--
-- Buffered (journal.open(path, {interval = s}), what kbrun's runner uses
-- for output/journal.jsonl): records collect in memory and go to the
-- kernel in one write(2) per :flush(), which a task started with
-- :start_flusher() does every `interval` real seconds; :close() flushes.
-- A SIGKILL then loses at most the last `interval` of records. A record
-- costs ~2.5 us to encode, its write(2) several more: buffering keeps
-- measurement hot paths cheap (bench/journal.md).
--
-- journal.open of the path of the active journal (journal.set_active, the
-- runner's) returns a handle writing into that journal's buffer, so that
-- everything written to one file during a run stays in order.
--
-- A failed write (disk full, read-only, I/O error) never raises and never
-- loses a record: what could not be written stays in memory, in order,
-- kb.outputs hears of it (printed once with the path and the system's
-- message; kbrun exits with 3 if it stays unwritten), and every later
-- flush (or write, write-through) tries again, :close() last of all, then
-- kb.outputs.retry() at the end of the run. j:unsaved() says what is held.
--
-- A kill in the middle of a write(2) can leave a partial last line.
-- journal.read skips lines that are not valid JSON and returns how many it
-- skipped; journal.open ends such a partial line first, so records
-- appended by a resumed run are never glued to it.
--
-- Every record passes kb.secrets' scrubber (secrets.encode_json): no
-- credential, registered secret or protected parameter is written. A new
-- journal file is made readable by its owner only (0600): it holds what
-- servers answered (docs/security.md).
local fs = require "kb.fs"
local json = require "kb.json"
local secrets = require "kb.secrets"

local M = {}

local Journal = {}
Journal.__index = Journal

-- The permission bits of a journal kbrun creates: owner read/write.
local PRIVATE = tonumber("600", 8)

--- Default flush interval of the run journal, in milliseconds.
M.DEFAULT_FLUSH_MS = 50

-- Buffered lines beyond which :write flushes at once (bounds memory).
local MAX_BUFFERED = 4096

local active -- the run's journal (set_active), shared by open() of its path

-- Does the file end in the middle of a line?
local function ends_mid_line(path)
  local f = io.open(path, "rb")
  if not f then return false end
  local last = f:seek("end", -1) and f:read(1)
  f:close()
  return last ~= nil and last ~= "\n"
end

-- A handle on the active journal: writes go to its buffer, close is a no-op
-- (the runner owns the file); after the runner closed it, writes are dropped.
local View = {}
View.__index = View
function View:write(record)
  local j = self.journal
  if j.out then j:write(record) end
  return self
end
function View:write_line(line)
  local j = self.journal
  if j.out then j:write_line(line) end
  return self
end
function View:on_flush(fn) self.journal:on_flush(fn) end
function View:write_through() return self.journal:write_through() end
function View:flush() if self.journal.out then self.journal:flush() end end
function View:sync() if self.journal.out then self.journal:sync() end end
function View:close() end
View.__close = View.close

--- Opens (creating it and its directory if needed) a journal for appending.
-- opts.interval: seconds between flushes (buffered; see above); nil or 0:
-- write-through. A path that is the active journal's gives a view on it.
function M.open(path, opts)
  if type(path) ~= "string" then error("kb.journal.open: path must be a string", 2) end
  if active and active.out and fs.abspath(path) == active.abspath then
    return setmetatable({ path = path, journal = active }, View)
  end
  local interval = opts and opts.interval or 0
  if type(interval) ~= "number" or interval ~= interval or interval < 0 then
    error("kb.journal.open: interval must be a number of seconds >= 0, got " .. tostring(interval), 2)
  end
  fs.mkdir(fs.dirname(path))
  local partial = ends_mid_line(path)
  local existed = fs.exists(path)
  local out = fs.open_append(path)
  -- owner only, before the first record (docs/security.md)
  if not existed then pcall(fs.chmod, path, PRIVATE) end
  local j = setmetatable({ path = path, abspath = fs.abspath(path), out = out, count = 0,
    interval = interval, buf = {}, nbuf = 0, hooks = {} }, Journal)
  if partial then j:_emit("\n", 0) end
  return j
end

local function is_io_error(err)
  return type(err) == "table" and err.class == "fs"
end

-- Hands text (nrec records) to the kernel, behind anything still held.
function Journal:_emit(text, nrec)
  if not self.held then
    local ok, err = pcall(self.out.write, self.out, text)
    if ok then return end
    if not is_io_error(err) then error(err, 0) end
    self.held = { head = 1, n = 0, records = 0 }
    self:_hold(text, nrec)
    require("kb.outputs").record(self.path, err, self)
    return
  end
  self:_hold(text, nrec)
  self:_drain()
end

function Journal:_hold(text, nrec)
  local h = self.held
  h.n = h.n + 1
  h[h.n] = { text, nrec }
  h.records = h.records + nrec
end

-- Writes what is held, oldest first, up to the first failure (one failed
-- write(2) per try while the disk stays full). True when nothing is held.
function Journal:_drain()
  local h = self.held
  if not h then return true end
  local out = self.out
  local reopened = false
  if not out then -- closed: kb.outputs.retry at the end of the run
    local ok, o = pcall(fs.open_append, self.path)
    if not ok then
      require("kb.outputs").record(self.path, o, self)
      return false
    end
    out, reopened = o, true
  end
  while h.head <= h.n do
    local item = h[h.head]
    local ok, err = pcall(out.write, out, item[1])
    if not ok then
      if reopened then pcall(out.close, out) end
      if not is_io_error(err) then error(err, 0) end
      require("kb.outputs").record(self.path, err, self)
      return false
    end
    h[h.head] = nil
    h.head = h.head + 1
    h.records = h.records - item[2]
  end
  if reopened then pcall(out.close, out) end
  self.held = nil
  require("kb.outputs").resolve(self.path)
  return true
end

--- What is still only in memory after failed writes ("120 records"), or nil.
function Journal:unsaved()
  local h = self.held
  if not h then return nil end
  return string.format("%d record%s", h.records, h.records == 1 and "" or "s")
end

--- Writes what failed before (kb.outputs.retry calls it, also after
-- :close()); true when nothing is held any more.
function Journal:retry() return self:_drain() end

--- Appends one record (any value kb.json can encode) as one line: at once
-- (write-through) or at the next flush (buffered).
function Journal:write(record)
  self:_check_open()
  return self:_append(secrets.encode_json(record))
end

--- Appends one record already encoded: `line`, one line of JSON text
-- without its newline, which the caller built as :write would have
-- (kb.secrets.encode_json: scrubbed, keys sorted). For a hot path that
-- makes its lines from parts it checked once (kb.kfp.storm's calls).
function Journal:write_line(line)
  self:_check_open()
  return self:_append(line)
end

-- Raises, at the writer's caller, once the journal is closed.
function Journal:_check_open()
  if not self.out then error(string.format("kb.journal: '%s' is closed", self.path), 3) end
end

function Journal:_append(line)
  self.count = self.count + 1
  if self.interval == 0 then
    self:_emit(line .. "\n", 1)
    return self
  end
  local n = self.nbuf
  self.buf[n + 1], self.buf[n + 2] = line, "\n"
  self.nbuf = n + 2
  if n >= 2 * MAX_BUFFERED then self:flush() end
  return self
end

--- True when every :write goes straight to the kernel.
function Journal:write_through() return self.interval == 0 end

--- fn(journal) runs at the start of every flush, to write records it has
-- been collecting (kb.metrics batches measurements this way). A hook that
-- returns false is not run again (what it served is gone), so it no
-- longer holds on to what it refers to.
function Journal:on_flush(fn)
  self.hooks[#self.hooks + 1] = fn
end

-- Runs the flush hooks in order, dropping those that return false.
local function run_hooks(self)
  local hooks, kept = self.hooks, 0
  for i = 1, #hooks do
    local hook = hooks[i]
    if hook(self) ~= false then
      kept = kept + 1
      hooks[kept] = hook
    end
  end
  for i = #hooks, kept + 1, -1 do hooks[i] = nil end
end

--- Writes the buffered records with one write(2). When that fails they
-- are held in memory for the next try (see the top); a hook's error raises.
function Journal:flush()
  if not self.out then return end
  if self.flushing then return end -- a hook that writes must not recurse
  self.flushing = true
  local ok, err = pcall(run_hooks, self)
  self.flushing = false
  if not ok then error(err, 0) end
  if self.nbuf == 0 then
    if self.held then self:_drain() end
    return
  end
  local text, nrec = table.concat(self.buf, "", 1, self.nbuf), self.nbuf // 2
  self.buf, self.nbuf = {}, 0
  self:_emit(text, nrec)
end

--- Starts (once; again after it was cancelled) the task that flushes every
-- `interval` real seconds. A write-through journal needs none.
function Journal:start_flusher()
  if self.interval == 0 or self.flusher or not self.out then return end
  local kb, core = require "kb", require "kb.core"
  self.flusher = kb.spawn(function()
    local ok, err = pcall(function()
      while self.out do
        -- the interval is real time, whatever the scenario clock does
        core.sleep_real(self.interval)
        local okf, ferr = pcall(self.flush, self)
        if not okf and not self.flush_failed then
          self.flush_failed = true
          require("kb.log").error("journal %s: %s", self.path, tostring(ferr))
        end
      end
    end)
    self.flusher = nil
    if not ok and not core.is_cancelled(err) then error(err, 0) end
  end)
end

--- Forces the records written so far to disk (flush, then fsync).
function Journal:sync()
  if self.out then
    self:flush()
    local ok, err = pcall(self.out.sync, self.out)
    if not ok then
      if not is_io_error(err) then error(err, 0) end
      require("kb.outputs").record(self.path, err, self)
    end
  end
end

--- Flushes, syncs and closes the journal; further writes raise. Records
-- still held after this last try stay with kb.outputs. Also runs
-- at the end of a `local j <close> = journal.open(...)` scope.
function Journal:close()
  if not self.out then return end
  local ok, err = pcall(self.flush, self)
  local out = self.out
  self.out = nil
  if active == self then active = nil end
  if self.flusher then
    local f = self.flusher
    self.flusher = nil
    pcall(f.cancel, f)
  end
  local okc, cerr = pcall(out.close, out)
  if not okc then
    if not is_io_error(cerr) then error(cerr, 0) end
    require("kb.outputs").record(self.path, cerr, self)
  end
  if not ok then error(err, 0) end
end

Journal.__close = Journal.close

--- Makes j the run's journal (nil: none): journal.open of its path then
-- shares it. kbrun's runner sets output/journal.jsonl.
function M.set_active(j) active = j end

--- The run's journal, or nil.
function M.active() return active end

--- The flush interval (seconds) of the run journal: KBRUN_JOURNAL_FLUSH_MS
-- (milliseconds, 0 = write-through), default DEFAULT_FLUSH_MS. Returns it
-- and a warning when the variable is not a number >= 0.
function M.flush_interval()
  local v = os.getenv("KBRUN_JOURNAL_FLUSH_MS")
  if v == nil or v == "" then return M.DEFAULT_FLUSH_MS / 1000 end
  local ms = tonumber(v)
  if not ms or ms ~= ms or ms < 0 then
    return M.DEFAULT_FLUSH_MS / 1000, string.format(
      "KBRUN_JOURNAL_FLUSH_MS must be a number of milliseconds >= 0, got '%s'; using %d",
      v, M.DEFAULT_FLUSH_MS)
  end
  return ms / 1000
end

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
