-- kb.results.compare and `kbrun compare`: statistics, gates, experiments and sweeps.
local T = require "kb.testing"
local kb = require "kb"
local compare = require "kb.results.compare"

local json, fs = kb.json, kb.fs

local function hist_of(values)
  local h = kb.hist.new()
  for _, v in ipairs(values) do h:record(v) end
  return h
end

T.case("erfc matches reference values", function()
  -- References: Python's math.erfc.
  T.eq(compare.erfc(0), 1)
  T.near(compare.erfc(0.5), 0.4795001221869535, 1e-14)
  T.near(compare.erfc(1), 0.15729920705028513, 1e-14)
  T.near(compare.erfc(-1), 2 - 0.15729920705028513, 1e-14)
  T.near(compare.erfc(2.6) / 0.00023603441652934908, 1, 1e-9)
  T.near(compare.erfc(3) / 2.2090496998585438e-05, 1, 1e-9)
  T.near(compare.erfc(6) / 2.1519736712498916e-17, 1, 1e-9)
end)

T.case("Mann-Whitney U on histograms equals the textbook test", function()
  -- No ties: U = 9 of 9 pairs, z = (9 - 4.5 - 0.5) / sqrt(9 * 7 / 12).
  local r = compare.mann_whitney(hist_of({ 1, 2, 3 }), hist_of({ 4, 5, 6 }))
  T.eq(r.u, 9)
  T.eq(r.effect, 1)
  T.near(r.p, 0.0808555983700523, 1e-12)
  -- Ties (values in one bucket) get mid-ranks and the tie-corrected
  -- variance; reference computed by brute force over the 20 pairs.
  r = compare.mann_whitney(hist_of({ 1, 1, 2, 3 }), hist_of({ 1, 2, 2, 4, 5 }))
  T.eq(r.u, 14)
  T.near(r.effect, 0.7, 1e-12)
  T.near(r.z, 0.8874119674649424, 1e-12)
  T.near(r.p, 0.3748571426833401, 1e-12)
  -- Symmetric, and identical samples are not different at all.
  local back = compare.mann_whitney(hist_of({ 1, 2, 2, 4, 5 }), hist_of({ 1, 1, 2, 3 }))
  T.near(back.p, r.p, 1e-12)
  T.near(back.effect, 0.3, 1e-12)
  local same = compare.mann_whitney(hist_of({ 1, 2, 3 }), hist_of({ 1, 2, 3 }))
  T.eq(same.p, 1)
  T.eq(same.effect, 0.5)
  T.eq(compare.mann_whitney(kb.hist.new(), hist_of({ 1 })).p, 1)
end)

T.case("Kolmogorov-Smirnov on histograms", function()
  local r = compare.ks(hist_of({ 1, 2, 3 }), hist_of({ 4, 5, 6 }))
  T.eq(r.d, 1)
  T.ok(r.p < 0.1, "disjoint samples of 3: p " .. r.p)
  local same = compare.ks(hist_of({ 1, 2, 3 }), hist_of({ 1, 2, 3 }))
  T.eq(same.d, 0)
  T.eq(same.p, 1)
  -- Large samples, a 30 % shift: certain.
  math.randomseed(7)
  local a, b = kb.hist.new(), kb.hist.new()
  for _ = 1, 2000 do
    a:record(0.01 * (1 + math.random()))
    b:record(0.013 * (1 + math.random()))
  end
  r = compare.ks(a, b)
  T.ok(r.d > 0.3 and r.p < 1e-6, "d " .. r.d .. " p " .. r.p)
  T.ok(r.effect > 0.5, "B is slower")
end)

