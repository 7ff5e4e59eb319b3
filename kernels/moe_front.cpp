// CPU twin of moe_front (see moe_front.cuh): rms_norm_ref, then moe_router_ref and
// moe_gate_up_gemv_ref (one "expert") on the normalized rows.
#include "kernels/moe_front.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"

namespace es {

namespace {
bool aligned(const void *q, uintptr_t a) { return (reinterpret_cast<uintptr_t>(q) & (a - 1)) == 0; }
} // namespace

bool moe_front_supported(const moe_front_params &p) {
    return p.n_tokens >= 1 && p.n_tokens <= moe_front_max_tokens && p.n_expert >= 1 && p.n_expert <= 4096 &&
           p.n_expert_used >= 1 && p.n_expert_used <= p.n_expert && p.n_embd > 0 && p.n_embd % 4 == 0 &&
           p.n_ff_sh >= 0 && moe_front_smem_bytes(p) <= 48 * 1024 && p.norm.x && p.norm.weight &&
           p.norm.out && aligned(p.norm.x, 16) && aligned(p.norm.out, 16) && aligned(p.norm.weight, 8);
}

void moe_front_ref(const moe_front_params &p) {
    const std::vector<bf16_t> xn = norm_in_ref(p.norm, p.n_tokens, p.n_embd);
    moe_router_params r;
    r.x = xn.data();
    r.w = p.router_w;
    r.bias = p.bias;
    r.ids = p.ids;
    r.weights = p.weights;
    r.n_tokens = p.n_tokens;
    r.n_embd = p.n_embd;
    r.n_expert = p.n_expert;
    r.n_expert_used = p.n_expert_used;
    r.norm_min = p.norm_min;
    r.margins = p.margins;
    moe_router_ref(r);
    if (p.n_ff_sh <= 0) return;
    moe_gate_up_gemv_params g;
    g.x = xn.data();
    g.w = p.sh_w;
    g.wfmt = p.sh_wfmt;
    g.w_scale = p.sh_w_scale;
    g.w_layout = p.sh_w_layout;
    g.act = p.sh_act;
    g.n_tokens = p.n_tokens;
    g.n_embd = p.n_embd;
    g.n_expert_used = 1;
    g.n_ff_exp = p.n_ff_sh;
    moe_gate_up_gemv_ref(g);
}

} // namespace es
