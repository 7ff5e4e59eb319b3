// How much memory a model needs where it would load (engine::estimate_memory), the CUDA
// backend's weight bytes for a config, and the KV pool's size from the engine's budget.
#include "engine/runtime/memory_estimate.h"

#include "engine/core/scale_layout.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/model/model_tensors.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/engine.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <unistd.h>

namespace es {

uint64_t physical_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

uint64_t kv_budget_bytes(const engine_params &p, const model_config &c, uint64_t block_bytes,
                         const device_room &room) {
    block_bytes = std::max<uint64_t>(block_bytes, 1);
    const uint64_t per_seq = uint64_t((c.n_ctx_train + p.block_size - 1) / p.block_size);
    const uint64_t full_context = per_seq * block_bytes;
    const uint64_t cap = full_context * uint64_t(std::max(1, p.max_num_seqs));
    if (p.kv_cache_bytes) return std::min(p.kv_cache_bytes, cap);
    if (room.total == 0) return std::min({uint64_t(1) << 30, physical_memory() / 4, cap});
    const double share = std::clamp(p.gpu_memory_utilization, 0.0, 1.0);
    const uint64_t allowed = uint64_t(share * double(room.total));
    const uint64_t used = room.total - std::min(room.free, room.total);
    uint64_t bytes = allowed > used ? allowed - used : 0;
    // Up to one whole conversation at the model's context from what is free beyond the share,
    // a twentieth of the device kept spare: a card the weights nearly fill still chats.
    if (bytes < full_context) {
        const uint64_t spare = room.total / 20;
        bytes = std::max(bytes, std::min(full_context, room.free > spare ? room.free - spare : 0));
    }
    return std::min(bytes, cap);
}

int32_t pick_kv_blocks(const engine_params &p, const model_config &c, uint64_t block_bytes,
                       const device_room &room) {
    if (p.n_kv_blocks > 0) return p.n_kv_blocks;
    const uint64_t n = kv_budget_bytes(p, c, block_bytes, room) / std::max<uint64_t>(block_bytes, 1);
    return int32_t(std::clamp<uint64_t>(n, 2, INT32_MAX / 2));
}

uint64_t cuda_weight_bytes(const model_config &c, weight_precision precision, const fp8_policy &policy) {
    const auto align = [](uint64_t b) { return (b + 255) / 256 * 256; };
    const bool fp8 = precision == weight_precision::fp8;
    const uint64_t H = uint64_t(c.n_embd), qd = uint64_t(c.q_dim()), kvd = uint64_t(c.kv_dim());
    uint64_t total = 0;
    // An FP8 matrix's scales: per row, or per 128×128 block of each of its `stack` matrices (experts).
    auto lin_as = [&](uint64_t n, uint64_t k, bool q, uint64_t stack = 1) {
        const uint64_t scales =
            stack * uint64_t(fp8_scale_count(int64_t(n / stack), int64_t(k), policy.scales));
        total += align(n * k * (q ? 1 : 2)) + (q ? align(scales * 4) : 0);
    };
    auto lin = [&](uint64_t n, uint64_t k, uint64_t stack = 1) { lin_as(n, k, fp8, stack); };
    total += align(uint64_t(c.n_vocab) * H * 2) + align(H * 2);
    if (!c.tie_word_embeddings) total += align(uint64_t(c.n_vocab) * H * 2);
    if (fp8 && policy.head) lin_as(uint64_t(c.n_vocab), H, true); // the FP8 copy of the head
    for (int64_t il = 0; il < c.n_layer; ++il) {
        total += 2 * align(H * 2);
        lin(qd + 2 * kvd, H);
        lin_as(H, qd, fp8 && policy.attn_out);
        if (!c.is_moe_layer(il)) {
            lin(2 * uint64_t(c.n_ff), H);
            lin(H, uint64_t(c.n_ff));
            continue;
        }
        total += align(uint64_t(c.n_expert) * H * 4) + align(uint64_t(c.n_expert) * 4);
        lin(uint64_t(c.n_expert) * 2 * uint64_t(c.n_ff_exp), H, uint64_t(c.n_expert));
        lin(uint64_t(c.n_expert) * H, uint64_t(c.n_ff_exp), uint64_t(c.n_expert));
        if (c.n_expert_shared > 0) {
            const uint64_t F = uint64_t(c.n_ff_exp * c.n_expert_shared);
            lin(2 * F, H);
            lin(H, F);
        }
    }
    return total + align(uint64_t(c.head_dim / 2) * 4);
}

namespace {

// The estimate for config c; cpu_weights gives the CPU backend's weight bytes (from a checkpoint's
// headers, or from the config alone) and is called only when the model would load on the CPU.
result<memory_estimate> estimate_for(const model_config &c, const engine_params &p,
                                     const std::function<result<size_t>(const cpu_backend_params &)> &cpu_weights) {
    memory_estimate e;
    // Where it would load: the same decision as load_model.
    if (p.load.kind != backend_kind::cpu) {
        const cuda_status_info &cs = cuda_status();
        if (cs.available) e.gpu = true;
        else if (p.load.kind == backend_kind::cuda) return error{"the CUDA backend cannot run here: " + cs.reason};
        else e.note = "CUDA not used: " + cs.reason;
    }
    if (!e.gpu && p.load.kv_cache == kv_cache_dtype::fp8) // as load_model: not silently fp32 KV
        return error{"an FP8 KV cache (--kv-cache fp8) needs the CUDA backend" +
                     (e.note.empty() ? std::string("; the CPU backend keeps fp32 KV") : " (" + e.note + ")")};
    if (e.gpu) {
        const cuda_status_info &cs = cuda_status();
        e.device = cs.device.name;
        e.weights_bytes = cuda_weight_bytes(c, p.load.precision, p.load.fp8);
        const uint64_t kv_elem =
            p.load.kv_cache == kv_cache_dtype::fp8 ? 1 : 2; // as the backend's kv_block_bytes
        const uint64_t block_bytes =
            uint64_t(p.block_size) * uint64_t(c.kv_dim()) * 2 * kv_elem * uint64_t(c.n_layer);
        // The forward pass at a full token budget: logits in fp32 plus the widest activations
        // (q/k/v, gate/up of the routed experts of every token) in fp32, the FP8 prefill's BF16
        // dequantization buffer, and cuBLASLt's workspace.
        const uint64_t T = uint64_t(std::max(1, step_token_budget(p, true)));
        const uint64_t widest = uint64_t(std::max({c.q_dim() + 2 * c.kv_dim(), 2 * c.n_ff,
                                                   2 * c.n_ff_exp * std::max<int64_t>(1, c.n_expert_used), c.n_embd}));
        e.workspace_bytes = T * uint64_t(c.n_vocab) * 4 + T * widest * 4 * 4 + (uint64_t(32) << 20);
        if (p.load.precision == weight_precision::fp8)
            e.workspace_bytes += uint64_t(std::max({(c.q_dim() + 2 * c.kv_dim()) * c.n_embd, 2 * c.n_ff * c.n_embd,
                                                   2 * c.n_ff_exp * c.n_expert_shared * c.n_embd})) * 2;
        e.available_bytes = cs.device.free_bytes;
        const uint64_t placed = e.weights_bytes + e.workspace_bytes;
        const device_room room{cs.device.total_bytes, e.available_bytes > placed ? e.available_bytes - placed : 0};
        const int32_t blocks = pick_kv_blocks(p, c, block_bytes, room);
        e.kv_bytes = uint64_t(blocks) * block_bytes;
        e.kv_tokens = int64_t(blocks) * p.block_size;
    } else {
        // The CPU backend's own count from the checkpoint's headers (BF16 matrices stay BF16,
        // F32 and F16 ones fp32; an emulated precision's linears BF16 or E4M3 with a scale a row;
        // norms fp32), as load_model would build it; KV is fp32 K and V per layer.
        e.device = "CPU";
        cpu_backend_params cp;
        if (p.load.emulate_precision_on_cpu)
            cp.rounding = p.load.precision == weight_precision::fp8 ? cpu_weight_rounding::fp8_e4m3
                                                                    : cpu_weight_rounding::bf16;
        auto bytes = cpu_weights(cp);
        if (!bytes) return bytes.err();
        e.weights_bytes = *bytes;
        const uint64_t block_bytes = uint64_t(p.block_size) * uint64_t(c.kv_dim()) * 4 * 2 * uint64_t(c.n_layer);
        const int32_t blocks = pick_kv_blocks(p, c, block_bytes);
        e.kv_bytes = uint64_t(blocks) * block_bytes;
        e.kv_tokens = int64_t(blocks) * p.block_size;
        e.available_bytes = physical_memory();
    }
    e.fits = e.weights_bytes + e.kv_bytes + e.workspace_bytes < e.available_bytes / 20 * 19;
    auto gib = [](uint64_t b) {
        const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double v = double(b);
        int u = 0;
        while (v >= 1024.0 && u < 4) {
            v /= 1024.0;
            ++u;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
        return std::string(buf);
    };
    const std::string kv_tokens = " (" + std::to_string(e.kv_tokens) + " tokens)";
    if (e.gpu)
        e.summary = e.device + " (" + (p.load.precision == weight_precision::fp8 ? "FP8" : "BF16") + "): weights " +
                    gib(e.weights_bytes) + " + KV cache " + gib(e.kv_bytes) + kv_tokens + " + workspace " +
                    gib(e.workspace_bytes) + " of " + gib(e.available_bytes) + " free — " +
                    (e.fits ? "fits" : "does not fit");
    else
        e.summary = "CPU: weights " + gib(e.weights_bytes) + " + KV cache " + gib(e.kv_bytes) + kv_tokens + " of " +
                    gib(e.available_bytes) + " RAM — " + (e.fits ? "fits" : "does not fit");
    return e;
}

} // namespace

result<memory_estimate> engine::estimate_memory(const std::filesystem::path &dir, const engine_params &p) {
    auto cfg = load_model_config(dir);
    if (!cfg) return cfg.err();
    return estimate_for(*cfg, p, [&](const cpu_backend_params &cp) -> result<size_t> {
        auto store = weight_store::open_dir(dir);
        if (!store) return store.err();
        auto bound = bind_model_tensors(*cfg, **store);
        if (!bound) return bound.err();
        return cpu_weight_bytes(*cfg, *bound, cp);
    });
}

result<memory_estimate> engine::estimate_memory(const model_config &c, const engine_params &p) {
    return estimate_for(c, p, [&](const cpu_backend_params &cp) { return cpu_weight_bytes(c, cp); });
}

} // namespace es
