// twin_forward_logits (see cuda_twin_model.h): the phases the CUDA backend records
// (cuda/backend/record.cpp), each step a kernel twin on host buffers. Weights are laid out as
// the backend lays them out (q|k|v and gate|up concatenated, experts stacked), FP8 through fp8_quantize_ref; the
// tokens of prefill-sized steps go into FP8 linears through act_quantize_ref and gemm_lt_fp8_ref,
// and, where the GPU's grouped GEMM takes FP8 activations (twin_options::grouped_fp8), into the
// routed experts through act_quantize_ref and moe_grouped_gemm_ref's FP8-activation form.
// Decode's fused kernels are their parts' twins in the same order: the FFN norm (rms_norm_ref,
// fused into the dense gate/up GEMV or moe_front on the GPU), the router, the shared experts
// (added into the residual before the routed ones), the routed experts' per-slot rows and
// moe_combine.
#include "engine/cuda/cuda_twin_model.h"

#include "engine/core/dtype.h"

#include "kernels/act_quantize.cuh"
#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/fp8_dequantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/gemv.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_down_gemv.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/moe_reroute.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/silu_mul.cuh"

#include <algorithm>
#include <cmath>

namespace es {
namespace {

// A weight matrix as the backend stores it: BF16, or FP8 codes + scales in `layout` (one grid
// over the whole matrix, as the backend has every linear but the expert stacks).
struct twin_lin {
    std::vector<bf16_t> b;
    std::vector<fp8_t> q;
    std::vector<float> s;
    int64_t n = 0, k = 0;
    weight_format fmt = weight_format::bf16;
    scale_layout layout = scale_layout::channel;
    const void *w() const { return fmt == weight_format::bf16 ? static_cast<const void *>(b.data()) : q.data(); }
    const float *scale() const { return fmt == weight_format::bf16 ? nullptr : s.data(); }
};

std::vector<bf16_t> to_bf16(const tensor_view &tv) {
    const size_t n = static_cast<size_t>(tv.n_elements());
    std::vector<float> f(n);
    convert_to_f32(tv.type, tv.data, f.data(), n);
    std::vector<bf16_t> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = float_to_bf16_bits(f[i]);
    return b;
}

std::vector<float> to_f32(const tensor_view &tv) {
    std::vector<float> f(static_cast<size_t>(tv.n_elements()));
    convert_to_f32(tv.type, tv.data, f.data(), f.size());
    return f;
}

// Rows of several tensors stacked in order, then quantized (per row, or per 128×128 block) when
// fp8; `stack` equal matrices (the routed experts) each with its own block grid, as the backend
// stores them (kernel_common.h: fp8_stack_scale_index).
twin_lin make_lin(const std::vector<const tensor_view *> &parts, int64_t k, weight_format fmt,
                  scale_layout layout = scale_layout::channel, int64_t stack = 1) {
    twin_lin L;
    L.k = k;
    L.fmt = fmt;
    L.layout = fmt == weight_format::fp8_e4m3 ? layout : scale_layout::channel;
    for (const tensor_view *tv : parts) {
        if (!tv) throw load_error("twin model: a tensor is missing");
        auto b = to_bf16(*tv);
        L.b.insert(L.b.end(), b.begin(), b.end());
    }
    L.n = int64_t(L.b.size()) / k;
    if (fmt == weight_format::fp8_e4m3) {
        L.q.resize(L.b.size());
        if (L.layout == scale_layout::block128 && k % 16 != 0)
            throw load_error("twin model: --fp8-scales block128 needs k % 16 == 0 (a linear has k = " +
                             std::to_string(k) + ")");
        const int64_t mr = L.n / stack, cnt = fp8_scale_count(mr, k, L.layout);
        L.s.resize(static_cast<size_t>(stack * cnt));
        for (int64_t e = 0; e < stack; ++e) {
            fp8_quantize_params p{
                L.b.data() + e * mr * k, L.q.data() + e * mr * k, L.s.data() + e * cnt, mr, k, L.layout};
            fp8_quantize_ref(p);
        }
    }
    return L;
}

// How the backend runs FP8 linears for the tokens of prefill-sized steps (quant[t]: steps above
// the GEMV threshold): quantized activations and cuBLASLt's FP8 GEMM when fp8_act and the shape
// fits its rules; otherwise, where cuBLASLt's BF16 rules hold (k % 8, n % 4), the weights
// dequantized to BF16 (fp8_dequantize: one more rounding) for a BF16 GEMM; otherwise the GEMV.
struct act_plan {
    fp8_format fmt = fp8_format::e4m3;
    bool fp8_act = false;
    bool any = false;
    std::vector<char> quant;  // [T]
    std::vector<char> routed; // [T]: the routed experts' grouped GEMM with FP8 activations
};

// The routed experts of the tokens marked in `sel` as the grouped GEMM computes them with FP8
// activations (twin_options::grouped_fp8): act_quantize of their normalized rows, the gate/up
// with the codes, act_quantize of each slot's SiLU·up row, the down with those codes. Their
// rows of act_e ([T·K, F]) and y_e ([T·K, H]) are overwritten; the other tokens' are left.
void routed_fp8_act(const std::vector<char> &sel, const std::vector<bf16_t> &xn,
                    const std::vector<int32_t> &ids, const void *w_gu, const float *s_gu, const void *w_dn,
                    const float *s_dn, int64_t H, int64_t F, int64_t E, int64_t K, fp8_format fmt,
                    std::vector<bf16_t> &act_e, std::vector<float> &y_e) {
    std::vector<int64_t> toks;
    for (int64_t t = 0; t < int64_t(sel.size()); ++t)
        if (sel[static_cast<size_t>(t)]) toks.push_back(t);
    const int64_t M = int64_t(toks.size()), S = M * K;
    if (M == 0) return;
    std::vector<bf16_t> xs(static_cast<size_t>(M * H));
    std::vector<int32_t> is(static_cast<size_t>(S));
    for (int64_t i = 0; i < M; ++i) {
        std::copy_n(xn.begin() + toks[static_cast<size_t>(i)] * H, H, xs.begin() + i * H);
        std::copy_n(ids.begin() + toks[static_cast<size_t>(i)] * K, K, is.begin() + i * K);
    }
    std::vector<int32_t> cnt(static_cast<size_t>(E)), off(static_cast<size_t>(E + 1)),
        to(static_cast<size_t>(E + 1)), sorted(static_cast<size_t>(S));
    moe_plan_ref({is.data(), S, E, moe_grouped_gemm_wgmma_tile_rows, cnt.data(), off.data(), to.data(),
                  sorted.data()});
    std::vector<fp8_t> q(static_cast<size_t>(S * std::max(H, F)));
    std::vector<float> qs(static_cast<size_t>(S));
    act_quantize_ref({xs.data(), H, q.data(), qs.data(), M, H, fmt});
    std::vector<bf16_t> as(static_cast<size_t>(S * F));
    std::vector<float> ys(static_cast<size_t>(S * H));
    moe_grouped_gemm_params g;
    g.a_q = q.data();
    g.a_scale = qs.data();
    g.a_fmt = fmt;
    g.lda = H;
    g.a_row_div = K;
    g.sorted_slots = sorted.data();
    g.offsets = off.data();
    g.tile_offsets = to.data();
    g.n_expert = E;
    g.w = w_gu;
    g.wfmt = weight_format::fp8_e4m3;
    g.w_scale = s_gu;
    g.k = H;
    g.n = F;
    g.glu = true;
    g.out_act = as.data();
    g.ldo = F;
    moe_grouped_gemm_ref(g);
    act_quantize_ref({as.data(), F, q.data(), qs.data(), S, F, fmt});
    g.lda = F;
    g.a_row_div = 1;
    g.w = w_dn;
    g.w_scale = s_dn;
    g.k = F;
    g.n = H;
    g.glu = false;
    g.out_act = nullptr;
    g.out_f32 = ys.data();
    g.ldo = H;
    moe_grouped_gemm_ref(g);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < K; ++j) {
            const int64_t src = i * K + j, dst = toks[static_cast<size_t>(i)] * K + j;
            std::copy_n(as.begin() + src * F, F, act_e.begin() + dst * F);
            std::copy_n(ys.begin() + src * H, H, y_e.begin() + dst * H);
        }
}

void linear(const twin_lin &L, const std::vector<bf16_t> &x, int64_t T, std::vector<float> &y, bool acc,
            const act_plan &ap = {}) {
    if (!acc) y.assign(static_cast<size_t>(T * L.n), 0.0f);
    gemv_params p;
    p.x = x.data();
    p.ldx = L.k;
    p.w = L.w();
    p.wfmt = L.fmt;
    p.w_scale = L.scale();
    p.w_layout = L.layout;
    p.y = y.data();
    p.ldy = L.n;
    p.n_tokens = T;
    p.n = L.n;
    p.k = L.k;
    p.accumulate = acc;
    // Block scales: never cuBLASLt's FP8 GEMM (per-row weight scales only), as in the backend.
    const bool fp8_gemm = ap.fp8_act && L.layout == scale_layout::channel && gemm_lt_fp8_dims_ok(L.n, L.k),
               deq_gemm = !fp8_gemm && L.k % 8 == 0 && L.n % 4 == 0;
    if (L.fmt != weight_format::fp8_e4m3 || !ap.any || (!fp8_gemm && !deq_gemm)) {
        gemv_ref(p);
        return;
    }
    // Big-step tokens: act_quantize then gemm_lt's FP8 product, or the BF16 GEMM on dequantized
    // weights; the other tokens gemv; in runs of consecutive tokens.
    std::vector<fp8_t> q;
    std::vector<float> qs;
    std::vector<bf16_t> wdq;
    if (fp8_gemm) {
        q.resize(static_cast<size_t>(T * L.k));
        qs.resize(static_cast<size_t>(T));
        act_quantize_params aq;
        aq.x = x.data();
        aq.ldx = L.k;
        aq.q = q.data();
        aq.scale = qs.data();
        aq.m = T;
        aq.k = L.k;
        aq.fmt = ap.fmt;
        act_quantize_ref(aq);
    } else {
        wdq.resize(static_cast<size_t>(L.n * L.k));
        fp8_dequantize_params d;
        d.q = L.q.data();
        d.scale = L.s.data();
        d.out = wdq.data();
        d.n = L.n;
        d.k = L.k;
        d.layout = L.layout;
        fp8_dequantize_ref(d);
    }
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && ap.quant[t1] == ap.quant[t0]) ++t1;
        if (ap.quant[t0] && !fp8_gemm) {
            gemm_lt_params g;
            g.a = x.data() + t0 * L.k;
            g.lda = L.k;
            g.w = wdq.data();
            g.ldw = L.k;
            g.y = y.data() + t0 * L.n;
            g.ldy = L.n;
            g.m = t1 - t0;
            g.n = L.n;
            g.k = L.k;
            g.accumulate = acc;
            gemm_lt_ref(g);
        } else if (ap.quant[t0]) {
            gemm_lt_fp8_params g;
            g.a = q.data() + t0 * L.k;
            g.lda = L.k;
            g.a_scale = qs.data() + t0;
            g.a_fmt = ap.fmt;
            g.w = L.q.data();
            g.ldw = L.k;
            g.w_scale = L.s.data();
            g.y = y.data() + t0 * L.n;
            g.ldy = L.n;
            g.m = t1 - t0;
            g.n = L.n;
            g.k = L.k;
            g.accumulate = acc;
            gemm_lt_fp8_ref(g);
        } else {
            gemv_params r = p;
            r.x = x.data() + t0 * L.k;
            r.y = y.data() + t0 * L.n;
            r.n_tokens = t1 - t0;
            gemv_ref(r);
        }
        t0 = t1;
    }
}

