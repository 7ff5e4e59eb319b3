// How a backend stores weights and KV and what its FP8 linears take: the precision choices
// every backend and the loader share (model_load_params carries them; the CUDA backend's params
// and the twin model read them).
#pragma once

#include "engine/core/scale_layout.h"

namespace es {

// Weights in device memory. The CPU backend computes in fp32 from the checkpoint's values, or
// from weights rounded the same way when model_load_params::emulate_precision_on_cpu is set.
// fp8: every linear but the head in E4M3 with one fp32 scale per output channel, quantized at
// load; embeddings, norms and the head stay BF16, the router fp32 (fp8_policy below selects the
// head and the attention output projections on the CUDA backend).
enum class weight_precision { bf16, fp8 };

// The activations into FP8 linears of prefill-sized steps (more than 8 tokens) on the CUDA
// backend: quantized per token (one fp32 scale per token) to FP8 E4M3 or E5M2 for cuBLASLt's FP8
// GEMM, or kept BF16 (the FP8 weights then dequantized to BF16 for a BF16 GEMM, every step).
// Decode-sized steps (GEMV kernels) always take BF16 activations; BF16 weights ignore this.
enum class activation_format { e4m3, e5m2, bf16 };
inline const char *activation_format_name(activation_format f) {
    return f == activation_format::e4m3 ? "e4m3" : f == activation_format::e5m2 ? "e5m2" : "bf16";
}

// The element type of the CUDA backend's paged KV cache: bf16, or fp8 (E4M3 with a per-tensor
// scale of 1.0, as vLLM's kv_cache_dtype=fp8 without calibration), which halves KV memory — twice
// the context or sequences in the same budget — for a rounding of every cached key and value to
// 3 mantissa bits. The CPU backend keeps fp32 KV and refuses fp8.
enum class kv_cache_dtype { bf16, fp8 };
inline const char *kv_cache_dtype_name(kv_cache_dtype d) {
    return d == kv_cache_dtype::bf16 ? "bf16" : "fp8";
}

// The per-layer precision policy of FP8 weights: which linears besides the q/k/v projections and
// the MLPs (dense, shared and routed experts: always FP8) take E4M3. The router is always fp32,
// embeddings and norms BF16.
// `scales`: where the fp32 scales of every FP8 matrix sit (core/scale_layout.h): one
// per output channel (the default), or one per 128×128 block (as DeepSeek-V3 ships its FP8
// weights; an expert's matrix has its own block grid). Block scales need every FP8 matrix's
// k to be a multiple of 16 (the kernels' 16-byte vectors) and take the dequantize + BF16 GEMM
// path for prefill-sized steps (cuBLASLt's FP8 GEMM takes per-row scales only).
struct fp8_policy {
    bool attn_out = true; // the attention output projection (o_proj) of every layer
    bool head = false;    // the LM head (a quantized copy when tied to the embeddings)
    scale_layout scales = scale_layout::channel;
    bool is_default() const { return attn_out && !head && scales == scale_layout::channel; }
};

} // namespace es
