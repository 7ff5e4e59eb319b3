// Study, not a test (CTest label "bench"): where the BF16 path's error against fp32 comes from.
// A plain forward pass whose BF16 roundings are switched on one at a time — the roundings the
// twin model (the CUDA backend's numerics, engine/cuda/cuda_twin_model.h) makes, or those HF
// transformers' own bf16 forward makes (Ernie4_5_Moe* in modeling_ernie4_5_moe.py: bf16 residual,
// RMSNorm rounded before and after its weight, every linear's output rounded, bf16 attention
// scores and probabilities, the routed experts' outputs weighted and summed in bf16, the router
// fp32 on the bf16 normalized row) — set against the same pass all fp32, per reference
// checkpoint and over random prompts: NMSE overall and at the worst position, and the routing
// decisions (token × MoE layer) that differ from fp32's. Prints the figures of ARCHITECTURE.md,
// "Fidelity of the BF16 path"; ES_BENCH_PROMPTS (default 40) sets the random prompts.
#include "engine/core/compare.h"
#include "engine/core/dtype.h"
#include "engine/cuda/cuda_twin_model.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/model.h"
#include "kernels/kernel_common.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace {

// The roundings, each a bit: the twin's five (twin_all), and HF's bf16 forward (hf).
enum rounding : unsigned {
    r_attn_norm = 1, // the attention input norm's output
    r_ffn_norm = 2,  // the FFN input norm's output (the experts' input)
    r_router_in = 4, // the router's input (the FFN norm's output, rounded)
    r_qkv = 8,       // q and k after RoPE, v
    r_attn_out = 16, // the attention output
    r_act = 32,      // SiLU(gate)·up
    r_head_in = 64,  // the output norm's output
    twin_all = 127,
    hf = 128,
};

float bf(float v) { return es::round_bf16(v); }

std::vector<float> f32(const es::tensor_view *tv) {
    std::vector<float> f(static_cast<size_t>(tv->n_elements()));
    es::convert_to_f32(tv->type, tv->data, f.data(), f.size());
    return f;
}

struct pass_out {
    std::vector<float> logits;             // [T, V]
    std::vector<std::vector<int32_t>> ids; // per MoE layer [T·K], sorted per token
};

