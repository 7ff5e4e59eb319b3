#!/usr/bin/env bash
# CPU benchmarks of the engine (issues 2 and 3), as recorded in docs/benchmarks.md:
#  1. batch-1 prefill/decode of the ERNIE-4.5-0.3B shape (random weights) against this machine's
#     read bandwidth measured in the same run, with the weights held in fp32, BF16 and E4M3;
#  2. serve-bench at concurrency 1, 4, 16 (ratios against concurrency 1 of the same run) on the
#     MoE reference checkpoint and on the 0.3B shape reduced to 4 layers.
# Usage: tools/bench_cpu.sh [BUILD_DIR]   (default build/default)
set -euo pipefail
cd "$(dirname "$0")/.."
cli=${1:-build/default}/app/expertscope-cli
[ -x "$cli" ] || { echo "bench_cpu: $cli not built" >&2; exit 1; }
echo "## $(date -u +%F) on $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for precision in fp32 bf16 fp8; do
  "$cli" bench --shape ernie-4.5-0.3b --pp 128,512 --tg 32 --reps 3 --precision "$precision"
done
"$cli" serve-bench --model tests/data/moe-shared --requests 32 --concurrency 1,4,16 \
  --prompt-len 128 --output-len 64 --shared-prefix 64 | sed -n '/^| concurrency/,$p'
"$cli" serve-bench --shape ernie-4.5-0.3b --layers 4 --requests 16 --concurrency 1,4,16 \
  --prompt-len 64 --output-len 32 --shared-prefix 32 | sed -n '/^| concurrency/,$p'
