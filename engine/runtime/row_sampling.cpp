// row_sampling.h: candidates to ask for, and a row's token from them or from the full row.
#include "engine/runtime/row_sampling.h"

#include <algorithm>
#include <chrono>

namespace es {

void request_candidates(const backend &be, batch &b, std::span<sampler *const> samplers) {
    b.temperatures.clear();
    // No rows to sample: no candidates (one CUDA graph fewer: top_n is part of its key).
    b.top_n = be.supports_candidates() && !samplers.empty() ? k_sample_top_n : 0;
    if (!b.top_n) return;
    if (std::all_of(samplers.begin(), samplers.end(), [](const sampler *s) { return s->picks_top(); })) b.top_n = 1;
    for (const sampler *s : samplers) b.temperatures.push_back(s->sum_temperature());
}

result<int32_t> sample_output_row(backend &be, forward_output &out, int32_t row, sampler &smp,
                                  std::span<const int32_t> prompt, std::span<const int32_t> output,
                                  std::vector<float> &scratch, bool *fetched) {
    const int64_t V = be.config().n_vocab;
    if (fetched) *fetched = false;
    const logit_candidate_rows &cr = out.candidates;
    if (cr.top_n > 0) {
        const size_t n = size_t(cr.top_n), r = size_t(row);
        if (cr.ids.size() < (r + 1) * n || cr.logits.size() < (r + 1) * n || cr.row_sum.size() <= r)
            return error{"the backend returned too few logit candidates for row " + std::to_string(row)};
        logit_candidates lc;
        lc.ids = std::span<const int32_t>(cr.ids).subspan(r * n, n);
        lc.logits = std::span<const float>(cr.logits).subspan(r * n, n);
        lc.sum = cr.row_sum[r];
        lc.sum_temperature = smp.sum_temperature();
        lc.n_vocab = V;
        if (auto id = smp.sample_candidates(lc, prompt, output)) return *id;
        scratch.resize(size_t(V));
        if (auto s = be.logits_row(row, scratch); !s) return s.err();
        if (fetched) *fetched = true;
        return smp.sample(scratch, prompt, output);
    }
    if (out.logits.size() < size_t(row + 1) * size_t(V))
        return error{"the backend returned no logits for row " + std::to_string(row)};
    return smp.sample(std::span<float>(out.logits.data() + size_t(row) * size_t(V), size_t(V)), prompt,
                      output);
}

} // namespace es
