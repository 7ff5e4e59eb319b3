// expertscope-cli: the headless face of the engine (Qt-free). Subcommands: info, logits,
// generate, bench, …; `report` and `import` only in builds with Qt (ES_CLI_HAVE_REPORT). The `logits`
// interface is stable: checks outside the test suite rely on it.
#include "cli_commands.h"
#include "engine/cuda/cuda_loader.h"
#include "es_build_info.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <optional>

namespace {

using namespace es::cli;

// Every subcommand's options, filled in by parsing. The subcommands bind references into it, so
// it stays where it was made.
struct cli_options {
    common_opts common;
    std::string model_dir; // info, logits
    bool info_json = false;
    std::string ids, out; // logits
    generate_opts generate;
    bench_opts bench;
    serve_bench_opts serve_bench;
    serve_opts serve;
    routing_opts routing;
    eval_opts eval;
    selftest_opts selftest;
    bool switches_json = false;
    download_opts download;
    models_opts models;
#if ES_CLI_HAVE_REPORT
    report_opts report;
    import_opts import;
#endif
};

// The subcommands, to tell which one the command line named.
struct cli_commands {
    CLI::App *info = nullptr, *logits = nullptr, *generate = nullptr, *bench = nullptr, *serve_bench = nullptr,
             *serve = nullptr, *routing = nullptr, *eval = nullptr, *selftest = nullptr, *switches = nullptr,
             *download = nullptr, *models = nullptr;
#if ES_CLI_HAVE_REPORT
    CLI::App *report = nullptr, *import = nullptr;
#endif
};

const char *const k_kv_cache_help =
    "CUDA: KV cache elements, bf16 | fp8 (E4M3, scale 1.0 as vLLM's kv_cache_dtype=fp8: "
    "half the KV memory, twice the context or sequences)";
// The activations of FP8 linears in steps of more than 8 tokens (prefill, batched decode).
const char *const k_activations_help =
    "CUDA, --precision fp8: activations of steps of more than 8 tokens, quantized per "
    "token to e4m3 | e5m2 for FP8 GEMMs, or bf16 (weights dequantized); decode-sized "
    "steps always use bf16";

// --version: evaluated only when given, as it loads the CUDA module and probes the GPU.
void set_version_flag(CLI::App &app) {
    app.set_version_flag("--version", std::function<std::string()>([] {
                             std::string v = std::string("expertscope-cli ") + ES_VERSION + " (commit " +
                                             ES_GIT_COMMIT + ")\nQt: not used (the CLI is Qt-free)\n" +
                                             es::cuda_version_lines();
                             v.pop_back(); // CLI11 ends the text with its own newline
                             return v;
                         }));
}

// --backend, --threads, --precision, --kv-cache. cpu_fp32: --precision fp32 too (bench: the CPU
// backend's weights held in fp32, the baseline of its BF16 and E4M3 storage).
void add_common_options(CLI::App &sub, common_opts &common, bool cpu_fp32 = false) {
    sub.add_option("--backend", common.backend, "cpu | cuda | auto")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
        ->default_val("cpu");
    sub.add_option("--threads", common.threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
    if (cpu_fp32)
        sub.add_option(
               "--precision", common.precision,
               "weights: bf16 | fp8 (E4M3, per-channel scales); on the CPU the weights are held so, fp32 "
               "also (the CPU backend only)")
            ->check(CLI::IsMember({"bf16", "fp8", "fp32"}))
            ->default_val("bf16");
    else
        sub.add_option("--precision", common.precision, "CUDA weights: bf16 | fp8 (E4M3, per-channel scales)")
            ->check(CLI::IsMember({"bf16", "fp8"}))
            ->default_val("bf16");
    sub.add_option("--kv-cache", common.kv_cache, k_kv_cache_help)
        ->check(CLI::IsMember({"bf16", "fp8"}))
        ->default_val("bf16");
}

// Commands that run the engine: the GPU's share that sizes the KV pool (engine_params).
void add_gpu_memory_option(CLI::App &sub, common_opts &common) {
    sub.add_option("--gpu-memory-utilization", common.gpu_memory_utilization,
                   "CUDA: the share of the GPU's memory the weights, workspace and KV cache may fill "
                   "together; the KV cache takes what the others leave (default 0.90; memory other "
                   "processes hold counts as used)")
        ->check(CLI::Range(0.05, 1.0))
        ->default_val(0.90);
}

void add_fp8_scales_option(CLI::App &sub, common_opts &common) {
    sub.add_option("--fp8-scales", common.fp8_scales,
                   "CUDA, --precision fp8: the weights' fp32 scales, channel (one per output channel) | "
                   "block128 (one per 128x128 block; prefill-sized steps then dequantize to BF16)")
        ->check(CLI::IsMember({"channel", "block128"}))
        ->default_val("channel");
}

// --activations and the per-layer precision policy (the router is always fp32), then --fp8-scales.
void add_activation_options(CLI::App &sub, common_opts &common) {
    sub.add_option("--activations", common.activations, k_activations_help)
        ->check(CLI::IsMember({"e4m3", "e5m2", "bf16"}))
        ->default_val("e4m3");
    sub.add_flag("--fp8-head", common.fp8_head, "CUDA, --precision fp8: the LM head in E4M3 too (default BF16)");
    sub.add_flag("--bf16-attn-out", common.bf16_attn_out,
                 "CUDA, --precision fp8: keep the attention output projections BF16 (default E4M3)");
    add_fp8_scales_option(sub, common);
}

// logits, generate: an expert intervention (engine/backend/routing_intervention.h).
void add_intervention_options(CLI::App &sub, common_opts &common) {
    sub.add_option("--disable-experts", common.disable_experts,
                   "experts never selected, LAYER:EXPERT,… (LAYER: the checkpoint's layer index, or * for every "
                   "MoE layer); their router probability is 0");
    sub.add_option("--force-experts", common.force_experts,
                   "experts always selected first, LAYER:EXPERT,…; the rest of the k places go to the best others");
    sub.add_option("--moe-top-k", common.moe_top_k, "experts selected per token in every MoE layer (default: the model's)")
        ->check(CLI::Range(1, 4096));
    sub.add_option("--expert-bias-scale", common.expert_bias_scale,
                   "scale of the router's correction bias in the selection (0: none; default 1)")
        ->check(CLI::Range(-1000.0, 1000.0));
}

CLI::App *add_info_command(CLI::App &app, std::string &model_dir, bool &json) {
    auto *info = app.add_subcommand("info", "Architecture, shapes, parameter count, bytes at BF16/FP8, KV bytes per token");
    info->add_option("--model", model_dir, "model folder (config.json + safetensors)")->required();
    info->add_flag("--json", json, "print JSON instead of text");
    return info;
}

CLI::App *add_logits_command(CLI::App &app, std::string &model_dir, std::string &ids, std::string &out,
                             common_opts &common) {
    auto *logits = app.add_subcommand("logits", "Teacher-forced logits at every position as float32 .npy [n_ids, vocab]");
    logits->add_option("--model", model_dir, "model folder")->required();
    logits->add_option("--ids", ids, "comma-separated token ids, e.g. 5,17,3")->required();
    logits->add_option("--out", out, "output .npy file")->required();
    add_common_options(*logits, common);
    add_activation_options(*logits, common);
    add_intervention_options(*logits, common);
    return logits;
}

CLI::App *add_generate_command(CLI::App &app, generate_opts &g, common_opts &common) {
    auto *gen = app.add_subcommand("generate", "Stream a continuation to stdout; TTFT and tok/s on stderr");
    gen->add_option("--model", g.model_dir, "model folder")->required();
    gen->add_option("--prompt", g.prompt, "prompt text")->required();
    gen->add_flag("--chat", g.chat, "wrap the prompt in the ERNIE chat template");
    gen->add_option("--system", g.system, "system prompt (with --chat)");
    gen->add_option("--temperature", g.temperature, "0 = greedy (default: generation_config.json)")->check(CLI::Range(0.0, 100.0));
    gen->add_option("--top-k", g.top_k, "0 = off")->check(CLI::Range(0, 1 << 30));
    gen->add_option("--top-p", g.top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
    gen->add_option("--min-p", g.min_p, "min-p cut relative to the top token")->check(CLI::Range(0.0, 1.0));
    gen->add_option("--repetition-penalty", g.repetition_penalty, "HF-style repetition penalty");
    gen->add_option("--seed", g.seed, "sampling seed (same seed, same output)");
    gen->add_option("--max-tokens", g.max_tokens, "maximum new tokens")->check(CLI::Range(0, 1 << 24));
    gen->add_flag("--ids", g.raw_ids, "the prompt is comma-separated token ids");
    add_common_options(*gen, common);
    add_gpu_memory_option(*gen, common);
    add_activation_options(*gen, common);
    add_intervention_options(*gen, common);
    return gen;
}

CLI::App *add_bench_command(CLI::App &app, bench_opts &b, common_opts &common) {
    auto *bench = app.add_subcommand("bench", "Prefill and decode speed on random weights of a real shape, or a model");
    auto *shape = bench->add_option("--shape", b.shape, "ernie-4.5-0.3b | ernie-4.5-21b-a3b | ernie-4.5-300b-a47b");
    bench->add_option("--model", b.model_dir, "model folder instead of a shape")->excludes(shape);
    bench->add_option("--layers", b.layers, "keep every width, change only the depth")->check(CLI::Range(0, 1024));
    bench->add_option("--pp", b.pp, "prefill lengths (default 512)")->delimiter(',');
    bench->add_option("--tg", b.tg, "decode tokens (default 128)")->check(CLI::Range(1, 1 << 20));
    bench->add_option("--reps", b.reps, "repetitions, median reported")->check(CLI::Range(1, 100));
    bench->add_option("--json", b.out_json, "also write results as JSON to this file");
    bench->add_option("--temperature", b.temperature, "CUDA: the sampled decode row's temperature (default 0.8)")
        ->check(CLI::Range(0.0, 100.0));
    bench->add_option("--top-p", b.top_p, "CUDA: the sampled decode row's nucleus mass (default 0.8)")
        ->check(CLI::Range(0.0, 1.0));
    bench->add_option("--batch", b.batch, "CUDA: batch sizes, e.g. 1,8,64: B sequences prefilled with 128 tokens "
                                          "each, then decoding --tg tokens together (TTFT, ITL p50/p99, tok/s)")
        ->delimiter(',')
        ->check(CLI::Range(1, 1024));
    bench->add_option("--depth", b.depth, "CUDA: contexts, e.g. 8192,32768: decode --tg tokens after a prefilled "
                                          "context of each length (llama-bench's -d; roofline counts the KV bytes)")
        ->delimiter(',')
        ->check(CLI::Range(0, 1 << 24));
    bench->add_flag("--profile", b.profile, "CUDA: also print GPU time per kernel (prefill and decode)");
    bench->add_flag("--timeline", b.timeline,
                    "CUDA: also print when each kernel of the last decode step's graph was released by its "
                    "predecessor (one replay)");
#if ES_CLI_HAVE_REPORT
    bench->add_option("--report", b.report, "also write a report of the results to this file (needs --json)");
    bench->add_option("--report-format", b.report_format,
                      "html | pdf | json | csv | trace (default: from --report's suffix)");
#endif
    add_common_options(*bench, common, true);
    add_activation_options(*bench, common);
    return bench;
}

CLI::App *add_serve_bench_command(CLI::App &app, serve_bench_opts &sb, common_opts &common) {
    auto *sbench = app.add_subcommand("serve-bench", "N synthetic requests through the engine at several concurrencies "
                                                     "(throughput, TTFT, ITL, prefix-cache hits, like vllm bench serve)");
    auto *sb_shape = sbench->add_option("--shape", sb.shape, "ernie-4.5-0.3b | ernie-4.5-21b-a3b (random weights)");
    sbench->add_option("--model", sb.model_dir, "model folder instead of a shape")->excludes(sb_shape);
    sbench->add_option("--layers", sb.layers, "keep every width, change only the depth")->check(CLI::Range(0, 1024));
    sbench->add_option("--requests", sb.requests, "requests per concurrency level")->check(CLI::Range(1, 100000));
    sbench->add_option("--concurrency", sb.concurrency, "concurrency levels (default 1,4,16)")->delimiter(',')->check(CLI::Range(1, 4096));
    sbench->add_option("--prompt-len", sb.prompt_len, "prompt tokens per request")->check(CLI::Range(1, 1 << 20));
    sbench->add_option("--output-len", sb.output_len, "generated tokens per request")->check(CLI::Range(1, 1 << 20));
    sbench->add_option("--shared-prefix", sb.shared_prefix, "leading prompt tokens shared by every request")->check(CLI::Range(0, 1 << 20));
    sbench->add_option("--max-batched-tokens", sb.max_batched_tokens, "token budget per engine step (default: 2048 on a GPU, 512 on the CPU)")->check(CLI::Range(1, 1 << 20));
    sbench->add_option("--seed", sb.seed, "seed of the synthetic prompts");
    sbench->add_option("--temperature", sb.temperature, "sampling temperature of every request (default 0: greedy)")
        ->check(CLI::Range(0.0f, 2.0f));
    sbench->add_option("--top-p", sb.top_p, "nucleus sampling of every request (default 1: off)")
        ->check(CLI::Range(0.01f, 1.0f));
    sbench->add_option("--phase-timing", sb.phase_timing,
                       "time one engine step in N per phase on the GPU (and each request's first two; 1: every "
                       "step, 0: none; default 64); prints the timed steps' phases against the untimed steps' time")
        ->check(CLI::Range(0, 1 << 20));
    sbench->add_option("--json", sb.out_json, "also write results as JSON to this file");
    sbench->add_option("--url", sb.url, "http://HOST:PORT of a running `serve`: streaming HTTP clients instead of the in-process engine");
    sbench->add_option("--api-key", sb.api_key, "with --url: Bearer key (default: env EXPERTSCOPE_API_KEY)")->envname("EXPERTSCOPE_API_KEY");
    add_common_options(*sbench, common);
    add_gpu_memory_option(*sbench, common);
    add_fp8_scales_option(*sbench, common);
    add_intervention_options(*sbench, common); // every request under it (the in-process engine)
    return sbench;
}

CLI::App *add_serve_command(CLI::App &app, serve_opts &sv, common_opts &common) {
    auto *serve = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, "
                                              "/v1/models, /metrics, /health) with continuous batching across clients");
    auto *sv_model = serve->add_option("--model", sv.model_dir, "model folder");
    serve
        ->add_option("--shape", sv.shape,
                     "random weights of ernie-4.5-0.3b | ernie-4.5-21b-a3b instead of --model "
                     "(no tokenizer: token-id prompts on /v1/completions, tokens written as [id])")
        ->excludes(sv_model);
    serve->add_option("--layers", sv.layers, "with --shape: keep every width, change only the depth")
        ->check(CLI::Range(0, 1024));
    serve
        ->add_option("--kv-cache-mib", sv.kv_cache_mib,
                     "KV cache size (default: on a GPU what --gpu-memory-utilization leaves, or up to one "
                     "full context from what is free when that is less; on the CPU min(1 GiB, RAM/4); capped at what "
                     "--max-num-seqs full contexts need). On a GPU the pool's capacity: its memory is mapped as "
                     "requests need it and given back when they are done")
        ->check(CLI::Range(uint64_t(1), uint64_t(1) << 30));
    serve
        ->add_option("--kv-cache-min-mib", sv.kv_cache_min_mib,
                     "GPU: KV pool memory kept mapped however idle the server is (default 0: all of it given back)")
        ->check(CLI::Range(uint64_t(0), uint64_t(1) << 30));
    serve->add_option("--host", sv.host, "address to bind (default 127.0.0.1: this machine only)");
    serve->add_option("--port", sv.port, "TCP port (default 8000; 0: any free port, printed on stdout)")->check(CLI::Range(0, 65535));
    serve->add_option("--api-key", sv.api_key, "require 'Authorization: Bearer KEY' on /v1/* (default: env EXPERTSCOPE_API_KEY)")
        ->envname("EXPERTSCOPE_API_KEY");
    serve->add_option("--served-model-name", sv.served_model_name, "model id clients send (default: the folder's name)");
    serve->add_option("--max-body-bytes", sv.max_body_bytes, "larger request bodies get 413 (default 1048576)")->check(CLI::Range(size_t(64), size_t(1) << 32));
    serve->add_option("--max-prompt-tokens", sv.max_prompt_tokens, "longer prompts get 400 (default: the context)")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
    serve->add_option("--max-num-seqs", sv.max_num_seqs, "sequences batched per engine step (default 16)")->check(CLI::Range(1, 4096));
    serve->add_option("--header-timeout", sv.header_timeout,
                      "seconds a client has for a request's line and headers, whole (default 10; then 408)")
        ->check(CLI::Range(0.05, 3600.0));
    serve->add_option("--body-timeout", sv.body_timeout,
                      "seconds a client has for a request's body after its headers, whole (default 30; then 408)")
        ->check(CLI::Range(0.05, 3600.0));
    serve->add_option("--keep-alive-timeout", sv.keep_alive_timeout,
                      "seconds an idle kept-alive connection waits for its next request (default 5)")
        ->check(CLI::Range(0.05, 3600.0));
    serve->add_option("--write-timeout", sv.write_timeout,
                      "seconds one write of a response may wait for a client that does not read (default 30)")
        ->check(CLI::Range(0.05, 3600.0));
    serve->add_option("--max-connections", sv.max_connections,
                      "open connections in all; more are answered 503 at once (default 512)")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    serve->add_option("--max-connections-per-client", sv.max_connections_per_client,
                      "open connections from one address; more are answered 503 at once (default 128)")
        ->check(CLI::Range(size_t(1), size_t(1) << 20));
    serve->add_option("--allowed-origins", sv.allowed_origins,
                      "web origins (https://app.example:3000, comma-separated; * for any) whose pages may call "
                      "the server; requests from other origins get 403 (default: none)")
        ->delimiter(',');
    serve->add_flag("--insecure-no-api-key", sv.insecure_no_api_key,
                    "allow --host other than loopback without --api-key (anyone who can reach it can use the model)");
    add_common_options(*serve, common);
    add_gpu_memory_option(*serve, common);
    add_fp8_scales_option(*serve, common);
    return serve;
}

CLI::App *add_routing_command(CLI::App &app, routing_opts &ro, common_opts &common) {
    auto *routing = app.add_subcommand("routing", "Per-layer Jensen-Shannon divergence between the expert shares of "
                                                  "two prompt sets (one user message per line)");
    routing->add_option("--model", ro.model_dir, "model folder (MoE)")->required();
    routing->add_option("--prompts", ro.prompts_a, "prompt set A: one user message per line")->required();
    routing->add_option("--prompts-b", ro.prompts_b, "prompt set B: one user message per line")->required();
    routing->add_option("--system", ro.system_a, "system prompt for set A");
    routing->add_option("--system-b", ro.system_b, "system prompt for set B");
    routing->add_option("--max-tokens", ro.max_tokens, "greedy tokens generated per prompt (default 1)")->check(CLI::Range(1, 1 << 16));
    routing->add_flag("--generated-only", ro.generated_only, "count only the generated positions");
    routing->add_option("--json", ro.out_json, "also write counts and divergences as JSON");
    add_common_options(*routing, common);
    return routing;
}

// eval's own --backend, --threads and --kv-cache: they apply to the tested side only.
CLI::App *add_eval_command(CLI::App &app, eval_opts &ev, common_opts &common) {
    auto *eval = app.add_subcommand("eval", "What a weight precision costs: KL, top-1 agreement and router overlap "
                                            "against a baseline on the same tokens");
    eval->add_option("--model", ev.model_dir, "model folder")->required();
    eval->add_option("--precision", ev.precision, "weights under test: fp8 | bf16 (on the CPU: emulated)")
        ->check(CLI::IsMember({"fp8", "bf16"}));
    eval->add_option("--baseline", ev.baseline, "exact (the checkpoint on the CPU, fp32) | bf16 | fp8")
        ->check(CLI::IsMember({"exact", "bf16", "fp8"}));
    eval->add_option("--backend", common.backend, "backend of the tested precision: cpu | cuda | auto")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    eval->add_option("--threads", common.threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 4096));
    add_activation_options(*eval, common); // the CPU's emulation of a precision rounds weights only
    eval->add_option("--kv-cache", common.kv_cache,
                     std::string(k_kv_cache_help) +
                         "; the tested side only (the baseline keeps BF16 KV), so "
                         "--precision P --baseline P --kv-cache fp8 measures the FP8 KV alone")
        ->check(CLI::IsMember({"bf16", "fp8"}))
        ->default_val("bf16");
    eval->add_option("--text", ev.text_file, "UTF-8 text to evaluate on (default: seeded random token ids)");
    eval->add_option("--ctx", ev.ctx, "tokens per window (default 256)")->check(CLI::Range(2, 1 << 20));
    eval->add_option("--windows", ev.windows, "windows (default 4)")->check(CLI::Range(1, 100000));
    eval->add_option("--seed", ev.seed, "seed of the random ids");
    eval->add_option("--json", ev.out_json, "also write the figures as JSON");
    return eval;
}

CLI::App *add_selftest_command(CLI::App &app, selftest_opts &st) {
    auto *selftest = app.add_subcommand("selftest", "GPU check: every CUDA kernel against its CPU twin, then the reference "
                                                    "checkpoints end to end against the CPU backend and HF (skipped without a GPU)");
    selftest->add_option("--data", st.data_dir, "folder of reference checkpoints (default tests/data)");
    selftest->add_flag("--kernels-only", st.kernels_only, "skip the end-to-end model checks");
    selftest->add_flag("--models-only", st.models_only, "skip the kernel checks");
    selftest->add_option("--only", st.only, "run only the checks whose name contains TEXT (e.g. \"moe_front\")");
    return selftest;
}

CLI::App *add_switches_command(CLI::App &app, bool &json) {
    auto *switches = app.add_subcommand("switches", "The environment variables the engine reads: type, default, "
                                                    "what each changes, whether results stay exact");
    switches->add_flag("--json", json, "as JSON");
    return switches;
}

CLI::App *add_download_command(CLI::App &app, download_opts &d) {
    auto *download = app.add_subcommand(
        "download", "Download a model from the Hugging Face hub into its cache (resumable, every file verified); "
                    "prints the model's folder");
    download->add_option("repo", d.repo, "hub repository id, e.g. baidu/ERNIE-4.5-0.3B-PT")->required();
    download->add_option("--revision", d.revision, "branch, tag or commit (default main)");
    download->add_option("--endpoint", d.endpoint, "hub URL (default: env HF_ENDPOINT, else https://huggingface.co)");
    download->add_option("--cache-dir", d.cache_dir,
                         "hub cache folder (default: env HF_HUB_CACHE, else $HF_HOME/hub, else "
                         "~/.cache/huggingface/hub)");
    download->add_option("--backend", d.backend, "where the will-it-fit estimate assumes it loads: auto | cpu | cuda")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    return download;
}

CLI::App *add_models_command(CLI::App &app, models_opts &m) {
    auto *models = app.add_subcommand(
        "models", "The models in the Hugging Face hub cache (downloaded by this program, transformers, vLLM or "
                  "huggingface-cli) with their size and whether they fit here");
    models->add_option("--cache-dir", m.cache_dir, "hub cache folder (default as for download)");
    models->add_flag("--available", m.available, "also the ERNIE-4.5 checkpoints on the hub, with their fit");
    models->add_flag("--json", m.json, "as JSON");
    models->add_option("--backend", m.backend, "where the will-it-fit estimate assumes it loads: auto | cpu | cuda")
        ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
    return models;
}

#if ES_CLI_HAVE_REPORT
CLI::App *add_report_command(CLI::App &app, report_opts &rp) {
    auto *report = app.add_subcommand(
        "report", "Profiling report of a stored message, conversation or bench run, or of a "
                  "bench --json file (html, pdf, json, csv, Perfetto trace); a conversation "
                  "also as markdown or chat-json");
    report->add_option("--db", rp.db, "the app's database (chat.sqlite)");
    auto *r_conv =
        report->add_option("--conversation", rp.conversation, "conversation id (its active branch)");
    auto *r_msg = report->add_option("--message", rp.message, "assistant message id");
    auto *r_bench =
        report->add_option("--bench", rp.bench, "bench run id (stored with `import --bench-json`)");
    auto *r_bjson =
        report->add_option("--bench-json", rp.bench_json, "a `bench --json` file (no --db needed)");
    r_conv->excludes(r_msg, r_bench, r_bjson);
    r_msg->excludes(r_bench, r_bjson);
    r_bench->excludes(r_bjson);
    report->add_option("--format", rp.format, "html | pdf | json | csv | trace | markdown | chat-json")
        ->required();
    report->add_option("--out", rp.out, "output file (written atomically)")->required();
    return report;
}

CLI::App *add_import_command(CLI::App &app, import_opts &im) {
    auto *import = app.add_subcommand(
        "import", "Add an exported conversation (chat-json) or a bench --json run to a database");
    import->add_option("--db", im.db, "the app's database (created if missing)")->required();
    auto *i_chat = import->add_option("--chat", im.chat, "conversation JSON exported by ExpertScope");
    import->add_option("--bench-json", im.bench_json, "a `bench --json` file")->excludes(i_chat);
    return import;
}
#endif

// Every subcommand, in the order --help lists them.
cli_commands add_commands(CLI::App &app, cli_options &o) {
    cli_commands c;
    c.info = add_info_command(app, o.model_dir, o.info_json);
    c.logits = add_logits_command(app, o.model_dir, o.ids, o.out, o.common);
    c.generate = add_generate_command(app, o.generate, o.common);
    c.bench = add_bench_command(app, o.bench, o.common);
    c.serve_bench = add_serve_bench_command(app, o.serve_bench, o.common);
    c.serve = add_serve_command(app, o.serve, o.common);
    c.routing = add_routing_command(app, o.routing, o.common);
    c.eval = add_eval_command(app, o.eval, o.common);
    c.selftest = add_selftest_command(app, o.selftest);
    c.switches = add_switches_command(app, o.switches_json);
    c.download = add_download_command(app, o.download);
    c.models = add_models_command(app, o.models);
#if ES_CLI_HAVE_REPORT
    c.report = add_report_command(app, o.report);
    c.import = add_import_command(app, o.import);
#endif
    return c;
}

// Parses the command line; the exit code when the process ends here (help, version, or a parse
// error as one line on stderr, like every other failure, with CLI11's non-zero exit code).
std::optional<int> parse_command_line(CLI::App &app, int argc, char **argv) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        std::fprintf(stderr, "error: %s (see --help)\n", e.what());
        return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
    }
    return std::nullopt;
}

