// moe_plan: groups the (token, choice) slots of a prefill-sized batch by expert so the grouped
// expert GEMM reads each selected expert's weights once per tile of rows, entirely on the GPU
// (no copy back to the host, so it can sit inside a CUDA graph).
//   counts[e]        number of slots routed to expert e
//   offsets[e]       first position of expert e in sorted_slots (offsets[n_expert] = n_slots)
//   tile_offsets[e]  first row tile (tile_rows rows) of expert e (tile_offsets[n_expert] = tiles)
//   sorted_slots     slot ids grouped by expert (order within one expert unspecified)
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct moe_plan_params {
    const int32_t *ids = nullptr;    // [n_slots] expert of each slot (router output, flattened)
    int64_t n_slots = 0, n_expert = 0, tile_rows = 64;
    int32_t *counts = nullptr;       // [n_expert]
    int32_t *offsets = nullptr;      // [n_expert + 1]
    int32_t *tile_offsets = nullptr; // [n_expert + 1]
    int32_t *sorted_slots = nullptr; // [n_slots]
};

inline constexpr int64_t moe_plan_max_experts = 4096;

// Upper bound of the row tiles moe_plan can produce: the grouped GEMM's grid size.
inline int64_t moe_plan_max_tiles(int64_t n_slots, int64_t n_expert, int64_t tile_rows) {
    return (n_slots + tile_rows - 1) / tile_rows + (n_slots < n_expert ? n_slots : n_expert);
}

void moe_plan_ref(const moe_plan_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_plan(const moe_plan_params &p, cudaStream_t stream);
#endif

} // namespace es
