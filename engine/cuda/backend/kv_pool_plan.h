// The CUDA backend's KV pool in its reserved address range, planned in plain C++ (tested on the
// CPU): where each region lies and which of its bytes are mapped, in steps. The pool is n_regions
// regions — layer il's K pool, then its V pool (record.cpp addresses region r at base + r · stride)
// — of `capacity` blocks of region_block_bytes each. The stride is the region's bytes rounded up to
// the device's allocation granularity, so every region starts on a granule and blocks [0, n) of all
// regions are backed by mapping the first kv_region_bytes_for(n) bytes of each: the addresses the
// kernels use never move, only how much of each region has memory behind it.
//
// Mapping steps: each step maps the same bytes at the top of every region (one physical
// allocation per region: cuMemMap takes no offset into an allocation), and the pool gives memory
// back by unmapping whole steps from the top. A step is at least one granule per region and at
// least min_step_total bytes in all (64 MiB: every ERNIE-4.5 shape's granule steps are larger
// already; it keeps toy shapes from mapping in slivers), and at least an eighth of what is mapped
// (growth by ~12.5%): the steps then stay few — about 60 for any pool up to a thousand times its
// first step, i.e. 60 · n_regions physical allocations to create and release — while what is
// mapped beyond the blocks in use stays under an eighth of it plus one step. Near the end of the
// device's memory a step of exactly what is needed is tried before the grow fails
// (step_for(n, exact)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace es {

inline constexpr size_t k_kv_min_step_total = size_t(64) << 20;

struct kv_pool_layout {
    int32_t n_regions = 0, capacity = 0; // regions (2 · n_layer), blocks
    size_t region_block_bytes = 0;       // one block of one region: block_size · kv_dim · element bytes
    size_t granule = 0;                  // the device's allocation granularity (a power of two)
    size_t stride = 0;                   // bytes from one region to the next: a multiple of granule
    size_t min_step = 0;                 // the smallest step per region: a multiple of granule
};

// granule 0: no granularity (one allocation of the whole pool: stride = capacity · region bytes).
kv_pool_layout make_kv_pool_layout(int32_t n_regions, int32_t capacity, size_t region_block_bytes, size_t granule,
                                   size_t min_step_total = k_kv_min_step_total);

// The steps mapped so far, bottom first, in bytes per region; what they back.
class kv_mapping {
public:
    kv_mapping() = default;
    explicit kv_mapping(const kv_pool_layout &l) : m_l(l) {}

    const kv_pool_layout &layout() const { return m_l; }
    const std::vector<size_t> &steps() const { return m_steps; }
    size_t mapped_bytes() const { return m_mapped; }      // per region
    int32_t mapped_blocks() const { return blocks_in(m_mapped); }
    // Bytes per region that back blocks [0, n), rounded up to the granule.
    size_t bytes_for(int32_t n) const;
    int32_t blocks_in(size_t bytes) const;
    // The next step (bytes per region) so that blocks [0, n) are backed; 0 when they are. exact: no
    // more than they need (granule-rounded); else the step the growth rule gives (above).
    size_t step_for(int32_t n, bool exact) const;
    void push(size_t step) {
        m_steps.push_back(step);
        m_mapped += step;
    }
    // How many steps, from the top, lie wholly at or above block n (unmapping them keeps [0, n)).
    size_t steps_above(int32_t n) const;
    // The blocks still backed once the steps above block n are unmapped.
    int32_t mapped_after_trim(int32_t n) const;
    size_t pop() {
        const size_t s = m_steps.back();
        m_steps.pop_back();
        m_mapped -= s;
        return s;
    }

private:
    kv_pool_layout m_l;
    std::vector<size_t> m_steps;
    size_t m_mapped = 0;
};

} // namespace es
