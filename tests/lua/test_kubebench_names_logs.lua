--- Kubebench experiments under kbrun: named after the experiment config as
-- Kubebench names them (<config name>-YYYYMMDDhhmm-xxxx), a post step's own
-- result/result.json kept byte for byte beside kbrun's, and the
-- simulator's training logs following the parameters given, for every
-- bundled training image: tf_cnn_benchmarks (tf-cnn, the MPI launcher)
-- print a step line at step 1 and every 10 up to --num_batches and a total
-- of batch_size * num_batches / running time; pytorch-mnist prints exactly
-- --epochs epoch lines.
local kb = require "kb"
local T = require "kb.testing"

local bin = assert(os.getenv("KBRUN_BIN"), "run by ctest (KBRUN_BIN)")
local src = assert(os.getenv("KBRUN_SOURCE_DIR"), "run by ctest (KBRUN_SOURCE_DIR)")
local tmp = kb.fs.tmpdir("kbrun-test-kubebench-names")

-- Runs a scenario in a child kbrun; returns result.json and the folder.
local function run(name, scenario, ...)
  local out = kb.fs.join(tmp, name)
  local cmd = { bin, "-q", "-o", out, "--seed", "9", scenario, ... }
  local r = kb.process.run { cmd = cmd, timeout = 240 }
  T.eq(r.code, 0, name .. ": " .. r.stderr)
  local found = {}
  for _, e in ipairs(kb.fs.list(out)) do
    if kb.fs.exists(kb.fs.join(out, e, "result", "result.json")) then found[#found + 1] = e end
  end
  T.eq(#found, 1, "one experiment in " .. out)
  local dir = kb.fs.join(out, found[1])
  return kb.json.decode(kb.fs.read(kb.fs.join(dir, "result", "result.json"))), dir, found[1], out
end

local function lines(text, pattern)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    if line:find(pattern) then out[#out + 1] = line end
  end
  return out
end

-- The tf_cnn_benchmarks figures of a log: step numbers printed, the total
-- and the running time the simulator gave the container.
local function tf_cnn(text)
  local steps = {}
  for _, l in ipairs(lines(text, "^%d+\timages/sec: ")) do steps[#steps + 1] = tonumber(l:match("^(%d+)")) end
  return steps, tonumber(text:match("total images/sec: ([%d.]+)")),
    tonumber(text:match("training finished in ([%d.]+)s"))
end

T.case("tf-cnn: named tf-cnn-dummy-YYYYMMDDhhmm-xxxx; its log follows --batch_size and --num_batches", function()
  local doc, dir, id, out = run("tf-cnn", kb.fs.join(src, "scenarios", "kubebench_tf_cnn.lua"),
    "batch_size=4", "num_batches=30")
  T.ok(id:match("^tf%-cnn%-dummy%-%d%d%d%d%d%d%d%d%d%d%d%d%-[a-z0-9][a-z0-9][a-z0-9][a-z0-9]$"), id)
  T.eq(doc.experiment_id, id)
  T.eq(doc.result.experiment_id, id)
  T.eq(doc.result.job_name, id, "the TFJob has the experiment's name")
  -- the stamp is the run's start (UTC minute), or the minute after
  local stamp = id:match("%-(%d+)%-%w+$")
  local y, mo, d, h, mi = doc.started_at:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+)")
  local started = y .. mo .. d .. h .. mi
  T.ok(stamp == started or tonumber(stamp) == tonumber(started) + 1, stamp .. " vs " .. doc.started_at)
  local rows = require("kb.kubebench.report").read(kb.fs.join(out, "report.csv"))
  T.eq(rows[1].experiment_id, id)
  T.ok(kb.fs.exists(kb.fs.join(dir, "output", "journal.jsonl")), "the journal moved with the folder")
  local text = kb.fs.read(kb.fs.join(dir, "output", "worker0.log"))
  local steps, total, took = tf_cnn(text)
  T.same(steps, { 1, 10, 20, 30 })
  T.contains(text, "Batch size:  4 global")
  T.contains(text, "Num batches: 30")
  T.ok(took and took > 0, "running time in the log")
  -- the log prints the running time to 0.1 s: the total within that
  T.ok(math.abs(total - 4 * 30 / took) <= 4 * 30 / took * (0.05 / took) + 0.01,
    string.format("total images/sec %.2f vs 4 * 30 / %.1f s", total, took))
  T.near(doc.result.result.images_per_sec, total, 1e-9, "the post job read the total")
end)

T.case("pytorch-mnist: exactly --epochs epoch lines in every replica's log", function()
  for _, n in ipairs({ 1, 5 }) do
    local doc, dir, id = run("pytorch-" .. n, kb.fs.join(src, "scenarios", "kubebench_pytorch.lua"), "epochs=" .. n)
    T.ok(id:match("^pytorch%-dummy%-%d+%-%w+$"), id)
    local logs = 0
    for _, f in ipairs(kb.fs.list(kb.fs.join(dir, "output"))) do
      if f:match("%.log$") then
        logs = logs + 1
        local text = kb.fs.read(kb.fs.join(dir, "output", f))
        local ep = lines(text, "epoch %d+/%d+")
        T.eq(#ep, n, f .. " epoch lines")
        for i, l in ipairs(ep) do T.contains(l, string.format("epoch %d/%d done", i, n), f) end
      end
    end
    T.eq(logs, 3, "master0, worker0, worker1")
    T.eq(doc.result.result.epochs, n)
    T.near(doc.result.result.loss, 0.0421, 1e-9, "the last epoch's loss")
  end
end)

T.case("mpi: the launcher runs tf_cnn_benchmarks with --batch_size=128 and the default 100 batches", function()
  local _, dir = run("mpi", kb.fs.join(src, "scenarios", "kubebench_mpi.lua"))
  local text = kb.fs.read(kb.fs.join(dir, "output", "launcher0.log"))
  local steps, total, took = tf_cnn(text)
  T.eq(#steps, 11, "steps 1, 10, ..., 100")
  T.eq(steps[11], 100)
  T.contains(text, "Batch size:  128 global")
  T.ok(math.abs(total - 128 * 100 / took) <= 128 * 100 / took * (0.05 / took) + 0.01,
    string.format("total %.2f vs 128 * 100 / %.1f s", total, took))
end)

T.case("a post step's own result/result.json is kept beside kbrun's, and is the result", function()
  local body = '{"images_per_sec": 42.5, "written_by": "the post step"}\n'
  local post = kb.fs.join(tmp, "post.lua")
  kb.fs.write(post, string.format([[
return function(ctx)
  local f = assert(io.open(ctx.result_dir .. "/result.json", "w"))
  f:write(%q)
  f:close()
end
]], body))
  local scenario = kb.fs.join(tmp, "kb_post.lua")
  kb.fs.write(scenario, string.format([[
local kubebench = require "kb.kubebench"
local s = kubebench.scenario { name = "kb_post", dir = %q, experiment = {
  template = "tf_cnn_template.lua", params = "tf-cnn-dummy.yaml", kind = "TFJob", post_job = { lua = %q } } }
return s
]], kb.fs.join(src, "scenarios", "kubebench"), post))
  local doc, dir = run("post", scenario)
  T.eq(kb.fs.read(kb.fs.join(dir, "result", "post-job-result.json")), body, "kept byte for byte")
  T.eq(doc.result.post_job_file, "post-job-result.json")
  T.eq(doc.result.result.images_per_sec, 42.5)
  T.eq(doc.result.result.written_by, "the post step")
  T.eq(doc.experiment_id, doc.result.experiment_id, "result.json is kbrun's document")
end)

T.run()
