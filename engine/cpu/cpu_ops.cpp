// Vectorized fp32 helpers for the CPU backend (see cpu_ops.h). Plain loops written so GCC
// vectorizes them; target_clones builds AVX-512 / AVX2 / baseline variants of each (not under
// ASan or TSan: their runtimes are not up yet when the loader runs the ifunc resolvers).
#include "engine/cpu/cpu_ops.h"

#include <cmath>

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define ES_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ES_CLONES
#endif

namespace es::cpu {

ES_CLONES void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * scale);
}

ES_CLONES void rope_interleaved(float *x, const float *cos_, const float *sin_, int64_t head_dim) {
    const int64_t half = head_dim / 2;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
        const float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * cos_[i] - b * sin_[i];
        x[2 * i + 1] = b * cos_[i] + a * sin_[i];
    }
}

ES_CLONES void silu_mul(const float *g, const float *u, float *out, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

ES_CLONES float dot(const float *a, const float *b, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

ES_CLONES void axpy(float a, const float *x, float *y, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

ES_CLONES void softmax(float *x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

} // namespace es::cpu
