#!/usr/bin/env bash
# End-to-end test of the results database (docs/results.md): two taxi_50runs
# runs, then `kbrun history` lists both and prints run.create's trend;
# `kbrun compare --baseline last` passes against the last green run and
# fails on an injected regression (the degraded simulator profile);
# `kbrun db import` indexes folders written without a database;
# `kbrun db query` answers SQL; bad input is a usage error.
set -u
. "$(dirname "$0")/common.bash"
e2e_init results_db
SRC=${KBRUN_SOURCE_DIR:-..}
TAXI="$SRC/scenarios/taxi_50runs.lua"
OUT="$WORK/exp"

expect_code() { [ "$1" = "$2" ] || fail "$3: exit code $1, expected $2"; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }
expect_not_in() { ! grep -qF -- "$2" "$1" || fail "'$2' in $(basename "$1")"; }

"$KBRUN" -q -o "$OUT" --seed 1 "$TAXI" >/dev/null 2>"$WORK/err1"; expect_code $? 0 "run 1"
"$KBRUN" -q -o "$OUT" --seed 2 "$TAXI" >/dev/null 2>"$WORK/err2"; expect_code $? 0 "run 2"
[ "$(ls "$OUT" | grep -c '^taxi-50runs-')" = 2 ] || fail "expected 2 experiment folders"
[ -f "$OUT/kbrun.db" ] || fail "no $OUT/kbrun.db"
# oldest first, as recorded (both may have started in the same second)
mapfile -t ids < <("$KBRUN" db query -o "$OUT" --csv "SELECT id FROM experiments ORDER BY started_at, seq" | tail -n +2)
[ "${#ids[@]}" = 2 ] || fail "expected 2 experiments in the database, got ${#ids[@]}"

# history: both experiments, oldest first, with their 50 runs
"$KBRUN" history -o "$OUT" >"$WORK/list" 2>&1; expect_code $? 0 "history"
expect_in "$WORK/list" "2 experiment(s) in $OUT/kbrun.db"
for id in "${ids[@]}"; do expect_in "$WORK/list" "$id"; done
[ "$(grep -c 'taxi_50runs  passed' "$WORK/list")" = 2 ] || fail "history: not two passed taxi_50runs rows"
"$KBRUN" history -o "$OUT" --json >"$WORK/list.json"; expect_code $? 0 "history --json"
python3 - "$WORK/list.json" "$OUT" <<'PY' || fail "history --json differs from the folders"
import json, sys, os
rows = json.load(open(sys.argv[1]))
out = sys.argv[2]
assert len(rows) == 2, rows
for r in rows:
    doc = json.load(open(os.path.join(out, r["id"], "result", "result.json")))
    assert r["status"] == doc["status"] and r["seed"] == doc["seed"], (r, doc["seed"])
    assert r["started_at"] == doc["started_at"]
    assert abs(r["duration"] - doc["duration"]) == 0
    assert r["runs"] == 50
assert rows[0]["started_at"] <= rows[1]["started_at"]
PY

# the trend of run.create's p99: the values are result.json's, the p-value
# is kbrun compare's for the same pair
"$KBRUN" history -o "$OUT" --metric run.create:p99 >"$WORK/trend" 2>&1; expect_code $? 0 "history --metric"
expect_in "$WORK/trend" "run.create p99 (histogram, lower is better) over 2 experiment(s)"
grep -qE '^  [▁▂▃▄▅▆▇█]{2}$' "$WORK/trend" || fail "no two-point sparkline in the trend"
"$KBRUN" history -o "$OUT" --metric run.create:p99 --json >"$WORK/trend.json"; expect_code $? 0 "trend --json"
"$KBRUN" compare --json --metric run.create "$OUT/${ids[0]}" "$OUT/${ids[1]}" >"$WORK/cmp.json"
python3 - "$WORK/trend.json" "$WORK/cmp.json" "$OUT" <<'PY' || fail "trend differs from result.json / kbrun compare"
import json, sys, os
t = json.load(open(sys.argv[1])); c = json.load(open(sys.argv[2])); out = sys.argv[3]
pts = t["points"]
assert len(pts) == 2
for p in pts:
    doc = json.load(open(os.path.join(out, p["id"], "result", "result.json")))
    want = [m for m in doc["metrics"]["metrics"] if m["key"] == "run.create"][0]["summary"]["p99"]
    assert p["value"] == want, (p["value"], want)
