#!/bin/bash
# Packs bench_profiler with the Qt libraries it loads into BUILD/devbench, so the profiler's
# benchmark can run on a machine without Qt (e.g. a quiet 16-core machine, as for the figures in
# docs/benchmarks.md, "Profiler"). Usage: tools/pack_bench_profiler.sh BUILD_DIR
# There: BUILD_DIR/devbench/run.sh (env ES_BENCH_* as in tests/ui/bench_profiler.cpp).
set -euo pipefail
build=${1:?usage: tools/pack_bench_profiler.sh BUILD_DIR}
out="$build/devbench"
rm -rf "$out" && mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/plugins/platforms" "$stage/plugins/sqldrivers" "$stage/fonts"
strip -o "$out/bench_profiler" "$build/tests/ui/bench_profiler"
plugins=$(qtpaths6 --plugin-dir 2>/dev/null || echo /usr/lib/x86_64-linux-gnu/qt6/plugins)
cp "$plugins/platforms/libqoffscreen.so" "$stage/plugins/platforms/"
cp "$plugins/sqldrivers/libqsqlite.so" "$stage/plugins/sqldrivers/"
# Every shared library they load except the C/C++ runtime, which the target has.
for f in "$build/tests/ui/bench_profiler" "$plugins/platforms/libqoffscreen.so" "$plugins/sqldrivers/libqsqlite.so"; do
  ldd "$f" | awk '/=>/ {print $3}' | while read -r lib; do
    case $(basename "$lib") in libc.so* | libm.so* | libstdc++* | libgcc_s* | ld-linux*) ;; *) cp -nL "$lib" "$stage/lib/" ;; esac
  done
done
cp /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf "$stage/fonts/"
tar -C "$stage" -cJf "$out/devlibs.tar.xz" lib plugins fonts
cat > "$out/run.sh" <<'RUN'
#!/bin/bash
# Runs bench_profiler on a machine without Qt: the libraries travel in devlibs.tar.xz.
set -e
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
mkdir -p /tmp/devbench && tar -C /tmp/devbench -xJf "$here/devlibs.tar.xz"
# ES_TEST_DATA_DIR was compiled as /work/main/tests/data.
if [ ! -e /work/main/tests ]; then mkdir -p /work/main && ln -s "$repo/tests" /work/main/tests; fi
export LD_LIBRARY_PATH=/tmp/devbench/lib QT_PLUGIN_PATH=/tmp/devbench/plugins QT_QPA_FONTDIR=/tmp/devbench/fonts
export QT_QPA_PLATFORM=offscreen HOME=/tmp/devbench/home
mkdir -p "$HOME"
exec "$here/bench_profiler" "$@"
RUN
chmod +x "$out/run.sh"
du -sh "$out"