// Which tokens reach FP8 linears quantized: those of steps above the GEMV threshold (o.steps; none
// given, one step of every token), and of those, which reach the routed experts' grouped GEMM
// with FP8 activations.
act_plan plan_activations(const model_config &c, int64_t T, weight_format fmt, const twin_options &o) {
    act_plan aplan;
    aplan.fmt = o.activations == activation_format::e5m2 ? fp8_format::e5m2 : fp8_format::e4m3;
    aplan.quant.assign(static_cast<size_t>(T), 0);
    aplan.routed.assign(static_cast<size_t>(T), 0);
    std::vector<int64_t> steps = o.steps.empty() ? std::vector<int64_t>{T} : o.steps;
    int64_t start = 0;
    for (int64_t n : steps) {
        if (n <= 0 || start + n > T)
            throw load_error("twin model: the steps do not add up to the tokens");
        if (n > cuda_gemv_max_tokens) {
            std::fill(aplan.quant.begin() + start, aplan.quant.begin() + start + n, char(1));
            std::fill(aplan.routed.begin() + start, aplan.routed.begin() + start + n, char(1));
        }
        start += n;
    }
    if (start != T) throw load_error("twin model: the steps do not add up to the tokens");
    aplan.fp8_act = o.activations != activation_format::bf16;
    // The backend's activations with block scales are BF16 (cuda_backend::activation_note).
    if (o.fp8.scales == scale_layout::block128) aplan.fp8_act = false;
    aplan.any = fmt == weight_format::fp8_e4m3 &&
                std::find(aplan.quant.begin(), aplan.quant.end(), 1) != aplan.quant.end();
    // The routed experts' FP8 activations (record.cpp, record_moe_grouped: the grouped GEMM's a_q).
    if (!o.grouped_fp8 || !aplan.fp8_act || fmt != weight_format::fp8_e4m3 || c.n_expert == 0 ||
        c.n_embd % 16 != 0 || c.n_ff_exp % 16 != 0)
        std::fill(aplan.routed.begin(), aplan.routed.end(), char(0));
    return aplan;
}

