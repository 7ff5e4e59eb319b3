// Expert interventions (engine/backend/routing_intervention.h): the option syntax, the checks
// against a model, and the CPU backend's routing under them on every MoE reference checkpoint.
// The first MoE layer's router input does not depend on any intervention, so a pass with k = every
// expert records that layer's full probability row per token (p normalised over all experts is p);
// each intervention's choice there is then recomputed here from p and the checkpoint's correction
// bias by the stated semantics and compared with what the backend recorded, with the router's
// margin (the last free choice's score over the best one left out). Through the engine:
// the trace of a generated reply never holds a disabled expert, an intervened request neither
// reads nor fills the prefix cache, and a bad intervention is refused with its reason.
#include "engine/backend/routing_intervention.h"
#include "engine/core/dtype.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

using namespace es;

namespace {

std::vector<int32_t> prompt_ids(int64_t n_vocab, int n) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 7919 + 13) % n_vocab));
    return ids;
}

// One teacher-forced pass over `ids` under `iv` (null: none).
forward_output run(backend &be, const std::vector<int32_t> &ids, std::shared_ptr<const routing_intervention> iv) {
    const int32_t bs = 16, n = int32_t(ids.size()), n_blocks = (n + bs - 1) / bs;
    if (auto s = be.init_kv_cache({bs, n_blocks}); !s) qFatal("init_kv_cache: %s", s.message().c_str());
    batch b;
    b.tokens = ids;
    b.seqs.resize(1);
    b.seqs[0].routing = std::move(iv);
    for (int32_t i = 0; i < n_blocks; ++i) b.seqs[0].block_table.push_back(i);
    for (int32_t i = 0; i < n; ++i) {
        b.pos.push_back(i);
        b.seq.push_back(0);
        b.logits_rows.push_back(i);
    }
    forward_output out;
    if (auto s = be.forward(b, out); !s) qFatal("forward: %s", s.message().c_str());
    return out;
}

std::shared_ptr<const routing_intervention> make(routing_intervention iv) {
    return std::make_shared<const routing_intervention>(std::move(iv));
}

// The stated semantics, from the layer's probabilities p (no intervention) and bias; margin: the
// last free choice's score minus the best score left out (NaN: every place forced, or none left).
void expected_choice(const std::vector<float> &p0, const std::vector<float> &bias, const layer_routing &lr,
                     double norm_min, std::vector<int32_t> &ids, std::vector<float> &w, double &margin) {
    const size_t E = p0.size();
    double kept = 0.0; // softmax without the disabled experts = p renormalised over the others
    for (size_t e = 0; e < E; ++e)
        if (!lr.disabled[e]) kept += p0[e];
    std::vector<double> p(E), score(E);
    for (size_t e = 0; e < E; ++e) {
        p[e] = lr.disabled[e] ? 0.0 : p0[e] / kept;
        score[e] = lr.disabled[e] ? -INFINITY : p[e] + double(lr.bias_scale) * bias[e];
    }
    ids.assign(lr.forced.begin(), lr.forced.end());
    std::vector<int32_t> rest;
    for (int32_t e = 0; e < int32_t(E); ++e)
        if (std::find(ids.begin(), ids.end(), e) == ids.end()) rest.push_back(e);
    std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
    const size_t n_free = size_t(lr.k) - ids.size();
    margin = NAN;
    if (n_free > 0 && rest.size() > n_free && std::isfinite(score[size_t(rest[n_free])]))
        margin = score[size_t(rest[n_free - 1])] - score[size_t(rest[n_free])];
    rest.resize(n_free);
    ids.insert(ids.end(), rest.begin(), rest.end());
    double sum = 0.0;
    for (int32_t e : ids) sum += p[size_t(e)];
    w.clear();
    for (int32_t e : ids) w.push_back(float(p[size_t(e)] / std::max(sum, norm_min)));
}

} // namespace

class TestRoutingIntervention : public QObject {
    Q_OBJECT
private slots:
    void parsesExpertLists();
    void refusesWhatTheModelLacks();
    void describes();
    void emptyInterventionChangesNothing();
    void cpuFollowsTheSemantics_data();
    void cpuFollowsTheSemantics();
    void engineAppliesAndIsolates();
    void matchesHfTransformers_data();
    void matchesHfTransformers();
};

