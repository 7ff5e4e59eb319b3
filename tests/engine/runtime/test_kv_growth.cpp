// The engine over a KV pool whose memory follows demand (backend::kv_ensure_blocks,
// kv_trim_blocks), as the CUDA backend maps it: the CPU backend of the moe-shared checkpoint behind
// a wrapper that plays the device — blocks mapped in steps up to a limit, the top given back in
// whole steps, what was given back overwritten with garbage (its memory is gone), every call
// recorded, a batch that names a block without memory and a trim while a forward is in flight
// refused and counted. The engine must map before it steps, give the free top back (at once when
// idle, cached prefixes after the idle delay, while busy at its interval), keep the floor, fail a
// request the device cannot hold with a message naming the KV pool, and give every request the
// tokens the plain CPU backend gives it.
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"

#include <QtTest>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

using namespace std::chrono_literals;

namespace {

const QString data_dir = QStringLiteral(ES_TEST_DATA_DIR);

// The CPU backend as a device that maps its KV pool on demand (see the file's comment). Read by
// the test thread after the engine is gone or through its mutex-guarded record.
class growing_backend final : public es::backend {
public:
    growing_backend(es::backend &inner, int32_t step) : m_in(inner), m_step(step) {}
    std::string name() const override { return "growing KV pool over " + m_in.name(); }
    const es::model_config &config() const override { return m_in.config(); }
    es::status init_kv_cache(const es::kv_cache_params &p) override {
        m_mapped = p.on_demand ? 0 : p.n_blocks; // (the engine's pool is on demand)
        return m_in.init_kv_cache(p);
    }
    const es::kv_cache_params &kv_params() const override { return m_in.kv_params(); }
    size_t kv_block_bytes() const override { return m_in.kv_block_bytes(); }
    size_t weights_bytes() const override { return m_in.weights_bytes(); }
    bool overlaps_steps() const override { return true; } // the engine submits steps ahead
    es::status logits_row(int32_t row, std::span<float> out) override { return m_in.logits_row(row, out); }

    int32_t kv_mapped_blocks() const override { return m_mapped; }
    int32_t kv_mapped_after_trim(int32_t n) const override { return std::min(m_mapped, stepped(n)); }
    es::status kv_ensure_blocks(int32_t n) override {
        std::lock_guard lock(m_mutex);
        ensures.push_back(n);
        if (n <= m_mapped) return es::ok_status();
        if (stepped(n) > limit)
            return es::error{"out of device memory: the KV pool needs " + std::to_string(stepped(n)) +
                             " blocks mapped, the device has room for " + std::to_string(limit)};
        m_mapped = stepped(n);
        peak = std::max(peak, m_mapped);
        return es::ok_status();
    }
    es::status kv_trim_blocks(int32_t n) override {
        std::lock_guard lock(m_mutex);
        if (in_flight() > 0) {
            ++violations;
            return es::error{"a trim with a forward in flight"};
        }
        const int32_t to = kv_mapped_after_trim(n);
        trims.push_back({n, to, forwards});
        poison(to, m_mapped);
        m_mapped = to;
        return es::ok_status();
    }
    es::backend_memory memory() const override {
        es::backend_memory m;
        m.kv_mapped = uint64_t(m_mapped) * kv_block_bytes();
        m.kv_capacity = uint64_t(kv_capacity_blocks()) * kv_block_bytes();
        m.parts = {{"KV pool", m.kv_mapped}};
        m.kv_note = "mapped on demand";
        return m;
    }
    es::status forward(const es::batch &b, es::forward_output &out) override {
        {
            std::lock_guard lock(m_mutex);
            for (const es::batch_seq &s : b.seqs)
                for (int32_t blk : s.block_table)
                    if (blk >= m_mapped) {
                        ++violations;
                        return es::error{"block " + std::to_string(blk) + " has no memory (" +
                                         std::to_string(m_mapped) + " mapped)"};
                    }
            ++forwards;
        }
        return m_in.forward(b, out);
    }

