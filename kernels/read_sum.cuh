// read_sum: *out = XOR of every 32-bit word of src[0, bytes) (bytes a multiple of 16, src 16-byte
// aligned). A pure streaming read the compiler cannot drop, with an exact, order-free result: the
// device's read bandwidth is timed with it (cuda_backend::measure_read_bandwidth, the bench's MBU
// denominator), and its twin checks what it read.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct read_sum_params {
    const void *src = nullptr;
    size_t bytes = 0;
    unsigned *out = nullptr; // device memory, zeroed by the caller
};

void read_sum_ref(const read_sum_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
// blocks: the grid (0: 8 a streaming multiprocessor of the current device).
cudaError_t launch_read_sum(const read_sum_params &p, cudaStream_t stream, unsigned blocks = 0);
#endif

} // namespace es
