// The self-test's profiler checks (selftest_cases.h): steps timed per phase on the device
// (batch::time_phases) through both of the backend's paths, eager launches between events and a
// replayed graph's kernel timeline, without changing what the step computes; the device memory
// the engine gives back across loads and unloads of two models; and the KV pool mapped on demand
// (kv_pool.h): grown in steps, the top blocks computing what the bottom ones do, trimmed with the
// memory back on the device, and a grow past the free memory failing cleanly (backend and engine).
#include "engine/cuda/selftest/selftest_cases.h"

#include "engine/cuda/backend/cuda_backend.h"
#include "engine/runtime/engine.h"

#include <algorithm>
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

namespace {

double device_free_bytes() {
    size_t f = 0, t = 0;
    if (cudaDeviceSynchronize() != cudaSuccess || cudaMemGetInfo(&f, &t) != cudaSuccess)
        throw test_failure("cudaMemGetInfo failed");
    return double(f);
}

double mib_of(double bytes) { return bytes / 1048576.0; }

// One sequence's forward over the given block table: positions [start, start + tokens.size()),
// the last row's full logits.
std::vector<float> logits_at(backend &be, const std::vector<int32_t> &table, const std::vector<int32_t> &tokens,
                             int32_t start) {
    batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = table;
    b.tokens = tokens;
    for (size_t i = 0; i < tokens.size(); ++i) {
        b.pos.push_back(start + int32_t(i));
        b.seq.push_back(0);
    }
    b.logits_rows = {int32_t(tokens.size()) - 1};
    forward_output out;
    if (auto s = be.forward(b, out); !s) throw test_failure(s.message());
    if (out.logits.empty()) throw test_failure("a forward returned no logits row");
    return out.logits;
}

// A prompt and decode steps of the given tokens (the first `decodes` of them) of one sequence
// over `table`: each step's logits row. (Fixed tokens, not each step's pick: two runs whose logits
// differ in the last bits, as split GEMVs' atomic sums may, still feed the same tokens.)
std::vector<std::vector<float>> run_sequence(backend &be, const std::vector<int32_t> &table,
                                             const std::vector<int32_t> &prompt, const std::vector<int32_t> &tokens,
                                             size_t decodes) {
    std::vector<std::vector<float>> rows{logits_at(be, table, prompt, 0)};
    for (size_t i = 0; i < decodes; ++i) rows.push_back(logits_at(be, table, {tokens[i]}, int32_t(prompt.size() + i)));
    return rows;
}

// Random token ids of the model's vocabulary.
std::vector<int32_t> random_tokens(const model_config &cfg, size_t n) {
    std::vector<int32_t> t(n);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.n_vocab - 1));
    for (auto &x : t) x = tok(rng());
    return t;
}

// Logits that agree to the split GEMVs' atomic sums (phase_timing_checks' limit): a block's
// address is all that differs; wrong or lost K/V moves them by far more.
constexpr double k_same_logits = 1e-4;

// max |a − b| / max |a| over two logits rows.
double row_diff(const std::vector<float> &a, const std::vector<float> &b) {
    if (a.size() != b.size()) return 1e30;
    double d = 0.0, m = 1e-30;
    for (size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, double(std::abs(a[i] - b[i])));
        m = std::max(m, double(std::abs(a[i])));
    }
    return d / m;
}

std::vector<int32_t> blocks_from(int32_t first, int32_t n) {
    std::vector<int32_t> t;
    for (int32_t i = 0; i < n; ++i) t.push_back(first + i);
    return t;
}

// Parses the granule out of the pool's note ("… (2 MiB granules, …"); 2 MiB when absent.
double granule_of(const backend_memory &m) {
    const size_t at = m.kv_note.find(" MiB granules");
    if (at == std::string::npos) return 2.0 * 1048576.0;
    size_t from = at;
    while (from > 0 && std::isdigit(static_cast<unsigned char>(m.kv_note[from - 1]))) --from;
    return std::stod(m.kv_note.substr(from, at - from)) * 1048576.0;
}

} // namespace

