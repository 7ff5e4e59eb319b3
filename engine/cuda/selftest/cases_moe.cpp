// The self-test's MoE cases (selftest_cases.h), each against its CPU twin. Decode: the router
// (plain and with the fused norm), the routed experts' gate/up and down GEMVs (tensor-core rounds
// and shapes, the tile-major layout), moe_front, the shared experts' slot, moe_combine (plain and
// with the next norm), the gate/up → down chain on slot counters. Prefill: moe_plan and
// moe_grouped_gemm (mma.sync and warpgroup MMA; FP8 or BF16 weights and activations).
#include "engine/cuda/selftest/selftest_cases.h"

#include "engine/core/compare.h"

#include "kernels/act_quantize.cuh"
#include "kernels/fp8_tile_major.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_down_gemv.cuh"
#include "kernels/moe_front.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/moe_reroute.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"

#include <cmath>
#include <set>

namespace es::selftest {

namespace {

// " mma rounds r" and, for another shape than the default, " shape W/RT/D[ wave]".
std::string mma_suffix(int mma, const mma_shape &m) {
    if (!mma) return "";
    std::string s = " mma rounds " + std::to_string(mma);
    const mma_shape d;
    if (m.warps != d.warps || m.tiles != d.tiles || m.depth != d.depth || m.wave != d.wave)
        s += " shape " + std::to_string(m.warps) + "/" + std::to_string(m.tiles) + "/" +
             std::to_string(m.depth) + (m.wave ? " wave" : "");
    return s;
}

// Each compares the normalized rows the GPU stores (norm.out) with rms_norm's twin, then the rest
// with the twins run on the GPU's own normalized rows, so a BF16 rounding of the fused norm (its
// sum of squares is in another order) cannot flip a router choice and only the kernel is measured.

// Same top-k set and order for every token (the router rows' rule); the count of such tokens.
int64_t same_choices(const std::vector<int32_t> &a, const std::vector<int32_t> &b, int64_t T, int64_t K) {
    int64_t same = 0;
    for (int64_t t = 0; t < T; ++t)
        same += std::equal(a.begin() + t * K, a.begin() + (t + 1) * K, b.begin() + t * K);
    return same;
}

// The ids, weights and (all tied) exact tie-break rows of a router result against its twin.
void router_rows(runner &R, const std::string &name, const std::vector<int32_t> &gids,
                 const std::vector<float> &gwts, const std::vector<int32_t> &ids,
                 const std::vector<float> &wts, int64_t T, int64_t K, bool all_tied) {
    const int64_t same = same_choices(gids, ids, T, K);
    R.add("kernel", name + " ids", "tokens with the same top-k set and order", double(same), double(T),
          false);
    if (same == T) R.add("kernel", name + " weights", "max scaled err", scaled_err(gwts, wts), 1e-5);
    if (all_tied) {
        int64_t lowest = 0; // every choice is the lowest free id: 0, 1, …, k−1
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < K; ++j) lowest += gids[t * K + j] == int32_t(j);
        R.add("kernel", name + " ties", "choices that are the lowest id", double(lowest), double(T * K),
              false);
    }
}

// The largest |GPU − twin| margin; 1 where one side is NaN (k = E, or every place forced) and the
// other is not.
double margin_err(const std::vector<float> &got, const std::vector<float> &want) {
    double e = 0.0;
    for (size_t t = 0; t < want.size(); ++t) {
        const float a = got[t], b = want[t];
        e = std::max(e, std::isnan(a) != std::isnan(b) ? 1.0 : std::isnan(a) ? 0.0 : double(std::abs(a - b)));
    }
    return e;
}

// The rows a fused kernel normalized into norm.out (dxn) against rms_norm's twin; returns them, the
// input of every twin after the norm.
std::vector<bf16_t> normalized_rows(runner &R, const std::string &name, const std::vector<float> &x,
                                    const std::vector<bf16_t> &nw, dvec<bf16_t> &dxn, int64_t T, int64_t H) {
    norm_in ni;
    ni.x = x.data();
    ni.weight = nw.data();
    const auto xn_ref = norm_in_ref(ni, T, H), xn = dxn.download();
    R.add("kernel", name + " norm", "max scaled err (bf16)", scaled_err(widen(xn), widen(xn_ref)),
          k_bf16_limit);
    return xn;
}

// A fused router's choices (dids, dwt) against moe_router_ref run on the GPU's normalized rows xn.
// dmargins, when set, against the twin's margins.
void router_twin_rows(runner &R, const std::string &name, const std::vector<bf16_t> &xn,
                      const std::vector<float> &w, const std::vector<float> &bias, dvec<int32_t> &dids,
                      dvec<float> &dwt, int64_t T, int64_t H, int64_t E, int64_t K, bool all_tied,
                      dvec<float> *dmargins = nullptr) {
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> wts(static_cast<size_t>(T * K)), margins(static_cast<size_t>(T));
    moe_router_params r;
    r.x = xn.data();
    r.w = w.data();
    r.bias = bias.data();
    r.ids = ids.data();
    r.weights = wts.data();
    r.n_tokens = T;
    r.n_embd = H;
    r.n_expert = E;
    r.n_expert_used = K;
    r.margins = margins.data();
    moe_router_ref(r);
    router_rows(R, name, dids.download(), dwt.download(), ids, wts, T, K, all_tied);
    if (dmargins) R.add("kernel", name + " margins", "max abs err", margin_err(dmargins->download(), margins), 1e-5);
}

} // namespace

std::string moe_router_case::name() const {
    return shape_name("moe_router", {{"T", T}, {"H", H}, {"E", E}, {"k", K}}, all_tied ? "all tied" : "");
}

