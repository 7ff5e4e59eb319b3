// kv_pool.h: the KV pool's memory, reserved once and mapped in steps through the driver's virtual
// memory management (entry points found at run time), or one cudaMalloc where that is not there.
#include "engine/cuda/backend/kv_pool.h"

#include "engine/core/status.h"
#include "engine/core/switches.h"
#include "engine/cuda/backend/cuda_util.h"

// The driver API's types and function-pointer typedefs only: nothing of libcuda is linked.
#include <cudaTypedefs.h>

namespace es {

namespace {

// The driver calls the pool needs, from cudaGetDriverEntryPointByVersion (the runtime finds them in
// the loaded driver). `missing` says why they cannot be used (empty: all found).
struct driver_vmm {
    PFN_cuDeviceGet_v2000 device_get = nullptr;
    PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
    PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
    PFN_cuMemAddressReserve_v10020 reserve = nullptr;
    PFN_cuMemAddressFree_v10020 address_free = nullptr;
    PFN_cuMemCreate_v10020 create = nullptr;
    PFN_cuMemRelease_v10020 release = nullptr;
    PFN_cuMemMap_v10020 map = nullptr;
    PFN_cuMemUnmap_v10020 unmap = nullptr;
    PFN_cuMemSetAccess_v10020 set_access = nullptr;
    PFN_cuGetErrorName_v6000 error_name = nullptr;
    std::string missing;
};

template <typename F>
void find_entry(const char *name, F &fn, std::string &missing) {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    // The symbol as the CUDA 12.0 ABI defines it (the VMM calls have not changed since 10.2).
    const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q);
#else
    const cudaError_t e = cudaGetDriverEntryPoint(name, &p, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        if (missing.empty())
            missing = std::string(name) + " is not available from the driver (" +
                      (e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found") + ")";
        return;
    }
    fn = reinterpret_cast<F>(p);
}

const driver_vmm &vmm() {
    static const driver_vmm d = [] {
        driver_vmm v;
        find_entry("cuDeviceGet", v.device_get, v.missing);
        find_entry("cuDeviceGetAttribute", v.attribute, v.missing);
        find_entry("cuMemGetAllocationGranularity", v.granularity, v.missing);
        find_entry("cuMemAddressReserve", v.reserve, v.missing);
        find_entry("cuMemAddressFree", v.address_free, v.missing);
        find_entry("cuMemCreate", v.create, v.missing);
        find_entry("cuMemRelease", v.release, v.missing);
        find_entry("cuMemMap", v.map, v.missing);
        find_entry("cuMemUnmap", v.unmap, v.missing);
        find_entry("cuMemSetAccess", v.set_access, v.missing);
        find_entry("cuGetErrorName", v.error_name, v.missing);
        return v;
    }();
    return d;
}

std::string cu_name(CUresult r) {
    const char *s = nullptr;
    if (vmm().error_name && vmm().error_name(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUresult " + std::to_string(int(r));
}

CUmemAllocationProp device_memory(int device) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

// The device's allocation granularity for the pool's steps (the recommended one), or why virtual
// memory management cannot be used on it.
std::string vmm_granule(int device, size_t &granule) {
    const driver_vmm &d = vmm();
    if (!d.missing.empty()) return "the driver's virtual memory management cannot be used: " + d.missing;
    CUdevice dev = 0;
    if (const CUresult r = d.device_get(&dev, device); r != CUDA_SUCCESS) return "cuDeviceGet failed (" + cu_name(r) + ")";
    int supported = 0;
    if (const CUresult r = d.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
        r != CUDA_SUCCESS || !supported)
        return "CUDA device " + std::to_string(device) + " does not support virtual memory management";
    const CUmemAllocationProp prop = device_memory(device);
    size_t minimum = 0, recommended = 0;
    if (const CUresult r = d.granularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); r != CUDA_SUCCESS)
        return "cuMemGetAllocationGranularity failed (" + cu_name(r) + ")";
    if (d.granularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS) recommended = 0;
    granule = recommended && minimum && recommended % minimum == 0 ? recommended : minimum;
    if (granule == 0 || granule % 256) return "an allocation granularity of " + std::to_string(granule) + " bytes";
    return {};
}

} // namespace

void kv_pool_memory::init(int device, int32_t n_regions, int32_t capacity, size_t region_block_bytes, bool on_demand,
                          cudaStream_t stream, const std::string &what) {
    reset();
    m_device = device;
    m_what = what;
    ck(cudaSetDevice(device), "cudaSetDevice"); // (the driver calls act on the current context)
    size_t granule = 0;
    std::string why = !on_demand                           ? "every block asked for at once"
                      : !switch_flag("ES_CUDA_KV_VMM", true) ? "ES_CUDA_KV_VMM=0"
                                                             : vmm_granule(device, granule);
    if (why.empty()) {
        const kv_pool_layout l = make_kv_pool_layout(n_regions, capacity, region_block_bytes, granule);
        const size_t range = l.stride * size_t(l.n_regions);
        CUdeviceptr p = 0;
        const CUresult r = vmm().reserve(&p, range, granule, 0, 0);
        if (r == CUDA_SUCCESS && p) {
            m_base = reinterpret_cast<void *>(p);
            m_vmm = true;
            m_map = kv_mapping(l);
            m_note = "mapped on demand: " + mib(range) + " of addresses reserved, mapped in steps of at least " +
                     mib(l.min_step * size_t(l.n_regions)) + " (" + mib(granule) + " granules, " +
                     std::to_string(l.n_regions) + " regions)";
            return;
        }
        why = "reserving " + mib(range) + " of addresses failed (" + cu_name(r) + ")";
    }
    alloc_whole(make_kv_pool_layout(n_regions, capacity, region_block_bytes, 0), stream, what);
    m_note = "one allocation of its whole capacity: " + why;
}

void kv_pool_memory::alloc_whole(const kv_pool_layout &l, cudaStream_t stream, const std::string &what) {
    const size_t bytes = l.stride * size_t(l.n_regions);
    const cudaError_t e = cudaMalloc(&m_base, bytes);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); // not sticky: clear it
        m_base = nullptr;
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw load_error("out of GPU memory: " + what + " needs " + mib(bytes) + " but only " + mib(free_b) + " of " +
                         mib(total_b) + " are free");
    }
    ck(e, "cudaMalloc for " + what);
    m_map = kv_mapping(l);
    ck(cudaMemsetAsync(m_base, 0, bytes, stream), "KV cache clear");
}

