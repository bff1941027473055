-- kb.sweep.lock: who holds a sweep folder, and when a lock is stale.
-- (Two kbrun processes at once: tests/e2e/sweep_lock.sh.)
local T = require "kb.testing"
local kb = require "kb"
local fs = require "kb.fs"
local json = require "kb.json"
local lock = require "kb.sweep.lock"
local sweep = require "kb.sweep"

local DIR = fs.tmpdir("kb-sweep-lock")

local function write_lock(rec) fs.write(fs.join(DIR, "sweep.lock"), json.encode(rec)) end

T.case("me: this process as /proc tells it", function()
  local me = lock.me()
  T.ok(math.type(me.pid) == "integer" and me.pid > 1, "pid")
  T.ok(type(me.host) == "string" and me.host ~= "", "host")
  T.ok(type(me.start) == "string" and me.start:match("^%d+$"), "start ticks")
end)

T.case("a held lock refuses, a released one is gone", function()
  local held = lock.acquire(DIR, { name = "s" })
  local rec = json.decode(fs.read(fs.join(DIR, "sweep.lock")))
  local me = lock.me()
  T.eq(rec.pid, me.pid)
  T.eq(rec.host, me.host)
  T.eq(rec.start, me.start)
  local ok, err = pcall(lock.acquire, DIR, { name = "s" })
  T.ok(not ok, "a second acquire in this process is refused")
  T.eq(err.class, "usage")
  T.contains(tostring(err), "kb.sweep: sweep 's' in " .. DIR .. " is already running (pid " .. me.pid .. " on " .. me.host)
  T.contains(tostring(err), "this very process")
  held:release()
  T.eq(fs.exists(fs.join(DIR, "sweep.lock")), false, "released")
  held:release() -- idempotent
end)

T.case("stale locks are taken over: dead pid, reused pid, another boot", function()
  local me = lock.me()
  -- a pid that is surely not running: above the kernel's pid_max
  local pid_max = tonumber((fs.read("/proc/sys/kernel/pid_max"):match("%d+")))
  local cases = {
    { pid = pid_max + 1, host = me.host, start = "1", why = "is gone" },
    { pid = me.pid, host = me.host, start = tostring(tonumber(me.start) + 12345), why = "pid reused" },
    { pid = me.pid, host = me.host, start = me.start, boot_id = "another-boot", why = "rebooted" },
  }
  for _, c in ipairs(cases) do
    write_lock(c)
    local told
    local held = lock.acquire(DIR, { on_stale = function(why) told = why end })
    T.contains(told or "", c.why)
    T.eq(json.decode(fs.read(fs.join(DIR, "sweep.lock"))).pid, me.pid, "the lock is ours now")
    held:release()
  end
end)

T.case("a lock from another host is never presumed stale", function()
  write_lock({ pid = 1, host = "elsewhere.example", start = "1", started_at = "2026-01-01T00:00:00Z" })
  local ok, err = pcall(lock.acquire, DIR, { name = "s" })
  T.ok(not ok)
  T.contains(tostring(err), "(pid 1 on elsewhere.example, started 2026-01-01T00:00:00Z)")
  T.contains(tostring(err), "remove " .. fs.join(DIR, "sweep.lock") .. " by hand")
  fs.remove(fs.join(DIR, "sweep.lock"))
  -- a sweep on such a folder writes nothing, fresh = true included
  local sdir = fs.mkdir(fs.join(DIR, "held"))
  fs.write(fs.join(sdir, "sweep.lock"), json.encode({ pid = 1, host = "elsewhere.example", start = "1" }))
  for _, fresh in ipairs({ false, true }) do
    local ok2, err2 = pcall(sweep.run, { name = "held", out = DIR, print = false, fresh = fresh,
      matrix = { a = { 1 } }, run = function() return {} end })
    T.ok(not ok2, "refused")
    T.contains(tostring(err2), "is already running")
    T.same(fs.list(sdir), { ".sweep.lock", "sweep.lock" }, "nothing written")
    T.same(fs.list(DIR), { ".sweep.lock", "held" }, "nothing moved aside")
  end
end)

T.run()
fs.remove(DIR, { recursive = true })
kb.log.debug("done")
