// .npy float32 reader/writer (see npy.h). The writer goes through a temporary file and a
// rename so a reader never sees half an array.
#include "npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

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
    std::ifstream f(path, std::ios::binary);
    if (!f) return error{"cannot open " + path.string()};
    char magic[8];
    if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) return error{path.string() + ": not a .npy file"};
    uint32_t hlen = 0;
    if (magic[6] == 1) {
        uint16_t l = 0;
        f.read(reinterpret_cast<char *>(&l), 2);
        hlen = l;
    } else {
        f.read(reinterpret_cast<char *>(&hlen), 4);
    }
    std::string header(hlen, '\0');
    if (!f.read(header.data(), hlen)) return error{path.string() + ": truncated header"};
    if (header.find("'<f4'") == std::string::npos) return error{path.string() + ": dtype is not little-endian float32"};
    if (header.find("'fortran_order': False") == std::string::npos) return error{path.string() + ": Fortran order"};
    std::smatch m;
    if (!std::regex_search(header, m, std::regex("'shape': \\(([^)]*)\\)"))) return error{path.string() + ": no shape"};
    npy_array a;
    std::stringstream ss(m[1].str());
    std::string part;
    int64_t n = 1;
    while (std::getline(ss, part, ','))
        if (part.find_first_not_of(' ') != std::string::npos) {
            a.shape.push_back(std::stoll(part));
            n *= a.shape.back();
        }
    a.data.resize(size_t(n));
    if (!f.read(reinterpret_cast<char *>(a.data.data()), std::streamsize(n * sizeof(float))))
        return error{path.string() + ": truncated data"};
    return a;
}

} // namespace es
