--- kb.csv: RFC 4180 CSV for results (report.csv, runs.csv, latencies.csv).
--
--   local csv = require "kb.csv"
--   csv.encode_row({ "taxi", 12, 0.25 })      --> 'taxi,12,0.25' (no line end)
--   csv.encode(rows, header [, opts])          --> the whole text
--   local w = csv.writer(path, header [, opts])
--   w:write({ "taxi", 12, 0.25 })              -- a list, in header order
--   w:write({ name = "taxi", runs = 12 })      -- or a map; missing -> empty
--   w:close()
--   csv.parse(text [, opts])                   --> rows (lists of strings)
--
-- Quoting: a field is quoted when it contains a comma, a double quote, CR or
-- LF, or starts or ends with a space or tab; inner quotes are doubled. Any
-- other byte (UTF-8 included) is written as is.
--
-- Line endings: "\n" by default; opts.eol = "\r\n" gives strict RFC 4180
-- (what Excel writes). csv.parse accepts both, and lone CR.
--
-- Values: nil and kb.json.null -> empty cell; booleans -> true / false;
-- integers as integers; floats in the shortest of %.14g .. %.17g that reads
-- back to the same number (0.1 -> 0.1, 0.1 + 0.2 -> 0.30000000000000004),
-- NaN -> nan, infinities -> inf / -inf; anything else through tostring.
-- csv.parse returns strings only: it cannot know which cells were numbers.
local fs = require "kb.fs"
local json = require "kb.json"

local M = {}

local sub, format = string.sub, string.format

-- Errors in the data (not in the calling code) are kb error objects.
local Error = { __name = "kb.error" }
Error.__index = Error
Error.__tostring = function(e) return e.class .. ": " .. e.message end

local function data_error(fmt, ...)
  error(setmetatable({ class = "csv", message = format(fmt, ...) }, Error), 0)
end

-- The cells of a row are encoded in C (src/lua/csv.c): a storm writes a
-- row per API call, and in Lua a row cost a third of the call's request.
local codec = require "kb.csv.codec"

--- The cell text of a number: integers exactly, floats in the shortest
-- form that reads back exactly (as kb.json writes them); nan, inf, -inf.
M.format_number = codec.format_number

local registered -- kb.secrets' register, got on first use (kb.secrets needs this module)

local function line_ending(opts, who)
  local eol = opts and opts.eol or "\n"
  if eol ~= "\n" and eol ~= "\r\n" then
    error(format('%s: opts.eol must be "\\n" or "\\r\\n"', who), 3)
  end
  return eol
end

-- The line of cells 1..n of list, without its line ending. Text cells
-- pass kb.secrets' scrubber, as everything kbrun writes (docs/security.md);
-- nil and json.null are empty cells; a cell with a comma, a quote, CR, LF
-- or a blank at either end is quoted; a lone empty cell is "" (a blank
-- line would be skipped by parse).
local function encode_cells(list, n, eol)
  registered = registered or require("kb.secrets").register_list()
  return codec.encode_row(list, n, registered, json.null, eol)
end

