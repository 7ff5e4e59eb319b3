// Engine telemetry, read by other threads without blocking the step loop: after each step the
// engine thread publishes an immutable snapshot through an atomic shared_ptr; readers take the
// latest one. Definitions follow the metrics table of ARCHITECTURE.md (TTFT, ITL, expert load,
// imbalance, KV waste, fragmentation).
#pragma once

#include "engine/core/step_phases.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace es {

struct step_record {
    uint64_t step = 0;
    // Engine clock (steady, µs since engine start). An overlapped step (engine_params::overlap)
    // is scheduled and submitted while the step before it is processed; its span starts where
    // that one's ended, so that the steps' spans partition the engine's time.
    int64_t t_start_us = 0;
    double duration_ms = 0.0;
    int32_t n_seqs = 0;
    int32_t n_prefill_tokens = 0, n_decode_tokens = 0;
    int32_t n_preempted = 0;
    double schedule_ms = 0.0, forward_ms = 0.0, sample_ms = 0.0, emit_ms = 0.0;
    // Inside the forward (backend.h phase_times): moe_ms the routed experts, head_ms the head and,
    // on the GPU, its sampling; other_ms the timed rest. Only where phases_timed (the CPU times
    // every step; the GPU the steps the engine asks for, engine_params::phase_timing_every); a
    // step timed on the device (phases_on_device) has device_ms, the GPU's time for it.
    double attention_ms = 0.0, moe_ms = 0.0, moe_shared_ms = 0.0, dense_ms = 0.0, head_ms = 0.0, other_ms = 0.0;
    double device_ms = 0.0;
    bool phases_timed = false, phases_on_device = false;
    // The requests computed in this step and how many tokens each (so a step shared by
    // concurrent replies can be apportioned among them).
    std::vector<std::pair<uint64_t, int32_t>> seq_tokens;
};

// cached: free, hashed; unmapped: free, without memory (the pool's top, mapped on demand)
enum class kv_block_state : uint8_t { used = 0, cached = 1, free = 2, unmapped = 3 };

struct memory_stats {
    uint64_t weights_bytes = 0;
    uint64_t kv_block_bytes = 0;           // bytes of one block, all layers, K and V
    int32_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_free = 0, kv_blocks_cached = 0;
    int32_t kv_blocks_cached_free = 0;     // free blocks still holding a reusable prefix
    // Blocks [0, kv_blocks_mapped) have memory (all of them where the pool is one allocation); the
    // pool's device memory now and its capacity (its address range: kv_blocks_total blocks) in
    // bytes, and how the pool's memory is held (backend_memory::kv_note).
    int32_t kv_blocks_mapped = 0;
    uint64_t kv_mapped_bytes = 0, kv_capacity_bytes = 0;
    std::string kv_note;
    int64_t kv_tokens_stored = 0;
    // Every block's state in pool order (kv_block_state values): the KV block map.
    std::vector<uint8_t> kv_block_states;
    double kv_waste = 0.0;                 // 1 − tokens stored / (blocks used × block size)
    // Backend allocator (workspace) and device, where the backend has them (0 otherwise).
    uint64_t alloc_reserved = 0, alloc_in_use = 0, alloc_largest_free = 0;
    uint64_t device_total = 0, device_free = 0;
    double fragmentation = 0.0;            // 1 − largest free / total free (0 when nothing free)
    // The backend's device allocations by purpose (backend_memory::parts); empty on the CPU.
    std::vector<std::pair<std::string, uint64_t>> device_parts;
};

struct telemetry_snapshot {
    uint64_t n_steps = 0;
    int64_t t_us = 0;
    std::vector<step_record> recent_steps;       // newest last, at most telemetry_ring steps
    // Expert load since the model was loaded, [moe slot][expert], counted once per token
    // position computed for the first time (recomputation after preemption is not recounted).
    std::vector<int32_t> moe_layers;             // layer index of each slot
    int32_t n_expert = 0, n_expert_used = 0;
    std::vector<uint64_t> expert_tokens;         // [slot * n_expert + e]
    std::vector<double> expert_weight;           // gate-weight mass, same layout
    // The same over the last `window_steps` steps (live heatmap).
    int32_t window_steps = 0;
    std::vector<uint64_t> expert_tokens_window;
    memory_stats memory;
    int32_t n_running = 0, n_waiting = 0;
    uint64_t prefix_queries = 0, prefix_hits = 0; // blocks looked up / found in the prefix cache
    uint64_t n_requests_finished = 0, n_tokens_generated = 0, n_prompt_tokens = 0;
    // Steps submitted while the step before them still ran, their tokens fed from its picks
    // (engine_params::overlap).
    uint64_t n_steps_overlapped = 0;
    // The launches of the latest step timed on the device (backend.h op_time; empty on the CPU)
    // and that step's number; the device's read bandwidth (bytes/s, 0 where unknown), against
    // which a launch's bytes per second are set.
    std::vector<op_time> timeline;
    uint64_t timeline_step = 0;
    double device_read_bandwidth = 0.0;
};

// Latest-snapshot holder: one writer (the engine thread), any number of readers.
class telemetry_channel {
public:
    void publish(std::shared_ptr<const telemetry_snapshot> s) { m_latest.store(std::move(s)); }
    std::shared_ptr<const telemetry_snapshot> latest() const { return m_latest.load(); }

private:
    std::atomic<std::shared_ptr<const telemetry_snapshot>> m_latest;
};

} // namespace es
