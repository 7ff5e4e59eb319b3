#!/usr/bin/env python3
"""Writes one random-weight ERNIE-4.5 dense checkpoint twice, with the same BF16 bits: as a hub
folder (config.json, model.safetensors, the test tokenizer) that expertscope-cli loads, and as a
BF16 GGUF file that llama.cpp loads (and llama-quantize turns into Q8_0), so that both engines
are measured on the same weights. Used by tools/bench_cpu_vs_llamacpp.sh:

    python3 tools/make_random_ernie.py --out build/llama.cpp/ernie-4.5-0.3b-random

Needs numpy only: the GGUF file (version 3) is written here rather than through llama.cpp's
gguf-py and convert_hf_to_gguf.py, which need PyYAML and torch. Its keys and tensor names are
those convert_hf_to_gguf.py writes for Ernie4_5ForCausalLM; the vocabulary is the test
tokenizer's pieces (tests/data/tokenizer) padded with unused [PADn] pieces to vocab_size, as the
converter pads a SentencePiece vocabulary. Weights: N(0, 0.02) matrices and embeddings, norms
1 + N(0, 0.02), each rounded to BF16 (nearest even), from a fixed seed.
"""
import argparse
import json
import shutil
import struct
from pathlib import Path

import numpy as np

SHAPES = {
    "ernie-4.5-0.3b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=18, num_attention_heads=16,
                           num_key_value_heads=2, head_dim=128, vocab_size=103424),
}

REPO = Path(__file__).resolve().parent.parent
TOKENIZER_DIR = REPO / "tests" / "data" / "tokenizer"

# GGUF value types and tensor types (ggml.h, gguf.h).
GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 7, 8, 9
GGML_TYPE_F32, GGML_TYPE_BF16 = 0, 30
LLAMA_FTYPE_MOSTLY_BF16 = 32
GGUF_ALIGNMENT = 32


def config_for(shape, layers):
    spec = dict(SHAPES[shape])
    if layers > 0:
        spec["num_hidden_layers"] = layers
    return dict(architectures=["Ernie4_5ForCausalLM"], model_type="ernie4_5", max_position_embeddings=131072,
                rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu", use_bias=False, tie_word_embeddings=True,
                bos_token_id=1, eos_token_id=2, pad_token_id=0, torch_dtype="bfloat16", use_cache=True, **spec)


