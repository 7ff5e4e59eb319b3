// The CPU backend: the numerical reference for every other backend and a usable fallback.
// All arithmetic is fp32. Weights stay in the checkpoint's precision in memory where it is
// exact — BF16 (and FP8) checkpoints' matrices as BF16, F32 and F16 ones as fp32 — and are
// widened to fp32 inside the GEMM (cpu_gemm.h), which gives the bits an fp32 copy would give;
// norms and biases are fp32. Linear layers run the batch-invariant GEMM; attention, norms, RoPE
// and routing are OpenMP loops over tokens and heads with vectorizable inner loops. Results for a
// token do not depend on the rest of the batch (bit for bit).
#pragma once

#include "engine/backend/backend.h"
#include "engine/model/model_tensors.h"

#include <string>

#include <functional>
#include <memory>

namespace es {

// What the CPU backend does to the weights of the linear layers it would quantize on the GPU
// (attention q/k/v/o, dense and expert FFNs, shared experts — not embeddings, norms, the router
// or the head, as the CUDA backend's policy): keep the checkpoint's values (the reference), or
// hold them as the GPU stores them — BF16, or E4M3 codes with one fp32 scale per output channel
// (quantized through BF16 by fp8_quantize's twin: the GPU's FP8 weights bit for bit) — and
// compute in fp32 as always. Activations stay fp32 (the GPU rounds them to BF16 or FP8), so this
// measures what weight precision costs.
enum class cpu_weight_rounding { none, bf16, fp8_e4m3 };

struct cpu_backend_params {
    int n_threads = 0;                                // 0: all cores
    cpu_weight_rounding rounding = cpu_weight_rounding::none;
    // Hold every weight in fp32 (rounded values too), as the backend did before BF16 and E4M3
    // storage: the reference the compact types are tested against, and the benchmarks' baseline.
    bool widen_to_fp32 = false;
    std::function<void(float progress)> on_progress;  // 0..1 while weights are converted
};

// Loads from bound tensors (the weight_store must outlive the call only, not the backend).
result<std::unique_ptr<backend>> make_cpu_backend(const model_config &cfg, const model_tensors &t,
                                                  const cpu_backend_params &p = {});

// Bytes of weights the CPU backend holds for these tensors and params — what its weights_bytes()
// reports once loaded (the will-it-fit estimate).
result<size_t> cpu_weight_bytes(const model_config &cfg, const model_tensors &t,
                                const cpu_backend_params &p = {});
// The same count for a checkpoint not at hand (a model not yet downloaded), typed as the hub's
// ERNIE-4.5 checkpoints are: every tensor BF16 but the MoE router's gate and score-correction
// bias, which are F32.
result<size_t> cpu_weight_bytes(const model_config &cfg, const cpu_backend_params &p = {});

// Bytes a batch-1 decode step reads from the weights a CPU backend holds: every matrix and norm
// but the embeddings (one row a token; tied, they are the head and count), the routed experts
// at n_expert_used of n_expert. 0 for a backend that is not the CPU's.
double cpu_decode_weight_bytes(const backend &be);

// Rounds rows × cols weights in place (per row for E4M3): the values the backend holds.
void round_cpu_weights(float *w, int64_t rows, int64_t cols, cpu_weight_rounding r);

// Random weights of the given shape (benchmarks), as a BF16 checkpoint holds them: N(0, std)
// linears, norms near 1, every value rounded to BF16.
result<std::unique_ptr<backend>> make_cpu_backend_random(const model_config &cfg, uint64_t seed,
                                                         const cpu_backend_params &p = {});

} // namespace es
