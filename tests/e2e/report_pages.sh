#!/usr/bin/env bash
# Every bundled scenario's report as a person sees it: runs each
# scenarios/*.lua on the embedded simulator (sweep_taxi on a 4-cell grid,
# kfp_probe also with the degraded profile, where the server breaks), then
# loads each report.html (the sweep's cells and sweep.html too) in headless
# Chromium with tests/e2e/report_check.js injected, and reads what it
# measured in the page (chromium --dump-dom):
#   - every plot's axes have a title whose unit turns each tick label into
#     the value the tick stands for; tick labels are plain numbers
#   - no two texts of a plot overlap, none sticks out of it; a KDE stays
#     under the top of its y axis; a legend covers no data; no point far
#     from the rest flattens them; same-titled plots share their y ticks
#   - no page is wider than the 1280 px window; taxi_50runs' page is under
#     5,000 px tall; kfp_probe's ramp chart is near the top
#   - a result's verdict is the first thing under the title
#   - sweep.html links every cell's report.html, which has plots
#   - kbrun report takes a folder of experiments, a sweep folder and a
#     folder holding a sweep
# A self-test first feeds the checker a page with a wrong axis unit,
# overlapping labels and a clipped KDE, and expects it to say so.
#
# A missing Chromium is a failure (bash .ci/install-deps installs it), not a
# skip. KBRUN_CHROMIUM overrides the browser; pages and findings are kept in
# $KBRUN_TEST_OUT/report_pages/ to look at.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
KEEP=${KBRUN_TEST_OUT:-/tmp}/report_pages
rm -rf "$KEEP" && mkdir -p "$KEEP" || exit 1
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/report_pages.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
passed=0 failed=0
fail() { echo "FAIL $CASE: $*" >&2; failed=$((failed + 1)); }
ok() { passed=$((passed + 1)); }

CHROMIUM=${KBRUN_CHROMIUM:-}
if [ -z "$CHROMIUM" ]; then
  for c in /usr/bin/chromium chromium chromium-browser; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$(command -v "$c"); break; fi
  done
fi
if [ -z "$CHROMIUM" ] || ! "$CHROMIUM" --version >/dev/null 2>&1; then
  echo "FAIL: no working Chromium (${CHROMIUM:-looked for /usr/bin/chromium, chromium, chromium-browser}): run bash .ci/install-deps (Debian package chromium)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi

# check PAGE NAME: the checker's lines for PAGE in $KEEP/NAME.check
n_pages=0
check() {
  local page=$1 name=$2 dir
  n_pages=$((n_pages + 1))
  dir="$WORK/page$n_pages"
  mkdir -p "$dir"
  # the page with the checker appended (the report itself has no script)
  { sed '$d' "$page"; printf '<script>\n'; cat "$SRC/tests/e2e/report_check.js"; printf '\n</script></body></html>\n'; } >"$dir/page.html"
  timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --disable-quic \
    --user-data-dir="$dir/profile" --window-size=1280,1000 --virtual-time-budget=5000 \
    --dump-dom "file://$dir/page.html" 2>"$dir/chromium.log" | grep -E '^KB' >"$KEEP/$name.check"
  cp "$page" "$KEEP/$name.html"
  if ! grep -q '^KBPAGE ' "$KEEP/$name.check"; then
    fail "$name: the checker did not run in Chromium: $(tail -3 "$dir/chromium.log")"
    return 1
  fi
  return 0
}
field() { sed -n "s/^KBPAGE .*$1=\([0-9]*\).*/\1/p" "$KEEP/$2.check"; }
page_ok() { # page_ok NAME: no problem found, not wider than the window
  local name=$1
  if grep -q '^KBPROBLEM' "$KEEP/$name.check"; then
    fail "$name: $(grep -c '^KBPROBLEM' "$KEEP/$name.check") problems, e.g. $(grep '^KBPROBLEM' "$KEEP/$name.check" | head -3 | cut -c11-300 | tr '\n' ';')"
    return 1
  fi
  local w
  w=$(field width "$name")
  [ "${w:-99999}" -le 1280 ] || { fail "$name: the page is $w px wide in a 1280 px window"; return 1; }
  return 0
}

