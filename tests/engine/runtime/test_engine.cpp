// The engine end to end on the reference checkpoints: the worker thread, scheduler, paged KV
// with prefix caching, sampler and telemetry together. Because the CPU backend is
// batch-invariant, batched, prefix-cached and preempted runs must reproduce a lone cold run
// exactly (tokens, and logits bit for bit at the backend level). Sampling from logit candidates
// (a backend that returns them, emulated here over the CPU backend with topk_logits' twin) gives
// the tokens sampling from full rows gives.
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine/runtime/row_sampling.h"
#include "engine_generate.h"
#include "kernels/sample_rows.cuh"
#include "kernels/topk_logits.cuh"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <chrono>
#include <cstring>
#include <thread>

using namespace std::chrono_literals;

namespace {

const QString data_dir = QStringLiteral(ES_TEST_DATA_DIR);

std::vector<int32_t> reference_ids(const QString &name, const char *key) {
    QFile f(data_dir + "/" + name + "/reference.json");
    if (!f.open(QIODevice::ReadOnly)) qFatal("no reference.json for %s", qPrintable(name));
    std::vector<int32_t> ids;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()[key].toArray()) ids.push_back(v.toInt());
    return ids;
}

struct outcome {
    std::vector<int32_t> tokens;
    std::string text, finish_reason, error;
    es::request_metrics metrics;
};

outcome collect(const std::shared_ptr<es::request_stream> &s, std::chrono::seconds timeout = 60s) {
    outcome o;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    es::request_event ev;
    while (std::chrono::steady_clock::now() < deadline) {
        if (!s->wait_pop(ev, 100ms)) continue;
        if (ev.kind == es::event_kind::token) {
            o.text += ev.text;
            o.tokens.insert(o.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
        } else {
            o.finish_reason = ev.finish_reason;
            o.error = ev.error;
            break;
        }
    }
    o.metrics = s->metrics();
    return o;
}

std::unique_ptr<es::engine> make_engine(const QString &model, es::engine_params p = {}) {
    p.load.need_tokenizer = true;
    auto e = std::make_unique<es::engine>(p);
    auto st = e->load_model((data_dir + "/" + model).toStdString()).get();
    if (!st) qFatal("load failed: %s", st.message().c_str());
    return e;
}

es::request_params greedy_ids(std::vector<int32_t> ids, int32_t max_tokens) {
    es::request_params r;
    r.prompt_ids = std::move(ids);
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = max_tokens;
    r.sampling.stop_ids.clear();
    return r;
}

template <typename Pred>
bool wait_until(Pred p, std::chrono::milliseconds timeout = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
        if (p()) return true;
        std::this_thread::sleep_for(5ms);
    }
    return p();
}

// A long greedy request cancelled after `after` tokens: it finishes "cancelled" and every block
// goes back to the pool.
void cancel_mid_stream(es::engine &e, const std::vector<int32_t> &prompt, int after) {
    auto s = e.submit(greedy_ids(prompt, 3000));
    es::request_event ev;
    int tokens = 0;
    while (tokens < after && s->wait_pop(ev, 5000ms))
        if (ev.kind == es::event_kind::token) ++tokens;
    QCOMPARE(tokens, after);
    e.cancel(s->id());
    const outcome o = collect(s);
    QCOMPARE(o.finish_reason, std::string("cancelled"));
    QVERIFY(wait_until([&] {
        auto t = e.telemetry();
        return t->n_running == 0 && t->memory.kv_blocks_used == 0;
    }));
}