void moe_router_case::run(runner &R, const std::string &name) const {
    auto x = rand_bf16(static_cast<size_t>(T * H), -2, 2);
    auto w = all_tied ? std::vector<float>(static_cast<size_t>(E * H), 0.0f)
                      : rand_f(static_cast<size_t>(E * H), -0.1f, 0.1f);
    auto bias = all_tied ? std::vector<float>(static_cast<size_t>(E), 0.25f)
                         : rand_f(static_cast<size_t>(E), -0.02f, 0.02f);
    dvec<bf16_t> dx(x);
    dvec<float> dw(w), db(bias), dwt(static_cast<size_t>(T * K)), dlogits(static_cast<size_t>(T * E)),
        dmargins(static_cast<size_t>(T));
    dvec<int32_t> dids(static_cast<size_t>(T * K));
    dvec<unsigned> dcount(static_cast<size_t>(T));
    moe_router_params p;
    p.x = dx.get();
    p.w = dw.get();
    p.bias = db.get();
    p.ids = dids.get();
    p.weights = dwt.get();
    p.margins = dmargins.get();
    p.n_tokens = T;
    p.n_embd = H;
    p.n_expert = E;
    p.n_expert_used = K;
    p.tiles_min_tokens = 64; // rows of 64 tokens and more: the token-tiled kernel, whatever the default
    p.logits = dlogits.get();
    p.counters = dcount.get();
    ck(launch_moe_router(p, nullptr), "launch");
    sync(name);
    ck(launch_moe_router(p, nullptr), "second launch"); // the counters were left at zero
    sync(name);
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> wts(static_cast<size_t>(T * K)), margins(static_cast<size_t>(T));
    p.x = x.data();
    p.w = w.data();
    p.bias = bias.data();
    p.ids = ids.data();
    p.weights = wts.data();
    p.margins = margins.data();
    p.logits = nullptr; // the device's scratch: the twin would write its logits there
    moe_router_ref(p);
    const auto gids = dids.download();
    // The margin (k-th score − (k+1)-th): scores are probabilities plus biases, so an absolute
    // error; NaN (k = E) on both sides or neither.
    R.add("kernel", name + " margins", "max abs err", margin_err(dmargins.download(), margins), 1e-5);
    int64_t same_set = 0, same_order = 0;
    for (int64_t t = 0; t < T; ++t) {
        std::set<int32_t> a(gids.begin() + t * K, gids.begin() + (t + 1) * K),
            b(ids.begin() + t * K, ids.begin() + (t + 1) * K);
        same_set += a == b;
        same_order += std::equal(gids.begin() + t * K, gids.begin() + (t + 1) * K, ids.begin() + t * K);
    }
    R.add("kernel", name + " ids", "tokens with the same top-k set and order",
          double(std::min(same_set, same_order)), double(T), false);
    if (same_set == T)
        R.add("kernel", name + " weights", "max scaled err", scaled_err(dwt.download(), wts), 1e-5);
}

std::string moe_reroute_case::name() const {
    return shape_name("moe_reroute", {{"T", T}, {"E", E}, {"K", K}}, "");
}

// Rules of every kind over random logits: the model's (rule 0), disabled experts, forced experts
// with a scaled bias, a smaller k with no bias, a larger k (K) with disabled and forced experts;
// each token under a random rule. Ids exact (random scores: no ties), weights and margins against
// the twin, and the places past a token's k padded with its first id at weight 0.
void moe_reroute_case::run(runner &R, const std::string &name) const {
    const int64_t k0 = std::max<int64_t>(1, K - 2), words = moe_reroute_rule_words(E);
    auto logits = rand_f(size_t(T * E), -4.0f, 4.0f);
    auto bias = rand_f(size_t(E), -0.05f, 0.05f);
    std::vector<int32_t> rules;
    auto add_rule = [&](int32_t k, std::vector<int32_t> forced, std::vector<int32_t> disabled_ids, float scale) {
        std::vector<uint8_t> disabled(size_t(E), 0);
        for (int32_t e : disabled_ids) disabled[size_t(e)] = 1;
        rules.resize(rules.size() + size_t(words));
        moe_reroute_fill_rule(rules.data() + rules.size() - size_t(words), E, k, forced.data(), int32_t(forced.size()),
                              disabled.data(), scale);
    };
    add_rule(int32_t(k0), {}, {}, 1.0f);
    add_rule(int32_t(k0), {}, {0, int32_t(E / 2), int32_t(E - 1)}, 1.0f);
    add_rule(int32_t(k0), {int32_t(E - 2), 1}, {}, 2.5f);
    add_rule(1, {}, {}, 0.0f);
    add_rule(int32_t(K), {3}, {2, int32_t(E - 3)}, 1.0f);
    add_rule(int32_t(std::min<int64_t>(2, K)), {int32_t(E / 3), 0}, {}, 1.0f); // every place forced: margin NaN
    const int64_t n_rules = int64_t(rules.size()) / words;
    std::vector<int32_t> token_rule(static_cast<size_t>(T));
    std::uniform_int_distribution<int32_t> pick(0, int32_t(n_rules - 1));
    for (auto &r : token_rule) r = pick(rng());
    dvec<float> dl(logits), db(bias), dw(static_cast<size_t>(T * K)), dm(static_cast<size_t>(T));
    dvec<int32_t> dr(rules), dtr(token_rule), di(static_cast<size_t>(T * K));
    moe_reroute_params p;
    p.logits = dl.get();
    p.bias = db.get();
    p.rules = dr.get();
    p.token_rule = dtr.get();
    p.ids = di.get();
    p.weights = dw.get();
    p.margins = dm.get();
    p.n_tokens = T;
    p.n_expert = E;
    p.K = K;
    p.n_rules = n_rules;
    ck(launch_moe_reroute(p, nullptr), "launch");
    sync(name);
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> wts(static_cast<size_t>(T * K)), margins(static_cast<size_t>(T));
    p.logits = logits.data();
    p.bias = bias.data();
    p.rules = rules.data();
    p.token_rule = token_rule.data();
    p.ids = ids.data();
    p.weights = wts.data();
    p.margins = margins.data();
    moe_reroute_ref(p);
    const auto gids = di.download();
    const auto gm = dm.download();
    const auto gw = dw.download();
    R.add("kernel", name + " ids", "tokens with the same choices in the same order (padding included)",
          double(same_choices(gids, ids, T, K)), double(T), false);
    R.add("kernel", name + " weights", "max scaled err", scaled_err(gw, wts), 1e-5);
    double pad_wrong = 0.0;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t k = rules[size_t(token_rule[size_t(t)] * words)];
        for (int64_t j = k; j < K; ++j)
            pad_wrong += gids[size_t(t * K + j)] != gids[size_t(t * K)] || gw[size_t(t * K + j)] != 0.0f;
    }
    R.add("kernel", name + " margins", "max abs err", margin_err(gm, margins), 1e-5);
    R.add("kernel", name + " padding", "places past a token's k not (its first id, weight 0)", pad_wrong, 0.0);
}

