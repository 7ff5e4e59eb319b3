#include "server_metrics.h"

#include <cstdio>

namespace es::server {

void histogram::observe(double v) {
    size_t i = 0;
    while (i < m_bounds.size() && v > m_bounds[i]) ++i;
    ++m_counts[i];
    m_sum += v;
    ++m_count;
}

namespace {

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

std::string with(const std::string &labels, const std::string &extra) {
    if (labels.empty()) return "{" + extra + "}";
    return "{" + labels + "," + extra + "}";
}

void head(std::string &out, const std::string &name, const char *type, const std::string &help) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string &out, const std::string &name, const std::string &labels, double v) {
    out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num(v) + "\n";
}

std::string escape_label(const std::string &s) {
    std::string r;
    for (char c : s) {
        if (c == '\\' || c == '"') r += '\\';
        if (c == '\n') { r += "\\n"; continue; }
        r += c;
    }
    return r;
}

} // namespace

void histogram::render(std::string &out, const std::string &name, const std::string &labels) const {
    uint64_t cum = 0;
    for (size_t i = 0; i < m_bounds.size(); ++i) {
        cum += m_counts[i];
        out += name + "_bucket" + with(labels, "le=\"" + num(m_bounds[i]) + "\"") + " " + std::to_string(cum) + "\n";
    }
    out += name + "_bucket" + with(labels, "le=\"+Inf\"") + " " + std::to_string(m_count) + "\n";
    out += name + "_sum" + (labels.empty() ? "" : "{" + labels + "}") + " " + num(m_sum) + "\n";
    out += name + "_count" + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(m_count) + "\n";
}

// vLLM's buckets; TTFT and ITL get finer leading buckets because a CPU-served small model
// answers well below vLLM's smallest bucket.
server_metrics::server_metrics(std::string model_name)
    : m_labels("model_name=\"" + escape_label(model_name) + "\""),
      m_ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
              80.0, 160.0, 640.0, 2560.0}),
      m_itl({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0}),
      m_e2e({0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
             240.0, 480.0, 960.0, 1920.0, 7680.0}),
      m_step_seqs({1, 2, 4, 8, 16, 32, 64, 128, 256, 512}),
      m_step_tokens({1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}) {}

void server_metrics::record_request(const request_metrics &m, const std::string &finish_reason, int64_t now_us) {
    std::lock_guard lock(m_mutex);
    m_prompt_tokens += uint64_t(std::max(0, m.n_prompt_tokens));
    m_generation_tokens += m.token_times_us.size();
    if (m.t_first_token_us >= 0) m_ttft.observe((m.t_first_token_us - m.t_submit_us) / 1e6);
    for (size_t k = 1; k < m.token_times_us.size(); ++k) m_itl.observe((m.token_times_us[k] - m.token_times_us[k - 1]) / 1e6);
    const int64_t t_end = m.t_finish_us >= 0 ? m.t_finish_us : now_us;
    m_e2e.observe(double(std::max<int64_t>(0, t_end - m.t_submit_us)) / 1e6);
    ++m_success[finish_reason == "stop" || finish_reason == "length" ? finish_reason : "abort"];
}

void server_metrics::record_answer(int status) {
    std::lock_guard lock(m_mutex);
    ++m_answers;
    if (status >= 400) ++m_errors;
}

server_metrics::totals server_metrics::current_totals() const {
    std::lock_guard lock(m_mutex);
    return {m_answers, m_errors, m_prompt_tokens, m_generation_tokens};
}

void server_metrics::record_steps(const telemetry_snapshot &s) {
    std::lock_guard lock(m_mutex);
    uint64_t first_new = 0;
    bool any = false;
    for (const step_record &r : s.recent_steps) {
        if (r.step <= m_last_step && m_steps_seen > 0) continue;
        if (!any) first_new = r.step;
        any = true;
        m_step_seqs.observe(r.n_seqs);
        m_step_tokens.observe(r.n_prefill_tokens + r.n_decode_tokens);
        ++m_steps_seen;
        m_last_step = r.step;
    }
    (void)first_new;
    if (s.n_steps > m_steps_seen + m_steps_missed) m_steps_missed = s.n_steps - m_steps_seen;
}