// One forward pass of one sequence from position 0: the formats in effect, the activation plan,
// the positions and block table (identity), and the buffers every layer reuses: the residual x
// (fp32), its normalized rows xn, the K/V pools.
struct twin_pass {
    twin_pass(const model_config &cfg, int64_t n_tokens, weight_format f, const twin_options &o, act_plan plan)
        : c(cfg), fmt(f), fmt_o(f == weight_format::fp8_e4m3 && !o.fp8.attn_out ? weight_format::bf16 : f),
          sl(o.fp8.scales), aplan(std::move(plan)), T(n_tokens), H(cfg.n_embd), hd(cfg.head_dim), qd(cfg.q_dim()),
          K(o.intervention && o.intervention->top_k > 0 ? o.intervention->top_k : cfg.n_expert_used),
          eps(float(cfg.rms_eps)),
          kvf(o.kv_cache == kv_cache_dtype::fp8 ? kv_format::fp8_e4m3 : kv_format::bf16) {
        const int64_t n_blocks = (T + bs - 1) / bs;
        inv_freq.resize(static_cast<size_t>(hd / 2));
        for (int64_t i = 0; i < hd / 2; ++i)
            inv_freq[i] = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(hd));
        pos.resize(static_cast<size_t>(T));
        seq.assign(static_cast<size_t>(T), 0);
        bt.resize(static_cast<size_t>(std::max<int64_t>(n_blocks, 1)));
        for (int64_t i = 0; i < T; ++i) pos[i] = int32_t(i);
        for (int64_t i = 0; i < int64_t(bt.size()); ++i) bt[i] = int32_t(i);
        tiles = attention_tiles(seq.data(), T, c.n_head / c.n_head_kv);
        x.resize(static_cast<size_t>(T * H));
        xn.resize(static_cast<size_t>(T * H));
        q.resize(static_cast<size_t>(T * qd));
        attn.resize(static_cast<size_t>(T * qd));
        // K/V pools (bytes) of BF16 or E4M3 elements.
        const size_t kv_pool_bytes = static_cast<size_t>(n_blocks * bs * cfg.kv_dim()) * kv_format_bytes(kvf);
        kc.resize(kv_pool_bytes);
        vc.resize(kv_pool_bytes);
    }

    const model_config &c;
    const weight_format fmt, fmt_o; // fmt_o: the attention output projection's
    const scale_layout sl;
    const act_plan aplan;
    const int64_t T, H, hd, qd, K;
    static constexpr int64_t bs = 16; // KV block size
    const float eps;
    const kv_format kvf;
    std::vector<float> inv_freq;
    std::vector<int32_t> pos, seq, bt, tiles;
    std::vector<float> x, qkv, gu;
    std::vector<bf16_t> xn, q, attn, act;
    std::vector<uint8_t> kc, vc;
};

