// Minimal NumPy .npy I/O for float32 arrays (version 1.0, little-endian, C order): the CLI's
// `logits --out` format and the reference logits of tests/data.
#pragma once

#include "engine/core/status.h"

#include <cstdint>
#include <filesystem>
#include <vector>

namespace es {

struct npy_array {
    std::vector<int64_t> shape;
    std::vector<float> data;
};

status write_npy_f32(const std::filesystem::path &path, const float *data, const std::vector<int64_t> &shape);
result<npy_array> read_npy_f32(const std::filesystem::path &path);

} // namespace es
