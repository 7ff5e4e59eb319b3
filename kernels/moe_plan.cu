// moe_plan (see moe_plan.cuh): a single block of 1024 threads: shared-memory histogram of the
// slots' experts (atomics), an exclusive scan over experts by thread 0 (n_expert ≤ 4096, cheap
// next to the GEMMs it plans), then each slot claims a position in its expert's range with an
// atomic cursor.
#include "kernels/kernel_common.cuh"
#include "kernels/moe_plan.cuh"

namespace es {

__global__ void __launch_bounds__(1024) moe_plan_kernel(moe_plan_params p) {
    pdl_enter();
    extern __shared__ int sh[];
    int *cnt = sh;                 // [n_expert]
    int *cursor = sh + p.n_expert; // [n_expert]
    const int E = int(p.n_expert);
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int64_t s = threadIdx.x; s < p.n_slots; s += blockDim.x) atomicAdd(&cnt[p.ids[s]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0, tiles = 0;
        const int tr = int(p.tile_rows);
        for (int e = 0; e < E; ++e) {
            p.counts[e] = cnt[e];
            p.offsets[e] = off;
            p.tile_offsets[e] = tiles;
            cursor[e] = off;
            off += cnt[e];
            tiles += (cnt[e] + tr - 1) / tr;
        }
        p.offsets[E] = off;
        p.tile_offsets[E] = tiles;
    }
    __syncthreads();
    for (int64_t s = threadIdx.x; s < p.n_slots; s += blockDim.x) {
        const int at = atomicAdd(&cursor[p.ids[s]], 1);
        p.sorted_slots[at] = int32_t(s);
    }
}

cudaError_t launch_moe_plan(const moe_plan_params &p, cudaStream_t stream) {
    if (p.n_expert <= 0 || p.n_expert > moe_plan_max_experts || p.tile_rows <= 0)
        return cudaErrorInvalidValue;
    const size_t smem = size_t(2 * p.n_expert) * sizeof(int);
    return launch_kernel(moe_plan_kernel, 1, 1024, smem, stream, p);
}

} // namespace es
