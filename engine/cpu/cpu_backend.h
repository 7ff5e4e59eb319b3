// The CPU backend: the numerical reference for every other backend and a usable fallback.
// Weights are widened to fp32 once at load (exactly, from BF16/F16/F32); all arithmetic is
// fp32. Linear layers run the batch-invariant GEMM of cpu_gemm.h; attention, norms, RoPE and
// routing are OpenMP loops over tokens and heads with vectorizable inner loops. Results for a
// token do not depend on the rest of the batch (bit for bit).
#pragma once

#include "engine/backend/backend.h"
#include "engine/model/model_tensors.h"

#include <set>
#include <string>

#include <functional>
#include <memory>

namespace es {

// What the CPU backend does to the weights of the linear layers it would quantize on the GPU
// (attention q/k/v/o, dense and expert FFNs, shared experts — not embeddings, norms, the router
// or the head, as the CUDA backend's policy): keep the checkpoint's values (the reference), or
// round them as the GPU stores them — BF16, or E4M3 with one fp32 scale per output channel
// (through BF16, with fp8_quantize's twin) — then compute in fp32 as always. The rounding
// emulates weight precision; activations stay fp32 (the GPU rounds them to BF16).
enum class cpu_weight_rounding { none, bf16, fp8_e4m3 };

struct cpu_backend_params {
    int n_threads = 0;                                // 0: all cores
    cpu_weight_rounding rounding = cpu_weight_rounding::none;
    std::function<void(float progress)> on_progress;  // 0..1 while weights are converted
};

// Loads from bound tensors (the weight_store must outlive the call only, not the backend).
result<std::unique_ptr<backend>> make_cpu_backend(const model_config &cfg, const model_tensors &t,
                                                  const cpu_backend_params &p = {});

// The linears `rounding` applies to: their tensor names.
std::set<std::string> cpu_rounded_linears(const model_tensors &t);
// Rounds rows × cols weights in place (per row for E4M3).
void round_cpu_weights(float *w, int64_t rows, int64_t cols, cpu_weight_rounding r);

// Random weights of the given shape (benchmarks): N(0, std) linears, norms near 1.
result<std::unique_ptr<backend>> make_cpu_backend_random(const model_config &cfg, uint64_t seed,
                                                         const cpu_backend_params &p = {});

} // namespace es
