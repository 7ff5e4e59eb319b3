// Opens safetensors files (read-only private mmap) and model folders (single file or the shards
// named by model.safetensors.index.json). The whole header is validated before any tensor is
// exposed; every failure is a load_error naming the file, the tensor and expected vs found.
// Data needs no alignment: consumers copy or convert (see dtype.h convert_to_f32).
#include "engine/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace es {

using json = nlohmann::json;

namespace {

constexpr uint64_t k_max_header_bytes = 100ull * 1000 * 1000; // 100 MB: real headers are < 10 MB

[[noreturn]] void fail(const std::string &msg) { throw load_error(msg); }

std::string quote_name(const std::string &s) { return "'" + s + "'"; }

// Closes a file descriptor on scope exit (the mapping stays valid after close).
struct fd_guard {
    int fd = -1;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

// A JSON number that is an integer (signed or unsigned, not float), as int64 if it fits.
std::optional<int64_t> as_int64(const json &v) {
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
        return int64_t(u);
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    return std::nullopt;
}

std::string json_kind(const json &v) {
    if (v.is_number_float()) return "a non-integer number " + v.dump();
    if (v.is_number()) return "the number " + v.dump();
    std::string d = v.dump();
    if (d.size() > 40) d = d.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + d;
}

} // namespace

int64_t tensor_view::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string tensor_view::shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

// Builds a safetensors_file's tensor table from its mapped bytes.
struct safetensors_parser {
    static void parse(safetensors_file &f);
};

void safetensors_parser::parse(safetensors_file &f) {
    const std::string fname = f.m_path.filename().string();
    const auto *bytes = static_cast<const std::byte *>(f.m_map);
    const uint64_t size = f.m_size;

    uint64_t n_header = 0;
    for (int i = 7; i >= 0; --i) n_header = (n_header << 8) | uint64_t(std::to_integer<uint8_t>(bytes[i]));
    if (n_header > k_max_header_bytes)
        fail(fname + ": header length " + std::to_string(n_header) + " bytes is absurd (limit " +
             std::to_string(k_max_header_bytes) + " bytes); the file is corrupt or not safetensors");
    if (n_header > size - 8)
        fail(fname + ": header length " + std::to_string(n_header) +
             " bytes runs past the end of the file (file is " + std::to_string(size) + " bytes, at most " +
             std::to_string(size - 8) + " header bytes fit)");
    if (n_header < 2)
        fail(fname + ": header is " + std::to_string(n_header) + " bytes, expected a JSON object");

    const char *hbegin = reinterpret_cast<const char *>(bytes + 8);
    const json header = json::parse(hbegin, hbegin + n_header, nullptr, false);
    if (header.is_discarded())
        fail(fname + ": header (" + std::to_string(n_header) + " bytes) is not valid JSON");
    if (!header.is_object())
        fail(fname + ": header is " + std::string(header.type_name()) + ", expected a JSON object");

    const uint64_t data_start = 8 + n_header;
    const uint64_t data_bytes = size - data_start;

    struct range {
        uint64_t begin, end;
        const std::string *name;
    };
    std::vector<range> ranges;
    std::map<std::string, tensor_view> tensors;
    std::map<std::string, std::string> metadata;

    for (const auto &[name, entry] : header.items()) {
        if (name == "__metadata__") {
            if (!entry.is_object())
                fail(fname + ": '__metadata__' is " + json_kind(entry) + ", expected an object of strings");
            for (const auto &[k, v] : entry.items()) {
                if (!v.is_string())
                    fail(fname + ": '__metadata__' key " + quote_name(k) + " is " + json_kind(v) +
                         ", expected a string");
                metadata[k] = v.get<std::string>();
            }
            continue;
        }
        const std::string where = fname + ": tensor " + quote_name(name);
        if (!entry.is_object()) fail(where + ": entry is " + json_kind(entry) + ", expected an object");
        for (const char *key : {"dtype", "shape", "data_offsets"})
            if (!entry.contains(key)) fail(where + ": entry has no '" + key + "'");

        tensor_view t;
        t.name = name;
        t.file = fname;

        const json &jd = entry["dtype"];
        if (!jd.is_string()) fail(where + ": 'dtype' is " + json_kind(jd) + ", expected a string");
        const std::string dname = jd.get<std::string>();
        const auto dt = dtype_from_name(dname);
        if (!dt)
            fail(where + ": unsupported dtype " + quote_name(dname) +
                 " (supported: F32, F16, BF16, F8_E4M3, F8_E5M2)");
        t.type = *dt;

        const json &js = entry["shape"];
        if (!js.is_array()) fail(where + ": 'shape' is " + json_kind(js) + ", expected an array of integers");
        uint64_t n_elem = 1;
        bool overflow = false;
        for (size_t i = 0; i < js.size(); ++i) {
            const auto d = as_int64(js[i]);
            if (!d)
                fail(where + ": shape dim " + std::to_string(i) + " is " + json_kind(js[i]) +
                     ", expected a non-negative integer");
            if (*d < 0)
                fail(where + ": shape dim " + std::to_string(i) + " is " + std::to_string(*d) +
                     ", expected a non-negative integer");
            t.shape.push_back(*d);
            overflow = overflow || __builtin_mul_overflow(n_elem, uint64_t(*d), &n_elem);
        }
        uint64_t expect_bytes = 0;
        overflow = overflow || __builtin_mul_overflow(n_elem, uint64_t(dtype_size(t.type)), &expect_bytes);
        if (overflow || n_elem > uint64_t(std::numeric_limits<int64_t>::max()))
            fail(where + ": shape " + t.shape_str() + " overflows (element count does not fit 64 bits)");

        const json &jo = entry["data_offsets"];
        if (!jo.is_array() || jo.size() != 2)
            fail(where + ": 'data_offsets' is " + json_kind(jo) +
                 ", expected [begin, end] (two non-negative integers)");
        const auto b = as_int64(jo[0]);
        const auto e = as_int64(jo[1]);
        if (!b || !e || *b < 0 || *e < 0)
            fail(where + ": 'data_offsets' is " + jo.dump() +
                 ", expected [begin, end] (two non-negative integers)");
        const uint64_t begin = uint64_t(*b), end = uint64_t(*e);
        if (begin > end)
            fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] are reversed (begin > end)");
        if (end > data_bytes)
            fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] lie outside the file: the data section is " + std::to_string(data_bytes) + " bytes");
        if (end - begin != expect_bytes)
            fail(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                 std::to_string(end - begin) + " bytes, expected " + std::to_string(expect_bytes) +
                 " (shape " + t.shape_str() + " x " + std::to_string(dtype_size(t.type)) + " bytes of " +
                 dname + ")");