# ---- the checker finds what it is meant to find ---------------------------------------
CASE=self-test
cat >"$WORK/bad.html" <<'EOF'
<!DOCTYPE html>
<html><body>
<svg xmlns="http://www.w3.org/2000/svg" width="400" height="200" viewBox="0 0 400 200" font-size="11" aria-label="bad">
<g class="y-axis"><text x="30" y="150" class="tick" data-value="0" text-anchor="end">0</text><text x="30" y="40" class="tick" data-value="10" text-anchor="end">10</text><line x1="40" y1="30" x2="40" y2="160" stroke="#000"/><text x="12" y="100" class="axis-title" transform="rotate(-90 12 100)">count</text></g>
<g class="x-axis"><text x="100" y="180" class="tick" data-value="90.5" text-anchor="middle">90.5</text><text x="112" y="180" class="tick" data-value="91" text-anchor="middle">91.0</text><text x="200" y="195" class="axis-title">latency (ms)</text></g>
<path class="kde" d="M40 160L100 30L200 30L300 160" fill="none" stroke="#000"/>
</svg>
</body></html>
EOF
if check "$WORK/bad.html" self-test; then
  c=$KEEP/self-test.check
  grep -q "tick '90.5' under title 'latency (ms)' reads 0.0905 but stands for 90.5" "$c" || fail "a tick in seconds under a title in ms was not found: $(cat "$c")"
  grep -q "text '90.5' overlaps '91.0'" "$c" || fail "overlapping tick labels were not found"
  grep -q "the KDE is cut at the top" "$c" || fail "a KDE at the top of the axis was not found"
  [ "$(field problems self-test)" -ge 3 ] || fail "problems=$(field problems self-test)"
fi
[ "$failed" = 0 ] && ok

# ---- run every bundled scenario --------------------------------------------------------
OUT=$WORK/out
mkdir -p "$OUT"
run() { # run NAME SCENARIO ARGS...: exit 0 (or 99: a threshold failed) expected
  local name=$1 scenario=$2
  shift 2
  "$KBRUN" -q -o "$OUT/$name" "$SRC/scenarios/$scenario" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  local rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 99 ]; then
    CASE=$name fail "kbrun exited $rc: $(tail -3 "$WORK/$name.err")"
    return 1
  fi
}
for f in "$SRC"/scenarios/*.lua; do
  s=$(basename "$f" .lua)
  case $s in
    sweep_taxi) run "$s" "$s.lua" num_runs=5,10 pools=1,2 nodes=1 steps=4 parallel=2 ;;
    *) run "$s" "$s.lua" ;;
  esac
done
run kfp_probe_degraded kfp_probe.lua --sim-profile degraded

# ---- each scenario's report --------------------------------------------------------------
for d in "$OUT"/*/; do
  name=$(basename "$d")
  CASE=$name
  before=$failed
  found=0
  for page in "$d"*/result/report.html; do
    [ -f "$page" ] || continue
    found=1
    check "$page" "$name" || continue
    page_ok "$name" || continue
    [ "$(field plots "$name")" -ge 1 ] || fail "no plot"
    # the verdict a result carries is the headline (result.verdict)
    cat >"$WORK/verdict.lua" <<'EOF'
return { params = { file = "" }, run = function(p)
  local doc = require("kb.json").decode(require("kb.fs").read(p.file))
  local v = type(doc.result) == "table" and doc.result.verdict or doc.verdict
  io.stdout:write("VERDICT:", type(v) == "string" and v or "", "\n")
end }
EOF
    want=$("$KBRUN" -q -o "$WORK/tmp" "$WORK/verdict.lua" file="$(dirname "$page")/result.json" 2>"$WORK/verdict.err" | sed -n 's/^VERDICT://p')
    got=$(sed -n 's/^KBVERDICT //p' "$KEEP/$name.check" | sed 's/&gt;/>/g; s/&lt;/</g; s/&quot;/"/g; s/&amp;/\&/g')
    [ "$got" = "$want" ] || fail "headline '$got', result verdict '$want'"
  done
  [ "$found" = 1 ] || fail "no result/report.html"
  [ "$failed" = "$before" ] && ok
