// gemm_lt (see gemm_lt.cuh): the cuBLASLt wrapper. One handle and one workspace per context;
// a plan (operation descriptor, three layouts, the heuristic's first algorithm) is built once per
// (input kind, m, n, k, lda, ldw, ldy, pointer alignment) and reused, so steady-state calls only
// enqueue cublasLtMatmul (the FP8 path also re-points its two scale vectors, a host-side
// descriptor update). A context serves one stream from one thread.
//
// The FP8 path's descriptor (compute CUBLAS_COMPUTE_32F, scale type CUDA_R_32F):
//   TRANSA = T, TRANSB = N        the "TN" layout Hopper's FP8 kernels require;
//   A_SCALE_MODE = B_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
//                                 per-row (A: M = our n, w_scale) and per-column (B: N = our m,
//                                 a_scale) fp32 vectors, D_ij = α·sA_i·sB_j·Σ a·b + β·C_ij;
//   A_SCALE_POINTER = w_scale, B_SCALE_POINTER = a_scale   (set on every call);
//   FAST_ACCUM = 0                partial sums promoted to fp32 regularly (the accurate mode);
//   A: CUDA_R_8F_E4M3, B: CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2 (E4M3 × E5M2 is a supported pair;
//   E5M2 × E5M2 is not, and never asked for), C = D: CUDA_R_32F (one of the three output types
//   outer-vector scaling allows, with 16F and 16BF; fp32 keeps the accumulate-into-the-residual
//   semantics of the BF16 path: β = 1, C = D = y); no C/D scale (C is not FP8).
// The heuristic is told the pointers' real alignment (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*),
// part of the plan key. A refusal (attribute unknown to the library, no algorithm, or the matmul
// itself answering NOT_SUPPORTED / INVALID_VALUE / ARCH_MISMATCH before launching anything)
// becomes cudaErrorNotSupported with the reason in last_error.
#include "kernels/gemm_lt.cuh"

#include <cublasLt.h>

#include <map>
#include <string>
#include <tuple>

namespace es {

namespace {
struct gemm_lt_plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
};

// The input kind of a plan: BF16 × BF16, or E4M3 weights × E4M3 / E5M2 activations with
// outer-vector scales.
enum plan_kind : int { kind_bf16 = 0, kind_fp8_e4m3 = 1, kind_fp8_e5m2 = 2 };
// (kind, m, n, k, lda, ldw, ldy, minimum pointer alignment in bytes; 0 for BF16: the default)
using plan_key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
} // namespace

struct gemm_lt_context {
    cublasLtHandle_t handle = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<plan_key, gemm_lt_plan> plans;
    std::string last_error;
};

namespace {

cudaError_t fail(gemm_lt_context *ctx, const char *what, cublasStatus_t st) {
    ctx->last_error =
        std::string(what) + ": " + cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")";
    return cudaErrorUnknown;
}

// The statuses with which cuBLASLt declines a configuration (as opposed to failing to run one).
bool is_refusal(cublasStatus_t st) {
    return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
           st == CUBLAS_STATUS_ARCH_MISMATCH;
}

cudaError_t fail_fp8(gemm_lt_context *ctx, const char *what, cublasStatus_t st) {
    fail(ctx, what, st);
    ctx->last_error = "FP8 GEMM with per-row/per-column scales (cuBLASLt " +
                      std::to_string(cublasLtGetVersion()) + "): " + ctx->last_error;
    return is_refusal(st) ? cudaErrorNotSupported : cudaErrorUnknown;
}

void destroy_plan(gemm_lt_plan &pl) {
    if (pl.a) cublasLtMatrixLayoutDestroy(pl.a);
    if (pl.b) cublasLtMatrixLayoutDestroy(pl.b);
    if (pl.c) cublasLtMatrixLayoutDestroy(pl.c);
    if (pl.op) cublasLtMatmulDescDestroy(pl.op);
    pl = gemm_lt_plan{};
}

bool aligned256(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 255u) == 0; }

} // namespace

