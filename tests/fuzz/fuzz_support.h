// Helpers shared by the libFuzzer targets: a scratch folder per process and whole-file writes
// (the engine's loaders take paths: safetensors files are memory-mapped, model folders are read
// file by file). Inputs are written to tmpfs when there is one, so an iteration costs no disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

namespace es::fuzz {

// A folder only this process uses, created on first use and kept for the process's life (the
// fuzzer exits with _exit; the folder lies under /dev/shm or $TMPDIR and is removed at exit by
// the atexit handler when the run ends normally).
inline const std::filesystem::path &scratch_dir() {
    static const std::filesystem::path dir = [] {
        std::filesystem::path base = "/dev/shm";
        if (!std::filesystem::is_directory(base)) {
            const char *t = std::getenv("TMPDIR");
            base = t && *t ? t : "/tmp";
        }
        auto d = base / ("es-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(scratch_dir(), ec);
        });
        return d;
    }();
    return dir;
}

inline void write_file(const std::filesystem::path &path, std::string_view bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string_view as_text(const uint8_t *data, size_t size) {
    return {reinterpret_cast<const char *>(data), size};
}

// Aborts the run (libFuzzer reports a crash with the input) when a property does not hold.
#define ES_FUZZ_CHECK(cond)                                                                                  \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond);               \
            std::abort();                                                                                    \
        }                                                                                                    \
    } while (0)

} // namespace es::fuzz

namespace es::fuzz {

// A message for bad input names what was wrong: "internal error: …" is what catch_errors() says
// when an exception nobody expected escaped (status.h), so it must never reach the user here.
inline bool is_specific(const std::string &message) {
    return !message.empty() && message.rfind("internal error", 0) == std::string::npos;
}

} // namespace es::fuzz
