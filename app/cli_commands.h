// expertscope-cli subcommands. Each returns a process exit code; errors are printed as one line
// on stderr naming the file, tensor or key and what was expected.
#pragma once

#include "engine/backend/backend.h"
#include "engine/core/status.h"
#include "engine/model/model_config.h"
#include "engine/runtime/model.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace es {
class backend;
}

namespace es::cli {

struct common_opts {
    std::string backend = "cpu";   // cpu | cuda | auto
    int threads = 0;
    std::string precision = "bf16"; // CUDA weights: bf16 | fp8
    std::string activations = "e4m3"; // CUDA, fp8 weights, prefill-sized steps: e4m3 | e5m2 | bf16
    bool fp8_head = false;            // CUDA, fp8 weights: the head in E4M3 too
    bool bf16_attn_out = false;       // CUDA, fp8 weights: o_proj kept BF16
    std::string kv_cache = "bf16";    // CUDA: KV cache elements, bf16 | fp8 (E4M3)
    std::string fp8_scales = "channel"; // CUDA, fp8 weights: channel | block128 (one scale per 128×128)
    double gpu_memory_utilization = 0.90; // CUDA: the device's share weights, workspace and KV pool may fill
    // logits, generate: an expert intervention (engine/backend/routing_intervention.h)
    std::string disable_experts, force_experts; // "L:E,…" (L: layer index or *)
    int32_t moe_top_k = 0;                      // 0: the model's moe_k
    float expert_bias_scale = 1.0f;             // scales e_score_correction_bias in the selection
};

// The intervention the options describe (checked against the model when it is used); errors
// name the option.
result<routing_intervention> to_routing_intervention(const common_opts &o);

// --fp8-head / --bf16-attn-out as the engine's per-layer precision policy.
inline fp8_policy to_fp8_policy(const common_opts &o) {
    fp8_policy p;
    p.head = o.fp8_head;
    p.attn_out = !o.bf16_attn_out;
    p.scales = o.fp8_scales == "block128" ? scale_layout::block128 : scale_layout::channel;
    return p;
}

// --activations as the engine's enum (the CLI checks the word).
inline activation_format to_activation_format(const std::string &s) {
    return s == "e5m2"   ? activation_format::e5m2
           : s == "bf16" ? activation_format::bf16
                         : activation_format::e4m3;
}

// --kv-cache as the engine's enum (the CLI checks the word).
inline kv_cache_dtype to_kv_cache_dtype(const std::string &s) {
    return s == "fp8" ? kv_cache_dtype::fp8 : kv_cache_dtype::bf16;
}

int cmd_info(const std::string &model_dir, bool json);
// The runtime switches (engine/core/switches.h) as a table, or JSON.
int cmd_switches(bool json);
int cmd_logits(const std::string &model_dir, const std::string &ids, const std::string &out, const common_opts &o);

struct generate_opts {
    std::string model_dir, prompt, system;
    bool chat = false, raw_ids = false;
    std::optional<float> temperature, top_p, min_p, repetition_penalty;
    std::optional<int32_t> top_k;
    std::optional<uint64_t> seed;
    int32_t max_tokens = 256;
};
int cmd_generate(const generate_opts &g, const common_opts &o);

struct bench_opts {
    std::string shape, model_dir, out_json;
    int32_t layers = 0;            // 0: the shape's own depth
    std::vector<int32_t> pp{512};  // prefill lengths
    int32_t tg = 128;              // decode tokens
    int32_t reps = 3;
    bool profile = false;          // CUDA: GPU time per kernel for one prefill and 32 decode steps
    bool timeline = false;         // CUDA: release time of each kernel of the last decode graph (one replay)
    std::vector<int32_t> batch;    // CUDA: decode batch sizes (B sequences of 128-token prompts)
    std::vector<int32_t> depth;    // CUDA: decode of tg tokens after a context of each of these lengths
    float temperature = 0.8f, top_p = 0.8f; // CUDA: the "tg sampled" row's sampler
    std::string report, report_format; // also render the --json results as a report (builds with Qt)
};
int cmd_bench(const bench_opts &b, const common_opts &o);

// bench --json as a report input (app/cli_bench_report.cpp; the CPU's name and the model's content
// hash come from app/models/provenance.h): one instrumented request (a prefill of pp tokens, then
// decode steps up to tg tokens) with its steps, token times, memory and expert counts.
// Re-initializes the KV cache.
result<nlohmann::json> bench_request_profile(backend &be, int32_t pp, int32_t tg);
// Writes o.out_json (format expertscope.bench v2): the fields every backend reports (model, name,
// content hash, seed, backend, weights, version, the instrumented request, `results`) plus the
// backend's own `extra` fields. Returns a process exit code.
int write_bench_json(const bench_opts &o, const std::string &what, backend &be, const nlohmann::json &results,
                     nlohmann::json extra);

struct serve_bench_opts {
    std::string shape, model_dir, out_json;
    int32_t layers = 0;
    int32_t requests = 32;
    std::vector<int32_t> concurrency{1, 4, 16};
    int32_t prompt_len = 128, output_len = 64, shared_prefix = 64;
    int32_t max_batched_tokens = 0; // 0: the engine's choice for the backend (engine_params)
    uint64_t seed = 0;
    float temperature = 0.0f, top_p = 1.0f; // every request's sampler (the engine's path; 0: greedy)
    std::string url;               // http://HOST:PORT: act as an HTTP client of `serve` instead
    std::string api_key;           // with --url
    int32_t phase_timing = -1;     // engine_params::phase_timing_every (-1: the engine's default)
};
int cmd_serve_bench(const serve_bench_opts &o, const common_opts &common);

// serve-bench --url (app/cli_serve_bench_http.cpp): streaming clients of an OpenAI server.
int cmd_serve_bench_http(const serve_bench_opts &o);

// serve (app/cli_serve.cpp): the OpenAI-compatible HTTP server (app/server).
struct serve_opts {
    std::string model_dir, host = "127.0.0.1", api_key, served_model_name;
    std::string shape;         // random weights of a real shape instead of --model
    int32_t layers = 0;        // with --shape: 0, the shape's own depth
    uint64_t kv_cache_mib = 0; // 0: the engine's default
    uint64_t kv_cache_min_mib = 0; // of a KV pool mapped on demand (GPU), kept mapped when idle
    int port = 8000;
    size_t max_body_bytes = 1 << 20;
    int64_t max_prompt_tokens = 0;
    int32_t max_num_seqs = 16;
    // Client bounds (server_options in app/server/api_server.h has the meanings).
    double header_timeout = 10, body_timeout = 30, keep_alive_timeout = 5, write_timeout = 30;
    size_t max_connections = 512, max_connections_per_client = 128;
    std::vector<std::string> allowed_origins;
    bool insecure_no_api_key = false;
};
int cmd_serve(const serve_opts &o, const common_opts &common);

// report and import (app/cli_report.cpp; only in builds with Qt, ES_CLI_HAVE_REPORT).
struct report_opts {
    std::string db, bench_json, format, out;
    int64_t conversation = 0, message = 0, bench = 0;
};
int cmd_report(const report_opts &o);
struct import_opts {
    std::string db, chat, bench_json;
};
int cmd_import(const import_opts &o);

// eval (app/cli_eval.cpp): a weight precision against a baseline on the same tokens — KL, top-1
// agreement, logits NMSE, router expert-set overlap per MoE layer.
struct eval_opts {
    std::string model_dir, text_file, out_json;
    std::string precision = "fp8", baseline = "exact"; // exact (CPU reference) | bf16 | fp8
    int64_t ctx = 256, windows = 4;
    uint64_t seed = 0;
};
int cmd_eval(const eval_opts &e, const common_opts &o);

// Teacher-forced logits of one sequence from position 0 through a fresh KV cache sized to it
// (logits and eval): every position's logits and the router's decisions.
status forward_sequence(backend &be, const std::vector<int32_t> &ids, forward_output &out,
                        std::shared_ptr<const routing_intervention> routing = nullptr);

// A real benchmark shape with `layers` layers (0: its own depth), validated.
result<model_config> bench_shape_config(const std::string &shape, int32_t layers);

// bench --backend cuda (app/cli_bench_cuda.cpp): random weights built on the GPU, pp/tg, MBU.
int cmd_bench_cuda(const bench_opts &b, const common_opts &o);

// selftest (app/cli_selftest.cpp): kernels against CPU twins, reference checkpoints end to end.
struct selftest_opts {
    std::string data_dir = "tests/data";
    bool kernels_only = false, models_only = false;
    std::string only; // --only
};
int cmd_selftest(const selftest_opts &o);

// routing (app/cli_routing.cpp): per-layer Jensen–Shannon divergence between the expert
// shares of two prompt sets (e.g. the two mode prefixes), from the engine's routing traces.
struct routing_opts {
    std::string model_dir, prompts_a, prompts_b, out_json, system_a, system_b;
    int32_t max_tokens = 1;        // greedy tokens generated per prompt (their positions count too)
    bool generated_only = false;   // count only generated positions, not the prompt's
};
int cmd_routing(const routing_opts &o, const common_opts &common);

// download and models (app/cli_models.cpp): a hub repo into the hub cache (HF_ENDPOINT, HF_TOKEN,
// HF_HUB_CACHE), and the models found there with their size and will-it-fit verdicts.
struct download_opts {
    std::string repo, revision = "main";
    std::string endpoint;  // empty: HF_ENDPOINT, else https://huggingface.co
    std::string cache_dir; // empty: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
    std::string backend = "auto"; // where the will-it-fit estimate assumes it loads
};
int cmd_download(const download_opts &d);
struct models_opts {
    std::string cache_dir, backend = "auto";
    bool json = false, available = false;
};
int cmd_models(const models_opts &m);

// Prints "error: <msg>" to stderr and returns 1.
int fail(const std::string &msg);
// Percentile q (0–100) by linear interpolation between closest ranks (numpy's default, as the
// profiler's); 0 for no values. And the mean (0 for none).
double percentile(std::vector<double> v, double q);
double mean(const std::vector<double> &v);

} // namespace es::cli