    struct trim_record {
        int32_t asked, kept;
        int forwards_before; // forwards run before it
    };
    // Guarded by m_mutex (the engine thread writes, the test reads).
    std::mutex m_mutex;
    std::vector<int32_t> ensures;
    std::vector<trim_record> trims;
    int violations = 0, forwards = 0;
    int32_t peak = 0;
    int32_t limit = INT32_MAX; // blocks the device has memory for

private:
    int32_t stepped(int32_t n) const { return std::min(kv_capacity_blocks(), (n + m_step - 1) / m_step * m_step); }
    // The memory of blocks [from, to) is gone: the inner pool's blocks get other tokens' K/V, so
    // that an engine still reading them would generate other tokens.
    void poison(int32_t from, int32_t to) {
        const int32_t bs = kv_params().block_size;
        es::batch b;
        std::mt19937 rng(uint32_t(from * 31 + to));
        for (int32_t blk = from; blk < std::min(to, from + 64); ++blk) {
            b.seqs.push_back({{blk}, nullptr});
            for (int32_t i = 0; i < bs; ++i) {
                b.tokens.push_back(int32_t(rng() % uint32_t(config().n_vocab)));
                b.pos.push_back(i);
                b.seq.push_back(int32_t(b.seqs.size()) - 1);
            }
        }
        if (b.tokens.empty()) return;
        b.logits_rows = {0};
        es::forward_output scratch;
        if (!m_in.forward(b, scratch)) ++violations;
    }

    es::backend &m_in;
    int32_t m_step;
    int32_t m_mapped = 0;
};

struct outcome {
    std::vector<int32_t> tokens;
    std::string finish_reason, error;
};

outcome collect(const std::shared_ptr<es::request_stream> &s, std::chrono::seconds timeout = 60s) {
    outcome o;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    es::request_event ev;
    while (std::chrono::steady_clock::now() < deadline) {
        if (!s->wait_pop(ev, 100ms)) continue;
        if (ev.kind == es::event_kind::token) {
            o.tokens.insert(o.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
        } else {
            o.finish_reason = ev.finish_reason;
            o.error = ev.error;
            return o;
        }
    }
    o.error = "timed out";
    return o;
}

es::request_params greedy(std::vector<int32_t> ids, int32_t max_tokens) {
    es::request_params r;
    r.prompt_ids = std::move(ids);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.stop_ids.clear();
    return r;
}

std::vector<int32_t> prompt_of(uint32_t seed, int n) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto &t : p) t = int32_t(3 + rng() % 2900);
    return p;
}

template <typename Pred>
bool wait_until(Pred p, std::chrono::milliseconds timeout = 10000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (p()) return true;
        std::this_thread::sleep_for(2ms);
    }
    return p();
}

es::engine_params params() {
    es::engine_params p;
    p.load.need_tokenizer = false;
    p.n_kv_blocks = 512;
    p.block_size = 16;
    p.max_num_seqs = 6;
    p.overlap = es::engine_params::overlap_mode::on;
    return p;
}

// The moe-shared checkpoint on the CPU behind a growing_backend, loaded into e; the wrapper is
// returned (owned by the engine's model from now on, the inner backend by `keep`, which must
// outlive the engine).
growing_backend &load_growing(es::engine &e, std::unique_ptr<es::model> &keep, int32_t step) {
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
    if (!m) qFatal("load failed: %s", m.message().c_str());
    keep = std::move(*m);
    auto wrapped = std::make_unique<es::model>();
    wrapped->config = keep->config;
    auto be = std::make_unique<growing_backend>(*keep->be, step);
    growing_backend &ref = *be;
    wrapped->be = std::move(be);
    if (auto st = e.load_model(std::move(wrapped)).get(); !st) qFatal("load failed: %s", st.message().c_str());
    return ref;
}