// bench, then (builds with Qt) the report of its --json file when --report asks for one, in
// --report-format or the format --report's suffix names.
int run_bench(const bench_opts &b, const common_opts &common) {
    if (b.shape.empty() && b.model_dir.empty()) return fail("bench needs --shape or --model");
    if (!b.batch.empty() && common.backend != "cuda")
        return fail("bench --batch measures batched decode on the GPU: it needs --backend cuda");
#if ES_CLI_HAVE_REPORT
    if (!b.report.empty() && b.out_json.empty())
        return fail("bench --report needs --json FILE (the report is made from it)");
    if (const int rc = cmd_bench(b, common); rc != 0 || b.report.empty()) return rc;
    report_opts r;
    r.bench_json = b.out_json;
    r.out = b.report;
    r.format = b.report_format;
    if (r.format.empty()) {
        const auto dot = b.report.rfind('.');
        r.format = dot == std::string::npos ? "" : b.report.substr(dot + 1);
        if (b.report.ends_with(".trace.json")) r.format = "trace";
    }
    return cmd_report(r);
#else
    return cmd_bench(b, common);
#endif
}

// The named subcommand, after the checks across its options that CLI11 cannot express.
int run_command(const cli_commands &c, const cli_options &o) {
    if (*c.info) return cmd_info(o.model_dir, o.info_json);
    if (*c.selftest) return cmd_selftest(o.selftest);
    if (*c.switches) return cmd_switches(o.switches_json);
    if (*c.download) return cmd_download(o.download);
    if (*c.models) return cmd_models(o.models);
    if (*c.logits) return cmd_logits(o.model_dir, o.ids, o.out, o.common);
    if (*c.generate) return cmd_generate(o.generate, o.common);
    if (*c.serve) {
        if (o.serve.shape.empty() && o.serve.model_dir.empty()) return fail("serve needs --model DIR or --shape NAME");
        return cmd_serve(o.serve, o.common);
    }
    if (*c.routing) return cmd_routing(o.routing, o.common);
#if ES_CLI_HAVE_REPORT
    if (*c.report) return cmd_report(o.report);
    if (*c.import) {
        if (o.import.chat.empty() == o.import.bench_json.empty())
            return fail("import needs exactly one of --chat or --bench-json");
        return cmd_import(o.import);
    }
#endif
    if (*c.eval) return cmd_eval(o.eval, o.common);
    if (*c.serve_bench) {
        const serve_bench_opts &sb = o.serve_bench;
        if (!sb.url.empty()) {
            if (auto iv = to_routing_intervention(o.common); !iv || !iv->empty())
                return fail("expert interventions apply to the in-process engine only (not with --url)");
            return cmd_serve_bench_http(sb);
        }
        if (sb.shape.empty() && sb.model_dir.empty()) return fail("serve-bench needs --shape or --model");
        if (sb.shared_prefix > sb.prompt_len) return fail("--shared-prefix is longer than --prompt-len");
        return cmd_serve_bench(sb, o.common);
    }
    if (*c.bench) return run_bench(o.bench, o.common);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    CLI::App app{"ExpertScope command-line engine for ERNIE-4.5 models"};
    app.require_subcommand(1);
    set_version_flag(app);
    cli_options options;
    const cli_commands commands = add_commands(app, options);
    if (const std::optional<int> rc = parse_command_line(app, argc, argv)) return *rc;
    try {
        return run_command(commands, options);
    } catch (const std::exception &e) {
        return fail(std::string("internal error: ") + e.what());
    }
}