// xn = rms_norm(x) · weight.
void normalize(twin_pass &p, const std::vector<bf16_t> &weight) {
    rms_norm_params nrm;
    nrm.x = p.x.data();
    nrm.weight = weight.data();
    nrm.out = p.xn.data();
    nrm.n_rows = p.T;
    nrm.n_embd = p.H;
    nrm.eps = p.eps;
    rms_norm_ref(nrm);
}

// The attention block: the input norm, the q|k|v linear, RoPE with the K/V store, attention over
// the cache, the output projection added into the residual.
void attention_block(twin_pass &p, const layer_tensors &L, const std::vector<bf16_t> &attn_norm) {
    const model_config &c = p.c;
    normalize(p, attn_norm);
    linear(make_lin({L.wq, L.wk, L.wv}, p.H, p.fmt, p.sl), p.xn, p.T, p.qkv, false, p.aplan);
    rope_kv_params rp;
    rp.qkv = p.qkv.data();
    rp.pos = p.pos.data();
    rp.seq = p.seq.data();
    rp.block_tables = p.bt.data();
    rp.bt_stride = int64_t(p.bt.size());
    rp.inv_freq = p.inv_freq.data();
    rp.q_out = p.q.data();
    rp.k_cache = p.kc.data();
    rp.v_cache = p.vc.data();
    rp.n_tokens = p.T;
    rp.n_head = c.n_head;
    rp.n_head_kv = c.n_head_kv;
    rp.head_dim = p.hd;
    rp.block_size = p.bs;
    rp.kv = p.kvf;
    rope_kv_ref(rp);
    attention_params ap;
    ap.q = p.q.data();
    ap.k_cache = p.kc.data();
    ap.v_cache = p.vc.data();
    ap.pos = p.pos.data();
    ap.seq = p.seq.data();
    ap.block_tables = p.bt.data();
    ap.bt_stride = int64_t(p.bt.size());
    ap.tiles = p.tiles.data();
    ap.n_tiles = int64_t(p.tiles.size() / 2);
    ap.out = p.attn.data();
    ap.n_tokens = p.T;
    ap.n_head = c.n_head;
    ap.n_head_kv = c.n_head_kv;
    ap.head_dim = p.hd;
    ap.block_size = p.bs;
    ap.kv = p.kvf;
    ap.scale = 1.0f / std::sqrt(float(p.hd));
    attention_ref(ap);
    linear(make_lin({L.wo}, p.qd, p.fmt_o, p.sl), p.attn, p.T, p.x, true, p.aplan);
}

