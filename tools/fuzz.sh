#!/usr/bin/env bash
# A longer fuzzing campaign than CI's fixed runs: every target of tests/fuzz (or the ones named)
# for SECONDS each, new inputs kept in build/fuzz/found/<target>/, crashes written to
# build/fuzz/crashes/ (crash-<hash>; replay with `build/fuzz/tests/fuzz/<target> FILE`).
#   bash tools/fuzz.sh [SECONDS] [TARGET ...]        (default 60 s, all targets)
# Builds the `fuzz` preset first (clang). Exits non-zero when any target found a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${ES_JOBS:-2}"
bin=build/fuzz/tests/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
mkdir -p build/fuzz/crashes
failed=()
for t in "${targets[@]}"; do
  found=build/fuzz/found/$t
  mkdir -p "$found"
  echo "== $t ($seconds s)"
  dict=()
  if [ -f "tests/fuzz/$t.dict" ]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  if ! QT_QPA_PLATFORM=offscreen ASAN_OPTIONS=detect_leaks=0 "$bin/$t" -max_total_time="$seconds" -timeout=30 \
      -rss_limit_mb=3072 -max_len=65536 -artifact_prefix=build/fuzz/crashes/"$t"- -print_final_stats=1 "${dict[@]}" \
      "$found" "tests/fuzz/corpus/$t" 2>&1 | grep -E '^(#[0-9]+[[:space:]]+DONE|==[0-9]+==ERROR|SUMMARY|stat::number_of_executed_units|.*property violated)'; then
    :
  fi
  if ls build/fuzz/crashes/"$t"-* >/dev/null 2>&1; then failed+=("$t"); fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]} (build/fuzz/crashes/)" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${#targets[@]} targets"
