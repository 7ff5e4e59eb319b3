// expertscope-cli selftest: "is my GPU set-up right?" Every CUDA kernel against its CPU twin,
// then every reference checkpoint end to end through the CUDA backend against the CPU backend and
// HF's logits. Prints a Markdown table as rows finish; exit 1 on any failure, 0 with "skipped"
// where there is no usable GPU, the CUDA module cannot be loaded or the build has no CUDA. The
// checks run inside the CUDA module (its table's run_selftest).
#include "cli_commands.h"

#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"

#include <cmath>
#include <cstdio>

namespace es::cli {

int cmd_selftest(const selftest_opts &o) {
    const cuda_status_info &st = cuda_status();
    if (!st.available) {
        std::printf("selftest: skipped (%s)\n", st.reason.c_str());
        return 0;
    }
    auto mod = cuda_module();
    if (!mod) return fail(mod.message());
    std::printf("CUDA module %s (runtime %s, driver %s)\n\n", st.module_path.c_str(),
                cuda_version_string(st.runtime_version).c_str(),
                cuda_version_string(st.driver_version).c_str());
    selftest_options so;
    so.data_dir = o.data_dir;
    so.kernels = !o.models_only;
    so.models = !o.kernels_only;
    so.only = o.only;
    bool header = false;
    so.on_row = [&](const selftest_row &r) {
        if (!header) {
            std::printf("| group | test | metric | value | limit | result |\n|---|---|---|---:|---:|---|\n");
            header = true;
        }
        const char *res = r.note == "info" ? "info" : r.pass ? "pass" : "FAIL";
        if (std::isnan(r.value))
            std::printf("| %s | %s | %s | | | %s: %s |\n", r.group.c_str(), r.name.c_str(), r.metric.c_str(), res,
                        r.note.c_str());
        else if (r.note == "info")
            std::printf("| %s | %s | %s | %.4g | | info |\n", r.group.c_str(), r.name.c_str(), r.metric.c_str(), r.value);
        else
            std::printf("| %s | %s | %s | %.4g | %.3g | %s |\n", r.group.c_str(), r.name.c_str(), r.metric.c_str(),
                        r.value, r.limit, res);
        std::fflush(stdout);
    };
    const selftest_report rep = [&] {
        // The report's device line comes first; rows stream after it.
        return (*mod)->run_selftest(so);
    }();
    if (rep.skipped) {
        std::printf("selftest: skipped (no usable GPU: %s)\n", rep.skip_reason.c_str());
        return 0;
    }
    if (rep.rows.empty() && !o.only.empty()) return fail("selftest: no check's name contains '" + o.only + "'");
    int n_fail = 0, n_pass = 0;
    for (const auto &r : rep.rows) (r.pass ? n_pass : n_fail)++;
    std::printf("\nselftest on %s: %d checks, %d failed — %s\n", rep.device.c_str(), n_pass + n_fail, n_fail,
                n_fail ? "FAIL" : "PASS");
    return n_fail ? 1 : 0;
}

} // namespace es::cli