// A SwiGLU FFN of width F on xn (the dense FFN, or the shared experts), added into the residual.
void swiglu_ffn(twin_pass &p, const tensor_view *g, const tensor_view *u, const tensor_view *d, int64_t F) {
    linear(make_lin({g, u}, p.H, p.fmt, p.sl), p.xn, p.T, p.gu, false, p.aplan);
    p.act.assign(static_cast<size_t>(p.T * F), 0);
    silu_mul_ref({p.gu.data(), p.act.data(), p.T, F});
    linear(make_lin({d}, F, p.fmt, p.sl), p.act, p.T, p.x, true, p.aplan);
}

// The routed experts of the router's choice (ids, wts: [T, K]) on xn as the backend's default
// path has them: per-slot rows (decode: moe_down_gemv's y_slots; prefill: the grouped GEMM's),
// then moe_combine adding them into the residual in choice order.
void routed_experts(twin_pass &p, const layer_tensors &L, const std::vector<int32_t> &ids,
                    const std::vector<float> &wts) {
    const model_config &c = p.c;
    const int64_t T = p.T, H = p.H, K = p.K;
    std::vector<const tensor_view *> gu_parts, down_parts;
    for (int64_t e = 0; e < c.n_expert; ++e) {
        gu_parts.push_back(L.ffn_gate_exps[e]);
        gu_parts.push_back(L.ffn_up_exps[e]);
        down_parts.push_back(L.ffn_down_exps[e]);
    }
    const twin_lin egu = make_lin(gu_parts, H, p.fmt, p.sl, c.n_expert),
                   edn = make_lin(down_parts, c.n_ff_exp, p.fmt, p.sl, c.n_expert);
    std::vector<bf16_t> act_e(static_cast<size_t>(T * K * c.n_ff_exp));
    moe_gate_up_gemv_params g;
    g.x = p.xn.data();
    g.ids = ids.data();
    g.w = egu.w();
    g.wfmt = p.fmt;
    g.w_scale = egu.scale();
    g.w_layout = egu.layout;
    g.act = act_e.data();
    g.n_tokens = T;
    g.n_embd = H;
    g.n_expert_used = K;
    g.n_ff_exp = c.n_ff_exp;
    moe_gate_up_gemv_ref(g);
    std::vector<float> y_e(static_cast<size_t>(T * K * H));
    moe_down_gemv_params d;
    d.act = act_e.data();
    d.ids = ids.data();
    d.weights = wts.data();
    d.w = edn.w();
    d.wfmt = p.fmt;
    d.w_scale = edn.scale();
    d.w_layout = edn.layout;
    d.y_slots = y_e.data();
    d.n_tokens = T;
    d.n_embd = H;
    d.n_expert_used = K;
    d.n_ff_exp = c.n_ff_exp;
    moe_down_gemv_ref(d);
    routed_fp8_act(p.aplan.routed, p.xn, ids, egu.w(), egu.scale(), edn.w(), edn.scale(), H, c.n_ff_exp, c.n_expert,
                   K, p.aplan.fmt, act_e, y_e);
    moe_combine_params cb;
    cb.y = y_e.data();
    cb.weights = wts.data();
    cb.x = p.x.data();
    cb.n_tokens = T;
    cb.n_embd = H;
    cb.n_expert_used = K;
    moe_combine_ref(cb);
}

