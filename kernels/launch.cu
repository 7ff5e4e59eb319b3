// The process-wide programmatic-dependent-launch switch (kernel_common.h).
#include "kernel_common.cuh"

#include <atomic>

namespace es {

namespace {
std::atomic<bool> g_programmatic_launch{false};
}

void set_programmatic_launch(bool on) { g_programmatic_launch.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return g_programmatic_launch.load(std::memory_order_relaxed); }

} // namespace es
