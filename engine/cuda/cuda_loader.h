// The CUDA backend is a module loaded at run time (libexpertscope-cuda.so, see cuda_module_abi.h),
// so the app and the CLI start on machines without an NVIDIA driver or CUDA libraries and use the
// CPU backend there. This is the app's side: where the module is looked for, loading and checking
// it, and the one answer to "can the GPU be used here, and if not, why not".
//
// Search order (the first file that exists is loaded; ARCHITECTURE.md, "CUDA backend"):
//   1. $EXPERTSCOPE_CUDA_MODULE (a file path; when set, the only place looked at)
//   2. <executable's folder>/../<CMAKE_INSTALL_LIBDIR>/expertscope/   (as installed)
//   3. <executable's folder>/../lib/expertscope/ and ../lib/<multiarch>/expertscope/
//   4. <executable's folder>/                                          (a build tree)
#pragma once

#include "engine/core/status.h"
#include "engine/cuda/cuda_api.h"

#include <string>
#include <vector>

struct es_cuda_module_v1;

namespace es {

struct cuda_status_info {
    bool built = false;          // this build has a CUDA module (a toolkit was found when it was built)
    bool module_loaded = false;  // the module was found, loaded and matches this program
    bool available = false;      // … and a usable GPU is present: backend_kind::automatic uses it
    std::string reason;          // !available: why not, in words
    std::string module_path;     // the module loaded (or the one that failed to load)
    std::string toolkit_version; // CUDA toolkit of the build ("13.0.48"); empty without CUDA
    int runtime_version = 0;     // CUDA runtime in the module (13000: 13.0)
    int driver_version = 0;      // CUDA version the driver supports; 0: none or unknown
    std::string architectures;   // kernels built for ("90a")
    cuda_device_info device;     // available only
    // "NVIDIA H200, compute capability 9.0, 139.8 GiB, 132 SMs" or "unavailable: <reason>".
    std::string summary() const;
};

// Loads the module and probes GPU 0 on the first call (thread-safe), then answers from memory.
const cuda_status_info &cuda_status();

// The loaded module's table (device or not), or why it could not be loaded.
result<const es_cuda_module_v1 *> cuda_module();

// The files looked for, in order (for messages and tests).
std::vector<std::string> cuda_module_candidates();

// Lines for --version: the CUDA toolkit and runtime, and the backends available here (with the
// reason when CUDA is not). Loads the module and probes the GPU.
std::string cuda_version_lines();

// "13000" → "13.0".
std::string cuda_version_string(int v);

namespace detail {
// Binaries that link the CUDA code (the module itself, gpu-labelled tests) use it directly
// instead of loading a module; set before the first cuda_status()/cuda_module() call.
void use_linked_cuda_module(const es_cuda_module_v1 *table);
} // namespace detail

} // namespace es
