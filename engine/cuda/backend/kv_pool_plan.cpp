// kv_pool_plan.h: the KV pool's layout and its mapping steps.
#include "engine/cuda/backend/kv_pool_plan.h"

#include <algorithm>

namespace es {

namespace {
size_t round_up(size_t v, size_t to) { return to ? (v + to - 1) / to * to : v; }
} // namespace

kv_pool_layout make_kv_pool_layout(int32_t n_regions, int32_t capacity, size_t region_block_bytes, size_t granule,
                                   size_t min_step_total) {
    kv_pool_layout l;
    l.n_regions = std::max(n_regions, 1);
    l.capacity = std::max(capacity, 0);
    l.region_block_bytes = region_block_bytes;
    l.granule = granule;
    l.stride = round_up(size_t(l.capacity) * region_block_bytes, granule);
    const size_t per_region = (min_step_total + size_t(l.n_regions) - 1) / size_t(l.n_regions);
    l.min_step = std::min(l.stride, std::max(round_up(per_region, granule), granule));
    return l;
}

size_t kv_mapping::bytes_for(int32_t n) const {
    n = std::clamp(n, 0, m_l.capacity);
    return std::min(m_l.stride, round_up(size_t(n) * m_l.region_block_bytes, m_l.granule));
}

int32_t kv_mapping::blocks_in(size_t bytes) const {
    if (m_l.region_block_bytes == 0) return 0;
    return int32_t(std::min<size_t>(bytes / m_l.region_block_bytes, size_t(m_l.capacity)));
}

size_t kv_mapping::step_for(int32_t n, bool exact) const {
    const size_t need = bytes_for(n);
    if (need <= m_mapped) return 0;
    const size_t missing = need - m_mapped;
    if (exact) return missing;
    const size_t grow = std::max({missing, m_l.min_step, round_up(m_mapped / 8, m_l.granule)});
    return std::min(grow, m_l.stride - m_mapped);
}

size_t kv_mapping::steps_above(int32_t n) const {
    const size_t keep = bytes_for(n);
    size_t top = m_mapped, k = 0;
    for (auto it = m_steps.rbegin(); it != m_steps.rend() && top - *it >= keep; ++it, ++k) top -= *it;
    return k;
}

int32_t kv_mapping::mapped_after_trim(int32_t n) const {
    size_t top = m_mapped;
    const size_t k = steps_above(n);
    for (size_t i = 0; i < k; ++i) top -= m_steps[m_steps.size() - 1 - i];
    return blocks_in(top);
}

} // namespace es
