// The CPU backend's matrix product, written to be batch-invariant: every output element is
// produced by the same sequence of floating-point operations whatever the number of rows in
// the batch, the row's place in it, the tiling edge it falls on, or the thread count. So a
// token's logits do not depend on what else was batched with it: prefix-cached, preempted and
// batched runs reproduce a lone cold run bit for bit. (OpenBLAS switches kernels with the row
// count, which breaks that: ARCHITECTURE.md, "CPU backend"; the cost in docs/benchmarks.md.)
// The weights may be held in fp32, BF16 or E4M3 with per-row scales: each weight is widened in
// registers to the fp32 value an fp32 copy would hold, then takes the fp32 path's operations, so
// the weight type changes the bytes read and never a result bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace es::cpu {

// How a weight matrix is held in memory, and the fp32 value each element stands for.
enum class weight_type : uint8_t {
    f32,  // fp32
    bf16, // BF16 bits; the value is bits << 16 (exact)
    e4m3, // FP8 E4M3 codes with one fp32 scale per row; the value is fp32(e4m3(code) · scale[row]).
          // A row may hold a NaN code (S.1111.111) only with a NaN scale (weight_matrix's encoding):
          // its dot products are then NaN, as an fp32 row's with a NaN weight.
};

// Bytes an element: 4, 2, 1.
constexpr size_t weight_type_bytes(weight_type t) {
    return t == weight_type::f32 ? 4 : t == weight_type::bf16 ? 2 : 1;
}
const char *weight_type_name(weight_type t); // "fp32", "bf16", "fp8-e4m3"

// A weight matrix [N, K] as gemm_nt reads it: rows contiguous (ld = K).
struct weights_view {
    weight_type type = weight_type::f32;
    const void *data = nullptr;   // N · K elements of `type`
    const float *scale = nullptr; // e4m3: [N], one per row; otherwise unused
};

// y[M, N] = x[M, K] · w[N, K]ᵀ (accumulate: y += …). Rows of x are contiguous (ld = K), y has
// leading dimension N. Threads: the calling OpenMP team size (omp_get_max_threads()). Every
// weight type gives the bits the f32 call gives on the widened matrix.
void gemm_nt(const float *x, int64_t M, const weights_view &w, int64_t N, int64_t K, float *y,
             bool accumulate);
inline void gemm_nt(const float *x, int64_t M, const float *w, int64_t N, int64_t K, float *y,
                    bool accumulate) {
    gemm_nt(x, M, weights_view{weight_type::f32, w, nullptr}, N, K, y, accumulate);
}

// Which kernel gemm_nt runs on this machine: "avx512", "avx2" or "generic".
const char *gemm_kernel_name();

// The kernels this machine can run, the one gemm_nt uses first, and gemm_nt with one of them
// named (tests hold each kernel's weight types to its own f32 bits; kernels of different vector
// widths reduce in different orders, so their results differ from each other).
std::vector<const char *> gemm_kernels_here();
void gemm_nt_with(const char *kernel, const float *x, int64_t M, const weights_view &w, int64_t N, int64_t K,
                  float *y, bool accumulate);

// Row `row` of w [N, K] widened to fp32 (the values the GEMM multiplies by).
void widen_row(const weights_view &w, int64_t K, int64_t row, float *out);

} // namespace es::cpu
