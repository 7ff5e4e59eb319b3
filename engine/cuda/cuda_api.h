// The CUDA backend's face towards the engine: the types that cross the module's table
// (cuda_module_abi.h) — device facts, load parameters, the memory report, profiling rows — and
// cuda_backend, the interface of the backend's extra calls. Plain C++ without CUDA headers: the
// engine library, the loader and the app compile it on machines without a toolkit. The
// implementation lives in the module (cuda/backend/), reached only through the table.
//
// The backend keeps BF16 or FP8 E4M3 (+ fp32 scales) weights, BF16 or FP8 paged KV pools and a
// workspace in device memory (plain cudaMalloc, never managed memory; the workspace through a
// caching allocator) and turns every CUDA failure, out-of-memory included, into an es::error.
// Numerics: fp32 residual stream, BF16 activations into every linear (except FP8 linears of steps
// of more than 8 tokens: activations quantized per token to FP8, cuda_backend_params::activations),
// fp32 accumulation, fp32 router and softmax (docs/cuda-decode.md).
#pragma once

#include "engine/backend/backend.h"
#include "engine/backend/precision.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace es {


struct cuda_device_info {
    int device = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0, n_sm = 0;
    size_t total_bytes = 0, free_bytes = 0;
};

struct cuda_backend_params {
    int device = 0;
    weight_precision precision = weight_precision::bf16;
    // FP8 weights: activations of prefill-sized linears (precision.h); e4m3/e5m2 quantize them per
    // token for cuBLASLt's FP8 GEMM, bf16 dequantizes the weights instead.
    activation_format activations = activation_format::e4m3;
    fp8_policy fp8;                                    // FP8 weights: head and o_proj (precision.h)
    kv_cache_dtype kv_cache = kv_cache_dtype::bf16;    // paged KV pools in BF16 or FP8 E4M3 (precision.h)
    bool use_graphs = true;                            // decode-sized steps replayed as CUDA graphs
    // The FP8 routed experts' gate/up stacks stored tile-major (kernels/fp8_tile_major.cuh), the
    // order decode's tensor-core gate/up reads (on the H200 the 21B-A3B's step 1.8% shorter than
    // row-major); taken only where it applies (FP8, per-channel
    // scales, n_ff_exp % 16 == 0, n_embd % 64 == 0, the tensor-core gate/up in its default shape),
    // else the stacks stay row-major and the bench's graph line says why. false: row-major always.
    bool moe_tile_major = true;
    std::function<void(float progress)> on_progress;   // 0..1 while weights are uploaded
};

// Where device memory went, for reports and telemetry. workspace_bytes is what the workspace
// allocator reserved (its segments); in use, largest free block, peak in use (since load) and the
// segment count are its figures too (device_allocator.h has the definitions).
struct cuda_memory_report {
    size_t weights_bytes = 0, kv_bytes = 0, workspace_bytes = 0, library_bytes = 0; // ours, by arena
    size_t placement_slack_bytes = 0; // allocated beyond the weights for a faster placement (the FP8 head's)
    size_t workspace_in_use_bytes = 0, workspace_largest_free_bytes = 0, workspace_peak_bytes = 0;
    int64_t workspace_segments = 0;
    size_t device_free_bytes = 0, device_total_bytes = 0;                            // cudaMemGetInfo
    kv_cache_dtype kv_cache = kv_cache_dtype::bf16; // the KV pools' element type (to_string names FP8)
    // kv_bytes is the KV pool's memory mapped now; its whole range (capacity) and how it is held.
    size_t kv_capacity_bytes = 0;
    std::string kv_note;
    std::string to_string() const;
};

// GPU time per kernel (by launch name) while profiling is on.
struct kernel_profile_row {
    std::string name;   // "qkv gemv", "attention", "moe_router", …
    double total_ms = 0.0;
    int64_t calls = 0;
};

// One kernel of a replayed decode graph (cuda_backend::graph_timeline), times in µs from the
// first kernel's release: ready = its block (0, 0, 0) finished the work before its programmatic-
// launch wait; released = the wait returned, i.e. the kernel before it had finished.
struct kernel_timeline_row {
    std::string name;
    double ready_us = 0.0, released_us = 0.0;
};