std::string moe_gemv_case::format_label() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return (fp8 ? "fp8" : "bf16") + blk_suffix(L) + mma_suffix(mma, ms) + (tm ? " tile-major" : "");
}

std::string moe_gemv_case::name() const {
    return shape_name("moe_gate_up_gemv", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}},
                      format_label());
}

void moe_gemv_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string &n1 = name;
    const std::string n2 =
        shape_name("moe_down_gemv", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}}, format_label());
    auto x = rand_bf16(static_cast<size_t>(T * H));
    auto ids = random_topk_ids(T, E, K);
    auto wts = rand_f(static_cast<size_t>(T * K), 0.0f, 0.5f);
    auto gu = make_expert_weights(f, E * 2 * Fe, H, L, E, ids);
    auto dn = make_expert_weights(f, E * H, Fe, L, E, ids);
    dvec<bf16_t> dx(x), dgub(gu.b), ddnb(dn.b), dact(static_cast<size_t>(T * K * Fe));
    dvec<fp8_t> dguq(tm ? tile_major(gu.q, E, Fe, H) : gu.q), ddnq(dn.q);
    dvec<float> dgus(gu.s), ddns(dn.s), dwts(wts);
    dvec<int32_t> dids(ids);
    moe_gate_up_gemv_params g;
    g.x = dx.get();
    g.ids = dids.get();
    g.w = fp8 ? static_cast<const void *>(dguq.get()) : dgub.get();
    g.wfmt = f;
    g.w_scale = fp8 ? dgus.get() : nullptr;
    g.w_layout = L;
    g.act = dact.get();
    g.n_tokens = T;
    g.n_embd = H;
    g.n_expert_used = K;
    g.n_ff_exp = Fe;
    g.mma = mma;
    g.mma_shape = ms;
    g.w_tile_major = tm;
    ck(launch_moe_gate_up_gemv(g, nullptr), "launch");
    sync(n1);
    const std::vector<bf16_t> gpu_act = dact.download();
    if (tm) { // the same kernel on the row-major stack: the same sums in the same order
        dvec<fp8_t> drm(gu.q);
        dvec<bf16_t> dact_rm(static_cast<size_t>(T * K * Fe));
        moe_gate_up_gemv_params r = g;
        r.w = drm.get();
        r.act = dact_rm.get();
        r.w_tile_major = false;
        ck(launch_moe_gate_up_gemv(r, nullptr), "launch");
        sync(n1);
        R.add("kernel", n1, "outputs differing from the row-major stack's",
              bit_diffs(gpu_act, dact_rm.download()), 0.0);
    }
    std::vector<bf16_t> act(static_cast<size_t>(T * K * Fe));
    g.x = x.data();
    g.ids = ids.data();
    g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
    g.w_scale = fp8 ? gu.s.data() : nullptr;
    g.act = act.data();
    g.w_tile_major = false;
    moe_gate_up_gemv_ref(g);
    R.add("kernel", n1, "max scaled err (bf16)", scaled_err(widen(gpu_act), widen(act)), k_bf16_limit);

    // Down: both sides start from the twin's activations so only this kernel is measured.
    dvec<bf16_t> dact2(act);
    auto y0 = rand_f(static_cast<size_t>(T * H));
    dvec<float> dy(y0);
    moe_down_gemv_params d;
    d.act = dact2.get();
    d.ids = dids.get();
    d.weights = dwts.get();
    d.w = fp8 ? static_cast<const void *>(ddnq.get()) : ddnb.get();
    d.wfmt = f;
    d.w_scale = fp8 ? ddns.get() : nullptr;
    d.w_layout = L;
    d.y = dy.get();
    d.n_tokens = T;
    d.n_embd = H;
    d.n_expert_used = K;
    d.n_ff_exp = Fe;
    ck(launch_moe_down_gemv(d, nullptr), "launch");
    sync(n2);
    std::vector<float> y = y0;
    d.act = act.data();
    d.ids = ids.data();
    d.weights = wts.data();
    d.w = fp8 ? static_cast<const void *>(dn.q.data()) : dn.b.data();
    d.w_scale = fp8 ? dn.s.data() : nullptr;
    d.y = y.data();
    moe_down_gemv_ref(d);
    R.add("kernel", n2, "max scaled err", scaled_err(dy.download(), y), k_f32_limit);
}

std::string moe_router_norm_case::name() const {
    return shape_name("moe_router norm_in", {{"T", T}, {"H", H}, {"E", E}, {"k", K}},
                      all_tied ? "all tied" : "");
}

