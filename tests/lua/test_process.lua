-- kb.process (src/lua/process.c): run, spawn, timeouts, limits, cancellation.
local kb = require "kb"
local T = require "kb.testing"
local process = require "kb.process"

local SH = "/bin/sh"

local function sh(script, opts)
  opts = opts or {}
  opts.cmd = { SH, "-c", script }
  return process.run(opts)
end

-- True while pid exists and is not a zombie (an orphan killed here may wait
-- for a PID 1 that does not reap).
local function alive(pid)
  if sh("kill -0 " .. pid .. " 2>/dev/null").code ~= 0 then return false end
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("a")
  f:close()
  return stat:match("^%d+ %b() (%a)") ~= "Z"
end

local function wait_gone(pid)
  for _ = 1, 250 do
    if not alive(pid) then return true end
    kb.sleep(0.02)
  end
  return false
end

-- Polls until fn() returns a value (bounded).
local function eventually(fn, what)
  for _ = 1, 250 do
    local v = fn()
    if v then return v end
    kb.sleep(0.02)
  end
  error("gave up waiting for " .. what)
end

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- ---- run ------------------------------------------------------------------------

T.case("run returns stdout, stderr, exit code and time", function()
  local r = sh("echo out; echo err >&2; exit 3")
  T.eq(r.code, 3)
  T.eq(r.signal, nil)
  T.eq(r.stdout, "out\n")
  T.eq(r.stderr, "err\n")
  T.eq(math.type(r.pid), "integer")
  T.ok(type(r.time) == "number" and r.time >= 0, "time is a duration")
  T.eq(process.run{ cmd = { "true" } }.code, 0)
end)

T.case("the list may also be given without cmd =", function()
  local r = process.run{ "echo", "a b", 42 }
  T.eq(r.stdout, "a b 42\n")
end)

T.case("stdin round trip through cat, binary safe", function()
  local r = process.run{ cmd = { "cat" }, stdin = "hello\0world\n" }
  T.eq(r.code, 0)
  T.eq(r.stdout, "hello\0world\n")
  -- no stdin: the child reads end of file at once
  T.eq(process.run{ cmd = { "cat" } }.stdout, "")
end)

