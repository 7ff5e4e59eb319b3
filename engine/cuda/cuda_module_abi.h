// The contract between the app and the CUDA module (libexpertscope-cuda.so, CMake target
// es_cuda_module): one C entry point, es_cuda_module_entry(), returns a table of function pointers.
// The module is built by the same build as the app (same compiler, same sources), so C++ types
// (es::result, std::unique_ptr<es::backend>, std::function) cross the table; the loader
// (cuda_loader.cpp) refuses a module whose ABI number, table size or build id differ from its own.
// No exception crosses the table: every function returns its failures as values.
#pragma once

#include "engine/backend/backend.h"
#include "engine/cuda/cuda_api.h"
#include "engine/cuda/selftest_api.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"
#include "es_build_info.h"

#include <cstdint>
#include <memory>

// Bump when the table below changes shape or meaning.
#define ES_CUDA_MODULE_ABI_VERSION 1u
// The entry point's name (dlsym) and the module's file name (the loader's search).
#define ES_CUDA_MODULE_ENTRY "es_cuda_module_entry"
#define ES_CUDA_MODULE_FILE "libexpertscope-cuda.so"
// Build id: both sides must agree, else the C++ types of the table may differ.
#define ES_CUDA_MODULE_BUILD_ID ES_VERSION "+" ES_GIT_COMMIT " (" __VERSION__ ")"

struct es_cuda_module_v1 {
    uint32_t abi_version;       // ES_CUDA_MODULE_ABI_VERSION
    uint32_t table_size;        // sizeof(es_cuda_module_v1)
    const char *build_id;       // ES_CUDA_MODULE_BUILD_ID of the module's build
    int runtime_version;        // CUDART_VERSION the module was built with (13000: 13.0; linked statically)
    int min_compute_capability; // the oldest GPU the kernels were built for (90: 9.0)
    const char *architectures;  // ES_CUDA_ARCHITECTURES, e.g. "90a"

    // CUDA version the installed driver supports (13000: 13.0); 0 with the reason in *why when
    // there is no usable driver (libcuda.so.1 missing, too old, …).
    int (*driver_version)(std::string *why);
    // Device `device` usable by this build's kernels, or why not (no device, compute capability
    // too low, out of memory, …). Creates the CUDA context.
    es::result<es::cuda_device_info> (*probe)(int device);
    es::result<std::unique_ptr<es::backend>> (*make_backend)(const es::model_config &cfg,
                                                             const es::model_tensors &t,
                                                             const es::cuda_backend_params &p);
    es::result<std::unique_ptr<es::backend>> (*make_backend_random)(const es::model_config &cfg,
                                                                    uint64_t seed,
                                                                    const es::cuda_backend_params &p);
    // The CUDA backend's extra calls (memory report, profiling) of a backend the module made;
    // null for any other backend. The cast happens inside the module, where the type lives.
    es::cuda_backend *(*as_cuda_backend)(es::backend *be);
    es::selftest_report (*run_selftest)(const es::selftest_options &o);
};

extern "C" {
using es_cuda_module_entry_fn = const es_cuda_module_v1 *(*)();
}

namespace es {
// The table of the CUDA code linked into this binary (es_cuda_backend: the module itself, and the
// gpu-labelled tests that link the backend directly).
const es_cuda_module_v1 &linked_cuda_module();
} // namespace es