cudaError_t create_gemm_lt_context(gemm_lt_context **out, size_t workspace_bytes) {
    *out = nullptr;
    auto *ctx = new gemm_lt_context;
    if (const cublasStatus_t st = cublasLtCreate(&ctx->handle); st != CUBLAS_STATUS_SUCCESS) {
        delete ctx;
        return cudaErrorUnknown;
    }
    if (workspace_bytes) {
        if (const cudaError_t e = cudaMalloc(&ctx->workspace, workspace_bytes); e != cudaSuccess) {
            cublasLtDestroy(ctx->handle);
            delete ctx;
            return e;
        }
    }
    ctx->workspace_bytes = workspace_bytes;
    *out = ctx;
    return cudaSuccess;
}

void destroy_gemm_lt_context(gemm_lt_context *ctx) {
    if (!ctx) return;
    for (auto &kv : ctx->plans) destroy_plan(kv.second);
    if (ctx->workspace) cudaFree(ctx->workspace);
    if (ctx->handle) cublasLtDestroy(ctx->handle);
    delete ctx;
}

const char *gemm_lt_last_error(const gemm_lt_context *ctx) { return ctx ? ctx->last_error.c_str() : ""; }

cudaError_t launch_gemm_lt(const gemm_lt_params &p, cudaStream_t stream) {
    if (p.m <= 0 || p.n <= 0) return cudaSuccess;
    if (!p.ctx || !gemm_lt_shape_ok(p)) return cudaErrorInvalidValue;
    gemm_lt_context *ctx = p.ctx;
    const plan_key key{kind_bf16, p.m, p.n, p.k, p.lda, p.ldw, p.ldy, 0};
    auto it = ctx->plans.find(key);
    if (it == ctx->plans.end()) {
        gemm_lt_plan pl;
        cublasStatus_t st = cublasLtMatmulDescCreate(&pl.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        if (st != CUBLAS_STATUS_SUCCESS) return fail(ctx, "cublasLtMatmulDescCreate", st);
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
        cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
        // Column-major view: A = w as [k, n] (ld ldw, transposed), B = a as [k, m], C = y as [n, m].
        if ((st = cublasLtMatrixLayoutCreate(&pl.a, CUDA_R_16BF, uint64_t(p.k), uint64_t(p.n), p.ldw)) ||
            (st = cublasLtMatrixLayoutCreate(&pl.b, CUDA_R_16BF, uint64_t(p.k), uint64_t(p.m), p.lda)) ||
            (st = cublasLtMatrixLayoutCreate(&pl.c, CUDA_R_32F, uint64_t(p.n), uint64_t(p.m), p.ldy))) {
            destroy_plan(pl);
            return fail(ctx, "cublasLtMatrixLayoutCreate", st);
        }
        cublasLtMatmulPreference_t pref = nullptr;
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ctx->workspace_bytes, sizeof ctx->workspace_bytes);
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, pl.op, pl.a, pl.b, pl.c, pl.c, pref, 1, &heur,
                                            &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            destroy_plan(pl);
            return fail(ctx, "cublasLtMatmulAlgoGetHeuristic (no algorithm for this shape)",
                        st != CUBLAS_STATUS_SUCCESS ? st : CUBLAS_STATUS_NOT_SUPPORTED);
        }
        pl.algo = heur.algo;
        it = ctx->plans.emplace(key, pl).first;
    }
    const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
    const gemm_lt_plan &pl = it->second;
    const cublasStatus_t st =
        cublasLtMatmul(ctx->handle, pl.op, &alpha, p.w, pl.a, p.a, pl.b, &beta, p.y, pl.c, p.y, pl.c,
                       &pl.algo, ctx->workspace, ctx->workspace_bytes, stream);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(ctx, "cublasLtMatmul", st);
    return cudaGetLastError();
}

