--- kb.cli: kbrun's subcommands written in Lua (`kbrun NAME ...`).
-- Each receives {argv = {...}, tty = bool} and ends with kb.core.exit(code).
local core = require "kb.core"
local kb = require "kb"

local M = {}

local function err_text(err)
  if type(err) == "table" then return err.message or tostring(err) end
  return tostring(err)
end

-- The first line of a usage text (the synopsis): what a usage error
-- prints; --help prints the whole text.
local function synopsis(usage)
  return (usage:match("^[^\n]*"))
end

local function fail(code, fmt, ...)
  io.stderr:write("kbrun: ", string.format(fmt, ...), "\n")
  core.exit(code)
end

--- kbrun report [--rebuild] DIR...: rebuilds result/report.html of each
-- experiment folder (DIR, the cells of a sweep folder and its sweep.html,
-- or every experiment and sweep in a folder of them) from its
-- result/result.json (and
-- output/report-data.json). When result.json is missing or older than
-- output/journal.jsonl (kbrun was killed), or with --rebuild, first
-- rebuilds result.json (and a storm's runs.csv, latencies.csv) from the
-- journal (kb.results.rebuild).
function M.report(args)
  local usage = [[
usage: kbrun report [--rebuild] DIR...
       kbrun report --history [-o DIR | --db URL] [--metric M:STAT ...]   (kbrun report --history --help)

Rebuilds result/report.html of each DIR: an experiment folder, a sweep folder
(its cells' reports, then sweep.html), or a folder of them (an experiments
folder, looked into one level deep). An experiment whose result.json is
missing or older than output/journal.jsonl (kbrun was killed) first gets
result.json (and a storm's runs.csv, latencies.csv) rebuilt from the journal.

  --rebuild         rebuild result.json from the journal even when it is current
  -h, --help        this text

Prints the path of every page written. Exit codes: 0 done; 1 a folder could
not be rebuilt; 2 usage error, or a DIR that holds no experiment or sweep.]]
  for _, a in ipairs(args.argv) do
    if a == "--history" then return M.report_history(args) end -- the results database's trend page
  end
  local dirs, force = {}, false
  for _, a in ipairs(args.argv) do
    if a == "--rebuild" then force = true
    elseif a == "-h" or a == "--help" then io.stdout:write(usage, "\n") return core.exit(0)
    elseif a:sub(1, 1) == "-" then return fail(2, "report: unknown option '%s'\n%s", a, synopsis(usage))
    else dirs[#dirs + 1] = a end
  end
  if #dirs == 0 then return fail(2, "%s", synopsis(usage)) end
  local rebuild = require "kb.results.rebuild"
  -- each DIR: an experiment, a sweep (its cells, then sweep.html) or a
  -- folder of them (kb.report.targets)
  local targets = {}
  for _, dir in ipairs(dirs) do
    local okt, list = pcall(require("kb.report").targets, dir)
    if not okt then return fail(2, "report: %s", err_text(list)) end
    for _, t in ipairs(list) do targets[#targets + 1] = t end
  end
  for _, t in ipairs(targets) do
    local dir = t.dir
    -- a report (or a run) killed while writing left temporaries behind
    require("kb.tmpfiles").clean_tree(dir, 1)
    local ok, path = pcall(function()
      if t.kind == "sweep" then return require("kb.sweep.report").rebuild(dir) end
      local needed, why = rebuild.needed(dir)
      if force or needed then
        local html, doc = rebuild.experiment(dir)
        io.stderr:write(string.format("kbrun: %s: rebuilt from output/journal.jsonl (%s; status %s)\n",
          dir, why or "--rebuild", doc.status))
        return html
      end
      local opts, result = {}, kb.fs.join(dir, "result", "result.json")
      if kb.fs.exists(result) == "file" then
        local okd, doc = pcall(kb.json.decode, kb.fs.read(result))
        if okd then opts = rebuild.report_options(doc) end
      end
      return require("kb.report").write(dir, nil, opts)
    end)
    if not ok then return fail(1, "%s: %s", dir, err_text(path)) end
    print(path)
  end
  core.exit(0)
end

--- kbrun render [--argo] EXPERIMENT [key=value...]: prints, as YAML, the
-- manifests a Kubebench experiment would create (the main job, and the
-- post job if it is a container), or with --argo the Argo Workflow that
-- runs it in the cluster; creates nothing. EXPERIMENT is an experiment
-- YAML file or a scenario made with kb.kubebench.scenario. key=value
-- override params; namespace=, timeout= and keep= set those options.
function M.render(args)
  local usage = [[
usage: kbrun render [--argo] EXPERIMENT.yaml|SCENARIO.lua [key=value...]

Prints, as YAML, the manifests a Kubebench experiment would create (its job,
and its post job when that is a container), creating nothing. EXPERIMENT is
an experiment file, or a scenario made with kb.kubebench.scenario.
key=value overrides the experiment's params; namespace=, timeout= and keep=
set those options (docs/kubebench.md).

  --argo            the Argo Workflow that runs the experiment instead
  -h, --help        this text

Exit codes: 0 printed; 1 the experiment could not be rendered; 2 usage error
or an unreadable file.]]
  local argo, file, assignments = false, nil, {}
  for _, a in ipairs(args.argv) do
    if a == "--argo" then argo = true
    elseif a == "-h" or a == "--help" then io.stdout:write(usage, "\n") return core.exit(0)
    elseif a:sub(1, 1) == "-" then return fail(2, "render: unknown option '%s'\n%s", a, synopsis(usage))
    elseif not file then file = a
    else assignments[#assignments + 1] = a end
  end
  if not file then return fail(2, "%s", synopsis(usage)) end
  if not kb.fs.exists(file) then return fail(2, "render: cannot read '%s'", file) end
  local kubebench = require "kb.kubebench"
  local overrides, perr = require("kb.params").parse_assignments(assignments)
  if not overrides then return fail(2, "render: %s", perr) end
  local opts = { params = {} }
  for k, v in pairs(overrides) do
    if k == "namespace" or k == "timeout" or k == "keep" then opts[k] = v
    elseif k ~= "host" then opts.params[k] = v end
  end
  local ok, err = pcall(function()
    local exp
    if file:match("%.lua$") then
      local chunk = assert(loadfile(file))
      local s = chunk()
      exp = type(s) == "table" and (s.experiment or s)
      if type(exp) ~= "table" then error("render: " .. file .. " does not return a kubebench scenario or experiment", 0) end
    else
      exp = file
    end
    exp = kubebench.load(exp, file:match("%.lua$") and { dir = kb.fs.dirname(file) } or nil)
    if argo then
      io.stdout:write(kb.yaml.encode(kubebench.workflow(exp, opts)))
      return
    end
    local r = kubebench.render(exp, opts)
    local docs = { r.manifest }
    if r.post_job then docs[2] = r.post_job end
    io.stdout:write(kb.yaml.encode_all(docs))
  end)
  if not ok then
    return fail(1, "render: %s", type(err) == "table" and (err.message or tostring(err)) or tostring(err))
  end
  core.exit(0)
end


local COMPARE_USAGE = [[
usage: kbrun compare [options] A B
       kbrun compare --baseline last|last:N|ID [-o DIR | --db URL] [options] B

Compares two experiments, or two sweeps cell by cell, metric by metric: p50
and p99 of every histogram with the difference and a significance test on
the two distributions (verdict slower, faster or same), every counter and
gauge, and every numeric field of the result (success_rate, ...).

A and B: experiment folders (<out>/<id>/ with result/result.json), result.json
files, or two sweeps: any folders of experiment folders (such as a sweep's
<out>/<name>/). Sweep cells are matched by scenario and parameters; a cell's
repeats are combined first (histograms merged, numbers averaged).

  --metric NAME     gate this metric: a histogram key (api.call{op=get}) or
                    name (its label sets merged), a counter, or a result
                    field (success_rate, result.runs.succeeded); repeatable
  --stat STAT       the statistic a histogram gate compares: p50 p75 p90 p95
                    p99 (default) p999 p9999 mean min max
  --tolerance T     how much worse B may be, relative to A: 10% or 0.1
                    (default 5%); without --metric, gates every histogram
                    present in both
  --better DIR      lower | higher: the better direction (default lower;
                    higher for result fields naming success or throughput:
                    succe..., throughput, per_second, rps, passed)
  --test T          mw (Mann-Whitney U, default), ks (Kolmogorov-Smirnov),
                    none (the tolerance alone)
  --alpha A         significance level of the test, 0 < A < 1 (default 0.05)
  --json            the comparison as JSON on stdout
  --baseline SPEC   A from the results database: last (the most recent passed
                    experiment of B's scenario, B itself excepted), last:N (the
                    N-th most recent), or an experiment id; B may be an id too
  -o, --out DIR / --db URL   the results database (DIR/kbrun.db, default
                    ./experiments/kbrun.db; docs/results.md)
  -h, --help        this text

--stat, --tolerance and --better apply to every gate. A gate regresses when
B is worse than A by more than the tolerance and, for a histogram, the test
finds the distributions different at --alpha. Without --metric or
--tolerance, compare only reports.

Exit codes: 0 no gate regressed (or no gate); 1 a gate regressed (in any
sweep cell), or its metric is missing from one side; 2 usage error,
unreadable input, a gated metric in neither run, an experiment compared
with a sweep, or two sweeps with no cell in common. Reference:
docs/scale-out.md.]]

--- kbrun compare [options] A B: see COMPARE_USAGE and kb.results.compare.
function M.compare(args)
  local compare = require "kb.results.compare"
  local opts, paths, metrics, json_out = { gates = {} }, {}, {}, false
  local tolerance, stat, better, baseline
  local db_opts = {}
  local ok, err = pcall(function()
    local argv, i = args.argv, 1
    local function value(opt)
      i = i + 1
      if argv[i] == nil then error({ class = "usage", message = "compare: " .. opt .. " needs a value" }) end
      return argv[i]
    end
    while i <= #argv do
      local a = argv[i]
      if a == "--metric" then metrics[#metrics + 1] = value(a)
      elseif a == "--stat" then stat = compare.check_stat(value(a))
      elseif a == "--tolerance" then tolerance = compare.parse_tolerance(value(a))
      elseif a == "--better" then
        better = value(a)
        if better ~= "lower" and better ~= "higher" then
          error({ class = "usage", message = "compare: --better wants lower or higher, got '" .. better .. "'" })
        end
      elseif a == "--test" then
        opts.test = value(a)
        if opts.test ~= "mw" and opts.test ~= "ks" and opts.test ~= "none" then
          error({ class = "usage", message = "compare: --test wants mw, ks or none, got '" .. opts.test .. "'" })
        end
      elseif a == "--alpha" then
        opts.alpha = tonumber(value(a))
        if not opts.alpha or opts.alpha <= 0 or opts.alpha >= 1 then
          error({ class = "usage", message = "compare: --alpha wants a number between 0 and 1" })
        end
      elseif a == "--json" then json_out = true
      elseif a == "--baseline" then baseline = value(a)
      elseif a == "--db" then db_opts["--db"] = value(a)
      elseif a == "-o" or a == "--out" then db_opts["--out"] = value(a)
      elseif a == "-h" or a == "--help" then error({ class = "help" })
      elseif a:sub(1, 1) == "-" then
        error({ class = "usage", message = "compare: unknown option '" .. a .. "'\n" .. COMPARE_USAGE })
      else paths[#paths + 1] = a end
      i = i + 1
    end
    if #paths ~= (baseline and 1 or 2) then error({ class = "usage", message = COMPARE_USAGE }) end
    for _, m in ipairs(metrics) do
      opts.gates[#opts.gates + 1] = { metric = m, stat = stat or "p99", tolerance = tolerance or 0.05, better = better }
    end
    if #metrics == 0 and tolerance then
      opts.all_histograms, opts.stat, opts.tolerance, opts.better = true, stat or "p99", tolerance, better
    end
    local report = baseline and require("kb.cli.results").baseline_compare(baseline, paths[1], db_opts, opts)
      or compare.paths(paths[1], paths[2], opts)
    io.stdout:write(json_out and compare.json(report) or compare.format(report))
    return report
  end)
  if not ok then
    if type(err) == "table" and err.class == "help" then
      io.stdout:write(COMPARE_USAGE, "\n")
      return core.exit(0)
    end
    return fail(2, "%s", err_text(err))
  end
  core.exit(err.regressed and 1 or 0)
end

--- kbrun merge [-o OUT] [--name NAME] [--force] DIR...: merges the
-- experiments (the shards of one run) into a new experiment; see kb.results.merge.
function M.merge(args)
  local usage = [[
usage: kbrun merge [-o OUT] [--name NAME] [--force] EXPERIMENT_DIR...

Merges the experiments of one sharded run (kbrun --shard I/N) into a new
experiment <OUT>/<scenario>-merged-<date>-<xxxx>/ and prints its path:
histograms bucket by bucket, counters added, result fields by their name,
thresholds evaluated again (docs/scale-out.md).

  -o, --out OUT     where the merged experiment goes (default: the folder of
                    the first input)
  --name NAME       its name instead of <scenario>-merged
  --results-db URL  where the merged experiment is also recorded (default
                    OUT/kbrun.db; off: nowhere; docs/results.md)
  --force           merge even with missing, repeated or mismatched shards
                    (the warnings are recorded in merge.warnings)
  -h, --help        this text

Exit codes: 0 merged; 1 refused (other scenarios or parameters, missing or
overlapping shards) or unreadable input; 2 usage error; 3 merged, but the
results database could not record it.]]
  local dirs, opts = {}, {}
  local argv, i = args.argv, 1
  while i <= #argv do
    local a = argv[i]
    if a == "-o" or a == "--out" or a == "--name" or a == "--results-db" then
      i = i + 1
      if argv[i] == nil then return fail(2, "merge: %s needs a value", a) end
      opts[a == "--name" and "name" or (a == "--results-db" and "results_db" or "out")] = argv[i]
    elseif a == "--force" then opts.force = true
    elseif a == "-h" or a == "--help" then io.stdout:write(usage, "\n") return core.exit(0)
    elseif a:sub(1, 1) == "-" then return fail(2, "merge: unknown option '%s'\n%s", a, synopsis(usage))
    else dirs[#dirs + 1] = a end
    i = i + 1
  end
  if #dirs == 0 then return fail(2, "%s", synopsis(usage)) end
  local ok, exp, doc = pcall(require("kb.results.merge").experiments, dirs, opts)
  if not ok then return fail(1, "merge: %s", err_text(exp)) end
  for _, w in ipairs(doc.merge.warnings) do io.stderr:write("kbrun: merge: warning: ", w, "\n") end
  if #doc.merge.unmerged > 0 then
    io.stderr:write("kbrun: merge: not merged (kept per shard): ", table.concat(doc.merge.unmerged, ", "), "\n")
  end
  print(exp.dir)
  -- the merged experiment in the results database, as a run's (docs/results.md)
  local rdb = require "kb.results.db"
  rdb.configure { out = exp.out, url = opts.results_db }
  rdb.record(doc, exp.dir)
  rdb.close()
  if #rdb.failures() > 0 then
    return fail(3, "merge: results not fully saved: %s: %s", rdb.active_name(), rdb.failures()[1].error)
  end
  core.exit(0)
end

--- kbrun k8s-job SCENARIO --shards N [options]: prints (or with --apply
-- creates) the ConfigMap, PVC and Indexed Job of a sharded run; see
-- kb.cli.k8s_job.
function M.k8s_job(args)
  local k8s_job = require "kb.cli.k8s_job"
  local ok, opts = pcall(k8s_job.parse_args, args.argv)
  if not ok then return fail(2, "%s", err_text(opts)) end
  if opts.help then io.stdout:write(k8s_job.USAGE, "\n") return core.exit(0) end
  local okr, objects = pcall(k8s_job.render, opts)
  if not okr then return fail(2, "%s", err_text(objects)) end
  if not opts.apply then
    io.stdout:write(k8s_job.yaml(objects))
    return core.exit(0)
  end
  local oka, done = pcall(k8s_job.apply, objects, opts)
  if not oka then return fail(1, "k8s-job: %s", err_text(done)) end
  for _, d in ipairs(done) do print(string.format("%s/%s created", d.kind:lower(), d.name)) end
  core.exit(0)
end
--- kbrun history ... and kbrun db import|query ...: the results database
-- (kb.cli.results, docs/results.md).
local function results_command(name)
  return function(args)
    local ok, code = pcall(function() return require("kb.cli.results")[name](args) end)
    if not ok then
      if type(code) == "table" and code.class == "usage" then return fail(2, "%s", code.message) end
      return fail(1, "%s", err_text(code))
    end
    core.exit(code)
  end
end
M.history = results_command("history")
M.report_history = results_command("report_history")
M.db = results_command("db")

M["k8s-job"] = M.k8s_job -- src/main.c looks subcommands up by their command-line name

return M
