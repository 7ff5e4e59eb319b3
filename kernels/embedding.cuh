// embedding: widen the BF16 rows of the token-embedding table into the fp32 residual stream.
// Token ids are validated by the caller (the backend checks the batch before any launch).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct embedding_params {
    const int32_t *tokens = nullptr; // [n_tokens]
    const bf16_t *table = nullptr;   // [n_vocab, n_embd]
    float *out = nullptr;            // [n_tokens, n_embd]
    int64_t n_tokens = 0, n_embd = 0;
};

void embedding_ref(const embedding_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_embedding(const embedding_params &p, cudaStream_t stream);
#endif

} // namespace es