void TestRoutingIntervention::parsesExpertLists() {
    auto r = parse_expert_refs(" 3:5, *:1 ,3:5,", "--disable-experts");
    QVERIFY(r.ok());
    QCOMPARE(int(r->size()), 2); // duplicates dropped, empty items ignored
    QCOMPARE((*r)[0], (expert_ref{3, 5}));
    QCOMPARE((*r)[1], (expert_ref{-1, 1}));
    QCOMPARE(QString::fromStdString(format_expert_refs(*r)), QString("3:5,*:1"));
    QVERIFY(parse_expert_refs("", "x")->empty());
    for (const char *bad : {"3", "3:", ":5", "a:1", "1:b", "-1:2", "1:-2", "1:2:3", "99999999999:1"}) {
        auto e = parse_expert_refs(bad, "--force-experts");
        QVERIFY2(!e.ok(), bad);
        QVERIFY(QString::fromStdString(e.message()).startsWith("--force-experts: '"));
    }
}

void TestRoutingIntervention::refusesWhatTheModelLacks() {
    auto cfg = load_model_config(std::string(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(cfg.ok()); // 3 layers, layer 0 dense, 8 experts, k 2
    auto msg = [&](routing_intervention iv) {
        auto s = check_routing_intervention(iv, *cfg);
        return s.ok() ? QString() : QString::fromStdString(s.message());
    };
    QCOMPARE(msg({}), QString());
    QCOMPARE(msg({{{1, 3}}, {{2, 0}}, 0, 0.5f}), QString());
    QVERIFY(msg({{{0, 1}}, {}, 0, 1.0f}).contains("layer 0 is a dense layer"));
    QVERIFY(msg({{{7, 1}}, {}, 0, 1.0f}).contains("does not exist"));
    QVERIFY(msg({{{1, 8}}, {}, 0, 1.0f}).contains("the model has 8 experts"));
    QVERIFY(msg({{{1, 2}}, {{-1, 2}}, 0, 1.0f}).contains("both disabled and forced"));
    QVERIFY(msg({{}, {{1, 1}, {1, 2}, {1, 3}}, 0, 1.0f}).contains("raise top-k"));
    QVERIFY(msg({{{-1, 0}}, {}, 8, 1.0f}).contains("only 7 are not disabled"));
    QVERIFY(msg({{}, {}, 9, 1.0f}).contains("outside 1…8"));
    QVERIFY(msg({{}, {}, 0, INFINITY}).contains("finite"));
    auto dense = load_model_config(std::string(ES_TEST_DATA_DIR) + "/dense");
    QVERIFY(dense.ok());
    QVERIFY(!check_routing_intervention({{}, {}, 3, 1.0f}, *dense).ok());
}

void TestRoutingIntervention::describes() {
    QCOMPARE(QString::fromStdString(describe_routing_intervention({})), QString("none"));
    QCOMPARE(QString::fromStdString(describe_routing_intervention({{{3, 5}, {-1, 1}}, {{2, 0}}, 4, 0.5f})),
             QString("disable 3:5, *:1; force 2:0; top-k 4; bias × 0.5"));
}

// An empty intervention (or none) gives the bits of the plain pass.
void TestRoutingIntervention::emptyInterventionChangesNothing() {
    model_load_params lp;
    lp.need_tokenizer = false;
    auto m = load_model(std::string(ES_TEST_DATA_DIR) + "/moe-odd", lp);
    QVERIFY2(m.ok(), m.ok() ? "" : m.message().c_str());
    const auto ids = prompt_ids((*m)->config.n_vocab, 21);
    const forward_output a = run(*(*m)->be, ids, nullptr), b = run(*(*m)->be, ids, make({}));
    QCOMPARE(a.logits.size(), b.logits.size());
    QVERIFY(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    QVERIFY(a.routing.ids == b.routing.ids);
    // A real intervention changes the logits.
    const forward_output c = run(*(*m)->be, ids, make({{}, {}, 1, 1.0f}));
    QVERIFY(std::memcmp(a.logits.data(), c.logits.data(), a.logits.size() * sizeof(float)) != 0);
}

void TestRoutingIntervention::cpuFollowsTheSemantics_data() {
    QTest::addColumn<QString>("dir");
    const QDir data(ES_TEST_DATA_DIR);
    int n = 0;
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        auto cfg = load_model_config(data.filePath(name).toStdString());
        if (!cfg.ok() || cfg->arch != model_arch::moe) continue;
        QTest::newRow(qPrintable(name)) << data.filePath(name);
        ++n;
    }
    QVERIFY2(n >= 2, "expected MoE reference checkpoints in tests/data");
}

void TestRoutingIntervention::cpuFollowsTheSemantics() {
    QFETCH(QString, dir);
    model_load_params lp;
    lp.need_tokenizer = false;
    auto loaded = load_model(dir.toStdString(), lp);
    QVERIFY2(loaded.ok(), loaded.ok() ? "" : loaded.message().c_str());
    backend &be = *(*loaded)->be;
    const model_config &c = (*loaded)->config;
    QVERIFY(be.supports_routing_interventions());
    int32_t first = 0;
    while (!c.is_moe_layer(first)) ++first;
    const int64_t E = c.n_expert;
    auto store = weight_store::open_dir(dir.toStdString());
    QVERIFY(store.ok());
    const tensor_view *bt =
        (*store)->find("model.layers." + std::to_string(first) + ".mlp.moe_statics.e_score_correction_bias");
    QVERIFY(bt && bt->n_elements() == E);
    std::vector<float> bias(static_cast<size_t>(E));
    convert_to_f32(bt->type, bt->data, bias.data(), bias.size());

    const auto ids = prompt_ids(c.n_vocab, 24);
    const int64_t T = int64_t(ids.size());
    // p of the first MoE layer per token: every expert selected, weights = p / Σp = p.
    const forward_output all = run(be, ids, make({{}, {}, int32_t(E), 1.0f}));
    QCOMPARE(all.routing.moe_layers.front(), first);
    QCOMPARE(all.routing.n_expert_used, int32_t(E));
    std::vector<std::vector<float>> p(static_cast<size_t>(T), std::vector<float>(static_cast<size_t>(E)));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < E; ++j)
            p[t][all.routing.ids[0][t * E + j]] = all.routing.weights[0][t * E + j];

    // The most favoured expert by bias, and the top expert of token 0: the interesting ones.
    const int32_t biased_best = int32_t(std::max_element(bias.begin(), bias.end()) - bias.begin());
    const int32_t top0 = int32_t(std::max_element(p[0].begin(), p[0].end()) - p[0].begin());
    const int32_t other = (top0 + 1) % int32_t(E) == biased_best ? (top0 + 2) % int32_t(E) : (top0 + 1) % int32_t(E);
    const int32_t K = int32_t(c.n_expert_used);
    const std::vector<routing_intervention> cases = {
        {{{first, top0}}, {}, 0, 1.0f},                     // the favourite disabled in this layer
        {{{-1, top0}, {-1, biased_best}}, {}, 0, 1000.0f},  // a huge bias cannot bring a disabled one back
        {{}, {{first, other}}, 0, 1.0f},                    // one forced
        {{}, {{-1, other}, {first, top0}}, K + 1, 1.0f},    // two forced, k raised
        {{}, {}, 1, 1.0f},                                  // top-1
        {{}, {}, 0, 0.0f},                                  // no correction bias
        {{}, {}, 0, 1000.0f},                               // the bias decides
        {{{first, biased_best}}, {{first, other}}, K, -2.0f},
    };
    for (const auto &iv : cases) {
        QVERIFY2(check_routing_intervention(iv, c).ok(), describe_routing_intervention(iv).c_str());
        const forward_output got = run(be, ids, make(iv));
        const layer_routing lr = routing_for_layer(iv, first, E, c.n_expert_used);
        const int32_t k = got.routing.n_expert_used;
        QCOMPARE(k, lr.k);
        const QByteArray what = QByteArray::fromStdString(describe_routing_intervention(iv));
        for (int64_t t = 0; t < T; ++t) {
            std::vector<int32_t> want_ids;
            std::vector<float> want_w;
            double want_margin = 0.0;
            expected_choice(p[t], bias, lr, c.moe_norm_min, want_ids, want_w, want_margin);
            QCOMPARE(got.routing.margins.size(), got.routing.moe_layers.size());
            const float margin = got.routing.margins[0][size_t(t)];
            QVERIFY2(std::isnan(want_margin) ? std::isnan(margin)
                                             : std::abs(margin - want_margin) <= 1e-5 * std::max(1.0, std::abs(want_margin)),
                     what + ": token " + QByteArray::number(t) + " margin " + QByteArray::number(margin) +
                         ", expected " + QByteArray::number(want_margin));
            for (int32_t j = 0; j < k; ++j) {
                const int32_t e = got.routing.ids[0][t * k + j];
                QVERIFY2(e == want_ids[j], what + ": token " + QByteArray::number(t) + " choice " +
                                               QByteArray::number(j) + ": expert " + QByteArray::number(e) +
                                               ", expected " + QByteArray::number(want_ids[j]));
                QVERIFY2(std::abs(got.routing.weights[0][t * k + j] - want_w[j]) <= 2e-6f * std::max(1.0f, want_w[j]),
                         what + ": token " + QByteArray::number(t) + " weight");
            }
            // Every MoE layer: disabled experts never chosen, forced ones first.
            for (size_t s = 0; s < got.routing.moe_layers.size(); ++s) {
                const layer_routing ls = routing_for_layer(iv, got.routing.moe_layers[s], E, c.n_expert_used);
                for (int32_t j = 0; j < k; ++j) {
                    const int32_t e = got.routing.ids[s][t * k + j];
                    QVERIFY(e >= 0 && !ls.disabled[size_t(e)]);
                    if (j < int32_t(ls.forced.size())) QCOMPARE(e, ls.forced[size_t(j)]);
                }
            }
        }
    }
}

// Through the engine: the reply's trace honours the intervention, the prefix cache is neither
// read nor filled by an intervened request, and a bad intervention fails the request by name.
void TestRoutingIntervention::engineAppliesAndIsolates() {
    engine_params ep;
    ep.load.need_tokenizer = false;
    ep.max_num_seqs = 2;
    engine eng(ep);
    QVERIFY(eng.load_model(std::string(ES_TEST_DATA_DIR) + "/moe-shared").get().ok());
    const auto prompt = prompt_ids(3000, 40); // two full blocks of 16
    auto generate = [&](std::shared_ptr<const routing_intervention> iv, request_metrics &m, std::string &error) {
        request_params rp;
        rp.prompt_ids = prompt;
        rp.sampling = eng.model_defaults();
        rp.sampling.temperature = 0.0f;
        rp.sampling.max_tokens = 6;
        rp.routing = std::move(iv);
        auto stream = eng.submit(std::move(rp));
        for (request_event ev;;) {
            if (!stream->wait_pop(ev, std::chrono::seconds(60))) return false;
            if (ev.kind == event_kind::failed) error = ev.error;
            if (ev.kind != event_kind::token) break;
        }
        m = stream->metrics();
        return true;
    };
    request_metrics plain, again, lab;
    std::string err;
    QVERIFY(generate(nullptr, plain, err) && err.empty());
    QVERIFY(generate(nullptr, again, err) && err.empty());
    QCOMPARE(again.n_cached_prompt_tokens, 32); // the plain prompt's full blocks are shared

    routing_intervention iv;
    iv.disabled = {{-1, 0}, {-1, 1}};
    iv.top_k = 3;
    QVERIFY(generate(make(iv), lab, err) && err.empty());
    QCOMPARE(lab.n_cached_prompt_tokens, 0); // not served from the plain request's KV
    QCOMPARE(lab.k, 3);
    QCOMPARE(int64_t(lab.trace.size()), int64_t(prompt.size() + 6 - 1) * lab.n_moe_layers * 3);
    for (int16_t e : lab.trace) QVERIFY(e >= 2);
    // One router margin per position and MoE layer, recorded by the CPU backend for every
    // position it computed (none of these came from the prefix cache).
    QCOMPARE(int64_t(lab.trace_margins.size()), int64_t(prompt.size() + 6 - 1) * lab.n_moe_layers);
    for (float m : lab.trace_margins) QVERIFY(m >= 0.0f);
    QCOMPARE(int64_t(again.trace_margins.size()), int64_t(prompt.size() + 6 - 1) * again.n_moe_layers);
    QVERIFY(std::isnan(again.trace_margins.front())); // served by the prefix cache
    request_metrics after;
    QVERIFY(generate(nullptr, after, err) && err.empty());
    QCOMPARE(after.n_cached_prompt_tokens, 32); // the plain KV is still there, not overwritten

    routing_intervention bad;
    bad.forced = {{0, 1}};
    request_metrics none;
    QVERIFY(generate(make(bad), none, err));
    QVERIFY2(QString::fromStdString(err).contains("layer 0 is a dense layer"), err.c_str());
}

// HF transformers' logits under the same interventions (tests/reference/make_intervention_reference.py
// patches each MoE block to route by these semantics, after proving the patched block reproduces
// HF's own): every MoE reference checkpoint, every case, teacher-forced on the reference prompt.
void TestRoutingIntervention::matchesHfTransformers_data() {
    QTest::addColumn<QString>("dir");
    const QDir data(ES_TEST_DATA_DIR);
    int n = 0;
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        auto cfg = load_model_config(data.filePath(name).toStdString());
        if (!cfg.ok() || cfg->arch != model_arch::moe || !QFile::exists(data.filePath(name + "/reference.json")))
            continue;
        QTest::newRow(qPrintable(name)) << data.filePath(name);
        ++n;
    }
    QVERIFY2(n >= 2, "expected MoE reference checkpoints in tests/data");
}