g = c["gates"][0]
assert abs(pts[1]["p"] - g["test"]["p"]) < 1e-12, (pts[1]["p"], g["test"]["p"])
assert abs(pts[1]["relative"] - g["relative"]) < 1e-12
PY

# compare --baseline last: the second run against the first passes...
"$KBRUN" compare --baseline last -o "$OUT" --metric run.create --tolerance 50% "$OUT/${ids[1]}" >"$WORK/base" 2>&1
expect_code $? 0 "compare --baseline last"
expect_in "$WORK/base" "A: ${ids[0]} (--baseline last, $OUT/kbrun.db)"
# ...a run on a degraded control plane fails the gate against the last green run
"$KBRUN" -q -o "$OUT" --seed 3 --sim-profile degraded "$TAXI" >/dev/null 2>&1
slow=$("$KBRUN" db query -o "$OUT" --csv "SELECT id FROM experiments ORDER BY seq DESC LIMIT 1" | tail -n +2)
"$KBRUN" compare --baseline last -o "$OUT" --metric run.create --tolerance 10% "$OUT/$slow" >"$WORK/reg" 2>&1
expect_code $? 1 "compare --baseline last on a regression"
expect_in "$WORK/reg" "REGRESSED run.create p99"
# the baseline can be named by id, last:N, and B by its id in the database
"$KBRUN" compare --baseline "${ids[0]}" -o "$OUT" --metric run.create --tolerance 10% "$slow" >"$WORK/reg2" 2>&1
expect_code $? 1 "compare --baseline ID with B an id"
"$KBRUN" compare --baseline last:5 -o "$OUT" "$OUT/$slow" >"$WORK/e" 2>&1
expect_code $? 2 "--baseline last:5 with two green runs"
expect_in "$WORK/e" "--baseline last:5: results database $OUT/kbrun.db holds"
# the trend marks it
"$KBRUN" history -o "$OUT" --metric run.create --tolerance 10% >"$WORK/trend3" 2>&1
grep "$slow" "$WORK/trend3" | grep -q "REGRESSED" || { fail "the degraded run is not marked REGRESSED"; cat "$WORK/trend3" >&2; }

# docs/results.md's queries on SQLite: the success rate, the failed thresholds
"$KBRUN" db query -o "$OUT" --json "SELECT e.id, json_extract(e.result, '\$.success_rate') AS success_rate,
  avg(CASE WHEN r.state = 'Succeeded' THEN 1.0 ELSE 0.0 END) AS from_runs
  FROM experiments e JOIN runs r ON r.experiment_id = e.id GROUP BY e.id, e.started_at, e.result ORDER BY e.started_at" \
  >"$WORK/sr.json"; expect_code $? 0 "success-rate query"
"$KBRUN" db query -o "$OUT" --json "SELECT e.started_at, e.id, t.metric, t.stat, t.op, t.limit_value, t.actual
  FROM thresholds t JOIN experiments e ON e.id = t.experiment_id WHERE t.passed = 0 ORDER BY e.started_at DESC" \
  >"$WORK/th.json"; expect_code $? 0 "failed-thresholds query"
python3 - "$WORK/sr.json" "$WORK/th.json" "$OUT" "$slow" <<'PY' || fail "the example queries differ from the folders"
import json, sys, os, csv
sr, th, out, slow = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
assert len(sr) == 3
for r in sr:
    doc = json.load(open(os.path.join(out, r["id"], "result", "result.json")))
    runs = list(csv.DictReader(open(os.path.join(out, r["id"], "result", "runs.csv"))))
    assert r["success_rate"] == doc["result"]["success_rate"]
    assert abs(r["from_runs"] - sum(x["state"] == "Succeeded" for x in runs) / len(runs)) < 1e-12
doc = json.load(open(os.path.join(out, slow, "result", "result.json")))
failed = [t for t in doc["thresholds"] if not t["passed"]]
assert failed and [(t["id"], t["metric"], t["actual"]) for t in th] == [(slow, t["name"], t["actual"]) for t in failed], (th, failed)
PY

