// Batch-invariant fp32 GEMM (see cpu_gemm.h). Register-tiled "dot-product" kernel for the
// x·wᵀ layout (both operands contiguous along K): an MR×NR tile keeps one vector accumulator per
// output element, walks K in vector-width steps with FMA (a masked step for the tail), then
// reduces each accumulator with a fixed shuffle sequence. Edge tiles are the same template with
// smaller MR/NR, so an element's operations never depend on where its tile falls. Work is split
// over (row block, column block) pairs; each element is owned by exactly one task.
#include "engine/cpu/cpu_gemm.h"

#include <omp.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define ES_X86 1
// GCC 12 warns inside its own _mm512_reduce_add_ps (an undefined vector it fills itself).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace es::cpu {
namespace {

using tile_fn = void (*)(const float *x, const float *w, int64_t K, float *y, int64_t ldy, bool acc);

#if ES_X86
template <int MR, int NR>
__attribute__((target("avx512f"))) void tile_avx512(const float *x, const float *w, int64_t K, float *y,
                                                      int64_t ldy, bool acc) {
    __m512 a[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) a[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv[MR];
        for (int i = 0; i < MR; ++i) xv[i] = _mm512_loadu_ps(x + i * K + k);
        for (int j = 0; j < NR; ++j) {
            const __m512 wv = _mm512_loadu_ps(w + j * K + k);
            for (int i = 0; i < MR; ++i) a[i][j] = _mm512_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
    if (k < K) {
        const __mmask16 m = __mmask16((1u << (K - k)) - 1u);
        __m512 xv[MR];
        for (int i = 0; i < MR; ++i) xv[i] = _mm512_maskz_loadu_ps(m, x + i * K + k);
        for (int j = 0; j < NR; ++j) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + j * K + k);
            for (int i = 0; i < MR; ++i) a[i][j] = _mm512_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            const float s = _mm512_reduce_add_ps(a[i][j]);
            y[i * ldy + j] = acc ? y[i * ldy + j] + s : s;
        }
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
}

template <int MR, int NR>
__attribute__((target("avx2,fma"))) void tile_avx2(const float *x, const float *w, int64_t K, float *y, int64_t ldy,
                                                   bool acc) {
    __m256 a[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) a[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[MR];
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * K + k);
        for (int j = 0; j < NR; ++j) {
            const __m256 wv = _mm256_loadu_ps(w + j * K + k);
            for (int i = 0; i < MR; ++i) a[i][j] = _mm256_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
    if (k < K) {
        alignas(32) static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ones + 8 - (K - k)));
        __m256 xv[MR];
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_maskload_ps(x + i * K + k, m);
        for (int j = 0; j < NR; ++j) {
            const __m256 wv = _mm256_maskload_ps(w + j * K + k, m);
            for (int i = 0; i < MR; ++i) a[i][j] = _mm256_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            const float s = hsum256(a[i][j]);
            y[i * ldy + j] = acc ? y[i * ldy + j] + s : s;
        }
}
#endif

// Portable kernel: 8 interleaved partial sums per element, combined pairwise.
template <int MR, int NR>
void tile_generic(const float *x, const float *w, int64_t K, float *y, int64_t ldy, bool acc) {
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const float *xr = x + i * K, *wr = w + j * K;
            for (int64_t k = 0; k < K; ++k) p[k & 7] += xr[k] * wr[k];
            const float s = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
            y[i * ldy + j] = acc ? y[i * ldy + j] + s : s;
        }
}

struct kernel_set {
    const char *name;
    int mr, nr;
    tile_fn tiles[4][4]; // [mr-1][nr-1]
};


#define ES_TILES(F)                                                                                               \
    {                                                                                                             \
        {F<1, 1>, F<1, 2>, F<1, 3>, F<1, 4>}, {F<2, 1>, F<2, 2>, F<2, 3>, F<2, 4>},                               \
            {F<3, 1>, F<3, 2>, F<3, 3>, F<3, 4>}, {F<4, 1>, F<4, 2>, F<4, 3>, F<4, 4>},                           \
    }

const kernel_set &pick_kernels() {
    static const kernel_set set = [] {
#if ES_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) return kernel_set{"avx512", 4, 4, ES_TILES(tile_avx512)};
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            return kernel_set{"avx2", 2, 4, ES_TILES(tile_avx2)};
#endif
        return kernel_set{"generic", 4, 4, ES_TILES(tile_generic)};
    }();
    return set;
}

} // namespace

const char *gemm_kernel_name() { return pick_kernels().name; }

void gemm_nt(const float *x, int64_t M, const float *w, int64_t N, int64_t K, float *y, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K == 0) {
        if (!accumulate) std::fill(y, y + M * N, 0.0f);
        return;
    }
    const kernel_set &ks = pick_kernels();
    const int MR = ks.mr, NR = ks.nr;
    // Blocks: 64 rows of x (a few L1-sized row tiles) × 32 rows of w (L2-resident); small
    // problems (decode) split columns finer so every thread streams a share of the weights.
    const int threads = omp_get_max_threads();
    const int64_t MB = 64;
    int64_t NB = 32;
    const int64_t m_blocks = (M + MB - 1) / MB;
    while (NB > NR && m_blocks * ((N + NB - 1) / NB) < 4 * threads) NB /= 2;
    NB = std::max<int64_t>(NB - NB % NR, NR);
    const int64_t n_blocks = (N + NB - 1) / NB;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (m_blocks * n_blocks > 1 && M * N * K > 32768)
    for (int64_t mb = 0; mb < m_blocks; ++mb) {
        for (int64_t nb = 0; nb < n_blocks; ++nb) {
            const int64_t m_end = std::min(M, (mb + 1) * MB), n_end = std::min(N, (nb + 1) * NB);
            for (int64_t m0 = mb * MB; m0 < m_end; m0 += MR) {
                const int mr = int(std::min<int64_t>(MR, m_end - m0));
                for (int64_t n0 = nb * NB; n0 < n_end; n0 += NR) {
                    const int nr = int(std::min<int64_t>(NR, n_end - n0));
                    ks.tiles[mr - 1][nr - 1](x + m0 * K, w + n0 * K, K, y + m0 * N + n0, N, accumulate);
                }
            }
        }
    }
}

} // namespace es::cpu