void moe_router_norm_case::run(runner &R, const std::string &name) const {
    auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
    auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    auto w = all_tied ? std::vector<float>(static_cast<size_t>(E * H), 0.0f)
                      : rand_f(static_cast<size_t>(E * H), -0.1f, 0.1f);
    auto bias = all_tied ? std::vector<float>(static_cast<size_t>(E), 0.25f)
                         : rand_f(static_cast<size_t>(E), -0.02f, 0.02f);
    dvec<float> dx(x), dw(w), db(bias), dwt(static_cast<size_t>(T * K)), dlogits(static_cast<size_t>(T * E));
    dvec<bf16_t> dnw(nw), dxn(static_cast<size_t>(T * H));
    dvec<int32_t> dids(static_cast<size_t>(T * K));
    dvec<unsigned> dcount(static_cast<size_t>(T));
    moe_router_params p;
    p.norm.x = dx.get();
    p.norm.weight = dnw.get();
    p.norm.out = dxn.get();
    p.w = dw.get();
    p.bias = db.get();
    p.ids = dids.get();
    p.weights = dwt.get();
    p.n_tokens = T;
    p.n_embd = H;
    p.n_expert = E;
    p.n_expert_used = K;
    p.logits = dlogits.get();
    p.counters = dcount.get();
    if (!moe_router_norm_ok(p)) throw std::runtime_error("moe_router_norm_ok refuses the shape");
    ck(launch_moe_router(p, nullptr), "launch");
    sync(name);
    ck(launch_moe_router(p, nullptr), "second launch"); // the counters were left at zero
    sync(name);
    const auto xn = normalized_rows(R, name, x, nw, dxn, T, H);
    router_twin_rows(R, name, xn, w, bias, dids, dwt, T, H, E, K, all_tied);
}

std::string gate_up_norm_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const int64_t K = routed ? 3 : 1;
    return shape_name("moe_gate_up_gemv norm_in", {{"T", T}, {"H", H}, {"F", F}, {"k", K}},
                      std::string(fp8 ? "fp8" : "bf16") + (routed ? " routed" : " dense") + blk_suffix(L));
}

void gate_up_norm_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const int64_t E = routed ? 5 : 1, K = routed ? 3 : 1;
    auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
    auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    auto ids = random_topk_ids(T, E, K);
    auto gu = make_expert_weights(f, E * 2 * F, H, L, E);
    dvec<float> dx(x), dgus(gu.s);
    dvec<bf16_t> dnw(nw), dxn(static_cast<size_t>(T * H)), dgub(gu.b), dact(static_cast<size_t>(T * K * F));
    dvec<fp8_t> dguq(gu.q);
    dvec<int32_t> dids(ids);
    moe_gate_up_gemv_params g;
    g.ids = routed ? dids.get() : nullptr;
    g.w = fp8 ? static_cast<const void *>(dguq.get()) : dgub.get();
    g.wfmt = f;
    g.w_scale = fp8 ? dgus.get() : nullptr;
    g.w_layout = L;
    g.act = dact.get();
    g.n_tokens = T;
    g.n_embd = H;
    g.n_expert_used = K;
    g.n_ff_exp = F;
    g.norm.x = dx.get();
    g.norm.weight = dnw.get();
    g.norm.out = dxn.get();
    if (!moe_gate_up_gemv_norm_ok(g)) throw std::runtime_error("moe_gate_up_gemv_norm_ok refuses the shape");
    ck(launch_moe_gate_up_gemv(g, nullptr), "launch");
    sync(name);
    const auto xn = normalized_rows(R, name, x, nw, dxn, T, H);
    std::vector<bf16_t> act(static_cast<size_t>(T * K * F));
    g.x = xn.data();
    g.norm = norm_in{};
    g.ids = routed ? ids.data() : nullptr;
    g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
    g.w_scale = fp8 ? gu.s.data() : nullptr;
    g.act = act.data();
    moe_gate_up_gemv_ref(g);
    R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dact.download()), widen(act)),
          k_bf16_limit);
}

std::string moe_front_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name("moe_front", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"Fsh", Fs}},
                      std::string(fp8 ? "fp8" : "bf16") + (all_tied ? " all tied" : "") + blk_suffix(L));
}

void moe_front_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
    auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    auto w = all_tied ? std::vector<float>(static_cast<size_t>(E * H), 0.0f)
                      : rand_f(static_cast<size_t>(E * H), -0.1f, 0.1f);
    auto bias = all_tied ? std::vector<float>(static_cast<size_t>(E), 0.25f)
                         : rand_f(static_cast<size_t>(E), -0.02f, 0.02f);
    auto gu = make_expert_weights(f, 2 * Fs, H, L);
    dvec<float> dx(x), dw(w), db(bias), dwt(static_cast<size_t>(T * K)), dlogits(static_cast<size_t>(T * E)),
        dgus(gu.s), dmargins(static_cast<size_t>(T));
    dvec<bf16_t> dnw(nw), dxn(static_cast<size_t>(T * H)), dgub(gu.b), dact(static_cast<size_t>(T * Fs));
    dvec<fp8_t> dguq(gu.q);
    dvec<int32_t> dids(static_cast<size_t>(T * K));
    dvec<unsigned> dcount(1);
    moe_front_params p;
    p.norm.x = dx.get();
    p.norm.weight = dnw.get();
    p.norm.out = dxn.get();
    p.router_w = dw.get();
    p.bias = db.get();
    p.ids = dids.get();
    p.weights = dwt.get();
    p.n_expert = E;
    p.n_expert_used = K;
    p.logits = dlogits.get();
    p.margins = dmargins.get();
    p.counter = dcount.get();
    p.sh_w = Fs ? (fp8 ? static_cast<const void *>(dguq.get()) : dgub.get()) : nullptr;
    p.sh_wfmt = f;
    p.sh_w_scale = fp8 && Fs ? dgus.get() : nullptr;
    p.sh_w_layout = L;
    p.sh_act = Fs ? dact.get() : nullptr;
    p.n_ff_sh = Fs;
    p.n_tokens = T;
    p.n_embd = H;
    if (!moe_front_supported(p)) throw std::runtime_error("moe_front_supported refuses the shape");
    ck(launch_moe_front(p, nullptr), "launch");
    sync(name);
    ck(launch_moe_front(p, nullptr), "second launch"); // the counter was left at zero
    sync(name);
    const auto xn = normalized_rows(R, name, x, nw, dxn, T, H);
    router_twin_rows(R, name, xn, w, bias, dids, dwt, T, H, E, K, all_tied, &dmargins);
    if (Fs > 0) {
        std::vector<bf16_t> act(static_cast<size_t>(T * Fs));
        moe_gate_up_gemv_params g;
        g.x = xn.data();
        g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
        g.wfmt = f;
        g.w_scale = fp8 ? gu.s.data() : nullptr;
        g.w_layout = L;
        g.act = act.data();
        g.n_tokens = T;
        g.n_embd = H;
        g.n_expert_used = 1;
        g.n_ff_exp = Fs;
        moe_gate_up_gemv_ref(g);
        R.add("kernel", name + " shared act", "max scaled err (bf16)",
              scaled_err(widen(dact.download()), widen(act)), k_bf16_limit);
    }
}

