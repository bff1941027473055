#!/usr/bin/env bash
# The results database on a real PostgreSQL server (Debian's postgresql,
# initdb in a temporary folder, loopback only, password authentication):
# two taxi_50runs runs with --results-db postgresql://... land there with
# the same rows the folders hold and the same schema as SQLite's; history,
# compare --baseline, db import and db query work against it; ~/.pgpass
# and PG* environment variables work; the password never appears in any
# file, log line or message; a wrong password and an unreachable server
# fail the write (exit 3) with the server's message after a bounded retry
# and leave the folder complete.
# Without PostgreSQL: SKIP (exit 0) unless KBRUN_REQUIRE_POSTGRES is set.
set -u
. "$(dirname "$0")/common.bash"
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/pg_ctl" ]; then
  if [ -n "${KBRUN_REQUIRE_POSTGRES:-}" ]; then
    echo "FAIL: PostgreSQL is not installed (apt-get install postgresql) and KBRUN_REQUIRE_POSTGRES is set" >&2
    exit 1
  fi
  echo "SKIP: PostgreSQL is not installed (apt-get install postgresql)"
  exit 0
fi
e2e_init postgres
SRC=${KBRUN_SOURCE_DIR:-..}
TAXI="$SRC/scenarios/taxi_50runs.lua"
SECRET="kb-pg-$RANDOM$RANDOM-secret"

# The server refuses to run as root: then it runs as nobody, in its own
# folder under /tmp (nobody may not reach $WORK).
PGROOT=$(mktemp -d /tmp/kb-pg.XXXXXX)
AS=()
if [ "$(id -u)" = 0 ]; then
  chown nobody "$PGROOT"
  AS=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
stop_pg() {
  [ -f "$PGROOT/data/postmaster.pid" ] && "${AS[@]}" "$PG_BIN/pg_ctl" -D "$PGROOT/data" -m immediate stop >/dev/null 2>&1
  rm -rf "$PGROOT"
  e2e_cleanup
}
trap stop_pg EXIT
printf '%s\n' "$SECRET" >"$PGROOT/pw" && chmod 644 "$PGROOT/pw"
"${AS[@]}" "$PG_BIN/initdb" -D "$PGROOT/data" -U kbrun --auth=scram-sha-256 --pwfile="$PGROOT/pw" \
  >"$WORK/initdb.log" 2>&1 || { cat "$WORK/initdb.log" >&2; echo "FAIL: initdb" >&2; exit 1; }
rm -f "$PGROOT/pw"
started=0
for attempt in 1 2 3 4 5; do
  PORT=$((20000 + (RANDOM * 7 + attempt) % 40000))
  if "${AS[@]}" "$PG_BIN/pg_ctl" -D "$PGROOT/data" -l "$PGROOT/log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $PGROOT -c fsync=off" start >/dev/null 2>&1; then
    started=1
    break
  fi
done
[ "$started" = 1 ] || { cat "$PGROOT/log" >&2; echo "FAIL: the PostgreSQL server did not start" >&2; exit 1; }

BASE="postgresql://kbrun:$SECRET@127.0.0.1:$PORT"
URL="$BASE/results"
expect_code() { [ "$1" = "$2" ] || fail "$3: exit code $1, expected $2"; }
expect_in() { grep -qF -- "$2" "$1" || { fail "'$2' not in $(basename "$1"):"; sed 's/^/    /' "$1" >&2; }; }

psql -q "$BASE/postgres" -c "CREATE DATABASE results" >"$WORK/create" 2>&1
rc=$?; [ "$rc" = 0 ] || sed "s/^/    /" "$WORK/create" >&2
expect_code $rc 0 "CREATE DATABASE"

# two runs, then the database holds exactly their folders' results
OUT="$WORK/exp"
for seed in 1 2; do
  "$KBRUN" -q -o "$OUT" --seed $seed --results-db "$URL" "$TAXI" >>"$WORK/runs.out" 2>>"$WORK/runs.err"
  expect_code $? 0 "taxi run $seed to PostgreSQL"
