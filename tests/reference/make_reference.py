#!/usr/bin/env python3
"""Builds the reference checkpoints under tests/data and their HF transformers outputs.

Runs on the GPU machine (torch + transformers + safetensors installed there):
    python3 tests/reference/make_reference.py --out DIR
For every spec below it
  1. draws random weights (numpy, fixed seed), rounds them to bf16 (router/bias as the spec says),
  2. writes the hub layout: config.json, model.safetensors (or shards + index), generation_config,
     and the test tokenizer files from tests/data/tokenizer,
  3. loads the folder back with from_pretrained(float32) and fails unless no key is missing,
     unexpected or mismatched, proving the layout,
  4. writes ref_logits.npy (teacher-forced float32 logits [n_ids, vocab]) and reference.json
     (prompt ids, greedy continuation, margins, versions).
Seeds are searched upwards until every argmax margin is comfortable (>= 1e-3), so that float32
rounding differences between engines cannot flip a greedy token.
"""
import argparse, json, os, shutil, sys
import numpy as np

SPECS = [
    # Dense, 0.3B-style (head_dim != hidden/heads, GQA 4/2, tied).
    dict(name="dense", arch="Ernie4_5ForCausalLM", model_type="ernie4_5",
         hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         head_dim=32, intermediate_size=160, vocab_size=3000, tie_word_embeddings=True),
    # Dense with the older architecture name, rope_parameters, untied head, MQA, odd vocab.
    dict(name="dense-untied", arch="Ernie4_5_ForCausalLM", model_type="ernie4_5",
         hidden_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
         head_dim=24, intermediate_size=100, vocab_size=3001, tie_word_embeddings=False,
         rope_style="parameters", rope_theta=10000.0),
    # MoE 21B-A3B-style: dense first layer, 8 experts top-2, one shared expert, fp32 router.
    dict(name="moe-shared", arch="Ernie4_5_MoeForCausalLM", model_type="ernie4_5_moe",
         hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
         head_dim=16, intermediate_size=128, vocab_size=3000, tie_word_embeddings=True,
         moe_num_experts=8, moe_k=2, moe_intermediate_size=32, moe_num_shared_experts=1,
         moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1,
         router_dtype="f32", bias_scale=0.02),
    # MoE odd shapes: 6 experts top-3, interval 2 with an end index, untied head, bf16 router,
    # a strong correction bias, no shared experts, head_dim != hidden/heads.
    dict(name="moe-odd", arch="Ernie4_5_MoeForCausalLM", model_type="ernie4_5_moe",
         hidden_size=40, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2,
         head_dim=12, intermediate_size=72, vocab_size=3000, tie_word_embeddings=False,
         moe_num_experts=6, moe_k=3, moe_intermediate_size=24, moe_num_shared_experts=0,
         moe_layer_start_index=1, moe_layer_end_index=4, moe_layer_interval=2,
         router_dtype="bf16", bias_scale=0.3),
    # MoE sharded: two shards + index, 2 shared experts (one MLP twice as wide), 12 experts top-4.
    dict(name="moe-sharded", arch="Ernie4_5_MoeForCausalLM", model_type="ernie4_5_moe",
         hidden_size=32, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=2,
         head_dim=16, intermediate_size=96, vocab_size=3000, tie_word_embeddings=True,
         moe_num_experts=12, moe_k=4, moe_intermediate_size=16, moe_num_shared_experts=2,
         moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1,
         router_dtype="f32", bias_scale=0.05, shards=2),
]

N_PROMPT = 24
N_NEW = 16
MIN_MARGIN = 1e-3