// Requests of several lengths at once; their outcomes in order.
std::vector<outcome> run_batch(es::engine &e, const std::vector<std::pair<int, int>> &shapes) {
    std::vector<std::shared_ptr<es::request_stream>> streams;
    for (size_t i = 0; i < shapes.size(); ++i)
        streams.push_back(e.submit(greedy(prompt_of(uint32_t(100 + i), shapes[i].first), shapes[i].second)));
    std::vector<outcome> out;
    for (const auto &s : streams) out.push_back(collect(s));
    return out;
}

// The plain CPU backend's tokens for these requests (a pool allocated whole: all of it mapped, as
// its telemetry says).
std::vector<outcome> plain_outcomes(const std::vector<std::pair<int, int>> &shapes, es::engine_params p) {
    es::engine e(p);
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
    if (!m || !e.load_model(std::move(*m)).get()) qFatal("moe-shared did not load");
    std::vector<outcome> out = run_batch(e, shapes);
    const auto t = e.telemetry();
    if (t->memory.kv_blocks_mapped != t->memory.kv_blocks_total || t->memory.kv_mapped_bytes != t->memory.kv_capacity_bytes)
        qFatal("a whole pool reports %d of %d blocks mapped", t->memory.kv_blocks_mapped, t->memory.kv_blocks_total);
    return out;
}

// The top of the pool that holds a block in use or a cached prefix, from a snapshot's block map.
int32_t top_held(const es::memory_stats &m) {
    for (int32_t b = int32_t(m.kv_block_states.size()); b > 0; --b)
        if (m.kv_block_states[size_t(b - 1)] <= uint8_t(es::kv_block_state::cached)) return b;
    return 0;
}

const std::vector<std::pair<int, int>> k_shapes = {{40, 30}, {300, 20}, {17, 60}, {130, 8}, {5, 90}};

} // namespace

class TestKvGrowth : public QObject {
    Q_OBJECT
private slots:
    void growsAndShrinksWithDemand();
    void idleDelayDropsCachedPrefixes();
    void trimsWhileBusyAtItsInterval();
    void keepsTheFloor();
    void outOfDeviceMemoryFailsNamingThePool();
};

// Mapped on demand before each step, the uncached top given back as soon as no request is left
// (the cached prefixes kept, their delay long here): the same tokens as the plain CPU backend, no
// block used without memory, no trim with a forward in flight, the telemetry's KV figures
// following the memory.
void TestKvGrowth::growsAndShrinksWithDemand() {
    const std::vector<outcome> plain = plain_outcomes(k_shapes, params());
    es::engine_params p = params();
    p.kv_idle_trim_ms = 600000;
    std::unique_ptr<es::model> keep; // (outlives the engine, whose thread calls into it)
    es::engine e(p);
    growing_backend &be = load_growing(e, keep, 8);
    QVERIFY(wait_until([&] { return e.telemetry()->memory.kv_blocks_total == 512; }));
    QCOMPARE(e.telemetry()->memory.kv_blocks_mapped, 0);
    QCOMPARE(e.telemetry()->memory.kv_capacity_bytes, uint64_t(512) * e.telemetry()->memory.kv_block_bytes);
    const std::vector<outcome> grown = run_batch(e, k_shapes);
    for (size_t i = 0; i < k_shapes.size(); ++i) {
        QCOMPARE(grown[i].error, plain[i].error);
        QCOMPARE(grown[i].tokens, plain[i].tokens);
    }
    {
        std::lock_guard lock(be.m_mutex);
        QCOMPARE(be.violations, 0);
        QVERIFY(!be.ensures.empty());
        QVERIFY(be.peak >= (300 + 20) / 16); // the longest request's blocks had memory
    }
    // Idle: mapped down to the step above the highest cached prefix block, which stays.
    QVERIFY(wait_until([&] {
        const auto t = e.telemetry();
        const int32_t top = top_held(t->memory);
        return t->n_running == 0 && t->memory.kv_blocks_cached > 0 && top > 0 &&
               t->memory.kv_blocks_mapped == std::min(512, (top + 7) / 8 * 8);
    }));
    const auto t = e.telemetry();
    QCOMPARE(t->memory.kv_mapped_bytes, uint64_t(t->memory.kv_blocks_mapped) * t->memory.kv_block_bytes);
    QCOMPARE(t->memory.kv_note, std::string("mapped on demand"));
    QCOMPARE(t->memory.kv_block_states.size(), size_t(512));
    QCOMPARE(int(t->memory.kv_block_states[511]), int(es::kv_block_state::unmapped));
    QCOMPARE(t->memory.device_parts.size(), size_t(1));
    QCOMPARE(t->memory.device_parts[0].second, t->memory.kv_mapped_bytes);
    std::lock_guard lock(be.m_mutex);
    QVERIFY(!be.trims.empty());
    QVERIFY(be.trims.back().kept < be.peak);
    QCOMPARE(be.violations, 0);
}