done
[ ! -e "$OUT/kbrun.db" ] || fail "--results-db postgresql:// also wrote kbrun.db"
"$KBRUN" history --db "$URL" --json >"$WORK/list.json" 2>"$WORK/e"; expect_code $? 0 "history --db"
"$KBRUN" db query --db "$URL" --json "SELECT e.id, m.key, m.count, m.p50, m.p99, m.p999, m.histogram,
  (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id) AS runs,
  (SELECT sum(r.duration) FROM runs r WHERE r.experiment_id = e.id) AS run_seconds
  FROM experiments e JOIN metrics m ON m.experiment_id = e.id WHERE m.kind = 'histogram' ORDER BY e.id, m.key" \
  >"$WORK/metrics.json" 2>"$WORK/e"
expect_code $? 0 "db query on PostgreSQL"
python3 - "$WORK/list.json" "$WORK/metrics.json" "$OUT" <<'PY' || fail "PostgreSQL's rows differ from the folders"
import json, sys, os, csv
rows = json.load(open(sys.argv[1])); metrics = json.load(open(sys.argv[2])); out = sys.argv[3]
folders = sorted(d for d in os.listdir(out) if d.startswith("taxi-50runs-"))
assert sorted(r["id"] for r in rows) == folders, (rows, folders)
by = {}
for m in metrics: by[(m["id"], m["key"])] = m
n = 0
for d in folders:
    doc = json.load(open(os.path.join(out, d, "result", "result.json")))
    runs = list(csv.DictReader(open(os.path.join(out, d, "result", "runs.csv"))))
    for m in doc["metrics"]["metrics"]:
        if m["kind"] != "histogram": continue
        got = by[(d, m["key"])]
        for s in ("count", "p50", "p99", "p999"):
            assert got[s] == m["summary"][s], (d, m["key"], s, got[s], m["summary"][s])
        assert got["histogram"] == m["encoded"]
        assert got["runs"] == len(runs) == 50
        assert abs(got["run_seconds"] - sum(float(r["duration"]) for r in runs)) < 1e-6
        n += 1
assert n > 20, n
PY

# docs/results.md's Grafana panels, on the server, against the folders' files
"$KBRUN" db query --db "$URL" --json "SELECT e.id, e.kbrun AS release, e.started_at::timestamptz AS time,
       m.p50, m.p90, m.p99
FROM experiments e JOIN metrics m ON m.experiment_id = e.id
WHERE e.scenario = 'taxi_50runs' AND m.key = 'run.create'
ORDER BY e.started_at" >"$WORK/panel1.json" 2>"$WORK/e"; expect_code $? 0 "panel: latency percentiles"
"$KBRUN" db query --db "$URL" --json "SELECT e.started_at::timestamptz AS time, e.id,
       CAST(json_extract_path_text(e.result::json, 'success_rate') AS DOUBLE PRECISION) AS success_rate,
       avg(CASE WHEN r.state = 'Succeeded' THEN 1.0 ELSE 0.0 END) AS from_runs
FROM experiments e JOIN runs r ON r.experiment_id = e.id
GROUP BY e.id, e.started_at, e.result ORDER BY e.started_at" >"$WORK/panel2.json" 2>"$WORK/e"; expect_code $? 0 "panel: success rate"
"$KBRUN" db query --db "$URL" --json "SELECT e.started_at::timestamptz AS time, e.id,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.duration) AS p50,
       percentile_cont(0.9) WITHIN GROUP (ORDER BY r.duration) AS p90,
       count(*) AS runs
