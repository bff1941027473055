-- kb.log (src/lua/log.c on the C logger src/rt/log.c) and its redaction.
local T = require "kb.testing"
local fs = require "kb.fs"
local log = require "kb.log"

local root
do
  local out = os.getenv("KBRUN_TEST_OUT")
  if out then
    root = fs.join(fs.abspath(out), "test_log")
    fs.remove(root, { recursive = true })
    fs.mkdir(root)
  else
    root = fs.tmpdir("kbrun-test-log")
  end
end

-- Runs `source` as a scenario in a child kbrun; returns its stderr lines.
local function child_stderr(name, source, flags)
  local bin = T.ok(os.getenv("KBRUN_BIN"), "KBRUN_BIN names the kbrun binary")
  local script = fs.join(root, name .. ".lua")
  fs.write(script, source)
  local cmd = string.format("'%s' %s -o '%s' '%s' 2>&1 >/dev/null", bin, flags or "",
    fs.join(root, "out"), script)
  local p = assert(io.popen(cmd))
  local lines = {}
  for line in p:lines() do lines[#lines + 1] = line end
  p:close()
  return lines
end

local SECRET = "s3cr3t-Tok3n-value"
local STAMP = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ "

T.case("level: get, set, returns the previous one", function()
  local saved = log.level()
  T.eq(log.level("error"), saved)
  T.eq(log.level("DEBUG"), "error")
  T.eq(log.level(), "debug")
  T.eq(log.enabled("debug"), true)
  log.level("warning")
  T.eq(log.level(), "warn")
  T.eq(log.enabled("info"), false)
  T.eq(log.enabled("error"), true)
  log.level("off")
  T.eq(log.enabled("error"), false)
  T.raises(log.level, "unknown log level 'loud' (expected debug, info, warn, error or off)", "loud")
  log.level(saved)
  T.eq(log.level(), saved)
end)

T.case("bad arguments raise whatever the level", function()
  local saved = log.level("off")
  T.raises(log.info, "bad argument #1 to 'kb.log.info' (string expected, got table)", {}, 1)
  T.raises(log.debug, "bad argument #1 to 'kb.log.debug' (value expected)")
  log.level(saved)
end)

T.case("redact is exposed for reports", function()
  T.eq(log.redact("Authorization: Bearer abc"), "Authorization: [REDACTED]")
  T.eq(log.redact("GET /x?access_token=" .. SECRET .. "&page=2"), "GET /x?access_token=[REDACTED]&page=2")
  T.eq(log.redact('{"password": "' .. SECRET .. '"}'), '{"password": "[REDACTED]"}')
  T.eq(log.redact("tokenizer=bert, Bearer of news"), "tokenizer=bert, Bearer of news")
  T.eq(log.redact(""), "")
  T.eq(log.redact("a\0token=x"), "a\0token=[REDACTED]")
  -- a text that grows: many short secrets
  local big = string.rep("token=x ", 10000)
  T.eq(log.redact(big), string.rep("token=[REDACTED] ", 10000))
end)

T.case("log lines are timestamped, leveled and redacted", function()
  local lines = child_stderr("planted", string.format([[
    local log = require "kb.log"
    local secret = %q
    log.warn("login with token=%%s", secret)
    log.info("Authorization: Bearer " .. secret)
    log.error("cloning https://bob:%%s@git.example.com/repo (%%d)", secret, 3)
    log.debug("hidden at the default level")
    log.warn(setmetatable({}, { __tostring = function() return "password=" .. secret end }))
  ]], SECRET))
  local text = table.concat(lines, "\n")
  T.ok(not text:find(SECRET, 1, true), "the secret must not reach stderr:\n" .. text)
  T.ok(not text:find("\27", 1, true), "no color on a pipe")
  T.ok(not text:find("hidden at the default level", 1, true), "debug is off by default")
  local want = {
    "WARN login with token=[REDACTED]",
    "INFO Authorization: [REDACTED]",
    "ERROR cloning https://***@git.example.com/repo (3)",
    "WARN password=[REDACTED]",
  }
  local found = 0
  for _, line in ipairs(lines) do
    for _, w in ipairs(want) do
      if line:sub(-#w - 1) == " " .. w then
        T.ok(line:find(STAMP), "timestamp format: " .. line)
        T.eq(#line, 25 + #w, "line length")
        found = found + 1
      end
    end
  end
  T.eq(found, #want, "all four lines present in:\n" .. text)
end)

T.case("-v shows debug, -q hides info", function()
  local source = [[
    local log = require "kb.log"
    log.debug("d-line")
    log.info("i-line")
    log.warn("w-line")
  ]]
  local verbose = table.concat(child_stderr("verbose", source, "-v"), "\n")
  T.contains(verbose, " DEBUG d-line")
  T.contains(verbose, " INFO i-line")
  local quiet = table.concat(child_stderr("quiet", source, "-q"), "\n")
  T.ok(not quiet:find("d-line", 1, true) and not quiet:find("i-line", 1, true), quiet)
  T.contains(quiet, " WARN w-line")
end)

T.case("a stderr nobody reads never stops kbrun: the child still finishes", function()
  local kb = require "kb"
  local bin = T.ok(os.getenv("KBRUN_BIN"), "KBRUN_BIN names the kbrun binary")
  local script = fs.join(root, "flood.lua")
  -- 8 MB of log lines: far more than the pipe, the socket and the 1 MiB
  -- this test's kb.process buffers before it stops reading
  fs.write(script, [[
local log = require "kb.log"
local pad = string.rep("x", 100)
for i = 1, 80000 do log.info("line %d %s", i, pad) end
]])
  -- stderr into our stdout pipe, which this test never reads while the
  -- child runs; the child's own stdout (the summary) to /dev/null
  local p <close> = kb.process.spawn {
    cmd = { "sh", "-c", 'exec "$0" -o "$1" "$2" 2>&1 >/dev/null', bin, fs.join(root, "out"), script },
    stdin = "null", stdout = "pipe" }
  local ok, r = pcall(kb.timeout, 120, p.wait, p) -- bounded; it takes about a second
  T.ok(ok, "the child kbrun finished: " .. tostring(r))
  T.eq(r.code, 0)
  -- what got through is whole lines, in order
  local last = 0
  for _ = 1, 1000 do
    local line = p:read_line()
    if not line then break end
    local n = tonumber(line:match(" INFO line (%d+) x+$"))
    if n then
      T.ok(n > last, "in order: " .. line)
      last = n
    end
  end
  T.ok(last > 0, "log lines came through")
end)

T.run()
if not os.getenv("KBRUN_TEST_OUT") then fs.remove(root, { recursive = true }) end