// One sequence from position 0 with the roundings in `r`.
pass_out forward(const es::model_config &c, const es::model_tensors &t, const std::vector<int32_t> &tok,
                 unsigned r) {
    const bool h = r & hf;
    const int64_t T = int64_t(tok.size()), H = c.n_embd, hd = c.head_dim, nh = c.n_head, nkv = c.n_head_kv,
                  qd = nh * hd, kvd = nkv * hd, K = c.n_expert_used, E = c.n_expert;
    const float eps = float(c.rms_eps);
    pass_out o;
    std::vector<float> x(static_cast<size_t>(T * H));
    const auto emb = f32(t.tok_embd);
    for (int64_t i = 0; i < T; ++i) std::copy_n(emb.begin() + tok[i] * H, H, x.begin() + i * H);
    auto lin = [&](const std::vector<float> &in, int64_t k, const std::vector<float> &w) {
        const int64_t n = int64_t(w.size()) / k;
        std::vector<float> y(static_cast<size_t>(T * n));
        for (int64_t m = 0; m < T; ++m)
            for (int64_t j = 0; j < n; ++j) {
                float a = 0;
                for (int64_t i = 0; i < k; ++i) a += w[j * k + i] * in[m * k + i];
                y[m * n + j] = h ? bf(a) : a;
            }
        return y;
    };
    // rms_norm: the twin's one rounding of weight·(x·scale), or HF's two; `exact` skips rounding.
    auto norm = [&](const es::tensor_view *wt, bool round, bool exact = false) {
        const auto w = f32(wt);
        std::vector<float> y(static_cast<size_t>(T * H));
        for (int64_t m = 0; m < T; ++m) {
            float ss = 0;
            for (int64_t i = 0; i < H; ++i) ss += x[m * H + i] * x[m * H + i];
            const float s = 1.0f / std::sqrt(ss / float(H) + eps);
            for (int64_t i = 0; i < H; ++i) {
                const float v = x[m * H + i] * s;
                y[m * H + i] = exact ? w[i] * v : h ? bf(w[i] * bf(v)) : round ? bf(w[i] * v) : w[i] * v;
            }
        }
        return y;
    };
    auto add = [&](const std::vector<float> &y) {
        for (size_t i = 0; i < x.size(); ++i) x[i] = h ? bf(x[i] + y[i]) : x[i] + y[i];
    };
    auto swiglu = [&](const std::vector<float> &in, const std::vector<float> &g, const std::vector<float> &u,
                      const std::vector<float> &d, int64_t F) {
        const auto gy = lin(in, H, g), uy = lin(in, H, u);
        std::vector<float> a(gy.size());
        for (size_t i = 0; i < a.size(); ++i) {
            const float s = gy[i] / (1.0f + std::exp(-gy[i]));
            a[i] = h ? bf(bf(s) * uy[i]) : (r & r_act) ? bf(s * uy[i]) : s * uy[i];
        }
        return lin(a, F, d);
    };
    std::vector<float> inv(static_cast<size_t>(hd / 2));
    for (int64_t i = 0; i < hd / 2; ++i)
        inv[i] = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(hd));
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const es::layer_tensors &L = t.layers[il];
        auto xn = norm(L.attn_norm, r & r_attn_norm);
        auto q = lin(xn, H, f32(L.wq)), k = lin(xn, H, f32(L.wk)), v = lin(xn, H, f32(L.wv));
        for (int64_t m = 0; m < T; ++m)
            for (int64_t hh = 0; hh < nh + nkv; ++hh)
                for (int64_t i = 0; i < hd / 2; ++i) {
                    float *row = hh < nh ? &q[m * qd + hh * hd] : &k[m * kvd + (hh - nh) * hd];
                    const float ang = float(m) * inv[i], cs = std::cos(ang), sn = std::sin(ang);
                    const float a = row[2 * i], b = row[2 * i + 1];
                    row[2 * i] = a * cs - b * sn;
                    row[2 * i + 1] = b * cs + a * sn;
                    if (h || (r & r_qkv)) row[2 * i] = bf(row[2 * i]), row[2 * i + 1] = bf(row[2 * i + 1]);
                }
        if (r & r_qkv)
            for (auto &e : v) e = bf(e);
        std::vector<float> att(static_cast<size_t>(T * qd));
        const float scale = 1.0f / std::sqrt(float(hd));
        for (int64_t m = 0; m < T; ++m)
            for (int64_t hh = 0; hh < nh; ++hh) {
                const int64_t kh = hh / (nh / nkv);
                std::vector<float> s(static_cast<size_t>(m + 1));
                float mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= m; ++j) {
                    float a = 0;
                    for (int64_t d = 0; d < hd; ++d) a += q[m * qd + hh * hd + d] * k[j * kvd + kh * hd + d];
                    s[j] = h ? bf(bf(a) * bf(scale)) : a * scale;
                    mx = std::max(mx, s[j]);
                }
                for (auto &e : s) sum += (e = std::exp(e - mx));
                for (int64_t d = 0; d < hd; ++d) {
                    float a = 0;
                    for (int64_t j = 0; j <= m; ++j)
                        a += (h ? bf(s[j] / sum) : s[j]) * v[j * kvd + kh * hd + d];
                    a = h ? bf(a) : a / sum;
                    att[m * qd + hh * hd + d] = (r & r_attn_out) ? bf(a) : a;
                }
            }
        add(lin(att, qd, f32(L.wo)));
        xn = norm(L.ffn_norm, r & r_ffn_norm);
        if (!L.is_moe) {
            add(swiglu(xn, f32(L.ffn_gate), f32(L.ffn_up), f32(L.ffn_down), c.n_ff));
            continue;
        }
        // The router's input: HF's and the twin's are the FFN norm's rounded output.
        const auto xr = h ? xn : norm(L.ffn_norm, r & r_router_in, !(r & r_router_in));
        const auto R = f32(L.ffn_gate_inp), B = f32(L.ffn_exp_probs_b);
        std::vector<int32_t> ids(static_cast<size_t>(T * K));
        std::vector<float> wts(static_cast<size_t>(T * K));
        for (int64_t m = 0; m < T; ++m) {
            std::vector<float> p(static_cast<size_t>(E)), b(static_cast<size_t>(E));
            for (int64_t e = 0; e < E; ++e) {
                float a = 0;
                for (int64_t i = 0; i < H; ++i) a += R[e * H + i] * xr[m * H + i];
                p[e] = a;
            }
            const float mx = *std::max_element(p.begin(), p.end());
            float sum = 0, chosen = 0;
            for (auto &e : p) sum += (e = std::exp(e - mx));
            for (int64_t e = 0; e < E; ++e) p[e] /= sum, b[e] = p[e] + B[e];
            std::vector<int32_t> ord(static_cast<size_t>(E));
            std::iota(ord.begin(), ord.end(), 0);
            std::stable_sort(ord.begin(), ord.end(), [&](int32_t a, int32_t c2) { return b[a] > b[c2]; });
            for (int64_t j = 0; j < K; ++j) chosen += p[ord[j]];
            for (int64_t j = 0; j < K; ++j) {
                ids[m * K + j] = ord[j];
                wts[m * K + j] = p[ord[j]] / std::max(chosen, float(c.moe_norm_min));
                if (h) wts[m * K + j] = bf(wts[m * K + j]);
            }
        }
        std::vector<float> sh(static_cast<size_t>(T * H), 0.0f);
        if (c.n_expert_shared > 0)
            sh = swiglu(xn, f32(L.ffn_gate_shexp), f32(L.ffn_up_shexp), f32(L.ffn_down_shexp),
                        c.n_ff_exp * c.n_expert_shared);
        std::vector<std::vector<float>> ye(static_cast<size_t>(E)); // every expert on every token
        for (int64_t e = 0; e < E; ++e)
            ye[e] = swiglu(xn, f32(L.ffn_gate_exps[e]), f32(L.ffn_up_exps[e]), f32(L.ffn_down_exps[e]),
                           c.n_ff_exp);
        for (int64_t m = 0; m < T; ++m)
            for (int64_t i = 0; i < H; ++i) {
                if (h) { // HF: experts in id order, index_add_ in bf16, then the shared output
                    float fin = 0;
                    for (int64_t e = 0; e < E; ++e)
                        for (int64_t j = 0; j < K; ++j)
                            if (ids[m * K + j] == e) fin = bf(fin + bf(ye[e][m * H + i] * wts[m * K + j]));
                    if (c.n_expert_shared > 0) fin = bf(fin + sh[m * H + i]);
                    x[m * H + i] = bf(x[m * H + i] + fin);
                } else { // the twin: the shared experts, then moe_combine in choice order
                    float a = x[m * H + i] + sh[m * H + i];
                    for (int64_t j = 0; j < K; ++j) a += wts[m * K + j] * ye[ids[m * K + j]][m * H + i];
                    x[m * H + i] = a;
                }
            }
        for (int64_t m = 0; m < T; ++m) std::sort(ids.begin() + m * K, ids.begin() + m * K + K);
        o.ids.push_back(std::move(ids));
    }
    o.logits = lin(norm(t.output_norm, r & r_head_in), H, f32(c.tie_word_embeddings ? t.tok_embd : t.output));
    return o;
}

