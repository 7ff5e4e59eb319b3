// switches.h: the table, and the readers that consult it.
#include "engine/core/switches.h"

#include <algorithm>
#include <cstdlib>

#ifndef ES_DEVELOPER_SWITCHES
#define ES_DEVELOPER_SWITCHES 0
#endif

namespace es {

namespace {

using T = switch_type;

// Exact: the same numbers come out, only timing, placement or launch mechanics change.
constexpr switch_info k_switches[] = {
    {"EXPERTSCOPE_CUDA_MODULE", T::text, "(unset)",
     "The CUDA module's file; when set, the only place the loader looks (cuda_loader.h).", true},
    {"ES_CUDA_PDL", T::flag, "1 on compute capability 9.0+",
     "Programmatic dependent launch between the step's kernels; 0 launches them plainly.", true},
    {"ES_CUDA_MAX_GRAPHS", T::integer, "256", "Captured decode graphs kept (least recently replayed dropped first).",
     true},
    {"ES_CUDA_ZERO_COPY", T::flag, "1",
     "Decode graphs read their inputs from and write their outputs to pinned memory; 0 copies around each replay.",
     true},
    {"ES_CUDA_HEAD_PICK", T::flag, "1",
     "A greedy one-row step takes its token from the head's GEMV; 0 runs topk_logits after the head (same outputs).",
     true},
    {"ES_CUDA_MOE_SLOT_COUNTERS", T::flag, "1",
     "Decode's routed down GEMV starts each slot when its rows are in; 0 waits for the whole gate/up.", true},
    {"ES_CUDA_MOE_DOWN_ROWS_PER_WARP", T::integer, "kernel default (2 where it fits)",
     "Output rows per warp of decode's routed down GEMV: 1, 2 or 4 (bit-identical output).", true},
    {"ES_CUDA_CARVEOUT", T::integer, "per kernel", "One shared-memory carveout preference (percent) for every kernel.",
     true},
    {"ES_CUDA_GEMV_PRELOAD_MIN_KB", T::integer, "4096",
     "Matrix size above which one-token GEMVs load their rows before their launch wait.", true},
    {"ES_CUDA_L2_PREFETCH_KB", T::integer, "8192",
     "What a decode GEMV sends towards L2 before its wait, at most (-1: no cap).", true},
    {"ES_CUDA_HEAD_ALLOC_MIB", T::integer, "(placement rule)",
     "The FP8 head copy's allocation size in MiB (at least the copy's own).", true},
    {"ES_CUDA_WEIGHTS_PAD_KB", T::integer, "0", "KiB left unused before the layers' weights in their allocation.",
     true},
    {"ES_CUDA_WEIGHTS_TAIL_KB", T::integer, "0", "KiB left unused after the layers' weights in their allocation.",
     true},
    {"ES_CUDA_KV_VMM", T::flag, "1",
     "The KV pool's memory mapped on demand (CUDA virtual memory management); 0: one allocation of its capacity.",
     true},
    // Measuring aids that change results: developer builds only.
    {"ES_CUDA_SKIP_OPS", T::text, "(unset)",
     "Comma-separated launch names left out of every step: the results are wrong, the time saved is their cost.",
     false},
    {"ES_CUDA_FUSE", T::flag, "1", "Decode's fused launches (norm into GEMVs, RoPE + KV write); 0 separates them.",
     false},
    {"ES_CUDA_COMBINE_NORM", T::flag, "1",
     "moe_combine writes the next layer's normalized row; 0 has the q/k/v GEMV normalize itself.", false},
    {"ES_CUDA_MOE_DOWN", T::text, "rows", "gather: decode's routed down projection in one gathering kernel.", false},
    {"ES_CUDA_KV_SPLIT_CHUNKS", T::integer, "1", "32-position chunks per KV split of decode attention, at least.",
     false},
    {"ES_CUDA_KV_SPLITS_MAX", T::integer, "32", "Most KV splits of decode attention (1 to 64; past 16 they merge through memory).",
     false},
    {"ES_CUDA_MOE_GEMV_MAX_TOKENS", T::integer, "8",
     "Routed experts run as GEMVs up to this many tokens a step, then grouped by expert.", false},
    {"ES_CUDA_ROUTER_TILES_MIN", T::integer, "(kernel default)", "Steps of at least N tokens route in token tiles.",
     false},
    {"ES_CUDA_MOE_WGMMA", T::flag, "1", "Prefill's grouped expert GEMM may use warpgroup MMA; 0 keeps mma.sync.",
     false},
    {"ES_CUDA_MOE_WGMMA_MIN", T::integer, "(kernel default)",
     "Routed slots per expert from which the warpgroup-MMA grouped GEMM is taken.", false},
    {"ES_CUDA_MOE_FP8_ACT", T::flag, "1", "The grouped expert GEMM takes FP8 activations; 0 gives it BF16.", false},
    {"ES_CUDA_MOE_MMA", T::integer, "1",
     "Decode's routed gate/up on tensor cores (r rounds of tiles); 0 keeps the CUDA-core kernel.", false},
    {"ES_CUDA_MOE_MMA_SHAPE", T::text, "(kernel default)",
     "warps/tiles/depth[/wave]: another instance of the tensor-core routed gate/up.", false},
    {"ES_CUDA_MOE_TILE_MAJOR", T::flag, "the load parameter",
     "The FP8 routed gate/up stacks stored tile-major (1) or row-major (0).", false},
    {"ES_CUDA_NORM_ROWS", T::integer, "(kernel default)",
     "Rows a warp of the dense MLP's fused-norm gate/up takes: 2 or 3.", false},
    {"ES_CUDA_ATTN_CLUSTER", T::flag, "1",
     "Decode attention merges its KV splits inside a thread-block cluster; 0 through memory and a counter.", false},
    {"ES_CUDA_ATTN_MERGE", T::text, "pull", "push: that merge by pushes into the merging blocks.", false},
};

const switch_info *find_switch(std::string_view name) {
    for (const auto &s : k_switches)
        if (name == s.name) return &s;
    return nullptr;
}

std::optional<std::string> env_value(const char *name) {
    const char *v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    return std::string(v);
}

} // namespace

std::span<const switch_info> all_switches() { return k_switches; }

bool developer_switches_enabled() { return ES_DEVELOPER_SWITCHES != 0; }

std::optional<std::string> switch_value(std::string_view name) {
    const switch_info *s = find_switch(name);
    if (!s) return std::nullopt;
    if (!s->exact && !developer_switches_enabled()) return std::nullopt;
    return env_value(s->name);
}

int64_t switch_int(std::string_view name, int64_t fallback) {
    const auto v = switch_value(name);
    if (!v) return fallback;
    char *end = nullptr;
    const long long x = std::strtoll(v->c_str(), &end, 10);
    return end && end != v->c_str() ? int64_t(x) : fallback;
}

bool switch_flag(std::string_view name, bool fallback) {
    auto v = switch_value(name);
    if (!v) return fallback;
    std::transform(v->begin(), v->end(), v->begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return !(*v == "0" || *v == "false" || *v == "off" || *v == "no");
}

std::vector<std::string> ignored_switches() {
    std::vector<std::string> out;
    if (developer_switches_enabled()) return out;
    for (const auto &s : k_switches)
        if (!s.exact && env_value(s.name)) out.push_back(s.name);
    return out;
}

} // namespace es
