// moe_down_gemv (see moe_down_gemv.cuh): grid (n_embd / 4, n_tokens); one warp per (t, n) reads
// row n of each chosen expert's down matrix (up to 8 choices with their 16-byte loads issued
// together), dots it with that slot's activations, then weights and sums in choice order (fp32);
// lane 0 adds the total into y.
#include "moe_down_gemv.cuh"
#include "kernel_common.cuh"

namespace es {
namespace {

constexpr int k_max_used = 8; // choices handled with interleaved loads; more fall back to a loop

template <bool FP8, bool VEC>
__global__ void __launch_bounds__(128) moe_down_gemv_kernel(moe_down_gemv_params p) {
    pdl_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n = int64_t(blockIdx.x) * 4 + warp, t = blockIdx.y;
    if (n >= p.n_embd) return;
    const int64_t K = p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const int64_t row_bytes = F * (FP8 ? 1 : 2);
    float total = 0.0f;
    if (K <= k_max_used) {
        // All choices at once: their weight rows' loads are independent, so they overlap.
        const unsigned char *rows[k_max_used];
        const uint16_t *acts[k_max_used];
        float acc[k_max_used], scale[k_max_used], weight[k_max_used];
#pragma unroll
        for (int j = 0; j < k_max_used; ++j) {
            const int64_t jj = j < K ? j : 0;
            const int64_t e = p.ids[t * K + jj];
            rows[j] = w + (e * H + n) * row_bytes;
            acts[j] = p.act + (t * K + jj) * F;
            acc[j] = 0.0f;
            // Loaded now, in flight with the weight rows, rather than after the reduction.
            scale[j] = FP8 ? p.w_scale[e * H + n] : 1.0f;
            weight[j] = p.weights[t * K + jj];
        }
        if constexpr (VEC) {
            constexpr int E = vec_elems<FP8>;
#pragma unroll 2
            for (int64_t kk = int64_t(lane) * E; kk < F; kk += 32 * E) {
                uint4 wq[k_max_used];
#pragma unroll
                for (int j = 0; j < k_max_used; ++j)
                    if (j < K) wq[j] = __ldcs(reinterpret_cast<const uint4 *>(rows[j]) + kk / E);
#pragma unroll
                for (int j = 0; j < k_max_used; ++j)
                    if (j < K) acc[j] += dot_vec<FP8>(wq[j], acts[j] + kk);
            }
        } else {
            for (int64_t kk = lane; kk < F; kk += 32)
#pragma unroll
                for (int j = 0; j < k_max_used; ++j)
                    if (j < K) acc[j] += wval<FP8>(rows[j], kk) * bf16_to_f(acts[j][kk]);
        }
#pragma unroll
        for (int j = 0; j < k_max_used; ++j)
            if (j < K) total += weight[j] * (warp_sum(acc[j]) * scale[j]);
    } else {
        for (int64_t j = 0; j < K; ++j) {
            const int64_t e = p.ids[t * K + j], row = e * H + n;
            float v = warp_sum(lane_dot<FP8, VEC>(w + row * row_bytes, p.act + (t * K + j) * F, 0, F, lane));
            if (FP8) v *= p.w_scale[row];
            total += p.weights[t * K + j] * v;
        }
    }
    if (lane == 0) p.y[t * H + n] += total;
}

} // namespace

cudaError_t launch_moe_down_gemv(const moe_down_gemv_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0 || p.n_embd <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if (fp8 && !p.w_scale) return cudaErrorInvalidValue;
    const bool vec = p.n_ff_exp % (fp8 ? 16 : 8) == 0 && aligned16(p.w) && aligned16(p.act);
    const dim3 grid(ceil_div_u(p.n_embd, 4), unsigned(p.n_tokens));
    if (fp8) {
        if (vec) return launch_kernel(moe_down_gemv_kernel<true, true>, grid, 128, 0, stream, p);
        return launch_kernel(moe_down_gemv_kernel<true, false>, grid, 128, 0, stream, p);
    }
    if (vec) return launch_kernel(moe_down_gemv_kernel<false, true>, grid, 128, 0, stream, p);
    return launch_kernel(moe_down_gemv_kernel<false, false>, grid, 128, 0, stream, p);
}

} // namespace es
