// The self-test's profiler checks (selftest_cases.h): steps timed per phase on the device
// (batch::time_phases) through both of the backend's paths, eager launches between events and a
// replayed graph's kernel timeline, without changing what the step computes; and the device
// memory the engine gives back across loads and unloads of two models.
#include "engine/cuda/selftest/selftest_cases.h"

#include "engine/cuda/backend/cuda_backend.h"
#include "engine/runtime/engine.h"

#include <chrono>
#include <cmath>
#include <thread>

namespace es::selftest {

namespace {

// Random weights of the 21B-A3B's widths, `layers` layers (layer 0 dense, the rest MoE): the
// decode path's fused kernels (moe_front with the shared gate/up, the routed down with the
// shared down) and a dense layer.
model_config widths_21b(int64_t layers) {
    auto cfg = model_config_for_shape("ernie-4.5-21b-a3b");
    if (!cfg) throw test_failure(cfg.message());
    cfg->n_layer = layers;
    cfg->moe_layer_end = std::min<int64_t>(cfg->moe_layer_end, cfg->n_layer - 1);
    cfg->moe_layer_start = std::min(cfg->moe_layer_start, cfg->moe_layer_end);
    if (auto v = validate_model_config(*cfg); !v) throw test_failure(v.message());
    return *cfg;
}

// One forward of a single sequence: positions [start, start + tokens.size()), the last row's top
// candidate asked for (as the engine's greedy decode does).
forward_output step(backend &be, const std::vector<int32_t> &tokens, int32_t start, bool timed) {
    batch b;
    b.seqs.resize(1);
    for (int32_t i = 0; i < 8; ++i) b.seqs[0].block_table.push_back(i);
    b.tokens = tokens;
    for (size_t i = 0; i < tokens.size(); ++i) {
        b.pos.push_back(start + int32_t(i));
        b.seq.push_back(0);
    }
    b.logits_rows = {int32_t(tokens.size()) - 1};
    b.top_n = 1;
    b.temperatures = {0.0f};
    b.time_phases = timed;
    forward_output out;
    if (auto s = be.forward(b, out); !s) throw test_failure(s.message());
    return out;
}

// The figures of a timed step: phases non-negative and summing to the device's total, every
// launch in a phase with a time, and the phases a layer has (attention, MoE routed, shared,
// dense, head) all non-zero.
void timed_rows(runner &R, const std::string &name, const forward_output &out) {
    const phase_times &p = out.phases;
    R.add("profiler", name, "timed on the device (1)", p.timed && p.on_device ? 1.0 : 0.0, 1.0, false);
    R.add("profiler", name, "launches in the timeline (at least 10)", double(out.timeline.size()), 10.0, false);
    R.add("profiler", name, "|phase sum − device total| / total", std::abs(p.sum_ms() - p.total_ms) / std::max(p.total_ms, 1e-9),
          1e-6);
    double bad = 0.0, prev = -1.0;
    for (const op_time &o : out.timeline) {
        bad += !(o.dur_us >= 0.0) || !(o.start_us >= prev - 1e-6) || int(o.phase) > 5;
        prev = o.start_us;
    }
    R.add("profiler", name, "launches out of order or without a time", bad, 0.0);
    const double least = std::min({p.attention_ms, p.moe_ms, p.moe_shared_ms, p.dense_ms, p.head_ms});
    R.add("profiler", name, "smallest of attention, MoE routed, MoE shared, dense, head (ms, > 0)", least, 1e-6, false);
    R.info("profiler", name, "device total (µs)", 1000.0 * p.total_ms);
    R.info("profiler", name, "other, not in a phase (µs)", 1000.0 * p.other_ms);
}

} // namespace

void phase_timing_checks(runner &R, const std::filesystem::path &) {
    const std::string name = "ernie-4.5-21b-a3b widths, 3 layers, random fp8 weights, steps timed per phase";
    R.run("profiler", name, [&] {
        const model_config cfg = widths_21b(3);
        cuda_backend_params p;
        p.precision = weight_precision::fp8;
        auto be = make_cuda_backend_random(cfg, 777, p);
        if (!be) throw test_failure(be.message());
        if (auto s = (*be)->init_kv_cache({16, 8}); !s) throw test_failure(s.message());
        std::vector<int32_t> prompt(40);
        std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.n_vocab - 1));
        for (auto &t : prompt) t = tok(rng());
        // A prompt of 40 tokens: eager launches between events.
        const forward_output pre = step(**be, prompt, 0, true);
        timed_rows(R, name + ", prompt (eager)", pre);
        // Decode: the first step of a key runs eagerly, the second captures its graph, later ones
        // replay it; the timed replay reads the kernels' timeline.
        int32_t tok_next = pre.candidates.ids.empty() ? prompt.back() : pre.candidates.ids[0];
        int32_t pos = int32_t(prompt.size());
        for (int i = 0; i < 4; ++i, ++pos) {
            const forward_output o = step(**be, {tok_next}, pos, false);
            if (o.phases.timed || !o.timeline.empty()) throw test_failure("an untimed step came back timed");
            tok_next = o.candidates.ids[0];
        }
        // The same position untimed and timed: the same candidate (the KV write is the same).
        const forward_output plain = step(**be, {tok_next}, pos, false);
        const forward_output timed = step(**be, {tok_next}, pos, true);
        timed_rows(R, name + ", decode (graph replay)", timed);
        R.add("profiler", name + ", decode (graph replay)", "candidate differing from the untimed step",
              plain.candidates.ids[0] != timed.candidates.ids[0] ? 1.0 : 0.0, 0.0);
        R.add("profiler", name + ", decode (graph replay)", "|logit − the untimed step's| / |logit|",
              std::abs(plain.candidates.logits[0] - timed.candidates.logits[0]) /
                  std::max(std::abs(plain.candidates.logits[0]), 1e-6f),
              1e-4);
        // After a timed step the kernels record nothing: the next step is untimed again.
        const forward_output after = step(**be, {tok_next}, pos + 1, false);
        R.add("profiler", name + ", decode (graph replay)", "step after the timed one with a timeline",
              after.timeline.empty() && !after.phases.timed ? 0.0 : 1.0, 0.0);
    });
}

