// act_quantize (see act_quantize.cuh): one block of 256 threads per row (token). A block
// max-reduction of |x|, one thread turns it into the row's scale (IEEE division), then every
// thread converts its share of the row with an IEEE division and the hardware's saturating FP8
// conversion, so codes and scales equal the CPU twin's. Rows whose start and length allow it
// (x 16-byte aligned, ldx and k multiples of 8, q 16-byte aligned) move 8 BF16 values in and
// 8 codes out per load/store; the second pass re-reads the row from L1/L2.
#include "kernels/act_quantize.cuh"
#include "kernels/kernel_common.cuh"

namespace es {

namespace {

constexpr int k_threads = 256;

__device__ __forceinline__ float abs_max8(float m, const uint4 v) {
    m = fmaxf(m, fmaxf(fabsf(bf16_lo(v.x)), fabsf(bf16_hi(v.x))));
    m = fmaxf(m, fmaxf(fabsf(bf16_lo(v.y)), fabsf(bf16_hi(v.y))));
    m = fmaxf(m, fmaxf(fabsf(bf16_lo(v.z)), fabsf(bf16_hi(v.z))));
    return fmaxf(m, fmaxf(fabsf(bf16_lo(v.w)), fabsf(bf16_hi(v.w))));
}

template <fp8_format F>
__device__ __forceinline__ uint32_t quant4(uint32_t a, uint32_t b, float s) {
    const uint32_t lo = f2_to_fp8x2_as<F>(__fdiv_rn(bf16_lo(a), s), __fdiv_rn(bf16_hi(a), s));
    const uint32_t hi = f2_to_fp8x2_as<F>(__fdiv_rn(bf16_lo(b), s), __fdiv_rn(bf16_hi(b), s));
    return (lo & 0xffffu) | (hi << 16);
}

} // namespace

template <fp8_format F, bool VEC>
__global__ void __launch_bounds__(k_threads) act_quantize_kernel(act_quantize_params p) {
    pdl_enter();
    __shared__ float partial[k_threads / 32];
    __shared__ float row_scale;
    const int64_t r = blockIdx.x;
    const uint16_t *x = p.x + r * p.ldx;
    uint8_t *q = p.q + r * p.k;
    float amax = 0.0f;
    if constexpr (VEC) {
        const uint4 *xv = reinterpret_cast<const uint4 *>(x);
        for (int64_t c = threadIdx.x; c < p.k / 8; c += k_threads) amax = abs_max8(amax, xv[c]);
    } else {
        for (int64_t i = threadIdx.x; i < p.k; i += k_threads) amax = fmaxf(amax, fabsf(bf16_to_f(x[i])));
    }
    amax = warp_max(amax);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        float v = lane < k_threads / 32 ? partial[lane] : 0.0f;
        v = warp_max(v);
        if (lane == 0) {
            const float s = __fdiv_rn(v, fp8_format_max(F));
            row_scale = s > 0.0f ? s : 1.0f;
            p.scale[r] = row_scale;
        }
    }
    __syncthreads();
    const float s = row_scale;
    if constexpr (VEC) {
        const uint4 *xv = reinterpret_cast<const uint4 *>(x);
        uint2 *qv = reinterpret_cast<uint2 *>(q);
        for (int64_t c = threadIdx.x; c < p.k / 8; c += k_threads) {
            const uint4 v = xv[c];
            qv[c] = make_uint2(quant4<F>(v.x, v.y, s), quant4<F>(v.z, v.w, s));
        }
    } else {
        for (int64_t i = threadIdx.x; i < p.k; i += k_threads)
            q[i] = f_to_fp8_as<F>(__fdiv_rn(bf16_to_f(x[i]), s));
    }
}

cudaError_t launch_act_quantize(const act_quantize_params &p, cudaStream_t stream) {
    if (p.m <= 0) return cudaSuccess;
    if (p.k <= 0 || p.ldx < p.k || !p.x || !p.q || !p.scale) return cudaErrorInvalidValue;
    const bool vec = p.k % 8 == 0 && p.ldx % 8 == 0 && aligned16(p.x) && aligned16(p.q);
    const unsigned grid = unsigned(p.m);
    if (p.fmt == fp8_format::e4m3)
        return vec ? launch_kernel(act_quantize_kernel<fp8_format::e4m3, true>, grid, k_threads, 0, stream, p)
                   : launch_kernel(act_quantize_kernel<fp8_format::e4m3, false>, grid, k_threads, 0, stream,
                                   p);
    return vec ? launch_kernel(act_quantize_kernel<fp8_format::e5m2, true>, grid, k_threads, 0, stream, p)
               : launch_kernel(act_quantize_kernel<fp8_format::e5m2, false>, grid, k_threads, 0, stream, p);
}

} // namespace es