std::string moe_down_shared_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name("moe_down_gemv +shared",
                      {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}, {"Fsh", Fs}},
                      std::string(fp8 ? "fp8" : "bf16") + (ready ? " ready" : "") + blk_suffix(L) +
                          (rpw > 0 ? " rows/warp " + std::to_string(rpw) : ""));
}

void moe_down_shared_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    auto act = rand_bf16(static_cast<size_t>(T * K * Fe)), sh_act = rand_bf16(static_cast<size_t>(T * Fs));
    auto ids = random_topk_ids(T, E, K);
    auto wts = rand_f(static_cast<size_t>(T * K), 0.0f, 0.5f);
    auto dn = make_expert_weights(f, E * H, Fe, L, E, ids), sh = make_expert_weights(f, H, Fs, L);
    auto x0 = rand_f(static_cast<size_t>(T * H));
    dvec<bf16_t> dact(act), dsha(sh_act), ddnb(dn.b), dshb(sh.b);
    dvec<fp8_t> ddnq(dn.q), dshq(sh.q);
    dvec<float> ddns(dn.s), dshs(sh.s), dwts(wts), dys(static_cast<size_t>((T * K + T) * H)), dx(x0);
    dvec<int32_t> dids(ids);
    moe_down_gemv_params d;
    d.act = dact.get();
    d.ids = dids.get();
    d.weights = dwts.get();
    d.w = fp8 ? static_cast<const void *>(ddnq.get()) : ddnb.get();
    d.wfmt = f;
    d.w_scale = fp8 ? ddns.get() : nullptr;
    d.w_layout = L;
    d.y_slots = dys.get();
    d.n_tokens = T;
    d.n_embd = H;
    d.n_expert_used = K;
    d.n_ff_exp = Fe;
    d.sh_w = fp8 ? static_cast<const void *>(dshq.get()) : dshb.get();
    d.sh_w_scale = fp8 ? dshs.get() : nullptr;
    d.sh_act = dsha.get();
    d.y_shared = dys.get() + T * K * H;
    d.n_ff_sh = Fs;
    d.sh_ready = ready;
    if (rpw > 1) {
        // rows_per_warp 1 first, into a second buffer (this launch's inputs are ready as well).
        dvec<float> dys1(static_cast<size_t>((T * K + T) * H));
        moe_down_gemv_params d1 = d;
        d1.rows_per_warp = 1;
        d1.y_slots = dys1.get();
        d1.y_shared = dys1.get() + T * K * H;
        ck(launch_moe_down_gemv(d1, nullptr), "launch with rows_per_warp 1");
        d.rows_per_warp = rpw;
        ck(launch_moe_down_gemv(d, nullptr), "launch");
        sync(name);
        R.add("kernel", name + " vs rows/warp 1", "slot elements whose bits differ",
              bit_diffs(dys.download(), dys1.download()), 0.0);
        moe_down_gemv_params d3 = d;
        d3.rows_per_warp = 3;
        R.add("kernel", name + " rows/warp 3", "refused (cudaErrorInvalidValue)",
              launch_moe_down_gemv(d3, nullptr) == cudaErrorInvalidValue ? 1.0 : 0.0, 1.0, false);
    } else {
        d.rows_per_warp = rpw;
        ck(launch_moe_down_gemv(d, nullptr), "launch");
    }
    moe_combine_params cb{dys.get(), dwts.get(), dx.get(), T, H, K};
    cb.y_shared = d.y_shared;
    cb.x_ready = ready;
    ck(launch_moe_combine(cb, nullptr), "combine launch");
    sync(name);
    std::vector<float> ys(static_cast<size_t>((T * K + T) * H)), x = x0;
    d.act = act.data();
    d.ids = ids.data();
    d.weights = wts.data();
    d.w = fp8 ? static_cast<const void *>(dn.q.data()) : dn.b.data();
    d.w_scale = fp8 ? dn.s.data() : nullptr;
    d.y_slots = ys.data();
    d.sh_w = fp8 ? static_cast<const void *>(sh.q.data()) : sh.b.data();
    d.sh_w_scale = fp8 ? sh.s.data() : nullptr;
    d.sh_act = sh_act.data();
    d.y_shared = ys.data() + T * K * H;
    moe_down_gemv_ref(d);
    R.add("kernel", name + " slots", "max scaled err", scaled_err(dys.download(), ys), k_f32_limit);
    // The combine on the GPU's own slots (only the combine measured).
    const auto gys = dys.download();
    cb = moe_combine_params{gys.data(), wts.data(), x.data(), T, H, K};
    cb.y_shared = gys.data() + T * K * H;
    moe_combine_ref(cb);
    R.add("kernel", name + " combine", "max scaled err", scaled_err(dx.download(), x), 1e-6);
}

std::string moe_combine_norm_case::name() const {
    return shape_name("moe_combine norm_out", {{"T", T}, {"H", H}, {"k", K}}, shared ? "shared" : "");
}