// The CPU backend behind the CUDA backend's interfaces: when a batch asks for draws
// (batch::sampling) forward() makes them with sample_rows' twin, reading the penalty lists from
// the batch and a fed token from the batch's tokens, as the device does; a batch asking for
// top_n gets topk_logits' twin. It claims to overlap steps, so the engine submits sampled steps
// ahead with fed tokens (the base class resolves them from the draws). Rows are kept for
// logits_row(), whose fetches are counted.
class drawing_backend final : public es::backend {
public:
    explicit drawing_backend(es::backend &inner) : m_in(inner) {}
    std::string name() const override { return "draws over " + m_in.name(); }
    const es::model_config &config() const override { return m_in.config(); }
    es::status init_kv_cache(const es::kv_cache_params &p) override { return m_in.init_kv_cache(p); }
    const es::kv_cache_params &kv_params() const override { return m_in.kv_params(); }
    size_t kv_block_bytes() const override { return m_in.kv_block_bytes(); }
    size_t weights_bytes() const override { return m_in.weights_bytes(); }
    bool supports_candidates() const override { return true; }
    bool supports_sampling() const override { return true; }
    bool overlaps_steps() const override { return true; }
    es::status forward(const es::batch &b, es::forward_output &out) override {
        if (auto s = m_in.forward(b, out); !s) return s;
        m_rows = out.logits;
        last_top_n = b.top_n;
        out.sampled.clear();
        const int64_t R = int64_t(b.logits_rows.size()), V = config().n_vocab;
        if (!b.sampling.empty()) {
            std::vector<es::row_sampling> rows = b.sampling;
            for (es::row_sampling &r : rows)
                r.penalties = reinterpret_cast<uint64_t>(b.penalties.data() + r.penalties);
            fed_rows += std::count_if(rows.begin(), rows.end(), [](const es::row_sampling &r) { return r.extra_token >= 0; });
            out.sampled.resize(size_t(R));
            es::sample_rows_params p;
            p.logits = out.logits.data(); // the penalties land in the rows, as on the device
            p.rows = rows.data();
            p.tokens = b.tokens.data();
            p.ids = out.sampled.data();
            p.n_rows = R;
            p.n_vocab = V;
            es::sample_rows_ref(p);
            m_rows = out.logits;
            out.logits.clear();
            ++drawn_steps;
            return es::ok_status();
        }
        if (b.top_n <= 0) return es::ok_status();
        const int64_t n = b.top_n;
        es::logit_candidate_rows &c = out.candidates;
        c.top_n = b.top_n;
        c.ids.resize(size_t(R * n));
        c.logits.resize(size_t(R * n));
        c.row_max.resize(size_t(R));
        c.row_sum.resize(size_t(R));
        es::topk_logits_params p;
        p.logits = m_rows.data();
        p.ids = c.ids.data();
        p.values = c.logits.data();
        p.row_max = c.row_max.data();
        p.row_sum = c.row_sum.data();
        p.n_rows = R;
        p.n_vocab = V;
        p.n_top = b.top_n;
        es::topk_logits_ref(p);
        out.logits.clear();
        return es::ok_status();
    }
    es::status logits_row(int32_t row, std::span<float> out) override {
        const int64_t V = config().n_vocab;
        if (row < 0 || size_t(row + 1) * size_t(V) > m_rows.size() || int64_t(out.size()) != V)
            return es::error{"logits_row: no such row"};
        std::copy_n(m_rows.begin() + row * V, V, out.begin());
        ++fetched;
        return es::ok_status();
    }
    int fetched = 0, drawn_steps = 0, fed_rows = 0;
    int32_t last_top_n = 0; // batch::top_n of the last forward

private:
    es::backend &m_in;
    std::vector<float> m_rows;
};

// The CPU backend as a device that times only the steps asked for (batch::time_phases), on its
// "device": an untimed step keeps only its total; a timed one its phases and a one-launch timeline.
// Records which steps were asked.
class timing_spy final : public es::backend {
public:
    explicit timing_spy(es::backend &inner) : m_in(inner) {}
    std::string name() const override { return "timing spy over " + m_in.name(); }
    const es::model_config &config() const override { return m_in.config(); }
    es::status init_kv_cache(const es::kv_cache_params &p) override { return m_in.init_kv_cache(p); }
    const es::kv_cache_params &kv_params() const override { return m_in.kv_params(); }
    size_t kv_block_bytes() const override { return m_in.kv_block_bytes(); }
    size_t weights_bytes() const override { return m_in.weights_bytes(); }
    es::status logits_row(int32_t row, std::span<float> out) override { return m_in.logits_row(row, out); }
    es::status forward(const es::batch &b, es::forward_output &out) override {
        if (auto s = m_in.forward(b, out); !s) return s;
        asked.push_back(b.time_phases);
        out.timeline.clear();
        if (!b.time_phases) {
            out.phases = es::phase_times{.total_ms = out.phases.total_ms};
            return es::ok_status();
        }
        out.phases.on_device = true;
        out.timeline = {es::op_time{"spy", es::step_phase::attention, 0, 0.0, 1.0, 100.0, 0.0}};
        return es::ok_status();
    }
    std::vector<bool> asked; // per forward, whether it was asked to time its phases

private:
    es::backend &m_in;
};

} // namespace

class TestEngine : public QObject {
    Q_OBJECT
private slots:
    void noModelAndBadFolder();
    void deviceDrawsGiveSameTokens();
    void matchesHfGreedy_data();
    void matchesHfGreedy();
    void chatStreamsText();
    void batchedEqualsAlone();
    void prefixCacheLogitsBitIdentical();
    void prefixCacheInEngine();
    void preemptionGivesSameTokens();
    void telemetryCountsEqualTraces();
    void stopStringsNeverLeak();
    void promptLongerThanContext();
    void cancelFreesBlocks();
    void destroyMidStream();
    void submitFeedsTokens();
    void overlappedStepsGiveSameTokens();
    void overlappedStopAndCancel();
    void phaseTimingSamplesSteps();
};

