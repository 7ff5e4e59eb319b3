// Stand-ins for a broken CUDA module (tests/test_cuda_module.cpp points EXPERTSCOPE_CUDA_MODULE at
// them): FAKE_KIND 1 exports no entry point, 2 a table of another ABI, 3 a table of another
// build, 4 needs a library that cannot be found at run time (like a missing libcublasLt.so.N).
#include "engine/cuda/cuda_module_abi.h"

#if FAKE_KIND == 1
extern "C" __attribute__((visibility("default"))) int es_not_a_cuda_module() { return 1; }
#elif FAKE_KIND == 2 || FAKE_KIND == 3
extern "C" __attribute__((visibility("default"))) const es_cuda_module_v1 *es_cuda_module_entry() {
    static es_cuda_module_v1 t{};
    t.abi_version = FAKE_KIND == 2 ? 999u : ES_CUDA_MODULE_ABI_VERSION;
    t.table_size = sizeof(es_cuda_module_v1);
    t.build_id = "0.0.0+another-build";
    return &t;
}
#elif FAKE_KIND == 4
extern "C" int es_fake_missing_dependency();
extern "C" __attribute__((visibility("default"))) const es_cuda_module_v1 *es_cuda_module_entry() {
    return es_fake_missing_dependency() ? nullptr : nullptr;
}
#endif