done

# the figures of a person's first look
CASE=taxi-height
h=$(field height taxi_50runs)
svgs=$(field svgs taxi_50runs)
if [ -n "$h" ] && [ "$h" -lt 5000 ] && [ "$svgs" -le 12 ] && [ "$svgs" -ge 6 ]; then ok
else fail "taxi_50runs' page is ${h:-?} px tall with ${svgs:-?} plots (want < 5000 px, 6 to 12 plots)"; fi
echo "taxi_50runs: ${h:-?} px, ${svgs:-?} plots"

CASE=probe-ramp
top=$(sed -n 's/^KBPLOT \([0-9]*\) p99 latency per step.*/\1/p' "$KEEP/kfp_probe.check" | head -1)
if [ -n "$top" ] && [ "$top" -lt 1500 ]; then ok; else fail "the ramp chart is at ${top:-nowhere} px (want < 1500)"; fi

# ---- the sweep: sweep.html, its links, the cells' reports ---------------------------------
CASE=sweep
before=$failed
SW=$OUT/sweep_taxi/sweep-taxi
if check "$SW/sweep.html" sweep_html && page_ok sweep_html; then
  [ "$(field plots sweep_html)" -ge 2 ] || fail "sweep.html has $(field plots sweep_html) plots"
  cells=0
  for c in "$SW"/c*-r*/; do
    cells=$((cells + 1))
    cn=$(basename "$c")
    grep -qF "href=\"$cn/result/report.html\"" "$SW/sweep.html" || fail "sweep.html does not link $cn"
    if check "$c/result/report.html" "cell_$cn" && page_ok "cell_$cn"; then
      [ "$(field plots "cell_$cn")" -ge 1 ] || fail "$cn's report has no plot"
    fi
  done
  [ "$cells" = 4 ] || fail "$cells cell folders, want 4 (2 num_runs x 2 pools)"
fi
[ "$failed" = "$before" ] && ok

# ---- kbrun report on folders ---------------------------------------------------------------
CASE=report-folders
before=$failed
"$KBRUN" report "$OUT/taxi_50runs" >"$WORK/r1.out" 2>"$WORK/r1.err" || fail "a folder of experiments: $(cat "$WORK/r1.err")"
[ "$(grep -c 'report.html$' "$WORK/r1.out")" = 1 ] || fail "a folder of experiments: $(cat "$WORK/r1.out")"
cp "$SW/sweep.html" "$WORK/sweep.before"
rm -f "$SW"/c001-r1/result/report.html
"$KBRUN" report "$SW" >"$WORK/r2.out" 2>"$WORK/r2.err" || fail "a sweep folder: $(cat "$WORK/r2.err")"
[ "$(grep -c '/result/report.html$' "$WORK/r2.out")" = 4 ] || fail "a sweep folder: cells $(cat "$WORK/r2.out")"
grep -q 'sweep.html$' "$WORK/r2.out" || fail "a sweep folder: no sweep.html"
cmp -s "$SW/sweep.html" "$WORK/sweep.before" || fail "sweep.html made again differs from the sweep's own"
[ -f "$SW/c001-r1/result/report.html" ] || fail "a removed cell report was not made again"
"$KBRUN" report "$OUT/sweep_taxi" >"$WORK/r3.out" 2>"$WORK/r3.err" || fail "a folder with a sweep: $(cat "$WORK/r3.err")"
[ "$(grep -c 'report.html$' "$WORK/r3.out")" = 5 ] || fail "a folder with a sweep: $(cat "$WORK/r3.out")"
mkdir -p "$WORK/none"
"$KBRUN" report "$WORK/none" >/dev/null 2>"$WORK/r4.err"
rc=$?
[ "$rc" = 2 ] || fail "a folder without experiments exited $rc"
grep -qF "holds no experiment" "$WORK/r4.err" || fail "a folder without experiments: $(cat "$WORK/r4.err")"
[ "$failed" = "$before" ] && ok

echo "pages and findings: $KEEP"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
