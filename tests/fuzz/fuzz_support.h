// Helpers shared by the libFuzzer targets: a scratch folder per process and whole-file writes
// (the engine's loaders take paths: safetensors files are memory-mapped, model folders are read
// file by file). Inputs are written to tmpfs when there is one, so an iteration costs no disk.
#pragma once

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <sys/types.h>
#include <unistd.h>

namespace es::fuzz {

// A folder only this process uses, under /dev/shm (else $TMPDIR or /tmp), created on first use.
// libFuzzer ends a run with _Exit, so no exit handler removes it: instead each process removes
// the folders of processes that no longer exist when it creates its own.
inline const std::filesystem::path &scratch_dir() {
    static const std::filesystem::path *dir = [] {
        std::filesystem::path base = "/dev/shm";
        if (!std::filesystem::is_directory(base)) {
            const char *t = std::getenv("TMPDIR");
            base = t && *t ? t : "/tmp";
        }
        const std::string prefix = "es-fuzz-";
        std::error_code ec;
        for (const auto &e : std::filesystem::directory_iterator(base, ec)) {
            const std::string name = e.path().filename().string();
            if (name.rfind(prefix, 0) != 0) continue;
            const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
            if (pid > 0 && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
                std::filesystem::remove_all(e.path(), ec);
        }
        auto *d = new std::filesystem::path(base / (prefix + std::to_string(::getpid()))); // never freed
        std::filesystem::create_directories(*d);
        return d;
    }();
    return *dir;
}

inline void write_file(const std::filesystem::path &path, std::string_view bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string_view as_text(const uint8_t *data, size_t size) {
    return {reinterpret_cast<const char *>(data), size};
}

// A message for bad input names what was wrong: "internal error: …" is what catch_errors() says
// when an exception nobody expected escaped (status.h), so it must never reach the user here.
inline bool is_specific(const std::string &message) {
    return !message.empty() && message.rfind("internal error", 0) == std::string::npos;
}

} // namespace es::fuzz

// Aborts the run (libFuzzer reports a crash with the input) when a property does not hold.
#define ES_FUZZ_CHECK(cond)                                                                                  \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond);               \
            std::abort();                                                                                    \
        }                                                                                                    \
    } while (0)
