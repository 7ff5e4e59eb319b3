// gemm_lt (see gemm_lt.cuh): the cuBLASLt wrapper. One handle and one workspace per context;
// a plan (operation descriptor, three layouts, the heuristic's first algorithm) is built once per
// (m, n, k, lda, ldw, ldy) and reused, so steady-state calls only enqueue cublasLtMatmul.
#include "gemm_lt.cuh"

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
} // namespace

struct gemm_lt_context {
    cublasLtHandle_t handle = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, gemm_lt_plan> plans;
    std::string last_error;
};

namespace {

cudaError_t fail(gemm_lt_context *ctx, const char *what, cublasStatus_t st) {
    ctx->last_error = std::string(what) + ": " + cublasLtGetStatusName(st) + " (" + cublasLtGetStatusString(st) + ")";
    return cudaErrorUnknown;
}

void destroy_plan(gemm_lt_plan &pl) {
    if (pl.a) cublasLtMatrixLayoutDestroy(pl.a);
    if (pl.b) cublasLtMatrixLayoutDestroy(pl.b);
    if (pl.c) cublasLtMatrixLayoutDestroy(pl.c);
    if (pl.op) cublasLtMatmulDescDestroy(pl.op);
    pl = gemm_lt_plan{};
}

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
    const auto key = std::make_tuple(p.m, p.n, p.k, p.lda, p.ldw, p.ldy);
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
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->workspace_bytes,
                                             sizeof ctx->workspace_bytes);
        cublasLtMatmulHeuristicResult_t heur{};
        int found = 0;
        st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, pl.op, pl.a, pl.b, pl.c, pl.c, pref, 1, &heur, &found);
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
    const cublasStatus_t st = cublasLtMatmul(ctx->handle, pl.op, &alpha, p.w, pl.a, p.a, pl.b, &beta, p.y, pl.c, p.y, pl.c,
                                             &pl.algo, ctx->workspace, ctx->workspace_bytes, stream);
    if (st != CUBLAS_STATUS_SUCCESS) return fail(ctx, "cublasLtMatmul", st);
    return cudaGetLastError();
}

} // namespace es
