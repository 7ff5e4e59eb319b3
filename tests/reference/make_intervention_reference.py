#!/usr/bin/env python3
"""HF transformers' logits under expert interventions, for every MoE reference checkpoint.

Runs where torch and transformers are installed (a CPU is enough):
    python3 tests/reference/make_intervention_reference.py [--data tests/data]
For every checkpoint folder under --data whose config is an ERNIE-4.5 MoE and which has a
reference.json (tests/reference/make_reference.py), it loads the model in float32 with eager
attention, replaces each sparse MoE block's forward by one that routes with the intervention and
then runs the block's own modules (the experts, the shared experts: HF's code), and writes
  interventions.json               the cases: the CLI's option texts and the versions used
  ref_logits_interventions.npy     float32 [n_cases, n_ids, vocab], teacher-forced on the
                                   reference prompt
The semantics are engine/backend/routing_intervention.h's: a disabled expert's router logit is
-inf (probability 0, never selected), forced experts are selected first and the rest of the k
places go to the best others by p + s * e_score_correction_bias, and the selected weights are p
normalised over the selected set with HF's clamp to moe_norm_min.
Before anything is written the patched forward with no intervention must reproduce the
unpatched model's logits (NMSE < 1e-10), which proves it routes exactly as HF does.
"""
import argparse, json, os, sys
import numpy as np


def parse_refs(text, moe_layers):
    """'L:E,*:E' -> {layer: [experts in order]} over the MoE layers."""
    out = {l: [] for l in moe_layers}
    for item in filter(None, (s.strip() for s in text.split(","))):
        l, e = item.split(":")
        for layer in (moe_layers if l.strip() == "*" else [int(l)]):
            if int(e) not in out[layer]:
                out[layer].append(int(e))
    return out


def cases_for(cfg, moe_layers):
    """Four interventions that touch every rule, written as the CLI's options."""
    first, last, k, n = moe_layers[0], moe_layers[-1], cfg["moe_k"], cfg["moe_num_experts"]
    return [
        {"disable": f"*:0,{first}:1", "force": "", "top_k": 0, "bias_scale": 1.0},
        {"disable": f"{last}:2", "force": f"{first}:3", "top_k": 0, "bias_scale": 0.0},
        {"disable": "", "force": f"*:{n - 1}", "top_k": k + 1, "bias_scale": 2.5},
        {"disable": f"*:{n - 2}", "force": "", "top_k": 1, "bias_scale": 1.0},
    ]


def find_param(module, suffix):
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if name.endswith(suffix):
            return t
    raise SystemExit(f"no parameter ending in {suffix!r} in {type(module).__name__}")


def patch_block(block, layer, state, norm_min):
    """Replaces block.forward; state['iv'] is None or (disabled, forced, top_k, bias_scale)."""
    import torch
    import torch.nn.functional as F
    gate_w = find_param(block, "gate.weight")
    bias = find_param(block, "e_score_correction_bias").reshape(-1).float()
    k_model = int(getattr(block, "top_k", None) or state["moe_k"])
    orig = block.forward
    returns_tuple = {}

    def run_experts(x, sel, w):
        if isinstance(block.experts, torch.nn.ModuleList):
            out = torch.zeros_like(x)
            for e in range(len(block.experts)):
                tok, slot = torch.where(sel == e)
                if tok.numel() == 0:
                    continue
                out.index_add_(0, tok, (block.experts[e](x[tok]) * w[tok, slot, None]).to(x.dtype))
            return out
        return block.experts(x, sel, w)  # fused experts: (hidden, top_k_index, top_k_weights)

    def forward(hidden_states):
        if "tuple" not in returns_tuple:
            returns_tuple["tuple"] = isinstance(orig(hidden_states), tuple)
        b, s, h = hidden_states.shape
        x = hidden_states.reshape(-1, h)
        iv = state["iv"]
        disabled = iv["disabled"][layer] if iv else []
        forced = iv["forced"][layer] if iv else []
        k = (iv["top_k"] or k_model) if iv else k_model
        scale = iv["bias_scale"] if iv else 1.0
        logits = x.float() @ gate_w.float().t()
        if disabled:
            logits[:, disabled] = -float("inf")
        p = F.softmax(logits, dim=1, dtype=torch.float)
        score = p + bias if scale == 1.0 else p + scale * bias
        if disabled:
            score[:, disabled] = -float("inf")
        if forced:
            score[:, forced] = float("inf")
        _, sel = torch.topk(score, k, dim=-1)
        w = torch.gather(p, -1, sel)
        w = (w / torch.clamp(w.sum(dim=-1, keepdim=True), min=norm_min)).to(x.dtype)
        out = run_experts(x, sel, w)
        if getattr(block, "shared_experts", None) is not None:
            out = out + block.shared_experts(x)
        out = out.reshape(b, s, h)
        return (out, logits) if returns_tuple["tuple"] else out

    block.forward = forward


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data"))
    args = ap.parse_args()
    import torch, transformers
    from transformers import AutoModelForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    done = 0
    for name in sorted(os.listdir(args.data)):
        folder = os.path.join(args.data, name)
        cfg_path, ref_path = os.path.join(folder, "config.json"), os.path.join(folder, "reference.json")
        if not (os.path.isfile(cfg_path) and os.path.isfile(ref_path)):
            continue
        cfg = json.load(open(cfg_path))
        if cfg.get("model_type") != "ernie4_5_moe":
            continue
        prompt = json.load(open(ref_path))["prompt_ids"]
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        model = model.to(device).eval()
        layers = model.model.layers
        moe_layers = [i for i, l in enumerate(layers) if hasattr(l.mlp, "experts")]
        state = {"iv": None, "moe_k": cfg["moe_k"]}
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            plain = model(ids).logits[0].float().cpu().numpy()
            for i in moe_layers:
                patch_block(layers[i].mlp, i, state, float(cfg.get("moe_norm_min", 1e-12)))
            same = model(ids).logits[0].float().cpu().numpy()
            err = float(np.mean((same - plain) ** 2) / np.mean(plain ** 2))
            if not err < 1e-10:
                raise SystemExit(f"{name}: the patched MoE forward does not reproduce HF's (NMSE {err:.3e})")
            cases, out = cases_for(cfg, moe_layers), []
            for c in cases:
                state["iv"] = {"disabled": parse_refs(c["disable"], moe_layers),
                               "forced": parse_refs(c["force"], moe_layers),
                               "top_k": c["top_k"], "bias_scale": c["bias_scale"]}
                out.append(model(ids).logits[0].float().cpu().numpy())
                state["iv"] = None
        arr = np.stack(out).astype(np.float32)
        np.save(os.path.join(folder, "ref_logits_interventions.npy"), arr)
        with open(os.path.join(folder, "interventions.json"), "w") as f:
            json.dump({"cases": cases, "moe_layers": moe_layers, "patched_vs_plain_nmse": err,
                       "device": device, "dtype": "float32", "transformers": transformers.__version__,
                       "torch": torch.__version__}, f, indent=2)
        print(f"{name}: {len(cases)} interventions, logits {list(arr.shape)}, patched vs plain NMSE {err:.2e}")
        done += 1
    if done == 0:
        raise SystemExit("no MoE reference checkpoint found under " + args.data)


if __name__ == "__main__":
    sys.exit(main())
