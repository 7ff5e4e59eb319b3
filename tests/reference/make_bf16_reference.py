#!/usr/bin/env python3
"""HF transformers' own bf16 forward on every reference checkpoint: the yardstick of the BF16 path.

Runs where torch and transformers are installed:
    python3 tests/reference/make_bf16_reference.py [--data tests/data] [--device cuda|cpu]
For every checkpoint folder under --data with a reference.json (tests/reference/make_reference.py)
it loads the model with dtype=bfloat16 and eager attention (the router stays fp32, as HF keeps it),
runs the reference prompt teacher-forced and writes
  ref_logits_hf_bf16.npy   float32 [n_ids, vocab]
  reference_bf16.json      device, versions, and the NMSE against ref_logits.npy (HF fp32) overall
                           and at the worst position
so that the BF16 path's error against fp32 can be set beside HF's own (ARCHITECTURE.md, "Fidelity of
the BF16 path"; tests/kernels/test_twin_model.cpp prints both).
"""
import argparse, json, os, sys
import numpy as np


def nmse(a, b):
    return float(np.mean((a.astype(np.float64) - b) ** 2) / np.mean(b.astype(np.float64) ** 2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data"))
    ap.add_argument("--device", default="")
    args = ap.parse_args()
    import torch, transformers
    from transformers import AutoModelForCausalLM
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    done = 0
    for name in sorted(os.listdir(args.data)):
        folder = os.path.join(args.data, name)
        ref_path, fp32_path = os.path.join(folder, "reference.json"), os.path.join(folder, "ref_logits.npy")
        if not (os.path.isfile(ref_path) and os.path.isfile(fp32_path)):
            continue
        prompt = json.load(open(ref_path))["prompt_ids"]
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="eager")
        model = model.to(device).eval()
        with torch.no_grad():
            logits = model(torch.tensor([prompt], device=device)).logits[0].float().cpu().numpy()
        fp32 = np.load(fp32_path)
        per_pos = [nmse(logits[i], fp32[i]) for i in range(fp32.shape[0])]
        np.save(os.path.join(folder, "ref_logits_hf_bf16.npy"), logits.astype(np.float32))
        info = {"device": device, "dtype": "bfloat16", "attn_implementation": "eager",
                "nmse_vs_fp32": nmse(logits, fp32), "worst_position_nmse_vs_fp32": max(per_pos),
                "worst_position": int(np.argmax(per_pos)),
                "transformers": transformers.__version__, "torch": torch.__version__}
        with open(os.path.join(folder, "reference_bf16.json"), "w") as f:
            json.dump(info, f, indent=2)
        print(f"{name}: HF bf16 vs fp32 NMSE {info['nmse_vs_fp32']:.3e}, worst position "
              f"{info['worst_position']} {info['worst_position_nmse_vs_fp32']:.3e}")
        done += 1
    if done == 0:
        raise SystemExit("no reference checkpoint found under " + args.data)


if __name__ == "__main__":
    sys.exit(main())