void TestRoutingIntervention::matchesHfTransformers() {
    QFETCH(QString, dir);
    QFile cases(dir + "/interventions.json"), ref(dir + "/reference.json");
    QVERIFY2(cases.open(QIODevice::ReadOnly),
             "no interventions.json: run tests/reference/make_intervention_reference.py where torch is installed");
    QVERIFY(ref.open(QIODevice::ReadOnly));
    const QJsonArray list = QJsonDocument::fromJson(cases.readAll()).object().value("cases").toArray();
    std::vector<int32_t> prompt;
    for (const QJsonValue &v : QJsonDocument::fromJson(ref.readAll()).object().value("prompt_ids").toArray())
        prompt.push_back(int32_t(v.toInt()));
    auto golden = read_npy_f32((dir + "/ref_logits_interventions.npy").toStdString());
    QVERIFY2(golden.ok(), golden.ok() ? "" : golden.message().c_str());
    QVERIFY(!list.isEmpty() && !prompt.empty());
    model_load_params lp;
    lp.need_tokenizer = false;
    auto loaded = load_model(dir.toStdString(), lp);
    QVERIFY2(loaded.ok(), loaded.ok() ? "" : loaded.message().c_str());
    const int64_t V = (*loaded)->config.n_vocab, per_case = int64_t(prompt.size()) * V;
    QCOMPARE(int64_t(golden->data.size()), per_case * list.size());
    for (qsizetype i = 0; i < list.size(); ++i) {
        const QJsonObject c = list[i].toObject();
        auto iv = make_routing_intervention(c.value("disable").toString().toStdString(),
                                            c.value("force").toString().toStdString(), c.value("top_k").toInt(),
                                            float(c.value("bias_scale").toDouble()), "--disable-experts",
                                            "--force-experts");
        QVERIFY2(iv.ok(), iv.ok() ? "" : iv.message().c_str());
        QVERIFY2(check_routing_intervention(*iv, (*loaded)->config).ok(), "the case does not fit the model");
        const forward_output out = run(*(*loaded)->be, prompt, make(*iv));
        QCOMPARE(int64_t(out.logits.size()), per_case);
        double err = 0.0, norm = 0.0;
        for (int64_t k = 0; k < per_case; ++k) {
            const double g = golden->data[size_t(i * per_case + k)], d = out.logits[size_t(k)] - g;
            err += d * d;
            norm += g * g;
        }
        const double nmse = err / std::max(norm, 1e-30);
        qInfo("%s case %lld (%s): NMSE %.3e", qPrintable(QDir(dir).dirName()), (long long)i,
              describe_routing_intervention(*iv).c_str(), nmse);
        QVERIFY2(nmse <= 1e-6, qPrintable(QStringLiteral("case %1: NMSE %2 > 1e-6").arg(i).arg(nmse)));
    }
}

QTEST_GUILESS_MAIN(TestRoutingIntervention)
#include "test_routing_intervention.moc"