        t.data = bytes + data_start + begin;
        t.n_bytes = size_t(end - begin);
        auto [it, inserted] = tensors.emplace(name, std::move(t));
        if (begin != end) ranges.push_back({begin, end, &it->first});
    }

    // Zero-sized tensors occupy no bytes and cannot overlap anything.
    std::sort(ranges.begin(), ranges.end(), [](const range &a, const range &b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    for (size_t i = 1; i < ranges.size(); ++i) {
        const range &p = ranges[i - 1], &c = ranges[i];
        if (c.begin < p.end)
            fail(fname + ": tensor " + quote_name(*c.name) + " bytes [" + std::to_string(c.begin) + ", " +
                 std::to_string(c.end) + ") overlap tensor " + quote_name(*p.name) + " bytes [" +
                 std::to_string(p.begin) + ", " + std::to_string(p.end) +
                 "); expected disjoint data_offsets");
    }

    f.m_tensors = std::move(tensors);
    f.m_metadata = std::move(metadata);
}

result<std::unique_ptr<safetensors_file>> safetensors_file::open(const std::filesystem::path &path) {
    return catch_errors([&]() -> std::unique_ptr<safetensors_file> {
        const std::string fname = path.filename().string();
        std::unique_ptr<safetensors_file> f(new safetensors_file());
        f->m_path = path;

        fd_guard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
        if (fd.fd < 0) fail("cannot open " + path.string() + ": " + std::strerror(errno));
        struct stat st {};
        if (::fstat(fd.fd, &st) != 0) fail("cannot stat " + path.string() + ": " + std::strerror(errno));
        if (!S_ISREG(st.st_mode)) fail(path.string() + " is not a regular file");
        const uint64_t size = uint64_t(st.st_size);
        if (size < 8)
            fail(fname + ": file is truncated: " + std::to_string(size) +
                 " bytes, expected at least 8 (the header length)");

        void *map = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
        if (map == MAP_FAILED) fail("cannot mmap " + path.string() + ": " + std::strerror(errno));
        f->m_map = map; // owned from here: the destructor unmaps even when parsing fails
        f->m_size = size_t(size);
        safetensors_parser::parse(*f);
        return f;
    });
}

safetensors_file::~safetensors_file() {
    if (m_map) ::munmap(m_map, m_size);
}

// ---------------------------------------------------------------------------------------------

namespace {

constexpr const char *k_single_name = "model.safetensors";
constexpr const char *k_index_name = "model.safetensors.index.json";

std::unique_ptr<safetensors_file> open_or_throw(const std::filesystem::path &p) {
    auto r = safetensors_file::open(p);
    if (!r) fail(r.message());
    return std::move(r).value();
}

std::string read_text_file(const std::filesystem::path &p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail("cannot read " + p.string() + ": " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("cannot read " + p.string());
    return ss.str();
}

} // namespace

result<std::unique_ptr<weight_store>> weight_store::open_dir(const std::filesystem::path &dir) {
    return catch_errors([&]() -> std::unique_ptr<weight_store> {
        namespace fs = std::filesystem;
        auto store = std::make_unique<weight_store>();
        std::error_code ec;

        // A single .safetensors file may be given directly.
        if (fs::is_regular_file(dir, ec) && dir.extension() == ".safetensors") {
            store->m_dir = dir.parent_path();
            store->m_files.push_back(open_or_throw(dir));
            store->m_source = dir.filename().string();
        } else {
            if (!fs::is_directory(dir, ec))
                fail("model folder " + dir.string() + " does not exist or is not a folder");
            store->m_dir = dir;
            const fs::path index_path = dir / k_index_name;
            const fs::path single_path = dir / k_single_name;
            if (fs::exists(index_path, ec)) {
                store->m_source = k_index_name;
                const json index = json::parse(read_text_file(index_path), nullptr, false);
                if (index.is_discarded() || !index.is_object())
                    fail(std::string(k_index_name) + ": not a JSON object");
                if (!index.contains("weight_map") || !index["weight_map"].is_object())
                    fail(std::string(k_index_name) +
                         ": missing 'weight_map' object (tensor name -> shard file)");
                std::map<std::string, std::string> weight_map; // tensor -> shard
                std::set<std::string> shards;
                for (const auto &[name, v] : index["weight_map"].items()) {
                    if (!v.is_string())
                        fail(std::string(k_index_name) + ": weight_map entry for tensor " + quote_name(name) +
                             " is " + json_kind(v) + ", expected a shard file name");
                    const std::string shard = v.get<std::string>();
                    if (shard.empty() || shard.find('/') != std::string::npos ||
                        shard.find('\\') != std::string::npos || shard.find("..") != std::string::npos)
                        fail(std::string(k_index_name) + ": shard name " + quote_name(shard) +
                             " for tensor " + quote_name(name) +
                             " is not a plain file name (no '/', '\\' or '..' allowed)");
                    weight_map[name] = shard;
                    shards.insert(shard);
                }
                if (shards.empty()) fail(std::string(k_index_name) + ": weight_map is empty");
                std::map<std::string, const safetensors_file *> by_shard;
                for (const std::string &shard : shards) {
                    const fs::path p = dir / shard;
                    if (!fs::exists(p, ec)) {
                        std::string example;
                        for (const auto &[n, s] : weight_map)
                            if (s == shard) {
                                example = n;
                                break;
                            }
                        fail(std::string(k_index_name) + " names shard " + quote_name(shard) +
                             " (for tensor " + quote_name(example) + "), which does not exist in " +
                             dir.string());
                    }
                    store->m_files.push_back(open_or_throw(p));
                    by_shard[shard] = store->m_files.back().get();
                }
                for (const auto &[name, shard] : weight_map)
                    if (!by_shard[shard]->tensors().count(name))
                        fail(std::string(k_index_name) + " maps tensor " + quote_name(name) + " to " +
                             quote_name(shard) + ", but that shard has no such tensor");
            } else if (fs::exists(single_path, ec)) {
                store->m_files.push_back(open_or_throw(single_path));
                store->m_source = k_single_name;
            } else {
                fail(std::string("no ") + k_single_name + " or " + k_index_name + " in " + dir.string());
            }
        }

        // Index every tensor of every file; the same name in two shards is ambiguous.
        for (const auto &f : store->m_files)
            for (const auto &[name, t] : f->tensors()) {
                auto [it, inserted] = store->m_index.emplace(name, &t);
                if (!inserted)
                    fail("tensor " + quote_name(name) + " is in both " + it->second->file + " and " + t.file +
                         "; expected each tensor in exactly one shard");
            }
        return store;
    });
}

const tensor_view *weight_store::find(const std::string &name) const {
    auto it = m_index.find(name);
    return it == m_index.end() ? nullptr : it->second;
}

size_t weight_store::total_bytes() const {
    size_t n = 0;
    for (const auto &[name, t] : m_index) n += t->n_bytes;
    return n;
}

} // namespace es
