--- kb.kfp.storm_record: the part of kb.kfp.storm that records every call
-- a storm makes as it happens (a row of result/latencies.csv, a journal
-- line, its latency sample, its error class) and writes the journal:
-- output/journal.jsonl, with the intents flushed before their creates are
-- sent (docs/storm.md, "Every run accounted for"). Its functions are
-- Session's.
local kb = require "kb"
local json = require "kb.json"
local log = require "kb.log"
local csv = require "kb.csv"
local journal = require "kb.journal"
local secrets = require "kb.secrets"
local storm = require "kb.kfp.storm"

local M = {}

local Session = storm.Session
local format_number = csv.format_number

-- ---- recording every call ---------------------------------------------------------

local function message_of(err)
  local text = type(err) == "table" and (err.message or tostring(err)) or tostring(err)
  text = text:gsub("%s+", " ")
  return #text > 300 and (text:sub(1, 300) .. "...") or text
end

--- Records an error of class `class` during `op` (kept with up to three
-- sample messages per class).
function Session:record_error(op, class, message)
  local e = self.errors[class]
  if not e then
    e = { count = 0, ops = {}, samples = json.array({}) }
    self.errors[class] = e
  end
  e.count = e.count + 1
  e.ops[op] = (e.ops[op] or 0) + 1
  if #e.samples < 3 then e.samples[#e.samples + 1] = message end
end

-- The journal line of a call that succeeded, as secrets.encode_json
-- would write the record (keys sorted; test_storm_record compares them
-- byte for byte), from its op's text encoded and scrubbed once: a storm
-- writes one per call. nil when the op's text would be scrubbed, or a
-- number is not finite (then the record goes the general way). The texts
-- are judged again once another secret is registered.
local op_texts, judged_with = {}, -1
local function finite(x) return x > -math.huge and x < math.huge end
local function call_line(op, start, latency, status)
  if not (finite(start) and finite(latency)) then return nil end
  local registered = secrets.registered()
  if registered ~= judged_with then op_texts, judged_with = {}, registered end
  local text = op_texts[op]
  if text == nil then
    text = json.encode(op)
    if secrets.scrub(text) ~= text then text = false end
    op_texts[op] = text
  end
  if not text then return nil end
  return '{"event":"call","latency":' .. format_number(latency) .. ',"op":' .. text
    .. ',"status":' .. status .. ',"t":' .. format_number(start) .. "}"
end

-- One timed call: a row of latencies.csv, a journal line, its sample.
function Session:record_call(op, t0, latency, status, err)
  local class = err and (type(err) == "table" and err.class or "lua") or nil
  local message = err and message_of(err) or nil
  local start = t0 - self.t0
  self.ncalls = self.ncalls + 1
  if self.keep_calls then
    self.calls[#self.calls + 1] = { op = op, start = start, latency = latency, status = status,
      class = class, error = message }
  end
  if self.latencies then
    self.latencies:write{ op, start, latency, status, class, message }
  end
  local line = self.journal and not err and math.type(status) == "integer"
    and type(latency) == "number" and call_line(op, start, latency, status)
  if line then
    self.journal:write_line(line)
  else
    self:journal_write{ event = "call", op = op, t = start, latency = latency,
      status = status, class = class, error = message }
  end
  if err then
    self:record_error(op, class, message)
    if class == "auth" then self:note_auth(op, err) end
  else
    local list = self.samples[op] or {}
    list[#list + 1] = latency
    self.samples[op] = list
  end
end

-- Wraps a client's request so every call is recorded as it happens, with
-- the latency kb.kfp records in its histograms.
function Session:instrument(c)
  local inner = c.request
  local session = self
  c.request = function(client, req)
    local t0 = kb.now()
    local ok, doc, resp = pcall(inner, client, req)
    if not ok and kb.is_cancelled(doc) then error(doc, 0) end
    local status = ok and resp and resp.status or (type(doc) == "table" and doc.status or nil)
    -- what kb.kfp records: the logical call (resp.elapsed: every attempt's
    -- kb.http time.total plus the retry delays; against the simulator
    -- time.total counts only the modelled hold as virtual time)
    local latency = ok and resp and (resp.elapsed or resp.time and resp.time.total) or kb.now() - t0
    session:record_call(client.metrics_prefix .. req.op, t0, latency, status, not ok and doc or nil)
    if not ok then error(doc, 0) end
    return doc, resp
  end
  return c
end

--- Appends an event to output/journal.jsonl (when there is an experiment).
function Session:journal_write(record)
  if self.journal then self.journal:write(record) end
end

--- Journals what the storm is about to ask the server to create, and hands
-- it to the kernel before the request is sent: a kill -9 after this line
-- can lose the answer but never the name, so `kbrun report` and cleanup
-- can find the object on the server (docs/storm.md, "Every run accounted
-- for").
function Session:journal_intent(record)
  if not self.journal then return end
  self.journal:write(record)
  local ok, err = pcall(self.journal.flush, self.journal)
  if not ok then log.warn("storm: journal: %s", message_of(err)) end
end

--- Names an authentication failure on stderr the first time an op meets
-- one: the op, the status, the server's message and what to check.
function Session:note_auth(op, err)
  self.auth_noted = self.auth_noted or {}
  if self.auth_noted[op] then return end
  self.auth_noted[op] = true
  local p = self.p
  log.error("storm: %s was refused by %s: HTTP %s%s. Check the credentials: token_file (%s) must "
    .. "hold a valid, unexpired token with access to %s; behind the Kubeflow gateway, cookie_file "
    .. "(%s) a current session cookie and header= the user (kubeflow-userid: ...); through "
    .. "kubeconfig=, the kubeconfig's user and its expiry", op, self.url,
    tostring(type(err) == "table" and err.status or "?"),
    type(err) == "table" and err.server_message and (": " .. err.server_message) or "",
    p.token_file ~= "" and p.token_file or "none given",
    p.namespace ~= "" and ("namespace " .. p.namespace) or "the KFP API",
    p.cookie_file ~= "" and p.cookie_file or "none given")
end

-- Flushes buffered csv writer w at every flush of journal j, until w is
-- closed or writes through (finish() makes it: a sweep's cells each have
-- a storm, and the hook then lets go of the writer).
local function flush_with(j, w)
  j:on_flush(function()
    if w.closed or not w.buffered then return false end
    w:flush()
  end)
end

local LATENCY_HEADER = { "op", "start", "latency", "status", "error_class", "error" }

function Session:open_outputs()
  local exp = self.exp
  if not exp then return end
  self.journal = journal.open(exp:path("output", "journal.jsonl"))
  -- a buffered journal (the runner's) holds every call too: the rows go
  -- out with its flushes, one write(2) for all, not one per call
  local buffered = not self.journal:write_through()
  local latencies = csv.writer(exp:path("result", "latencies.csv"), LATENCY_HEADER,
    { buffered = buffered })
  self.latencies = latencies
  if buffered then flush_with(self.journal, latencies) end
end

-- for kb.kfp.storm's other parts (call_line, flush_with: for their tests)
M.message_of, M.call_line, M.flush_with = message_of, call_line, flush_with

return M
