// A step plan recorded into launches on the backend's stream, one function per phase: embedding,
// attention (norm, q/k/v, RoPE + KV write, attention, o_proj), dense FFN, MoE (router and shared
// experts; routed experts as per-slot GEMVs for decode or grouped GEMMs for prefill) and the head
// with the greedy pick or the candidates. No host synchronization: a recording can be captured into
// a CUDA graph. The fusions follow the plan where the kernels' own checks allow them.
#include "engine/cuda/backend/cuda_backend_impl.h"

#include "kernels/act_quantize.cuh"
#include "kernels/embedding.cuh"
#include "kernels/fp8_dequantize.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_down_gemv.cuh"
#include "kernels/moe_front.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/moe_reroute.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/sample_rows.cuh"
#include "kernels/topk_logits.cuh"

#include <cmath>

namespace es {

bool cuda_backend_impl::linear_fp8(const std::string &role, const dlin &L, const bf16_t *x, int64_t ldx, float *y,
                int64_t ldy, int64_t M, bool acc) {
    const work_layout &w = m_lay;
    act_quantize_params aq;
    aq.x = x;
    aq.ldx = ldx;
    aq.q = m_work.at<fp8_t>(w.act_q);
    aq.scale = m_work.at<float>(w.act_scale);
    aq.m = M;
    aq.k = L.k;
    aq.fmt = m_act == activation_format::e5m2 ? fp8_format::e5m2 : fp8_format::e4m3;
    gemm_lt_fp8_params g;
    g.ctx = m_lt;
    g.a = aq.q;
    g.lda = L.k;
    g.a_scale = aq.scale;
    g.a_fmt = aq.fmt;
    g.w = static_cast<const fp8_t *>(L.w);
    g.ldw = L.k;
    g.w_scale = L.scale;
    g.y = y;
    g.ldy = ldy;
    g.m = M;
    g.n = L.n;
    g.k = L.k;
    g.accumulate = acc;
    if (M > w.T || L.k > w.act_k || !gemm_lt_fp8_shape_ok(g)) return false;
    op(role + " act_quantize", [&] { return launch_act_quantize(aq, m_stream); });
    cudaError_t e = cudaSuccess;
    op(role + " gemm_lt fp8", op_cost{double(L.bytes())}, [&] {
        e = launch_gemm_lt_fp8(g, m_stream);
        return e == cudaErrorNotSupported ? cudaSuccess : e;
    });
    if (e != cudaErrorNotSupported) return true;
    // Nothing was launched for the GEMM; the quantized activations are scratch.
    m_act_note = std::string(gemm_lt_last_error(m_lt)) + ": BF16 activations, weights dequantized";
    m_act = activation_format::bf16;
    ensure_dequantize_buffer();
    return false;
}

void cuda_backend_impl::linear(const char *role, const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy, int64_t M, bool acc,
            bool y_ready) {
    if (M <= 0) return;
    if (M > k_gemv_max_tokens) {
        // (m_act is bf16 with block scales: cuBLASLt's FP8 GEMM scales weights per row only.)
        if (L.fmt == weight_format::fp8_e4m3 && m_act != activation_format::bf16 &&
            L.layout == scale_layout::channel && linear_fp8(role, L, x, ldx, y, ldy, M, acc))
            return;
        gemm_lt_params g;
        g.ctx = m_lt;
        g.a = x;
        g.lda = ldx;
        g.w = L.fmt == weight_format::bf16 ? static_cast<const bf16_t *>(L.w) : m_deq.at<bf16_t>();
        g.ldw = L.k;
        g.y = y;
        g.ldy = ldy;
        g.m = M;
        g.n = L.n;
        g.k = L.k;
        g.accumulate = acc;
        const bool deq_ok = L.fmt == weight_format::bf16 || m_deq.bytes() >= size_t(L.n * L.k) * 2;
        if (deq_ok && gemm_lt_shape_ok(g)) {
            if (L.fmt == weight_format::fp8_e4m3) {
                fp8_dequantize_params d;
                d.q = static_cast<const fp8_t *>(L.w);
                d.scale = L.scale;
                d.out = m_deq.at<bf16_t>();
                d.n = L.n;
                d.k = L.k;
                d.layout = L.layout;
                op(std::string(role) + " fp8_dequantize", [&] { return launch_fp8_dequantize(d, m_stream); });
            }
            op(std::string(role) + " gemm_lt", op_cost{double(L.bytes())}, [&] { return launch_gemm_lt(g, m_stream); });
            return;
        }
    }
    gemv_params p = gemv_for(L, x, ldx, y, ldy, M, acc);
    p.y_ready = y_ready && m_opt.skip_ops.empty(); // skipped launches shorten the two-launch distance
    op(std::string(role) + " gemv", op_cost{double(L.bytes())}, [&] { return launch_gemv(p, m_stream); });
}

gemv_params cuda_backend_impl::gemv_for(const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy, int64_t M,
                            bool acc) {
    gemv_params p;
    p.x = x;
    p.ldx = ldx;
    p.w = L.w;
    p.wfmt = L.fmt;
    p.w_scale = L.scale;
    p.w_layout = L.layout;
    p.y = y;
    p.ldy = ldy;
    p.n_tokens = M;
    p.n = L.n;
    p.k = L.k;
    p.accumulate = acc;
    return p;
}

void cuda_backend_impl::check_launch(const std::string &name, cudaError_t e) const {
    if (e == cudaErrorUnknown && name.find("gemm_lt") != std::string::npos)
        throw load_error(std::string("cuBLASLt: ") + gemm_lt_last_error(m_lt));
    ck(e, name.c_str());
}

// The step as a list of phases: the model's forward pass.
void cuda_backend_impl::record_step(const step_plan &p) {
    set_decode_carveout(decode_carveout_for_tokens(p.T)); // the split all of the step's kernels ask for
    const step_ptrs s = pointers_for(p);
    layer_link link;
    // Each launch is tagged with the phase and layer set here (op_tag); a kernel fused across
    // phases counts in the one it is recorded in (moe_front's shared gate/up: by its bytes).
    struct phase_reset {
        cuda_backend_impl &b;
        ~phase_reset() { b.m_phase = step_phase::other, b.m_phase_layer = -1; }
    } reset{*this};
    for (int64_t il = 0; il < m_cfg.n_layer; ++il) {
        m_phase = step_phase::attention;
        m_phase_layer = int32_t(il);
        record_attention(p, s, il, link);
        m_phase = m_w.layers[il].is_moe ? step_phase::moe_routed : step_phase::dense;
        if (!m_w.layers[il].is_moe)
            record_dense_ffn(p, s, il);
        else if (p.moe_decode_gemv)
            record_moe_decode(p, s, il, link);
        else
            record_moe_grouped(p, s, il, link);
    }
    m_phase_layer = -1;
    record_embedding(p, s, link); // a model without layers (bench --layers 0)
    m_phase = step_phase::head;
    record_head(p, s, link);
}

// The routed experts one step's T tokens can read at most: min(E, T · k) of them.
double cuda_backend_impl::routed_bytes(const dlin &stack, int64_t T) const {
    const int64_t E = std::max<int64_t>(m_cfg.n_expert, 1);
    return double(stack.bytes()) / double(E) * double(std::min<int64_t>(E, T * m_cfg.n_expert_used));
}

step_ptrs cuda_backend_impl::pointers_for(const step_plan &p) const {
    const work_layout &w = m_lay;
    step_ptrs s;
    s.x = m_work.at<float>(w.x);
    s.xn = m_work.at<bf16_t>(w.xn);
    s.qkv = m_work.at<float>(w.qkv);
    s.q = m_work.at<bf16_t>(w.q);
    s.attn = m_work.at<bf16_t>(w.attn);
    s.gu = m_work.at<float>(w.gu);
    s.act = m_work.at<bf16_t>(w.act);
    s.tokens = m_inputs.at<int32_t>(p.in.tokens);
    s.pos = m_inputs.at<int32_t>(p.in.pos);
    s.seq = m_inputs.at<int32_t>(p.in.seq);
    s.rows = m_inputs.at<int32_t>(p.in.rows);
    s.tiles = m_inputs.at<int32_t>(p.in.tiles);
    s.bt = m_inputs.at<int32_t>(p.in.bt);
    return s;
}

// The token embeddings into x, once: before layer 0, unless its fused q/k/v GEMV took them.
void cuda_backend_impl::record_embedding(const step_plan &p, const step_ptrs &s, layer_link &link) {
    if (link.embedded) return;
    embedding_params ep;
    ep.tokens = s.tokens;
    ep.table = m_w.arena.at<bf16_t>(m_w.tok_embd_off);
    ep.out = s.x;
    ep.n_tokens = p.T;
    ep.n_embd = m_cfg.n_embd;
    const step_phase was = m_phase;
    m_phase = step_phase::other;
    op("embedding", op_cost{double(p.T) * double(m_cfg.n_embd) * 2.0}, [&] { return launch_embedding(ep, m_stream); });
    m_phase = was;
    link.embedded = true;
}

// Norm → q/k/v → RoPE + KV write → attention → o_proj (residual added). Decode fuses the first
// three into one GEMV launch (gemv.cuh), with the embedding too for one token in layer 0.
void cuda_backend_impl::record_attention(const step_plan &p, const step_ptrs &s, int64_t il, layer_link &link) {
    const auto &c = m_cfg;
    const int64_t T = p.T, H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim;
    const dlayer &L = m_w.layers[il];
    const bool xn_in = link.xn_ready; // the combine before normalized this layer's input into xn
    link.xn_ready = false;
    // Layer il's K pool, then its V pool, of kv_fmt() elements.
    const size_t kv_pool_bytes = m_kv_layer_elems * kv_format_bytes(kv_fmt());
    unsigned char *kc = m_kv_pool.at<unsigned char>() + size_t(il) * 2 * kv_pool_bytes, *vc = kc + kv_pool_bytes;
    rope_kv_params rp;
    rp.qkv = s.qkv;
    rp.pos = s.pos;
    rp.seq = s.seq;
    rp.block_tables = s.bt;
    rp.bt_stride = p.stride;
    rp.inv_freq = m_w.arena.at<float>(m_w.inv_freq_off);
    rp.q_out = s.q;
    rp.k_cache = kc;
    rp.v_cache = vc;
    rp.n_tokens = T;
    rp.n_head = c.n_head;
    rp.n_head_kv = c.n_head_kv;
    rp.head_dim = hd;
    rp.block_size = m_kv.block_size;
    rp.kv = kv_fmt(); // FP8: per-tensor scales 1.0 (k_scale, v_scale defaults)
    gemv_params fq;
    if (p.fuse) {
        fq.w = L.wqkv.w;
        fq.wfmt = L.wqkv.fmt;
        fq.w_scale = L.wqkv.scale;
        fq.w_layout = L.wqkv.layout;
        fq.n_tokens = T;
        fq.n = L.wqkv.n;
        fq.k = L.wqkv.k;
        if (xn_in) {
            fq.x = s.xn;
            fq.ldx = H;
        } else {
            fq.norm = {s.x, L.attn_norm, float(c.rms_eps), nullptr};
        }
        fq.rope_on = true;
        fq.rope = rp;
        fq.rope_inputs_after_wait = il == 0 && m_inputs_by_kernel;
        fq.k_splits = 1;
        if (il == 0 && p.embed_in_qkv) {
            gemv_params fe = fq; // the embedding too, if the fused kernel takes it
            fe.embd_tokens = s.tokens;
            fe.embd_table = m_w.arena.at<bf16_t>(m_w.tok_embd_off);
            fe.embd_out = s.x;
            if (gemv_fusion_ok(fe)) {
                fq = fe;
                link.embedded = true;
            }
        }
    }
    record_embedding(p, s, link);
    if (fq.rope_on && gemv_fusion_ok(fq)) {
        op(fq.embd_table ? "embedding+norm+qkv+rope_kv gemv"
           : xn_in       ? "qkv+rope_kv gemv"
                         : "norm+qkv+rope_kv gemv",
           op_cost{double(L.wqkv.bytes())}, [&] { return launch_gemv(fq, m_stream); });
    } else {
        if (!xn_in) {
            rms_norm_params nrm;
            nrm.x = s.x;
            nrm.weight = L.attn_norm;
            nrm.out = s.xn;
            nrm.n_rows = T;
            nrm.n_embd = H;
            nrm.eps = float(c.rms_eps);
            op("rms_norm", [&] { return launch_rms_norm(nrm, m_stream); });
        }
        linear("qkv", L.wqkv, s.xn, H, s.qkv, qd + 2 * kvd, T, false);
        op("rope_kv", [&] { return launch_rope_kv(rp, m_stream); });
    }

    attention_params ap;
    ap.q = s.q;
    ap.k_cache = kc;
    ap.v_cache = vc;
    ap.pos = s.pos;
    ap.seq = s.seq;
    ap.block_tables = s.bt;
    ap.bt_stride = p.stride;
    ap.tiles = s.tiles;
    ap.n_tiles = p.n_tiles;
    ap.max_tile_tokens = p.max_tile;
    ap.out = s.attn;
    ap.n_tokens = T;
    ap.n_head = c.n_head;
    ap.n_head_kv = c.n_head_kv;
    ap.head_dim = hd;
    ap.block_size = m_kv.block_size;
    ap.kv = kv_fmt();
    ap.scale = 1.0f / std::sqrt(float(hd));
    if (p.attention_splits) {
        ap.kv_splits = p.kv_splits;
        ap.partial = m_work.at<float>(m_lay.attn_partial);
        ap.counters = m_work.at<unsigned>(m_lay.attn_counters);
        // Splits past the general kernel's merge only where the decode kernel takes the step.
        if (ap.kv_splits > attention_general_max_kv_splits && !attention_decode_ok(ap))
            ap.kv_splits = attention_general_max_kv_splits;
    }
    op("attention", op_cost{m_step_kv_bytes}, [&] { return launch_attention(ap, m_stream); });
    // Residual add fused (accumulate); x was last written by the layer before's FFN (or the
    // embedding), at least two launches back.
    linear("o_proj", L.wo, s.attn, qd, s.x, H, T, true, true);
}

// The FFN norm and a dense MLP; one token fuses the norm into the gate/up GEMV (norm_in).
void cuda_backend_impl::record_dense_ffn(const step_plan &p, const step_ptrs &s, int64_t il) {
    const auto &c = m_cfg;
    const dlayer &L = m_w.layers[il];
    norm_in ffn_in;
    ffn_in.x = s.x;
    ffn_in.weight = L.ffn_norm;
    ffn_in.eps = float(c.rms_eps);
    if (p.fuse && swiglu("ffn", L.gate_up, L.down, c.n_ff, s.xn, s.x, s.gu, s.act, p.T, &ffn_in)) return;
    rms_norm_params nrm;
    nrm.x = s.x;
    nrm.weight = L.ffn_norm;
    nrm.out = s.xn;
    nrm.n_rows = p.T;
    nrm.n_embd = c.n_embd;
    nrm.eps = float(c.rms_eps);
    op("rms_norm", [&] { return launch_rms_norm(nrm, m_stream); });
    swiglu("ffn", L.gate_up, L.down, c.n_ff, s.xn, s.x, s.gu, s.act, p.T);
}

// An MoE layer's front: the FFN norm, the router (ids and weights into the routing record's slot)
// and the shared experts. One token takes moe_front (norm + router + shared gate/up in one launch);
// shared_in_down then says whether the routed down projection takes the shared experts' down as
// one more slot, else it ran here.
bool cuda_backend_impl::record_moe_front(const step_plan &p, const step_ptrs &s, int64_t il, int64_t moe_slot,
                                         int32_t *ids, float *wts, float *margins, bool &shared_in_down) {
    const auto &c = m_cfg;
    const int64_t T = p.T, H = c.n_embd, K = p.K, F_sh = c.n_ff_exp * c.n_expert_shared;
    const dlayer &L = m_w.layers[il];
    moe_front_params fr;
    fr.norm.x = s.x;
    fr.norm.weight = L.ffn_norm;
    fr.norm.eps = float(c.rms_eps);
    fr.norm.out = s.xn; // for the routed experts' gate/up
    fr.router_w = L.router;
    fr.bias = L.bias;
    fr.ids = ids;
    fr.weights = wts;
    fr.n_expert = c.n_expert;
    fr.n_expert_used = K;
    fr.norm_min = float(c.moe_norm_min);
    fr.margins = margins;
    fr.logits = m_work.at<float>(m_lay.router_logits);
    fr.counter = m_work.at<unsigned>(m_lay.router_counters);
    fr.sh_w = L.sh_gate_up.w;
    fr.sh_wfmt = L.sh_gate_up.fmt;
    fr.sh_w_scale = L.sh_gate_up.scale;
    fr.sh_w_layout = L.sh_gate_up.layout;
    fr.sh_act = s.act;
    fr.n_ff_sh = F_sh;
    fr.n_tokens = T;
    fr.n_embd = H;
    const bool front = p.fuse && moe_front_supported(fr);
    shared_in_down = front && F_sh > 0 && p.shared_in_down && L.sh_down.fmt == L.exp_down.fmt &&
                     L.sh_down.layout == L.exp_down.layout;
    // Under an expert intervention the router's choices are made again from its logits, each
    // token under its sequence's rule (moe_reroute.cuh), before any kernel reads them.
    const auto reroute = [&] {
        if (!p.reroute) return;
        moe_reroute_params rr;
        rr.logits = fr.logits;
        rr.bias = L.bias;
        rr.rules = m_route.at<int32_t>(m_route_rules) + moe_slot * m_route_n_rules * moe_reroute_rule_words(c.n_expert);
        rr.token_rule = m_route.at<int32_t>();
        rr.ids = ids;
        rr.weights = wts;
        rr.margins = margins;
        rr.n_tokens = T;
        rr.n_expert = c.n_expert;
        rr.K = K;
        rr.n_rules = m_route_n_rules;
        rr.norm_min = float(c.moe_norm_min);
        op("moe_reroute", [&] { return launch_moe_reroute(rr, m_stream); });
    };
    if (front) {
        const double router = double(c.n_expert) * double(H) * 4.0, sh = double(L.sh_gate_up.bytes());
        op("moe_front", op_cost{router + sh, sh / std::max(router + sh, 1.0)},
           [&] { return launch_moe_front(fr, m_stream); });
        reroute();
        if (F_sh > 0 && !shared_in_down) {
            m_phase = step_phase::moe_shared;
            linear("shared down", L.sh_down, s.act, F_sh, s.x, H, T, true);
            m_phase = step_phase::moe_routed;
        }
        return true;
    }
    rms_norm_params nrm;
    nrm.x = s.x;
    nrm.weight = L.ffn_norm;
    nrm.out = s.xn;
    nrm.n_rows = T;
    nrm.n_embd = H;
    nrm.eps = float(c.rms_eps);
    op("rms_norm", [&] { return launch_rms_norm(nrm, m_stream); });
    moe_router_params mr;
    mr.x = s.xn;
    mr.w = L.router;
    mr.bias = L.bias;
    mr.ids = ids;
    mr.weights = wts;
    mr.n_tokens = T;
    mr.n_embd = H;
    mr.n_expert = c.n_expert;
    mr.n_expert_used = K;
    mr.norm_min = float(c.moe_norm_min);
    mr.margins = margins;
    mr.logits = fr.logits;
    mr.counters = fr.counter;
    mr.tiles_min_tokens = m_opt.router_tiles_min;
    op("moe_router", op_cost{double(c.n_expert) * double(H) * 4.0}, [&] { return launch_moe_router(mr, m_stream); });
    reroute();
    if (F_sh > 0) {
        m_phase = step_phase::moe_shared;
        swiglu("shared", L.sh_gate_up, L.sh_down, F_sh, s.xn, s.x, s.gu, s.act, T);
        m_phase = step_phase::moe_routed;
    }
    return false;
}

// Decode's routed experts: a gate/up GEMV and a down GEMV over each (token, choice) slot, then
// moe_combine adds the slots in choice order (with the shared experts' slot first, and the next
// norm where a cluster holds a token's row).
void cuda_backend_impl::record_moe_decode(const step_plan &p, const step_ptrs &s, int64_t il, layer_link &link) {
    const auto &c = m_cfg;
    const int64_t T = p.T, H = c.n_embd, K = p.K, F_sh = c.n_ff_exp * c.n_expert_shared;
    const dlayer &L = m_w.layers[il];
    const int64_t slot = link.moe_slot++;
    int32_t *ids = m_work.at<int32_t>(m_out.ids) + slot * T * K;
    float *wts = m_work.at<float>(m_out.wts) + slot * T * K;
    bool shared_in_down = false;
    const bool front =
        record_moe_front(p, s, il, slot, ids, wts, m_work.at<float>(m_out.margins) + slot * T, shared_in_down);
    bf16_t *act_e = m_work.at<bf16_t>(m_lay.act_e);
    // Slot counters: the down kernel starts on each slot as soon as its rows are in
    // (kernels/moe_down_gemv.cuh); never while launches are left out (the down kernel could wait
    // for rows nobody writes).
    unsigned *slot_rows = p.moe_slot_counters ? m_work.at<unsigned>(m_lay.slot_rows) : nullptr;
    moe_gate_up_gemv_params g;
    g.x = s.xn;
    g.ids = ids;
    g.w = L.exp_gate_up.w;
    g.wfmt = L.exp_gate_up.fmt;
    g.w_scale = L.exp_gate_up.scale;
    g.w_layout = L.exp_gate_up.layout;
    g.act = act_e;
    g.slot_rows_done = slot_rows;
    g.mma = m_opt.moe_mma;
    g.mma_shape = m_opt.moe_mma_shape;
    g.w_tile_major = m_opt.moe_tile_major;
    g.n_tokens = T;
    g.n_embd = H;
    g.n_expert_used = K;
    g.n_ff_exp = c.n_ff_exp;
    op("moe_gate_up_gemv", op_cost{routed_bytes(L.exp_gate_up, T)}, [&] { return launch_moe_gate_up_gemv(g, m_stream); });
    moe_down_gemv_params d;
    d.act = act_e;
    d.ids = ids;
    d.weights = wts;
    d.w = L.exp_down.w;
    d.wfmt = L.exp_down.fmt;
    d.w_scale = L.exp_down.scale;
    d.w_layout = L.exp_down.layout; // the shared slot's too (shared_in_down: the same layout)
    d.y = s.x;
    d.n_tokens = T;
    d.n_embd = H;
    d.n_expert_used = K;
    d.n_ff_exp = c.n_ff_exp;
    d.rows_per_warp = m_opt.moe_down_rows_per_warp; // per-slot mode only
    if (!m_opt.plan.moe_down_rows) { // one kernel gathering every choice of an output element
        op("moe_down_gemv", op_cost{routed_bytes(L.exp_down, T)}, [&] { return launch_moe_down_gemv(d, m_stream); });
        return;
    }
    // Per-slot rows, then the combine in choice order (faster than the gathering kernel).
    d.y_slots = m_work.at<float>(m_lay.y_e);
    if (shared_in_down) {
        d.sh_w = L.sh_down.w;
        d.sh_w_scale = L.sh_down.scale;
        d.sh_act = s.act;
        d.y_shared = d.y_slots + T * K * H; // the workspace's extra T rows
        d.n_ff_sh = F_sh;
        d.sh_ready = m_opt.skip_ops.empty(); // moe_front wrote sh_act two launches back
    }
    d.slot_rows_done = slot_rows;
    const double down_sh = shared_in_down ? double(L.sh_down.bytes()) : 0.0, down = routed_bytes(L.exp_down, T) + down_sh;
    op("moe_down_gemv", op_cost{down, down_sh / std::max(down, 1.0)}, [&] { return launch_moe_down_gemv(d, m_stream); });
    moe_combine_params cb;
    cb.y = d.y_slots;
    cb.y_shared = d.y_shared;
    cb.weights = wts;
    cb.x = s.x;
    cb.n_tokens = T;
    cb.n_embd = H;
    cb.n_expert_used = K;
    cb.x_ready = front && m_opt.skip_ops.empty(); // x: o_proj's, before moe_front, gate/up and down
    cb.reset = slot_rows;                          // read by the down kernel, which has finished
    cb.n_reset = T * K;
    // The next norm too, where a cluster holds a token's row: the next layer's attention norm, or
    // after the last layer (one token, one logits row) the head's, into the rows the head reads.
    const bool last = il + 1 == c.n_layer;
    if (last ? p.combine_norm_head : p.combine_norm) {
        cb.norm_weight = last ? m_w.arena.at<bf16_t>(m_w.output_norm_off) : m_w.layers[il + 1].attn_norm;
        cb.norm_eps = float(c.rms_eps);
        cb.norm_out = last ? m_work.at<bf16_t>(m_lay.xr) : s.xn;
        if (!moe_combine_norm_ok(cb)) cb.norm_weight = nullptr, cb.norm_out = nullptr;
    }
    link.xn_ready = cb.norm_out != nullptr && !last;
    link.head_normed = cb.norm_out != nullptr && last;
    op(cb.norm_out ? "moe_down_combine+norm" : "moe_down_combine", [&] { return launch_moe_combine(cb, m_stream); });
}

// Prefill's routed experts: moe_plan groups the slots by expert, then a grouped GEMM for the
// gate/up (SiLU·up in its epilogue) and one for the down, with FP8 activations where both can
// take them; moe_combine adds each token's choices.
void cuda_backend_impl::record_moe_grouped(const step_plan &p, const step_ptrs &s, int64_t il, layer_link &link) {
    const auto &c = m_cfg;
    const int64_t T = p.T, H = c.n_embd, K = p.K;
    const dlayer &L = m_w.layers[il];
    const int64_t slot = link.moe_slot++;
    int32_t *ids = m_work.at<int32_t>(m_out.ids) + slot * T * K;
    float *wts = m_work.at<float>(m_out.wts) + slot * T * K;
    bool shared_in_down = false;
    record_moe_front(p, s, il, slot, ids, wts, m_work.at<float>(m_out.margins) + slot * T, shared_in_down);
    bf16_t *act_e = m_work.at<bf16_t>(m_lay.act_e);
    float *y_e = m_work.at<float>(m_lay.y_e);
    // Both GEMMs read one plan, so its row tile is the one kernel both can take.
    moe_grouped_gemm_params gu, dn;
    gu.a = s.xn;
    gu.lda = H;
    gu.a_row_div = K;
    gu.n_expert = c.n_expert;
    gu.w = L.exp_gate_up.w;
    gu.wfmt = L.exp_gate_up.fmt;
    gu.w_scale = L.exp_gate_up.scale;
    gu.w_layout = L.exp_gate_up.layout;
    gu.k = H;
    gu.n = c.n_ff_exp;
    gu.glu = true;
    gu.w_tile_major = m_opt.moe_tile_major;
    gu.allow_wgmma = m_opt.moe_wgmma && T * K >= m_opt.moe_wgmma_min * c.n_expert;
    gu.out_act = act_e;
    gu.ldo = c.n_ff_exp;
    dn = gu;
    dn.w_tile_major = false; // the down stacks stay row-major
    dn.a = act_e;
    dn.lda = c.n_ff_exp;
    dn.a_row_div = 1;
    dn.w = L.exp_down.w;
    dn.wfmt = L.exp_down.fmt;
    dn.w_scale = L.exp_down.scale;
    dn.w_layout = L.exp_down.layout;
    dn.k = c.n_ff_exp;
    dn.n = H;
    dn.glu = false;
    dn.out_act = nullptr;
    dn.out_f32 = y_e;
    dn.ldo = H;
    // FP8 activations (act_quantize's, per token for the gate/up and per slot for the down) where
    // both GEMMs can take them (compute capability 8.9 and later, on either kernel), as the dense
    // linears of prefill take theirs; else BF16.
    act_quantize_params qx, qe;
    if (m_act != activation_format::bf16 && m_lay.ex_q && m_opt.moe_fp8_act) {
        qx.x = s.xn;
        qx.ldx = H;
        qx.q = m_work.at<fp8_t>(m_lay.ex_q);
        qx.scale = m_work.at<float>(m_lay.ex_scale);
        qx.m = T;
        qx.k = H;
        qx.fmt = m_act == activation_format::e5m2 ? fp8_format::e5m2 : fp8_format::e4m3;
        qe = qx; // the same buffers: the gate/up has read its codes when the down's are written
        qe.x = act_e;
        qe.ldx = c.n_ff_exp;
        qe.m = T * K;
        qe.k = c.n_ff_exp;
        gu.a_q = qx.q;
        gu.a_scale = qx.scale;
        gu.a_fmt = qx.fmt;
        dn.a_q = qe.q;
        dn.a_scale = qe.scale;
        dn.a_fmt = qe.fmt;
    }
    auto fp8_act_both = [&] { return moe_grouped_gemm_fp8_act_ok(gu) && moe_grouped_gemm_fp8_act_ok(dn); };
    if (gu.a_q && !fp8_act_both()) gu.a_q = dn.a_q = nullptr;
    if (moe_grouped_gemm_plan_rows(gu) != moe_grouped_gemm_plan_rows(dn)) {
        gu.allow_wgmma = dn.allow_wgmma = false;
        if (gu.a_q && !fp8_act_both()) gu.a_q = dn.a_q = nullptr;
    }
    moe_plan_params pl;
    pl.ids = ids;
    pl.n_slots = T * K;
    pl.n_expert = c.n_expert;
    pl.tile_rows = moe_grouped_gemm_plan_rows(gu);
    pl.counts = m_work.at<int32_t>(m_lay.counts);
    pl.offsets = m_work.at<int32_t>(m_lay.offsets);
    pl.tile_offsets = m_work.at<int32_t>(m_lay.tile_offsets);
    pl.sorted_slots = m_work.at<int32_t>(m_lay.sorted);
    op("moe_plan", [&] { return launch_moe_plan(pl, m_stream); });
    for (moe_grouped_gemm_params *g : {&gu, &dn}) {
        g->sorted_slots = pl.sorted_slots;
        g->offsets = pl.offsets;
        g->tile_offsets = pl.tile_offsets;
        g->tile_rows = pl.tile_rows;
        g->max_tiles = moe_plan_max_tiles(T * K, c.n_expert, pl.tile_rows);
    }
    if (gu.a_q) op("moe act_quantize (gate/up)", [&] { return launch_act_quantize(qx, m_stream); });
    op("moe_grouped_gemm (gate/up)", op_cost{routed_bytes(L.exp_gate_up, T)},
       [&] { return launch_moe_grouped_gemm(gu, m_stream); });
    if (dn.a_q) op("moe act_quantize (down)", [&] { return launch_act_quantize(qe, m_stream); });
    op("moe_grouped_gemm (down)", op_cost{routed_bytes(L.exp_down, T)},
       [&] { return launch_moe_grouped_gemm(dn, m_stream); });
    moe_combine_params cb;
    cb.y = y_e;
    cb.weights = wts;
    cb.x = s.x;
    cb.n_tokens = T;
    cb.n_embd = H;
    cb.n_expert_used = K;
    op("moe_combine", [&] { return launch_moe_combine(cb, m_stream); });
}

// The final norm of the requested rows, then the logits; a greedy one-row step takes its token
// from the head's GEMV (gemv_pick), else topk_logits reduces the rows to candidates when asked.
void cuda_backend_impl::record_head(const step_plan &p, const step_ptrs &s, const layer_link &link) {
    const auto &c = m_cfg;
    const int64_t R = p.R, H = c.n_embd;
    bf16_t *xr = m_work.at<bf16_t>(m_lay.xr);
    if (!link.head_normed) {
        rms_norm_params nrm;
        nrm.x = s.x;
        nrm.rows = s.rows;
        nrm.weight = m_w.arena.at<bf16_t>(m_w.output_norm_off);
        nrm.out = xr;
        nrm.n_rows = R;
        nrm.n_embd = H;
        nrm.eps = float(c.rms_eps);
        op("rms_norm (head)", [&] { return launch_rms_norm(nrm, m_stream); });
    }
    float *logits = m_work.at<float>(m_lay.logits);
    unsigned char *cand = m_work.at(m_out.cand);
    // The pick writes the same outputs topk_logits writes at n_top = 1, without its launch.
    gemv_params hp = gemv_for(m_w.head, xr, H, logits, c.n_vocab, R, false);
    if (p.pick) {
        hp.pick.id = reinterpret_cast<int32_t *>(cand);
        hp.pick.value = reinterpret_cast<float *>(cand + 4);
        hp.pick.row_max = reinterpret_cast<float *>(cand + 8);
        hp.pick.row_sum = reinterpret_cast<double *>(cand + cand_sums_offset(1, 1));
        hp.pick.warp_keys = m_work.at<unsigned long long>(m_lay.pick_keys);
        hp.pick.warp_keys_cap = pick_keys_cap();
    }
    if (hp.pick.on() && gemv_pick_ok(hp)) {
        op("head gemv+pick", op_cost{double(m_w.head.bytes())}, [&] { return launch_gemv(hp, m_stream); });
        op("pick finish", [&] { return launch_gemv_pick_finish(hp, m_stream); });
        return;
    }
    linear("head", m_w.head, xr, H, logits, c.n_vocab, R, false);
    if (p.top_n == 0 || R == 0) return;
    if (p.sample) {
        // Each row's draw into the candidates' first slot (the fed tokens' source), its logit and
        // the row max beside it; the penalties stay in the logits logits_row() reads.
        sample_rows_params sp;
        sp.logits = logits;
        sp.rows = reinterpret_cast<const row_sampling *>(m_inputs.at(p.in.samp));
        sp.tokens = m_inputs.at<int32_t>(p.in.tokens);
        sp.ids = reinterpret_cast<int32_t *>(cand);
        sp.values = reinterpret_cast<float *>(cand + size_t(R) * 4);
        sp.row_max = reinterpret_cast<float *>(cand + size_t(R) * 8);
        sp.scratch = m_work.at<float>(m_lay.samp_weights);
        sp.n_rows = R;
        sp.n_vocab = c.n_vocab;
        op("sample_rows", [&] { return launch_sample_rows(sp, m_stream); });
        return;
    }
    // Candidates instead of full rows: the logits stay in the workspace for logits_row().
    const int64_t n = p.top_n;
    topk_logits_params tk;
    tk.logits = logits;
    tk.temperatures = m_inputs.at<float>(p.in.temps);
    tk.ids = reinterpret_cast<int32_t *>(cand);
    tk.values = reinterpret_cast<float *>(cand + size_t(R * n) * 4);
    tk.row_max = reinterpret_cast<float *>(cand + size_t(R * n) * 8);
    tk.row_sum = reinterpret_cast<double *>(cand + cand_sums_offset(R, n));
    tk.n_rows = R;
    tk.n_vocab = c.n_vocab;
    tk.n_top = int32_t(n);
    tk.scratch = m_work.at(m_lay.topk_scratch);
    tk.counters = m_work.at<unsigned>(m_lay.topk_counters);
    op("topk_logits", [&] { return launch_topk_logits(tk, m_stream); });
}


bool cuda_backend_impl::swiglu(const char *role, const dlin &gate_up, const dlin &down, int64_t F, const bf16_t *x, float *y, float *gu,
            bf16_t *act, int64_t T, const norm_in *in) {
    const int64_t H = m_cfg.n_embd;
    if (T <= 2) {
        // Decode: gate/up GEMV with SiLU·up in its epilogue (the MoE kernel with one "expert"),
        // one launch fewer per MLP; with the norm fused, two fewer.
        moe_gate_up_gemv_params g;
        g.x = x;
        g.ids = nullptr; // expert 0: a dense MLP
        g.w = gate_up.w;
        g.wfmt = gate_up.fmt;
        g.w_scale = gate_up.scale;
        g.w_layout = gate_up.layout;
        g.act = act;
        g.n_tokens = T;
        g.n_embd = H;
        g.n_expert_used = 1;
        g.n_ff_exp = F;
        if (in) {
            g.x = nullptr;
            g.norm = *in;
            if (!moe_gate_up_gemv_norm_ok(g)) return false;
        }
        op(std::string(role) + (in ? " norm+gate_up+silu gemv" : " gate_up+silu gemv"), op_cost{double(gate_up.bytes())},
           [&] { return launch_moe_gate_up_gemv(g, m_stream); });
        // y (the residual) was last written by o_proj, at least two launches back.
        linear((std::string(role) + " down").c_str(), down, act, F, y, H, T, true, true);
        return true;
    }
    if (in) return false;
    linear((std::string(role) + " gate_up").c_str(), gate_up, x, H, gu, 2 * F, T, false);
    silu_mul_params s;
    s.gate_up = gu;
    s.out = act;
    s.n_tokens = T;
    s.n_ff = F;
    op("silu_mul", [&] { return launch_silu_mul(s, m_stream); });
    linear((std::string(role) + " down").c_str(), down, act, F, y, H, T, true);
    return true;
}

} // namespace es