// Ten cycles of loading two models through the engine and unloading them, a request each: the
// device's free memory after the last unload against before the first (one cycle ran before, so
// that what the libraries load once per process, kernels' modules, cuBLASLt's handles, is in
// both).
void memory_cycle_checks(runner &R, const std::filesystem::path &) {
    const std::string name = "engine: 10 load/unload cycles of two models (0.3b and 21b-a3b widths, random fp8)";
    R.run("profiler", name, [&] {
        auto small = model_config_for_shape("ernie-4.5-0.3b");
        if (!small) throw test_failure(small.message());
        small->n_layer = 2;
        const model_config big = widths_21b(3);
        auto free_now = [] {
            size_t f = 0, t = 0;
            if (cudaDeviceSynchronize() != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess)
                throw test_failure("cudaMemGetInfo failed");
            return double(f);
        };
        engine_params ep;
        ep.load.kind = backend_kind::cuda;
        ep.load.precision = weight_precision::fp8;
        ep.load.need_tokenizer = false;
        ep.max_num_seqs = 2;
        ep.gpu_memory_utilization = 0.5; // the KV pool sized from the device, as the app's
        engine eng(ep);
        auto cycle = [&](const model_config &cfg) {
            if (auto s = eng.load_random_model(cfg, 11).get(); !s) throw test_failure(s.message());
            request_params r;
            r.prompt_ids = {5, 6, 7, 8, 9, 10, 11, 12};
            r.sampling.max_tokens = 4;
            r.sampling.stop_ids.clear();
            auto st = eng.submit(r);
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
            for (bool done = false; !done;) {
                request_event ev;
                while (st->try_pop(ev))
                    if (ev.kind == event_kind::failed) throw test_failure("request failed: " + ev.error);
                    else if (ev.kind != event_kind::token) done = true;
                if (std::chrono::steady_clock::now() > until) throw test_failure("a request did not finish in 60 s");
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            eng.unload_model();
            for (int i = 0; eng.has_model(); ++i) {
                if (i > 60000) throw test_failure("the model was not unloaded in 60 s");
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
        };
        cycle(*small);
        cycle(big);
        const double before = free_now();
        for (int i = 0; i < 10; ++i) {
            cycle(*small);
            cycle(big);
        }
        const double after = free_now();
        R.add("profiler", name, "device memory not given back (MiB)", std::max(0.0, before - after) / 1048576.0, 2.0);
        R.info("profiler", name, "free before (MiB)", before / 1048576.0);
        R.info("profiler", name, "free after (MiB)", after / 1048576.0);
    });
}

} // namespace es::selftest
