// The CUDA module's entry points behind its table (cuda_module.cpp): the driver and device
// probe and the two backend factories. Inside the module only; the engine reaches them through
// cuda_loader.h. The types are cuda_api.h's.
#pragma once

#include "engine/cuda/cuda_api.h"
#include "engine/model/model_config.h"
#include "engine/model/model_tensors.h"

#include <memory>
#include <string>

namespace es {

// The CUDA version the NVIDIA driver supports (13000: 13.0), or 0; *why (when given) is empty when
// the driver can run this build, else says why not in words: no driver at all (libcuda.so.1
// missing, which the runtime would only call "insufficient driver"), or one older than the CUDA
// runtime's major version (minor-version compatibility covers the rest).
int cuda_driver_version(std::string *why);

// Is there a usable GPU? Checks the driver first (cuda_driver_version). An error in words when
// not (no driver, no device, too old a GPU). Cheap; never aborts. Devices below the oldest
// architecture of ES_CUDA_ARCHITECTURES are refused (9.0 for the default sm_90a), and a tiny
// kernel launch proves the build has code for the GPU.
result<cuda_device_info> probe_cuda_device(int device = 0);

// Uploads bound checkpoint tensors (BF16 as stored; FP8 quantized on the GPU at load).
result<std::unique_ptr<backend>> make_cuda_backend(const model_config &cfg, const model_tensors &t,
                                                   const cuda_backend_params &p = {});

// Random weights of the given shape built on the GPU (benchmarks of real shapes): uniform with
// the CPU backend's spreads (linears ±sqrt(3/in), norms 1 ± 0.17, bias ±0.017).
result<std::unique_ptr<backend>> make_cuda_backend_random(const model_config &cfg, uint64_t seed,
                                                          const cuda_backend_params &p = {});

} // namespace es