T.case("megabytes flow through stdin and stdout at once", function()
  local chunk = string.rep("0123456789abcdef", 64) .. "\n"
  local input = string.rep(chunk, 3000) -- about 3 MiB
  local r = process.run{ cmd = { "cat" }, stdin = input }
  T.eq(#r.stdout, #input)
  T.ok(r.stdout == input, "output equals input")
end)

T.case("a child that ignores its stdin still completes", function()
  local r = process.run{ cmd = { "true" }, stdin = string.rep("x", 4 << 20) }
  T.eq(r.code, 0)
end)

T.case("death by a signal gives the signal name and 128 + n", function()
  local r = sh("kill -TERM $$")
  T.eq(r.signal, "SIGTERM")
  T.eq(r.code, 143)
  r = sh("kill -KILL $$")
  T.eq(r.signal, "SIGKILL")
  T.eq(r.code, 137)
end)

T.case("children get default signal dispositions (kbrun ignores SIGPIPE)", function()
  -- with SIGPIPE ignored, yes would complain about a broken pipe on stderr
  local r = sh("yes | head -n 1")
  T.eq(r.stdout, "y\n")
  T.eq(r.stderr, "")
end)

T.case("check = true raises class exit with the first lines of stderr", function()
  local err = T.raises(function()
    sh("echo 'error: no such pod' >&2; echo second >&2; exit 2", { check = true })
  end, "kb.process.run: '/bin/sh' exited with code 2: error: no such pod\nsecond")
  T.eq(err.class, "exit")
  T.eq(err.code, 2)
  T.eq(err.stderr, "error: no such pod\nsecond\n")
  err = T.raises(function() sh("kill -KILL $$", { check = true }) end,
    "kb.process.run: '/bin/sh' was killed by SIGKILL")
  T.eq(err.signal, "SIGKILL")
  err = T.raises(function() sh("exit 1", { check = true }) end)
  T.eq(err.message, "kb.process.run: '/bin/sh' exited with code 1")
  -- success is returned as usual
  T.eq(sh("echo fine", { check = true }).stdout, "fine\n")
end)

T.case("env is merged over the environment; false removes a variable", function()
  local r = sh('echo "$KB_PROC_A|${PATH:+path set}"', { env = { KB_PROC_A = "v1" } })
  T.eq(r.stdout, "v1|path set\n")
  r = process.run{ cmd = { "/usr/bin/env" }, env = { PATH = false, KB_PROC_B = "b" } }
  T.contains(r.stdout, "KB_PROC_B=b\n")
  T.ok(not ("\n" .. r.stdout):find("\nPATH="), "PATH was removed")
  r = sh('echo "$N"', { env = { N = 42 } })
  T.eq(r.stdout, "42\n")
end)

T.case("clear_env starts from an empty environment", function()
  local r = process.run{ cmd = { "/usr/bin/env" }, clear_env = true, env = { ONLY = "x" } }
  T.eq(r.stdout, "ONLY=x\n")
  r = process.run{ cmd = { "/usr/bin/env" }, clear_env = true }
  T.eq(r.stdout, "")
end)

T.case("cwd sets the working directory", function()
  T.eq(process.run{ cmd = { "pwd" }, cwd = "/" }.stdout, "/\n")
  local err = T.raises(function()
    process.run{ cmd = { "pwd" }, cwd = "/nonexistent-kbrun-dir" }
  end)
  T.eq(err.class, "spawn")
  T.eq(err.message, "kb.process.run: cannot start 'pwd' in '/nonexistent-kbrun-dir': "
    .. "no such file or directory (ENOENT)")
end)

T.case("a command that cannot be started raises class spawn", function()
  local err = T.raises(function() process.run{ cmd = { "nosuchcmd-kbrun", "x" } } end)
  T.eq(err.class, "spawn")
  T.eq(err.message, "kb.process.run: cannot start 'nosuchcmd-kbrun': "
    .. "no such file or directory (ENOENT)")
  local plain = os.tmpname() -- exists, but is not executable
  err = T.raises(function() process.run{ cmd = { plain } } end)
  os.remove(plain)
  T.eq(err.class, "spawn")
  T.eq(err.message, "kb.process.run: cannot start '" .. plain .. "': permission denied (EACCES)")
  err = T.raises(function() process.spawn{ cmd = { "nosuchcmd-kbrun" } } end)
  T.eq(err.message, "kb.process.spawn: cannot start 'nosuchcmd-kbrun': "
    .. "no such file or directory (ENOENT)")
end)

T.case("bad options are reported with the option's name", function()
  T.raises(function() process.run{} end,
    "kb.process.run: option 'cmd' must be a non-empty list of strings")
  T.raises(function() process.run{ cmd = "ls" } end, "option 'cmd' must be a non-empty list")
  T.raises(function() process.run{ cmd = { "ls", {} } } end,
    "kb.process.run: cmd[2] must be a string, got table")
  local err = T.raises(function() process.run{ cmd = { "ls" }, env = { SECRET = {} } } end,
    "kb.process.run: env value of 'SECRET' must be a string, a number or false, got table")
  T.raises(function() process.run{ cmd = { "ls" }, env = { ["A=B"] = "x" } } end,
    "env name 'A=B' is empty or contains '='")
  T.raises(function() process.run{ cmd = { "ls" }, env = "X=1" } end,
    "option 'env' must be a table")
  T.raises(function() process.run{ cmd = { "ls" }, timeout = -1 } end,
    "option 'timeout' must be a positive number of seconds")
  T.raises(function() process.run{ cmd = { "ls" }, max_output = 0 } end,
    "option 'max_output' must be positive")
  T.raises(function() process.run{ cmd = { "ls" }, stdin = 5 } end,
    "option 'stdin' must be a string")
  T.raises(function() process.spawn{ cmd = { "ls" }, stdout = "file" } end,
    "kb.process.spawn: option 'stdout' must be \"pipe\", \"inherit\" or \"null\", got 'file'")
  T.eq(type(err), "string") -- a programming error, not a kb error object
end)

T.case("timeout terminates the child and raises class timeout", function()
  local err = T.raises(function() process.run{ cmd = { "sleep", "10" }, timeout = 0.2 } end)
  T.eq(err.class, "timeout")
  T.eq(err.message, "kb.process.run: 'sleep' did not finish within 0.2 s and was terminated")
  T.ok(wait_gone(err.pid), "the child is gone")
end)

T.case("timeout also ends what the child started (its process group)", function()
  local err = T.raises(function()
    sh("sleep 30 & echo $!; wait", { timeout = 1 })
  end, "did not finish within 1 s")
  local grandchild = tonumber(err.stdout:match("%d+"))
  T.ok(grandchild, "the grandchild's pid was captured")
  T.ok(wait_gone(grandchild), "the grandchild is gone")
  T.ok(wait_gone(err.pid), "the child is gone")
end)

T.case("timeout is real seconds, also when the simulator speeds the scenario clock up", function()
  local sim = kb.sim.start { profile = "fast", speed = 600 }
  local ok, r = pcall(process.run, { cmd = { "sleep", "0.3" }, timeout = 2 })
  sim:stop()
  T.ok(ok, "a 0.3 s child within a 2 s timeout finishes: " .. tostring(r))
  T.eq(r.code, 0)
end)

T.case("a child that ignores SIGTERM is killed after the grace period", function()
  local err = T.raises(function()
    sh("trap '' TERM; echo $$; while :; do sleep 0.05; done", { timeout = 0.2 })
  end, "did not finish")
  T.ok(wait_gone(err.pid), "SIGKILL followed")
end)

T.case("max_output kills the child and raises class output_limit", function()
  local err = T.raises(function() process.run{ cmd = { "yes" }, max_output = 1000 } end)
  T.eq(err.class, "output_limit")
  T.eq(err.message, "kb.process.run: 'yes' wrote more than 1000 bytes to stdout "
    .. "(max_output) and was terminated")
  T.eq(#err.stdout, 1000)
  T.ok(wait_gone(err.pid), "yes is gone")
  err = T.raises(function()
    sh("head -c 5000 /dev/zero >&2", { max_output = 4096 })
  end, "wrote more than 4096 bytes to stderr")
  T.eq(#err.stderr, 4096)
  -- exactly the limit is fine
  T.eq(#sh("head -c 4096 /dev/zero", { max_output = 4096 }).stdout, 4096)
end)

T.case("50 processes at once through a pool", function()
  local items = {}
  for i = 1, 100 do items[i] = tostring(i) end
  local results = kb.pool(50):map(items, function(item)
    return process.run{ cmd = { SH, "-c", 'sleep 0.05; echo "$1"', "sh", item } }
  end)
  T.eq(#results, 100)
  for i, r in ipairs(results) do
    T.eq(r.code, 0, "code of " .. i)
    T.eq(r.stdout, i .. "\n", "stdout of " .. i)
  end
end)

T.case("cancelling a task waiting in run kills the child", function()
  local file = os.tmpname()
  local task = kb.spawn(function()
    return process.run{ cmd = { SH, "-c", 'echo $$ > "$1"; exec sleep 30', "sh", file } }
  end)
  local pid = eventually(function()
    local s = read_file(file)
    return s and tonumber(s:match("%d+"))
  end, "the child's pid")
  T.ok(alive(pid), "the child runs")
  task:cancel()
  local ok, err = pcall(task.wait, task)
  T.eq(ok, false)
  T.ok(kb.is_cancelled(err), "the task was cancelled")
  T.ok(wait_gone(pid), "the child was killed")
  os.remove(file)
end)

T.case("kb.timeout around run gives class timeout and kills the child", function()
  local file = os.tmpname()
  local err = T.raises(function()
    kb.timeout(1, process.run, { cmd = { SH, "-c", 'echo $$ > "$1"; exec sleep 30', "sh", file } })
  end)
  T.eq(err.class, "timeout")
  local pid = tonumber((read_file(file) or ""):match("%d+"))
  T.ok(pid, "the child wrote its pid")
  T.ok(wait_gone(pid), "the child was killed")
  os.remove(file)
end)

-- ---- spawn -----------------------------------------------------------------------

T.case("spawn: read_line, kill, wait", function()
  local p = process.spawn{ cmd = { SH, "-c", "echo first; echo second; exec sleep 30" } }
  T.eq(math.type(p.pid), "integer")
  T.eq(p:read_line(), "first")
  T.eq(p:read_line(), "second")
  T.contains(tostring(p), "(running)")
  T.eq(p:kill(), true)
  local w = p:wait()
  T.eq(w.signal, "SIGTERM")
  T.eq(w.code, 143)
  T.eq(w.pid, p.pid)
  T.eq(p:read_line(), nil)
  T.eq(p:kill(), false, "kill after exit")
  T.contains(tostring(p), "(killed by SIGTERM)")
  T.same(p:wait(), w)
end)

T.case("spawn: lines without a final newline, CRLF, end of file", function()
  local p = process.spawn{ cmd = { "printf", "a\\r\\nb\\n\\nlast" } }
  T.eq(p:read_line(), "a")
  T.eq(p:read_line(), "b")
  T.eq(p:read_line(), "")
  T.eq(p:read_line(), "last")
  T.eq(p:read_line(), nil)
  T.eq(p:read_line(), nil)
  T.eq(p:wait().code, 0)
end)

T.case("spawn: write, close_stdin and the exit code", function()
  local p = process.spawn{ cmd = { SH, "-c", "cat; exit 4" } }
  p:write("one\n")
  T.eq(p:read_line(), "one")
  p:write("two")
  p:write("\nthree\n")
  T.eq(p:read_line(), "two")
  T.eq(p:read_line(), "three")
  p:close_stdin()
  p:close_stdin() -- twice is fine
  T.eq(p:read_line(), nil)
  T.eq(p:wait().code, 4)
  T.raises(function() p:write("x") end, "kb.process: write after close_stdin")
end)

T.case("spawn: writing to a child that exited raises class io", function()
  local p = process.spawn{ cmd = { "true" } }
  p:wait()
  local err = T.raises(function() p:write("x") end)
  T.eq(err.class, "io")
  T.eq(err.message, "kb.process: cannot write to the stdin of 'true': the process has exited")
end)

T.case("spawn: other signals and bad signal names", function()
  local p = process.spawn{ cmd = { "sleep", "30" }, stdout = "null", stdin = "null" }
  T.raises(function() p:kill("SIGNOPE") end, "unknown signal name")
  T.eq(p:kill("KILL"), true)
  T.eq(p:wait().signal, "SIGKILL")
  T.raises(function() p:read_line() end, "read_line needs stdout = \"pipe\"")
  T.raises(function() p:write("x") end, "write needs stdin = \"pipe\"")
  local q = process.spawn{ cmd = { "sleep", "30" } }
  T.eq(q:kill(10), true) -- a number works too (SIGUSR1 on Linux)
  T.eq(q:wait().signal, "SIGUSR1")
end)

T.case("spawn: stdout is read with backpressure and nothing is lost", function()
  local p = process.spawn{ cmd = { "seq", "1", "300000" } }
  kb.sleep(0.2) -- let it fill the buffer and pause
  local n, last = 0, nil
  while true do
    local line = p:read_line()
    if not line then break end
    n = n + 1
    last = line
    if n <= 3 then T.eq(line, tostring(n)) end
  end
  T.eq(n, 300000)
  T.eq(last, "300000")
  T.eq(p:wait().code, 0)
end)

T.case("spawn: a line longer than max_output raises class output_limit", function()
  local p = process.spawn{ cmd = { "head", "-c", "100000", "/dev/zero" }, max_output = 1000 }
  local err = T.raises(function() p:read_line() end)
  T.eq(err.class, "output_limit")
  T.eq(err.message, "kb.process: a line from 'head' is longer than 1000 bytes (max_output)")
  p:kill("KILL")
  p:wait()
end)

T.case("spawn: only one reader at a time; env and cwd apply", function()
  local p = process.spawn{ cmd = { SH, "-c", 'read x; echo "$V $(pwd)"' },
    env = { V = "val" }, cwd = "/" }
  local reader = kb.spawn(function() return p:read_line() end)
  kb.sleep(0.05)
  T.raises(function() p:read_line() end, "another task is already reading this process")
  p:write("go\n")
  T.eq(reader:wait(), "val /")
  T.eq(p:wait().code, 0)
end)

T.case("spawn: cancelling a waiting task leaves the child running", function()
  local p = process.spawn{ cmd = { "sleep", "30" } }
  local err = T.raises(function() kb.timeout(0.1, p.wait, p) end)
  T.eq(err.class, "timeout")
  err = T.raises(function() kb.timeout(0.1, p.read_line, p) end)
  T.eq(err.class, "timeout")
  T.ok(alive(p.pid), "still running")
  T.eq(p:kill(), true)
  T.eq(p:wait().signal, "SIGTERM")
end)

T.case("spawn: a to-be-closed process is killed at scope exit", function()
  local pid
  do
    local p <close> = process.spawn{ cmd = { "sleep", "30" } }
    pid = p.pid
    T.ok(alive(pid), "running inside the scope")
  end
  T.ok(wait_gone(pid), "killed on close")
end)

T.case("spawn: a collected process object kills its child", function()
  local pid
  do
    local p = process.spawn{ cmd = { "sleep", "30" } }
    pid = p.pid
  end
  collectgarbage()
  collectgarbage()
  T.ok(wait_gone(pid), "killed on collection")
end)

T.case("spawn: several tasks may wait for the same child", function()
  local p = process.spawn{ cmd = { SH, "-c", "read x; exit 5" } }
  local a = kb.spawn(function() return p:wait().code end)
  local b = kb.spawn(function() return p:wait().code end)
  kb.sleep(0.02)
  p:close_stdin()
  T.same(kb.all({ a, b }), { 5, 5 })
end)

-- Left running on purpose: the runtime must kill it at exit (the ctest
-- would hang for 30 s otherwise, and ASan would report a leak).
local left_running
T.case("a child still running at exit does not hold kbrun", function()
  left_running = process.spawn{ cmd = { "sleep", "30" } }
  T.ok(left_running.pid > 0)
end)


T.case("a timeout counts from the start of the run, not from the loop's last wakeup", function()
  local core = require "kb.core"
  core.sleep_real(0)
  local spin0 = core.time()
  while core.time() - spin0 < 0.15 do end -- busy Lua: the loop's time falls behind
  local t0 = core.time()
  T.raises(function() process.run{ cmd = { "sleep", "10" }, timeout = 0.3 } end, "did not finish within 0.3 s")
  local took = core.time() - t0
  T.ok(took >= 0.299, string.format("terminated after %.3f s of 0.3", took))
end)

T.run()
