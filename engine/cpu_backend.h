// The CPU backend: the numerical reference for every other backend and a usable fallback.
// Weights are widened to fp32 once at load (exactly, from BF16/F16/F32); all arithmetic is
// fp32. Linear layers run the batch-invariant GEMM of cpu_gemm.h; attention, norms, RoPE and
// routing are OpenMP loops over tokens and heads with vectorizable inner loops. Results for a
// token do not depend on the rest of the batch (bit for bit).
#pragma once

#include "backend.h"
#include "model_tensors.h"

#include <functional>
#include <memory>

namespace es {

struct cpu_backend_params {
    int n_threads = 0;                                // 0: all cores
    std::function<void(float progress)> on_progress;  // 0..1 while weights are converted
};

// Loads from bound tensors (the weight_store must outlive the call only, not the backend).
result<std::unique_ptr<backend>> make_cpu_backend(const model_config &cfg, const model_tensors &t,
                                                  const cpu_backend_params &p = {});

// Random weights of the given shape (benchmarks): N(0, std) linears, norms near 1.
result<std::unique_ptr<backend>> make_cpu_backend_random(const model_config &cfg, uint64_t seed,
                                                         const cpu_backend_params &p = {});

} // namespace es
