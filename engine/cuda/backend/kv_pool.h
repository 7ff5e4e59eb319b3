// The CUDA backend's KV pool memory (kv_pool_plan.h has its layout and steps). With the driver's
// virtual memory management the pool's whole address range is reserved once (cuMemAddressReserve)
// and physical memory is mapped behind the lowest blocks of every region on demand (cuMemCreate,
// cuMemMap, cuMemSetAccess; zeroed on the stream before any later launch reads it) and given back
// from the top (cuMemUnmap, cuMemRelease: the device's free memory grows again). The addresses
// never move, so CUDA graphs and the kernels' layout are unaffected. The driver API is not linked:
// its entry points come from the runtime (cudaGetDriverEntryPointByVersion), so the module still
// loads where libcuda is absent. Where virtual memory management is not there (the device says
// so, an entry point is missing, a reservation fails, or ES_CUDA_KV_VMM=0), and where the caller
// wants every block backed from the start (kv_cache_params::on_demand false: direct users of the
// backend such as the bench), the pool is one cudaMalloc of its whole capacity, and note() says why.
#pragma once

#include "engine/cuda/backend/kv_pool_plan.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace es {

class kv_pool_memory {
public:
    kv_pool_memory() = default;
    ~kv_pool_memory() { reset(); }
    kv_pool_memory(const kv_pool_memory &) = delete;
    kv_pool_memory &operator=(const kv_pool_memory &) = delete;

    // Reserves (on_demand, with virtual memory management) or allocates and clears a pool of
    // n_regions regions of `capacity` blocks of region_block_bytes on `device`. Throws
    // es::load_error naming `what` when the memory or the addresses are not there.
    void init(int device, int32_t n_regions, int32_t capacity, size_t region_block_bytes, bool on_demand,
              cudaStream_t stream, const std::string &what);
    // Unmaps and releases everything, frees the range. The caller has drained the stream.
    void reset();

    // Backs blocks [0, n) of every region with memory, zeroed on `stream` (callable while launches
    // run: the new memory is no launch's yet). Throws es::load_error, with the memory missing and
    // free, when the device has not got it; what was mapped before stays.
    void ensure(int32_t n, cudaStream_t stream);
    // Unmaps and releases the steps wholly above block n. Nothing may use those blocks any more:
    // the caller has synchronized the stream. Throws es::load_error on a driver failure (what was
    // unmapped before it stays unmapped).
    void trim(int32_t n);
    int32_t mapped_after_trim(int32_t n) const;

    bool initialized() const { return m_base != nullptr; }
    bool virtual_memory() const { return m_vmm; }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_base) + offset);
    }
    size_t stride() const { return m_map.layout().stride; } // bytes from one region to the next
    int32_t capacity_blocks() const { return m_map.layout().capacity; }
    int32_t mapped_blocks() const { return m_vmm ? m_map.mapped_blocks() : capacity_blocks(); }
    // Device memory the pool holds now, and what it holds when wholly mapped.
    size_t bytes() const;
    size_t capacity_bytes() const { return stride() * size_t(m_map.layout().n_regions); }
    size_t granule() const { return m_map.layout().granule; }
    size_t steps() const { return m_map.steps().size(); }
    // How the pool's memory is held (mapped on demand, or one allocation and why).
    const std::string &note() const { return m_note; }

private:
    // Maps one step of `bytes` per region at the top of every region; false (nothing left of it)
    // with why in `error` when the memory or a driver call is not there.
    bool map_step(size_t bytes, cudaStream_t stream, std::string &error);
    // Unmaps and releases the top step.
    void unmap_top();
    void alloc_whole(const kv_pool_layout &l, cudaStream_t stream, const std::string &what);

    int m_device = 0;
    bool m_vmm = false;
    void *m_base = nullptr;
    kv_mapping m_map;
    // Each step's physical allocations, one per region (CUmemGenericAllocationHandle).
    std::vector<std::vector<unsigned long long>> m_handles;
    std::string m_note, m_what;
};

} // namespace es
