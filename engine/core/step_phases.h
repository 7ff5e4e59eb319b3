// Where a forward pass spent its time, by phase and by launch: what a backend measures
// (backend.h forward_output) and the telemetry carries to the profiler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace es {

// Where a forward pass spent its time (the profiler's phase chart). Names match the labels. The
// CPU backend times every forward on the host; the CUDA backend times on the device the forwards
// that ask for it (batch::time_phases) and the others only as a whole (timed false).
struct phase_times {
    double attention_ms = 0.0;  // norms, q/k/v, RoPE, KV write, attention, output projection
    double moe_ms = 0.0;        // MoE routed: the FFN norm, router, routed experts and their combine
    double moe_shared_ms = 0.0; // MoE shared experts (in a fused kernel: its share of the bytes read)
    double dense_ms = 0.0;      // dense MLP layers
    double head_ms = 0.0;       // final norm and logits (on the GPU with the candidates and draws)
    double other_ms = 0.0;      // the rest of total_ms: embedding, inputs in, outputs out, launch gaps
    double total_ms = 0.0;
    bool timed = false;         // the phases were measured (else only total_ms)
    bool on_device = false;     // by the device's clock (total_ms: the GPU's time for the step)
    double sum_ms() const { return attention_ms + moe_ms + moe_shared_ms + dense_ms + head_ms + other_ms; }
};

// The phases of phase_times, in chart order (the numbers stored with a step timeline).
enum class step_phase : uint8_t { attention, moe_routed, moe_shared, dense, head, other };

// One launch of a forward timed on the device (batch::time_phases): where it ran on the step's
// time axis (µs from the first launch's start) and the bytes of weights and KV it reads where the
// backend models them (0 otherwise; the routed experts of a step of several tokens: at most
// min(n_expert, tokens · k) experts, an upper bound). shared: the share of those bytes that are
// the shared experts' (a kernel fused across both MoE phases splits its time by it).
struct op_time {
    std::string name;
    step_phase phase = step_phase::other;
    int32_t layer = -1;
    double start_us = 0.0, dur_us = 0.0;
    double bytes = 0.0;
    double shared = 0.0;
};

// Adds each launch's time to its phase (a fused MoE kernel's split by op_time::shared).
void add_op_times(phase_times &ph, const std::vector<op_time> &ops);

} // namespace es
