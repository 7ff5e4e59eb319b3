// gemm_lt: prefill-sized linear layer through cuBLASLt, y[m, n] (+)= a[m, k] · w[n, k]ᵀ with
// fp32 accumulation and fp32 output (accumulate: beta = 1, the residual add fused). Two input
// kinds:
//  - BF16 a and w (gemm_lt_params);
//  - FP8 (gemm_lt_fp8_params): activations quantized per token (act_quantize: E4M3 or E5M2 codes
//    + one fp32 scale per row of a) times E4M3 weights with one fp32 scale per output channel
//    (row of w): y[i, j] (+)= a_scale[i] · w_scale[j] · Σ_k fp8(a[i, k]) · e4m3(w[j, k]), through
//    cuBLASLt's outer-vector scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, compute
//    capability 9.0). The scales are applied in the epilogue, so the weights are read once, as
//    FP8, and nothing is dequantized.
// Row-major y = a·wᵀ is computed as the column-major product yᵀ = w·aᵀ ("TN", the layout FP8 on
// Hopper requires): cuBLASLt's A is w ([k, n] column-major, transposed: op(A) is n × k, so its
// M is our n and A's scale vector is w_scale), its B is a ([k, m], not transposed: its N is our
// m and B's scale vector is a_scale), C = D = y ([n, m] column-major, fp32). Layouts and the
// heuristic's algorithm are cached per shape, input kind and alignment in the context;
// cuBLASLt needs 16-byte aligned pointers and leading dimensions (gemm_lt_shape_ok,
// gemm_lt_fp8_shape_ok); other shapes go to gemv (BF16) or to the dequantize path (FP8).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct gemm_lt_context; // cuBLASLt handle, workspace, per-shape plans (gemm_lt.cu)

struct gemm_lt_params {
    gemm_lt_context *ctx = nullptr;
    const bf16_t *a = nullptr; // [m, lda]
    int64_t lda = 0;
    const bf16_t *w = nullptr; // [n, ldw]
    int64_t ldw = 0;
    float *y = nullptr; // [m, ldy]
    int64_t ldy = 0;
    int64_t m = 0, n = 0, k = 0;
    bool accumulate = false;
};

// True when cuBLASLt's alignment rules hold (pointers 16-byte aligned, lda/ldw multiples of 8
// elements, ldy a multiple of 4).
bool gemm_lt_shape_ok(const gemm_lt_params &p);

void gemm_lt_ref(const gemm_lt_params &p);

struct gemm_lt_fp8_params {
    gemm_lt_context *ctx = nullptr;
    const fp8_t *a = nullptr; // [m, lda] activation codes in a_fmt
    int64_t lda = 0;
    const float *a_scale = nullptr; // [m] one per token (row of a)
    fp8_format a_fmt = fp8_format::e4m3;
    const fp8_t *w = nullptr; // [n, ldw] weight codes, E4M3
    int64_t ldw = 0;
    const float *w_scale = nullptr; // [n] one per output channel (row of w)
    float *y = nullptr;             // [m, ldy]
    int64_t ldy = 0;
    int64_t m = 0, n = 0, k = 0;
    bool accumulate = false;
};

// cuBLASLt's rules for FP8 (its "Tensor Core usage" requirements, mandatory for 8-bit inputs:
// 16-byte aligned pointers and dimensions): every pointer 16-byte aligned (the scale vectors
// too), k and n multiples of 16 (16 bytes of FP8 per row of a and of w; n as PyTorch's
// _scaled_mm asks of the output columns; m, the token count, is free), lda and ldw multiples of
// 16 elements, ldy of 4 (16 bytes of fp32).
bool gemm_lt_fp8_dims_ok(int64_t n, int64_t k);
bool gemm_lt_fp8_shape_ok(const gemm_lt_fp8_params &p);

// The twin: both operands dequantized (code · scale, fp32), then an fp32 dot product.
void gemm_lt_fp8_ref(const gemm_lt_fp8_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t create_gemm_lt_context(gemm_lt_context **ctx, size_t workspace_bytes);
void destroy_gemm_lt_context(gemm_lt_context *ctx);
// The last cuBLASLt failure in words (launch_gemm_lt returns cudaErrorUnknown for those).
const char *gemm_lt_last_error(const gemm_lt_context *ctx);
cudaError_t launch_gemm_lt(const gemm_lt_params &p, cudaStream_t stream);
// cudaErrorNotSupported when cuBLASLt refuses the FP8 GEMM with outer-vector scales (a library
// older than 12.9, a GPU below compute capability 9.0, an unsupported type combination): the
// reason is in gemm_lt_last_error and nothing was launched, so the caller can fall back to
// dequantized weights. cudaErrorInvalidValue for a shape gemm_lt_fp8_shape_ok rejects,
// cudaErrorUnknown for any other cuBLASLt failure.
cudaError_t launch_gemm_lt_fp8(const gemm_lt_fp8_params &p, cudaStream_t stream);
#endif

} // namespace es
