// Will a model fit where it would load, and how large the KV pool becomes: the estimate the
// app's Model menu and `info` show before anything is allocated, and the KV budget the engine
// applies when it loads.
#pragma once

#include "engine/backend/precision.h"
#include "engine/model/model_config.h"

#include <cstdint>
#include <string>

namespace es {

struct engine_params;

// Will the model fit where it would load (the backend and precision of engine_params)? On the
// GPU: the CUDA backend's weight arena at that precision, a BF16 KV cache, the forward pass's
// workspace for a full token budget and the cuBLASLt workspace, against the device's free
// memory now (the KV pool as kv_budget_bytes sizes it from what the weights and workspace leave);
// on the CPU: the weights as the CPU backend holds them (cpu_weight_bytes: BF16 matrices of a
// BF16 checkpoint, fp32 ones of an F32 checkpoint, an emulated precision's BF16 or E4M3 linears)
// and fp32 KV against physical RAM. An estimate (what the driver and allocator add is not
// counted); 5% of the memory is kept as headroom.
struct memory_estimate {
    uint64_t weights_bytes = 0, kv_bytes = 0, workspace_bytes = 0, available_bytes = 0;
    int64_t kv_tokens = 0;              // tokens the KV pool holds, all sequences together
    bool fits = false;
    bool gpu = false;
    std::string device;                 // "CPU" or the GPU's name
    std::string note;                   // automatic on the CPU: why not the GPU
    std::string summary;                // one line for the UI
};

// Bytes of the CUDA backend's weight arena for this config and precision (its layout: fused
// q/k/v and gate/up, BF16 embeddings, norms and head, fp32 router and RoPE table, FP8 linears
// with one fp32 scale per row; 256-byte aligned pieces).
uint64_t cuda_weight_bytes(const model_config &c, weight_precision precision, const fp8_policy &policy = {});

// The device's memory as the KV pool's budget sees it: total, and free once the weights and the
// forward pass's workspace are placed. total 0: not a GPU (the budget comes from RAM).
struct device_room {
    uint64_t total = 0, free = 0;
};

// The KV pool's bytes: engine_params::kv_cache_bytes when set; else on a GPU what
// gpu_memory_utilization × total leaves beside what is already used (total − free: this
// process's weights and workspace, and any other process), raised towards one full context of
// the model from what is free with a twentieth of the device to spare; else (CPU) min(1 GiB, a
// quarter of RAM). Capped at what max_num_seqs full contexts need.
uint64_t kv_budget_bytes(const engine_params &p, const model_config &c, uint64_t block_bytes,
                         const device_room &room = {});

// KV blocks of block_bytes each: engine_params::n_kv_blocks when set, else kv_budget_bytes in
// whole blocks; at least 2.
int32_t pick_kv_blocks(const engine_params &p, const model_config &c, uint64_t block_bytes,
                       const device_room &room = {});

// Physical RAM in bytes (0 when unknown).
uint64_t physical_memory();

} // namespace es
