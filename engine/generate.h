// Single-sequence generation on a backend: chunked prefill, then decode with the sampler.
// Used by the CLI and the reference tests; the multi-request runtime (scheduler, block pool)
// drives backends directly.
#pragma once

#include "backend.h"
#include "sampler.h"

#include <functional>
#include <string>
#include <vector>

namespace es {

struct generate_result {
    std::vector<int32_t> tokens;     // generated ids (stop token excluded)
    std::string finish_reason;       // "stop" (stop id), "length" (max_tokens or context), "cancelled"
    double ttft_ms = 0.0;            // start → first token sampled
    double prefill_ms = 0.0;
    double decode_ms = 0.0;          // first token → last token
    uint64_t seed = 0;
};

struct generate_params {
    int32_t prefill_chunk = 512;
    // Called for each generated token (stop tokens excluded); return false to stop.
    std::function<bool(int32_t)> on_token;
};

result<generate_result> generate_tokens(backend &be, const std::vector<int32_t> &prompt, const sampling_params &sp,
                                        const generate_params &gp = {});

} // namespace es
