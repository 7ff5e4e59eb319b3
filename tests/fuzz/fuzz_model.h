// Loading a model folder the fuzzers assembled, and a few greedy tokens from it when it loads.
#pragma once

#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "fuzz_support.h"

#include <chrono>
#include <vector>

namespace es::fuzz {

// The reference checkpoint the model fuzzers start from (tests/data/moe-odd: MoE with dense
// first layers, an odd head count, an untied head).
inline std::filesystem::path reference_checkpoint() {
    return std::filesystem::path(ES_FUZZ_DATA_DIR) / "moe-odd";
}

// Loads dir on the CPU (one thread, no tokenizer) and, when it loads, generates three tokens
// greedily from a short prompt through the engine: either step may fail with a message, nothing
// may crash, and every token generated lies in the vocabulary.
inline void load_and_generate(const std::filesystem::path &dir) {
    model_load_params p;
    p.kind = backend_kind::cpu;
    p.n_threads = 1;
    p.need_tokenizer = false;
    auto m = load_model(dir, p);
    if (!m) {
        ES_FUZZ_CHECK(fuzz::is_specific(m.message()));
        return;
    }
    const auto &cfg = (*m)->config;
    // Folders whose compute would take more than a moment are out of this fuzzer's scope.
    if (cfg.n_layer * cfg.n_embd * cfg.n_vocab > int64_t(1) << 30) return;
    std::vector<int32_t> prompt;
    for (int32_t id : {1, 5, 17, 42}) prompt.push_back(int32_t(id % cfg.n_vocab));
    if (int64_t(prompt.size()) + 3 >= cfg.n_ctx_train) prompt.resize(1);
    sampling_params sp;
    sp.temperature = 0.0f;
    sp.max_tokens = 3;
    // Through the engine, as the app runs a model; a KV pool just large enough for the request.
    const int64_t vocab = cfg.n_vocab;
    engine_params ep;
    ep.max_num_seqs = 1;
    ep.n_kv_blocks = 4;
    engine e(ep);
    if (const status st = e.load_model(std::move(*m)).get(); !st) {
        ES_FUZZ_CHECK(fuzz::is_specific(st.message()));
        return;
    }
    request_params rp;
    rp.prompt_ids = prompt;
    rp.sampling = sp;
    auto stream = e.submit(std::move(rp));
    for (request_event ev;;) {
        if (!stream->wait_pop(ev, std::chrono::milliseconds(100))) continue;
        if (ev.kind == event_kind::failed) {
            ES_FUZZ_CHECK(fuzz::is_specific(ev.error));
            return;
        }
        if (ev.kind == event_kind::finished) return;
        for (int32_t id : ev.token_ids) ES_FUZZ_CHECK(id >= 0 && id < vocab);
    }
}

} // namespace es::fuzz
