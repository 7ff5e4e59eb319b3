// fp8_dequantize (see fp8_dequantize.cuh): a flat grid-stride loop over elements, one product
// (exact E4M3 value × fp32 scale, explicitly rounded) and one BF16 rounding each.
#include "kernels/fp8_dequantize.cuh"
#include "kernels/kernel_common.cuh"

#include <algorithm>

namespace es {

__global__ void fp8_dequantize_kernel(fp8_dequantize_params p) {
    pdl_enter();
    const int64_t n = p.n * p.k;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x)
        p.out[i] = f_to_bf16(__fmul_rn(fp8_to_f(p.q[i]), p.scale[fp8_scale_index(i / p.k, i % p.k, p.k, p.layout)]));
}

cudaError_t launch_fp8_dequantize(const fp8_dequantize_params &p, cudaStream_t stream) {
    const int64_t n = p.n * p.k;
    if (n <= 0) return cudaSuccess;
    const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 32));
    return launch_kernel(fp8_dequantize_kernel, blocks, 256, 0, stream, p);
}

} // namespace es
