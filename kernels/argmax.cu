// argmax (see argmax.cuh): one block of 1024 threads per row; each thread scans a strided slice
// keeping (value, index), then warp shuffles and one warp over the warp winners reduce with the
// rule "greater value, or equal value and lower index".
#include "kernels/argmax.cuh"
#include "kernels/kernel_common.cuh"

namespace es {

__device__ __forceinline__ void argmax_merge(float &v, int &i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i) || (i < 0 && i2 >= 0)) {
        v = v2;
        i = i2;
    }
}

__global__ void argmax_kernel(argmax_params p) {
    pdl_enter();
    __shared__ float wv[32];
    __shared__ int wi[32];
    const float *x = p.x + int64_t(blockIdx.x) * p.n;
    float best = -INFINITY;
    int idx = -1;
    for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        const float v = x[j];
        if (!isnan(v) && (idx < 0 || v > best)) {
            best = v;
            idx = int(j);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (i2 >= 0) argmax_merge(best, idx, v2, i2);
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        wv[warp] = best;
        wi[warp] = idx;
    }
    __syncthreads();
    if (warp == 0) {
        best = lane < int(blockDim.x / 32) ? wv[lane] : -INFINITY;
        idx = lane < int(blockDim.x / 32) ? wi[lane] : -1;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v2 = __shfl_xor_sync(0xffffffffu, best, o);
            const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
            if (i2 >= 0) argmax_merge(best, idx, v2, i2);
        }
        if (lane == 0) p.out[blockIdx.x] = idx < 0 ? 0 : idx;
    }
}

cudaError_t launch_argmax(const argmax_params &p, cudaStream_t stream) {
    if (p.n_rows <= 0) return cudaSuccess;
    return launch_kernel(argmax_kernel, unsigned(p.n_rows), 1024, 0, stream, p);
}

} // namespace es
