// Prometheus metrics of the server: request-level histograms and counters kept here (fed once
// per finished request from its request_metrics), engine-level gauges and counters read from the
// latest telemetry snapshot at scrape time, and per-step batch histograms fed by a poller over
// the snapshot's step ring. Names follow vLLM where the concept is the same.
#pragma once

#include "engine/runtime/engine.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace es::server {

class histogram {
public:
    explicit histogram(std::vector<double> bounds) : m_bounds(std::move(bounds)), m_counts(m_bounds.size() + 1, 0) {}
    void observe(double v);
    // Appends the _bucket/_sum/_count lines (cumulative, with +Inf).
    void render(std::string &out, const std::string &name, const std::string &labels) const;

private:
    std::vector<double> m_bounds;
    std::vector<uint64_t> m_counts;  // per bucket, not cumulative; last = above every bound
    double m_sum = 0.0;
    uint64_t m_count = 0;
};

class server_metrics {
public:
    explicit server_metrics(std::string model_name);

    // A request ended (any reason: stop, length, cancelled → abort). Thread-safe.
    void record_request(const request_metrics &m, const std::string &finish_reason, int64_t now_us);
    // A request was answered with this status (any route). Thread-safe.
    void record_answer(int status);
    // Running totals: answers, answers of 400 or more, and the tokens of completions that ended.
    struct totals {
        uint64_t answers = 0, errors = 0, prompt_tokens = 0, generation_tokens = 0;
    };
    totals current_totals() const;
    // New steps from the engine's ring (the poller calls this every few ms). Thread-safe.
    void record_steps(const telemetry_snapshot &s);
    // Prometheus text exposition format 0.0.4.
    std::string render(const telemetry_snapshot *s, int32_t block_size) const;

private:
    std::string m_labels;  // model_name="…"
    mutable std::mutex m_mutex;
    histogram m_ttft, m_itl, m_e2e, m_step_seqs, m_step_tokens;
    uint64_t m_prompt_tokens = 0, m_generation_tokens = 0;
    uint64_t m_answers = 0, m_errors = 0;
    std::map<std::string, uint64_t> m_success;  // finished_reason → count
    uint64_t m_last_step = 0;                   // newest step already recorded
    uint64_t m_steps_seen = 0, m_steps_missed = 0;
};

} // namespace es::server
