// libexpertscope-cuda.so's only exported symbol (the link exports nothing else; see
// engine/CMakeLists.txt). Inside the module, the engine code it carries (load_model in the
// self-test) uses the module's own table instead of loading a module again.
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"

extern "C" __attribute__((visibility("default"))) const es_cuda_module_v1 *es_cuda_module_entry() {
    es::detail::use_linked_cuda_module(&es::linked_cuda_module());
    return &es::linked_cuda_module();
}
