// The CUDA module's table (see cuda_module_abi.h): the CUDA backend, its device probe and the
// self-test behind plain function pointers. Part of es_cuda_backend, so the module and the
// gpu-labelled tests that link the backend directly share it. Nothing here throws out.
#include "engine/cuda/backend/cuda_backend.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"
#include "engine/cuda/selftest/cuda_selftest.h"

#include <cuda_runtime_api.h>

#ifndef ES_CUDA_MIN_CC
#define ES_CUDA_MIN_CC 0
#endif
#ifndef ES_CUDA_ARCHITECTURES
#define ES_CUDA_ARCHITECTURES ""
#endif

namespace es {
namespace {

cuda_backend *module_as_cuda_backend(backend *be) { return dynamic_cast<cuda_backend *>(be); }

selftest_report module_run_selftest(const selftest_options &o) {
    try {
        return run_cuda_selftest(o);
    } catch (const std::exception &e) {
        selftest_report r;
        r.rows.push_back(
            {"selftest", "run", "", 0.0, 0.0, false, std::string("internal error: ") + e.what()});
        return r;
    }
}

result<cuda_device_info> module_probe(int device) {
    return catch_errors([&] { return probe_cuda_device(device); });
}

result<std::unique_ptr<backend>> module_make_backend(const model_config &cfg, const model_tensors &t,
                                                     const cuda_backend_params &p) {
    return catch_errors([&] { return make_cuda_backend(cfg, t, p); });
}

result<std::unique_ptr<backend>> module_make_backend_random(const model_config &cfg, uint64_t seed,
                                                            const cuda_backend_params &p) {
    return catch_errors([&] { return make_cuda_backend_random(cfg, seed, p); });
}

const es_cuda_module_v1 k_table{
    ES_CUDA_MODULE_ABI_VERSION,
    sizeof(es_cuda_module_v1),
    ES_CUDA_MODULE_BUILD_ID,
    CUDART_VERSION,
    ES_CUDA_MIN_CC,
    ES_CUDA_ARCHITECTURES,
    &cuda_driver_version,
    &module_probe,
    &module_make_backend,
    &module_make_backend_random,
    &module_as_cuda_backend,
    &module_run_selftest,
};

} // namespace

const es_cuda_module_v1 &linked_cuda_module() { return k_table; }

} // namespace es
