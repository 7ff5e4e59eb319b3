#!/usr/bin/env python3
"""Renames transformers 5's in-memory name of the router correction bias
(model.layers.N.mlp.gate.moe_statics.e_score_correction_bias) to the hub's
(model.layers.N.mlp.moe_statics.e_score_correction_bias) in a safetensors header, in place.
Tensor data is untouched (offsets are relative to the data section). stdlib only.
train_default.py writes the hub name directly; this fixed the first committed file."""
import json, re, struct, sys

path = sys.argv[1]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h2 = {re.sub(r"\.mlp\.gate\.moe_statics\.", ".mlp.moe_statics.", k): v for k, v in h.items()}
hb = json.dumps(h2, separators=(",", ":")).encode()
hb += b" " * ((8 - len(hb) % 8) % 8)
open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
print(f"{path}: {sum(k != k2 for k, k2 in zip(sorted(h), sorted(h2)))} names changed")
