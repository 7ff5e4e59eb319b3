// CPU twin of gemv (see gemv.cuh): fp32 accumulation in k order.
#include "kernels/gemv.cuh"
#include "kernels/embedding.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/topk_logits.cuh"

#include <algorithm>
#include <vector>

namespace es {

bool gemv_fusion_ok(const gemv_params &p) {
    if (!p.norm.on() && !p.rope_on) return true;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    const int64_t mt = p.n_tokens >= 5 ? 8 : p.n_tokens >= 3 ? 4 : p.n_tokens;
    auto al16 = [](const void *q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
    if (p.k % (fp8 ? 16 : 8) != 0 || !al16(p.w)) return false;
    const bool embd = p.embd_table != nullptr;
    if (p.norm.on() &&
        (!p.norm.weight || !al16(p.norm.x) || (reinterpret_cast<uintptr_t>(p.norm.weight) & 7u) ||
         p.k % 4 != 0 || gemv_norm_smem_bytes(mt, p.k) > gemv_norm_smem_max))
        return false;
    if (embd && (!p.norm.on() || p.n_tokens != 1 || !p.embd_tokens || !p.embd_out || !al16(p.embd_out) ||
                 p.norm.x != p.embd_out || (reinterpret_cast<uintptr_t>(p.embd_table) & 7u)))
        return false;
    if (!embd && (p.embd_tokens || p.embd_out)) return false;
    if (!p.norm.on() && (p.ldx % 8 != 0 || !al16(p.x))) return false;
    if (p.rope_on) {
        const rope_kv_params &r = p.rope;
        if (p.k_splits > 1 || r.head_dim <= 0 || r.head_dim % 2 != 0 ||
            p.n != (r.n_head + 2 * r.n_head_kv) * r.head_dim || !r.q_out || !r.k_cache || !r.v_cache)
            return false;
    }
    return true;
}

bool gemv_pick_ok(const gemv_params &p) {
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    auto al16 = [](const void *q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
    return p.pick.on() && p.pick.value && p.pick.row_max && p.pick.row_sum && p.pick.warp_keys && p.pick.warp_keys_cap &&
           p.n_tokens == 1 && !p.norm.on() && !p.rope_on && !p.embd_table && p.k_splits <= 1 && !p.accumulate &&
           p.n >= gemv_pick_min_rows && p.k % (fp8 ? 16 : 8) == 0 && p.ldx % 8 == 0 && al16(p.w) && al16(p.x);
}

namespace {
// The pick as topk_logits_ref computes one candidate at T = 0.
void gemv_pick_ref(const gemv_params &p) {
    topk_logits_params t;
    t.logits = p.y;
    t.ids = p.pick.id;
    t.values = p.pick.value;
    t.row_max = p.pick.row_max;
    t.row_sum = p.pick.row_sum;
    t.n_rows = 1;
    t.n_vocab = p.n;
    t.n_top = 1;
    topk_logits_ref(t);
}
} // namespace

void gemv_ref(const gemv_params &p) {
    if (p.pick.on()) {
        gemv_params q = p;
        q.pick = {};
        gemv_ref(q);
        gemv_pick_ref(p);
        return;
    }
    if (p.norm.on() || p.rope_on) {
        // The fusions as the separate kernels they replace: rms_norm, the plain GEMV, rope_kv.
        std::vector<bf16_t> xn;
        gemv_params q = p;
        q.norm = {};
        q.rope_on = false;
        q.embd_tokens = nullptr;
        q.embd_table = nullptr;
        q.embd_out = nullptr;
        if (p.embd_table) { // the embedding first, into the residual stream (embedding_ref's widening)
            embedding_params e;
            e.tokens = p.embd_tokens;
            e.table = p.embd_table;
            e.out = p.embd_out;
            e.n_tokens = p.n_tokens;
            e.n_embd = p.k;
            embedding_ref(e);
        }
        if (p.norm.on()) {
            xn.resize(size_t(p.n_tokens * p.k));
            std::vector<float> xs(p.norm.x, p.norm.x + p.n_tokens * p.k);
            rms_norm_params r;
            r.x = xs.data();
            r.weight = p.norm.weight;
            r.out = xn.data();
            r.n_rows = p.n_tokens;
            r.n_embd = p.k;
            r.eps = p.norm.eps;
            rms_norm_ref(r);
            if (p.norm.out) std::copy(xn.begin(), xn.end(), p.norm.out);
            q.x = xn.data();
            q.ldx = p.k;
        }
        std::vector<float> y;
        if (p.rope_on) {
            y.assign(size_t(p.n_tokens * p.n), 0.0f);
            q.y = y.data();
            q.ldy = p.n;
            q.accumulate = false;
        }
        gemv_ref(q);
        if (p.rope_on) {
            rope_kv_params r = p.rope;
            r.qkv = y.data();
            r.n_tokens = p.n_tokens;
            rope_kv_ref(r);
        }
        return;
    }
    if (p.wfmt == weight_format::fp8_e4m3 && p.w_layout == scale_layout::block128) {
        // Each 128-column block's partial product times its block's scale.
        const int64_t nkb = (p.k + fp8_block - 1) / fp8_block;
        for (int64_t m = 0; m < p.n_tokens; ++m)
            for (int64_t n = 0; n < p.n; ++n) {
                float acc = 0.0f;
                for (int64_t cb = 0; cb < nkb; ++cb) {
                    float part = 0.0f;
                    for (int64_t k = cb * fp8_block; k < std::min(p.k, (cb + 1) * fp8_block); ++k)
                        part += weight_at(p.w, p.wfmt, n * p.k + k) * bf16_bits_to_float(p.x[m * p.ldx + k]);
                    acc += part * p.w_scale[(n / fp8_block) * nkb + cb];
                }
                float &dst = p.y[m * p.ldy + n];
                dst = p.accumulate ? dst + acc : acc;
            }
        return;
    }
    for (int64_t m = 0; m < p.n_tokens; ++m)
        for (int64_t n = 0; n < p.n; ++n) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p.k; ++k)
                acc += weight_at(p.w, p.wfmt, n * p.k + k) * bf16_bits_to_float(p.x[m * p.ldx + k]);
            if (p.wfmt == weight_format::fp8_e4m3) acc *= p.w_scale[n];
            float &dst = p.y[m * p.ldy + n];
            dst = p.accumulate ? dst + acc : acc;
        }
}

} // namespace es
