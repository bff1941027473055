-- Hostile input from Lua: a scenario must not be able to crash kbrun.
--
-- Every function of every C binding is called with wrong types, nil, NaN,
-- huge and negative numbers: each call either works or raises a Lua error
-- with a message (never a crash, a sanitizer report or a hang). Then the
-- specific refusals a user sees are checked by message, deep and huge
-- JSON/YAML documents are refused with a clear error, and a runaway loop in
-- a scenario is interrupted by Ctrl-C.
local T = require "kb.testing"
local kb = require "kb"
local json = require "kb.json"
local yaml = require "kb.yaml"
local hist = require "kb.hist"
local http = require "kb.http"
local httpd = require "kb.httpd"
local fs = require "kb.fs"
local log = require "kb.log"
local process = require "kb.process"
local sim = require "kb.sim"
local core = require "kb.core"

local tmp = fs.tmpdir("hostile")

-- Values no binding should trust. Strings are harmless ones: a sweep must
-- not write files or start programs under names it made up.
local BAD = {
  { "nil", nil }, { "true", true }, { "-1", -1 }, { "0", 0 }, { "huge", math.huge },
  { "-huge", -math.huge }, { "nan", 0 / 0 }, { "maxint", math.maxinteger },
  { "minint", math.mininteger }, { "1.5", 1.5 }, { "{}", {} }, { "function", print },
  { "coroutine", coroutine.create(print) }, { "null", json.null }, { "NUL string", "\0" },
  { "list", { 1, 2, 3 } }, { "nested", { a = { b = {} } } },
}

-- The message of an error value: a string or a kb error object.
local function message(err)
  if type(err) == "string" then return err end
  if type(err) == "table" and type(err.message) == "string" then return err.message end
  return nil
end

-- Runs f(...) in its own task, cancelled if it has not finished after
-- `limit` real seconds. Returns ok, err, or "hung".
local function guarded(limit, f, ...)
  local args = table.pack(...)
  local task = kb.spawn(function() return table.pack(pcall(f, table.unpack(args, 1, args.n))) end)
  local deadline = kb.now() + limit
  while not task:done() and kb.now() < deadline do kb.sleep(0.005) end
  if not task:done() then
    task:cancel()
    pcall(task.wait, task)
    return "hung"
  end
  local r = task:wait()
  return r[1], r[2]
end

