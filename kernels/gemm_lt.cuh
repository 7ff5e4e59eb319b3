// gemm_lt: prefill-sized linear layer through cuBLASLt, y[m, n] (+)= a[m, k] · w[n, k]ᵀ with BF16
// inputs, fp32 accumulation and fp32 output (accumulate: beta = 1, the residual add fused).
// Row-major y = a·wᵀ is computed as the column-major product yᵀ = w·aᵀ ("TN", the layout FP8 on
// Hopper also requires). Layouts and the heuristic's algorithm are cached per shape in the
// context; cuBLASLt needs 16-byte aligned pointers and leading dimensions (gemm_lt_shape_ok);
// other shapes go to gemv.
#pragma once

#include "kernel_common.h"

namespace es {

struct gemm_lt_context; // cuBLASLt handle, workspace, per-shape plans (gemm_lt.cu)

struct gemm_lt_params {
    gemm_lt_context *ctx = nullptr;
    const bf16_t *a = nullptr; // [m, lda]
    int64_t lda = 0;
    const bf16_t *w = nullptr; // [n, ldw]
    int64_t ldw = 0;
    float *y = nullptr;        // [m, ldy]
    int64_t ldy = 0;
    int64_t m = 0, n = 0, k = 0;
    bool accumulate = false;
};

// True when cuBLASLt's alignment rules hold (pointers 16-byte aligned, lda/ldw multiples of 8
// elements, ldy a multiple of 4).
bool gemm_lt_shape_ok(const gemm_lt_params &p);

void gemm_lt_ref(const gemm_lt_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t create_gemm_lt_context(gemm_lt_context **ctx, size_t workspace_bytes);
void destroy_gemm_lt_context(gemm_lt_context *ctx);
// The last cuBLASLt failure in words (launch_gemm_lt returns cudaErrorUnknown for those).
const char *gemm_lt_last_error(const gemm_lt_context *ctx);
cudaError_t launch_gemm_lt(const gemm_lt_params &p, cudaStream_t stream);
#endif

} // namespace es
