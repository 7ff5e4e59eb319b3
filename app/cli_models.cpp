// expertscope-cli download / models: models from the Hugging Face hub into its cache, and the
// models found there (models/, es_models). Progress goes to stderr; stdout has what a script
// wants: the snapshot folder a download made, or the list.
#include "cli_commands.h"

#include "app/models/hub_cache.h"
#include "app/models/hub_download.h"
#include "app/models/model_catalogue.h"

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <set>

namespace es::cli {

namespace {

using namespace es::models;

std::string params_text(int64_t n) {
    char buf[32];
    std::snprintf(buf, sizeof buf, n >= 1000000000 ? "%.1fB" : "%.0fM",
                  n >= 1000000000 ? double(n) / 1e9 : double(n) / 1e6);
    return buf;
}

std::string duration_text(double s) {
    if (s < 0) return "--:--";
    const long t = long(s + 0.5);
    char buf[32];
    if (t >= 3600)
        std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
    return buf;
}

// "BF16 fits, FP8 fits" from the verdicts (what the estimate could not say, as "?").
std::string fit_text(const std::vector<fit_verdict> &v) {
    std::string s;
    for (const fit_verdict &f : v) {
        if (!s.empty()) s += ", ";
        s += f.precision + (!f.ok ? " ?" : f.fits ? " fits" : " does not fit");
    }
    return s;
}

nlohmann::json fit_json(const std::vector<fit_verdict> &v) {
    nlohmann::json j = nlohmann::json::object();
    for (const fit_verdict &f : v) {
        nlohmann::json e = {{"fits", f.ok ? nlohmann::json(f.fits) : nlohmann::json(nullptr)},
                            {"summary", f.summary}};
        if (f.ok)
            e.update({{"device", f.estimate.device},
                      {"weights_bytes", f.estimate.weights_bytes},
                      {"kv_bytes", f.estimate.kv_bytes},
                      {"available_bytes", f.estimate.available_bytes}});
        j[f.precision == "FP8" ? "fp8" : "bf16"] = e;
    }
    return j;
}

engine_params estimate_params(const std::string &backend) {
    engine_params p;
    p.load.kind = backend == "cpu"    ? backend_kind::cpu
                  : backend == "cuda" ? backend_kind::cuda
                                      : backend_kind::automatic;
    return p;
}

// The progress line: rewritten in place on a terminal, else one line every 10% of the bytes and
// at each file (logs stay short).
class progress_printer {
public:
    progress_printer() : m_tty(::isatty(STDERR_FILENO) == 1) {}
    void operator()(const download_progress &p) {
        if (p.what != download_progress::stage::downloading && p.what != download_progress::stage::verifying)
            return;
        const int percent = p.total ? int(100.0 * double(p.done) / double(p.total)) : 100;
        char line[512];
        std::snprintf(line, sizeof line, "[%3d%%] %s (%d/%d) %s / %s  %s/s  %s left%s", percent,
                      p.file.c_str(), p.file_index, p.file_count, human_bytes(p.done).c_str(),
                      human_bytes(p.total).c_str(), human_bytes(uint64_t(p.bytes_per_second)).c_str(),
                      duration_text(p.seconds_left).c_str(),
                      p.what == download_progress::stage::verifying ? "  verifying" : "");
        if (m_tty) {
            std::fprintf(stderr, "\r%-110s", line);
            m_open = true;
        } else if (p.file_index != m_file || percent / 10 != m_decile) {
            std::fprintf(stderr, "%s\n", line);
        }
        m_file = p.file_index;
        m_decile = percent / 10;
    }
    void end() {
        if (m_open) std::fprintf(stderr, "\n");
        m_open = false;
    }

private:
    bool m_tty, m_open = false;
    int m_file = -1, m_decile = -1;
};

} // namespace

int cmd_download(const download_opts &d) {
    download_options o;
    o.repo_id = d.repo;
    o.revision = d.revision;
    o.hub = hub_settings_from_environment();
    if (!d.endpoint.empty()) o.hub.endpoint = d.endpoint;
    while (o.hub.endpoint.size() > 1 && o.hub.endpoint.back() == '/') o.hub.endpoint.pop_back();
    if (!d.cache_dir.empty()) o.hub.cache_dir = d.cache_dir;
    const engine_params params = estimate_params(d.backend);
    o.on_plan = [&](const download_plan &plan) {
        std::fprintf(stderr, "%s at %s (commit %s): %zu files, %s; %s to download into %s\n", d.repo.c_str(),
                     d.revision.c_str(), plan.listing.commit.c_str(), plan.files.size(),
                     human_bytes(plan.total_bytes).c_str(), human_bytes(plan.missing_bytes).c_str(),
                     o.hub.cache_dir.string().c_str());
        const model_config &c = plan.config;
        std::fprintf(stderr, "%s, %s parameters (%s active); here: %s\n", c.arch_name.c_str(),
                     params_text(c.n_params()).c_str(), params_text(c.n_params_active()).c_str(),
                     fit_text(fit_at_each_precision(c, params)).c_str());
        return true;
    };
    progress_printer printer;
    o.on_progress = [&](const download_progress &p) { printer(p); };
    auto r = download_model(o);
    printer.end();
    if (!r) return fail(r.message());
    std::fprintf(stderr, "%d files downloaded (%s), %d already in the cache%s; every file verified\n",
                 r->files_fetched, human_bytes(r->fetched_bytes).c_str(), r->files_cached,
                 r->resumed_from_bytes
                     ? (", resumed from " + human_bytes(r->resumed_from_bytes) + " on disk").c_str()
                     : "");
    std::printf("%s\n", r->snapshot_dir.string().c_str());
    return 0;
}

int cmd_models(const models_opts &m) {
    hub_settings hub = hub_settings_from_environment();
    if (!m.cache_dir.empty()) hub.cache_dir = m.cache_dir;
    const engine_params params = estimate_params(m.backend);
    const std::vector<cached_model> found = scan_cache(hub.cache_dir);
    nlohmann::json out = {{"cache", hub.cache_dir.string()}, {"models", nlohmann::json::array()}};
    std::set<std::string> loadable_repos;
    if (!m.json) std::printf("Models in %s:\n", hub.cache_dir.string().c_str());
    for (const cached_model &c : found) {
        std::vector<fit_verdict> fit;
        if (c.loadable) {
            fit = fit_at_each_precision(c.dir, params);
            loadable_repos.insert(c.repo_id);
        }
        std::string refs;
        for (const std::string &r : c.refs) refs += (refs.empty() ? "" : ",") + r;
        if (m.json) {
            nlohmann::json j = {{"repo", c.repo_id},      {"commit", c.commit}, {"refs", c.refs},
                                {"path", c.dir.string()}, {"bytes", c.bytes},   {"loadable", c.loadable}};
            if (c.config)
                j.update({{"architecture", c.config->arch_name},
                          {"params", c.config->n_params()},
                          {"active_params", c.config->n_params_active()}});
            if (!c.loadable)
                j["problem"] = c.problem;
            else
                j["fit"] = fit_json(fit);
            out["models"].push_back(j);
            continue;
        }
        std::printf("  %s @ %s (%s)  %s", c.repo_id.c_str(),
                    refs.empty() ? c.commit.substr(0, 12).c_str() : refs.c_str(),
                    c.commit.substr(0, 12).c_str(), human_bytes(c.bytes).c_str());
        if (c.config) std::printf(", %s parameters", params_text(c.config->n_params()).c_str());
        if (c.loadable)
            std::printf("; %s\n", fit_text(fit).c_str());
        else
            std::printf("; not loadable: %s\n", c.problem.c_str());
        std::printf("    %s\n", c.dir.string().c_str());
    }
    if (!m.json && found.empty()) std::printf("  (none)\n");
    if (m.available) {
        if (!m.json) std::printf("ERNIE-4.5 checkpoints on the hub (sizes from their shapes):\n");
        out["available"] = nlohmann::json::array();
        for (const catalogue_entry &e : ernie_catalogue()) {
            const auto fit = fit_at_each_precision(e.config, params);
            const bool have = loadable_repos.count(e.repo_id) > 0;
            if (m.json) {
                out["available"].push_back({{"repo", e.repo_id},
                                            {"kind", e.kind},
                                            {"base", e.base},
                                            {"params", e.params},
                                            {"active_params", e.active_params},
                                            {"download_bytes", e.download_bytes},
                                            {"multi_gpu", e.multi_gpu},
                                            {"downloaded", have},
                                            {"fit", fit_json(fit)}});
                continue;
            }
            std::printf("  %-34s %s, %s parameters (%s active), about %s; %s%s%s\n", e.repo_id.c_str(),
                        e.kind.c_str(), params_text(e.params).c_str(), params_text(e.active_params).c_str(),
                        human_bytes(e.download_bytes).c_str(),
                        e.multi_gpu ? "needs several GPUs" : fit_text(fit).c_str(),
                        have ? "; downloaded" : "", e.base ? "; pre-trained only" : "");
        }
    }
    if (m.json) std::cout << out.dump(2) << "\n";
    return 0;
}

} // namespace es::cli
