#!/usr/bin/env bash
# README command 2 (and CI, through .ci/run): install the Debian packages, configure and build
# the `default` preset (the CUDA code too when a toolkit is found), and run every CTest suite
# except the `gpu` label. The run ends with CTest's summary; the exit code is CTest's.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

bash installer/setup-deps.sh
cmake --preset default
cmake --build --preset default -j "${ES_JOBS:-2}"
exec ctest --preset default --label-exclude gpu
