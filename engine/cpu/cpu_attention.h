// The CPU backend's attention for one query token: the heads of one GQA group (the query heads
// that share a KV head) over the token's positions, read through row pointers (the paged cache).
// Register-tiled on AVX-512 (a key or value row is loaded once for several heads, keys in pairs),
// a plain loop elsewhere. Every output element's operations depend only on its own head's query,
// the keys and the values — not on how many heads are computed together, the tile it falls in,
// the batch or the thread — so a token's attention is the same bits alone or batched.
#pragma once

#include <cstdint>

namespace es::cpu {

// For each head g < G: out[g] = softmax(scale · q[g] · Kᵀ) · V over positions j < n, where
// q: G rows of hd floats (contiguous), k_rows[j] / v_rows[j]: position j's key / value (hd
// floats), scores: scratch of G · n floats, out: G rows of hd floats. Softmax in fp32 with the
// maximum subtracted (cpu_ops.h's softmax).
void attend_group(const float *q, int64_t G, int64_t hd, const float *const *k_rows, const float *const *v_rows,
                  int64_t n, float scale, float *scores, float *out);

// Which code attend_group runs here: "avx512" (hd a multiple of 16) or "generic".
const char *attention_kernel_name(int64_t hd);

} // namespace es::cpu