// The CUDA backend's KV pool on demand (kv_cache_params::on_demand): reserved with nothing mapped;
// grown in steps, the device's free memory falling by what the pool says it maps; a sequence run
// in the pool's top blocks computing what the same sequence computes in its bottom blocks; a trim
// back to the bottom step returning the device's free memory to within one allocation granule of
// where it was, the bottom blocks' K/V intact (their last decode computes again what it did, and
// what the top blocks' did); a batch naming a block the trim took refused; regrown and trimmed to
// nothing, all of the pool's memory given back.
void kv_pool_checks(runner &R, const std::filesystem::path &) {
    const std::string name = "KV pool on demand: 21b-a3b widths, 3 layers, random fp8 weights, grow, top blocks, trim";
    R.run("memory", name, [&] {
        const model_config cfg = widths_21b(3);
        cuda_backend_params p;
        p.precision = weight_precision::fp8;
        auto made = make_cuda_backend_random(cfg, 4242, p);
        if (!made) throw test_failure(made.message());
        backend &be = **made;
        const int32_t capacity = 8192; // 128 MiB a region at BF16, 768 MiB in all
        if (auto s = be.init_kv_cache({16, capacity, true}); !s) throw test_failure(s.message());
        backend_memory m = be.memory();
        const bool vmm = m.kv_note.rfind("mapped on demand", 0) == 0;
        R.add("memory", name, "the pool is mapped on demand (1)", vmm ? 1.0 : 0.0, 1.0, false, m.kv_note);
        if (!vmm) return;
        const double granule = granule_of(m);
        R.info("memory", name, "allocation granule (MiB)", mib_of(granule));
        R.add("memory", name, "blocks mapped after the reservation", be.kv_mapped_blocks(), 0.0);
        R.add("memory", name, "capacity (blocks)", be.kv_capacity_blocks(), capacity, false);

        const std::vector<int32_t> prompt = random_tokens(cfg, 40), decode = random_tokens(cfg, 7);
        const std::vector<int32_t> low = blocks_from(0, 8), top = blocks_from(capacity - 8, 8);
        // The bottom step, and the sequence's prompt and seven decodes in blocks 0..7 (this also
        // sizes the workspace and captures the decode graphs of these steps, so that the device's
        // free memory moves with the pool's alone from here on).
        if (auto s = be.kv_ensure_blocks(8); !s) throw test_failure(s.message());
        const int32_t base_blocks = be.kv_mapped_blocks();
        R.info("memory", name, "blocks mapped by the first step", base_blocks);
        const auto low_rows = run_sequence(be, low, prompt, decode, decode.size());
        const double free_base = device_free_bytes(), mapped_base = double(be.memory().kv_mapped);

        // Grow in steps: the device's free memory falls by what the pool maps.
        for (const int32_t n : {capacity / 8, capacity / 2, capacity}) {
            if (auto s = be.kv_ensure_blocks(n); !s) throw test_failure(s.message());
            const double mapped = double(be.memory().kv_mapped), taken = free_base - device_free_bytes();
            const std::string at = " (blocks up to " + std::to_string(n) + ")";
            R.add("memory", name, "blocks mapped, at least" + at, be.kv_mapped_blocks(), n, false);
            R.add("memory", name, "|device memory taken − pool's mapped growth| (MiB, 2 granules + 1%)" + at,
                  mib_of(std::abs(taken - (mapped - mapped_base))),
                  mib_of(2.0 * granule + 0.01 * (mapped - mapped_base)));
        }
        R.add("memory", name, "pool's memory when wholly mapped − its capacity's bytes (MiB, < one granule a region)",
              mib_of(double(be.memory().kv_mapped) - double(capacity) * double(be.kv_block_bytes())),
              mib_of(granule * 2.0 * double(cfg.n_layer)));

        // The same sequence in the top blocks: the same logits (a block's address is all that
        // differs).
        const auto top_rows = run_sequence(be, top, prompt, decode, decode.size());
        double worst = 0.0;
        for (size_t i = 0; i < low_rows.size(); ++i) worst = std::max(worst, row_diff(low_rows[i], top_rows[i]));
        R.add("memory", name, "max |logit in the top blocks − in the bottom ones| / max |logit|", worst, k_same_logits);

        // Trim back to the bottom step: the memory back on the device, the bottom blocks intact.
        if (auto s = be.kv_trim_blocks(8); !s) throw test_failure(s.message());
        R.add("memory", name, "blocks mapped after the trim to 8", be.kv_mapped_blocks(), base_blocks);
        R.add("memory", name, "device memory not given back by the trim (MiB)",
              mib_of(std::abs(free_base - device_free_bytes())), mib_of(granule));
        // The bottom sequence's last decode again: it reads every position before it from the
        // bottom blocks, which the grow and the trim left alone.
        const std::vector<float> carried = logits_at(be, low, {decode.back()}, int32_t(prompt.size() + decode.size() - 1));
        R.add("memory", name, "the bottom blocks' last decode after the trim against before it (max rel. diff)",
              row_diff(low_rows.back(), carried), k_same_logits);
        R.add("memory", name, "the bottom blocks' last decode after the trim against the top blocks' (max rel. diff)",
              row_diff(top_rows.back(), carried), k_same_logits);

        // A batch naming a block the trim took is refused before anything runs.
        const auto refused = [&] {
            batch b;
            b.seqs.resize(1);
            b.seqs[0].block_table = top;
            b.tokens = {1};
            b.pos = {0};
            b.seq = {0};
            b.logits_rows = {0};
            forward_output out;
            const status s = be.forward(b, out);
            return !s && s.message().find("has no memory") != std::string::npos;
        }();
        R.add("memory", name, "a batch naming an unmapped block refused (1)", refused ? 1.0 : 0.0, 1.0, false);

        // Regrown: the top blocks work again (new, zeroed memory); then everything goes back.
        if (auto s = be.kv_ensure_blocks(capacity); !s) throw test_failure(s.message());
        const auto again = run_sequence(be, top, prompt, decode, 1);
        R.add("memory", name, "regrown top blocks' logits against the first run (max rel. diff)",
              std::max(row_diff(top_rows[0], again[0]), row_diff(top_rows[1], again[1])), k_same_logits);
        const double free_full = device_free_bytes(), mapped_full = double(be.memory().kv_mapped);
        if (auto s = be.kv_trim_blocks(0); !s) throw test_failure(s.message());
        R.add("memory", name, "blocks mapped after the trim to 0", be.kv_mapped_blocks(), 0.0);
        R.add("memory", name, "pool's memory after the trim to 0 (MiB)", mib_of(double(be.memory().kv_mapped)), 0.0);
        R.add("memory", name, "device memory not given back by the trim to 0 (MiB)",
              mib_of(std::abs(free_full + mapped_full - device_free_bytes())), mib_of(granule));
        R.info("memory", name, "bottom step (MiB)", mib_of(mapped_base));
        R.info("memory", name, "device free at the bottom step (MiB)", mib_of(free_base));
    });
}

