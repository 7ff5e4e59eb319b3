// CPU twin of moe_plan (see moe_plan.cuh): a stable counting sort (slots ascending per expert).
#include "kernels/moe_plan.cuh"

#include <vector>

namespace es {

void moe_plan_ref(const moe_plan_params &p) {
    const int64_t E = p.n_expert;
    std::vector<int32_t> cursor(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) p.counts[e] = 0;
    for (int64_t s = 0; s < p.n_slots; ++s) ++p.counts[p.ids[s]];
    int32_t off = 0, tiles = 0;
    for (int64_t e = 0; e < E; ++e) {
        p.offsets[e] = off;
        p.tile_offsets[e] = tiles;
        cursor[e] = off;
        off += p.counts[e];
        tiles += int32_t((p.counts[e] + p.tile_rows - 1) / p.tile_rows);
    }
    p.offsets[E] = off;
    p.tile_offsets[E] = tiles;
    for (int64_t s = 0; s < p.n_slots; ++s) p.sorted_slots[cursor[p.ids[s]]++] = int32_t(s);
}

} // namespace es
