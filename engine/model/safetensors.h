// Memory-mapped safetensors files, single or sharded (model.safetensors.index.json).
// Every header field is checked against the file before any tensor is exposed: the header
// length fits the file, the header is a JSON object, each entry has a known dtype, non-negative
// dims, begin <= end inside the data section, end - begin == prod(shape) * dtype size, and no
// two tensors overlap. Tensors are read straight from the mapping (no copy).
#pragma once

#include "engine/core/dtype.h"
#include "engine/core/status.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace es {

struct tensor_view {
    std::string name;
    dtype type = dtype::f32;
    std::vector<int64_t> shape;    // as on disk, row-major; HF linear weights are [out, in]
    const std::byte *data = nullptr;
    size_t n_bytes = 0;
    std::string file;              // file name (not full path) the tensor lives in, for messages

    int64_t n_elements() const;
    std::string shape_str() const; // "[64, 32]"
};

// One mapped file. Move-only; unmaps on destruction.
class safetensors_file {
public:
    static result<std::unique_ptr<safetensors_file>> open(const std::filesystem::path &path);
    ~safetensors_file();
    safetensors_file(const safetensors_file &) = delete;
    safetensors_file &operator=(const safetensors_file &) = delete;

    const std::map<std::string, tensor_view> &tensors() const { return m_tensors; }
    const std::map<std::string, std::string> &metadata() const { return m_metadata; }
    const std::filesystem::path &path() const { return m_path; }
    size_t file_bytes() const { return m_size; }

private:
    safetensors_file() = default;
    std::filesystem::path m_path;
    void *m_map = nullptr;
    size_t m_size = 0;
    std::map<std::string, tensor_view> m_tensors;
    std::map<std::string, std::string> m_metadata;
    friend struct safetensors_parser;
};

// All tensors of a model folder: model.safetensors, or the shards named by
// model.safetensors.index.json (every shard it names must exist and hold the tensors it maps).
class weight_store {
public:
    static result<std::unique_ptr<weight_store>> open_dir(const std::filesystem::path &dir);

    const tensor_view *find(const std::string &name) const;
    const std::map<std::string, const tensor_view *> &all() const { return m_index; }
    size_t total_bytes() const;
    const std::filesystem::path &dir() const { return m_dir; }
    // What to name in messages about the folder's tensors as a whole: "model.safetensors"
    // (or the file's name when one file was opened) or "model.safetensors.index.json".
    const std::string &source() const { return m_source; }

private:
    std::filesystem::path m_dir;
    std::string m_source;
    std::vector<std::unique_ptr<safetensors_file>> m_files;
    std::map<std::string, const tensor_view *> m_index;
};

} // namespace es
