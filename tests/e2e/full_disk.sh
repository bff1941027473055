#!/usr/bin/env bash
# A full disk never changes what is measured (docs/results.md, "When a
# result file cannot be written"): taxi_50runs (50 runs, embedded
# simulator) writes its experiment into a 64 KiB tmpfs, which fills up in
# the middle of the storm (the journal and latencies.csv alone need about
# 90 KiB). Expected:
#   - the terminal summary shows what the simulator did: 50 succeeded,
#     0 failed, none timed out, success rate 100% (the same storm with room
#     to write, run first, is the reference);
#   - stderr names the files and the system's message ("No space left on
#     device"), once per file as it happens and in the final list;
#   - the files that were written end with a whole line (an append the disk
#     cut is taken back);
#   - the exit code is 3 (results not fully saved);
#   - when space comes back before the end, every row and record held in
#     memory is written, in order, and the exit code is 0.
# Needs a tmpfs mount (root, or a user namespace allowing it); without
# one the test is skipped (exit 77), it never passes without checking.
set -u
KBRUN=${KBRUN_BIN:?KBRUN_BIN must point to the kbrun binary}
SRC=${KBRUN_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
mkdir -p "${KBRUN_TEST_OUT:-/tmp}"
WORK=$(mktemp -d "${KBRUN_TEST_OUT:-/tmp}/full_disk.XXXXXX") && [ -d "$WORK" ] || { echo "cannot make a work folder" >&2; exit 1; }
MNT="$WORK/full"
mkdir -p "$MNT" "$WORK/roomy"
mounted=0
cleanup() {
  [ "$mounted" = 1 ] && umount "$MNT" 2>/dev/null
  umount "$WORK/back" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
if ! mount -t tmpfs -o size=64k,mode=0755 tmpfs "$MNT" 2>"$WORK/mount.err"; then
  echo "SKIP: cannot mount a tmpfs: $(cat "$WORK/mount.err")" >&2
  exit 77
fi
mounted=1
failed=0
fail() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }

# The reference: the same storm with room to write.
"$KBRUN" -o "$WORK/roomy" --seed 11 "$SRC/scenarios/taxi_50runs.lua" >"$WORK/roomy.out" 2>"$WORK/roomy.err"
rc=$?
[ "$rc" = 0 ] || fail "the reference run exited $rc: $(tail -5 "$WORK/roomy.err")"
grep -Eq '^  Succeeded +50 ' "$WORK/roomy.out" || fail "the reference run did not have 50 successes: $(head -8 "$WORK/roomy.out")"

"$KBRUN" -o "$MNT" --seed 11 "$SRC/scenarios/taxi_50runs.lua" >"$WORK/full.out" 2>"$WORK/full.err"
rc=$?
[ "$rc" = 3 ] || fail "exit code $rc, expected 3 (results not fully saved)"

# what was measured: the same outcome table as with room to write
for line in '^  Succeeded +50 ' '^  Failed +0 ' 'success rate 100.0%'; do
  grep -Eq "$line" "$WORK/full.out" || fail "summary: no line matching '$line': $(head -8 "$WORK/full.out")"
done
grep -Eq 'Timed out +[1-9]' "$WORK/full.out" && fail "summary: runs timed out: $(head -8 "$WORK/full.out")"
grep -q 'Not created' "$WORK/full.out" && fail "summary: runs not created: $(head -8 "$WORK/full.out")"

# the error: path and the system's message, printed as it happens (once
# per file) and listed at the end
EXP=$(ls -d "$MNT"/taxi-50runs-* 2>/dev/null | head -1)
[ -n "$EXP" ] || fail "no experiment folder in $MNT"
for f in result/latencies.csv output/journal.jsonl; do
  n=$(grep -c "cannot write '$EXP/$f': No space left on device" "$WORK/full.err")
  [ "$n" = 1 ] || fail "stderr has $n first-failure messages for $f, expected 1"
  grep -q "results not fully saved: $EXP/$f: No space left on device" "$WORK/full.err" ||
    fail "the final list does not name $f"
done
grep -q "results not fully saved: .*result.json.*No space left on device" "$WORK/full.err" ||
  fail "result.json's failure is not reported"

# whole lines only in what reached the disk
for f in result/latencies.csv output/journal.jsonl; do
  if [ -s "$EXP/$f" ] && [ "$(tail -c 1 "$EXP/$f" | od -An -c | tr -d ' ')" != '\n' ]; then
    fail "$f ends in the middle of a line"
  fi
done

# Space comes back in the middle of the run: what was held in memory is
# written at the end, in order, and the run exits 0. A second tmpfs of
# 1 MiB, all but 48 KiB taken by a filler; once kbrun reported the disk
# full, the filler goes. (x300: the storm lasts a few seconds, far longer
# than this script takes to notice.)
MNT2="$WORK/back"
mkdir -p "$MNT2"
if mount -t tmpfs -o size=1m,mode=0755 tmpfs "$MNT2"; then
  dd if=/dev/zero of="$MNT2/filler" bs=4k count=244 2>/dev/null
  "$KBRUN" -o "$MNT2" --seed 11 --sim-speed 300 "$SRC/scenarios/taxi_50runs.lua" >"$WORK/back.out" 2>"$WORK/back.err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q 'No space left on device' "$WORK/back.err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  grep -q 'No space left on device' "$WORK/back.err" || fail "the second run never saw a full disk"
  rm -f "$MNT2/filler"
  wait "$pid"
  rc=$?
  [ "$rc" = 0 ] || fail "space back: exit code $rc, expected 0 (everything written at the end)"
  grep -q 'written after all' "$WORK/back.err" || fail "space back: no 'written after all'"
  grep -q 'results not fully saved' "$WORK/back.err" && fail "space back: results reported unsaved"
  grep -Eq '^  Succeeded +50 ' "$WORK/back.out" || fail "space back: summary: $(head -6 "$WORK/back.out")"
  EXP2=$(ls -d "$MNT2"/taxi-50runs-* 2>/dev/null | head -1)
  # every timed call is a row of latencies.csv and a "call" of the journal
  rows=$(($(wc -l <"$EXP2/result/latencies.csv") - 1))
  calls=$(grep -c '"event":"call"' "$EXP2/output/journal.jsonl")
  [ "$rows" -gt 300 ] || fail "space back: latencies.csv has $rows rows"
  [ "$rows" = "$calls" ] || fail "space back: latencies.csv has $rows rows, the journal $calls calls"
  n=$(grep -c '"k":"end"' "$EXP2/output/journal.jsonl")
  [ "$n" = 1 ] || fail "space back: the journal has $n end records"
  umount "$MNT2"
else
  fail "cannot mount the second tmpfs"
fi

if [ "$failed" -gt 0 ]; then
  echo "--- stdout" >&2; head -12 "$WORK/full.out" >&2
  echo "--- stderr" >&2; cat "$WORK/full.err" >&2
  [ -f "$WORK/back.err" ] && { echo "--- stderr (space back)" >&2; cat "$WORK/back.err" >&2; }
  exit 1
fi
echo "full disk: 50 runs succeeded as measured, exit 3, the unsaved files named; space back: all written, exit 0"
