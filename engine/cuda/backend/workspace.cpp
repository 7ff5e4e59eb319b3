// The per-step workspace (one block of the caching allocator, laid out by make_work_layout) and
// the pinned I/O slots sized with it.
#include "engine/cuda/backend/cuda_backend_impl.h"

#include <algorithm>

namespace es {

int64_t cuda_backend_impl::max_ff() const {
    int64_t f = 0;
    for (const auto &L : m_w.layers) {
        if (!L.is_moe) f = std::max(f, m_cfg.n_ff);
        else if (m_cfg.n_expert_shared > 0) f = std::max(f, m_cfg.n_ff_exp * m_cfg.n_expert_shared);
    }
    return std::max<int64_t>(f, 1);
}

int64_t cuda_backend_impl::n_moe_layers() const {
    int64_t n = 0;
    for (const auto &L : m_w.layers) n += L.is_moe;
    return n;
}

workspace_shape cuda_backend_impl::ws_shape() const {
    workspace_shape s;
    s.cfg = m_cfg;
    s.n_moe = n_moe_layers();
    s.max_ff = max_ff();
    s.fp8_activations = m_params.precision == weight_precision::fp8 && m_params.activations != activation_format::bf16;
    s.pick_keys_cap = pick_keys_cap();
    return s;
}

bool cuda_backend_impl::workspace_fits(int64_t T, int64_t R, int64_t bt) const {
    return m_work.bytes() && T <= m_lay.T && R <= m_lay.R && bt <= m_lay.bt;
}

status cuda_backend_impl::reserve_workspace(int32_t max_tokens, int32_t max_rows, int32_t max_blocks_per_seq) {
    return catch_errors([&]() -> status {
        check_usable();
        if (!m_flight.empty()) throw load_error("workspace: a submitted forward is not finished");
        ensure_workspace(std::max(max_tokens, 1), std::max(max_rows, 1), std::max(max_blocks_per_seq, 1));
        ck(cudaStreamSynchronize(m_stream), "workspace reservation");
        return ok_status();
    });
}

void cuda_backend_impl::ensure_workspace(int64_t T, int64_t R, int64_t bt) {
    if (workspace_fits(T, R, bt)) return;
    ck(cudaStreamSynchronize(m_stream), "workspace resize");
    clear_graphs();
    const work_layout w = make_work_layout(ws_shape(), round_cap(T, std::max<int64_t>(m_lay.T, 16)),
                                      round_cap(std::max<int64_t>(R, 1), std::max<int64_t>(m_lay.R, 1)),
                                      round_cap(std::max<int64_t>(bt, 1), std::max<int64_t>(m_lay.bt, 64)));
    m_work.reset();
    m_inputs.reset();
    for (int i = 0; i < 2; ++i) {
        m_io[i].inputs.reset();
        m_io[i].record.reset();
        m_io[i].block.reset();
    }
    m_fed.valid = false; // the candidates fed tokens would read were in the old workspace
    m_lay = work_layout{};
    m_work.alloc(w.total, "the forward pass's workspace (" + std::to_string(w.T) + " tokens)");
    ck(cudaMemsetAsync(m_work.at(w.router_counters), 0, size_t(w.T) * 4, m_stream), "workspace clear");
    ck(cudaMemsetAsync(m_work.at(w.attn_counters), 0, size_t(w.T * m_cfg.n_head_kv) * 4, m_stream), "workspace clear");
    ck(cudaMemsetAsync(m_work.at(w.slot_rows), 0, size_t(w.T * std::max<int64_t>(m_cfg.n_expert_used, 1)) * 4, m_stream),
       "workspace clear");
    ck(cudaMemsetAsync(m_work.at(w.topk_counters), 0, size_t(w.R) * 4, m_stream), "workspace clear");
    m_inputs.alloc(w.in_total, "the batch inputs");
    for (int i = 0; i < 2; ++i) { // a slot for each forward in flight (submit)
        m_io[i].inputs.alloc(w.in_total, "pinned batch inputs");
        m_io[i].record.alloc(w.out_bytes, "pinned routing record");
        m_io[i].block.alloc(w.out_bytes, "pinned download block");
    }
    // Layouts only grow: a segment the old layout emptied goes back to the device (the KV
    // cache, cuBLASLt and other processes may need it); partly used ones stay as free blocks.
    m_ws.release_cached();
    m_lay = w;
}

void cuda_backend_impl::ensure_dequantize_buffer() {
    if (!m_deq.bytes()) m_deq.alloc(size_t(m_w.max_dense_lin) * 2, "the FP8 prefill dequantization buffer");
}

} // namespace es