def bf16_round(a):
    """Round float32 to the nearest bf16 value (ties to even), returned as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def is_moe_layer(spec, il):
    if "moe_num_experts" not in spec:
        return False
    end = spec["moe_layer_end_index"]
    end = spec["num_hidden_layers"] - 1 if end == -1 else end
    return (il + 1) % spec["moe_layer_interval"] == 0 and spec["moe_layer_start_index"] <= il <= end


def make_weights(spec, rng):
    H, V = spec["hidden_size"], spec["vocab_size"]
    nh, nkv, hd = spec["num_attention_heads"], spec["num_key_value_heads"], spec["head_dim"]
    w = {}  # name -> (float32 array, dtype tag)

    def lin(out_f, in_f, gain=1.0):
        return rng.standard_normal((out_f, in_f)).astype(np.float32) * (gain / np.sqrt(in_f))

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w["model.embed_tokens.weight"] = (rng.standard_normal((V, H)).astype(np.float32) * 0.5, "bf16")
    for il in range(spec["num_hidden_layers"]):
        p = f"model.layers.{il}."
        w[p + "input_layernorm.weight"] = (norm(H), "bf16")
        w[p + "post_attention_layernorm.weight"] = (norm(H), "bf16")
        w[p + "self_attn.q_proj.weight"] = (lin(nh * hd, H, 1.5), "bf16")
        w[p + "self_attn.k_proj.weight"] = (lin(nkv * hd, H, 1.5), "bf16")
        w[p + "self_attn.v_proj.weight"] = (lin(nkv * hd, H), "bf16")
        w[p + "self_attn.o_proj.weight"] = (lin(H, nh * hd), "bf16")
        if is_moe_layer(spec, il):
            E, F = spec["moe_num_experts"], spec["moe_intermediate_size"]
            w[p + "mlp.gate.weight"] = (lin(E, H, 2.0), spec["router_dtype"])
            bias = rng.uniform(-1.0, 1.0, (1, E)).astype(np.float32) * spec["bias_scale"]
            w[p + "mlp.moe_statics.e_score_correction_bias"] = (bias, "f32")
            for e in range(E):
                q = p + f"mlp.experts.{e}."
                w[q + "gate_proj.weight"] = (lin(F, H), "bf16")
                w[q + "up_proj.weight"] = (lin(F, H), "bf16")
                w[q + "down_proj.weight"] = (lin(H, F), "bf16")
            S = spec["moe_num_shared_experts"]
            if S > 0:
                q = p + "mlp.shared_experts."
                w[q + "gate_proj.weight"] = (lin(F * S, H), "bf16")
                w[q + "up_proj.weight"] = (lin(F * S, H), "bf16")
                w[q + "down_proj.weight"] = (lin(H, F * S), "bf16")
        else:
            F = spec["intermediate_size"]
            w[p + "mlp.gate_proj.weight"] = (lin(F, H), "bf16")
            w[p + "mlp.up_proj.weight"] = (lin(F, H), "bf16")
            w[p + "mlp.down_proj.weight"] = (lin(H, F), "bf16")
    w["model.norm.weight"] = (norm(H), "bf16")
    if not spec["tie_word_embeddings"]:
        w["lm_head.weight"] = (rng.standard_normal((V, H)).astype(np.float32) * 0.5, "bf16")
    return w


def make_config(spec):
    c = {
        "architectures": [spec["arch"]],
        "model_type": spec["model_type"],
        "hidden_size": spec["hidden_size"],
        "intermediate_size": spec["intermediate_size"],
        "num_hidden_layers": spec["num_hidden_layers"],
        "num_attention_heads": spec["num_attention_heads"],
        "num_key_value_heads": spec["num_key_value_heads"],
        "head_dim": spec["head_dim"],
        "vocab_size": spec["vocab_size"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "use_bias": False,
        "tie_word_embeddings": spec["tie_word_embeddings"],
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }
    theta = spec.get("rope_theta", 500000.0)
    if spec.get("rope_style") == "parameters":
        c["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    else:
        c["rope_theta"] = theta
    for k in ("moe_num_experts", "moe_k", "moe_intermediate_size", "moe_num_shared_experts",
              "moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval"):
        if k in spec:
            c[k] = spec[k]
    if "moe_num_experts" in spec:
        c["moe_norm_min"] = 1e-12
    return c


def write_checkpoint(spec, weights, folder, repo_root):
    import torch
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    tensors = {}
    for name, (arr, tag) in weights.items():
        t = torch.from_numpy(np.ascontiguousarray(arr))
        tensors[name] = t.to(torch.bfloat16) if tag == "bf16" else t.to(torch.float32)
    names = sorted(tensors)
    shards = spec.get("shards", 1)
    if shards == 1:
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    else:
        weight_map, per = {}, (len(names) + shards - 1) // shards
        total = 0
        for s in range(shards):
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[s * per:(s + 1) * per]}
            save_file(part, os.path.join(folder, fname), metadata={"format": "pt"})
            for n, t in part.items():
                weight_map[n] = fname
                total += t.numel() * t.element_size()
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(make_config(spec), f, indent=2)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": True,
                   "temperature": 0.8, "top_p": 0.8, "repetition_penalty": 1.0}, f, indent=2)
    tok_dir = os.path.join(repo_root, "tests", "data", "tokenizer")
    for fn in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(tok_dir, fn)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(folder, fn))
    # Round-tripped values (bf16 where stored as bf16) for the HF model.
    return {n: (bf16_round(a) if tag == "bf16" else a) for n, (a, tag) in weights.items()}


def run_hf(folder, prompt, device):
    import torch
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, output_loading_info=True, attn_implementation="eager")
    problems = {k: list(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if problems:
        raise SystemExit(f"{folder}: layout not proven by from_pretrained: {problems}")
    model = model.to(device).eval()
    with torch.no_grad():
        ids = torch.tensor([prompt], device=device)
        logits = model(ids).logits[0].float().cpu().numpy()
        seq, greedy, margins = list(prompt), [], []
        for _ in range(N_NEW):
            out = model(torch.tensor([seq], device=device)).logits[0, -1].float().cpu().numpy()
            top2 = np.sort(out)[-2:]
            margins.append(float(top2[1] - top2[0]))
            nxt = int(np.argmax(out))
            greedy.append(nxt)
            seq.append(nxt)
    tf_sorted = np.sort(logits, axis=-1)
    tf_margin = float(np.min(tf_sorted[:, -1] - tf_sorted[:, -2]))
    return logits, greedy, min(margins), tf_margin, type(model).__name__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="folder that receives one sub-folder per checkpoint")
    ap.add_argument("--only", default="", help="comma-separated spec names")
    args = ap.parse_args()
    import torch, transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    only = set(filter(None, args.only.split(",")))
    for spec in SPECS:
        if only and spec["name"] not in only:
            continue
        folder = os.path.join(args.out, spec["name"])
        for seed in range(1000, 1100):
            rng = np.random.default_rng(seed)
            weights = make_weights(spec, rng)
            prompt = [int(x) for x in rng.integers(3, 3000, N_PROMPT)]
            shutil.rmtree(folder, ignore_errors=True)
            write_checkpoint(spec, weights, folder, repo_root)
            logits, greedy, gmargin, tmargin, cls = run_hf(folder, prompt, device)
            if gmargin >= MIN_MARGIN and tmargin >= MIN_MARGIN:
                break
            print(f"{spec['name']}: seed {seed} margin {gmargin:.2e}/{tmargin:.2e} too small, next seed")
        np.save(os.path.join(folder, "ref_logits.npy"), logits.astype(np.float32))
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump({"seed": seed, "prompt_ids": prompt, "greedy_ids": greedy, "n_new": N_NEW,
                       "min_greedy_margin": gmargin, "min_teacher_forced_margin": tmargin,
                       "hf_class": cls, "device": device, "dtype": "float32",
                       "transformers": transformers.__version__, "torch": torch.__version__},
                      f, indent=2)
        print(f"{spec['name']}: seed {seed} {cls} logits {logits.shape} greedy {greedy} "
              f"margins {gmargin:.3e}/{tmargin:.3e}")


if __name__ == "__main__":
    main()