--- Encodes one row (a list; `list.n` counts trailing nils) as a line without
-- its line ending.
function M.encode_row(list)
  return encode_cells(list, list.n or #list)
end

local function is_list(row)
  return row[1] ~= nil or next(row) == nil
end

-- The cells of `row` in `columns` order: a list row is positional, a map
-- row keyed by column names (`known`: the set of them, made once per text).
local function row_cells(row, columns, known, who)
  if type(row) ~= "table" then
    error(format("%s: a row must be a table, got %s", who, type(row)), 3)
  end
  if not columns then return row end
  if is_list(row) then
    if #row > #columns then
      error(format("%s: row has %d fields but the header has %d", who, #row, #columns), 3)
    end
    local cells = table.move(row, 1, #columns, 1, {})
    cells.n = #columns
    return cells
  end
  for k in pairs(row) do
    if not known[k] then
      error(format("%s: column %s is not in the header", who, format("%q", tostring(k))), 3)
    end
  end
  local cells = {}
  for i, name in ipairs(columns) do cells[i] = row[name] end
  cells.n = #columns
  return cells
end

--- Encodes rows (lists, or maps keyed by header names) as CSV text, the
-- header first when given; every line ends with opts.eol.
function M.encode(rows, header, opts)
  local eol = line_ending(opts, "kb.csv.encode")
  local out = {}
  local known = {}
  if header then
    out[1] = M.encode_row(header)
    for _, name in ipairs(header) do known[name] = true end
  end
  for _, row in ipairs(rows) do
    if not header and type(row) == "table" and not is_list(row) then
      error("kb.csv.encode: map rows need a header to order their columns", 2)
    end
    out[#out + 1] = M.encode_row(row_cells(row, header, known, "kb.csv.encode"))
  end
  if #out == 0 then return "" end
  return table.concat(out, eol) .. eol
end

local function line_of(text, pos)
  local line = 1
  for _ in sub(text, 1, pos - 1):gmatch("\n") do line = line + 1 end
  return line
end

-- The records of text (in C: a results database import or a report
-- rebuild parses a storm's runs.csv and latencies.csv, 10,000s of rows).
local function parse_rows(text, limit)
  local rows, what, pos, char = codec.parse_rows(text, limit)
  if rows then return rows end
  if what == "unterminated" then
    data_error("kb.csv.parse: unterminated quoted field starting on line %d", line_of(text, pos))
  end
  data_error("kb.csv.parse: unexpected %q after a closing quote on line %d", char, line_of(text, pos))
end

--- Parses CSV text into a list of rows, each a list of strings. Quoted
-- fields may hold commas, doubled quotes and line breaks; blank lines are
-- skipped. With opts.header = true, returns a list of maps keyed by the
-- first row, and that header. opts.limit stops after that many rows.
-- Malformed text raises a kb error of class "csv" naming the line.
function M.parse(text, opts)
  opts = opts or {}
  local rows = parse_rows(text, opts.limit or math.huge)
  if not opts.header then return rows end
  local header = table.remove(rows, 1) or {}
  for r, row in ipairs(rows) do
    if #row > #header then
      data_error("kb.csv.parse: record %d has %d fields but the header has %d", r, #row, #header)
    end
    local record = {}
    for j, name in ipairs(header) do record[name] = row[j] end
    rows[r] = record
  end
  return rows, header
end

-- ---- writer ---------------------------------------------------------------

local Writer = {}
Writer.__index = Writer

-- A failed write is retried on a later :write at most this often (real
-- seconds); :close() and kb.outputs.retry() always try.
local RETRY_INTERVAL = 0.5

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function clock() return require("kb.core").time() end

local function is_io_error(err)
  return type(err) == "table" and err.class == "fs"
end

-- Brings the file's header in line with the writer's: writes it into a new
-- (or empty) file, adopts an existing one that has every column (opts.extend)
-- or the same ones, and otherwise either rewrites the file with the new
-- columns appended (opts.extend) or raises.
function Writer:_sync_header()
  local text = fs.exists(self.path) and fs.read(self.path) or ""
  if text == "" then
    fs.append(self.path, M.encode_row(self.header) .. self.eol)
    self.columns = self.header
    return
  end
  local existing = parse_rows(text, 1)[1] or {}
  if same_list(existing, self.header) then
    self.columns = existing
    return
  end
  if not self.extend then
    data_error("kb.csv.writer: '%s' has the columns %s, not %s (pass {extend = true} to add columns)",
      self.path, M.encode_row(existing), M.encode_row(self.header))
  end
  local union, seen = {}, {}
  for _, name in ipairs(existing) do union[#union + 1], seen[name] = name, true end
  for _, name in ipairs(self.header) do
    if not seen[name] then union[#union + 1], seen[name] = name, true end
  end
  if #union > #existing then
    local rows = parse_rows(text, math.huge)
    rows[1] = union
    for r = 2, #rows do
      for j = #rows[r] + 1, #union do rows[r][j] = "" end
    end
    fs.write(self.path, M.encode(rows, nil, { eol = self.eol }))
  end
  self.columns = union
end

function Writer:_locked(fn)
  if self.lock then return fs.with_lock(self.path, fn, self) end
  return fn(self)
end

-- Makes the file ready for rows: its directory, its header, the appender.
function Writer:_open()
  fs.mkdir(fs.dirname(self.path))
  self:_locked(self._sync_header)
  if not self.lock then self.out = fs.open_append(self.path) end
  self.ready = true
end

-- A row as a map keyed by column names: a list is positional in the
-- writer's header, a map may use every column the file has. Bad rows raise
-- (at the caller of :write).
function Writer:_map(row)
  local who = "kb.csv.writer"
  if type(row) ~= "table" then
    error(format("%s: a row must be a table, got %s", who, type(row)), 3)
  end
  local map = {}
  if is_list(row) then
    if #row > #self.header then
      error(format("%s: row has %d fields but the header has %d", who, #row, #self.header), 3)
    end
    for i, name in ipairs(self.header) do map[name] = row[i] end
    return map
  end
  local known = {}
  for _, name in ipairs(self.columns or self.header) do known[name] = true end
  for k, v in pairs(row) do
    if not known[k] then
      error(format("%s: column %s is not in the header", who, format("%q", tostring(k))), 3)
    end
    map[k] = v
  end
  return map
end

function Writer:_line(map)
  local cells = { n = #self.columns }
  for i, name in ipairs(self.columns) do cells[i] = map[name] end
  return encode_cells(cells, cells.n, self.eol)
end

-- Writes one held item: a line (the columns are fixed once an unlocked
-- writer is open) or a row map (a locked writer re-reads the header).
function Writer:_put(item)
  if self.lock then
    self:_locked(function(w)
      w:_sync_header()
      fs.append(w.path, w:_line(item))
    end)
  else
    self.out:write(type(item) == "string" and item or self:_line(item))
  end
end

-- An I/O error: the data stays held, kb.outputs hears of it; anything else
-- (a bug, a header conflict) raises.
function Writer:_failed(err)
  if not is_io_error(err) then error(err, 0) end
  self.last_try = clock()
  require("kb.outputs").record(self.path, err, self)
  return false
end

-- Writes what is held, in order, stopping at the first failure. Returns
-- true when nothing is held any more.
function Writer:_drain()
  self.last_try = clock()
  if not self.ready then
    local ok, err = pcall(self._open, self)
    if not ok then return self:_failed(err) end
  end
  local held = self.held
  while held and held.head <= held.n do
    local ok, err = pcall(self._put, self, held[held.head])
    if not ok then return self:_failed(err) end
    held[held.head] = nil
    held.head = held.head + 1
  end
  if held then
    self.held = nil
    require("kb.outputs").resolve(self.path)
  end
  return true
end

-- Rows a buffered writer holds back before a write(2) of them all.
local BUFFER_ROWS = 512

local function hold(self, item)
  local held = self.held
  if not held then
    held = { head = 1, n = 0 }
    self.held = held
  end
  held.n = held.n + 1
  held[held.n] = item
end

--- Opens a CSV file for appending rows, creating it (and its directory)
-- with the header line if it is new or empty. Every :write appends and
-- flushes one line (a single write(2)), so a killed run keeps its rows;
-- with opts.buffered, rows wait for :flush() (or 512 of them, or :close())
-- and go in one write(2): for rows a journal holds too (the storm's
-- latencies.csv, flushed with the run's journal), where a kill loses no
-- more than the journal's own flush interval and `kbrun report` rebuilds.
-- opts.eol: line ending ("\n").
-- opts.extend: if the file exists with other columns, keep its columns and
--   append the missing ones (rewriting the file atomically, old rows get
--   empty cells) instead of raising.
-- opts.lock: for a file shared by concurrent kbrun processes (report.csv):
--   each :write takes kb.fs.with_lock(path), re-reads the header (another
--   process may have added columns) and appends. Costs a read of the whole
--   file per row, so use it for one-row-per-experiment files only.
--
-- A write that fails (disk full, read-only, I/O error: a kb error of class
-- "fs") never raises: the writer keeps the rows it could not write in
-- memory, in order, reports the failure to kb.outputs (printed once, with
-- the path and the system's message; kbrun then exits with 3 unless it was
-- written after all) and tries again on a later :write (at most every half
-- second), at :close() and at kb.outputs.retry() (kbrun's end of run). This
-- holds for the header and the file's creation too. w:unsaved() says what
-- is still only in memory.
function M.writer(path, header, opts)
  opts = opts or {}
  if type(path) ~= "string" then error("kb.csv.writer: path must be a string", 2) end
  if type(header) ~= "table" or #header == 0 then
    error("kb.csv.writer: header must be a non-empty list of column names", 2)
  end
  local names, seen = {}, {}
  for i, name in ipairs(header) do
    if type(name) ~= "string" or seen[name] then
      error(format("kb.csv.writer: header[%d] must be a unique string", i), 2)
    end
    names[i], seen[name] = name, true
  end
  local w = setmetatable({ path = path, header = names, eol = line_ending(opts, "kb.csv.writer"),
    extend = opts.extend or false, lock = opts.lock or false, rows = 0, ready = false,
    buffered = (opts.buffered and not opts.lock) or false, pending = {}, npending = 0 }, Writer)
  local ok, err = pcall(w._open, w)
  if not ok then
    if getmetatable(err) == Error then error(err, 2) end -- the file's columns conflict
    w:_failed(err)
  end
  return w
end

--- Appends one row: a list in the order of the writer's header, or a map
-- keyed by column names (missing or nil -> empty cell; an unknown column
-- is an error). Never raises for a failed write (see csv.writer).
function Writer:write(row)
  if self.closed then error(format("kb.csv.writer: '%s' is closed", self.path), 2) end
  local item
  if self.ready and not self.lock and self.columns == self.header and type(row) == "table"
      and row[1] ~= nil then
    -- a list row in the file's own column order: encoded as it is, no map
    local n = #self.header
    if #row > n then
      error(format("kb.csv.writer: row has %d fields but the header has %d", #row, n), 2)
    end
    item = encode_cells(row, n, self.eol)
  else
    item = self:_map(row)
    if self.ready and not self.lock then item = self:_line(item) end
  end
  self.rows = self.rows + 1
  if self.buffered and not self.held and self.ready then
    local n = self.npending + 1
    self.pending[n], self.npending = item, n
    if n >= BUFFER_ROWS then self:flush() end
    return self
  end
  if self.held or not self.ready then
    hold(self, item)
    if clock() - (self.last_try or 0) >= RETRY_INTERVAL then self:_drain() end
    return self
  end
  local ok, err = pcall(self._put, self, item)
  if not ok then
    hold(self, item)
    self:_failed(err)
  end
  return self
end

--- Writes the rows a buffered writer holds back (opts.buffered) with one
-- write(2); a no-op for the others and once closed. A failed write keeps
-- them, row by row, as a failed :write would.
function Writer:flush()
  local n = self.npending
  if n == 0 then return self end
  local rows = self.pending
  self.pending, self.npending = {}, 0
  local ok, err = pcall(self._put, self, table.concat(rows, "", 1, n))
  if not ok then
    for i = 1, n do hold(self, rows[i]) end
    self:_failed(err)
  end
  return self
end

--- Turns holding rows back (opts.buffered) on or off; off writes what is
-- held back first, and every later row goes out at its :write.
function Writer:set_buffered(on)
  if not on then self:flush() end
  self.buffered = (on and not self.lock) or false
  return self
end

--- What is still only in memory after failed writes ("12 rows", "the
-- header and 12 rows"), or nil when everything is written.
function Writer:unsaved()
  local n = self.held and self.held.n - self.held.head + 1 or 0
  if n == 0 and self.ready then return nil end
  local rows = format("%d row%s", n, n == 1 and "" or "s")
  return self.ready and rows or "the header and " .. rows
end

--- Writes what failed before (kb.outputs.retry calls it); true when
-- nothing is held any more.
function Writer:retry()
  local done = self:_drain()
  if done and self.closed and self.out then
    local out = self.out
    self.out = nil
    pcall(out.close, out)
  end
  return done
end

--- Closes the file (fsync); further writes raise. Rows still held after a
-- last try stay with kb.outputs for its retry. Also runs at the end of a
-- `local w <close> = csv.writer(...)` scope.
function Writer:close()
  if self.closed then return end
  self:flush()
  self.closed = true
  if self.held or not self.ready then
    if not self:_drain() then return end -- the appender stays for the retry
  end
  if self.out then
    local out = self.out
    self.out = nil
    local ok, err = pcall(out.close, out)
    if not ok then self:_failed(err) end
  end
end

Writer.__close = Writer.close

return M
