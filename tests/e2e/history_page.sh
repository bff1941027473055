#!/usr/bin/env bash
# `kbrun report --history` as a person sees it: five taxi_50runs runs (the
# fourth on the degraded simulator profile) recorded in the results
# database, then the trend page, loaded in headless Chromium with
# tests/e2e/report_check.js (the checks every report passes: axis units
# and ticks, no overlapping or clipped text, legends off the data, nothing
# wider than the 1280 px window). Ground truth: the page's regressions are
# the ones `kbrun history --metric ... --json` marks for each plotted
# metric (red dots, the verdict's count, the degraded run's row), and the
# page loads nothing (no script, no URL). A missing Chromium is a failure.
set -u
. "$(dirname "$0")/common.bash"
e2e_init history_page
SRC=${KBRUN_SOURCE_DIR:-..}
TAXI="$SRC/scenarios/taxi_50runs.lua"
KEEP=${KBRUN_TEST_OUT:-/tmp}/history_page
rm -rf "$KEEP" && mkdir -p "$KEEP"
CHROMIUM=${KBRUN_CHROMIUM:-}
if [ -z "$CHROMIUM" ]; then
  for c in /usr/bin/chromium chromium chromium-browser; do
    if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$(command -v "$c"); break; fi
  done
fi
if [ -z "$CHROMIUM" ] || ! "$CHROMIUM" --version >/dev/null 2>&1; then
  echo "FAIL: no working Chromium: run bash .ci/install-deps (Debian package chromium)" >&2
  exit 1
fi
OUT="$WORK/exp"
for seed in 1 2 3; do "$KBRUN" -q -o "$OUT" --seed $seed "$TAXI" >/dev/null 2>&1; done
"$KBRUN" -q -o "$OUT" --seed 4 --sim-profile degraded "$TAXI" >/dev/null 2>&1
"$KBRUN" -q -o "$OUT" --seed 5 "$TAXI" >/dev/null 2>&1
slow=$("$KBRUN" db query -o "$OUT" --csv "SELECT id FROM experiments WHERE seq = 4" | tail -1)

"$KBRUN" report --history -o "$OUT" >"$WORK/path" 2>"$WORK/err"
[ $? = 0 ] || { fail "report --history: $(cat "$WORK/err")"; exit 1; }
page=$(cat "$WORK/path")
[ "$page" = "$OUT/history.html" ] || fail "the page went to '$page', not $OUT/history.html"
cp "$page" "$KEEP/history.html"
! grep -qiE '<script|src="http|href="http' "$page" || fail "the page loads a script or a URL"

mkdir -p "$WORK/chk"
{ sed '$d' "$page"; printf '<script>\n'; cat "$SRC/tests/e2e/report_check.js"; printf '\n</script></body></html>\n'; } >"$WORK/chk/page.html"
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --disable-quic \
  --user-data-dir="$WORK/chk/profile" --window-size=1280,1000 --virtual-time-budget=5000 \
  --dump-dom "file://$WORK/chk/page.html" 2>"$WORK/chk/chromium.log" | grep -E '^KB' >"$KEEP/history.check"
grep -q '^KBPAGE ' "$KEEP/history.check" || fail "the checker did not run in Chromium: $(tail -3 "$WORK/chk/chromium.log")"
if grep -q '^KBPROBLEM' "$KEEP/history.check"; then fail "$(grep '^KBPROBLEM' "$KEEP/history.check" | head -5)"; fi
width=$(sed -n 's/^KBPAGE .*width=\([0-9]*\).*/\1/p' "$KEEP/history.check")
[ "${width:-99999}" -le 1280 ] || fail "the page is $width px wide"
plots=$(sed -n 's/^KBPAGE .*plots=\([0-9]*\).*/\1/p' "$KEEP/history.check")
[ "${plots:-0}" -ge 5 ] || fail "only ${plots:-0} plots"

# ground truth: each plot's regressions are kbrun history's
total=0
while read -r metric stat; do
  spec="$metric:$stat"; [ "$stat" = value ] && spec=$metric
  "$KBRUN" history -o "$OUT" --metric "$spec" --json >"$WORK/t.json" || fail "history --metric $spec"
  n=$(python3 -c "import json,sys; print(sum(1 for p in json.load(open(sys.argv[1]))['points'] if p.get('mark') == 'regressed'))" "$WORK/t.json")
  total=$((total + n))
  python3 - "$page" "$metric $stat" "$n" <<'PY' || fail "$metric $stat: the plot's red marks differ from kbrun history's $n"
import re, sys
html, title, n = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
svg = [s for s in re.findall(r'<svg.*?</svg>', html, re.S) if 'aria-label="%s"' % title in s][0]
marks = re.findall(r'<g class="series" stroke="#c0392b" fill="#c0392b">(.*?)</g>', svg, re.S)
got = sum(m.count('<circle') for m in marks)
assert got == n, (title, got, n)
PY
done < <(sed -n 's/^KBPLOT [0-9]* \(.*\) \(p[0-9]*\|value\|mean\|max\|min\) #[0-9]*$/\1 \2/p' "$KEEP/history.check")
[ "$total" -gt 0 ] || fail "the degraded run regressed nothing"
grep -q "^KBVERDICT $total regression(s) in 1 of 5 experiment(s)$" "$KEEP/history.check" ||
  fail "verdict: $(grep '^KBVERDICT' "$KEEP/history.check"), expected $total regression(s) in 1 of 5"
python3 - "$page" "$slow" <<'PY' || fail "the degraded run's row is not marked"
import re, sys
html, slow = open(sys.argv[1]).read(), sys.argv[2]
rows = re.findall(r'<tr( class="fail")?><td>(\d+)</td><td class="kind">([^<]*)</td>', html)
bad = [r[2] for r in rows if r[0]]
assert bad == [slow], (bad, slow)
PY

# bad input
"$KBRUN" report --history -o "$OUT" --metric no.such >/dev/null 2>"$WORK/e"
[ $? = 2 ] || fail "--metric no.such: not a usage error"
grep -qF "no experiment in $OUT/kbrun.db has no.such" "$WORK/e" || fail "--metric no.such: $(cat "$WORK/e")"

[ "$failed" = 0 ] && echo "history_page: all passed (page and findings in $KEEP)"
exit "$failed"
