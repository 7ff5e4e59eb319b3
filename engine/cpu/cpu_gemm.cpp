// Batch-invariant GEMM (see cpu_gemm.h). Register-tiled "dot-product" kernel for the x·wᵀ layout
// (both operands contiguous along K): an MR×NR tile keeps one vector accumulator per output
// element, walks K in vector-width steps with FMA (a zero-padded step for the tail), then reduces
// each accumulator with a fixed shuffle sequence. Edge tiles are the same template with smaller
// MR/NR, so an element's operations never depend on where its tile falls; the next tile's weights
// are prefetched as the tile walks K. Work is split over (row block, column block) pairs; each
// element is owned by exactly one task.
// BF16 and E4M3 weights are widened in registers right after the load (BF16: a shift; E4M3: the
// code through FP16's conversion, times the row's scale — one fp32 rounding, as the fp32 copy's
// e4m3(code) · scale), so the FMAs see the fp32 path's operands and the bits do not change; only
// the bytes streamed from memory shrink (decode is bound by them).
#include "engine/cpu/cpu_gemm.h"

#include "kernels/kernel_common.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define ES_X86 1
// GCC 12 warns inside its own _mm512_reduce_add_ps (an undefined vector it fills itself).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace es::cpu {

const char *weight_type_name(weight_type t) {
    return t == weight_type::f32 ? "fp32" : t == weight_type::bf16 ? "bf16" : "fp8-e4m3";
}

namespace {

using wt = weight_type;

// w: the tile's first weight row (bytes); scale: its first row's scale (e4m3) or null.
using tile_fn = void (*)(const float *x, const uint8_t *w, const float *scale, int64_t K, float *y,
                         int64_t ldy, bool acc);

// Every E4M3 code's value (fp8_e4m3_to_float: the quantizer's own decoding).
const std::array<float, 256> &e4m3_values() {
    static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[size_t(c)] = fp8_e4m3_to_float(fp8_t(c));
        return t;
    }();
    return table;
}

// Element i of a row of weights, widened (e4m3: times the row's scale).
template <wt T>
inline float weight_value(const uint8_t *row, int64_t i, float scale) {
    if constexpr (T == wt::f32) {
        float v;
        std::memcpy(&v, row + 4 * i, 4);
        return v;
    } else if constexpr (T == wt::bf16) {
        uint16_t b;
        std::memcpy(&b, row + 2 * i, 2);
        return bf16_bits_to_float(b);
    } else {
        return e4m3_values()[row[i]] * scale;
    }
}

#if ES_X86
// The weights the next tile of columns reads at this place, asked for now: a decode-sized GEMM
// streams every weight once, and its rows are a few KiB, too short for the hardware prefetchers
// to run ahead of the tile's interleaved rows (BF16 and E4M3 rows most of all). A prefetch never
// faults, so the last tile's reaching past the matrix is harmless (the address is formed as an
// integer: no pointer leaves its array).
inline void prefetch_next_tile(const uint8_t *p, int64_t tile_bytes) {
    _mm_prefetch(reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(p) + uintptr_t(tile_bytes)),
                 _MM_HINT_T0);
}

// --- AVX-512: 16 weights a step ---

// 16 E4M3 codes → their values / 256, through FP16: the code sign-extended to 16 bits and
// shifted left by 7 puts its exponent and mantissa in FP16's (E4M3's bias 7 is FP16's 15 less 8,
// so the FP16 number is the code's value / 256; subnormal codes land on FP16 subnormals, which
// the conversion widens exactly) and copies of its sign on bits 15 and 14, of which the mask
// keeps bit 15. NaN codes (S.1111.111) come out as 1.875: weight_matrix gives a row holding one
// a NaN scale, which makes its products NaN as an fp32 NaN weight makes the row's dot products.
__attribute__((target("avx512f"), always_inline)) inline __m512 e4m3_over_256_512(__m128i codes) {
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(codes), 7);
    return _mm512_cvtph_ps(_mm256_and_si256(h, _mm256_set1_epi16(int16_t(0xBFFF))));
}

