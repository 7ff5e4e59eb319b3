// moe_gate_up_gemv (see moe_gate_up_gemv.cuh): grid (n_ff_exp / 4, slots); one warp per
// (slot, f) streams the expert's gate row f and up row f once (lane_dot2: 16-byte loads of both
// rows interleaved, four in flight) against the token's activations (L1-resident), reduces by shuffles, and
// lane 0 writes silu(g)·u. Only the n_tokens·n_expert_used selected (token, expert) rows are read.
#include "kernel_common.cuh"
#include "moe_gate_up_gemv.cuh"

namespace es {
namespace {

template <bool FP8, bool VEC>
__global__ void __launch_bounds__(128) moe_gate_up_gemv_kernel(moe_gate_up_gemv_params p) {
    pdl_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t f = int64_t(blockIdx.x) * 4 + warp, s = blockIdx.y;
    if (f >= p.n_ff_exp) return;
    const int64_t t = s / p.n_expert_used, e = p.ids[s], F = p.n_ff_exp, H = p.n_embd;
    const int64_t g_row = e * 2 * F + f, u_row = g_row + F;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const int64_t row_bytes = H * (FP8 ? 1 : 2);
    const uint16_t *x = p.x + t * H;
    // The scales' loads are in flight with the rows'.
    const float g_scale = FP8 ? __ldg(p.w_scale + g_row) : 1.0f,
                u_scale = FP8 ? __ldg(p.w_scale + u_row) : 1.0f;
    const float2 gu = lane_dot2<FP8, VEC>(w + g_row * row_bytes, w + u_row * row_bytes, x, 0, H, lane);
    float g = warp_sum(gu.x), u = warp_sum(gu.y);
    if (lane == 0) {
        if (FP8) {
            g *= g_scale;
            u *= u_scale;
        }
        p.act[s * F + f] = f_to_bf16(silu_f(g) * u);
    }
}

} // namespace

cudaError_t launch_moe_gate_up_gemv(const moe_gate_up_gemv_params &p, cudaStream_t stream) {
    const int64_t slots = p.n_tokens * p.n_expert_used;
    if (slots <= 0 || p.n_ff_exp <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if (fp8 && !p.w_scale) return cudaErrorInvalidValue;
    const bool vec = p.n_embd % (fp8 ? 16 : 8) == 0 && aligned16(p.w) && aligned16(p.x);
    const dim3 grid(ceil_div_u(p.n_ff_exp, 4), unsigned(slots));
    if (fp8) {
        if (vec) return launch_kernel(moe_gate_up_gemv_kernel<true, true>, grid, 128, 0, stream, p);
        return launch_kernel(moe_gate_up_gemv_kernel<true, false>, grid, 128, 0, stream, p);
    }
    if (vec) return launch_kernel(moe_gate_up_gemv_kernel<false, true>, grid, 128, 0, stream, p);
    return launch_kernel(moe_gate_up_gemv_kernel<false, false>, grid, 128, 0, stream, p);
}

} // namespace es
