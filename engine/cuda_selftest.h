// The CUDA self-test behind `expertscope-cli selftest` and the gpu-labelled test: every kernel
// against its CPU twin on random inputs including edge shapes (tolerances fitted to the dtype),
// then end-to-end logits of every reference checkpoint through the CUDA backend (BF16, and FP8
// with E4M3 and E5M2 prefill activations; prefill chunks and token-by-token decode) against the
// twin model, the CPU backend and the HF goldens.
// Declared always; defined in es_cuda_backend (CUDA builds). The app reaches it through the module's
// table (cuda_module_abi.h), the gpu-labelled tests by linking es_cuda_backend.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace es {

struct selftest_row {
    std::string group;   // "kernel", "model"
    std::string name;    // "gemv fp8 M=3 N=1000 K=40"
    std::string metric;  // "max scaled err", "NMSE vs HF", …
    double value = 0.0, limit = 0.0;
    bool pass = false;
    std::string note;    // "info" rows never fail; errors in words
};

struct selftest_options {
    std::filesystem::path data_dir;                   // reference checkpoints (tests/data); empty: skip models
    bool kernels = true, models = true;
    std::string only; // non-empty: only the checks whose name contains it
    std::function<void(const selftest_row &)> on_row; // streaming output as rows finish
};

struct selftest_report {
    bool skipped = false;
    std::string skip_reason, device;
    std::vector<selftest_row> rows;
    bool ok() const {
        for (const auto &r : rows)
            if (!r.pass) return false;
        return true;
    }
};

selftest_report run_cuda_selftest(const selftest_options &o);

} // namespace es