// A grow past the device's free memory: refused with a message that names the KV pool and the
// memory missing, the pool as it was (its blocks still computing), then given back. Through the
// backend (a pool larger than the free memory, grown to its top) and through the engine (a
// 100,000-token prompt with 300 MiB left free beside the pool: the request fails naming the KV
// pool, and the next request runs).
void kv_pool_oom_checks(runner &R, const std::filesystem::path &) {
    const std::string name = "KV pool on demand: a grow past the free memory (backend)";
    R.run("memory", name, [&] {
        const model_config cfg = widths_21b(3);
        cuda_backend_params p;
        p.precision = weight_precision::fp8;
        auto made = make_cuda_backend_random(cfg, 4243, p);
        if (!made) throw test_failure(made.message());
        backend &be = **made;
        // A capacity of the free memory and 4 GiB more: only addresses are reserved.
        const double free0 = device_free_bytes();
        const int32_t capacity = int32_t(std::min(double(INT32_MAX / 2), (free0 + 4.0 * (1 << 30)) / double(be.kv_block_bytes())));
        if (auto s = be.init_kv_cache({16, capacity, true}); !s) throw test_failure(s.message());
        if (be.memory().kv_note.rfind("mapped on demand", 0) != 0) {
            R.add("memory", name, "the pool is mapped on demand (1)", 0.0, 1.0, false, be.memory().kv_note);
            return;
        }
        const std::vector<int32_t> prompt = random_tokens(cfg, 24), decode = random_tokens(cfg, 1);
        if (auto s = be.kv_ensure_blocks(8); !s) throw test_failure(s.message());
        const auto before = run_sequence(be, blocks_from(0, 8), prompt, decode, 1);
        const int32_t mapped = be.kv_mapped_blocks();
        const status s = be.kv_ensure_blocks(capacity);
        const std::string msg = s ? std::string("(it succeeded)") : s.message();
        R.add("memory", name, "the grow refused, naming the KV pool and the memory (1)",
              !s && msg.find("KV pool") != std::string::npos && msg.find("out of GPU memory") != std::string::npos
                  ? 1.0 : 0.0,
              1.0, false, msg);
        R.add("memory", name, "blocks mapped after the refused grow − before", be.kv_mapped_blocks() - mapped, 0.0);
        const auto after = run_sequence(be, blocks_from(0, 8), prompt, decode, 1);
        R.add("memory", name, "the pool's logits after the refused grow (max rel. diff)",
              std::max(row_diff(before[0], after[0]), row_diff(before[1], after[1])), k_same_logits);
        if (auto t = be.kv_trim_blocks(0); !t) throw test_failure(t.message());
        R.add("memory", name, "blocks mapped after the trim to 0", be.kv_mapped_blocks(), 0.0);
    });

    const std::string ename = "KV pool on demand: the engine past the free memory (a 100,000-token prompt, 300 MiB free)";
    R.run("memory", ename, [&] {
        const model_config cfg = widths_21b(3);
        engine_params ep;
        ep.load.kind = backend_kind::cuda;
        ep.load.precision = weight_precision::fp8;
        ep.load.need_tokenizer = false;
        ep.max_num_seqs = 2;
        ep.gpu_memory_utilization = 0.9;
        ep.kv_idle_trim_ms = 0; // the failed request's cached blocks go as soon as the engine idles
        engine eng(ep);
        if (auto s = eng.load_random_model(cfg, 12).get(); !s) throw test_failure(s.message());
        // Everything but 300 MiB taken by another allocation (as another process would).
        const double free_now = device_free_bytes();
        device_buffer hog;
        hog.alloc(size_t(std::max(0.0, free_now - 300.0 * 1048576.0)), "the self-test's memory hog");
        auto run = [&](int32_t n_prompt, int32_t max_tokens, std::string &error) {
            request_params r;
            r.prompt_ids.resize(size_t(n_prompt));
            for (int32_t i = 0; i < n_prompt; ++i) r.prompt_ids[size_t(i)] = 5 + i % 1000;
            r.sampling.max_tokens = max_tokens;
            r.sampling.temperature = 0.0f;
            r.sampling.stop_ids.clear();
            auto st = eng.submit(r);
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
            int tokens = 0;
            for (request_event ev;;) {
                if (std::chrono::steady_clock::now() > until) throw test_failure("a request did not end in 120 s");
                if (!st->wait_pop(ev, std::chrono::milliseconds(100))) continue;
                if (ev.kind == event_kind::token) tokens += int(ev.token_ids.size());
                else {
                    error = ev.kind == event_kind::failed ? ev.error : "";
                    return tokens;
                }
            }
        };
        std::string error;
        run(100000, 4, error);
        R.add("memory", ename, "the long request failed, naming the KV pool (1)",
              error.find("KV pool") != std::string::npos ? 1.0 : 0.0, 1.0, false, error.empty() ? "(it ran)" : error);
        const int tokens = run(64, 8, error);
        R.add("memory", ename, "tokens of a short request after it (8)", tokens, 8.0, false, error);
        hog.reset();
        const auto t = eng.telemetry();
        R.info("memory", ename, "KV pool mapped after them (MiB)", mib_of(double(t->memory.kv_mapped_bytes)));
        R.info("memory", ename, "KV pool capacity (MiB)", mib_of(double(t->memory.kv_capacity_bytes)));
    });
}

} // namespace es::selftest