// 16 weights of a row from element p on, widened (scale: e4m3's row scale × 256, broadcast, so
// the product is e4m3(code) · scale rounded once; × 256 is exact, a scale being at most the
// largest BF16 / 448).
template <wt T>
__attribute__((target("avx512f"), always_inline)) inline __m512 load_w512(const uint8_t *row, int64_t p,
                                                                          __m512 scale) {
    if constexpr (T == wt::f32) {
        return _mm512_loadu_ps(reinterpret_cast<const float *>(row) + p);
    } else if constexpr (T == wt::bf16) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + 2 * p));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    } else {
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + p));
        return _mm512_mul_ps(e4m3_over_256_512(c), scale);
    }
}

// The last n < 16 weights of a row from element p on, zeros after them.
template <wt T>
__attribute__((target("avx512f"), always_inline)) inline __m512
load_w512_tail(const uint8_t *row, int64_t p, int64_t n, __mmask16 m, __m512 scale) {
    if constexpr (T == wt::f32) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float *>(row) + p);
    } else {
        alignas(64) uint8_t pad[64] = {};
        const size_t es = T == wt::bf16 ? 2 : 1;
        std::memcpy(pad, row + p * int64_t(es), size_t(n) * es);
        return load_w512<T>(pad, 0, scale);
    }
}

// One step of a tile: 16 weights of each row from element k on into its accumulators.
template <wt T, int MR, int NR>
__attribute__((target("avx512f"), always_inline)) inline void step512(const float *x, const uint8_t *w,
                                                                      int64_t row_bytes, int64_t K, int64_t k,
                                                                      const __m512 *sc, __m512 (*a)[NR]) {
    __m512 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) xv[i] = _mm512_loadu_ps(x + i * K + k);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
        const __m512 wv = load_w512<T>(w + j * row_bytes, k, sc[j]);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) a[i][j] = _mm512_fmadd_ps(xv[i], wv, a[i][j]);
    }
}

template <wt T, int MR, int NR>
__attribute__((target("avx512f"))) void tile_avx512(const float *x, const uint8_t *w, const float *scale,
                                                    int64_t K, float *y, int64_t ldy, bool acc) {
    const int64_t row_bytes = K * int64_t(weight_type_bytes(T));
    __m512 a[MR][NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) a[i][j] = _mm512_setzero_ps();
    __m512 sc[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
        if constexpr (T == wt::e4m3)
            sc[j] = _mm512_set1_ps(scale[j] * 256.0f);
        else
            sc[j] = _mm512_setzero_ps();
    }
    // The steps that cover one 64-byte line of each row, with one prefetch a line and row.
    constexpr int64_t line_steps = 64 / (16 * int64_t(weight_type_bytes(T)));
    int64_t k = 0;
    for (; k + 16 * line_steps <= K; k += 16 * line_steps) {
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j)
            prefetch_next_tile(w + j * row_bytes + k * int64_t(weight_type_bytes(T)), NR * row_bytes);
#pragma GCC unroll 4
        for (int64_t l = 0; l < line_steps; ++l) step512<T, MR, NR>(x, w, row_bytes, K, k + 16 * l, sc, a);
    }
    for (; k + 16 <= K; k += 16) step512<T, MR, NR>(x, w, row_bytes, K, k, sc, a);
    if (k < K) {
        const __mmask16 m = __mmask16((1u << (K - k)) - 1u);
        __m512 xv[MR];
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) xv[i] = _mm512_maskz_loadu_ps(m, x + i * K + k);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
            const __m512 wv = load_w512_tail<T>(w + j * row_bytes, k, K - k, m, sc[j]);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) a[i][j] = _mm512_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
            const float s = _mm512_reduce_add_ps(a[i][j]);
            y[i * ldy + j] = acc ? y[i * ldy + j] + s : s;
        }
}

// --- AVX2: 8 weights a step ---

__attribute__((target("avx2,fma,f16c"))) inline float hsum256(__m256 v) {
    __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    __m128 sh = _mm_movehdup_ps(lo);
    __m128 s = _mm_add_ps(lo, sh);
    sh = _mm_movehl_ps(sh, s);
    return _mm_cvtss_f32(_mm_add_ss(s, sh));
}

// As e4m3_over_256_512, 8 codes.
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 e4m3_over_256_256(__m128i codes) {
    const __m128i h = _mm_slli_epi16(_mm_cvtepi8_epi16(codes), 7);
    return _mm256_cvtph_ps(_mm_and_si128(h, _mm_set1_epi16(int16_t(0xBFFF))));
}

