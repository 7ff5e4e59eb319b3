// The self-test's options and report: the types `expertscope-cli selftest` and the module's
// table (cuda_module_abi.h) exchange. The checks themselves live in the module (cuda/selftest/).
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

} // namespace es
