--- kb.commands: kbrun's subcommands written in Lua (`kbrun NAME ...`).
-- Each receives {argv = {...}, tty = bool} and ends with kb.core.exit(code).
local core = require "kb.core"
local kb = require "kb"

local M = {}

local function fail(code, fmt, ...)
  io.stderr:write("kbrun: ", string.format(fmt, ...), "\n")
  core.exit(code)
end

--- kbrun report DIR...: rebuilds result/report.html of each experiment
-- folder from its result/result.json (and output/report-data.json).
function M.report(args)
  local dirs = args.argv
  if #dirs == 0 then return fail(2, "usage: kbrun report EXPERIMENT_DIR...") end
  for _, dir in ipairs(dirs) do
    if kb.fs.exists(dir) ~= "dir" then
      return fail(2, "'%s' is not an experiment folder", dir)
    end
    local ok, path = pcall(require("kb.report").write, dir)
    if not ok then return fail(1, "%s: %s", dir, tostring(path)) end
    print(path)
  end
  core.exit(0)
end

return M