template <wt T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256 load_w256(const uint8_t *row, int64_t p,
                                                                                __m256 scale) {
    if constexpr (T == wt::f32) {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(row) + p);
    } else if constexpr (T == wt::bf16) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(row + 2 * p));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    } else {
        const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(row + p));
        return _mm256_mul_ps(e4m3_over_256_256(c), scale);
    }
}

template <wt T>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline __m256
load_w256_tail(const uint8_t *row, int64_t p, int64_t n, __m256i m, __m256 scale) {
    if constexpr (T == wt::f32) {
        return _mm256_maskload_ps(reinterpret_cast<const float *>(row) + p, m);
    } else {
        alignas(32) uint8_t pad[32] = {};
        const size_t es = T == wt::bf16 ? 2 : 1;
        std::memcpy(pad, row + p * int64_t(es), size_t(n) * es);
        return load_w256<T>(pad, 0, scale);
    }
}

template <wt T, int MR, int NR>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const float *x, const uint8_t *w, const float *scale,
                                                        int64_t K, float *y, int64_t ldy, bool acc) {
    const int64_t row_bytes = K * int64_t(weight_type_bytes(T));
    __m256 a[MR][NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) a[i][j] = _mm256_setzero_ps();
    __m256 sc[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
        if constexpr (T == wt::e4m3)
            sc[j] = _mm256_set1_ps(scale[j] * 256.0f);
        else
            sc[j] = _mm256_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[MR];
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * K + k);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
            prefetch_next_tile(w + j * row_bytes + k * int64_t(weight_type_bytes(T)), NR * row_bytes);
            const __m256 wv = load_w256<T>(w + j * row_bytes, k, sc[j]);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) a[i][j] = _mm256_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
    if (k < K) {
        alignas(32) static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ones + 8 - (K - k)));
        __m256 xv[MR];
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_maskload_ps(x + i * K + k, m);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
            const __m256 wv = load_w256_tail<T>(w + j * row_bytes, k, K - k, m, sc[j]);
#pragma GCC unroll 4
            for (int i = 0; i < MR; ++i) a[i][j] = _mm256_fmadd_ps(xv[i], wv, a[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
            const float s = hsum256(a[i][j]);
            y[i * ldy + j] = acc ? y[i * ldy + j] + s : s;
        }
}
#endif

// Portable kernel: 8 interleaved partial sums per element, combined pairwise. BF16 and E4M3
// rows are widened into a per-thread fp32 copy first, then take the f32 code itself.
template <int MR, int NR>
void tile_generic_f32(const float *x, const float *w, int64_t K, float *y, int64_t ldy, bool acc) {
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const float *xr = x + i * K, *wr = w + j * K;
            for (int64_t k = 0; k < K; ++k) p[k & 7] += xr[k] * wr[k];
            const float s = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
            y[i * ldy + j] = acc ? y[i * ldy + j] + s : s;
        }
}

template <wt T, int MR, int NR>
void tile_generic(const float *x, const uint8_t *w, const float *scale, int64_t K, float *y, int64_t ldy,
                  bool acc) {
    if constexpr (T == wt::f32) {
        tile_generic_f32<MR, NR>(x, reinterpret_cast<const float *>(w), K, y, ldy, acc);
    } else {
        thread_local std::vector<float> wide;
        wide.resize(size_t(NR * K));
        const int64_t row_bytes = K * int64_t(weight_type_bytes(T));
        for (int j = 0; j < NR; ++j) {
            const float s = T == wt::e4m3 ? scale[j] : 1.0f;
            for (int64_t k = 0; k < K; ++k)
                wide[size_t(j * K + k)] = weight_value<T>(w + j * row_bytes, k, s);
        }
        tile_generic_f32<MR, NR>(x, wide.data(), K, y, ldy, acc);
    }
}

struct kernel_set {
    const char *name;
    int mr, nr;
    tile_fn tiles[3][4][4]; // [weight_type][mr-1][nr-1]
};