T.case("tolerances and stats", function()
  T.eq(compare.parse_tolerance("10%"), 0.1)
  T.eq(compare.parse_tolerance("0.25"), 0.25)
  T.eq(compare.parse_tolerance("0%"), 0)
  T.raises(function() compare.parse_tolerance("ten") end,
    "--tolerance wants a percentage like 10% or a fraction like 0.1, got 'ten'")
  T.eq(compare.check_stat("p999"), "p999")
  T.raises(function() compare.check_stat("p42") end,
    "--stat wants p50, p75, p90, p95, p99, p999, p9999, mean, min or max, got 'p42'")
end)

-- A result document with one latency histogram drawn from a seeded
-- generator, scaled by `slow`.
local function doc(seed, slow, extra)
  math.randomseed(seed)
  local h = kb.hist.new()
  for _ = 1, 3000 do h:record(slow * 0.02 * (1 + math.random() ^ 4 * 9)) end
  local ok = 990
  local d = {
    scenario = { name = "demo" }, status = "passed", params = { load = 1 },
    metrics = { version = 1, metrics = {
      { key = "api.call{op=get}", name = "api.call", labels = { op = "get" }, kind = "histogram",
        summary = h:summary(), encoded = h:encode() },
      { key = "api.errors", name = "api.errors", labels = {}, kind = "counter", value = 1000 - ok },
    } },
    result = { requests = 1000, succeeded = ok, success_rate = ok / 1000 },
  }
  for k, v in pairs(extra or {}) do d[k] = v end
  return d
end

local GATE = { { metric = "api.call", stat = "p99", tolerance = 0.10 } }

T.case("a seeded regression fails the gate, identical and noisy runs pass", function()
  local base = doc(1, 1.0)
  local r = compare.documents(base, doc(1, 1.0), { gates = GATE })
  T.eq(r.regressed, false)
  T.eq(r.gates[1].relative, 0)
  T.eq(r.gates[1].test.p, 1)
  T.eq(r.histograms[1].verdict, "same")
  -- Another sample of the same distribution: no regression.
  r = compare.documents(base, doc(2, 1.0), { gates = GATE })
  T.eq(r.regressed, false, "same distribution, other seed")
  -- 30 % slower everywhere.
  r = compare.documents(base, doc(1, 1.3), { gates = GATE })
  T.eq(r.regressed, true)
  local g = r.gates[1]
  T.eq(g.kind, "histogram")
  T.near(g.relative, 0.3, 0.01)
  T.ok(g.test.significant and g.test.p < 1e-10, "significant")
  T.eq(r.histograms[1].verdict, "slower")
  T.near(r.histograms[1].stats.p50.relative, 0.3, 0.01)
  -- Within the tolerance: passes.
  r = compare.documents(base, doc(1, 1.3), { gates = { { metric = "api.call", stat = "p50", tolerance = 0.5 } } })
  T.eq(r.regressed, false)
  -- Faster is never a regression.
  r = compare.documents(doc(1, 1.3), base, { gates = GATE })
  T.eq(r.regressed, false)
  T.eq(r.histograms[1].verdict, "faster")
  -- KS finds it too; without a test the tolerance alone decides.
  T.eq(compare.documents(base, doc(1, 1.3), { gates = GATE, test = "ks" }).regressed, true)
  T.eq(compare.documents(base, doc(1, 1.3), { gates = GATE, test = "none" }).gates[1].test, nil)
end)