// After kv_idle_trim_ms without a request the cached prefixes go too, down to nothing; the pool
// then grows again over memory that was given back (and overwritten) and gives the same tokens.
void TestKvGrowth::idleDelayDropsCachedPrefixes() {
    const std::vector<outcome> plain = plain_outcomes(k_shapes, params());
    es::engine_params p = params();
    p.kv_idle_trim_ms = 200;
    std::unique_ptr<es::model> keep; // (outlives the engine, whose thread calls into it)
    es::engine e(p);
    growing_backend &be = load_growing(e, keep, 8);
    for (int round = 0; round < 2; ++round) {
        const std::vector<outcome> grown = run_batch(e, k_shapes);
        for (size_t i = 0; i < k_shapes.size(); ++i) QCOMPARE(grown[i].tokens, plain[i].tokens);
        QVERIFY(wait_until([&] {
            const auto t = e.telemetry();
            return t->n_running == 0 && t->memory.kv_blocks_mapped == 0;
        }));
        const auto t = e.telemetry();
        QCOMPARE(t->memory.kv_mapped_bytes, uint64_t(0));
        QCOMPARE(t->memory.kv_blocks_cached, 0); // their memory went, their hashes with it
        QCOMPARE(int(t->memory.kv_block_states[0]), int(es::kv_block_state::unmapped));
    }
    std::lock_guard lock(be.m_mutex);
    QCOMPARE(be.trims.back().kept, 0);
    QCOMPARE(be.violations, 0);
}

// While requests run, the free top is given back at the busy interval (0: at every step, none of
// which then overlaps its successor): a short request above a long one finishes, and its blocks go
// back while the long one still decodes, with the long one's tokens unchanged. At the default
// interval steps overlap as they do over a whole pool.
void TestKvGrowth::trimsWhileBusyAtItsInterval() {
    const std::vector<std::pair<int, int>> shapes = {{20, 200}, {400, 2}};
    es::engine_params p = params();
    p.enable_prefix_caching = false; // the short request's blocks free, not cached, once it ends
    const std::vector<outcome> plain = plain_outcomes(shapes, p);
    p.kv_busy_trim_ms = 0;
    p.kv_idle_trim_ms = 60000; // no idle trim of cached blocks in this test
    std::unique_ptr<es::model> keep; // (outlives the engine, whose thread calls into it)
    es::engine e(p);
    growing_backend &be = load_growing(e, keep, 4);
    const std::vector<outcome> grown = run_batch(e, shapes);
    for (size_t i = 0; i < shapes.size(); ++i) QCOMPARE(grown[i].tokens, plain[i].tokens);
    std::lock_guard lock(be.m_mutex);
    QCOMPARE(be.violations, 0);
    // A trim that gave memory back and had forwards after it (the long request still decoding).
    int last_forwards = be.forwards;
    bool busy_trim = false;
    for (const auto &tr : be.trims) busy_trim = busy_trim || (tr.kept < be.peak && tr.forwards_before < last_forwards - 10);
    QVERIFY2(busy_trim, qPrintable(QString("%1 trims, peak %2").arg(be.trims.size()).arg(be.peak)));
    QCOMPARE(e.telemetry()->n_steps_overlapped, uint64_t(0));

    p.kv_busy_trim_ms = 10000;
    std::unique_ptr<es::model> keep2;
    es::engine e2(p);
    load_growing(e2, keep2, 4);
    const std::vector<outcome> overlapped = run_batch(e2, shapes);
    for (size_t i = 0; i < shapes.size(); ++i) QCOMPARE(overlapped[i].tokens, plain[i].tokens);
    QVERIFY(e2.telemetry()->n_steps_overlapped > 100);
}