// The MoE FFN on xn: the router (its choices into rec when set), the shared experts, the routed
// ones. The shared experts go in first: on the GPU, decode steps (moe_front) add them as
// moe_combine's y_shared, x + y_shared, the same fp32 sum as the accumulating linear of prefill
// steps and of this twin.
void moe_ffn(twin_pass &p, const layer_tensors &L, int64_t il, routing_record *rec,
             const routing_intervention *iv) {
    const model_config &c = p.c;
    const auto router = to_f32(*L.ffn_gate_inp), bias = to_f32(*L.ffn_exp_probs_b);
    std::vector<int32_t> ids(static_cast<size_t>(p.T * p.K));
    std::vector<float> wts(static_cast<size_t>(p.T * p.K)), logits(static_cast<size_t>(p.T * c.n_expert));
    moe_router_params mr;
    mr.x = p.xn.data();
    mr.w = router.data();
    mr.bias = bias.data();
    mr.ids = ids.data();
    mr.weights = wts.data();
    mr.n_tokens = p.T;
    mr.n_embd = p.H;
    mr.n_expert = c.n_expert;
    mr.n_expert_used = p.K;
    mr.norm_min = float(c.moe_norm_min);
    mr.logits = logits.data();
    moe_router_ref(mr);
    int32_t k = int32_t(c.n_expert_used);
    if (iv) { // as the CUDA backend: the choices again from the logits, under this layer's rule
        const layer_routing lr = routing_for_layer(*iv, int32_t(il), c.n_expert, c.n_expert_used);
        std::vector<int32_t> rule(static_cast<size_t>(moe_reroute_rule_words(c.n_expert)));
        moe_reroute_fill_rule(rule.data(), c.n_expert, lr.k, lr.forced.data(), int32_t(lr.forced.size()),
                              lr.disabled.data(), lr.bias_scale);
        const std::vector<int32_t> token_rule(static_cast<size_t>(p.T), 0);
        moe_reroute_params rr;
        rr.logits = logits.data();
        rr.bias = bias.data();
        rr.rules = rule.data();
        rr.token_rule = token_rule.data();
        rr.ids = ids.data();
        rr.weights = wts.data();
        rr.n_tokens = p.T;
        rr.n_expert = c.n_expert;
        rr.K = p.K;
        rr.n_rules = 1;
        rr.norm_min = float(c.moe_norm_min);
        moe_reroute_ref(rr);
        k = lr.k;
    }
    if (rec) {
        rec->moe_layers.push_back(int32_t(il));
        rec->ids.emplace_back(ids.begin(), ids.end());
        rec->weights.push_back(wts);
        for (int64_t t = 0; t < p.T; ++t) // the places past k as the record holds them
            for (int64_t j = k; j < p.K; ++j) {
                rec->ids.back()[size_t(t * p.K + j)] = -1;
                rec->weights.back()[size_t(t * p.K + j)] = 0.0f;
            }
    }
    if (c.n_expert_shared > 0)
        swiglu_ffn(p, L.ffn_gate_shexp, L.ffn_up_shexp, L.ffn_down_shexp, c.n_ff_exp * c.n_expert_shared);
    routed_experts(p, L, ids, wts);
}

