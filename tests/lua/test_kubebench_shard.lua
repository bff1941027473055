-- A Kubebench scenario runs one experiment: sharded, it refuses before
-- creating anything (N shards would run the experiment N times), while
-- inside a part already split (a sharded sweep's cell) it runs as usual.
local T = require "kb.testing"
local fs = require "kb.fs"
local shard = require "kb.shard"

local SRC = os.getenv("KBRUN_SOURCE_DIR") or ".."
local scenario = dofile(fs.join(SRC, "scenarios", "kubebench_tf_cnn.lua"))

T.case("a sharded Kubebench scenario refuses, naming why", function()
  local saved_i, saved_n = shard.index, shard.count
  shard.set(1, 3)
  local p = {}
  for k, v in pairs(scenario.params) do p[k] = v end
  local ok, err = pcall(scenario.run, p)
  shard.set(saved_i, saved_n)
  T.ok(not ok, "refused")
  T.eq(type(err) == "table" and err.class, "usage")
  T.contains(tostring(err), "runs one experiment, which cannot be split into 3 shards (it would run 3 times)")
  -- inside a split part the shard is not split again
  shard.set(1, 3)
  local i, n = shard.within_part("cells", shard.current)
  shard.set(saved_i, saved_n)
  T.same({ i, n }, { 0, 1 })
end)

T.run()