// kv_cache_min_bytes: those blocks are mapped at load and stay mapped however idle the engine is.
void TestKvGrowth::keepsTheFloor() {
    es::engine_params p = params();
    p.kv_idle_trim_ms = 0;
    std::unique_ptr<es::model> keep; // (outlives the engine, whose thread calls into it)
    {
        // The floor in bytes: 10 blocks' worth (the wrapper maps steps of 8: 16 stay).
        es::model_load_params lp;
        lp.need_tokenizer = false;
        auto m = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
        QVERIFY(m.ok());
        p.kv_cache_min_bytes = 10 * (*m)->be->kv_block_bytes();
    }
    es::engine e2(p);
    growing_backend &be = load_growing(e2, keep, 8);
    QVERIFY(wait_until([&] { return e2.telemetry()->memory.kv_blocks_total == 512; }));
    QCOMPARE(e2.telemetry()->memory.kv_blocks_mapped, 16);
    const std::vector<outcome> out = run_batch(e2, {{500, 10}, {30, 5}});
    for (const outcome &o : out) QVERIFY2(o.error.empty(), o.error.c_str());
    QVERIFY(wait_until([&] { return e2.telemetry()->n_running == 0 && e2.telemetry()->memory.kv_blocks_mapped == 16; }));
    std::lock_guard lock(be.m_mutex);
    QVERIFY(be.peak > 16);
    QCOMPARE(be.violations, 0);
    for (const auto &tr : be.trims) QVERIFY(tr.asked >= 10);
}

// A device without memory for a request: it fails with a message naming the KV pool and what the
// device said, a request that fits runs beside it, and the engine keeps serving.
void TestKvGrowth::outOfDeviceMemoryFailsNamingThePool() {
    es::engine_params p = params();
    std::unique_ptr<es::model> keep; // (outlives the engine, whose thread calls into it)
    es::engine e(p);
    growing_backend &be = load_growing(e, keep, 4);
    {
        std::lock_guard lock(be.m_mutex);
        be.limit = 8; // 128 tokens
    }
    auto big = e.submit(greedy(prompt_of(1, 200), 5));
    const outcome ob = collect(big);
    QVERIFY2(ob.error.find("KV pool") != std::string::npos && ob.error.find("out of device memory") != std::string::npos,
             ob.error.c_str());
    // A request that outgrows the device while it decodes, beside a short one: preempted while
    // the short one runs, then failed once it is alone; the short one finishes.
    auto grows = e.submit(greedy(prompt_of(2, 100), 100));
    auto fits = e.submit(greedy(prompt_of(3, 10), 20));
    const outcome og = collect(grows), of = collect(fits);
    QVERIFY2(og.error.find("KV pool") != std::string::npos, og.error.c_str());
    QCOMPARE(of.error, std::string());
    QCOMPARE(of.tokens.size(), size_t(20));
    const outcome after = collect(e.submit(greedy(prompt_of(4, 50), 10)));
    QCOMPARE(after.error, std::string());
    QCOMPARE(after.tokens.size(), size_t(10));
    std::lock_guard lock(be.m_mutex);
    QCOMPARE(be.violations, 0);
    QVERIFY(be.peak <= 8);
}

QTEST_APPLESS_MAIN(TestKvGrowth)
#include "test_kv_growth.moc"