void TestEngine::noModelAndBadFolder() {
    es::engine e;
    const outcome o = collect(e.submit(greedy_ids({5, 6, 7}, 4)));
    QVERIFY2(o.error.find("no model is loaded") != std::string::npos, o.error.c_str());
    auto st = e.load_model("/nonexistent/model").get();
    QVERIFY(!st.ok());
    QVERIFY2(st.message().find("/nonexistent/model") != std::string::npos, st.message().c_str());
    QVERIFY(!e.has_model());
}

// The engine's sampling (request_sampling + token_of_row) on a backend that draws "on the device"
// and overlaps steps against the same backend returning full rows sampled on the host: the same
// tokens for every sampling setting, penalties included; sampled steps go ahead with fed tokens,
// and no full row is fetched.
void TestEngine::deviceDrawsGiveSameTokens() {
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
    QVERIFY(m.ok());
    es::backend &plain = *(*m)->be;
    {
        // The CPU backend's logits_row: the rows of the last forward, nothing else.
        QVERIFY(!plain.supports_candidates());
        QVERIFY(plain.init_kv_cache({16, 8}).ok());
        es::batch b;
        b.seqs = {{{0}}};
        b.tokens = {1, 2};
        b.pos = {0, 1};
        b.seq = {0, 0};
        b.logits_rows = {0, 1};
        b.top_n = 64; // a request the CPU backend may ignore
        es::forward_output out;
        QVERIFY(plain.forward(b, out).ok());
        const int64_t V = plain.config().n_vocab;
        QCOMPARE(out.candidates.top_n, 0);
        QCOMPARE(out.logits.size(), size_t(2 * V));
        std::vector<float> row(static_cast<size_t>(V));
        QVERIFY(plain.logits_row(1, row).ok());
        QVERIFY(std::memcmp(row.data(), out.logits.data() + V, size_t(V) * 4) == 0);
        QVERIFY(!plain.logits_row(2, row).ok());
        std::vector<float> short_row(10);
        QVERIFY(!plain.logits_row(0, short_row).ok());
        // check_batch: a sequence's tokens are one run with positions rising by one.
        es::batch bad = b;
        bad.seqs = {{{0}}, {{1}}};
        bad.tokens = {1, 2, 3};
        bad.pos = {0, 0, 1};
        bad.seq = {0, 1, 0}; // sequence 0 in two runs
        bad.logits_rows = {2};
        auto st = plain.forward(bad, out);
        QVERIFY(!st.ok());
        QVERIFY2(st.message().find("not contiguous") != std::string::npos, st.message().c_str());
        bad.seq = {0, 0, 1};
        bad.pos = {0, 2, 0}; // a gap
        st = plain.forward(bad, out);
        QVERIFY(!st.ok());
        QVERIFY2(st.message().find("do not rise by one") != std::string::npos, st.message().c_str());
        bad.pos = {0, 1, 0};
        QVERIFY(plain.forward(bad, out).ok());
    }
    // The same requests through the engine on that backend as it is, and on a second copy wrapped to
    // draw (the wrapper lives in the engine's model; the copy outlives the engine).
    auto copy = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
    QVERIFY(copy.ok());
    auto wrapped = std::make_unique<es::model>();
    wrapped->config = (*copy)->config;
    auto draw_owner = std::make_unique<drawing_backend>(*(*copy)->be);
    drawing_backend &draw = *draw_owner;
    wrapped->be = std::move(draw_owner);
    es::engine plain_engine, draw_engine;
    QVERIFY(plain_engine.load_model(std::move(*m)).get().ok());
    QVERIFY(draw_engine.load_model(std::move(wrapped)).get().ok());
    const auto prompt = reference_ids("moe-shared", "prompt_ids");
    for (int setting = 0; setting < 6; ++setting)
        for (uint64_t seed = 1; seed <= 3; ++seed) {
            es::sampling_params sp;
            sp.seed = seed;
            sp.max_tokens = 12;
            sp.temperature = setting == 0 ? 0.0f : 0.9f;
            if (setting == 2) sp.top_k = 20;
            if (setting == 3) sp.top_p = 0.8f;
            if (setting == 4) {
                sp.min_p = 0.05f;
                sp.repetition_penalty = 1.3f;
            }
            if (setting == 5) {
                sp.presence_penalty = 0.6f;
                sp.frequency_penalty = 0.4f;
                sp.top_p = 0.9f;
            }
            const es_test::generation a = es_test::generate_with_engine(plain_engine, prompt, sp);
            const int drawn_before = draw.drawn_steps;
            const es_test::generation b = es_test::generate_with_engine(draw_engine, prompt, sp);
            QVERIFY2(a.ok() && b.ok(), (a.error + b.error).c_str());
            // Greedy without penalties asks for one candidate (the CUDA backend's head picks it);
            // every other setting for draws.
            if (setting == 0) QCOMPARE(draw.last_top_n, 1);
            else QVERIFY(draw.drawn_steps - drawn_before >= 12);
            QVERIFY2(a.tokens == b.tokens,
                     qPrintable(QString("setting %1 seed %2: the device's draws changed the tokens").arg(setting).arg(seed)));
        }
    QCOMPARE(draw.fetched, 0);
    QVERIFY2(draw.fed_rows > 0, "sampled steps must be submitted ahead, their tokens fed");
}

