// The CPU backend's matrix product, written to be batch-invariant: every output element is
// produced by the same sequence of floating-point operations whatever the number of rows in
// the batch, the row's place in it, the tiling edge it falls on, or the thread count. So a
// token's logits do not depend on what else was batched with it: prefix-cached, preempted and
// batched runs reproduce a lone cold run bit for bit. (OpenBLAS switches kernels with the row
// count, which breaks that: ARCHITECTURE.md, "CPU backend"; the cost in docs/benchmarks.md.)
#pragma once

#include <cstdint>

namespace es::cpu {

// y[M, N] = x[M, K] · w[N, K]ᵀ (accumulate: y += …). Rows of x and w are contiguous (ld = K),
// y has leading dimension N. Threads: the calling OpenMP team size (omp_get_max_threads()).
void gemm_nt(const float *x, int64_t M, const float *w, int64_t N, int64_t K, float *y, bool accumulate);

// Which kernel gemm_nt runs on this machine: "avx512", "avx2" or "generic".
const char *gemm_kernel_name();

} // namespace es::cpu
