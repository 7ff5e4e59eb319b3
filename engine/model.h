// One loaded model: its config, tokenizer (optional), generation defaults and a backend holding
// the weights. load_model() is the single entry point the CLI, the runtime and the app use.
#pragma once

#include "backend.h"
#include "kernel_common.h"
#include "model_config.h"
#include "sampler.h"
#include "tokenizer.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace es {

// automatic: the CUDA backend when its module loads and a usable GPU is present, else the CPU (the
// reason kept in model::backend_note); cuda: an error naming the reason when it cannot run here.
enum class backend_kind { cpu, cuda, automatic };

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
// `scales`: where the fp32 scales of every FP8 matrix sit (kernel_common.h: scale_layout): one
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
inline const char *scale_layout_name(scale_layout l) {
    return l == scale_layout::channel ? "channel" : "block128";
}

struct model_load_params {
    backend_kind kind = backend_kind::cpu;
    weight_precision precision = weight_precision::bf16;
    activation_format activations = activation_format::e4m3; // CUDA, FP8 weights only (see above)
    fp8_policy fp8;                                          // CUDA, FP8 weights only
    kv_cache_dtype kv_cache = kv_cache_dtype::bf16;          // CUDA only (see above)
    // The CPU backend keeps the checkpoint's exact values unless asked to emulate `precision`
    // (weights rounded as the GPU stores them; see cpu_weight_rounding).
    bool emulate_precision_on_cpu = false;
    int n_threads = 0;
    bool need_tokenizer = true;                             // logits need only config + weights
    std::function<void(const std::string &stage, float progress)> on_progress;
};

struct model {
    std::filesystem::path dir;
    model_config config;
    std::unique_ptr<tokenizer> tok;      // null when not requested or absent
    sampling_params generation_defaults; // from generation_config.json (HF defaults otherwise)
    std::unique_ptr<backend> be;
    std::vector<std::string> warnings;
    std::string backend_note;            // "CUDA not used: <reason>" when automatic fell back to the CPU
};

result<std::unique_ptr<model>> load_model(const std::filesystem::path &dir, const model_load_params &p = {});

// A model of the given shape with random weights and no tokenizer (benchmarks of real shapes).
result<std::unique_ptr<model>> make_random_model(const model_config &cfg, uint64_t seed, const model_load_params &p = {});

// generation_config.json → sampling defaults (temperature, top_p, top_k, repetition_penalty,
// eos ids). Absent file: HF ERNIE defaults (0.8 / 0.8 / 1.0).
result<sampling_params> load_generation_config(const std::filesystem::path &dir, const model_config &cfg);

} // namespace es