void moe_combine_norm_case::run(runner &R, const std::string &name) const {
    const auto y = rand_f(static_cast<size_t>(T * K * H), -1, 1),
               ysh = rand_f(static_cast<size_t>(T * H), -1, 1),
               wts = rand_f(static_cast<size_t>(T * K), 0, 1), x0 = rand_f(static_cast<size_t>(T * H), -3, 3);
    const auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    dvec<float> dy(y), dysh(ysh), dwts(wts), dx(x0);
    dvec<bf16_t> dnw(nw), dout(static_cast<size_t>(T * H));
    moe_combine_params cb{dy.get(), dwts.get(), dx.get(), T, H, K};
    cb.y_shared = shared ? dysh.get() : nullptr;
    cb.norm_weight = dnw.get();
    cb.norm_eps = 1e-5f;
    cb.norm_out = dout.get();
    if (!moe_combine_norm_ok(cb)) {
        R.add("kernel", name, "skipped: no thread-block cluster holds a row here (moe_combine_norm_ok)", 0.0,
              0.0);
        return;
    }
    ck(launch_moe_combine(cb, nullptr), "launch");
    ck(launch_moe_combine(cb, nullptr), "launch (again, on its own output)");
    sync(name);
    std::vector<float> x = x0;
    std::vector<bf16_t> out(static_cast<size_t>(T * H));
    cb = moe_combine_params{y.data(), wts.data(), x.data(), T, H, K};
    cb.y_shared = shared ? ysh.data() : nullptr;
    cb.norm_weight = nw.data();
    cb.norm_eps = 1e-5f;
    cb.norm_out = out.data();
    moe_combine_ref(cb);
    moe_combine_ref(cb);
    R.add("kernel", name + " residual", "max scaled err", scaled_err(dx.download(), x), 1e-6);
    R.add("kernel", name + " normalized rows", "max scaled err (bf16)",
          scaled_err(widen(dout.download()), widen(out)), k_bf16_limit);
}

std::string moe_combine_case::name() const {
    return shape_name("moe_combine", {{"T", T}, {"H", H}, {"k", K}});
}

void moe_combine_case::run(runner &R, const std::string &name) const {
    auto y = rand_f(static_cast<size_t>(T * K * H)), w = rand_f(static_cast<size_t>(T * K), 0, 1),
         x = rand_f(static_cast<size_t>(T * H));
    dvec<float> dy(y), dw(w), dx(x);
    moe_combine_params p{dy.get(), dw.get(), dx.get(), T, H, K};
    ck(launch_moe_combine(p, nullptr), "launch");
    sync(name);
    p = moe_combine_params{y.data(), w.data(), x.data(), T, H, K};
    moe_combine_ref(p);
    R.add("kernel", name, "max scaled err", scaled_err(dx.download(), x), 1e-6);
}

std::string moe_slot_counters_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name(
        "moe gate/up → down, slot counters", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}, {"Fsh", Fs}},
        std::string(fp8 ? "fp8" : "bf16") + (rpw > 0 ? " rows/warp " + std::to_string(rpw) : "") +
            (pdl ? " programmatic launch" : "") + mma_suffix(mma, ms) + (tm ? " tile-major" : ""));
}

void moe_slot_counters_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const bool was = programmatic_launch();
    set_programmatic_launch(pdl);
    // A stream of its own, as the backend's (programmatic launch is a property of launches
    // into one stream; the legacy default stream is not where the backend runs them).
    cudaStream_t st = nullptr;
    ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
    struct restore {
        bool on;
        cudaStream_t st;
        ~restore() {
            set_programmatic_launch(on);
            cudaStreamDestroy(st);
        }
    } keep{was, st};
    const int64_t S = T * K;
    auto x = rand_bf16(static_cast<size_t>(T * H)), sh_act = rand_bf16(static_cast<size_t>(T * Fs));
    auto ids = random_topk_ids(T, E, K);
    auto wts = rand_f(static_cast<size_t>(S), 0.0f, 0.5f);
    auto gu = make_expert_weights(f, E * 2 * Fe, H, scale_layout::channel, E, ids);
    auto dn = make_expert_weights(f, E * H, Fe, scale_layout::channel, E, ids);
    auto sh = make_expert_weights(f, H, Fs, scale_layout::channel);
    auto res0 = rand_f(static_cast<size_t>(T * H));
    dvec<bf16_t> dx(x), dsha(sh_act), dgub(gu.b), ddnb(dn.b), dshb(sh.b), dact(static_cast<size_t>(S * Fe));
    dvec<fp8_t> dguq(tm ? tile_major(gu.q, E, Fe, H) : gu.q), ddnq(dn.q), dshq(sh.q);
    dvec<float> dgus(gu.s), ddns(dn.s), dshs(sh.s), dwts(wts), dys(static_cast<size_t>((S + T) * H)),
        dres(res0);
    dvec<int32_t> dids(ids);
    dvec<unsigned> dctr(std::vector<unsigned>(static_cast<size_t>(S), 0u));
    moe_gate_up_gemv_params g;
    g.x = dx.get();
    g.ids = dids.get();
    g.w = fp8 ? static_cast<const void *>(dguq.get()) : dgub.get();
    g.wfmt = f;
    g.w_scale = fp8 ? dgus.get() : nullptr;
    g.act = dact.get();
    g.n_tokens = T;
    g.n_embd = H;
    g.n_expert_used = K;
    g.n_ff_exp = Fe;
    g.mma = mma;
    g.mma_shape = ms;
    g.w_tile_major = tm;
    g.slot_rows_done = dctr.get();
    moe_down_gemv_params d;
    d.act = dact.get();
    d.ids = dids.get();
    d.weights = dwts.get();
    d.w = fp8 ? static_cast<const void *>(ddnq.get()) : ddnb.get();
    d.wfmt = f;
    d.w_scale = fp8 ? ddns.get() : nullptr;
    d.y_slots = dys.get();
    d.n_tokens = T;
    d.n_embd = H;
    d.n_expert_used = K;
    d.n_ff_exp = Fe;
    d.sh_w = fp8 ? static_cast<const void *>(dshq.get()) : dshb.get();
    d.sh_w_scale = fp8 ? dshs.get() : nullptr;
    d.sh_act = dsha.get();
    d.y_shared = dys.get() + S * H;
    d.n_ff_sh = Fs;
    d.sh_ready = true;
    d.rows_per_warp = rpw;
    d.slot_rows_done = dctr.get();
    ck(launch_moe_gate_up_gemv(g, st), "gate/up launch");
    ck(launch_moe_down_gemv(d, st), "down launch");
    sync(name);
    const auto counted = dctr.download();
    R.add(
        "kernel", name + " counters after down", "slots whose count is not F",
        double(std::count_if(counted.begin(), counted.end(), [&](unsigned v) { return v != unsigned(Fe); })),
        0.0);
    moe_combine_params cb{dys.get(), dwts.get(), dres.get(), T, H, K};
    cb.y_shared = d.y_shared;
    cb.reset = dctr.get();
    cb.n_reset = S;
    ck(launch_moe_combine(cb, st), "combine launch");
    sync(name);
    const auto after = dctr.download();
    R.add("kernel", name + " counters after combine", "left non-zero",
          double(std::count_if(after.begin(), after.end(), [](unsigned v) { return v != 0; })), 0.0);
    // The twins' chain.
    std::vector<bf16_t> act(static_cast<size_t>(S * Fe));
    std::vector<float> ys(static_cast<size_t>((S + T) * H)), res = res0;
    g.x = x.data();
    g.ids = ids.data();
    g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
    g.w_scale = fp8 ? gu.s.data() : nullptr;
    g.act = act.data();
    g.slot_rows_done = nullptr;
    g.w_tile_major = false;
    moe_gate_up_gemv_ref(g);
    d.act = act.data();
    d.ids = ids.data();
    d.weights = wts.data();
    d.w = fp8 ? static_cast<const void *>(dn.q.data()) : dn.b.data();
    d.w_scale = fp8 ? dn.s.data() : nullptr;
    d.y_slots = ys.data();
    d.sh_w = fp8 ? static_cast<const void *>(sh.q.data()) : sh.b.data();
    d.sh_w_scale = fp8 ? sh.s.data() : nullptr;
    d.sh_act = sh_act.data();
    d.y_shared = ys.data() + S * H;
    d.slot_rows_done = nullptr;
    moe_down_gemv_ref(d);
    cb = moe_combine_params{ys.data(), wts.data(), res.data(), T, H, K};
    cb.y_shared = ys.data() + S * H;
    moe_combine_ref(cb);
    // The GPU's activations round to BF16 like the twin's, so an activation can differ by one
    // BF16 step: the residual takes the BF16 tolerance.
    R.add("kernel", name + " residual", "max scaled err", scaled_err(dres.download(), res), k_bf16_limit);
}

