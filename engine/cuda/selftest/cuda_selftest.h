// The CUDA self-test behind `expertscope-cli selftest` and the gpu-labelled test: every kernel
// against its CPU twin on random inputs including edge shapes (tolerances fitted to the dtype),
// then end-to-end logits of every reference checkpoint through the CUDA backend (BF16, and FP8
// with E4M3 and E5M2 prefill activations; prefill chunks and token-by-token decode) against the
// twin model, the CPU backend and the HF goldens.
// Declared always; defined in es_cuda_backend (CUDA builds). The app reaches it through the module's
// table (cuda_module_abi.h), the gpu-labelled tests by linking es_cuda_backend.
#pragma once

#include "engine/cuda/selftest_api.h"

namespace es {

selftest_report run_cuda_selftest(const selftest_options &o);

} // namespace es
