// The CUDA backend's forward pass emulated on the CPU with the kernels' CPU twins (kernels/*.cpp):
// the same BF16 roundings of activations, the same FP8 quantization of weights, the decode-path
// kernels (gemv, moe_gate_up_gemv, moe_down_gemv) for every linear. Plain C++ (builds without a
// CUDA toolkit), slow (plain loops): for the tiny reference checkpoints in tests and the
// self-test, where it separates "the GPU computes what we meant" (GPU vs twin, tight) from "what
// we meant is close to HF" (twin vs HF, bounded by BF16/FP8 precision).
#pragma once

#include "model.h"
#include "model_tensors.h"

#include <cstdint>
#include <vector>

namespace es {

// Logits [tokens.size(), n_vocab] of one sequence starting at position 0.
result<std::vector<float>> twin_forward_logits(const model_config &cfg, const model_tensors &t,
                                               const std::vector<int32_t> &tokens, weight_precision precision);

} // namespace es
