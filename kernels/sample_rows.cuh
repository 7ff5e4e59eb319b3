// sample_rows: one token drawn from each logits row on the device, exactly as
// engine/core/sampling.h defines the draw (its twin, sample_rows_ref, is that header's
// sampling_draw row by row).
#pragma once

#include "engine/core/sampling.h"
#include "kernels/kernel_common.h"

#include <string>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

namespace es {

struct sample_rows_params {
    float *logits = nullptr;            // [n_rows, n_vocab]; penalties are applied in place
    const row_sampling *rows = nullptr; // [n_rows]
    const int32_t *tokens = nullptr;    // the batch's tokens (row_sampling::extra_token indexes them)
    int32_t *ids = nullptr;             // [n_rows] the drawn token
    float *values = nullptr;            // [n_rows] its logit after penalties (or null)
    float *row_max = nullptr;           // [n_rows] the row's max after penalties (or null)
    float *scratch = nullptr;           // [n_rows, n_vocab] the weights w (device only)
    int64_t n_rows = 0, n_vocab = 0;
};

void sample_rows_ref(const sample_rows_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_sample_rows(const sample_rows_params &p, cudaStream_t stream);
// How launch_sample_rows runs rows of n_vocab ids on this device, in words (the self-test's note).
std::string sample_rows_path(int64_t n_vocab);
#endif

} // namespace es
