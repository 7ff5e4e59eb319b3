#!/usr/bin/env bash
# README command 2 (and CI, through .ci/run): install the Debian packages, run the engine suites
# under the sanitizers and the fuzz targets (tests/fuzz), build the `default` preset (the CUDA
# code too when a toolkit is found), build the Debian packages and test them in a fresh Debian 12
# root (installer/test_package.sh: lintian, install, run, purge), then run every CTest suite but
# `gpu` and `bench`, ending with CTest's summary line.
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

# 1b. The fuzz targets (tests/fuzz): each parser of outside input, a fixed seed and number of runs
#     over its seed corpus, under ASan + UBSan. ES_SKIP_FUZZ=1 skips this pass.
fuzz_rc=0
if [ "${ES_SKIP_FUZZ:-0}" != 1 ]; then
  cmake --preset fuzz
  cmake --build --preset fuzz -j "${ES_JOBS:-2}"
  ctest --preset fuzz || fuzz_rc=$?
fi

# 2. The full build (CUDA code too when a toolkit is found); its suites run last (step 4).
#    Benchmarks (`bench` label, e.g. bench_profiler) are run by hand: docs/benchmarks.md.
cmake --preset default
cmake --build --preset default -j "${ES_JOBS:-2}"

# 3. The package: cpack DEB, lintian, install into a fresh debootstrapped Debian 12 root, the CLI
#    and an offscreen smoke test of the app there, purge. ES_SKIP_PACKAGE=1 skips it (not in CI).
package_rc=0
if [ "${ES_SKIP_PACKAGE:-0}" != 1 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    bash installer/test_package.sh build/default || package_rc=$?
  elif command -v sudo >/dev/null 2>&1; then
    sudo env "ES_JOBS=${ES_JOBS:-2}" bash installer/test_package.sh build/default || package_rc=$?
  else
    echo "test.sh: the package test needs root (debootstrap, chroot) and sudo is not installed" >&2
    package_rc=1
  fi
fi
[ "$package_rc" = 0 ] || echo "test.sh: the package test failed (exit $package_rc); see above" >&2
[ "$sanitize_rc" = 0 ] || echo "test.sh: the sanitizer pass failed (exit $sanitize_rc); see above" >&2
[ "$fuzz_rc" = 0 ] || echo "test.sh: the fuzz pass failed (exit $fuzz_rc); see above" >&2

# 4. Every suite of the full build except `gpu` and `bench`, last, so the run ends with CTest's
#    summary line (earlier failures are reported above and in the exit code).
rc=0
ctest --preset default --label-exclude 'gpu|bench' || rc=$?
[ "$rc" != 0 ] || rc=$package_rc
[ "$rc" != 0 ] || rc=$sanitize_rc
[ "$rc" != 0 ] || rc=$fuzz_rc
exit $rc