std::string fp8_tile_major_case::name() const {
    return shape_name("fp8_tile_major", {{"E", E}, {"F", F}, {"H", H}}, "");
}

void fp8_tile_major_case::run(runner &R, const std::string &name) const {
    std::vector<fp8_t> q(static_cast<size_t>(E * 2 * F * H));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto &v : q) v = fp8_t(byte(rng()));
    dvec<fp8_t> dsrc(q), ddst(q.size());
    fp8_tile_major_params p{dsrc.get(), ddst.get(), E, F, H};
    ck(launch_fp8_tile_major(p, nullptr), "launch");
    sync(name);
    const std::vector<fp8_t> want = tile_major(q, E, F, H);
    R.add("kernel", name, "bytes differing from the twin's", bit_diffs(ddst.download(), want), 0.0);
    std::vector<fp8_t> back(q.size());
    p.src = want.data();
    p.dst = back.data();
    fp8_tile_major_inverse_ref(p);
    R.add("kernel", name + " inverse", "bytes the twin's inverse does not restore", bit_diffs(back, q), 0.0);
}

std::string moe_plan_case::name() const {
    return shape_name("moe_plan", {{"slots", T * K}, {"E", E}, {"tile", tile_rows}});
}

void moe_plan_case::run(runner &R, const std::string &name) const {
    auto ids = random_topk_ids(T, E, K);
    const int64_t S = T * K;
    dvec<int32_t> dids(ids), dc(static_cast<size_t>(E)), doff(static_cast<size_t>(E + 1)),
        dto(static_cast<size_t>(E + 1)), ds(static_cast<size_t>(S));
    moe_plan_params p;
    p.ids = dids.get();
    p.n_slots = S;
    p.n_expert = E;
    p.tile_rows = tile_rows;
    p.counts = dc.get();
    p.offsets = doff.get();
    p.tile_offsets = dto.get();
    p.sorted_slots = ds.get();
    ck(launch_moe_plan(p, nullptr), "launch");
    sync(name);
    std::vector<int32_t> c(static_cast<size_t>(E)), off(static_cast<size_t>(E + 1)),
        to(static_cast<size_t>(E + 1)), s(static_cast<size_t>(S));
    p.ids = ids.data();
    p.counts = c.data();
    p.offsets = off.data();
    p.tile_offsets = to.data();
    p.sorted_slots = s.data();
    moe_plan_ref(p);
    const bool exact = dc.download() == c && doff.download() == off && dto.download() == to;
    const auto gs = ds.download();
    int64_t bad_groups = 0;
    for (int64_t e = 0; e < E; ++e) {
        std::multiset<int32_t> a(gs.begin() + off[e], gs.begin() + off[e + 1]),
            b(s.begin() + off[e], s.begin() + off[e + 1]);
        bad_groups += a != b;
    }
    R.add("kernel", name + " counts/offsets/tiles", "mismatches (exact)", exact ? 0.0 : 1.0, 0.0);
    R.add("kernel", name + " groups", "experts whose slot sets differ", double(bad_groups), 0.0);
    R.add("kernel", name + " tiles", "tiles ≤ grid bound",
          double(to[E]) <= double(moe_plan_max_tiles(S, E, 64)) ? 1.0 : 0.0, 1.0, false);
}

std::string grouped_gemm_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name("moe_grouped_gemm", {{"T", T}, {"k_used", K}, {"E", E}, {"K", k}, {"N", n}},
                      std::string(fp8 ? "fp8" : "bf16") + (glu ? " glu" : " plain") +
                          (counts.empty() ? "" : " edge groups") +
                          (lda_pad ? " lda=" + std::to_string(k + lda_pad) : "") + blk_suffix(L) +
                          (tm ? " tile-major" : "") + (wg ? " wgmma" : "") +
                          (qa ? std::string(" fp8 activations ") + (qa == 2 ? "e5m2" : "e4m3") : ""));
}