// The host's time inside forward(), summed over the forwards that replayed a CUDA graph since
// the last reset (cuda_backend::host_times), in µs: the batch packed into pinned memory (prep),
// the calls that enqueue the input upload, the graph launch and the output download, the wait
// for the GPU, and the outputs unpacked. What the GPU idles for between two steps is the host's
// time outside the wait (here and in the caller) plus the transfers' own latency.
struct forward_host_times {
    int64_t forwards = 0;
    double prep_us = 0.0, upload_us = 0.0, launch_us = 0.0, download_us = 0.0, wait_us = 0.0, unpack_us = 0.0;
    forward_host_times &operator+=(const forward_host_times &o) {
        forwards += o.forwards;
        prep_us += o.prep_us;
        upload_us += o.upload_us;
        launch_us += o.launch_us;
        download_us += o.download_us;
        wait_us += o.wait_us;
        unpack_us += o.unpack_us;
        return *this;
    }
};

// The extra calls of the CUDA backend (dynamic_cast a backend made below to reach them).
class cuda_backend : public backend {
public:
    virtual cuda_memory_report memory_report() const = 0;
    // Profiling: every launch bracketed by CUDA events (graphs off meanwhile, so launches run
    // eagerly); profile() sums GPU time per launch name since profiling was switched on.
    virtual void set_profiling(bool on) = 0;
    virtual std::vector<kernel_profile_row> profile() const = 0;
    // "on, N graphs" / "off" / why capture failed.
    virtual std::string graph_status() const = 0;
    // Replays the CUDA graph of the latest graph-replayed step `replays` times back to back and
    // returns the GPU time of one replay in µs (0 when no graph ran yet): a decode step's GPU
    // time without the host's share (input upload, launch, logits download, synchronization).
    virtual double graph_replay_us(int replays) = 0;
    // Replays each graph forward() launched since the last call, with the inputs of its latest
    // launch, `replays` times back to back, and returns the mean GPU time of one replay
    // weighted by how many steps launched it, in µs (0 when none did); then forgets the counts.
    // The GPU time of a decode run whose steps replayed graphs of different positions (a graph
    // per KV split count), where graph_replay_us times only the last step's. replays ≤ 0 only
    // forgets the counts (0 returned), touching neither the GPU nor the inputs.
    virtual double launched_graphs_replay_us(int replays) = 0;
    // forward()'s host time since the last reset (forward_host_times); reset: start again at 0.
    virtual forward_host_times host_times(bool reset) = 0;
    // Replays that graph once with the launch timeline on (kernel_common.h: set_kernel_timeline):
    // one row per kernel in launch order (empty when no graph ran yet or recording failed). A
    // kernel's share of the step is the next row's released minus its own.
    virtual std::vector<kernel_timeline_row> graph_timeline() = 0;
    // Whether forward() brings back the routing record (expert ids and weights per MoE layer,
    // the telemetry's source); on by default. Off only to measure what recording costs.
    virtual void set_record_routing(bool on) = 0;
    virtual weight_precision precision() const = 0;
    // The activation format prefill-sized FP8 linears use now: params.activations, or bf16 when
    // cuBLASLt refused the FP8 GEMM (remembered from the first refusal; activation_note() says
    // why), or bf16 for BF16 weights. Linears whose shape breaks cuBLASLt's FP8 rules (k not a
    // multiple of 16, or n) take the BF16 path whatever this says (gemm_lt.cuh).
    virtual activation_format activations() const = 0;
    virtual std::string activation_note() const = 0;
    // This device's read bandwidth in bytes/s, measured now: a streaming read (kernels/read_sum)
    // of 1 GiB, or a quarter of the free memory when less, timed over five passes after a warm
    // one. The denominator of the bench's MBU. 0 when it cannot be measured (less than 64 MiB free,
    // a forward in flight, a broken context).
    virtual double measure_read_bandwidth() = 0;
    // Weight bytes one batch-1 decode step must read (routed experts: only n_expert_used of
    // n_expert; the embedding table: one row; the head: all of it). The MBU numerator.
    virtual double decode_weight_bytes() const = 0;
};

} // namespace es