-- Calls fn with each bad value as argument 1, then (when fn takes more) as
-- argument 2 and 3 after a plausible first one. Checks every outcome.
local function sweep(name, fn, opts)
  opts = opts or {}
  local calls, failures = 0, {}
  local function try(label, ...)
    calls = calls + 1
    local ok, err = guarded(opts.limit or 2, fn, ...)
    if ok == "hung" then
      if not opts.may_block then failures[#failures + 1] = label .. ": did not return" end
    elseif not ok and not message(err) then
      failures[#failures + 1] = label .. ": raised a value without a message: " .. tostring(err)
    end
  end
  for _, b in ipairs(BAD) do
    try(string.format("%s(%s)", name, b[1]), b[2])
    if opts.first ~= nil then
      try(string.format("%s(first, %s)", name, b[1]), opts.first, b[2])
      try(string.format("%s(first, first, %s)", name, b[1]), opts.first, opts.first, b[2])
    end
  end
  if #failures > 0 then error(table.concat(failures, "\n"), 0) end
  return calls
end

-- Sweeps every function of a module table (skipping `skip`).
local function sweep_module(modname, mod, skip, per_fn)
  local names = {}
  for k, v in pairs(mod) do
    if type(v) == "function" and not (skip and skip[k]) then names[#names + 1] = k end
  end
  table.sort(names)
  local n = 0
  for _, k in ipairs(names) do
    n = n + sweep(modname .. "." .. k, mod[k], per_fn and per_fn[k])
  end
  return n
end

-- Sweeps the methods of an object (self given, then bad arguments), and the
-- methods called on a wrong self.
local function sweep_methods(what, obj, methods, skip)
  local n = 0
  for _, m in ipairs(methods) do
    if not (skip and skip[m]) then
      local f = obj[m]
      T.eq(type(f), "function", what .. ":" .. m)
      n = n + sweep(what .. ":" .. m, function(...) return f(obj, ...) end)
      -- The method on something that is not its object must raise.
      for _, b in ipairs(BAD) do
        local ok, err = pcall(f, b[2])
        if ok or not message(err) then
          error(string.format("%s.%s(%s) as self: %s", what, m, b[1],
            ok and "did not raise" or "raised without a message"), 0)
        end
      end
    end
  end
  return n
end

-- ---- the sweeps ---------------------------------------------------------------

T.case("kb.json: every function survives bad arguments", function()
  T.ok(sweep_module("json", json) > 50)
  T.raises(json.decode, "bad argument #1", nil)
  T.raises(json.decode, "bad argument #1", {})
  T.raises(function() json.decode("[1]", { max_depth = -1 }) end, "max_depth")
  T.raises(function() json.decode("[1]", { max_depth = 1e9 }) end, "max_depth")
  T.raises(function() json.encode(print) end, "cannot encode a function at $")
  T.raises(function() json.encode(0 / 0) end, "kb.json.encode")
  T.raises(function() json.encode({ [1.5] = true }) end, "kb.json.encode")
  local cyc = {}
  cyc.self = cyc
  T.raises(function() json.encode(cyc) end, "kb.json.encode")
end)

T.case("kb.yaml: every function survives bad arguments", function()
  T.ok(sweep_module("yaml", yaml) > 50)
  T.raises(yaml.decode, "bad argument #1", nil)
  T.raises(function() yaml.decode("a: 1", { max_depth = 0 }) end, "max_depth must be in 1..4096")
  T.raises(function() yaml.decode("a: 1", { max_alias_nodes = -5 }) end,
    "max_alias_nodes must be positive")
  T.raises(function() yaml.encode(coroutine.create(print)) end, "kb.yaml.encode")
  T.raises(function() yaml.encode_all(42) end, "bad argument #1")
end)

T.case("kb.hist: constructors and every method survive bad arguments", function()
  local n = sweep_module("hist", hist)
  local h = hist.new()
  h:record(0.25)
  n = n + sweep_methods("hist", h, { "record", "record_corrected", "count", "saturated", "min",
    "max", "mean", "stddev", "percentile", "percentiles", "summary", "merge", "copy", "reset",
    "encode", "buckets", "bins", "layout" })
  T.ok(n > 100)
  T.raises(function() hist.decode("not a histogram") end)
  T.raises(function() hist.decode(string.rep("\255", 64)) end)
  T.raises(function() h:percentile(0 / 0) end)
  T.raises(function() h:merge({}) end)
end)

T.case("kb.fs: every function survives bad arguments", function()
  -- Plausible first arguments live in a scratch folder.
  local p = fs.join(tmp, "f.txt")
  fs.write(p, "x")
  local per = {
    read = { first = p }, write = { first = fs.join(tmp, "w.txt") },
    append = { first = fs.join(tmp, "a.txt") }, open_append = { first = fs.join(tmp, "o.txt") },
    mkdir = { first = fs.join(tmp, "d") }, join = { first = "a" }, with_lock = { first = fs.join(tmp, "lock") },
  }
  -- fs.mkdir takes a number as its path (Lua's coercion), relative to the
  -- working directory (tests/): the folders it made there are removed again
  local made, swept = {}, {}
  for k, v in pairs(fs) do swept[k] = v end
  swept.mkdir = function(path, ...)
    local r = table.pack(fs.mkdir(path, ...))
    if type(path) == "number" then made[#made + 1] = path end
    return table.unpack(r, 1, r.n)
  end
  local ok, err = pcall(sweep_module, "fs", swept, { remove = true }, per)
  for _, path in ipairs(made) do pcall(fs.remove, path) end
  if not ok then error(err, 0) end
  T.ok(err > 50, "calls")
  for _, path in ipairs(made) do T.eq(fs.exists(path), false, "left " .. tostring(path)) end
  T.raises(function() fs.read(fs.join(tmp, "missing")) end, "missing")
  T.raises(function() fs.remove(nil) end, "bad argument #1")
  T.raises(function() fs.remove({}) end, "bad argument #1")
  local a = fs.open_append(fs.join(tmp, "ap.txt"))
  sweep_methods("appender", a, { "write", "sync" })
  a:close()
  T.raises(function() a:write("after close") end)
end)

T.case("kb.log: every function survives bad arguments", function()
  local level = log.level()
  log.level("off") -- the sweep's messages are noise
  T.ok(sweep_module("log", log, { level = true }, { debug = { first = "msg %s" },
    info = { first = "msg %s" }, warn = { first = "msg %s" }, error = { first = "msg %s" } }) > 20)
  T.ok(sweep("log.level", function(v) log.level(v); log.level("off") end) > 10)
  log.level(level)
  T.raises(function() log.level("loud") end)
end)

T.case("kb.core: every function survives bad arguments", function()
  local skip = { exit = true, cancel_all = true, on_signal = true, sleep = true, sleep_real = true }
  T.ok(sweep_module("core", core, skip) > 50)
  T.raises(core.spawn, "bad argument #1", 42)
  T.raises(core.sleep, "bad argument #1", "soon")
  T.raises(core.sleep, "bad argument #1", {})
  T.raises(core.semaphore, "bad argument #1", "x")
  T.raises(function() core.semaphore(-1) end)
  T.raises(core.exit, "bad argument #1", {})
  T.raises(core.on_signal, "bad argument #1", 42)
  -- A negative or NaN sleep returns at once instead of waiting forever.
  T.ok(guarded(2, core.sleep, -1) ~= "hung")
  T.ok(guarded(2, core.sleep, 0 / 0) ~= "hung")
  T.raises(core.sleep_real, "bad argument #1", "soon")
  T.ok(guarded(2, core.sleep_real, -1) ~= "hung")
  T.ok(guarded(2, core.sleep_real, 0 / 0) ~= "hung")
  local sem = core.semaphore(1)
  sweep_methods("semaphore", sem, { "available", "release" })
end)

T.case("kb.http: every function survives bad arguments", function()
  T.ok(sweep_module("http", http, nil, { request = { first = "GET" } }) > 20)
  T.raises(function() http.request("GET", 42) end)
  T.raises(function() http.request("GET", "not a url") end)
  T.raises(function() http.request("GET", "http://127.0.0.1:1/", { timeout = "soon" }) end)
  T.raises(function() http.client(42) end)
  local c = http.client {}
  sweep_methods("http.client", c, { "request", "active" }, nil)
  c:close()
end)

T.case("kb.httpd: every function survives bad arguments", function()
  T.ok(sweep_module("httpd", httpd, nil, {
    parse_multipart = { first = "multipart/form-data; boundary=b" } }) > 20)
  T.raises(function() httpd.listen(42) end)
  T.raises(function() httpd.listen { port = -1, handler = print } end)
  T.raises(function() httpd.listen { port = 70000, handler = print } end)
  T.raises(function() httpd.parse_multipart("text/plain", "x") end, "multipart")
  T.raises(function() httpd.build_multipart({ { name = 42 } }) end)
end)

T.case("kb.process: every function survives bad arguments", function()
  T.ok(sweep_module("process", process) > 20)
  T.raises(function() process.run {} end)
  T.raises(function() process.run { cmd = {} } end)
  T.raises(function() process.run { cmd = { 42, {} } } end)
  T.raises(function() process.run { cmd = { "true" }, timeout = -1 } end)
  T.raises(function() process.run { cmd = { "true" }, max_output = -1 } end)
  T.raises(function() process.spawn { cmd = "true" } end)
  -- spawn reads stdout only: a stderr pipe nobody reads is refused up front.
  T.raises(process.spawn, "kb.process.spawn: option 'stderr' must be \"inherit\" or \"null\", got 'pipe'",
    { cmd = { "true" }, stderr = "pipe" })
  local err = T.raises(process.run, "cannot start '/nonexistent/kbrun-hostile'",
    { cmd = { "/nonexistent/kbrun-hostile" } })
  T.eq(err.class, "spawn")
end)

T.case("kb.sim: every function survives bad arguments", function()
  T.ok(sweep_module("sim", sim, { start = true }) > 10)
  T.raises(sim.start, "bad argument #1", 42)
  T.raises(function() sim.start { profile = "no-such-profile" } end, "no-such-profile")
  T.raises(function() sim.start { speed = "fast" } end)
  T.raises(function() sim.start { config = "a: [" } end)
end)

-- ---- documents too deep or too large --------------------------------------------

T.case("deep JSON is refused with a clear error, not a stack overflow", function()
  local deep = string.rep("[", 100000) .. string.rep("]", 100000)
  local err = T.raises(json.decode, "nesting deeper than", deep)
  T.eq(err.class, "json")
  err = T.raises(json.decode, "nesting deeper than", string.rep('{"a":', 100000) .. "1"
    .. string.rep("}", 100000))
  T.eq(err.class, "json")
  -- The limit is an option, capped.
  T.eq(#json.decode(string.rep("[", 1000) .. string.rep("]", 1000), { max_depth = 2000 }), 1)
  -- A deep Lua value is refused by the encoders.
  local t = {}
  local cur = t
  for _ = 1, 100000 do
    cur[1] = {}
    cur = cur[1]
  end
  T.raises(json.encode, "nesting deeper than", t)
  T.raises(yaml.encode, "kb.yaml.encode", t)
end)

T.case("deep YAML is refused with a clear error", function()
  local err = T.raises(yaml.decode, "", string.rep("[", 100000) .. string.rep("]", 100000))
  T.eq(err.class, "yaml")
  T.ok(message(err):find("deeper") or message(err):find("depth") or message(err):find("nest"),
    message(err))
  local lines = {}
  for i = 0, 5000 do lines[#lines + 1] = string.rep(" ", i) .. "- " end
  err = T.raises(yaml.decode, "", table.concat(lines, "\n"))
  T.eq(err.class, "yaml")
end)

T.case("a YAML alias bomb is refused, not expanded", function()
  local bomb = { "a: &a [x, x, x, x, x, x, x, x, x, x]" }
  local prev = "a"
  for _, name in ipairs { "b", "c", "d", "e", "f", "g", "h", "i", "j" } do
    bomb[#bomb + 1] = string.format("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]",
      name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
    prev = name
  end
  local text = table.concat(bomb, "\n")
  local err = T.raises(yaml.decode, "alias", text)
  T.eq(err.class, "yaml")
  T.raises(yaml.decode_all, "alias", text)
  -- A small budget refuses smaller expansions, a larger one allows them.
  local small = "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n"
  T.raises(yaml.decode, "alias", small, { max_alias_nodes = 5 })
  T.eq(#yaml.decode(small).b, 3)
end)

T.case("a huge document is refused by the max_size option", function()
  local big = "[" .. string.rep("1,", 100000) .. "1]"
  local err = T.raises(json.decode, "", big, { max_size = 1000 })
  T.eq(err.class, "json")
end)

-- ---- a runaway scenario ------------------------------------------------------------

T.case("a runaway Lua loop is interrupted by SIGINT", function()
  local bin = os.getenv("KBRUN_BIN")
  if not bin then return end -- only under ctest
  local script = fs.join(tmp, "runaway.lua")
  fs.write(script, "local n = 0\nwhile true do n = n + 1 end\n")
  local p = process.spawn { cmd = { bin, "-q", "-o", fs.join(tmp, "out"), script },
    stderr = "null" }
  kb.sleep(0.5)
  p:kill("SIGINT")
  local ok, r = guarded(20, p.wait, p)
  T.ok(ok ~= "hung", "kbrun did not stop after SIGINT")
  T.ok(ok, tostring(r))
  T.ok(r.code == 130 or r.signal == "SIGINT", "exit code " .. tostring(r.code))
end)

T.run()