std::string server_metrics::render(const telemetry_snapshot *s, int32_t block_size) const {
    std::string out;
    out.reserve(16384);
    const std::string &L = m_labels;
    if (s) {
        head(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
        sample(out, "vllm:num_requests_running", L, s->n_running);
        head(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
        sample(out, "vllm:num_requests_waiting", L, s->n_waiting);
        const auto &m = s->memory;
        head(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage (blocks held by requests).");
        sample(out, "vllm:kv_cache_usage_perc", L, m.kv_blocks_total > 0 ? double(m.kv_blocks_used) / m.kv_blocks_total : 0.0);
        head(out, "vllm:prefix_cache_queries_total", "counter",
             "Prefix cache queries, in tokens (whole KV blocks looked up x block_size).");
        sample(out, "vllm:prefix_cache_queries_total", L, double(s->prefix_queries) * block_size);
        head(out, "vllm:prefix_cache_hits_total", "counter",
             "Prefix cache hits, in tokens (whole KV blocks found x block_size).");
        sample(out, "vllm:prefix_cache_hits_total", L, double(s->prefix_hits) * block_size);
    }
    std::lock_guard lock(m_mutex);
    head(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed (requests that ended).");
    sample(out, "vllm:prompt_tokens_total", L, double(m_prompt_tokens));
    head(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed (requests that ended).");
    sample(out, "vllm:generation_tokens_total", L, double(m_generation_tokens));
    head(out, "vllm:request_success_total", "counter", "Count of finished requests by finish reason (abort: cancelled or disconnected).");
    for (const char *reason : {"stop", "length", "abort"}) {
        auto it = m_success.find(reason);
        sample(out, "vllm:request_success_total", L + ",finished_reason=\"" + reason + "\"",
               double(it == m_success.end() ? 0 : it->second));
    }
    head(out, "expertscope:http_answers_total", "counter",
         "Requests answered by the routes (any status; the gate's own 4xx/503 answers are counted apart).");
    sample(out, "expertscope:http_answers_total", L, double(m_answers));
    head(out, "expertscope:http_answer_errors_total", "counter", "Requests answered by the routes with a status of 400 or more.");
    sample(out, "expertscope:http_answer_errors_total", L, double(m_errors));
    head(out, "vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.");
    m_ttft.render(out, "vllm:time_to_first_token_seconds", L);
    head(out, "vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.");
    m_itl.render(out, "vllm:inter_token_latency_seconds", L);
    head(out, "vllm:e2e_request_latency_seconds", "histogram", "Histogram of end to end request latency in seconds.");
    m_e2e.render(out, "vllm:e2e_request_latency_seconds", L);
    head(out, "vllm:iteration_tokens_total", "histogram", "Histogram of the number of tokens per engine step (steps seen by the server's poller).");
    m_step_tokens.render(out, "vllm:iteration_tokens_total", L);
    head(out, "expertscope:step_sequences", "histogram",
         "Histogram of the number of sequences batched in one engine step (steps seen by the server's poller).");
    m_step_seqs.render(out, "expertscope:step_sequences", L);
    head(out, "expertscope:steps_unobserved_total", "counter", "Engine steps that left the telemetry ring before the poller saw them.");
    sample(out, "expertscope:steps_unobserved_total", L, double(m_steps_missed));
    if (!s) return out;

    const auto &m = s->memory;
    head(out, "expertscope:memory_bytes", "gauge",
         "Memory by kind: weights, KV cache used, mapped (the pool's memory now) and total (its capacity), backend "
         "workspace in use.");
    sample(out, "expertscope:memory_bytes", L + ",kind=\"weights\"", double(m.weights_bytes));
    sample(out, "expertscope:memory_bytes", L + ",kind=\"kv_used\"", double(m.kv_block_bytes) * m.kv_blocks_used);
    sample(out, "expertscope:memory_bytes", L + ",kind=\"kv_mapped\"", double(m.kv_mapped_bytes));
    sample(out, "expertscope:memory_bytes", L + ",kind=\"kv_total\"", double(m.kv_block_bytes) * m.kv_blocks_total);
    sample(out, "expertscope:memory_bytes", L + ",kind=\"workspace\"", double(m.alloc_in_use));
    head(out, "expertscope:memory_fragmentation", "gauge", "Backend allocator fragmentation: 1 - largest free / total free.");
    sample(out, "expertscope:memory_fragmentation", L, m.fragmentation);
    head(out, "expertscope:kv_cache_waste", "gauge", "1 - tokens stored / (KV blocks used x block size).");
    sample(out, "expertscope:kv_cache_waste", L, m.kv_waste);
    head(out, "expertscope:kv_blocks", "gauge",
         "KV blocks by state (used: held by requests; cached: carrying a prefix hash; mapped: with memory behind them).");
    sample(out, "expertscope:kv_blocks", L + ",state=\"total\"", m.kv_blocks_total);
    sample(out, "expertscope:kv_blocks", L + ",state=\"mapped\"", m.kv_blocks_mapped);
    sample(out, "expertscope:kv_blocks", L + ",state=\"used\"", m.kv_blocks_used);
    sample(out, "expertscope:kv_blocks", L + ",state=\"cached\"", m.kv_blocks_cached);
    head(out, "expertscope:engine_steps_total", "counter", "Engine steps since the model was loaded.");
    sample(out, "expertscope:engine_steps_total", L, double(s->n_steps));
    head(out, "expertscope:expert_tokens_total", "counter",
         "Token positions routed to each expert since the model was loaded (layer: decoder layer index).");
    const size_t n_e = size_t(std::max(0, s->n_expert));
    for (size_t slot = 0; slot < s->moe_layers.size(); ++slot)
        for (size_t e = 0; e < n_e && slot * n_e + e < s->expert_tokens.size(); ++e)
            sample(out, "expertscope:expert_tokens_total",
                   L + ",layer=\"" + std::to_string(s->moe_layers[slot]) + "\",expert=\"" + std::to_string(e) + "\"",
                   double(s->expert_tokens[slot * n_e + e]));
    return out;
}

} // namespace es::server
