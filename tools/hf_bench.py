#!/usr/bin/env python3
"""The slow baseline: HF transformers (BF16, on the GPU) on random weights of the real ERNIE-4.5
shapes, measured the way `expertscope-cli bench --backend cuda` measures (batch 1): prefill of
--pp tokens (one forward, median of --reps after a warm-up) and decode of --tg tokens from an
empty context (forward with the KV cache, one token per step, greedy, median of --reps).
Runs on a GPU machine with torch and transformers, beside the bench (so both figures come from the
same machine and run), e.g. from tools/gpu_run.sh hf:

    python3 tools/hf_bench.py --shape ernie-4.5-0.3b
    python3 tools/hf_bench.py --shape ernie-4.5-21b-a3b --layers 4 --json out.json

Prints a Markdown table (model, backend, test, tok/s, ms/token) like the bench's. The config
fields are those of the real checkpoints' config.json (tests/reference/make_reference.py writes
the same fields for the tiny reference models); weights are drawn on the GPU at construction
(transformers' own initialisation), since only the time is measured.
"""
import argparse
import json
import statistics
import sys
import time

SHAPES = {
    "ernie-4.5-0.3b": dict(model_type="ernie4_5", architectures=["Ernie4_5ForCausalLM"], hidden_size=1024,
                           intermediate_size=3072, num_hidden_layers=18, num_attention_heads=16,
                           num_key_value_heads=2, head_dim=128, vocab_size=103424, tie_word_embeddings=True),
    "ernie-4.5-21b-a3b": dict(model_type="ernie4_5_moe", architectures=["Ernie4_5_MoeForCausalLM"],
                              hidden_size=2560, intermediate_size=12288, num_hidden_layers=28,
                              num_attention_heads=20, num_key_value_heads=4, head_dim=128, vocab_size=103424,
                              tie_word_embeddings=True, moe_num_experts=64, moe_k=6, moe_intermediate_size=1536,
                              moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_end_index=27,
                              moe_layer_interval=1, moe_norm_min=1e-12),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0, help="keep every width, change only the depth")
    ap.add_argument("--pp", type=int, default=2048)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default="", help="also write the results here")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    if not torch.cuda.is_available():
        sys.exit("hf_bench: no CUDA device")
    spec = dict(SHAPES[a.shape])
    if a.layers > 0:
        spec["num_hidden_layers"] = a.layers
        if "moe_layer_end_index" in spec:
            spec["moe_layer_end_index"] = min(spec["moe_layer_end_index"], a.layers - 1)
    model_type = spec.pop("model_type")
    cfg = AutoConfig.for_model(model_type, max_position_embeddings=max(4096, a.pp + a.tg + 1), rms_norm_eps=1e-5,
                               rope_theta=500000.0, hidden_act="silu", use_bias=False, use_cache=True, **spec)
    t0 = time.time()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    torch.cuda.synchronize()
    build_s = time.time() - t0
    what = a.shape + (f" ({a.layers} layers)" if a.layers > 0 else "")
    backend = f"HF transformers {transformers.__version__} (torch {torch.__version__}, bf16, {model.config._attn_implementation})"
    gen = torch.Generator(device="cuda").manual_seed(42)

    def ids(n):
        return torch.randint(3, cfg.vocab_size, (1, n), device="cuda", generator=gen)

    results = []
    with torch.no_grad():
        # Prefill: one forward over pp tokens.
        x = ids(a.pp)
        model(x, use_cache=False)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            model(x, use_cache=False)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        results.append({"test": f"pp{a.pp}", "tokens_per_s": a.pp / t, "seconds": t})

        # Decode from an empty context: tg steps of one token with the KV cache (the first step
        # is the one-token "prompt").
        def decode():
            cache = None
            tok = ids(1)
            for _ in range(a.tg):
                out = model(tok, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                tok = out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()

        decode()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            decode()
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        results.append({"test": f"tg{a.tg}", "tokens_per_s": a.tg / t, "seconds": t})

    print(f"\n| model | backend | test | tok/s | ms/token |\n|---|---|---|---:|---:|")
    for r in results:
        n = a.pp if r["test"].startswith("pp") else a.tg
        print(f"| {what} | {backend} | {r['test']} | {r['tokens_per_s']:.1f} | {1000 * r['seconds'] / n:.3f} |")
    print(f"\nweights built on the GPU in {build_s:.1f} s; GPU memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": what, "backend": backend, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
