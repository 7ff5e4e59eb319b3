#!/usr/bin/env bash
# The CPU backend beside llama.cpp's CPU backend, in one run on one machine, at the same bytes per
# weight: ExpertScope's BF16 weights against llama.cpp's BF16 GGUF, its E4M3 weights (one byte a
# weight and an fp32 scale a row) against llama.cpp's Q8_0 (one byte a weight and an fp16 scale
# per 32). Both load the same random-weight ERNIE-4.5-0.3B checkpoint (tools/make_random_ernie.py
# writes its BF16 bits twice: a hub folder and a GGUF file; llama-quantize makes the Q8_0 one).
# llama.cpp also runs Q8_0 linears with a BF16 head (its embeddings tied), ExpertScope's FP8 bytes
# tensor for tensor. Prints one Markdown table (pp and tg tok/s of both and their ratio), as in
# docs/benchmarks.md.
#
# llama.cpp is fetched at a pinned commit into build/llama.cpp/src (git-ignored, never committed)
# and its CPU backend is built there (llama-bench and llama-quantize only). No network: set
# LLAMA_CPP_SRC to a local copy, a source folder or a git directory holding that commit.
#
# Usage: tools/bench_cpu_vs_llamacpp.sh [BUILD_DIR]   (default build/cpu: expertscope-cli there)
# Environment: THREADS (default: all cores), PP (512), TG (128), REPS (3), JOBS (build jobs, 2),
#   LLAMA_CPP_SRC, LLAMA_CPP_COMMIT (default: the pinned one), PYTHON (one with numpy).
# Needs git, cmake, a C++17 compiler and python3 with numpy (Debian: python3-numpy).
set -euo pipefail
cd "$(dirname "$0")/.."

# llama.cpp master of 2026-07-08 (#25425): Ernie4_5ForCausalLM, llama-bench's JSON output.
LLAMA_CPP_COMMIT=${LLAMA_CPP_COMMIT:-81ff7abe50b95fb81cc70a6cdba1eb1a02a48f62}
LLAMA_CPP_URL=https://github.com/ggml-org/llama.cpp
work=build/llama.cpp
src=$work/src
cli=${1:-build/cpu}/app/expertscope-cli
threads=${THREADS:-$(nproc)}
pp=${PP:-512}
tg=${TG:-128}
reps=${REPS:-3}
[ -x "$cli" ] || { echo "bench_cpu_vs_llamacpp: $cli not built" >&2; exit 1; }

python=${PYTHON:-}
if [ -z "$python" ]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import numpy' 2>/dev/null; then python=$p; break; fi
  done
fi
[ -n "$python" ] || { echo "bench_cpu_vs_llamacpp: no python3 with numpy (apt-get install python3-numpy)" >&2; exit 1; }

# (a) llama.cpp's source at the pinned commit. A git directory's models/ holds vocabulary files
# that no build step reads (mirrors may lack them), so they are left out.
if [ "$(cat "$src/.commit" 2>/dev/null)" != "$LLAMA_CPP_COMMIT" ]; then
  rm -rf "$src"
  mkdir -p "$src"
  if [ -z "${LLAMA_CPP_SRC:-}" ]; then
    git -C "$src" init -q
    git -C "$src" fetch -q --depth 1 "$LLAMA_CPP_URL" "$LLAMA_CPP_COMMIT"
    git -C "$src" checkout -q FETCH_HEAD
  elif git --git-dir="$LLAMA_CPP_SRC" rev-parse -q --verify "$LLAMA_CPP_COMMIT^{commit}" >/dev/null 2>&1; then
    git --git-dir="$LLAMA_CPP_SRC" archive "$LLAMA_CPP_COMMIT" -- . ':(exclude)models' 2>/dev/null | tar -x -C "$src"
  elif git -C "$LLAMA_CPP_SRC" rev-parse -q --verify "$LLAMA_CPP_COMMIT^{commit}" >/dev/null 2>&1; then
    git -C "$LLAMA_CPP_SRC" archive "$LLAMA_CPP_COMMIT" -- . ':(exclude)models' 2>/dev/null | tar -x -C "$src"
  elif [ -f "$LLAMA_CPP_SRC/CMakeLists.txt" ] && [ -f "$LLAMA_CPP_SRC/tools/llama-bench/llama-bench.cpp" ]; then
    echo "bench_cpu_vs_llamacpp: $LLAMA_CPP_SRC is a source folder: its commit is taken on trust" >&2
    cp -a "$LLAMA_CPP_SRC/." "$src/"
  else
    echo "bench_cpu_vs_llamacpp: LLAMA_CPP_SRC=$LLAMA_CPP_SRC holds neither commit $LLAMA_CPP_COMMIT nor a llama.cpp source folder" >&2
    exit 1
  fi
  [ -f "$src/tools/llama-bench/llama-bench.cpp" ] || { echo "bench_cpu_vs_llamacpp: no llama.cpp source in $src" >&2; exit 1; }
  echo "$LLAMA_CPP_COMMIT" > "$src/.commit"