void TestEngine::matchesHfGreedy_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("budget");
    for (const char *m : {"dense", "moe-shared", "moe-odd", "moe-sharded", "dense-untied"}) {
        QTest::newRow(qPrintable(QString("%1 budget 512").arg(m))) << QString(m) << 512;
        QTest::newRow(qPrintable(QString("%1 budget 5").arg(m))) << QString(m) << 5; // chunked prefill
    }
}

void TestEngine::matchesHfGreedy() {
    QFETCH(QString, model);
    QFETCH(int, budget);
    es::engine_params p;
    p.max_batched_tokens = budget;
    auto e = make_engine(model, p);
    const auto greedy = reference_ids(model, "greedy_ids");
    const outcome o = collect(e->submit(greedy_ids(reference_ids(model, "prompt_ids"), int32_t(greedy.size()))));
    QCOMPARE(o.finish_reason, std::string("length"));
    QCOMPARE(o.tokens, greedy);
    QCOMPARE(int(o.metrics.token_times_us.size()), int(greedy.size()));
    QVERIFY(o.metrics.ttft_ms() >= 0.0);
}

void TestEngine::chatStreamsText() {
    auto e = make_engine("moe-shared");
    es::request_params r;
    r.messages = {{es::chat_role::user, "What is a mixture of experts?"}};
    r.system_prompt = "Answer briefly.";
    r.preset_prefix = "【技术解析模式】";
    r.sampling = e->model_defaults();
    r.sampling.seed = 3;
    r.sampling.max_tokens = 12;
    const outcome a = collect(e->submit(r));
    const outcome b = collect(e->submit(r));
    QVERIFY2(a.error.empty(), a.error.c_str());
    QVERIFY(!a.tokens.empty());
    QCOMPARE(a.text, b.text); // same seed, same text
    QCOMPARE(a.metrics.seed, uint64_t(3));
}

void TestEngine::batchedEqualsAlone() {
    const auto prompt = reference_ids("moe-odd", "prompt_ids");
    std::vector<es::request_params> reqs;
    for (int i = 0; i < 6; ++i) {
        std::vector<int32_t> ids(prompt.begin() + i, prompt.end()); // different lengths and contents
        es::request_params r = greedy_ids(ids, 10 + i);
        if (i % 2) { // sampled requests with their own seeds reproduce too
            r.sampling.temperature = 0.9f;
            r.sampling.top_k = 40;
            r.sampling.seed = 100 + i;
        }
        reqs.push_back(r);
    }
    std::vector<outcome> alone;
    {
        auto e = make_engine("moe-odd");
        for (const auto &r : reqs) alone.push_back(collect(e->submit(r)));
    }
    es::engine_params p;
    p.max_batched_tokens = 16; // forces prefill chunks to share steps with decodes
    auto e = make_engine("moe-odd", p);
    std::vector<std::shared_ptr<es::request_stream>> streams;
    for (const auto &r : reqs) streams.push_back(e->submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
        const outcome o = collect(streams[i]);
        QCOMPARE(o.tokens, alone[i].tokens);
    }
    auto t = e->telemetry();
    bool batched = false;
    for (const auto &s : t->recent_steps) batched |= s.n_seqs > 1;
    QVERIFY2(batched, "no step held more than one sequence");
}

