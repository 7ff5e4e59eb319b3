// The process-wide programmatic-dependent-launch switch (kernel_common.h).
#include "kernel_common.cuh"

#include <atomic>
#include <mutex>
#include <unordered_set>

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

} // namespace es