cudaError_t launch_gemm_lt_fp8(const gemm_lt_fp8_params &p, cudaStream_t stream) {
    if (p.m <= 0 || p.n <= 0) return cudaSuccess;
    if (!p.ctx || !gemm_lt_fp8_shape_ok(p)) return cudaErrorInvalidValue;
    gemm_lt_context *ctx = p.ctx;
#if CUBLAS_VERSION < 120900
    (void)stream;
    ctx->last_error = "FP8 GEMM with per-row/per-column scales: this build's cuBLASLt headers (" +
                      std::to_string(CUBLAS_VERSION) + ") predate outer-vector scaling (12.9)";
    return cudaErrorNotSupported;
#else
    const int align = aligned256(p.a) && aligned256(p.w) && aligned256(p.y) ? 256 : 16;
    const bool e4m3 = p.a_fmt == fp8_format::e4m3;
    const plan_key key{e4m3 ? kind_fp8_e4m3 : kind_fp8_e5m2, p.m, p.n, p.k, p.lda, p.ldw, p.ldy, align};
    const void *w_scale = p.w_scale, *a_scale = p.a_scale;
    auto it = ctx->plans.find(key);
    if (it == ctx->plans.end()) {
        gemm_lt_plan pl;
        cublasStatus_t st = cublasLtMatmulDescCreate(&pl.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        if (st != CUBLAS_STATUS_SUCCESS) return fail_fp8(ctx, "cublasLtMatmulDescCreate", st);
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
        const int8_t fast_accum = 0;
        if ((st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
            (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
            (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                                 sizeof mode)) ||
            (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                                 sizeof mode)) ||
            (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                                 sizeof fast_accum)) ||
            (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                                 sizeof w_scale)) ||
            (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                                 sizeof a_scale))) {
            destroy_plan(pl);
            return fail_fp8(ctx, "cublasLtMatmulDescSetAttribute (scale modes)", st);
        }
        // Column-major view: A = w as [k, n] (ld ldw, transposed), B = a as [k, m], C = y as [n, m].
        if ((st = cublasLtMatrixLayoutCreate(&pl.a, CUDA_R_8F_E4M3, uint64_t(p.k), uint64_t(p.n), p.ldw)) ||
            (st = cublasLtMatrixLayoutCreate(&pl.b, e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2, uint64_t(p.k),
                                             uint64_t(p.m), p.lda)) ||
            (st = cublasLtMatrixLayoutCreate(&pl.c, CUDA_R_32F, uint64_t(p.n), uint64_t(p.m), p.ldy))) {
            destroy_plan(pl);
            return fail_fp8(ctx, "cublasLtMatrixLayoutCreate", st);
        }
        cublasLtMatmulPreference_t pref = nullptr;
        if ((st = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS) {
            destroy_plan(pl);
            return fail_fp8(ctx, "cublasLtMatmulPreferenceCreate", st);
        }
        const uint32_t al = uint32_t(align);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ctx->workspace_bytes, sizeof ctx->workspace_bytes);
        for (auto attr :
             {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
              CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al);
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, pl.op, pl.a, pl.b, pl.c, pl.c, pref, 1, &heur,
                                            &found);
        cublasLtMatmulPreferenceDestroy(pref);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            destroy_plan(pl);
            return fail_fp8(ctx, "cublasLtMatmulAlgoGetHeuristic (no algorithm for this shape)",
                            st != CUBLAS_STATUS_SUCCESS ? st : CUBLAS_STATUS_NOT_SUPPORTED);
        }
        pl.algo = heur.algo;
        it = ctx->plans.emplace(key, pl).first;
    }
    gemm_lt_plan &pl = it->second;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if ((st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale,
                                             sizeof w_scale)) ||
        (st = cublasLtMatmulDescSetAttribute(pl.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale,
                                             sizeof a_scale)))
        return fail_fp8(ctx, "cublasLtMatmulDescSetAttribute (scale pointers)", st);
    const float alpha = 1.0f, beta = p.accumulate ? 1.0f : 0.0f;
    st = cublasLtMatmul(ctx->handle, pl.op, &alpha, p.w, pl.a, p.a, pl.b, &beta, p.y, pl.c, p.y, pl.c,
                        &pl.algo, ctx->workspace, ctx->workspace_bytes, stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        if (is_refusal(st)) { // declined before launching: forget the plan, the caller falls back
            destroy_plan(pl);
            ctx->plans.erase(it);
        }
        return fail_fp8(ctx, "cublasLtMatmul", st);
    }
    return cudaGetLastError();
#endif
}

} // namespace es
