#!/usr/bin/env bash
# Builds expertscope-cli with the CUDA backend (GUI-less, sm_90a) and packs it with the shared
# libraries the GPU machine lacks into .device/ (git-ignored), then prints the device command.
# The GPU machine (Ubuntu 24.04, driver 580, CUDA 13) runs binaries built here unchanged; it has
# its own libcublasLt (too large to carry: tools/gpu_run.sh finds it there).
#
#   tools/gpu_pack.sh [--no-build]        then run the printed command with carry [".device"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/cuda} # BUILD=build/headless: the headless preset's build
if [[ "${1:-}" != "--no-build" ]]; then
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DES_BUILD_GUI=OFF -DES_BUILD_TESTS=OFF -DES_BUILD_CLI=ON \
        -DES_CUDA_ARCHITECTURES=90a >/dev/null
    ninja -C "$BUILD" expertscope-cli
fi
BIN="$BUILD/app/expertscope-cli"
rm -rf .device
mkdir -p .device/bin .device/lib
cp "$BIN" .device/bin/
# Non-system libraries the binary links (cuBLASLt excepted: the device has it).
for lib in libsentencepiece.so.0 libprotobuf-lite.so.32 libgomp.so.1 libcudart.so.13 libcpp-httplib.so.0.11 \
           libssl.so.3 libcrypto.so.3 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
    path=$(ldd "$BIN" | awk -v l="$lib" '$1 == l { print $3 }')
    [[ -n "$path" ]] && cp -L "$path" .device/lib/
done
grep -qx '/.device/' .gitignore || echo '/.device/' >> .git/info/exclude
du -sh .device
cat <<'CMD'
device command (carry [".device"]; about 3-5 minutes):
  bash tools/gpu_run.sh full
CMD
