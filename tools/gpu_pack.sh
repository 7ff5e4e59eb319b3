#!/usr/bin/env bash
# Builds expertscope-cli and the CUDA module (GUI-less, sm_90a) on a machine with the CUDA toolkit
# and packs them, with the shared libraries a GPU machine without a development setup lacks, into
# .device/ (git-ignored) and .device.tar.xz, then prints the command to run on the GPU machine.
# Layout as installed: .device/bin/expertscope-cli and .device/lib/expertscope/libexpertscope-cuda.so
# (found as <bin>/../lib/expertscope/). The CLI links no CUDA library; the module holds cudart
# (static) and needs the driver and libcublasLt.so.13. A GPU machine with Ubuntu 24.04, driver 580
# and CUDA 13 runs binaries built on Debian 12 unchanged; its own libcublasLt is used (about
# 500 MB, not packed: tools/gpu_run.sh finds it there).
#
#   tools/gpu_pack.sh [--no-build]        then, on the GPU machine, in a copy of the repository with
#                                         .device.tar.xz beside it: the printed command
#   tools/gpu_pack.sh --as-old            packs this tree's CUDA module into .device/old/lib/expertscope/
#                                         instead (kept by later packs): the baseline of `tools/gpu_run.sh
#                                         abbuild`, loaded by the next pack's CLI, so of the same commit
#                                         (e.g. `git stash; tools/gpu_pack.sh --as-old; git stash pop;
#                                         tools/gpu_pack.sh`); the module's build id must match the CLI's.
#                                         It stays in every later pack (11 MB): rm -rf .device/old when
#                                         done
#   BUILD=<other tree>/build/cuda tools/gpu_pack.sh --no-build --as-before
#                                         packs another tree's CLI and module (e.g. a worktree of the
#                                         commit before a change, built with this script's cmake line)
#                                         into .device/before/{bin,lib/expertscope}: the baseline of
#                                         `tools/gpu_run.sh abtree`, kept by later packs; rm -rf
#                                         .device/before when done
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/cuda} # BUILD=build/headless: the headless preset's build
as_before=0
for a in "$@"; do [[ $a == --as-before ]] && as_before=1; done
if [[ "${1:-}" != "--no-build" ]]; then # (--as-old builds too)
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DES_BUILD_GUI=OFF -DES_BUILD_TESTS=OFF -DES_BUILD_CLI=ON -DES_DEVELOPER_SWITCHES=ON \
        -DES_CUDA_ARCHITECTURES=90a >/dev/null
    ninja -C "$BUILD" expertscope-cli es_cuda_module
fi
BIN="$BUILD/app/expertscope-cli"
MODULE="$BUILD/app/libexpertscope-cuda.so"
[[ -f "$MODULE" ]] || { echo "gpu_pack: $MODULE was not built (no CUDA toolkit found?)" >&2; exit 1; }
if readelf -d "$BIN" | grep -Eq 'NEEDED.*lib(cudart|cublas|cuda)'; then
    echo "gpu_pack: $BIN links a CUDA library; only the module may" >&2; exit 1
fi
if [[ "${1:-}" == "--as-old" ]]; then
    rm -rf .device/old
    mkdir -p .device/old/lib/expertscope
    cp "$MODULE" .device/old/lib/expertscope/
    echo "gpu_pack: the baseline module is in .device/old/lib/expertscope/"
    exit 0
fi
if [[ $as_before == 1 ]]; then
    rm -rf .device/before
    mkdir -p .device/before/bin .device/before/lib/expertscope
    cp "$BIN" .device/before/bin/
    cp "$MODULE" .device/before/lib/expertscope/
    strip --strip-debug .device/before/bin/expertscope-cli .device/before/lib/expertscope/libexpertscope-cuda.so
    echo "gpu_pack: the baseline CLI and module are in .device/before/"
    exit 0
fi
keep=$(mktemp -d)
for d in old before; do [[ -d .device/$d ]] && mv ".device/$d" "$keep/"; done
rm -rf .device
mkdir -p .device/bin .device/lib/expertscope
for d in old before; do [[ -d $keep/$d ]] && mv "$keep/$d" .device/; done
rmdir "$keep"
cp "$BIN" .device/bin/
cp "$MODULE" .device/lib/expertscope/
# Non-system libraries the CLI and the module link (cuBLASLt excepted: the GPU machine has it).
for lib in libsentencepiece.so.0 libprotobuf-lite.so.32 libgomp.so.1 libcpp-httplib.so.0.11 \
           libssl.so.3 libcrypto.so.3 libbrotlidec.so.1 libbrotlienc.so.1 libbrotlicommon.so.1; do
    path=$( (ldd "$BIN"; ldd "$MODULE") | awk -v l="$lib" '$1 == l { print $3; exit }')
    [[ -n "$path" ]] && cp -L "$path" .device/lib/
done
grep -qx '/.device/' .gitignore || echo '/.device/' >> .git/info/exclude
du -sh .device
# One compressed archive (~7 MB of ~25) to copy to the GPU machine with the repository; unpacked
# there, in the repository's root.
rm -f .device.tar.xz
tar cJf .device.tar.xz .device
du -sh .device.tar.xz
cat <<'CMD'
on the GPU machine, in the repository's root with .device.tar.xz (about 3-5 minutes):
  tar xJf .device.tar.xz && bash tools/gpu_run.sh full
CMD
