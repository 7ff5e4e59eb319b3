// Attention of one token's GQA group (see cpu_attention.h). On AVX-512 the scores are register
// tiles of up to 4 heads × 4 keys (each score one 16-lane accumulator over hd, FMA in order,
// then one fixed reduction, then × scale) and the weighted sum of values tiles of up to 2 heads ×
// 128 columns (each output element one FMA chain over the positions in order, from zero), so a
// key or value row is read once for several heads and no element's operations depend on its
// tile. Elsewhere, and for head sizes that are not a multiple of 16: dot and axpy per position.
#include "engine/cpu/cpu_attention.h"

#include "engine/cpu/cpu_ops.h"

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

void attend_generic(const float *q, int64_t G, int64_t hd, const float *const *k_rows, const float *const *v_rows,
                    int64_t n, float scale, float *scores, float *out) {
    for (int64_t g = 0; g < G; ++g) {
        float *s = scores + g * n;
        for (int64_t j = 0; j < n; ++j) s[j] = dot(q + g * hd, k_rows[j], hd) * scale;
        softmax(s, n);
        float *o = out + g * hd;
        std::fill(o, o + hd, 0.0f);
        for (int64_t j = 0; j < n; ++j) axpy(s[j], v_rows[j], o, hd);
    }
}

#if ES_X86
// s[g · ld_s + jj] = scale · q[g] · k[jj] for NG heads (rows of q, hd apart) and NJ keys.
template <int NG, int NJ>
__attribute__((target("avx512f"))) void scores_tile(const float *q, int64_t hd, const float *const *k, float scale,
                                                    float *s, int64_t ld_s) {
    __m512 a[NG][NJ];
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
        for (int jj = 0; jj < NJ; ++jj) a[g][jj] = _mm512_setzero_ps();
    for (int64_t c = 0; c < hd; c += 16) {
        __m512 kv[NJ];
#pragma GCC unroll 4
        for (int jj = 0; jj < NJ; ++jj) kv[jj] = _mm512_loadu_ps(k[jj] + c);
#pragma GCC unroll 4
        for (int g = 0; g < NG; ++g) {
            const __m512 qv = _mm512_loadu_ps(q + g * hd + c);
#pragma GCC unroll 4
            for (int jj = 0; jj < NJ; ++jj) a[g][jj] = _mm512_fmadd_ps(qv, kv[jj], a[g][jj]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 4
        for (int jj = 0; jj < NJ; ++jj) s[g * ld_s + jj] = _mm512_reduce_add_ps(a[g][jj]) * scale;
}

// o[g][col0 + 16c …] = Σ_j p[g · ld_p + j] · v[j][col0 + 16c …] for NG heads and NC 16-column
// chunks, positions in order.
template <int NG, int NC>
__attribute__((target("avx512f"))) void values_tile(const float *p, int64_t ld_p, const float *const *v, int64_t n,
                                                    int64_t col0, float *o, int64_t hd) {
    __m512 a[NG][NC];
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) a[g][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
        __m512 pb[NG];
#pragma GCC unroll 2
        for (int g = 0; g < NG; ++g) pb[g] = _mm512_set1_ps(p[g * ld_p + j]);
        const float *vr = v[j] + col0;
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
            const __m512 vv = _mm512_loadu_ps(vr + 16 * c);
#pragma GCC unroll 2
            for (int g = 0; g < NG; ++g) a[g][c] = _mm512_fmadd_ps(pb[g], vv, a[g][c]);
        }
    }
#pragma GCC unroll 2
    for (int g = 0; g < NG; ++g)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) _mm512_storeu_ps(o + g * hd + col0 + 16 * c, a[g][c]);
}

using scores_fn = void (*)(const float *, int64_t, const float *const *, float, float *, int64_t);
using values_fn = void (*)(const float *, int64_t, const float *const *, int64_t, int64_t, float *, int64_t);

constexpr scores_fn k_scores[4][4] = {
    {scores_tile<1, 1>, scores_tile<1, 2>, scores_tile<1, 3>, scores_tile<1, 4>},
    {scores_tile<2, 1>, scores_tile<2, 2>, scores_tile<2, 3>, scores_tile<2, 4>},
    {scores_tile<3, 1>, scores_tile<3, 2>, scores_tile<3, 3>, scores_tile<3, 4>},
    {scores_tile<4, 1>, scores_tile<4, 2>, scores_tile<4, 3>, scores_tile<4, 4>},
};
constexpr values_fn k_values[2][8] = {
    {values_tile<1, 1>, values_tile<1, 2>, values_tile<1, 3>, values_tile<1, 4>, values_tile<1, 5>,
     values_tile<1, 6>, values_tile<1, 7>, values_tile<1, 8>},
    {values_tile<2, 1>, values_tile<2, 2>, values_tile<2, 3>, values_tile<2, 4>, values_tile<2, 5>,
     values_tile<2, 6>, values_tile<2, 7>, values_tile<2, 8>},
};

bool has_avx512() {
    static const bool yes = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") != 0;
    }();
    return yes;
}

void attend_avx512(const float *q, int64_t G, int64_t hd, const float *const *k_rows, const float *const *v_rows,
                   int64_t n, float scale, float *scores, float *out) {
    for (int64_t g0 = 0; g0 < G; g0 += 4) {
        const int64_t ng = std::min<int64_t>(4, G - g0);
        for (int64_t j0 = 0; j0 < n; j0 += 4)
            k_scores[ng - 1][std::min<int64_t>(4, n - j0) - 1](q + g0 * hd, hd, k_rows + j0, scale,
                                                               scores + g0 * n + j0, n);
    }
    for (int64_t g = 0; g < G; ++g) softmax(scores + g * n, n);
    for (int64_t g0 = 0; g0 < G; g0 += 2) {
        const int64_t ng = std::min<int64_t>(2, G - g0);
        for (int64_t col0 = 0; col0 < hd; col0 += 128)
            k_values[ng - 1][std::min<int64_t>(8, (hd - col0) / 16) - 1](scores + g0 * n, n, v_rows, n, col0,
                                                                         out + g0 * hd, hd);
    }
}
#endif

} // namespace

void attend_group(const float *q, int64_t G, int64_t hd, const float *const *k_rows, const float *const *v_rows,
                  int64_t n, float scale, float *scores, float *out) {
#if ES_X86
    if (hd % 16 == 0 && has_avx512()) return attend_avx512(q, G, hd, k_rows, v_rows, n, scale, scores, out);
#endif
    attend_generic(q, G, hd, k_rows, v_rows, n, scale, scores, out);
}

const char *attention_kernel_name(int64_t hd) {
#if ES_X86
    if (hd % 16 == 0 && has_avx512()) return "avx512";
#endif
    return "generic";
}

} // namespace es::cpu
