// Vectorized fp32 building blocks of the CPU backend. Each is compiled for AVX-512, AVX2 and
// baseline x86-64 and picked at load time (GCC target_clones), so one binary runs everywhere
// and uses the machine's widest vectors.
#pragma once

#include <cstddef>
#include <cstdint>

namespace es::cpu {

// y = x / sqrt(mean(x²) + eps) * w        x, y, w: [n]
void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps);

// Interleaved (GPT-J) RoPE on one head in place: pairs (2i, 2i+1) rotated by cos_/sin_[i].
void rope_interleaved(float *x, const float *cos_, const float *sin_, int64_t head_dim);

// out[i] = silu(g[i]) * u[i]
void silu_mul(const float *g, const float *u, float *out, int64_t n);

float dot(const float *a, const float *b, int64_t n);
// y += a * x
void axpy(float a, const float *x, float *y, int64_t n);

// In-place softmax over n values (max-subtracted, fp32).
void softmax(float *x, int64_t n);

} // namespace es::cpu
