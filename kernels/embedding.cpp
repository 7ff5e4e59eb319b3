// CPU twin of embedding (see embedding.cuh).
#include "kernels/embedding.cuh"

namespace es {

void embedding_ref(const embedding_params &p) {
    for (int64_t t = 0; t < p.n_tokens; ++t)
        for (int64_t i = 0; i < p.n_embd; ++i)
            p.out[t * p.n_embd + i] = bf16_bits_to_float(p.table[int64_t(p.tokens[t]) * p.n_embd + i]);
}

} // namespace es
