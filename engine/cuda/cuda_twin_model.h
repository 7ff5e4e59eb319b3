// The CUDA backend's forward pass emulated on the CPU with the kernels' CPU twins (kernels/*.cpp):
// the same BF16 roundings of activations, the same FP8 quantization of weights (and, in
// prefill-sized steps, of the activations into FP8 linears), the decode-path kernels (gemv,
// moe_gate_up_gemv, moe_down_gemv) for every other linear. Plain C++ (builds without a
// CUDA toolkit), slow (plain loops): for the tiny reference checkpoints in tests and the
// self-test, where it separates "the GPU computes what we meant" (GPU vs twin, tight) from "what
// we meant is close to HF" (twin vs HF, bounded by BF16/FP8 precision).
#pragma once

#include "engine/backend/backend.h"
#include "engine/backend/precision.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace es {

// Steps of more than this many tokens take the CUDA backend's GEMM path (cuBLASLt), where FP8
// linears quantize their activations per token; fewer take the GEMV kernels with BF16
// activations. The backend's threshold, shared with the twin.
inline constexpr int64_t cuda_gemv_max_tokens = 8;

struct twin_options {
    // Activations of FP8 linears in steps of more than cuda_gemv_max_tokens tokens, as the CUDA
    // backend uses them (cuda_backend::activations()): quantized per token exactly as
    // act_quantize does, then gemm_lt's FP8 product; linears whose shape cuBLASLt's FP8 rules
    // reject (gemm_lt_fp8_dims_ok), and every one with bf16, keep BF16 activations and take, as in
    // the backend, the weights dequantized to BF16 (fp8_dequantize) where cuBLASLt's BF16 rules
    // hold (k % 8, n % 4), else the GEMV on the FP8 codes.
    activation_format activations = activation_format::e4m3;
    // Token counts of the forward steps the sequence is fed in (they sum to tokens.size());
    // empty: one step of every token. Only whether a token's step exceeds the threshold matters.
    std::vector<int64_t> steps;
    // FP8 weights: the head, the attention output projections and the scale layout as
    // cuda_backend_params::fp8 (block128: prefill-sized steps take BF16 activations and the
    // dequantized weights, as the backend does).
    fp8_policy fp8;
    // The KV cache as cuda_backend_params::kv_cache: fp8 stores k' and v as E4M3 (scale 1.0) and
    // attention reads them back widened, as the kernels do (store-then-read rounding).
    kv_cache_dtype kv_cache = kv_cache_dtype::bf16;
    // The GPU's routed-expert grouped GEMM takes FP8 activations (compute capability 8.9 and
    // later: moe_grouped_gemm_fp8_mma_device()). The backend then gives them to it where it
    // gives them to the dense linears and both expert GEMMs can take them (k % 16 == 0, per-row
    // scales): act_quantize's codes of the normalized rows for the gate/up and of each slot's
    // SiLU·up row for the down, the codes' products scaled after the sum.
    bool grouped_fp8 = false;
    // When set, receives the router's choices as a backend's forward_output::routing holds them
    // (per MoE layer: ids and weights [tokens.size(), n_expert_used] in selection order), so they
    // can be set against the CPU backend's.
    routing_record *routing = nullptr;
    // The sequence's expert intervention (routing_intervention.h), as the CUDA backend applies
    // it: the router's logits, then moe_reroute's choices under the rule of each layer, K places
    // per token (the intervention's k, else the model's). Null or empty: none.
    std::shared_ptr<const routing_intervention> intervention;
};

// Logits [tokens.size(), n_vocab] of one sequence starting at position 0.
result<std::vector<float>> twin_forward_logits(const model_config &cfg, const model_tensors &t,
                                               const std::vector<int32_t> &tokens, weight_precision precision,
                                               const twin_options &o = {});

} // namespace es