fi

# (b) Its CPU backend, Release, native ISA (as ExpertScope's own build), only the two tools.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
  --no-warn-unused-cli "${launcher[@]}" > "$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" -j "${JOBS:-2}" --target llama-bench llama-quantize > "$work/build.log" ||
  { tail -30 "$work/build.log" >&2; exit 1; }
bench=$work/build/bin/llama-bench
quantize=$work/build/bin/llama-quantize

# (c) One checkpoint for both: the hub folder (ExpertScope), its BF16 GGUF twin and the Q8_0 GGUF.
model=$work/ernie-4.5-0.3b-random
if [ ! -f "$model/model-bf16.gguf" ] || [ tools/make_random_ernie.py -nt "$model/model-bf16.gguf" ]; then
  "$python" tools/make_random_ernie.py --out "$model"
  rm -f "$model"/model-q8_0*.gguf
fi
# Q8_0 throughout (llama-quantize's default), and Q8_0 linears with the tied embeddings (the head)
# kept BF16: ExpertScope's FP8 bytes a weight, tensor for tensor.
quantize_to() { # OUT [OPTIONS…]
  [ -f "$model/$1" ] && return 0
  local out=$1
  shift
  "$quantize" "$@" "$model/model-bf16.gguf" "$model/$out" Q8_0 "$threads" > "$work/quantize.log" 2>&1 ||
    { tail -20 "$work/quantize.log" >&2; exit 1; }
}
quantize_to model-q8_0.gguf
quantize_to model-q8_0-bf16-head.gguf --token-embedding-type bf16 --output-tensor-type bf16

# (d) Both engines, one after the other, same threads, prompt and generation lengths.
out=$work/results
mkdir -p "$out"
echo "## $(date -u +%F) on $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ExpertScope $("$cli" --version | sed -n '1s/.*(commit \(.*\))/\1/p'), llama.cpp ${LLAMA_CPP_COMMIT:0:10}; pp$pp, tg$tg, $reps repetitions"
for q in bf16 q8_0 q8_0-bf16-head; do
  "$bench" -m "$model/model-$q.gguf" -p "$pp" -n "$tg" -t "$threads" -r "$reps" -o json > "$out/llama-$q.json" \
    2> "$out/llama-$q.log" || { tail -20 "$out/llama-$q.log" >&2; exit 1; }
done
for precision in bf16 fp8; do
  "$cli" bench --model "$model" --pp "$pp" --tg "$tg" --reps "$reps" --threads "$threads" --precision "$precision" \
    --json "$out/es-$precision.json" > "$out/es-$precision.md" 2> "$out/es-$precision.log" ||
    { tail -20 "$out/es-$precision.log" >&2; exit 1; }
done

# (e) The table: ExpertScope / llama.cpp in each cell, and the ratio.
"$python" - "$out" "$pp" "$tg" <<'EOF'
import json, sys
out, pp, tg = sys.argv[1], f"pp{sys.argv[2]}", f"tg{sys.argv[3]}"

def llama(q):
    rows = json.load(open(f"{out}/llama-{q}.json"))
    def tps(prompt, gen):
        return next(r["avg_ts"] for r in rows if r["n_prompt"] == prompt and r["n_gen"] == gen)
    return tps(int(pp[2:]), 0), tps(0, int(tg[2:])), rows[0]["model_size"]

def es(p):
    d = json.load(open(f"{out}/es-{p}.json"))
    return (*(next(r["tokens_per_s"] for r in d["results"] if r["test"] == t) for t in (pp, tg)),
            d["decode_bytes_per_token"])

# MB a decode token reads: ExpertScope's count of the weights it touches; llama.cpp's file size
# (the tied embeddings are its head, read whole every token).
print(f"\n| ExpertScope vs llama.cpp weights | MB a token | {pp} tok/s | {pp} ratio | {tg} tok/s | {tg} ratio |")
print("|---|---:|---:|---:|---:|---:|")
for label, p, q in (("BF16 vs BF16", "bf16", "bf16"),
                    ("FP8 (E4M3 linears, BF16 head) vs Q8_0", "fp8", "q8_0"),
                    ("FP8 (E4M3 linears, BF16 head) vs Q8_0 linears, BF16 head", "fp8", "q8_0-bf16-head")):
    (ep, et, eb), (lp, lt, lb) = es(p), llama(q)
    print(f"| {label} | {eb / 1e6:,.0f} / {lb / 1e6:,.0f} | {ep:,.1f} / {lp:,.1f} | {ep / lp:.2f} | "
          f"{et:,.1f} / {lt:,.1f} | {et / lt:.2f} |")
EOF