void kv_pool_memory::reset() {
    if (!m_base) return;
    if (m_vmm) {
        while (!m_map.steps().empty()) {
            try {
                unmap_top();
            } catch (const load_error &) { // (a driver failure: the step is dropped from the books anyway)
            }
        }
        vmm().address_free(reinterpret_cast<CUdeviceptr>(m_base), capacity_bytes());
    } else {
        cudaFree(m_base);
    }
    m_base = nullptr;
    m_vmm = false;
    m_map = kv_mapping();
    m_handles.clear();
    m_note.clear();
}

size_t kv_pool_memory::bytes() const {
    if (!m_base) return 0;
    return m_vmm ? m_map.mapped_bytes() * size_t(m_map.layout().n_regions) : capacity_bytes();
}

int32_t kv_pool_memory::mapped_after_trim(int32_t n) const {
    return m_vmm ? m_map.mapped_after_trim(n) : capacity_blocks();
}

void kv_pool_memory::ensure(int32_t n, cudaStream_t stream) {
    if (!m_base) throw load_error("the KV pool is not initialised");
    if (n > capacity_blocks())
        throw load_error("the KV pool has " + std::to_string(capacity_blocks()) + " blocks; " + std::to_string(n) +
                         " were asked for");
    if (n <= mapped_blocks()) return;
    ck(cudaSetDevice(m_device), "cudaSetDevice");
    // The growth rule's step, else (the device nearly full) exactly what is missing.
    std::string error;
    const size_t step = m_map.step_for(n, false), exact = m_map.step_for(n, true);
    if (map_step(step, stream, error)) return;
    if (exact < step && map_step(exact, stream, error)) return;
    throw load_error(error);
}