struct figures {
    double overall = 0, worst = 0;
    size_t worst_at = 0, flips = 0, positions_over = 0; // flips: (token, MoE layer) decisions
};

figures compare(const pass_out &a, const pass_out &ref, size_t V, double threshold = 3e-4) {
    figures f;
    const size_t T = a.logits.size() / V;
    f.overall = es::nmse(a.logits, ref.logits);
    for (size_t t = 0; t < T; ++t) {
        const double e = es::nmse(std::span<const float>(a.logits.data() + t * V, V),
                                  std::span<const float>(ref.logits.data() + t * V, V));
        if (e > f.worst) f.worst = e, f.worst_at = t;
        f.positions_over += e > threshold;
    }
    for (size_t l = 0; l < a.ids.size(); ++l) {
        const size_t K = a.ids[l].size() / T;
        for (size_t t = 0; t < T; ++t)
            f.flips += !std::equal(a.ids[l].begin() + long(t * K), a.ids[l].begin() + long(t * K + K),
                                   ref.ids[l].begin() + long(t * K));
    }
    return f;
}

struct checkpoint {
    QString name;
    std::vector<int32_t> prompt;
    es::model_config cfg;
    std::unique_ptr<es::weight_store> store;
    es::model_tensors t;
};

bool open_checkpoint(const QString &dir, checkpoint &ck) {
    QFile f(dir + "/reference.json");
    if (!f.open(QIODevice::ReadOnly)) return false;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
        ck.prompt.push_back(v.toInt());
    auto cfg = es::load_model_config(dir.toStdString());
    auto store = es::weight_store::open_dir(dir.toStdString());
    if (!cfg.ok() || !store.ok()) return false;
    ck.name = QDir(dir).dirName();
    ck.cfg = *cfg;
    ck.store = std::move(*store);
    auto bound = es::bind_model_tensors(ck.cfg, *ck.store);
    if (!bound.ok()) return false;
    ck.t = *bound;
    return true;
}

} // namespace

class BenchBf16Fidelity : public QObject {
    Q_OBJECT
private slots:
    void referencePrompts_data();
    void referencePrompts();
    void randomPrompts_data() { referencePrompts_data(); }
    void randomPrompts();
};

void BenchBf16Fidelity::referencePrompts_data() {
    QTest::addColumn<QString>("dir");
    const QDir data(ES_TEST_DATA_DIR);
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
        if (QFile::exists(data.filePath(name + "/ref_logits.npy")))
            QTest::newRow(qPrintable(name)) << data.filePath(name);
    const QString def = QDir::cleanPath(QString(ES_TEST_DATA_DIR) + "/../../resources/models/default");
    if (QFile::exists(def + "/ref_logits.npy")) QTest::newRow("default-model") << def;
}

