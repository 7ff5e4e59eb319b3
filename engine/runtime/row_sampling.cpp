// row_sampling.h: what to ask a backend for, and a row's token from what came back.
#include "engine/runtime/row_sampling.h"

#include <algorithm>

namespace es {

void request_sampling(const backend &be, batch &b, std::span<const sampled_row> rows) {
    b.top_n = 0;
    b.temperatures.clear();
    b.sampling.clear();
    b.penalties.clear();
    if (rows.empty()) return; // no rows: no candidates (one CUDA graph fewer: top_n is part of its key)
    if (std::all_of(rows.begin(), rows.end(), [](const sampled_row &r) { return r.smp->picks_top(); })) {
        if (be.supports_candidates()) b.top_n = 1;
        return;
    }
    if (!be.supports_sampling()) return;
    for (const sampled_row &r : rows) b.sampling.push_back(r.smp->spec(r.prompt, r.output, r.input_index, b.penalties));
}

result<int32_t> token_of_row(backend &be, forward_output &out, int32_t row, const sampled_row &r,
                             std::vector<float> &scratch) {
    const int64_t V = be.config().n_vocab;
    if (!out.sampled.empty()) {
        if (size_t(row) >= out.sampled.size())
            return error{"the backend returned no draw for row " + std::to_string(row)};
        const int32_t id = out.sampled[size_t(row)];
        if (id < 0 || id >= V) return error{"the backend drew token " + std::to_string(id) + ", outside the vocabulary"};
        return id;
    }
    const logit_candidate_rows &cr = out.candidates;
    if (cr.top_n > 0 && r.smp->picks_top()) {
        const size_t at = size_t(row) * size_t(cr.top_n);
        if (cr.ids.size() <= at) return error{"the backend returned too few logit candidates for row " + std::to_string(row)};
        return std::max(cr.ids[at], 0); // −1: every logit NaN, whose top is id 0
    }
    if (cr.top_n > 0 || out.logits.size() < size_t(row + 1) * size_t(V)) {
        scratch.resize(size_t(V));
        if (auto s = be.logits_row(row, scratch); !s) return s.err();
        return r.smp->sample(scratch, r.prompt, r.output);
    }
    return r.smp->sample(std::span<float>(out.logits.data() + size_t(row) * size_t(V), size_t(V)), r.prompt, r.output);
}

} // namespace es