void grouped_gemm_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const fp8_format afmt = qa == 2 ? fp8_format::e5m2 : fp8_format::e4m3;
    const int64_t S = T * K, rows_a = glu ? T : S, w_rows = glu ? 2 * n : n, lda = k + lda_pad;
    std::vector<int32_t> ids;
    if (counts.empty()) {
        ids = random_topk_ids(T, E, K);
        // One expert gets no slot, to exercise empty groups.
        for (auto &e : ids)
            if (e == E - 1) e = 0;
    } else {
        for (int64_t e = 0; e < E; ++e)
            ids.insert(ids.end(), static_cast<size_t>(counts[static_cast<size_t>(e)]), int32_t(e));
        if (int64_t(ids.size()) != S) throw test_failure("edge-group counts do not sum to T·k_used");
        std::shuffle(ids.begin(), ids.end(), rng());
    }
    auto a = rand_bf16(static_cast<size_t>(rows_a * lda));
    auto w = make_expert_weights(f, E * w_rows, k, L, E);
    dvec<bf16_t> da(a), dwb(w.b), dact(static_cast<size_t>(S * n));
    dvec<fp8_t> dwq(tm ? tile_major(w.q, E, n, k) : w.q);
    dvec<float> dws(w.s), dy(static_cast<size_t>(S * n));
    moe_grouped_gemm_params p;
    p.a = da.get();
    p.lda = lda;
    p.a_row_div = glu ? K : 1;
    p.n_expert = E;
    p.w = fp8 ? static_cast<const void *>(dwq.get()) : dwb.get();
    p.wfmt = f;
    p.w_scale = fp8 ? dws.get() : nullptr;
    p.w_layout = L;
    p.k = k;
    p.n = n;
    p.glu = glu;
    p.w_tile_major = tm;
    p.out_act = glu ? dact.get() : nullptr;
    p.out_f32 = glu ? nullptr : dy.get();
    p.ldo = n;
    p.allow_wgmma = wg; // the rows without: the mma.sync kernel, whatever the GPU
    std::vector<fp8_t> aq;
    std::vector<float> as;
    std::unique_ptr<dvec<fp8_t>> daq;
    std::unique_ptr<dvec<float>> das;
    if (qa) { // codes of all lda columns (rows of lda codes), the pad's too
        aq.resize(static_cast<size_t>(rows_a * lda));
        as.resize(static_cast<size_t>(rows_a));
        act_quantize_ref({a.data(), lda, aq.data(), as.data(), rows_a, lda, afmt});
        daq = std::make_unique<dvec<fp8_t>>(aq);
        das = std::make_unique<dvec<float>>(as);
        p.a_q = daq->get();
        p.a_scale = das->get();
        p.a_fmt = afmt;
    }
    if (qa && !moe_grouped_gemm_fp8_act_ok(p)) {
        R.info("kernel", name, "skipped", 0, "FP8 × FP8 MMAs need compute capability 8.9 or later");
        return;
    }
    if (wg && !moe_grouped_gemm_wgmma_ok(p)) {
        R.info("kernel", name, "skipped", 0,
               "the warpgroup-MMA kernel needs compute capability 9.0 and sm_90a code");
        return;
    }
    std::vector<int32_t> c(static_cast<size_t>(E)), off(static_cast<size_t>(E + 1)),
        to(static_cast<size_t>(E + 1)), sorted(static_cast<size_t>(S));
    moe_plan_params pl;
    pl.ids = ids.data();
    pl.n_slots = S;
    pl.n_expert = E;
    pl.tile_rows = moe_grouped_gemm_plan_rows(p);
    pl.counts = c.data();
    pl.offsets = off.data();
    pl.tile_offsets = to.data();
    pl.sorted_slots = sorted.data();
    moe_plan_ref(pl);
    dvec<int32_t> dsorted(sorted), doff(off), dto(to);
    p.sorted_slots = dsorted.get();
    p.offsets = doff.get();
    p.tile_offsets = dto.get();
    p.tile_rows = pl.tile_rows;
    p.max_tiles = moe_plan_max_tiles(S, E, pl.tile_rows);
    ck(launch_moe_grouped_gemm(p, nullptr), "launch");
    sync(name);
    std::vector<bf16_t> act(static_cast<size_t>(S * n));
    std::vector<float> y(static_cast<size_t>(S * n));
    p.a = a.data();
    p.sorted_slots = sorted.data();
    p.offsets = off.data();
    p.tile_offsets = to.data();
    p.w = fp8 ? static_cast<const void *>(w.q.data()) : w.b.data();
    p.w_scale = fp8 ? w.s.data() : nullptr;
    p.out_act = glu ? act.data() : nullptr;
    p.out_f32 = glu ? nullptr : y.data();
    p.w_tile_major = false;
    if (qa) {
        p.a_q = aq.data();
        p.a_scale = as.data();
    }
    moe_grouped_gemm_ref(p);
    // FP8 activations: NMSE, as the FP8 rows elsewhere. Hopper's FP8 × FP8 MMAs keep fewer
    // bits of their running sums than fp32 FMAs (measured against this fp32 twin: max scaled
    // error ~3e-3 at k = 1,536 … 2,560, NMSE ~1e-6; a wrong layout or scale costs ~1).
    const std::vector<float> got = glu ? widen(dact.download()) : dy.download(), want = glu ? widen(act) : y;
    if (qa) {
        R.add("kernel", name, "NMSE", nmse(got, want), 1e-4);
        R.info("kernel", name, "max scaled err", scaled_err(got, want));
    } else {
        R.add("kernel", name, glu ? "max scaled err (bf16)" : "max scaled err", scaled_err(got, want),
              glu ? k_bf16_limit : k_f32_limit);
    }
}

} // namespace es::selftest
