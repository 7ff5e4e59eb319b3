// Finding, loading and checking the CUDA module (see cuda_loader.h). dlopen with RTLD_NOW (every
// missing library or symbol fails here, not at the first call) and RTLD_LOCAL (the module's
// symbols stay its own). A module that fails to load is never retried in this process.
#include "engine/cuda/cuda_loader.h"

#include "engine/core/switches.h"
#include "engine/cuda/cuda_module_abi.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#ifndef ES_CUDA_MODULE_BUILT
#define ES_CUDA_MODULE_BUILT 0
#endif
#ifndef ES_INSTALL_LIBDIR
#define ES_INSTALL_LIBDIR "lib"
#endif
#ifndef ES_LIBRARY_ARCHITECTURE
#define ES_LIBRARY_ARCHITECTURE ""
#endif
#ifndef ES_CUDA_TOOLKIT_VERSION
#define ES_CUDA_TOOLKIT_VERSION ""
#endif

namespace es {
namespace {

namespace fs = std::filesystem;

struct loader_state {
    std::once_flag module_once, status_once;
    const es_cuda_module_v1 *linked = nullptr;
    const es_cuda_module_v1 *table = nullptr;
    std::string path, error;
    cuda_status_info status;
};

loader_state &state() {
    static loader_state s;
    return s;
}

std::string dl_error() {
    const char *e = dlerror();
    return e ? e : "unknown error";
}

// Refuses a table from another build: its C++ types may not be ours.
std::string check_table(const es_cuda_module_v1 *t, const std::string &path) {
    if (!t) return path + ": its entry point returned no table";
    if (t->abi_version != ES_CUDA_MODULE_ABI_VERSION)
        return path + " has module ABI " + std::to_string(t->abi_version) + ", this program needs " +
               std::to_string(ES_CUDA_MODULE_ABI_VERSION) +
               " (they come from different builds: install them together)";
    if (t->table_size != sizeof(es_cuda_module_v1))
        return path + " has a " + std::to_string(t->table_size) + "-byte table, this program expects " +
               std::to_string(sizeof(es_cuda_module_v1)) +
               " (they come from different builds: install them together)";
    if (!t->build_id || std::strcmp(t->build_id, ES_CUDA_MODULE_BUILD_ID) != 0)
        return path + " was built as " + (t->build_id ? std::string(t->build_id) : "?") +
               ", this program as " + ES_CUDA_MODULE_BUILD_ID + " (install the module of the same build)";
    if (!t->driver_version || !t->probe || !t->make_backend || !t->make_backend_random ||
        !t->as_cuda_backend || !t->run_selftest)
        return path + ": its table has empty entries";
    return {};
}

void load_module() {
    loader_state &s = state();
    if (s.linked) {
        s.table = s.linked;
        s.path = "(linked into this program)";
        return;
    }
    if (!ES_CUDA_MODULE_BUILT) {
        s.error = "this build has no CUDA backend (no CUDA toolkit was found when it was built)";
        return;
    }
    const std::optional<std::string> env = switch_value("EXPERTSCOPE_CUDA_MODULE");
    const std::vector<std::string> candidates = cuda_module_candidates();
    std::string found;
    for (const auto &c : candidates) {
        std::error_code ec;
        if (fs::is_regular_file(c, ec)) {
            found = c;
            break;
        }
    }
    if (found.empty()) {
        if (env) {
            s.path = *env;
            s.error = "EXPERTSCOPE_CUDA_MODULE names " + *env + ", which is not a file";
            return;
        }
        std::string where;
        for (const auto &c : candidates)
            where += (where.empty() ? "" : ", ") + fs::path(c).parent_path().string();
        s.error = std::string("the CUDA module ") + ES_CUDA_MODULE_FILE + " was not found (looked in " +
                  where + "; set EXPERTSCOPE_CUDA_MODULE to its path)";
        return;
    }
    s.path = found;
    dlerror();
    void *h = dlopen(found.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        std::string e = dl_error();
        s.error = "cannot load the CUDA module " + found + ": " + e;
        if (e.find("libcublas") != std::string::npos || e.find("libcudart") != std::string::npos)
            s.error +=
                " (install the CUDA runtime libraries, e.g. NVIDIA's cuBLAS package, or add their folder to "
                "LD_LIBRARY_PATH)";
        return;
    }
    dlerror();
    auto entry = reinterpret_cast<es_cuda_module_entry_fn>(dlsym(h, ES_CUDA_MODULE_ENTRY));
    if (!entry) {
        s.error =
            found + " is not an ExpertScope CUDA module (no " ES_CUDA_MODULE_ENTRY ": " + dl_error() + ")";
        dlclose(h);
        return;
    }
    const es_cuda_module_v1 *t = entry();
    if (std::string e = check_table(t, found); !e.empty()) {
        s.error = e;
        dlclose(h);
        return;
    }
    s.table = t; // never unloaded: backends it made may live until exit
}

void probe() {
    loader_state &s = state();
    cuda_status_info &st = s.status;
    st.built = ES_CUDA_MODULE_BUILT || s.linked;
    st.toolkit_version = ES_CUDA_TOOLKIT_VERSION;
    auto m = cuda_module();
    st.module_path = s.path;
    if (!m) {
        st.reason = m.message();
        return;
    }
    const es_cuda_module_v1 *t = *m;
    st.module_loaded = true;
    st.runtime_version = t->runtime_version;
    st.architectures = t->architectures ? t->architectures : "";
    std::string why;
    st.driver_version = t->driver_version(&why);
    if (!why.empty()) {
        st.reason = why;
        return;
    }
    auto dev = t->probe(0);
    if (!dev) {
        st.reason = dev.message();
        return;
    }
    st.device = *dev;
    st.available = true;
}

} // namespace

// Here rather than in the module: the CLI's bench prints reports the module's backend made.
std::string cuda_memory_report::to_string() const {
    auto mib = [](size_t b) { return std::to_string((b + (1u << 19)) >> 20) + " MiB"; };
    return "weights " + mib(weights_bytes) +
           (placement_slack_bytes ? " (+ " + mib(placement_slack_bytes) + " placement slack)" : "") +
           ", KV " + mib(kv_bytes) + (kv_cache == kv_cache_dtype::fp8 ? " (FP8)" : "") +
           (kv_capacity_bytes > kv_bytes ? " mapped of " + mib(kv_capacity_bytes) : "") + ", workspace " +
           mib(workspace_bytes) + " (in use " + mib(workspace_in_use_bytes) + ", peak " +
           mib(workspace_peak_bytes) + ", largest free " + mib(workspace_largest_free_bytes) + ", " +
           std::to_string(workspace_segments) + (workspace_segments == 1 ? " segment)" : " segments)") +
           ", cuBLASLt " + mib(library_bytes) + "; device " + mib(device_total_bytes - device_free_bytes) +
           " used of " + mib(device_total_bytes);
}

std::string cuda_version_string(int v) {
    if (v <= 0) return "unknown";
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::vector<std::string> cuda_module_candidates() {
    std::vector<std::string> out;
    if (const auto env = switch_value("EXPERTSCOPE_CUDA_MODULE")) {
        out.push_back(*env);
        return out;
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return out;
    const fs::path dir = exe.parent_path();
    auto add = [&](const fs::path &folder) {
        const std::string p = (folder / ES_CUDA_MODULE_FILE).lexically_normal().string();
        for (const auto &o : out)
            if (o == p) return;
        out.push_back(p);
    };
    const fs::path libdir = ES_INSTALL_LIBDIR;
    add((libdir.is_absolute() ? libdir : dir / ".." / libdir) / "expertscope");
    add(dir / ".." / "lib" / "expertscope");
    if (*ES_LIBRARY_ARCHITECTURE) add(dir / ".." / "lib" / ES_LIBRARY_ARCHITECTURE / "expertscope");
    add(dir);
    return out;
}

result<const es_cuda_module_v1 *> cuda_module() {
    loader_state &s = state();
    std::call_once(s.module_once, load_module);
    if (!s.table) return error{s.error};
    return s.table;
}

const cuda_status_info &cuda_status() {
    loader_state &s = state();
    std::call_once(s.status_once, probe);
    return s.status;
}

std::string cuda_status_info::summary() const {
    if (!available) return "unavailable: " + reason;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s, compute capability %d.%d, %.1f GiB, %d SMs", device.name.c_str(),
                  device.cc_major, device.cc_minor, double(device.total_bytes) / double(1ull << 30),
                  device.n_sm);
    return buf;
}

std::string cuda_version_lines() {
    const cuda_status_info &s = cuda_status();
    std::string out;
    if (!s.built) {
        out += "CUDA: none (built without a CUDA toolkit)\n";
    } else {
        out += "CUDA: toolkit " + (s.toolkit_version.empty() ? std::string("unknown") : s.toolkit_version);
        if (s.module_loaded)
            out += ", runtime " + cuda_version_string(s.runtime_version) + " (in the module), driver " +
                   (s.driver_version ? cuda_version_string(s.driver_version) : std::string("none")) +
                   ", kernels for sm_" + s.architectures;
        out += "\n";
        if (s.module_loaded) out += "CUDA module: " + s.module_path + "\n";
    }
    out += "backends: cpu";
    if (s.available)
        out += ", cuda (" + s.summary() + ")\n";
    else
        out += "; cuda unavailable: " + s.reason + "\n";
    return out;
}

namespace detail {
void use_linked_cuda_module(const es_cuda_module_v1 *table) { state().linked = table; }
} // namespace detail

} // namespace es
