#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz and runs each for a
# while (see docs/fuzzing.md):
#   tests/fuzz/run.sh                 # every target, 20 s each
#   tests/fuzz/run.sh 300 fuzz_yaml   # one target, 5 minutes
# Crashing inputs land in build-fuzz/tests/fuzz/work/<target>/crash-*.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-20}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_json fuzz_yaml fuzz_multipart fuzz_http_request fuzz_kubeconfig fuzz_pipeline)
fi
cmake -S . -B build-fuzz -DKB_FUZZ=ON -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKB_FUZZ_SECONDS="$seconds" >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]}"
status=0
for t in "${targets[@]}"; do
  echo "== $t (${seconds}s)"
  bash tests/fuzz/ctest_run.sh "build-fuzz/tests/fuzz/$t" "tests/fuzz/corpus/$t" \
    "tests/fuzz/regressions/$t" "build-fuzz/tests/fuzz/work/$t" "$seconds" \
    > "build-fuzz/tests/fuzz/$t.log" 2>&1 || { status=1; echo "FAILED: see build-fuzz/tests/fuzz/$t.log"; }
  grep -E '^#[0-9]+\s+DONE|^Done [0-9]+ runs' "build-fuzz/tests/fuzz/$t.log" || true
done
exit $status