void TestEngine::prefixCacheLogitsBitIdentical() {
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
    QVERIFY(m.ok());
    es::backend &be = *(*m)->be;
    QVERIFY(be.init_kv_cache({16, 8}).ok());
    const auto prompt = reference_ids("moe-shared", "prompt_ids"); // 24 tokens
    auto run = [&](std::vector<int32_t> table, int32_t start) {
        es::batch b;
        b.seqs = {{table}};
        for (int32_t p = start; p < int32_t(prompt.size()); ++p) {
            b.tokens.push_back(prompt[p]);
            b.pos.push_back(p);
            b.seq.push_back(0);
            b.logits_rows.push_back(int32_t(b.tokens.size()) - 1);
        }
        es::forward_output out;
        if (!be.forward(b, out)) qFatal("forward failed");
        return out.logits;
    };
    // Cold: the whole prompt in blocks 0,1.
    const auto cold = run({0, 1}, 0);
    // Cached: block 0 holds the first 16 tokens (computed above); a new sequence reuses it and
    // computes only positions 16.. into a fresh block 5.
    const auto cached = run({0, 5}, 16);
    const int64_t V = be.config().n_vocab;
    QCOMPARE(cached.size(), size_t(8 * V));
    QVERIFY2(std::memcmp(cached.data(), cold.data() + 16 * V, cached.size() * sizeof(float)) == 0,
             "prefix-cached logits differ from the cold run");
}

void TestEngine::prefixCacheInEngine() {
    const auto prompt = reference_ids("moe-shared", "prompt_ids");
    std::vector<int32_t> a = prompt, b(prompt.begin(), prompt.begin() + 16);
    b.insert(b.end(), {11, 12, 13, 14, 15, 16, 17, 18, 19, 20});
    es::engine_params cold_p;
    cold_p.enable_prefix_caching = false;
    auto cold = make_engine("moe-shared", cold_p);
    const outcome cold_b = collect(cold->submit(greedy_ids(b, 8)));

    auto e = make_engine("moe-shared");
    collect(e->submit(greedy_ids(a, 4)));
    const outcome warm_b = collect(e->submit(greedy_ids(b, 8)));
    QCOMPARE(warm_b.metrics.n_cached_prompt_tokens, 16);
    QCOMPARE(warm_b.tokens, cold_b.tokens);
    QVERIFY(wait_until([&] { return e->telemetry()->prefix_hits >= 1; }));
    // The cached positions carry no routing (-1), the computed ones do.
    QCOMPARE(warm_b.metrics.trace.front(), int16_t(-1));
    QVERIFY(warm_b.metrics.trace.back() >= 0);
}

void TestEngine::preemptionGivesSameTokens() {
    const auto prompt = reference_ids("dense", "prompt_ids");
    std::vector<es::request_params> reqs;
    for (int i = 0; i < 4; ++i) reqs.push_back(greedy_ids(std::vector<int32_t>(prompt.begin() + i, prompt.end()), 30));
    std::vector<outcome> free_run;
    {
        auto e = make_engine("dense");
        for (const auto &r : reqs) free_run.push_back(collect(e->submit(r)));
    }
    es::engine_params p;
    p.n_kv_blocks = 8; // 128 token slots for 4 requests of ~50 tokens: preemption is certain
    p.enable_prefix_caching = false;
    auto e = make_engine("dense", p);
    std::vector<std::shared_ptr<es::request_stream>> streams;
    for (const auto &r : reqs) streams.push_back(e->submit(r));
    int preemptions = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
        const outcome o = collect(streams[i]);
        QCOMPARE(o.tokens, free_run[i].tokens);
        preemptions += o.metrics.n_preemptions;
    }
    QVERIFY2(preemptions > 0, "the small cache did not force a preemption");
    QVERIFY(wait_until([&] { return e->telemetry()->memory.kv_blocks_used == 0; }));
}

void TestEngine::telemetryCountsEqualTraces() {
    auto e = make_engine("moe-odd");
    const auto prompt = reference_ids("moe-odd", "prompt_ids");
    std::vector<es::request_metrics> ms;
    std::vector<std::shared_ptr<es::request_stream>> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(e->submit(greedy_ids(std::vector<int32_t>(prompt.begin() + 3 * i, prompt.end()), 9)));
    for (auto &s : streams) ms.push_back(collect(s).metrics);
    QVERIFY(wait_until([&] { return e->telemetry()->n_requests_finished == 3 && e->telemetry()->n_running == 0; }));
    auto t = e->telemetry();
    const int E = t->n_expert, n_moe = int(t->moe_layers.size()), K = t->n_expert_used;
    QCOMPARE(n_moe, 2); // layers 1 and 3 of moe-odd
    std::vector<uint64_t> counts(size_t(n_moe * E), 0);
    for (const auto &m : ms) {
        QCOMPARE(int(m.trace.size() % size_t(n_moe * K)), 0);
        for (size_t i = 0; i < m.trace.size(); ++i) {
            if (m.trace[i] < 0) continue;
            const size_t slot = (i / size_t(K)) % size_t(n_moe);
            counts[slot * E + size_t(m.trace[i])] += 1;
        }
    }
    QCOMPARE(counts, t->expert_tokens);
    uint64_t total = 0;
    for (auto c : t->expert_tokens) total += c;
    QVERIFY(total > 0);
}