# db import: folders written without a database
OLD="$WORK/old"
"$KBRUN" -q -o "$OLD" --seed 4 --results-db off "$TAXI" num_runs=5 >/dev/null 2>&1
"$KBRUN" -q -o "$OLD" --seed 5 --results-db off "$TAXI" num_runs=5 >/dev/null 2>&1
[ ! -e "$OLD/kbrun.db" ] || fail "--results-db off wrote a database"
"$KBRUN" db import --db "$WORK/imported.db" "$OLD" >"$WORK/imp" 2>"$WORK/imp.err"; expect_code $? 0 "db import"
expect_in "$WORK/imp.err" "2 experiment(s) recorded in $WORK/imported.db"
"$KBRUN" db query --db "$WORK/imported.db" --csv "SELECT e.id, count(r.idx) AS runs FROM experiments e JOIN runs r ON r.experiment_id = e.id GROUP BY e.id ORDER BY e.id" >"$WORK/q.csv"
expect_code $? 0 "db query --csv"
for d in "$OLD"/taxi-50runs-*/; do
  id=$(basename "$d")
  n=$(($(wc -l <"$d/result/runs.csv") - 1))
  grep -qx "$id,$n" "$WORK/q.csv" || fail "db query: $id should have $n runs: $(cat "$WORK/q.csv")"
done
# importing again replaces
"$KBRUN" db import --db "$WORK/imported.db" "$OLD" >/dev/null 2>&1
"$KBRUN" db query --db "$WORK/imported.db" "SELECT count(*) AS n FROM runs" >"$WORK/q2"
expect_in "$WORK/q2" "10"

# Kubebench's report.csv made again from the database equals the folder's
KB="$WORK/kb"
"$KBRUN" -q -o "$KB" "$SRC/scenarios/kubebench_tf_cnn.lua" >/dev/null 2>&1 || fail "kubebench run 1"
"$KBRUN" -q -o "$KB" "$SRC/scenarios/kubebench_tf_cnn.lua" num_worker=2 >/dev/null 2>&1 || fail "kubebench run 2"
"$KBRUN" db export -o "$KB" report "$WORK/report.csv"; expect_code $? 0 "db export report"
cmp -s "$WORK/report.csv" "$KB/report.csv" || { fail "report.csv from the database differs"; diff "$WORK/report.csv" "$KB/report.csv" >&2; }
[ "$(wc -l <"$WORK/report.csv")" = 3 ] || fail "report.csv: not 2 rows"
"$KBRUN" db export -o "$OUT" report >/dev/null 2>"$WORK/e"; expect_code $? 2 "db export report without Kubebench"
expect_in "$WORK/e" "no Kubebench experiment in $OUT/kbrun.db"

# bad input
"$KBRUN" db query --db "$WORK/imported.db" "SELECT nope FROM experiments" >/dev/null 2>"$WORK/e"
expect_code $? 1 "a bad query"
expect_in "$WORK/e" "kbrun: db query: results database $WORK/imported.db: prepare: no such column: nope"
"$KBRUN" history -o "$WORK/nothing" >/dev/null 2>"$WORK/e"; expect_code $? 2 "history without a database"
expect_in "$WORK/e" "no results database at $WORK/nothing/kbrun.db"
[ ! -e "$WORK/nothing" ] || fail "history made a folder"
"$KBRUN" history -o "$OUT" --metric no.such >/dev/null 2>"$WORK/e"; expect_code $? 2 "history --metric no.such"
expect_in "$WORK/e" "no experiment has a histogram, counter or result field 'no.such'"
"$KBRUN" history -o "$OUT" --since yesterday >/dev/null 2>"$WORK/e"; expect_code $? 2 "--since yesterday"
expect_in "$WORK/e" "--since wants a date"
"$KBRUN" history --frob >/dev/null 2>"$WORK/e"; expect_code $? 2 "history --frob"
expect_in "$WORK/e" "history: unknown option '--frob'"
"$KBRUN" db import --db "$WORK/x.db" "$WORK/missing" >/dev/null 2>"$WORK/e"; expect_code $? 2 "import of a missing folder"
"$KBRUN" db frob >/dev/null 2>"$WORK/e"; expect_code $? 2 "db frob"
expect_in "$WORK/e" "db: unknown command 'frob'"
"$KBRUN" history --help >"$WORK/h"; expect_code $? 0 "history --help"
expect_in "$WORK/h" "usage: kbrun history"

[ "$failed" = 0 ] && echo "results_db: all passed"
exit "$failed"
