// .npy float32 reader/writer (see npy.h). The writer goes through a temporary file and a
// rename so a reader never sees half an array.
#include "engine/model/npy.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string_view>

namespace es {

status write_npy_f32(const std::filesystem::path &path, const float *data, const std::vector<int64_t> &shape) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    int64_t n = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
        n *= shape[i];
    }
    dict += "), }";
    // magic(6) + version(2) + len(2) + dict + padding + '\n' is a multiple of 64.
    size_t total = 10 + dict.size() + 1;
    dict.append((64 - total % 64) % 64, ' ');
    dict += '\n';
    const auto tmp = path.string() + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return error{"cannot write " + path.string()};
        const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
        f.write(magic, 8);
        const uint16_t len = uint16_t(dict.size());
        f.write(reinterpret_cast<const char *>(&len), 2);
        f.write(dict.data(), std::streamsize(dict.size()));
        f.write(reinterpret_cast<const char *>(data), std::streamsize(n * sizeof(float)));
        f.flush();
        if (!f) return error{"cannot write " + path.string() + " (disk full?)"};
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) return error{"cannot write " + path.string() + ": " + ec.message()};
    return ok_status();
}

result<npy_array> read_npy_f32(const std::filesystem::path &path) {
    const std::string name = path.string();
    std::ifstream f(path, std::ios::binary);
    if (!f) return error{"cannot open " + name};
    f.seekg(0, std::ios::end);
    const uint64_t file_bytes = uint64_t(std::max<std::streamoff>(f.tellg(), 0));
    f.seekg(0);
    char magic[8];
    if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
        return error{name + ": not a .npy file"};
    const int version = static_cast<unsigned char>(magic[6]);
    if (version < 1 || version > 3)
        return error{name + ": .npy format version " + std::to_string(version) +
                     " (this reader knows 1 to 3)"};
    uint32_t hlen = 0;
    unsigned char len_bytes[4] = {};
    const int n_len = version == 1 ? 2 : 4;
    if (!f.read(reinterpret_cast<char *>(len_bytes), n_len)) return error{name + ": truncated header"};
    for (int i = n_len - 1; i >= 0; --i) hlen = hlen << 8 | len_bytes[i];
    const uint64_t data_start = 8 + uint64_t(n_len) + hlen;
    if (data_start > file_bytes)
        return error{name + ": header of " + std::to_string(hlen) + " bytes runs past the end of the file"};
    std::string header(hlen, '\0');
    if (!f.read(header.data(), hlen)) return error{name + ": truncated header"};
    if (header.find("'<f4'") == std::string::npos)
        return error{name + ": dtype is not little-endian float32"};
    if (header.find("'fortran_order': False") == std::string::npos) return error{name + ": Fortran order"};
    const size_t open = header.find("'shape': (");
    const size_t close = open == std::string::npos ? open : header.find(')', open);
    if (close == std::string::npos) return error{name + ": no shape"};
    const std::string dims = header.substr(open + 10, close - open - 10);
    npy_array a;
    uint64_t n = 1;
    for (size_t at = 0; at <= dims.size();) {
        size_t comma = dims.find(',', at);
        if (comma == std::string::npos) comma = dims.size();
        std::string_view part(dims.data() + at, comma - at);
        while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
        while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
        if (!part.empty()) {
            int64_t d = 0;
            const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), d);
            if (ec != std::errc() || end != part.data() + part.size() || d < 0)
                return error{name + ": shape (" + dims + ") is not a tuple of non-negative integers"};
            a.shape.push_back(d);
            if (__builtin_mul_overflow(n, uint64_t(d), &n)) n = UINT64_MAX;
        }
        at = comma + 1;
    }
    const uint64_t data_bytes = file_bytes - data_start;
    if (n > data_bytes / sizeof(float))
        return error{name + ": shape (" + dims + ") needs more data than the file's " +
                     std::to_string(data_bytes) + " bytes"};
    a.data.resize(size_t(n));
    if (!f.read(reinterpret_cast<char *>(a.data.data()), std::streamsize(n * sizeof(float))))
        return error{name + ": truncated data"};
    return a;
}

} // namespace es