void TestEngine::stopStringsNeverLeak() {
    auto e = make_engine("moe-shared");
    es::request_params r;
    r.messages = {{es::chat_role::user, "Tell me about routers"}};
    r.sampling = e->model_defaults();
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = 24;
    const outcome full = collect(e->submit(r));
    QVERIFY(full.text.size() > 6);
    // A stop string from the middle of the greedy text (3 bytes starting at a char boundary).
    size_t at = full.text.size() / 2;
    while (at > 0 && (uint8_t(full.text[at]) & 0xC0) == 0x80) --at;
    size_t len = 1;
    while (at + len < full.text.size() && (uint8_t(full.text[at + len]) & 0xC0) == 0x80) ++len;
    const std::string stop = full.text.substr(at, len + 1 <= full.text.size() - at ? len + 1 : len);
    r.sampling.stop_strings = {stop, "never-matches-anything-xyz"};
    const outcome cut = collect(e->submit(r));
    QCOMPARE(cut.finish_reason, std::string("stop"));
    QCOMPARE(cut.text, full.text.substr(0, full.text.find(stop)));
    QVERIFY(cut.text.find(stop) == std::string::npos);
}

void TestEngine::promptLongerThanContext() {
    auto e = make_engine("dense"); // max_position_embeddings 4096
    const outcome o = collect(e->submit(greedy_ids(std::vector<int32_t>(4096, 7), 4)));
    QVERIFY2(o.error.find("context") != std::string::npos, o.error.c_str());
    QVERIFY2(o.error.find("4096") != std::string::npos, o.error.c_str());
}

void TestEngine::cancelFreesBlocks() {
    auto e = make_engine("moe-shared");
    cancel_mid_stream(*e, reference_ids("moe-shared", "prompt_ids"), 3);
}

void TestEngine::destroyMidStream() {
    std::vector<std::shared_ptr<es::request_stream>> streams;
    {
        auto e = make_engine("moe-odd");
        for (int i = 0; i < 3; ++i) streams.push_back(e->submit(greedy_ids(reference_ids("moe-odd", "prompt_ids"), 3000)));
        es::request_event ev;
        QVERIFY(streams[0]->wait_pop(ev, 5000ms));
    } // engine destroyed while generating
    for (auto &s : streams) {
        const outcome o = collect(s, 5s);
        QVERIFY2(o.finish_reason == "cancelled" || !o.error.empty(), o.finish_reason.c_str());
        QVERIFY(s->done());
    }
}

// backend::submit/finish (the default: the forward runs at submit) with fed tokens: a greedy
// decode with two steps in flight, each step's token the previous step's top candidate, gives the
// tokens and the logits (bit for bit) of forward() step by step; and bad feeds are refused.
void TestEngine::submitFeedsTokens() {
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model((data_dir + "/dense").toStdString(), lp);
    QVERIFY(m.ok());
    es::backend &be = *(*m)->be;
    const int64_t V = be.config().n_vocab;
    const auto prompt = reference_ids("dense", "prompt_ids");
    const int32_t P = int32_t(prompt.size()), steps = 12;
    auto prefill = [&](es::forward_output &out) {
        QVERIFY(be.init_kv_cache({16, 8}).ok());
        es::batch b;
        b.seqs = {{{0, 1, 2, 3, 4, 5, 6, 7}}};
        b.tokens = prompt;
        for (int32_t i = 0; i < P; ++i) {
            b.pos.push_back(i);
            b.seq.push_back(0);
        }
        b.logits_rows = {P - 1};
        QVERIFY(be.forward(b, out).ok());
    };
    auto decode_batch = [&](int32_t token, int32_t pos) {
        es::batch b;
        b.seqs = {{{0, 1, 2, 3, 4, 5, 6, 7}}};
        b.tokens = {token};
        b.pos = {pos};
        b.seq = {0};
        b.logits_rows = {0};
        return b;
    };
    // Step by step: forward(), the token picked on the host.
    es::forward_output out;
    prefill(out);
    std::vector<int32_t> serial;
    std::vector<std::vector<float>> serial_logits;
    int32_t tok = es::top_candidates(out, V)[0];
    for (int32_t i = 0; i < steps; ++i) {
        serial.push_back(tok);
        QVERIFY(be.forward(decode_batch(tok, P + i), out).ok());
        serial_logits.push_back(out.logits);
        tok = es::top_candidates(out, V)[0];
    }
    // Two in flight: step i+1 submitted before step i is finished, its token fed (−1: row 0).
    prefill(out);
    std::vector<int32_t> fed{es::top_candidates(out, V)[0]};
    QVERIFY(be.submit(decode_batch(fed[0], P)).ok());
    for (int32_t i = 0; i < steps; ++i) {
        if (i + 1 < steps) QVERIFY(be.submit(decode_batch(-1, P + i + 1)).ok());
        QCOMPARE(be.in_flight(), i + 1 < steps ? 2 : 1);
        QVERIFY(be.finish(out).ok());
        QVERIFY(std::memcmp(out.logits.data(), serial_logits[size_t(i)].data(), size_t(V) * 4) == 0);
        if (i + 1 < steps) fed.push_back(es::top_candidates(out, V)[0]);
    }
    QCOMPARE(fed, serial);
    QCOMPARE(be.in_flight(), 0);
    // logits_row answers for a finished forward only (the kept rows would be the newer one's).
    std::vector<float> row(static_cast<size_t>(V));
    QVERIFY(be.logits_row(0, row).ok());
    QVERIFY(be.submit(decode_batch(1, P)).ok());
    QVERIFY(!be.logits_row(0, row).ok());
    QVERIFY(be.finish(out).ok());
    QVERIFY(be.logits_row(0, row).ok());
    // Refused: a third in flight, a row the previous forward did not have, finish with none.
    QVERIFY(be.submit(decode_batch(1, P)).ok());
    QVERIFY(be.submit(decode_batch(-1, P + 1)).ok());
    auto st = be.submit(decode_batch(-1, P + 2));
    QVERIFY(!st.ok());
    QVERIFY2(st.message().find("two forwards") != std::string::npos, st.message().c_str());
    QVERIFY(be.finish(out).ok());
    QVERIFY(be.finish(out).ok());
    st = be.submit(decode_batch(-2, P + 2)); // row 1: the previous forward had one row
    QVERIFY(!st.ok());
    QVERIFY2(st.message().find("row 1") != std::string::npos, st.message().c_str());
    st = be.finish(out);
    QVERIFY(!st.ok());
    // forward() itself takes no fed token.
    QVERIFY(!be.forward(decode_batch(-1, P), out).ok());
}