// The reference prompt: the study's fp32 pass is HF float32's logits, its twin-rounding pass the
// twin model's (so the switches describe the CUDA backend); then HF's bf16, each rounding alone
// and the twin's without each.
void BenchBf16Fidelity::referencePrompts() {
    QFETCH(QString, dir);
    checkpoint ck;
    QVERIFY(open_checkpoint(dir, ck));
    auto golden = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
    QVERIFY(golden.ok());
    const size_t V = size_t(ck.cfg.n_vocab);
    const pass_out exact = forward(ck.cfg, ck.t, ck.prompt, 0);
    QVERIFY(es::nmse(exact.logits, golden->data) < 1e-10);
    es::twin_options to;
    to.activations = es::activation_format::bf16;
    auto twin = es::twin_forward_logits(ck.cfg, ck.t, ck.prompt, es::weight_precision::bf16, to);
    QVERIFY(twin.ok());
    const pass_out all = forward(ck.cfg, ck.t, ck.prompt, twin_all);
    QVERIFY(es::nmse(all.logits, *twin) < 1e-10);
    auto line = [&](const char *what, const pass_out &p) {
        const figures f = compare(p, exact, V);
        qInfo("%-13s %-26s NMSE %.3e, worst position %2zu %.3e, routing decisions differing %zu",
              qPrintable(ck.name), what, f.overall, f.worst_at, f.worst, f.flips);
    };
    line("twin (BF16)", all);
    line("HF bf16", forward(ck.cfg, ck.t, ck.prompt, hf));
    const std::pair<const char *, unsigned> single[] = {
        {"attention norm", r_attn_norm}, {"FFN norm", r_ffn_norm},
        {"router input", r_router_in},   {"q/k/v", r_qkv},
        {"attention out", r_attn_out},   {"SiLU·up", r_act},
        {"head input", r_head_in}};
    for (const auto &[name, bit] : single) {
        line(qPrintable(QString("only ") + name), forward(ck.cfg, ck.t, ck.prompt, bit));
        line(qPrintable(QString("twin but ") + name), forward(ck.cfg, ck.t, ck.prompt, twin_all & ~bit));
    }
}

// Random prompts (24 tokens each, seeded): how often BF16 tips a routing decision and a position
// over NMSE 3e-4, the twin against HF's bf16 and the twin with an fp32 router input.
void BenchBf16Fidelity::randomPrompts() {
    QFETCH(QString, dir);
    checkpoint ck;
    QVERIFY(open_checkpoint(dir, ck));
    const int n =
        qEnvironmentVariableIsSet("ES_BENCH_PROMPTS") ? qEnvironmentVariableIntValue("ES_BENCH_PROMPTS") : 40;
    const size_t T = 24, V = size_t(ck.cfg.n_vocab);
    const std::pair<const char *, unsigned> modes[] = {
        {"twin (BF16)", twin_all}, {"twin, fp32 router input", twin_all & ~r_router_in}, {"HF bf16", hf}};
    struct sums {
        double nmse = 0, worst = 0;
        size_t flips = 0, over = 0;
    };
    std::vector<sums> s(std::size(modes));
    size_t decisions = 0;
    std::mt19937 gen(5);
    for (int i = 0; i < n; ++i) {
        std::vector<int32_t> prompt(T);
        for (auto &tok : prompt) tok = int32_t(3 + gen() % uint32_t(ck.cfg.n_vocab - 3));
        const pass_out exact = forward(ck.cfg, ck.t, prompt, 0);
        decisions += exact.ids.size() * T;
        for (size_t m = 0; m < std::size(modes); ++m) {
            const figures f = compare(forward(ck.cfg, ck.t, prompt, modes[m].second), exact, V);
            s[m].nmse += f.overall / n;
            s[m].worst = std::max(s[m].worst, f.worst);
            s[m].flips += f.flips;
            s[m].over += f.positions_over;
        }
    }
    for (size_t m = 0; m < std::size(modes); ++m)
        qInfo("%-13s %-24s %d prompts: mean NMSE %.3e, positions over 3e-4 %zu of %zu (worst %.2e), "
              "routing decisions differing %zu of %zu",
              qPrintable(ck.name), modes[m].first, n, s[m].nmse, s[m].over, size_t(n) * T, s[m].worst,
              s[m].flips, decisions);
}

QTEST_GUILESS_MAIN(BenchBf16Fidelity)
#include "bench_bf16_fidelity.moc"
