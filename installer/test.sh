#!/usr/bin/env bash
# README command 2 (and CI, through .ci/run): install the Debian packages, run the engine suites
# under the sanitizers, then build the `default` preset (the CUDA code too when a toolkit is
# found) and run every CTest suite except the `gpu` label. The run ends with CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

bash installer/setup-deps.sh

# 1. The engine and CLI suites under AddressSanitizer + UndefinedBehaviorSanitizer (threads,
#    cancel and shutdown paths must leave nothing behind). ES_SKIP_SANITIZE=1 skips this pass.
sanitize_rc=0
if [ "${ES_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake --preset sanitize
  cmake --build --preset sanitize -j "${ES_JOBS:-2}"
  ASAN_OPTIONS=detect_leaks=1 ctest --preset sanitize --label-exclude 'gpu|bench' || sanitize_rc=$?
fi

# 2. The full build (CUDA code too when a toolkit is found) and every suite except `gpu` and
#    `bench` (benchmarks, e.g. bench_profiler, are run by hand: docs/benchmarks.md).
cmake --preset default
cmake --build --preset default -j "${ES_JOBS:-2}"
rc=0
ctest --preset default --label-exclude 'gpu|bench' || rc=$?
if [ "$sanitize_rc" != 0 ]; then
  echo "test.sh: the sanitizer pass failed (exit $sanitize_rc); see above" >&2
  [ "$rc" != 0 ] || rc=$sanitize_rc
fi
exit $rc