FROM experiments e JOIN runs r ON r.experiment_id = e.id
WHERE r.duration IS NOT NULL
GROUP BY e.id, e.started_at ORDER BY e.started_at" >"$WORK/panel3.json" 2>"$WORK/e"; expect_code $? 0 "panel: run duration"
python3 - "$WORK" "$OUT" <<'PY' || fail "the Grafana panels' queries differ from the folders"
import json, sys, os, csv
work, out = sys.argv[1], sys.argv[2]
p1 = json.load(open(work + "/panel1.json")); p2 = json.load(open(work + "/panel2.json")); p3 = json.load(open(work + "/panel3.json"))
assert len(p1) == len(p2) == len(p3) == 2, (len(p1), len(p2), len(p3))
def pct(xs, q):  # percentile_cont: linear between closest ranks
    xs = sorted(xs); k = (len(xs) - 1) * q; f = int(k)
    return xs[f] if f + 1 >= len(xs) else xs[f] + (xs[f + 1] - xs[f]) * (k - f)
by_id = lambda rows: {r["id"]: r for r in rows}
b2, c3 = by_id(p2), by_id(p3)
for a, b, c in [(a, b2[a["id"]], c3[a["id"]]) for a in p1]:
    doc = json.load(open(os.path.join(out, a["id"], "result", "result.json")))
    runs = list(csv.DictReader(open(os.path.join(out, a["id"], "result", "runs.csv"))))
    s = [m for m in doc["metrics"]["metrics"] if m["key"] == "run.create"][0]["summary"]
    assert (a["p50"], a["p90"], a["p99"]) == (s["p50"], s["p90"], s["p99"]) and a["release"] == doc["kbrun"]
    assert b["success_rate"] == doc["result"]["success_rate"]
    assert abs(b["from_runs"] - sum(r["state"] == "Succeeded" for r in runs) / len(runs)) < 1e-12
    d = [float(r["duration"]) for r in runs if r["duration"]]
    assert abs(c["p50"] - pct(d, 0.5)) < 1e-9 and abs(c["p90"] - pct(d, 0.9)) < 1e-9 and c["runs"] == len(d), (c, pct(d, .5))
    assert a["time"].startswith(doc["started_at"][:10])
PY

# the same schema as SQLite's
"$KBRUN" -q -o "$WORK/lite" "$TAXI" num_runs=2 >/dev/null 2>&1
"$KBRUN" db query -o "$WORK/lite" --csv "SELECT m.name AS t, p.name AS c FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table' ORDER BY 1, 2" >"$WORK/lite.cols"
"$KBRUN" db query --db "$URL" --csv "SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2" >"$WORK/pg.cols"
cmp -s "$WORK/lite.cols" "$WORK/pg.cols" || { fail "the schemas differ"; diff "$WORK/lite.cols" "$WORK/pg.cols" >&2; }
[ "$(wc -l <"$WORK/pg.cols")" -gt 40 ] || fail "too few columns: $(wc -l <"$WORK/pg.cols")"

# history's trend and compare --baseline against the server
"$KBRUN" history --db "$URL" --metric run.create >"$WORK/trend" 2>&1; expect_code $? 0 "history --metric"
expect_in "$WORK/trend" "run.create p99 (histogram, lower is better) over 2 experiment(s)"
last=$(ls -t "$OUT" | grep '^taxi-50runs-' | head -1)
"$KBRUN" compare --baseline last --db "$URL" --metric run.create --tolerance 50% "$OUT/$last" >"$WORK/cmp" 2>&1
expect_code $? 0 "compare --baseline last on PostgreSQL"

# db import of folders into the server, twice: replaced, not doubled
"$KBRUN" db import --db "$URL" "$WORK/lite" >/dev/null 2>"$WORK/imp"; expect_code $? 0 "db import"
"$KBRUN" db import --db "$URL" "$WORK/lite" >/dev/null 2>&1
"$KBRUN" db query --db "$URL" --csv "SELECT count(*) AS n FROM experiments" >"$WORK/n"
[ "$(tail -1 "$WORK/n")" = 3 ] || fail "expected 3 experiments after two imports, got $(tail -1 "$WORK/n")"

# two writers at once
"$KBRUN" -q -o "$OUT" --seed 7 --results-db "$URL" "$TAXI" num_runs=10 >/dev/null 2>"$WORK/p1" & p1=$!
"$KBRUN" -q -o "$OUT" --seed 8 --results-db "$URL" "$TAXI" num_runs=10 >/dev/null 2>"$WORK/p2" & p2=$!
wait $p1; expect_code $? 0 "writer 1 of 2"
wait $p2; expect_code $? 0 "writer 2 of 2"