// The output norm and the head: logits [T, n_vocab].
std::vector<float> head_logits(twin_pass &p, const twin_lin &head, const std::vector<bf16_t> &out_norm) {
    normalize(p, out_norm);
    std::vector<float> logits;
    linear(head, p.xn, p.T, logits, false, p.aplan);
    return logits;
}

} // namespace

result<std::vector<float>> twin_forward_logits(const model_config &c, const model_tensors &t,
                                               const std::vector<int32_t> &tokens, weight_precision precision,
                                               const twin_options &o) {
    return catch_errors([&]() -> std::vector<float> {
        const weight_format fmt = precision == weight_precision::fp8 ? weight_format::fp8_e4m3 : weight_format::bf16;
        const int64_t T = int64_t(tokens.size());
        act_plan aplan = plan_activations(c, T, fmt, o);
        const auto tok_embd = to_bf16(*t.tok_embd);
        const twin_lin head =
            make_lin({c.tie_word_embeddings ? t.tok_embd : t.output}, c.n_embd,
                     fmt == weight_format::fp8_e4m3 && o.fp8.head ? fmt : weight_format::bf16, o.fp8.scales);
        const auto out_norm = to_bf16(*t.output_norm);
        if (o.intervention)
            if (auto st = check_routing_intervention(*o.intervention, c); !st)
                throw load_error("expert intervention: " + st.message());
        twin_pass p(c, T, fmt, o, std::move(aplan));
        const routing_intervention *iv = o.intervention && !o.intervention->empty() ? o.intervention.get() : nullptr;
        if (o.routing) *o.routing = routing_record{{}, int32_t(p.K), {}, {}, {}};
        embedding_ref({tokens.data(), tok_embd.data(), p.x.data(), T, p.H});
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const layer_tensors &L = t.layers[il];
            const auto attn_norm = to_bf16(*L.attn_norm), ffn_norm = to_bf16(*L.ffn_norm);
            attention_block(p, L, attn_norm);
            normalize(p, ffn_norm);
            if (L.is_moe)
                moe_ffn(p, L, il, o.routing, iv);
            else
                swiglu_ffn(p, L.ffn_gate, L.ffn_up, L.ffn_down, c.n_ff);
        }
        return head_logits(p, head, out_norm);
    });
}

} // namespace es