T.case("result fields and counters: success rate and direction", function()
  local worse = doc(1, 1.0)
  worse.result = { requests = 1000, succeeded = 900, success_rate = 0.9 }
  local r = compare.documents(doc(1, 1.0), worse, { gates = { { metric = "success_rate", tolerance = 0.05 } } })
  local g = r.gates[1]
  T.eq(g.kind, "result")
  T.eq(g.better, "higher")
  T.near(g.relative, 0.9 / 0.99 - 1, 1e-12)
  T.eq(g.regressed, true)
  local found
  for _, row in ipairs(r.results) do if row.path == "success_rate" then found = row end end
  T.near(found.delta, -0.09, 1e-12)
  -- result. prefix, nested field, counter gate (lower is better).
  r = compare.documents(doc(1, 1.0), worse, { gates = { { metric = "result.succeeded", tolerance = 0.5 },
    { metric = "api.errors", tolerance = 0.1 } } })
  T.eq(r.gates[1].regressed, false)
  T.eq(r.gates[2].kind, "counter")
  T.eq(r.gates[2].regressed, false)
  T.eq(r.counters[1].key, "api.errors")
  -- A metric only on one side fails the gate.
  local gone = doc(1, 1.0)
  gone.metrics.metrics[1] = nil
  gone.metrics.metrics = { gone.metrics.metrics[2] }
  r = compare.documents(doc(1, 1.0), gone, { gates = GATE })
  T.eq(r.regressed, true)
  T.eq(r.gates[1].error, "histogram 'api.call' is only in A")
  T.eq(r.histograms[1].only, "A")
end)

-- ---- folders and the command line -------------------------------------------------

local function write_experiment(root, id, d)
  fs.mkdir(fs.join(root, id, "result"))
  fs.write(fs.join(root, id, "result", "result.json"), json.encode(d))
  return fs.join(root, id)
end

local BIN = os.getenv("KBRUN_BIN")

local function kbrun(...)
  return kb.process.run { cmd = { BIN, ... }, timeout = 60 }
end

T.case("kbrun compare: exit codes, table and JSON", function()
  if not BIN then error("KBRUN_BIN is not set (run through ctest)") end
  local work = fs.tmpdir("kb-compare-")
  local a = write_experiment(work, "a", doc(1, 1.0))
  local a2 = write_experiment(work, "a2", doc(1, 1.0))
  local b = write_experiment(work, "b", doc(1, 1.3))

  local r = kbrun("compare", "--metric", "api.call", "--tolerance", "10%", a, a2)
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "ok api.call p99")
  T.contains(r.stdout, "api.call{op=get}")
  r = kbrun("compare", "--metric", "api.call", "--tolerance", "10%", a, b)
  T.eq(r.code, 1, r.stderr)
  T.contains(r.stdout, "REGRESSED api.call p99")
  T.contains(r.stdout, "slower")
  -- No gate: a report, exit 0 whatever changed.
  T.eq(kbrun("compare", a, b).code, 0)
  -- A bare tolerance gates every histogram.
  T.eq(kbrun("compare", "--tolerance", "10%", a, b).code, 1)
  T.eq(kbrun("compare", "--tolerance", "50%", a, b).code, 0)
  r = kbrun("compare", "--json", "--metric", "success_rate", a, b)
  T.eq(r.code, 0, r.stderr)
  local rep = json.decode(r.stdout)
  T.eq(rep.kind, "experiment")
  T.eq(rep.gates[1].metric, "success_rate")
  T.eq(rep.histograms[1].test.name, "mann-whitney")
  T.eq(rep.regressed, false)

  -- Usage errors: exit 2 with the reason.
  r = kbrun("compare", "--metric", "no.such", a, b)
  T.eq(r.code, 2)
  T.contains(r.stderr, "kbrun: compare: no histogram, counter or result field 'no.such' in A or B")
  r = kbrun("compare", a)
  T.eq(r.code, 2)
  T.contains(r.stderr, "usage: kbrun compare")
  r = kbrun("compare", "--frob", a, b)
  T.eq(r.code, 2)
  T.contains(r.stderr, "compare: unknown option '--frob'")
  r = kbrun("compare", "--test", "t", a, b)
  T.eq(r.code, 2)
  T.contains(r.stderr, "compare: --test wants mw, ks or none, got 't'")
  r = kbrun("compare", a, fs.join(work, "missing"))
  T.eq(r.code, 2)
  T.contains(r.stderr, "compare: '" .. fs.join(work, "missing") .. "' does not exist")
  fs.mkdir(fs.join(work, "empty"))
  r = kbrun("compare", a, fs.join(work, "empty"))
  T.eq(r.code, 2)
  T.contains(r.stderr, "is neither an experiment folder (no result/result.json) nor a sweep")
  fs.remove(work, { recursive = true })
