// The CPU's name and a model folder's content hash (see provenance.h).
#include "app/models/provenance.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace es::models {

namespace {

// FNV-1a 64 over bytes; cheap enough to hash a small model's weights in full.
struct fnv1a64 {
    uint64_t h = 1469598103934665603ull;
    void add(const char *p, size_t n) {
        for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 1099511628211ull;
    }
    bool add_file(const std::filesystem::path &f, uint64_t max_bytes) {
        std::ifstream in(f, std::ios::binary);
        if (!in) return false;
        std::vector<char> buf(1 << 20);
        uint64_t done = 0;
        while (in && done < max_bytes) {
            in.read(buf.data(), std::streamsize(std::min<uint64_t>(buf.size(), max_bytes - done)));
            add(buf.data(), size_t(in.gcount()));
            done += uint64_t(in.gcount());
        }
        return true;
    }
};

} // namespace

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
        }
    return "unknown CPU";
}

std::string model_content_hash(const std::string &dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return {};
    std::vector<fs::path> files;
    uint64_t total = 0;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name == "config.json" || name.ends_with(".safetensors")) {
            files.push_back(e.path());
            total += e.file_size(ec);
        }
    }
    std::sort(files.begin(), files.end());
    // Up to 4 GiB the whole files; above, the first MiB of each (the safetensors header with every
    // tensor's name, dtype, shape and offset) and its size, labelled as such.
    const bool full = total <= (uint64_t(4) << 30);
    fnv1a64 h;
    for (const auto &f : files) {
        const std::string name = f.filename().string();
        h.add(name.data(), name.size());
        const uint64_t size = fs::file_size(f, ec);
        h.add(reinterpret_cast<const char *>(&size), sizeof size);
        if (!h.add_file(f, full ? size : (uint64_t(1) << 20))) return {};
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h.h);
    return std::string(full ? "fnv1a64:" : "fnv1a64-headers:") + hex;
}

} // namespace es::models
