// rms_norm: fused residual add + RMSNorm. For output row r with source row s = rows ? rows[r] : r:
//   x[s] += delta[s]            (when delta is given; the residual stream stays fp32)
//   out[r] = bf16(w * (x[s] / sqrt(mean(x[s]²) + eps)))   (fp32 math, as the CPU backend)
// `rows` gathers a subset (the final norm of only the rows whose logits are wanted).
#pragma once

#include "kernels/kernel_common.h"

#include <vector>

namespace es {

struct rms_norm_params {
    float *x = nullptr;             // [n_src_rows, n_embd] residual stream
    const float *delta = nullptr;   // [n_src_rows, n_embd] or null
    const int32_t *rows = nullptr;  // [n_rows] source row per output row, or null (identity)
    const bf16_t *weight = nullptr; // [n_embd]
    bf16_t *out = nullptr;          // [n_rows, n_embd]
    int64_t n_rows = 0, n_embd = 0;
    float eps = 1e-5f;
};

void rms_norm_ref(const rms_norm_params &p);
// The twin of a fused input norm (kernel_common.h norm_in): rms_norm_ref of the n_rows rows of
// n.x; the normalized rows are returned and, when n.out is set, also written there.
std::vector<bf16_t> norm_in_ref(const norm_in &n, int64_t n_rows, int64_t n_embd);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_rms_norm(const rms_norm_params &p, cudaStream_t stream);
#endif

} // namespace es
