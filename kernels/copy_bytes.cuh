// copy_bytes: dst[0, bytes) = src[0, bytes), as a kernel in a decode step's CUDA graph, where src
// or dst may be pinned host memory the device reads or writes directly (unified addressing): the
// step's inputs from the host's pinned mirror at the graph's start, its download block to the
// host's pinned copy at its end — two kernel nodes instead of the copies' calls around a replay
// (cuda/backend/step.cpp: zero-copy I/O). dst and src must not overlap.
// Fed tokens (backend::submit): with fed_n > 0, the int32 tokens at byte fed_offset of the block
// (16-byte aligned, like both ends) that are negative are replaced on the way by the previous
// step's top candidate of output row −token − 1: fed_ids[(−token − 1) · fed_stride] (device
// memory: the previous forward's candidate ids).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct copy_bytes_params {
    void *dst = nullptr;
    const void *src = nullptr;
    size_t bytes = 0;
    size_t fed_offset = 0;            // bytes from the block's start to its tokens
    int64_t fed_n = 0;                // tokens there; 0: a plain copy
    const int32_t *fed_ids = nullptr; // [rows, fed_stride]
    int64_t fed_stride = 1;
};

void copy_bytes_ref(const copy_bytes_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_copy_bytes(const copy_bytes_params &p, cudaStream_t stream);
#endif

} // namespace es