end)

T.case("sweeps are compared cell by cell, matched by parameters", function()
  local work = fs.tmpdir("kb-compare-sweep-")
  local sa, sb = fs.join(work, "sweep-a"), fs.join(work, "sweep-b")
  fs.mkdir(sa)
  fs.mkdir(sb)
  fs.write(fs.join(sa, "sweep.csv"), "load\n1\n2\n")
  -- Cell load=1 unchanged; cell load=2 30 % slower in B, and repeated
  -- twice in A (the repeats merge); load=3 only in B.
  write_experiment(sa, "demo-1", doc(1, 1.0, { params = { load = 1, mode = "x" } }))
  write_experiment(sa, "demo-2a", doc(2, 1.0, { params = { load = 2, mode = "x" } }))
  write_experiment(sa, "demo-2b", doc(3, 1.0, { params = { load = 2, mode = "x" } }))
  write_experiment(sb, "demo-1", doc(1, 1.0, { params = { load = 1, mode = "x" } }))
  write_experiment(sb, "demo-2", doc(4, 1.3, { params = { load = 2, mode = "x" } }))
  write_experiment(sb, "demo-3", doc(5, 1.0, { params = { load = 3, mode = "x" } }))
  local r = compare.paths(sa, sb, { gates = GATE })
  T.eq(r.kind, "sweep")
  T.eq(#r.cells, 2)
  T.eq(r.cells[1].name, "load=1")
  T.eq(r.cells[1].report.regressed, false)
  T.eq(r.cells[2].name, "load=2")
  T.eq(r.cells[2].report.regressed, true)
  T.eq(r.cells[2].report.histograms[1].count_a, 6000)
  T.same(r.only_b, { "load=3" })
  T.eq(r.regressed, true)
  local text = compare.format(r)
  T.contains(text, "== cell load=2  [REGRESSED]")
  T.contains(text, "cells only in B: load=3")
  T.raises(function() compare.paths(sa, fs.join(sb, "demo-1")) end,
    "is a sweep but '" .. fs.join(sb, "demo-1") .. "' is an experiment")
  fs.remove(work, { recursive = true })
end)

T.case("kb.sweep cell folders: flat metrics compared, repeats averaged", function()
  local work = fs.tmpdir("kb-compare-ksweep-")
  local function cell(root, id, load, p50, ok)
    write_experiment(root, id, { sweep = "taxi", cell = "c001", key = "{}", status = "ok",
      params = { api = "v1", load = load }, metrics = { duration_p50 = p50, ["runs.succeeded"] = ok } })
  end
  local sa, sb = fs.join(work, "a", "taxi"), fs.join(work, "b", "taxi")
  cell(sa, "c001-r1", 10, 600.0, 10)
  cell(sa, "c001-r2", 10, 640.0, 10)
  cell(sa, "c002-r1", 50, 700.0, 50)
  cell(sb, "c001-r1", 10, 620.0, 10)
  cell(sb, "c002-r1", 50, 910.0, 45)
  local r = compare.paths(sa, sb, { gates = { { metric = "duration_p50", tolerance = 0.2 } } })
  T.eq(#r.cells, 2)
  T.eq(r.cells[1].name, "load=10")
  local g1 = r.cells[1].report.gates[1]
  T.eq(g1.a, 620.0, "mean of the repeats")
  T.eq(g1.kind, "result")
  T.eq(g1.regressed, false)
  T.eq(r.cells[2].report.gates[1].regressed, true)
  T.near(r.cells[2].report.gates[1].relative, 0.3, 1e-12)
  local rows = {}
  for _, row in ipairs(r.cells[2].report.results) do rows[row.path] = row end
  T.eq(rows["runs.succeeded"].delta, -5)
  T.eq(r.regressed, true)
  fs.remove(work, { recursive = true })
end)

T.run()