#define ES_TILES_T(F, T)                                                                                     \
    {                                                                                                        \
        {F<T, 1, 1>, F<T, 1, 2>, F<T, 1, 3>, F<T, 1, 4>}, {F<T, 2, 1>, F<T, 2, 2>, F<T, 2, 3>, F<T, 2, 4>},  \
            {F<T, 3, 1>, F<T, 3, 2>, F<T, 3, 3>, F<T, 3, 4>},                                                \
            {F<T, 4, 1>, F<T, 4, 2>, F<T, 4, 3>, F<T, 4, 4>},                                                \
    }
#define ES_TILES(F)                                                                                          \
    { ES_TILES_T(F, wt::f32), ES_TILES_T(F, wt::bf16), ES_TILES_T(F, wt::e4m3) }

#if ES_X86
// F16C (the AVX2 kernel's E4M3 widening); CPUID leaf 1, as not every compiler's
// __builtin_cpu_supports knows the name.
bool has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

// Best first; gemm_nt uses the first.
const std::vector<kernel_set> &kernels_here() {
    static const std::vector<kernel_set> sets = [] {
        std::vector<kernel_set> s;
#if ES_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) s.push_back(kernel_set{"avx512", 4, 4, ES_TILES(tile_avx512)});
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c())
            s.push_back(kernel_set{"avx2", 2, 4, ES_TILES(tile_avx2)});
#endif
        s.push_back(kernel_set{"generic", 4, 4, ES_TILES(tile_generic)});
        return s;
    }();
    return sets;
}

void run_gemm(const kernel_set &ks, const float *x, int64_t M, const weights_view &w, int64_t N, int64_t K,
              float *y, bool accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K == 0) {
        if (!accumulate) std::fill(y, y + M * N, 0.0f);
        return;
    }
    const int MR = ks.mr, NR = ks.nr;
    const auto &tiles = ks.tiles[int(w.type)];
    const uint8_t *wb = static_cast<const uint8_t *>(w.data);
    const int64_t row_bytes = K * int64_t(weight_type_bytes(w.type));
    // Blocks: 64 rows of x (a few L1-sized row tiles) × 32 rows of w (L2-resident, reused by
    // every row block). With one row block (decode) no weight is reused, so blocks start at 512
    // rows of w: long streams that the next-tile prefetch runs through. Small problems split
    // columns finer so every thread streams a share of the weights.
    const int threads = omp_get_max_threads();
    const int64_t MB = 64;
    const int64_t m_blocks = (M + MB - 1) / MB;
    int64_t NB = m_blocks == 1 ? 512 : 32;
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
                    tiles[mr - 1][nr - 1](x + m0 * K, wb + n0 * row_bytes, w.scale ? w.scale + n0 : nullptr,
                                          K, y + m0 * N + n0, N, accumulate);
                }
            }
        }
    }
}

} // namespace

const char *gemm_kernel_name() { return kernels_here().front().name; }

std::vector<const char *> gemm_kernels_here() {
    std::vector<const char *> names;
    for (const kernel_set &k : kernels_here()) names.push_back(k.name);
    return names;
}

void gemm_nt(const float *x, int64_t M, const weights_view &w, int64_t N, int64_t K, float *y,
             bool accumulate) {
    run_gemm(kernels_here().front(), x, M, w, N, K, y, accumulate);
}

void gemm_nt_with(const char *kernel, const float *x, int64_t M, const weights_view &w, int64_t N, int64_t K,
                  float *y, bool accumulate) {
    for (const kernel_set &k : kernels_here())
        if (std::string(k.name) == kernel) return run_gemm(k, x, M, w, N, K, y, accumulate);
    throw std::invalid_argument(std::string("gemm_nt_with: no kernel '") + kernel + "' on this machine");
}

void widen_row(const weights_view &w, int64_t K, int64_t row, float *out) {
    const uint8_t *r = static_cast<const uint8_t *>(w.data) + row * K * int64_t(weight_type_bytes(w.type));
    switch (w.type) {
    case wt::f32:
        std::memcpy(out, r, size_t(K) * sizeof(float));
        return;
    case wt::bf16:
        for (int64_t k = 0; k < K; ++k) out[k] = weight_value<wt::bf16>(r, k, 1.0f);
        return;
    case wt::e4m3:
        for (int64_t k = 0; k < K; ++k) out[k] = weight_value<wt::e4m3>(r, k, w.scale[row]);
        return;
    }
}

} // namespace es::cpu
