// cuda_util.h: error messages and the workspace's memory source.
#include "engine/cuda/backend/cuda_util.h"

namespace es {

std::string mib(size_t b) { return std::to_string((b + (1u << 19)) >> 20) + " MiB"; }

bool is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
        return true;
    default:
        return false;
    }
}

[[noreturn]] void throw_cuda(cudaError_t e, const std::string &what) {
    std::string msg = "CUDA error in " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    if (is_sticky(e)) msg += "; the GPU context is no longer usable, restart the program";
    throw load_error(msg);
}

device_memory_source cuda_memory_source() {
    device_memory_source s;
    s.alloc = [](size_t bytes) -> void * {
        void *p = nullptr;
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError(); // not sticky: clear it
            return nullptr;
        }
        ck(e, "cudaMalloc for the workspace");
        return p;
    };
    s.free = [](void *p, size_t) {
        if (cudaFree(p) != cudaSuccess) cudaGetLastError();
    };
    s.describe = []() -> std::string {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            cudaGetLastError();
            return {};
        }
        return "device: " + format_bytes(free_b) + " free of " + format_bytes(total_b);
    };
    return s;
}

} // namespace es