def tensors_for(c):
    """(HF name, GGUF name, [rows, cols], is_norm) in checkpoint order; rows = out features."""
    h, hd, i_ff = c["hidden_size"], c["head_dim"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", "token_embd.weight", [c["vocab_size"], h], False)]
    for i in range(c["num_hidden_layers"]):
        hf, gg = f"model.layers.{i}.", f"blk.{i}."
        out += [(hf + "input_layernorm.weight", gg + "attn_norm.weight", [h], True),
                (hf + "self_attn.q_proj.weight", gg + "attn_q.weight", [q, h], False),
                (hf + "self_attn.k_proj.weight", gg + "attn_k.weight", [kv, h], False),
                (hf + "self_attn.v_proj.weight", gg + "attn_v.weight", [kv, h], False),
                (hf + "self_attn.o_proj.weight", gg + "attn_output.weight", [h, q], False),
                (hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", [h], True),
                (hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", [i_ff, h], False),
                (hf + "mlp.up_proj.weight", gg + "ffn_up.weight", [i_ff, h], False),
                (hf + "mlp.down_proj.weight", gg + "ffn_down.weight", [h, i_ff], False)]
    out.append(("model.norm.weight", "output_norm.weight", [h], True))
    return out


def to_bf16(x):
    """float32 array -> uint16 BF16 bits, rounded to nearest even (no NaN among random normals)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def read_sentencepiece(path):
    """(piece bytes, score, type) of a SentencePiece ModelProto: field 1 holds the pieces, each with
    piece (1, string), score (2, float) and type (3, enum: NORMAL 1 … BYTE 6, as GGUF token types)."""
    data = path.read_bytes()

    def varint(buf, pos):
        v = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v, pos

    def fields(buf):
        pos = 0
        while pos < len(buf):
            key, pos = varint(buf, pos)
            num, wire = key >> 3, key & 7
            if wire == 0:
                val, pos = varint(buf, pos)
            elif wire == 1:
                val, pos = buf[pos:pos + 8], pos + 8
            elif wire == 2:
                n, pos = varint(buf, pos)
                val, pos = buf[pos:pos + n], pos + n
            elif wire == 5:
                val, pos = buf[pos:pos + 4], pos + 4
            else:
                raise ValueError(f"{path}: unsupported protobuf wire type {wire}")
            yield num, val

    pieces = []
    for num, val in fields(data):
        if num != 1:
            continue
        piece, score, kind = b"", 0.0, 1
        for f, v in fields(val):
            if f == 1:
                piece = bytes(v)
            elif f == 2:
                score = struct.unpack("<f", v)[0]
            elif f == 3:
                kind = v
        pieces.append((piece, score, kind))
    if not pieces:
        raise ValueError(f"{path}: no SentencePiece pieces")
    return pieces


class GgufWriter:
    """GGUF version 3: header, key-value pairs, tensor infos, padding, then the aligned tensor data."""

    def __init__(self):
        self.kv = bytearray()
        self.n_kv = 0
        self.infos = []  # (name, dims innermost first, ggml type, nbytes)

    @staticmethod
    def _str(s):
        b = s if isinstance(s, bytes) else s.encode()
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        self.kv += self._str(key) + struct.pack("<I", vtype)
        if vtype == GGUF_STRING:
            self.kv += self._str(value)
        else:
            self.kv += struct.pack({GGUF_UINT32: "<I", GGUF_INT32: "<i", GGUF_FLOAT32: "<f", GGUF_BOOL: "<?"}[vtype],
                                   value)
        self.n_kv += 1

    def add_array(self, key, etype, values):
        self.kv += self._str(key) + struct.pack("<IIQ", GGUF_ARRAY, etype, len(values))
        if etype == GGUF_STRING:
            self.kv += b"".join(self._str(v) for v in values)
        else:
            self.kv += np.asarray(values, dtype={GGUF_FLOAT32: "<f4", GGUF_INT32: "<i4"}[etype]).tobytes()
        self.n_kv += 1

    def add_tensor_info(self, name, shape, ggml_type, nbytes):
        self.infos.append((name, list(reversed(shape)), ggml_type, nbytes))

    def header(self):
        out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.infos), self.n_kv)) + self.kv
        offset = 0
        for name, dims, ggml_type, nbytes in self.infos:
            out += self._str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            out += struct.pack("<IQ", ggml_type, offset)
            offset += -(-nbytes // GGUF_ALIGNMENT) * GGUF_ALIGNMENT
        out += b"\0" * (-len(out) % GGUF_ALIGNMENT)
        return bytes(out)


def gguf_metadata(w, c, pieces):
    arch = "ernie4_5"
    w.add("general.architecture", GGUF_STRING, arch)
    w.add("general.name", GGUF_STRING, "ERNIE-4.5 random weights")
    w.add("general.file_type", GGUF_UINT32, LLAMA_FTYPE_MOSTLY_BF16)
    w.add(f"{arch}.context_length", GGUF_UINT32, c["max_position_embeddings"])
    w.add(f"{arch}.embedding_length", GGUF_UINT32, c["hidden_size"])
    w.add(f"{arch}.block_count", GGUF_UINT32, c["num_hidden_layers"])
    w.add(f"{arch}.feed_forward_length", GGUF_UINT32, c["intermediate_size"])
    w.add(f"{arch}.attention.head_count", GGUF_UINT32, c["num_attention_heads"])
    w.add(f"{arch}.attention.head_count_kv", GGUF_UINT32, c["num_key_value_heads"])
    w.add(f"{arch}.attention.key_length", GGUF_UINT32, c["head_dim"])
    w.add(f"{arch}.attention.value_length", GGUF_UINT32, c["head_dim"])
    w.add(f"{arch}.rope.freq_base", GGUF_FLOAT32, c["rope_theta"])
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", GGUF_FLOAT32, c["rms_norm_eps"])
    w.add(f"{arch}.vocab_size", GGUF_UINT32, c["vocab_size"])
    n_pad = c["vocab_size"] - len(pieces)
    if n_pad < 0:
        raise ValueError(f"the tokenizer has {len(pieces)} pieces, more than vocab_size {c['vocab_size']}")
    unused = 5  # SentencePiece and GGUF token type UNUSED
    pieces = pieces + [(f"[PAD{len(pieces) + i}]".encode(), -1000.0, unused) for i in range(n_pad)]
    w.add("tokenizer.ggml.model", GGUF_STRING, "llama")
    w.add_array("tokenizer.ggml.tokens", GGUF_STRING, [p for p, _, _ in pieces])
    w.add_array("tokenizer.ggml.scores", GGUF_FLOAT32, [s for _, s, _ in pieces])
    w.add_array("tokenizer.ggml.token_type", GGUF_INT32, [t for _, _, t in pieces])
    w.add("tokenizer.ggml.bos_token_id", GGUF_UINT32, c["bos_token_id"])
    w.add("tokenizer.ggml.eos_token_id", GGUF_UINT32, c["eos_token_id"])
    w.add("tokenizer.ggml.unknown_token_id", GGUF_UINT32, 0)
    w.add("tokenizer.ggml.padding_token_id", GGUF_UINT32, c["pad_token_id"])
    w.add("tokenizer.ggml.add_bos_token", GGUF_BOOL, False)
    w.add("tokenizer.ggml.add_eos_token", GGUF_BOOL, False)
    w.add("tokenizer.ggml.add_space_prefix", GGUF_BOOL, False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder to write (config.json, model.safetensors, model-bf16.gguf)")
    ap.add_argument("--shape", default="ernie-4.5-0.3b", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0, help="keep every width, change only the depth")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    c = config_for(a.shape, a.layers)
    tensors = tensors_for(c)

    st_header, offset = {"__metadata__": {"format": "pt"}}, 0
    gguf = GgufWriter()
    gguf_metadata(gguf, c, read_sentencepiece(TOKENIZER_DIR / "tokenizer.model"))
    for hf_name, gguf_name, shape, is_norm in tensors:
        n = int(np.prod(shape))
        if is_norm:  # norms stay F32 in GGUF, as convert_hf_to_gguf.py keeps 1-D tensors
            gguf.add_tensor_info(gguf_name, shape, GGML_TYPE_F32, 4 * n)
        else:
            gguf.add_tensor_info(gguf_name, shape, GGML_TYPE_BF16, 2 * n)
        st_header[hf_name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    st_json = json.dumps(st_header, separators=(",", ":")).encode()
    st_json += b" " * (-len(st_json) % 8)

    rng = np.random.default_rng(a.seed)
    gguf_path, st_path = out / "model-bf16.gguf", out / "model.safetensors"
    with open(st_path, "wb") as st, open(gguf_path, "wb") as gg:
        st.write(struct.pack("<Q", len(st_json)) + st_json)
        gg.write(gguf.header())
        for hf_name, gguf_name, shape, is_norm in tensors:
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            if is_norm:
                x += np.float32(1.0)
            bits = to_bf16(x)
            st.write(bits.tobytes())
            if is_norm:  # the BF16 value widened: the same number in both files
                data = (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).tobytes()
            else:
                data = bits.tobytes()
            gg.write(data + b"\0" * (-len(data) % GGUF_ALIGNMENT))

    (out / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    for f in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(TOKENIZER_DIR / f, out / f)
    print(f"wrote {st_path} and {gguf_path} ({offset / 1e6:.0f} MB of BF16 weights each)")


if __name__ == "__main__":
    main()
