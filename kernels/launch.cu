// The process-wide programmatic-dependent-launch switch (kernel_common.h).
#include "kernels/kernel_common.cuh"

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

namespace es {

namespace {
std::atomic<bool> g_programmatic_launch{false};
}

void set_programmatic_launch(bool on) { g_programmatic_launch.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return g_programmatic_launch.load(std::memory_order_relaxed); }

namespace {
std::atomic<int> g_carveout{-1};
std::mutex g_carveout_mutex;
std::unordered_set<const void *> g_carveout_done;
} // namespace

void set_kernel_carveout(int percent) {
    std::lock_guard<std::mutex> lock(g_carveout_mutex);
    g_carveout.store(percent, std::memory_order_relaxed);
    g_carveout_done.clear();
}
int kernel_carveout() { return g_carveout.load(std::memory_order_relaxed); }

void apply_kernel_carveout(const void *kernel) {
    const int percent = kernel_carveout();
    if (percent < 0) return;
    std::lock_guard<std::mutex> lock(g_carveout_mutex);
    if (!g_carveout_done.insert(kernel).second) return;
    cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent);
    (void)cudaGetLastError(); // a hint: a refusal changes nothing
}

namespace {
thread_local int t_decode_carveout = 28; // decode_carveout_for_tokens(1)
} // namespace

void set_decode_carveout(int percent) { t_decode_carveout = percent; }
int decode_carveout() { return t_decode_carveout; }

namespace {
std::atomic<int64_t> g_l2_prefetch_max{int64_t(8) << 20}; // kernel_common.h: 8 MiB
} // namespace

void set_l2_prefetch_max_bytes(int64_t bytes) { g_l2_prefetch_max.store(bytes < 0 ? -1 : bytes); }
int64_t l2_prefetch_max_bytes() { return g_l2_prefetch_max.load(std::memory_order_relaxed); }

namespace {
std::mutex g_resident_mutex;
std::map<std::tuple<const void *, int, int, size_t>, unsigned> g_resident; // (kernel, device, threads, smem) → blocks
} // namespace

unsigned resident_blocks(const void *kernel, int threads, size_t smem) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    std::lock_guard<std::mutex> lock(g_resident_mutex);
    const auto key = std::make_tuple(kernel, dev, threads, smem);
    if (const auto it = g_resident.find(key); it != g_resident.end()) return it->second;
    int per_sm = 0, sms = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    const unsigned blocks = unsigned(std::max(per_sm, 0)) * unsigned(std::max(sms, 0));
    g_resident.emplace(key, blocks);
    return blocks;
}

namespace {
std::mutex g_cc_mutex;
std::map<int, int> g_cc; // device → major·10 + minor
std::mutex g_cluster_mutex;
std::map<std::tuple<const void *, int, int>, bool> g_cluster; // (kernel, size, device) → fits
} // namespace

int device_compute_capability() {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    std::lock_guard<std::mutex> lock(g_cc_mutex);
    if (const auto it = g_cc.find(dev); it != g_cc.end()) return it->second;
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    g_cc.emplace(dev, major * 10 + minor);
    return major * 10 + minor;
}

bool cluster_fits(const void *kernel, int size, int threads, size_t smem) {
    if (size < 1 || size > 16 || device_compute_capability() < 90) return false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    std::lock_guard<std::mutex> lock(g_cluster_mutex);
    const auto key = std::make_tuple(kernel, size, dev);
    if (const auto it = g_cluster.find(key); it != g_cluster.end()) return it->second;
    bool ok = size <= 8 ||
              cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess;
    if (ok) {
        cudaLaunchAttribute attr[2];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 1;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = unsigned(size);
        attr[1].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
        attr[1].val.sharedMemCarveout = unsigned(decode_carveout());
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1, 1, unsigned(size));
        cfg.blockDim = dim3(unsigned(threads), 1, 1);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = attr;
        cfg.numAttrs = 2;
        int clusters = 0;
        ok = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0;
    }
    (void)cudaGetLastError(); // a refusal means "no": the caller launches without clusters
    g_cluster.emplace(key, ok);
    return ok;
}

namespace {
std::vector<kernel_timeline_setter> &timeline_setters() {
    static std::vector<kernel_timeline_setter> v; // filled by static initializers (one per unit)
    return v;
}
} // namespace

void register_kernel_timeline_setter(kernel_timeline_setter f) { timeline_setters().push_back(f); }

cudaError_t set_kernel_timeline(unsigned long long *buf) {
    cudaError_t first = cudaSuccess;
    for (const kernel_timeline_setter f : timeline_setters()) {
        const cudaError_t e = f(buf);
        if (first == cudaSuccess) first = e;
    }
    return first;
}

} // namespace es
