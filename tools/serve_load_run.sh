#!/bin/bash
# One load run of the OpenAI server: starts `expertscope-cli serve` in the background on a free
# port, waits for it to listen, runs `serve-bench --url` (streaming clients at 1, 8 and 32), saves
# the server's /metrics, stops the server (SIGTERM) and checks it stopped cleanly.
# Usage: tools/serve_load_run.sh CLI OUT_DIR NAME -- SERVE_ARGS… [-- SERVE_BENCH_ARGS…]
#   e.g. tools/serve_load_run.sh build/headless/app/expertscope-cli "$OUT" 21b-fp8 -- \
#          --shape ernie-4.5-21b-a3b --backend cuda --precision fp8 --max-num-seqs 32 --kv-cache-mib 8192
# Writes OUT_DIR/NAME.{bench.txt,bench.json,metrics.txt,serve.log}. Bench defaults: 64 requests per
# level, 512-token prompts (no shared prefix), 128 output tokens, greedy, ignore_eos.
set -uo pipefail
cli=${1:?usage: serve_load_run.sh CLI OUT_DIR NAME -- SERVE_ARGS… [-- BENCH_ARGS…]}
out=${2:?OUT_DIR}
name=${3:?NAME}
shift 3
[ "${1:-}" = "--" ] && shift
serve_args=() bench_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do serve_args+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
bench_args=("$@")
[ ${#bench_args[@]} -eq 0 ] && bench_args=(--requests 64 --concurrency 1,8,32 --prompt-len 512 --output-len 128 --shared-prefix 0)
mkdir -p "$out"
"$cli" serve --port 0 "${serve_args[@]}" > "$out/$name.serve.out" 2> "$out/$name.serve.log" &
pid=$!
port=
for _ in $(seq 1200); do # building random weights of a large shape takes a while
  port=$(grep -oP 'listening on http://127\.0\.0\.1:\K[0-9]+' "$out/$name.serve.out" 2>/dev/null) && break
  kill -0 $pid 2>/dev/null || { echo "serve exited:"; cat "$out/$name.serve.log"; exit 1; }
  sleep 0.5
done
[ -n "$port" ] || { echo "serve did not listen within 10 minutes"; kill $pid; exit 1; }
"$cli" serve-bench --url "http://127.0.0.1:$port" "${bench_args[@]}" --json "$out/$name.bench.json" \
  2>&1 | tee "$out/$name.bench.txt"
rc=${PIPESTATUS[0]}
curl -s "http://127.0.0.1:$port/metrics" > "$out/$name.metrics.txt" || true
kill -TERM $pid
wait $pid
serve_rc=$?
tail -3 "$out/$name.serve.log"
echo "serve-bench exit $rc, serve exit $serve_rc"
[ $rc -eq 0 ] && [ $serve_rc -eq 0 ]