// The engine with overlapped steps (on the CPU backend the forward runs at submit, so only the
// engine's bookkeeping differs): greedy requests of several lengths alongside a sampled one (no
// overlap while it runs) give the tokens they give without it, and steps were overlapped.
void TestEngine::overlappedStepsGiveSameTokens() {
    const auto prompt = reference_ids("moe-odd", "prompt_ids");
    std::vector<es::request_params> lone, together;
    for (int i = 0; i < 4; ++i) lone.push_back(greedy_ids(std::vector<int32_t>(prompt.begin() + 2 * i, prompt.end()), 9 + 5 * i));
    together = lone;
    es::request_params sampled = greedy_ids(prompt, 12);
    sampled.sampling.temperature = 0.9f;
    sampled.sampling.seed = 7;
    together.push_back(sampled);
    for (bool concurrent : {false, true}) {
        const auto &reqs = concurrent ? together : lone;
        std::vector<outcome> off, on;
        for (auto mode : {es::engine_params::overlap_mode::off, es::engine_params::overlap_mode::on}) {
            es::engine_params p;
            p.overlap = mode;
            auto e = make_engine("moe-odd", p);
            std::vector<std::shared_ptr<es::request_stream>> streams;
            if (concurrent)
                for (const auto &r : reqs) streams.push_back(e->submit(r));
            auto &res = mode == es::engine_params::overlap_mode::on ? on : off;
            for (size_t i = 0; i < reqs.size(); ++i) res.push_back(collect(concurrent ? streams[i] : e->submit(reqs[i])));
            // (the snapshot after the last step: one published before it may show no step at all)
            QVERIFY(wait_until([&] {
                auto t = e->telemetry();
                return t->n_running == 0 && t->n_requests_finished == reqs.size();
            }));
            auto t = e->telemetry();
            if (mode == es::engine_params::overlap_mode::on)
                QVERIFY2(t->n_steps_overlapped > 0, concurrent ? "no step overlapped (concurrent)" : "no step overlapped (one at a time)");
            else QCOMPARE(t->n_steps_overlapped, uint64_t(0));
            // The steps' spans partition the engine's time, overlapped or not (a reply's phase
            // sums count each moment once).
            for (size_t i = 1; i < t->recent_steps.size(); ++i) {
                const auto &a = t->recent_steps[i - 1], &b = t->recent_steps[i];
                QVERIFY2(double(b.t_start_us) >= double(a.t_start_us) + 1000.0 * a.duration_ms - 2.0,
                         qPrintable(QString("step %1 starts %2 µs before step %3 ends")
                                        .arg(b.step)
                                        .arg(double(a.t_start_us) + 1000.0 * a.duration_ms - double(b.t_start_us))
                                        .arg(a.step)));
            }
            QVERIFY(wait_until([&] { return e->telemetry()->memory.kv_blocks_used == 0; }));
        }
        for (size_t i = 0; i < reqs.size(); ++i) {
            QCOMPARE(on[i].tokens, off[i].tokens);
            QCOMPARE(on[i].finish_reason, off[i].finish_reason);
            QCOMPARE(int(on[i].tokens.size()), reqs[i].sampling.max_tokens);
            // Every position's routing is recorded once, overlapped or not; −1 marks a position
            // served by the prefix cache, which depends on when a request sharing the prompt
            // (the sampled one and the first greedy one) was admitted.
            const auto &ta = on[i].metrics.trace, &tb = off[i].metrics.trace;
            QCOMPARE(ta.size(), tb.size());
            for (size_t j = 0; j < ta.size(); ++j)
                QVERIFY2(ta[j] == tb[j] || ta[j] < 0 || tb[j] < 0,
                         qPrintable(QString("request %1, trace entry %2: %3 against %4").arg(i).arg(j).arg(ta[j]).arg(tb[j])));
        }
    }
}

