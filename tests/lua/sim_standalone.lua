--- Test fixture: a standalone `kbrun sim` child on an ephemeral loopback
-- port, for tests whose client must run on the real clock.
--
--   local sim <close>, url = require("sim_standalone").start { config = path, speed = 600 }
local kb = require "kb"
local T = require "kb.testing"

local M = {}

--- start{config =, speed =, dir =} -> the process (to-be-closed: it is
-- killed) and its URL; `dir` receives its kubeconfig.
function M.start(opts)
  local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
  local cmd = { bin, "sim", "--listen", "127.0.0.1:0", "--speed", tostring(opts.speed or 600) }
  if opts.config then cmd[#cmd + 1], cmd[#cmd + 2] = "--config", opts.config end
  if opts.dir then cmd[#cmd + 1], cmd[#cmd + 2] = "--kubeconfig-out", kb.fs.join(opts.dir, "kubeconfig") end
  local sim = kb.process.spawn { cmd = cmd }
  local url = sim:read_line()
  T.ok(url and url:match("^http://127%.0%.0%.1:%d+$"), "kbrun sim printed its URL: " .. tostring(url))
  return sim, url
end

return M