# libpq's own ways to the password: ~/.pgpass, PGPASSWORD and PG* variables
mkdir -p "$WORK/home"
printf '127.0.0.1:%s:results:kbrun:%s\n' "$PORT" "$SECRET" >"$WORK/home/.pgpass"
chmod 600 "$WORK/home/.pgpass"
HOME="$WORK/home" "$KBRUN" -q -o "$WORK/pgpass" --results-db "postgresql://kbrun@127.0.0.1:$PORT/results" \
  "$TAXI" num_runs=2 >/dev/null 2>"$WORK/pgpass.err"
expect_code $? 0 "~/.pgpass"
PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=kbrun PGDATABASE=results PGPASSWORD=$SECRET \
  "$KBRUN" -q -o "$WORK/pgenv" --results-db "postgresql://" "$TAXI" num_runs=2 >/dev/null 2>"$WORK/pgenv.err"
expect_code $? 0 "PG* environment"
"$KBRUN" db query --db "$URL" --csv "SELECT count(*) AS n FROM experiments" >"$WORK/n"
[ "$(tail -1 "$WORK/n")" = 7 ] || fail "expected 7 experiments, got $(tail -1 "$WORK/n")"

# a wrong password: exit 3, the server's message, the folder complete
"$KBRUN" -q -o "$WORK/bad" --results-db "postgresql://kbrun:wrong-$SECRET@127.0.0.1:$PORT/results" \
  "$TAXI" num_runs=2 >"$WORK/bad.out" 2>"$WORK/bad.err"
expect_code $? 3 "a wrong password"
expect_in "$WORK/bad.err" 'password authentication failed for user "kbrun"'
expect_in "$WORK/bad.err" "results not fully saved"
bad=$(ls "$WORK/bad" | grep '^taxi-50runs-' | head -1)
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['exit_code']==3 and d['status']=='incomplete' and d['metrics']['metrics']" \
  "$WORK/bad/$bad/result/result.json" || fail "the folder of a failed database write is not complete"
[ -f "$WORK/bad/$bad/result/runs.csv" ] || fail "no runs.csv after a failed database write"

# an unreachable server: a bounded retry, then exit 3 with libpq's message
closed=$((PORT + 1))
start=$(date +%s)
"$KBRUN" -q -o "$WORK/down" --results-db "postgresql://kbrun:$SECRET@127.0.0.1:$closed/results" \
  "$TAXI" num_runs=2 >"$WORK/down.out" 2>"$WORK/down.err"
expect_code $? 3 "an unreachable server"
expect_in "$WORK/down.err" "no connection after 3 attempts"
expect_in "$WORK/down.err" "Connection refused"
[ $(($(date +%s) - start)) -lt 60 ] || fail "the retry is not bounded"

# the password is nowhere: not in a file kbrun wrote, a message or the output
if grep -rlF -- "$SECRET" "$OUT" "$WORK/lite" "$WORK/pgpass" "$WORK/pgenv" "$WORK/bad" "$WORK/down" \
  "$WORK"/*.out "$WORK"/*.err "$WORK/trend" "$WORK/cmp" "$WORK/imp" "$WORK/list.json" 2>/dev/null; then
  fail "the password was written somewhere (above)"
fi
"$KBRUN" db query --db "$URL" --csv "SELECT * FROM experiments" >"$WORK/all.csv"
"$KBRUN" db query --db "$URL" --csv "SELECT * FROM params" >>"$WORK/all.csv"
! grep -qF -- "$SECRET" "$WORK/all.csv" || fail "the password is in the database"
grep -qF -- "127.0.0.1:$PORT" "$WORK/bad.err" && ! grep -qF "kbrun:wrong" "$WORK/bad.err" || true

[ "$failed" = 0 ] && echo "postgres: all passed"
exit "$failed"