// Overlapped steps end where they should: a stop id met while the next step is already
// submitted (its work is dropped), a stop string, and a cancel mid-stream free every block.
void TestEngine::overlappedStopAndCancel() {
    const auto prompt = reference_ids("moe-shared", "prompt_ids");
    es::engine_params p;
    p.overlap = es::engine_params::overlap_mode::on;
    auto e = make_engine("moe-shared", p);
    const outcome full = collect(e->submit(greedy_ids(prompt, 20)));
    QCOMPARE(int(full.tokens.size()), 20);
    es::request_params r = greedy_ids(prompt, 20);
    r.sampling.stop_ids = {full.tokens[7]};
    const outcome stopped = collect(e->submit(r));
    QCOMPARE(stopped.finish_reason, std::string("stop"));
    const auto first = std::find(full.tokens.begin(), full.tokens.end(), full.tokens[7]);
    QCOMPARE(stopped.tokens, std::vector<int32_t>(full.tokens.begin(), first));
    QVERIFY(wait_until([&] { return e->telemetry()->memory.kv_blocks_used == 0; }));
    cancel_mid_stream(*e, prompt, 5);
    QVERIFY(e->telemetry()->n_steps_overlapped > 0);
}

// Which steps the engine asks a device to time per phase (engine_params::phase_timing_every):
// every request's first two sampling steps (its prompt, its first decode), then one in N; all of
// them while detailed profiling is on. The telemetry marks exactly those steps timed and carries
// the latest one's launches.
void TestEngine::phaseTimingSamplesSteps() {
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model((data_dir + "/moe-shared").toStdString(), lp);
    QVERIFY(m.ok());
    auto wrapped = std::make_unique<es::model>();
    wrapped->config = (*m)->config;
    auto spy_owner = std::make_unique<timing_spy>(*(*m)->be);
    timing_spy &spy = *spy_owner;
    wrapped->be = std::move(spy_owner);
    es::engine_params ep;
    ep.phase_timing_every = 4;
    es::engine e(ep);
    QVERIFY(e.load_model(std::move(wrapped)).get().ok());
    const outcome a = collect(e.submit(greedy_ids({5, 6, 7, 8, 9, 10}, 12)));
    QVERIFY2(a.error.empty(), a.error.c_str());
    // Step 0: the prompt; 1: the first decode; then every fourth (5, 9).
    const std::vector<bool> want = {true, true, false, false, false, true, false, false, false, true, false, false};
    QCOMPARE(spy.asked, want);
    auto t = e.telemetry();
    QVERIFY(wait_until([&] { return (t = e.telemetry())->n_steps == want.size(); }));
    QCOMPARE(t->recent_steps.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        QCOMPARE(t->recent_steps[i].phases_timed, bool(want[i]));
        QCOMPARE(t->recent_steps[i].phases_on_device, bool(want[i]));
        if (want[i]) QVERIFY(t->recent_steps[i].attention_ms + t->recent_steps[i].moe_ms > 0.0);
    }
    QCOMPARE(t->timeline.size(), size_t(1));
    QCOMPARE(t->timeline_step, uint64_t(9));
    // Detailed: every step.
    spy.asked.clear();
    e.set_detailed_profiling(true);
    QVERIFY(e.detailed_profiling());
    const outcome b = collect(e.submit(greedy_ids({11, 12, 13}, 5)));
    QVERIFY2(b.error.empty(), b.error.c_str());
    QCOMPARE(spy.asked, std::vector<bool>(5, true));
}

QTEST_GUILESS_MAIN(TestEngine)
#include "test_engine.moc"
