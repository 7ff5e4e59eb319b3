// Where an FP8 weight matrix [n, k] keeps its fp32 scales: one per output channel (row), or one
// per 128×128 block as DeepSeek-V3 ships its FP8 weights (a block's outlier then costs only its
// own block precision). Shared vocabulary of the kernels (kernel_common.h: the element index)
// and the engine (fp8_policy, the memory estimate); header-only, so both layers may include it.
#pragma once

#include <cstdint>

namespace es {

enum class scale_layout : uint8_t { channel, block128 };

inline constexpr int64_t fp8_block = 128; // a block scale covers fp8_block × fp8_block weights

// The number of fp32 scales of an FP8 matrix [n, k]. constexpr, so device code may call it too.
constexpr int64_t fp8_scale_count(int64_t n, int64_t k, scale_layout l) {
    return l == scale_layout::channel ? n : ((n + fp8_block - 1) / fp8_block) * ((k + fp8_block - 1) / fp8_block);
}

inline const char *scale_layout_name(scale_layout l) {
    return l == scale_layout::channel ? "channel" : "block128";
}

} // namespace es