bool kv_pool_memory::map_step(size_t bytes, cudaStream_t stream, std::string &error) {
    const driver_vmm &d = vmm();
    const kv_pool_layout &l = m_map.layout();
    const size_t off = m_map.mapped_bytes(), total = bytes * size_t(l.n_regions);
    const int32_t to = m_map.blocks_in(off + bytes);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        free_b = total_b = 0;
    }
    const std::string room = "only " + mib(free_b) + " of " + mib(total_b) + " are free";
    if (total_b > 0 && free_b < total) { // (no driver call that is bound to fail)
        error = "out of GPU memory: the KV pool needs " + mib(total) + " more to back its blocks up to " +
                std::to_string(to) + " of " + std::to_string(l.capacity) + " but " + room;
        return false;
    }
    const CUmemAllocationProp prop = device_memory(m_device);
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const CUdeviceptr base = reinterpret_cast<CUdeviceptr>(m_base);
    std::vector<unsigned long long> handles;
    CUresult r = CUDA_SUCCESS;
    const char *call = "";
    for (int32_t reg = 0; reg < l.n_regions && r == CUDA_SUCCESS; ++reg) {
        const CUdeviceptr at = base + size_t(reg) * l.stride + off;
        CUmemGenericAllocationHandle h = 0;
        if ((r = d.create(&h, bytes, &prop, 0)) != CUDA_SUCCESS) {
            call = "cuMemCreate";
        } else if ((r = d.map(at, bytes, 0, h, 0)) != CUDA_SUCCESS) {
            d.release(h);
            call = "cuMemMap";
        } else {
            handles.push_back(h);
            if ((r = d.set_access(at, bytes, &access, 1)) != CUDA_SUCCESS) call = "cuMemSetAccess";
        }
    }
    // Zeroed as the whole pool was: a launch may read a block's unwritten slots (times zero).
    cudaError_t z = cudaSuccess;
    for (int32_t reg = 0; r == CUDA_SUCCESS && z == cudaSuccess && reg < l.n_regions; ++reg)
        z = cudaMemsetAsync(at(size_t(reg) * l.stride + off), 0, bytes, stream);
    if (r == CUDA_SUCCESS && z == cudaSuccess) {
        m_map.push(bytes);
        m_handles.push_back(std::move(handles));
        return true;
    }
    if (z != cudaSuccess) {
        cudaGetLastError();
        cudaStreamSynchronize(stream); // (a memset enqueued before the failure must end before the unmap)
        cudaGetLastError();
    }
    for (size_t reg = 0; reg < handles.size(); ++reg) {
        d.unmap(base + reg * l.stride + off, bytes);
        d.release(handles[reg]);
    }
    if (z != cudaSuccess)
        error = std::string("clearing new KV pool memory failed: ") + cudaGetErrorName(z) + " (" +
                cudaGetErrorString(z) + ")";
    else
        error = std::string(r == CUDA_ERROR_OUT_OF_MEMORY ? "out of GPU memory: " : "") + call + " for the KV pool failed (" +
                cu_name(r) + ") mapping " + mib(total) + " to back its blocks up to " + std::to_string(to) + " of " +
                std::to_string(l.capacity) + "; " + room;
    return false;
}

void kv_pool_memory::unmap_top() {
    const driver_vmm &d = vmm();
    const kv_pool_layout &l = m_map.layout();
    const size_t bytes = m_map.steps().back(), off = m_map.mapped_bytes() - bytes;
    const std::vector<unsigned long long> handles = std::move(m_handles.back());
    m_handles.pop_back();
    m_map.pop();
    CUresult first = CUDA_SUCCESS;
    const char *call = "";
    for (size_t reg = 0; reg < handles.size(); ++reg) {
        const CUresult u = d.unmap(reinterpret_cast<CUdeviceptr>(m_base) + reg * l.stride + off, bytes);
        const CUresult rel = d.release(handles[reg]);
        if (first == CUDA_SUCCESS && u != CUDA_SUCCESS) first = u, call = "cuMemUnmap";
        if (first == CUDA_SUCCESS && rel != CUDA_SUCCESS) first = rel, call = "cuMemRelease";
    }
    if (first != CUDA_SUCCESS)
        throw load_error(std::string(call) + " for the KV pool failed (" + cu_name(first) + ")");
}

void kv_pool_memory::trim(int32_t n) {
    if (!m_vmm) return;
    ck(cudaSetDevice(m_device), "cudaSetDevice");
    while (m_map.steps_above(n) > 0) unmap_top();
}

} // namespace es
