// Generation in tests goes through the engine, the runtime the app, the server and the CLI use:
// one request of prompt ids, its tokens and finish reason collected from the stream.
#pragma once

#include "engine/runtime/engine.h"

#include <chrono>
#include <string>
#include <vector>

namespace es_test {

struct generation {
    std::vector<int32_t> tokens; // generated ids (a stop id excluded)
    std::string finish_reason;   // "stop", "length", "cancelled"; empty when it failed
    std::string error;           // why it failed
    bool ok() const { return error.empty(); }
};

// Blocks until the request ends (at most `timeout`).
inline generation generate_with_engine(es::engine &e, const std::vector<int32_t> &prompt, const es::sampling_params &sp,
                                       std::chrono::seconds timeout = std::chrono::seconds(120)) {
    generation g;
    es::request_params rp;
    rp.prompt_ids = prompt;
    rp.sampling = sp;
    auto stream = e.submit(std::move(rp));
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (es::request_event ev;;) {
        if (std::chrono::steady_clock::now() > until) {
            g.error = "timed out";
            e.cancel(stream->id());
            return g;
        }
        if (!stream->wait_pop(ev, std::chrono::milliseconds(100))) continue;
        if (ev.kind == es::event_kind::failed) {
            g.error = ev.error.empty() ? "failed" : ev.error;
            return g;
        }
        if (ev.kind == es::event_kind::finished) {
            g.finish_reason = ev.finish_reason;
            return g;
        }
        g.tokens.insert(g.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    }
}

} // namespace es_test
