// argmax: index of the largest value of each row (greedy sampling on the GPU). Ties go to the
// lowest index, as std::max_element; NaN never wins.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct argmax_params {
    const float *x = nullptr; // [n_rows, n]
    int32_t *out = nullptr;   // [n_rows]
    int64_t n_rows = 0, n = 0;
};

void argmax_ref(const argmax_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_argmax(const argmax_params &p, cudaStream_t stream);
#endif

} // namespace es
