#!/usr/bin/env bash
# Runs on the GPU machine after tools/gpu_pack.sh: the runtime (engine thread, scheduler, prefix
# cache, sampler) on the CUDA backend with the embedded default model — greedy answers against
# the CPU backend, the default model's logits in the self-test, and serve-bench at 1/8/32
# concurrent requests in BF16 and FP8. Everything printed also goes to $OUT/runtime.md.
set -uo pipefail
OUT=${OUT:-/tmp/es-out}
mkdir -p "$OUT"
CLI=.device/bin/expertscope-cli
lt=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.device/lib${lt:+:$(dirname "$lt")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
M=resources/models/default
{
  "$CLI" --version
  for prompt in "【技术解析模式】What does ls do?" "【创意写作模式】写一首唐诗"; do
    for be in cpu cuda; do
      echo "### generate --backend $be: $prompt"
      timeout 60 "$CLI" generate --backend "$be" --precision bf16 --model "$M" --chat --prompt "$prompt" --temperature 0 --max-tokens 48 2>&1
    done
  done
  echo "### selftest on the default model"
  timeout 120 "$CLI" selftest --data resources/models 2>&1 | tail -25
  for p in bf16 fp8; do
    echo "### serve-bench --backend cuda --precision $p"
    timeout 120 "$CLI" serve-bench --backend cuda --precision "$p" --model "$M" --requests 64 --concurrency 1,8,32 \
      --prompt-len 128 --output-len 64 --shared-prefix 64 2>&1 | sed -n '/^| concurrency/,$p'
  done
} 2>&1 | tee "$OUT/runtime.md"
