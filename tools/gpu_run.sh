#!/usr/bin/env bash
# Runs on the GPU machine in a copy of the repository, after tools/gpu_pack.sh (its .device.tar.xz
# unpacked in the repository's root):
#   bash tools/gpu_run.sh full|selftest|bench|final|depth|engine|batch|decode|fuse|ncu|hf|eval|serve|report|blk|moewaves|ab|abenv|abfinal|abbuild|abtree|only   (BENCH_ARGS="--profile" adds per-kernel tables)
#   bash tools/gpu_run.sh final    the bench, then the self-test in what is left of a time limit for
#                                  the whole run (FINAL_BUDGET_S seconds, 600 by default), so that
#                                  the figures come first when the run has a limit
#   bash tools/gpu_run.sh blk      FP8 128x128 block scales (--fp8-scales block128): the selftest's
#                                  block rows, then bench against per-channel scales (blk.md)
#   bash tools/gpu_run.sh serve    the OpenAI server under 1/8/32 streaming clients, random weights
#                                  of real shapes (SERVE_SPECS="name:shape:precision …" to choose)
# report: the default model on the GPU, bench --json for a report (docs/reports.md), in
# $OUT/bench-default-h200.json; render it with `expertscope-cli report --bench-json` on a full build.
# Writes everything it prints to $OUT (selftest.md, bench.md, gpu.txt, sanitizer.txt) as well.
# The CLI loads the CUDA module from .device/lib/expertscope/ (its --version, in gpu.txt, says
# which file and whether CUDA is usable; the run stops there when it is not).
set -uo pipefail
OUT=${OUT:-/tmp/es-out}
mkdir -p "$OUT"
CLI=.device/bin/expertscope-cli
lt=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$PWD/.device/lib${lt:+:$(dirname "$lt")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mode=${1:-full}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu.txt"
echo "cuBLASLt: ${lt:-not found}" | tee -a "$OUT/gpu.txt"
"$CLI" --version 2>&1 | tee -a "$OUT/gpu.txt"
if ! grep -q '^backends: cpu, cuda (' "$OUT/gpu.txt"; then
    echo "gpu_run: the CUDA backend is not usable here (see the backends line above)" | tee -a "$OUT/gpu.txt"
    exit 2
fi
rc=0
start_s=$SECONDS
# The self-test within $1 seconds; on a failed check (not on running out of time: exit 124) the
# kernels again under compute-sanitizer when the machine has it and there are 200 s left.
run_selftest() {
    timeout "$1" "$CLI" selftest --data tests/data 2>&1 | tee "$OUT/selftest.md"
    rc=${PIPESTATUS[0]}
    echo "selftest exit code: $rc$([[ $rc -eq 124 ]] && echo " (cut after $1 s)")" | tee -a "$OUT/selftest.md"
    if [[ $rc -ne 0 && $rc -ne 124 ]] && command -v compute-sanitizer >/dev/null &&
        ((${FINAL_BUDGET_S:-600} - (SECONDS - start_s) > 200)); then
        timeout 150 compute-sanitizer --print-limit 12 "$CLI" selftest --kernels-only 2>&1 | tail -80 >"$OUT/sanitizer.txt"
    fi
}
if [[ $mode == full || $mode == selftest ]]; then
    run_selftest 450
fi
if [[ $mode == only ]]; then
    # The selftest's checks whose names contain one of ONLY's '|'-separated texts (selftest-only.md).
    IFS='|' read -ra only <<<"${ONLY:?ONLY=\"text|text…\"}"
    for t in "${only[@]}"; do
        timeout 300 "$CLI" selftest --data tests/data --only "$t" 2>&1 | tee -a "$OUT/selftest-only.md"
        c=${PIPESTATUS[0]}
        echo "selftest --only \"$t\" exit code: $c" | tee -a "$OUT/selftest-only.md"
        [[ $c -ne 0 ]] && rc=$c
    done
fi
if [[ $mode == full || $mode == bench || $mode == final ]]; then
    bench() { # shape, precision, extra args
        echo "### $*" | tee -a "$OUT/bench.md"
        timeout 150 "$CLI" bench --backend cuda --shape "$1" --precision "$2" --pp 512,2048 --tg 128 --reps 3 ${BENCH_ARGS:-} "${@:3}" \
            2>&1 | tee -a "$OUT/bench.md"
    }
    bench ernie-4.5-0.3b bf16
    bench ernie-4.5-0.3b fp8
    bench ernie-4.5-21b-a3b fp8 --layers 4
    bench ernie-4.5-21b-a3b bf16 --layers 4
    bench ernie-4.5-21b-a3b fp8 --layers 12
    bench ernie-4.5-21b-a3b fp8
    bench ernie-4.5-21b-a3b bf16
    # The per-layer policy: the head in FP8 too (decode only).
    for spec in "ernie-4.5-0.3b 0" "ernie-4.5-21b-a3b 0"; do
        set -- $spec
        echo "### $1 fp8 --fp8-head" | tee -a "$OUT/bench.md"
        timeout 150 "$CLI" bench --backend cuda --shape "$1" --precision fp8 --fp8-head --pp 16 --tg 128 --reps 3 2>&1 |
            grep -E 'tg128|decode step|head' | tee -a "$OUT/bench.md"
    done
fi
if [[ $mode == final ]]; then
    # The bench above first (about a minute), then the self-test in what is left of the run's time
    # limit FINAL_BUDGET_S (600 s by default) less 15 s, so that a slow host cuts the self-test
    # (which says so) rather than the figures.
    left=$((${FINAL_BUDGET_S:-600} - (SECONDS - start_s) - 15))
    if ((left < 30)); then # (timeout 0 would mean no limit at all)
        echo "final: bench done after $((SECONDS - start_s)) s; no time left for the self-test" | tee -a "$OUT/bench.md"
        rc=124
    else
        echo "final: bench done after $((SECONDS - start_s)) s; the self-test gets $left s" | tee -a "$OUT/bench.md"
        run_selftest "$left"
    fi
fi
if [[ $mode == depth ]]; then
    # What a chat at a depth costs: the KV pool the engine sizes from the device (serve's load
    # line: KV blocks of 16 tokens, BF16 and FP8 KV), then batch-1 decode after contexts of
    # DEPTHS tokens (bench --depth) beside tg128 from an empty context (the same run's baseline).
    for kv in bf16 fp8; do
        echo "### serve 21b-a3b fp8, --kv-cache $kv" | tee -a "$OUT/depth.md"
        timeout 120 "$CLI" serve --backend cuda --shape ernie-4.5-21b-a3b --precision fp8 --kv-cache "$kv" \
            --port 0 >"$OUT/serve-$kv.log" 2>&1 &
        pid=$!
        for _ in $(seq 1 110); do grep -q listening "$OUT/serve-$kv.log" && break; sleep 1; done
        kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
        grep -E 'KV blocks|error|out of' "$OUT/serve-$kv.log" | tee -a "$OUT/depth.md"
    done
    for spec in ${DEPTH_SPECS:-"ernie-4.5-21b-a3b fp8" "ernie-4.5-0.3b fp8"}; do
        set -- $spec
        echo "### depth $*" | tee -a "$OUT/depth.md"
        timeout 240 "$CLI" bench --backend cuda --shape "$1" --precision "$2" --pp 2048 --tg 128 --reps 3 \
            --depth "${DEPTHS:-1024,8192,32768}" --json "$OUT/depth-$1-$2.json" 2>&1 | grep -E '^\| |^###|error' |
            tee -a "$OUT/depth.md"
    done
fi
if [[ $mode == engine ]]; then
    # The engine's own path on the GPU (scheduler, step loop, sampler), random weights of a real
    # shape: a 2,048-token prompt's TTFT against bench's pp2048, greedy against the chat's
    # sampler (temperature 0.8, top-p 0.8), one request and eight at once.
    for spec in ${ENGINE_SPECS:-"ernie-4.5-21b-a3b fp8"}; do
        set -- $spec
        echo "### bench $*" | tee -a "$OUT/engine.md"
        timeout 120 "$CLI" bench --backend cuda --shape "$1" --precision "$2" --pp 2048 --tg 128 --reps 3 2>&1 |
            grep -E '^\| |error' | tee -a "$OUT/engine.md"
        for t in "0 1" "0.8 0.8"; do
            set -- $spec $t
            echo "### serve-bench $1 $2, temperature $3, top-p $4" | tee -a "$OUT/engine.md"
            timeout 200 "$CLI" serve-bench --backend cuda --shape "$1" --precision "$2" --temperature "$3" --top-p "$4" \
                --concurrency 1,8 --requests 8 --prompt-len 2048 --output-len 128 --shared-prefix 0 \
                --max-batched-tokens 2048 2>&1 | tee -a "$OUT/engine.md"
        done
    done
fi
if [[ $mode == batch ]]; then
    # Batched decode (TTFT, ITL p50/p99, tok/s at batch 1, 8, 64), pp/tg skipped: --pp 16 --reps 1.
    for spec in "ernie-4.5-0.3b fp8" "ernie-4.5-0.3b bf16" "ernie-4.5-21b-a3b fp8"; do
        set -- $spec
        echo "### batch $*" | tee -a "$OUT/batch.md"
        timeout 200 "$CLI" bench --backend cuda --shape "$1" --precision "$2" --pp 16 --tg 128 --reps 1 --batch 1,8,64 \
            --json "$OUT/batch-$1-$2.json" 2>&1 | grep -E '^\| |^###' | tee -a "$OUT/batch.md"
    done
fi
if [[ $mode == decode ]]; then
    # Batch-1 decode only (tg128, pp skipped): programmatic launch on/off, then leave-one-out
    # timings (ES_CUDA_SKIP_OPS: the launches named are left out, so the time saved is their cost).
    dec() { # label, shape, precision, [layers], env assignments…
        local label=$1 shape=$2 prec=$3 layers=$4
        shift 4
        echo "### decode $label" | tee -a "$OUT/decode.md"
        env "$@" timeout 100 "$CLI" bench --backend cuda --shape "$shape" --precision "$prec" --layers "$layers" \
            --pp 16 --tg 128 --reps 3 2>&1 | grep -E 'tg128|decode step|CUDA graphs' | tee -a "$OUT/decode.md"
    }
    dec "0.3b fp8" ernie-4.5-0.3b fp8 0
    dec "0.3b fp8, no PDL" ernie-4.5-0.3b fp8 0 ES_CUDA_PDL=0
    dec "0.3b bf16" ernie-4.5-0.3b bf16 0
    dec "21b-a3b fp8" ernie-4.5-21b-a3b fp8 0
    dec "21b-a3b fp8, no PDL" ernie-4.5-21b-a3b fp8 0 ES_CUDA_PDL=0
    for skip in ${DECODE_SKIPS:-attention rope_kv rms_norm qkv o_proj gate_up down head}; do
        dec "0.3b fp8 without $skip" ernie-4.5-0.3b fp8 0 ES_CUDA_SKIP_OPS=$skip
    done
    for skip in ${DECODE_SKIPS_MOE:-attention rms_norm moe_front moe_gate_up moe_down}; do
        dec "21b-a3b fp8 without $skip" ernie-4.5-21b-a3b fp8 0 ES_CUDA_SKIP_OPS=$skip
    done
fi
if [[ $mode == fuse ]]; then
    # Batch-1 decode with decode's fused launches on and off (ES_CUDA_FUSE=0: the separate kernels).
    for spec in "ernie-4.5-0.3b fp8 0" "ernie-4.5-21b-a3b fp8 4" "ernie-4.5-21b-a3b fp8 0"; do
        set -- $spec
        for fuse in 1 0 1; do
            echo "### decode $1 $2 layers=$3 ES_CUDA_FUSE=$fuse" | tee -a "$OUT/fuse.md"
            ES_CUDA_FUSE=$fuse timeout 100 "$CLI" bench --backend cuda --shape "$1" --precision "$2" --layers "$3" \
                --pp 16 --tg 128 --reps 3 2>&1 | grep -E 'tg128|decode step' | tee -a "$OUT/fuse.md"
        done
    done
fi
if [[ $mode == moewaves ]]; then
    # Batch-1 decode of the 21B-A3B with 1, 2 and 4 output rows per warp in the routed experts'
    # down GEMV (ES_CUDA_MOE_DOWN_ROWS_PER_WARP; unset = the default, 2 here), twice each: the
    # step, the first two MoE layers' timeline rows, and the kernel's mean share over all MoE layers.
    for rpw in 1 2 4 1 2 4; do
        echo "### decode ernie-4.5-21b-a3b fp8 ES_CUDA_MOE_DOWN_ROWS_PER_WARP=$rpw" | tee -a "$OUT/moewaves.md"
        ES_CUDA_MOE_DOWN_ROWS_PER_WARP=$rpw timeout 150 "$CLI" bench --backend cuda --shape ernie-4.5-21b-a3b \
            --precision fp8 --pp 16 --tg 128 --reps 3 --timeline >"$OUT/moewaves-$rpw.txt" 2>&1
        echo "bench exit code: $?" | tee -a "$OUT/moewaves.md"
        grep -E 'tg128|decode step|error|fail' "$OUT/moewaves-$rpw.txt" | tee -a "$OUT/moewaves.md"
        grep -E '^\| [0-9]+ \| moe_down_gemv \|' "$OUT/moewaves-$rpw.txt" | head -2 | tee -a "$OUT/moewaves.md"
        awk -F'|' '$3 ~ /^ moe_down_gemv $/ { s += $5; n++ }
            END { printf "mean share of moe_down_gemv over %d layers: %.2f µs\n", n, s / n }' \
            "$OUT/moewaves-$rpw.txt" | tee -a "$OUT/moewaves.md"
    done
fi
# One batch-1 decode of SHAPE (fp8) under the given environment assignments, with the timeline:
# "### decode SHAPE fp8 LABEL", the step, and the mean timeline share of every launch name, into
# $OUT/NAME.md (the run's whole output in $OUT/NAME.txt).  decode_timed NAME SHAPE LABEL [VAR=VALUE…]
decode_timed() {
    local name=$1 shape=$2 label=$3
    shift 3
    echo "### decode $shape fp8 $label" | tee -a "$OUT/$name.md"
    env "$@" timeout 150 "$CLI" bench --backend cuda --shape "$shape" --precision fp8 --pp 16 --tg 128 --reps 3 \
        --timeline ${AB_BENCH_ARGS:-} >"$OUT/$name.txt" 2>&1
    echo "bench exit code: $?" | tee -a "$OUT/$name.md"
    grep -E 'tg128|decode step|error|fail' "$OUT/$name.txt" | tee -a "$OUT/$name.md"
    awk -F'|' 'NF > 5 && $2 ~ /^ [0-9]+ $/ { s[$3] += $5; n[$3]++ }
        END { for (k in s) printf "mean share of%s(%d launches): %.2f µs\n", k, n[k], s[k] / n[k] }' \
        "$OUT/$name.txt" | sort | tee -a "$OUT/$name.md"
}
if [[ $mode == ab ]]; then
    # Batch-1 decode, the default against AB_ENV (one environment assignment, a measuring aid of
    # the backend, e.g. AB_ENV=ES_CUDA_MOE_DOWN=gather) on AB_SHAPE (the 21B-A3B by default),
    # twice each: the step and the mean timeline share of every launch name (ab.md).
    for v in "" "$AB_ENV" "" "$AB_ENV"; do
        decode_timed ab "${AB_SHAPE:-ernie-4.5-21b-a3b}" "${v:-default}" $v
    done
fi
if [[ $mode == abenv || $mode == abfinal ]]; then
    # Batch-1 decode under several settings of the backend's measuring aids in one run, alternating,
    # AB_ROUNDS times each (2 by default): AB_VARIANTS is a space-separated list whose entries are
    # "default" or comma-separated environment assignments, e.g.
    #   AB_VARIANTS="default ES_CUDA_MOE_SLOT_COUNTERS=0 ES_CUDA_WEIGHTS_PAD_KB=2048,ES_CUDA_FUSE=0"
    # on AB_SHAPES (the 21B-A3B by default), with AB_BENCH_ARGS added to every bench (e.g.
    # --fp8-head). abenv.md: each run's step and launch shares, then the mean GPU step per variant.
    for shape in ${AB_SHAPES:-ernie-4.5-21b-a3b}; do
        for ((r = 0; r < ${AB_ROUNDS:-2}; ++r)); do
            for v in ${AB_VARIANTS:-default}; do
                assign=""
                [[ $v != default ]] && assign=${v//,/ }
                decode_timed abenv "$shape" "$v" $assign
            done
        done
    done
    echo "### mean GPU step per variant" | tee -a "$OUT/abenv.md"
    awk '/^### decode / { v = $3 " " $5 } /decode step at position/ {
            for (i = 1; i <= NF; ++i) if ($(i + 1) == "µs" && $(i + 3) == "the" && $(i + 4) == "GPU") { s[v] += $i; n[v]++ } }
        END { for (k in s) printf "%s: %.1f µs (%d runs)\n", k, s[k] / n[k], n[k] }' "$OUT/abenv.md" | sort | tee -a "$OUT/abenv.md"
fi
if [[ $mode == abfinal ]]; then
    # abenv, then the self-test and the bench (as `selftest` and `bench`) under the variant with the
    # shortest mean GPU step on the first of AB_SHAPES, when it beats the default's by at least
    # AB_MIN_GAIN (a fraction, 0.01 by default): a new default's evidence in one run. abfinal.md
    # says which variant ran; selftest.md and bench.md are that variant's.
    first=${AB_SHAPES:-ernie-4.5-21b-a3b}
    first=${first%% *}
    best=$(grep -E "^$first .*: [0-9.]+ µs" "$OUT/abenv.md" | sed -E "s/^$first (.*): ([0-9.]+) µs.*/\2 \1/" | sort -n | head -1)
    dflt=$(grep -E "^$first default: " "$OUT/abenv.md" | sed -E 's/.*: ([0-9.]+) µs.*/\1/')
    read -r best_us best_v <<<"$best"
    if [[ -n $best_v && $best_v != default && -n $dflt ]] &&
        awk -v b="$best_us" -v d="$dflt" -v g="${AB_MIN_GAIN:-0.01}" 'BEGIN { exit !(b <= (1 - g) * d) }'; then
        echo "abfinal: $best_v ($best_us µs against the default's $dflt on $first): selftest and bench under it" |
            tee "$OUT/abfinal.md"
        assign=(${best_v//,/ })
        env "${assign[@]}" timeout 450 "$CLI" selftest --data tests/data 2>&1 | tee "$OUT/selftest.md"
        c=${PIPESTATUS[0]}
        echo "selftest exit code: $c ($best_v)" | tee -a "$OUT/selftest.md" "$OUT/abfinal.md"
        [[ $c -ne 0 ]] && rc=$c
        for spec in "ernie-4.5-0.3b 0" "ernie-4.5-21b-a3b 4" "ernie-4.5-21b-a3b 12" "ernie-4.5-21b-a3b 0"; do
            set -- $spec
            echo "### $1 fp8 --layers $2 ($best_v)" | tee -a "$OUT/bench.md"
            env "${assign[@]}" timeout 150 "$CLI" bench --backend cuda --shape "$1" --layers "$2" --precision fp8 \
                --pp 512,2048 --tg 128 --reps 3 2>&1 | tee -a "$OUT/bench.md" | grep -E 'tg128|pp2048|decode step|graphs'
        done
    else
        echo "abfinal: no variant beat the default by ${AB_MIN_GAIN:-0.01} on $first (best: ${best_v:-none} ${best_us:-}, default ${dflt:-?})" |
            tee "$OUT/abfinal.md"
    fi
fi
if [[ $mode == abtree ]]; then
    # Two builds of the tree alternating: .device/before/ (bin/ and lib/ as .device's, the baseline,
    # e.g. the commit before a restructuring) and .device (the change); each CLI loads the module
    # beside it. Batch-1 prefill and decode on ABTREE_SPECS ("shape precision layers [bench args]"
    # entries separated by ';'), AB_ROUNDS times each (1 by default). abtree.md: every run's output;
    # ABTREE_ORDER="after before" runs the change first in each pair (to see order effects).
    # the tg128, pp2048 and GPU-step lines are also printed.
    BEFORE=.device/before/bin/expertscope-cli
    [[ -x $BEFORE ]] || { echo "gpu_run: abtree needs $BEFORE" | tee -a "$OUT/abtree.md"; exit 2; }
    "$BEFORE" --version 2>&1 | tee -a "$OUT/abtree.md" | grep -E 'commit|^backends'
    IFS=';' read -ra specs <<<"${ABTREE_SPECS:-ernie-4.5-21b-a3b fp8 0 --fp8-head;ernie-4.5-0.3b fp8 0}"
    for ((r = 0; r < ${AB_ROUNDS:-1}; ++r)); do
        for spec in "${specs[@]}"; do
            set -- $spec
            for side in ${ABTREE_ORDER:-before after}; do
                cli=$CLI
                [[ $side == before ]] && cli=$BEFORE
                echo "### $side: $spec" | tee -a "$OUT/abtree.md"
                timeout 150 "$cli" bench --backend cuda --shape "$1" --precision "$2" --layers "$3" "${@:4}" \
                    --pp 2048 --tg 128 --reps 3 2>&1 | tee -a "$OUT/abtree.md" | grep -E 'tg128|pp2048|decode step|MBU'
            done
        done
    done
fi
if [[ $mode == abbuild ]]; then
    # Batch-1 decode, two CUDA modules of one commit alternating, three times each: the baseline
    # in .device/old/lib/expertscope/ (tools/gpu_pack.sh --as-old) against .device's, on AB_SHAPES
    # (abbuild.md).
    oldmod=$PWD/.device/old/lib/expertscope/libexpertscope-cuda.so
    [[ -f $oldmod ]] || { echo "gpu_run: no $oldmod (tools/gpu_pack.sh --as-old)" >&2; exit 2; }
    for shape in ${AB_SHAPES:-ernie-4.5-0.3b ernie-4.5-21b-a3b}; do
        for mod in "$oldmod" "" "$oldmod" "" "$oldmod" ""; do
            echo "### decode $shape fp8, module ${mod:-new}" | tee -a "$OUT/abbuild.md"
            EXPERTSCOPE_CUDA_MODULE=$mod timeout 100 "$CLI" bench --backend cuda --shape "$shape" --precision fp8 \
                --pp 16 --tg 128 --reps 3 2>&1 | grep -E 'tg128 |decode step|error' | tee -a "$OUT/abbuild.md"
        done
    done
fi
if [[ $mode == carveout ]]; then
    # Batch-1 decode with one shared-memory carveout for every kernel (ES_CUDA_CARVEOUT, percent)
    # against the default (the decode kernels' own 32 KB hints).
    for spec in "ernie-4.5-0.3b 0" "ernie-4.5-21b-a3b 0"; do
        set -- $spec
        for co in "" 28 14 "" 28; do
            echo "### decode $1 layers=$2 ES_CUDA_CARVEOUT=${co:-default}" | tee -a "$OUT/carveout.md"
            env ${co:+ES_CUDA_CARVEOUT=$co} timeout 100 "$CLI" bench --backend cuda --shape "$1" --precision fp8 \
                --layers "$2" --pp 16 --tg 128 --reps 3 2>&1 | grep -E 'decode step' | tee -a "$OUT/carveout.md"
        done
    done
fi
if [[ $mode == ncu ]]; then
    # Per-kernel GPU time (each kernel alone: ncu serializes), DRAM bytes and throughput, grid
    # and shared-memory split of a few decode steps (clocks unlocked). NCU_SHAPES: "shape:skip …"
    # (2 layers each, fp8); only the forward pass's kernels are counted (weight building's are
    # filtered out), so the skip passes prefill and lands in decode.
    ncu_bin=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
    for spec in ${NCU_SHAPES:-ernie-4.5-21b-a3b:40 ernie-4.5-0.3b:40}; do
        shape=${spec%%:*} skip=${spec##*:}
        echo "### ncu $shape, 2 layers, fp8, skip $skip" | tee -a "$OUT/ncu.md"
        timeout 200 "$ncu_bin" --clock-control none --csv --launch-skip "$skip" --launch-count "${NCU_COUNT:-40}" \
            --kernel-name regex:'gemv|attention|moe|topk|rms|embed|rope|silu|argmax' \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_config_size \
            "$CLI" bench --backend cuda --shape "$shape" --precision fp8 --layers 2 --pp 16 --tg 16 --reps 1 >"$OUT/ncu-$shape.csv" 2>&1
        python3 tools/ncu_table.py "$OUT/ncu-$shape.csv" | tee -a "$OUT/ncu.md"
    done
fi
if [[ $mode == hf ]]; then
    # The slow baseline: HF transformers (bf16) on the same shapes (tools/hf_bench.py).
    for spec in "ernie-4.5-0.3b 0 3" "ernie-4.5-21b-a3b 4 1" "ernie-4.5-21b-a3b 12 1" "ernie-4.5-21b-a3b 0 1"; do
        set -- $spec
        echo "### hf $1 --layers $2" | tee -a "$OUT/hf.md"
        timeout 240 python3 tools/hf_bench.py --shape "$1" --layers "$2" --reps "$3" --json "$OUT/hf-$1-$2.json" 2>&1 |
            grep -vE 'Warning|warn' | tee -a "$OUT/hf.md" || rc=1
    done
fi
if [[ $mode == report ]]; then
    timeout 300 "$CLI" bench --backend cuda --model resources/models/default --pp 128 --tg 128 --reps 3 \
        --json "$OUT/bench-default-h200.json" 2>&1 | tee "$OUT/bench-report.md"
    rc=${PIPESTATUS[0]}
fi
if [[ $mode == full || $mode == eval ]]; then
    # What FP8 / BF16 weights cost on the GPU against the exact checkpoint on the CPU (same tokens).
    ev() { # label, eval args
        echo "### eval $1" | tee -a "$OUT/eval.md"
        timeout 120 "$CLI" eval "${@:2}" --json "$OUT/eval-$1.json" 2>&1 | tee -a "$OUT/eval.md" || rc=1
    }
    ev default-fp8 --model resources/models/default --backend cuda --precision fp8 --text README.md --windows 4 --ctx 256
    ev default-fp8-e5m2 --model resources/models/default --backend cuda --precision fp8 --activations e5m2 --text README.md --windows 4 --ctx 256
    ev default-fp8-bf16act --model resources/models/default --backend cuda --precision fp8 --activations bf16 --text README.md --windows 4 --ctx 256
    ev default-fp8-head --model resources/models/default --backend cuda --precision fp8 --fp8-head --text README.md --windows 4 --ctx 256
    ev default-bf16 --model resources/models/default --backend cuda --precision bf16 --text README.md --windows 4 --ctx 256
    ev default-fp8-kvfp8 --model resources/models/default --backend cuda --precision fp8 --kv-cache fp8 --text README.md --windows 4 --ctx 256
    ev default-bf16-kvfp8 --model resources/models/default --backend cuda --precision bf16 --kv-cache fp8 --text README.md --windows 4 --ctx 256
    ev moe-shared-fp8 --model tests/data/moe-shared --backend cuda --precision fp8 --windows 4 --ctx 64
    # 128x128 block scales (BF16 activations in prefill: cuBLASLt's FP8 GEMM takes per-row scales):
    # against the exact checkpoint, against BF16 weights (with per-channel scales beside it at the
    # same BF16 activations), and against per-channel scales directly.
    ev default-fp8-blk --model resources/models/default --backend cuda --precision fp8 --fp8-scales block128 --text README.md --windows 4 --ctx 256
    ev default-fp8-blk-vs-bf16 --model resources/models/default --backend cuda --precision fp8 --fp8-scales block128 --baseline bf16 --text README.md --windows 4 --ctx 256
    ev default-fp8-bf16act-vs-bf16 --model resources/models/default --backend cuda --precision fp8 --activations bf16 --baseline bf16 --text README.md --windows 4 --ctx 256
    ev default-fp8-blk-vs-channel --model resources/models/default --backend cuda --precision fp8 --fp8-scales block128 --baseline fp8 --text README.md --windows 4 --ctx 256
    ev moe-shared-fp8-blk --model tests/data/moe-shared --backend cuda --precision fp8 --fp8-scales block128 --windows 4 --ctx 64
fi
if [[ $mode == blk ]]; then
    # The selftest's block-scale rows (kernels and end-to-end), then decode/prefill speed with
    # block scales against per-channel ones on both shapes.
    timeout 450 "$CLI" selftest --data tests/data 2>&1 | tee "$OUT/selftest-blk-full.md" |
        grep -E '128x128 blocks|block128|^selftest on|FAIL' | tee "$OUT/blk.md"
    rc=${PIPESTATUS[0]}
    echo "selftest exit code: $rc" | tee -a "$OUT/blk.md"
    for shape in ernie-4.5-0.3b ernie-4.5-21b-a3b; do
        for scales in channel block128; do
            echo "### bench $shape fp8 --fp8-scales $scales" | tee -a "$OUT/blk.md"
            timeout 200 "$CLI" bench --backend cuda --shape "$shape" --precision fp8 --fp8-scales "$scales" \
                --pp 512,2048 --tg 128 --reps 3 --json "$OUT/bench-blk-$shape-$scales.json" ${BENCH_ARGS:-} 2>&1 |
                tee -a "$OUT/blk.md" || rc=1
        done
    done
fi
if [[ $mode == serve ]]; then
    # tools/serve_load_run.sh per shape: server in the background, serve-bench --url, /metrics, SIGTERM.
    for spec in ${SERVE_SPECS:-0.3b-bf16:ernie-4.5-0.3b:bf16 0.3b-fp8:ernie-4.5-0.3b:fp8 21b-a3b-fp8:ernie-4.5-21b-a3b:fp8}; do
        IFS=: read -r name shape prec <<<"$spec"
        echo "### serve --shape $shape --precision $prec" | tee -a "$OUT/serve.md"
        timeout 280 bash tools/serve_load_run.sh "$CLI" "$OUT" "serve-$name" -- --shape "$shape" --precision "$prec" \
            --backend cuda --max-num-seqs 32 --kv-cache-mib 8192 || rc=1
        tail -6 "$OUT/serve-$name.bench.txt" >>"$OUT/serve.md" 2>/dev/null
    done
fi
exit $rc
