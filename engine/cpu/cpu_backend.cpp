// CPU backend: fp32 forward pass of ERNIE-4.5 dense and MoE models over a paged KV cache.
// Numerics follow HF transformers in float32 (the reference): RMSNorm in fp32, interleaved RoPE
// with fp32 angles, causal GQA attention with fp32 softmax, fp32 router (softmax, top-k chosen
// by p + e_score_correction_bias, weights = unbiased p renormalized by max(sum, moe_norm_min)),
// one shared SwiGLU MLP added unweighted. Linears run the batch-invariant GEMM of cpu_gemm.h on
// weights held as BF16, fp32 or E4M3 (cpu_weights.h) and widened in registers; q/k/v are one
// fused matrix, gate/up another, residual adds are fused into the GEMM. Every step is per token,
// so no token's result depends on the batch.
#include "engine/cpu/cpu_backend.h"

#include "engine/core/dtype.h"
#include "engine/cpu/cpu_attention.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_ops.h"
#include "engine/cpu/cpu_weights.h"
#include "kernels/fp8_quantize.cuh"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

namespace es {
namespace {

using fvec = std::vector<float>;
using cpu::weight_matrix;
using cpu::weight_type;

struct cpu_layer {
    fvec attn_norm, ffn_norm; // [n_embd]
    weight_matrix wqkv;       // [q_dim + 2*kv_dim, n_embd]
    weight_matrix wo;         // [n_embd, q_dim]
    bool is_moe = false;
    weight_matrix w_gate_up;  // dense: [2*n_ff, n_embd], gate rows then up rows
    weight_matrix w_down;     // dense: [n_embd, n_ff]
    weight_matrix router;     // [n_expert, n_embd]
    fvec router_bias;         // [n_expert]
    std::vector<weight_matrix> exp_gate_up; // n_expert × [2*n_ff_exp, n_embd]
    std::vector<weight_matrix> exp_down;    // n_expert × [n_embd, n_ff_exp]
    weight_matrix sh_gate_up;               // [2*n_ff_sh, n_embd]
    weight_matrix sh_down;                  // [n_embd, n_ff_sh]
};

// Where the weights come from: a named tensor's element type (checked against the rows × cols
// the model expects), and rows [row0, row0 + n) of it as fp32.
struct weight_source {
    std::function<dtype(const std::string &name, int64_t rows, int64_t cols)> type;
    std::function<void(const std::string &name, int64_t row0, int64_t n, int64_t cols, float *dst)> rows;
};

// A tensor that fills rows of a (possibly fused) matrix.
struct part {
    std::string name;
    int64_t rows;
};

// out[M, N] = a[M, K] · w[N, K]ᵀ (+ out when accumulate). Batch-invariant (cpu_gemm.h).
void linear(const float *a, const weight_matrix &w, float *out, int64_t M, int64_t N, int64_t K,
            bool accumulate = false) {
    cpu::gemm_nt(a, M, w.view(), N, K, out, accumulate);
}

size_t physical_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? size_t(pages) * size_t(page) : 0;
}

class cpu_backend final : public backend {
public:
    cpu_backend(const model_config &cfg, const cpu_backend_params &p) : m_cfg(cfg), m_params(p) {
        m_threads = p.n_threads > 0 ? p.n_threads : omp_get_max_threads();
    }

    std::string name() const override {
        // The linears' type (the head and embeddings follow the checkpoint); rounding kept in
        // fp32 says so.
        const weight_type t = m_layers.empty() ? weight_type::f32 : m_layers.front().wqkv.type();
        const bool rounded_f32 = t == weight_type::f32 && m_params.rounding != cpu_weight_rounding::none;
        const char *r =
            m_params.rounding == cpu_weight_rounding::fp8_e4m3 ? " rounded to fp8-e4m3" : " rounded to bf16";
        return "cpu (" + std::to_string(m_threads) + " threads, fp32, " + cpu::weight_type_name(t) +
               " weights" + (rounded_f32 ? r : "") + ")";
    }
    const model_config &config() const override { return m_cfg; }
    bool supports_routing_interventions() const override { return true; }
    size_t weights_bytes() const override { return m_weight_bytes; }

    backend_memory memory() const override {
        backend_memory m;
        for (const fvec *v : {&m_x, &m_xn, &m_qkv, &m_attn, &m_rope_cos, &m_rope_sin, &m_rows, &m_gu, &m_act,
                              &m_eout, &m_router, &m_gather, &m_last_logits})
            m.reserved += v->capacity() * sizeof(float);
        m.in_use = m.reserved;
        m.device_total = physical_memory_bytes();
        const long avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
        m.device_free = avail > 0 && page > 0 ? uint64_t(avail) * uint64_t(page) : 0;
        return m;
    }
    const kv_cache_params &kv_params() const override { return m_kv; }

    size_t kv_block_bytes() const override {
        return size_t(m_kv.block_size) * size_t(m_cfg.kv_dim()) * sizeof(float) * 2 * size_t(m_cfg.n_layer);
    }

    status init_kv_cache(const kv_cache_params &p) override {
        return catch_errors([&]() -> status {
            if (p.block_size <= 0 || p.n_blocks <= 0)
                throw load_error("KV cache: block_size and n_blocks must be positive");
            m_kv = p;
            const size_t per_layer = size_t(p.n_blocks) * size_t(p.block_size) * size_t(m_cfg.kv_dim());
            const size_t need = per_layer * sizeof(float) * 2 * size_t(m_cfg.n_layer);
            const size_t have = physical_memory_bytes();
            if (have && need > have / 2)
                throw load_error("KV cache: " + std::to_string(need >> 20) + " MiB for " +
                                 std::to_string(p.n_blocks) + " blocks exceeds half of this machine's " +
                                 std::to_string(have >> 20) + " MiB");
            m_k.assign(size_t(m_cfg.n_layer), fvec());
            m_v.assign(size_t(m_cfg.n_layer), fvec());
            for (int64_t il = 0; il < m_cfg.n_layer; ++il) {
                m_k[il].assign(per_layer, 0.0f);
                m_v[il].assign(per_layer, 0.0f);
            }
            return ok_status();
        });
    }

    status logits_row(int32_t row, std::span<float> out) override {
        const int64_t V = m_cfg.n_vocab;
        // (backend::submit ran its forwards already: the kept rows are the newest one's)
        if (in_flight() > 0) return error{"logits_row: a submitted forward is not finished"};
        if (row < 0 || int64_t(row) * V >= int64_t(m_last_logits.size()))
            return error{"logits_row: row " + std::to_string(row) +
                         " is not a kept logits row of the last forward pass (rows are kept when a pass has at most " +
                         std::to_string(k_kept_logits_rows) + ")"};
        if (int64_t(out.size()) != V)
            return error{"logits_row: the output holds " + std::to_string(out.size()) +
                         " values, n_vocab is " + std::to_string(V)};
        std::copy_n(m_last_logits.begin() + int64_t(row) * V, V, out.begin());
        return ok_status();
    }

    status forward(const batch &b, forward_output &out) override {
        return catch_errors([&]() -> status {
            m_last_logits.clear();
            check_batch(b);
            omp_set_num_threads(m_threads);
            run(b, out);
            return ok_status();
        });
    }

    // The bytes of weights these sources make, as build() would hold them.
    size_t planned_bytes(const weight_source &src) {
        struct sizer {
            cpu_backend &be;
            const weight_source &src;
            size_t bytes = 0, elements = 0;
            void vec(fvec &, const std::string &name, int64_t n) {
                src.type(name, 1, n);
                bytes += size_t(n) * sizeof(float);
                elements += size_t(n);
            }
            void mat(weight_matrix &, std::initializer_list<part> parts, int64_t cols, bool linear) {
                std::vector<dtype> types;
                int64_t rows = 0;
                for (const part &p : parts) {
                    types.push_back(src.type(p.name, p.rows, cols));
                    rows += p.rows;
                }
                bytes += weight_matrix::bytes_for(be.storage_for(types, linear), rows, cols);
                elements += size_t(rows * cols);
            }
        } v{*this, src};
        walk(v);
        m_planned_elements = v.elements;
        return v.bytes;
    }

    // Holds every weight of `src` (pass 1 checks and counts, pass 2 converts).
    void build(const weight_source &src) {
        const size_t need = planned_bytes(src), have = physical_memory_bytes();
        if (have && need > have * 9 / 10)
            throw load_error("the CPU backend needs " + std::to_string(need >> 20) +
                             " MiB for its weights but this machine has " + std::to_string(have >> 20) +
                             " MiB; use the CUDA backend or a smaller model");
        struct filler {
            cpu_backend &be;
            const weight_source &src;
            size_t total, done = 0;
            fvec rows; // a chunk of rows in fp32, at most ~4 MB
            void progress(int64_t n) {
                done += size_t(n);
                if (be.m_params.on_progress && total)
                    be.m_params.on_progress(float(double(done) / double(total)));
            }
            void vec(fvec &dst, const std::string &name, int64_t n) {
                dst.resize(size_t(n));
                src.rows(name, 0, 1, n, dst.data());
                progress(n);
            }
            void mat(weight_matrix &dst, std::initializer_list<part> parts, int64_t cols, bool linear) {
                std::vector<dtype> types;
                int64_t total_rows = 0;
                for (const part &p : parts) {
                    types.push_back(src.type(p.name, p.rows, cols));
                    total_rows += p.rows;
                }
                const weight_type t = be.storage_for(types, linear);
                // fp32 storage keeps a rounding's values; BF16 and E4M3 storage encode them.
                const bool round_here =
                    linear && t == weight_type::f32 && be.m_params.rounding != cpu_weight_rounding::none;
                dst = weight_matrix(t, total_rows, cols);
                const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(cols, 1));
                int64_t at = 0;
                for (const part &p : parts) {
                    for (int64_t r0 = 0; r0 < p.rows; r0 += chunk) {
                        const int64_t n = std::min(chunk, p.rows - r0);
                        rows.resize(size_t(n * cols));
                        src.rows(p.name, r0, n, cols, rows.data());
                        if (round_here) round_cpu_weights(rows.data(), n, cols, be.m_params.rounding);
                        dst.set_rows(at + r0, n, rows.data());
                        progress(n * cols);
                    }
                    at += p.rows;
                }
            }
        } v{*this, src, m_planned_elements, 0, {}};
        walk(v);
        m_weight_bytes = need;
        init_rope();
    }

    double decode_weight_bytes() const {
        const auto &c = m_cfg;
        double bytes = double(m_output_norm.size() * sizeof(float));
        bytes += double(c.tie_word_embeddings ? m_tok_embd.bytes() : m_output.bytes());
        for (const cpu_layer &L : m_layers) {
            bytes += double((L.attn_norm.size() + L.ffn_norm.size() + L.router_bias.size()) * sizeof(float));
            for (const weight_matrix *w :
                 {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down, &L.router, &L.sh_gate_up, &L.sh_down})
                bytes += double(w->bytes());
            double experts = 0.0;
            for (const auto *v : {&L.exp_gate_up, &L.exp_down})
                for (const weight_matrix &w : *v) experts += double(w.bytes());
            if (c.n_expert > 0) bytes += experts * double(c.n_expert_used) / double(c.n_expert);
        }
        return bytes;
    }

private:
    // How a matrix is held: fp32 when asked, or for a linear the rounding names; BF16 when every
    // part comes as BF16 or FP8 (exact in BF16), else fp32 (F32 and F16 checkpoints stay exact).
    weight_type storage_for(const std::vector<dtype> &sources, bool linear) const {
        if (m_params.widen_to_fp32) return weight_type::f32;
        if (linear && m_params.rounding == cpu_weight_rounding::fp8_e4m3) return weight_type::e4m3;
        if (linear && m_params.rounding == cpu_weight_rounding::bf16) return weight_type::bf16;
        for (dtype t : sources)
            if (t == dtype::f32 || t == dtype::f16) return weight_type::f32;
        return weight_type::bf16;
    }

    // Every weight of the model, in load order: v.vec(dst, name, n) for fp32 vectors (norms, the
    // router's bias), v.mat(dst, parts, cols, linear) for matrices (parts stacked by rows; linear:
    // one the GPU would quantize, which cpu_weight_rounding applies to).
    template <typename V>
    void walk(V &v) {
        const auto &c = m_cfg;
        const int64_t H = c.n_embd;
        v.mat(m_tok_embd, {{"model.embed_tokens.weight", c.n_vocab}}, H, false);
        m_layers.resize(size_t(c.n_layer));
        for (int64_t il = 0; il < c.n_layer; ++il) {
            auto &L = m_layers[size_t(il)];
            const std::string p = "model.layers." + std::to_string(il) + ".";
            L.is_moe = c.is_moe_layer(il);
            v.vec(L.attn_norm, p + "input_layernorm.weight", H);
            v.vec(L.ffn_norm, p + "post_attention_layernorm.weight", H);
            v.mat(L.wqkv,
                  {{p + "self_attn.q_proj.weight", c.q_dim()},
                   {p + "self_attn.k_proj.weight", c.kv_dim()},
                   {p + "self_attn.v_proj.weight", c.kv_dim()}},
                  H, true);
            v.mat(L.wo, {{p + "self_attn.o_proj.weight", H}}, c.q_dim(), true);
            if (!L.is_moe) {
                v.mat(L.w_gate_up, {{p + "mlp.gate_proj.weight", c.n_ff}, {p + "mlp.up_proj.weight", c.n_ff}},
                      H, true);
                v.mat(L.w_down, {{p + "mlp.down_proj.weight", H}}, c.n_ff, true);
                continue;
            }
            v.mat(L.router, {{p + "mlp.gate.weight", c.n_expert}}, H, false);
            v.vec(L.router_bias, p + "mlp.moe_statics.e_score_correction_bias", c.n_expert);
            L.exp_gate_up.resize(size_t(c.n_expert));
            L.exp_down.resize(size_t(c.n_expert));
            for (int64_t e = 0; e < c.n_expert; ++e) {
                const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
                v.mat(L.exp_gate_up[size_t(e)],
                      {{q + "gate_proj.weight", c.n_ff_exp}, {q + "up_proj.weight", c.n_ff_exp}}, H, true);
                v.mat(L.exp_down[size_t(e)], {{q + "down_proj.weight", H}}, c.n_ff_exp, true);
            }
            if (c.n_expert_shared > 0) {
                const int64_t F = c.n_ff_exp * c.n_expert_shared;
                v.mat(L.sh_gate_up,
                      {{p + "mlp.shared_experts.gate_proj.weight", F},
                       {p + "mlp.shared_experts.up_proj.weight", F}},
                      H, true);
                v.mat(L.sh_down, {{p + "mlp.shared_experts.down_proj.weight", H}}, F, true);
            }
        }
        v.vec(m_output_norm, "model.norm.weight", H);
        if (!c.tie_word_embeddings) v.mat(m_output, {{"lm_head.weight", c.n_vocab}}, H, false);
    }

    const weight_matrix &output_weights() const { return m_cfg.tie_word_embeddings ? m_tok_embd : m_output; }

    void init_rope() {
        const int64_t half = m_cfg.head_dim / 2;
        m_inv_freq.resize(size_t(half));
        for (int64_t i = 0; i < half; ++i) {
            // As HF: inv_freq = 1 / theta^(2i/d), computed in fp32.
            const float expo = float(2 * i) / float(m_cfg.head_dim);
            m_inv_freq[i] = 1.0f / std::pow(float(m_cfg.rope_theta), expo);
        }
    }

    void check_batch(const batch &b) const {
        if (m_k.empty()) throw load_error("batch: the KV cache is not initialised");
        es::check_batch(b, m_cfg, m_kv);
    }

    float *kv_slot(fvec &pool, const batch &b, int64_t t) {
        const auto &bt = b.seqs[b.seq[t]].block_table;
        const int64_t pos = b.pos[t];
        const int64_t slot = int64_t(bt[pos / m_kv.block_size]) * m_kv.block_size + pos % m_kv.block_size;
        return pool.data() + slot * m_cfg.kv_dim();
    }

    void run(const batch &b, forward_output &out) {
        const auto &c = m_cfg;
        const int64_t T = b.n_tokens(), H = c.n_embd, hd = c.head_dim, half = hd / 2;
        const int64_t qd = c.q_dim(), kvd = c.kv_dim(), n_qkv = qd + 2 * kvd;
        const float eps = float(c.rms_eps);

        m_x.resize(size_t(T * H));
        m_xn.resize(size_t(T * H));
        m_qkv.resize(size_t(T * n_qkv));
        m_attn.resize(size_t(T * qd));
        m_rope_cos.resize(size_t(T * half));
        m_rope_sin.resize(size_t(T * half));

        for (int64_t t = 0; t < T; ++t) {
            m_tok_embd.widen_row(b.tokens[t], &m_x[t * H]);
            for (int64_t i = 0; i < half; ++i) {
                const float angle = float(b.pos[t]) * m_inv_freq[i];
                m_rope_cos[t * half + i] = std::cos(angle);
                m_rope_sin[t * half + i] = std::sin(angle);
            }
        }

        out.routing = routing_record{};
        out.routing.n_expert_used = int32_t(c.n_expert_used);
        out.phases = phase_times{};
        using clk = std::chrono::steady_clock;
        auto ms_since = [](clk::time_point t0) { return std::chrono::duration<double, std::milli>(clk::now() - t0).count(); };
        const auto t_begin = clk::now();

        for (int64_t il = 0; il < c.n_layer; ++il) {
            const cpu_layer &L = m_layers[il];
            auto t0 = clk::now();
            // --- attention ---
#pragma omp parallel for schedule(static) if (T * H >= (1 << 16))
            for (int64_t t = 0; t < T; ++t) cpu::rms_norm(&m_x[t * H], L.attn_norm.data(), &m_xn[t * H], H, eps);
            linear(m_xn.data(), L.wqkv, m_qkv.data(), T, n_qkv, H);
#pragma omp parallel for schedule(static) if (T * n_qkv >= (1 << 16))
            for (int64_t t = 0; t < T; ++t) {
                float *row = &m_qkv[t * n_qkv];
                const float *cs = &m_rope_cos[t * half], *sn = &m_rope_sin[t * half];
                for (int64_t h = 0; h < c.n_head; ++h) cpu::rope_interleaved(row + h * hd, cs, sn, hd);
                for (int64_t h = 0; h < c.n_head_kv; ++h) cpu::rope_interleaved(row + qd + h * hd, cs, sn, hd);
                std::memcpy(kv_slot(m_k[il], b, t), row + qd, size_t(kvd) * sizeof(float));
                std::memcpy(kv_slot(m_v[il], b, t), row + qd + kvd, size_t(kvd) * sizeof(float));
            }
            attention(b, il);
            linear(m_attn.data(), L.wo, m_x.data(), T, H, qd, true);
            out.phases.attention_ms += ms_since(t0);
            t0 = clk::now();

            // --- MLP ---
#pragma omp parallel for schedule(static) if (T * H >= (1 << 16))
            for (int64_t t = 0; t < T; ++t) cpu::rms_norm(&m_x[t * H], L.ffn_norm.data(), &m_xn[t * H], H, eps);
            if (!L.is_moe) {
                swiglu(m_xn.data(), T, L.w_gate_up, L.w_down, c.n_ff, m_x.data(), nullptr);
                out.phases.dense_ms += ms_since(t0);
            } else {
                const double shared_before = out.phases.moe_shared_ms;
                moe(b, L, il, T, out.routing, out.phases);
                out.phases.moe_ms += ms_since(t0) - (out.phases.moe_shared_ms - shared_before);
            }
        }
        const auto t_head = clk::now();

        // --- head: final norm and logits for the requested rows only ---
        const int64_t R = int64_t(b.logits_rows.size());
        m_rows.resize(size_t(R * H));
        for (int64_t r = 0; r < R; ++r)
            cpu::rms_norm(&m_x[b.logits_rows[r] * H], m_output_norm.data(), &m_rows[r * H], H, eps);
        out.candidates = logit_candidate_rows{}; // full rows always (batch::top_n is a request)
        out.logits.resize(size_t(R * c.n_vocab));
        linear(m_rows.data(), output_weights(), out.logits.data(), R, c.n_vocab, H);
        // logits_row serves decode-sized forwards; the rows of every position (logits, eval) are
        // not kept twice (at 2,048 positions of a 103k vocabulary that is 850 MB).
        if (R <= k_kept_logits_rows) {
            m_last_logits.assign(out.logits.begin(), out.logits.end());
        } else {
            m_last_logits.clear();
            m_last_logits.shrink_to_fit();
        }
        out.phases.head_ms = ms_since(t_head);
        out.phases.total_ms = ms_since(t_begin);
        out.phases.other_ms = std::max(0.0, out.phases.total_ms - (out.phases.sum_ms() - out.phases.other_ms));
        out.phases.timed = true;
    }

    // Causal GQA attention of every batch token over its own sequence, through the block table:
    // one task per (token, KV head) computes the query heads that share that KV head
    // (cpu_attention.h), so each key and value row is read once for the whole group.
    void attention(const batch &b, int64_t il) {
        const auto &c = m_cfg;
        const int64_t T = b.n_tokens(), hd = c.head_dim, qd = c.q_dim(), kvd = c.kv_dim();
        const int64_t n_qkv = qd + 2 * kvd, group = c.n_head / c.n_head_kv, bs = m_kv.block_size;
        const float scale = 1.0f / std::sqrt(float(hd));
        const fvec &K = m_k[il], &V = m_v[il];
        // Fork only when there is enough work: a fork/join costs microseconds, and far more
        // when the machine is busy (threads wait for a time slice at every barrier).
        int64_t attention_work = 0;
        for (int64_t t = 0; t < T; ++t) attention_work += (int64_t(b.pos[t]) + 1) * hd * c.n_head;
#pragma omp parallel if (attention_work >= (1 << 18))
        {
            fvec scores;
            std::vector<const float *> k_rows, v_rows;
#pragma omp for collapse(2) schedule(dynamic, 4)
            for (int64_t t = 0; t < T; ++t) {
                for (int64_t kvh = 0; kvh < c.n_head_kv; ++kvh) {
                    const int64_t n_ctx = int64_t(b.pos[t]) + 1;
                    const auto &bt = b.seqs[b.seq[t]].block_table;
                    k_rows.resize(size_t(n_ctx));
                    v_rows.resize(size_t(n_ctx));
                    for (int64_t j = 0; j < n_ctx; ++j) {
                        const int64_t at = (int64_t(bt[j / bs]) * bs + j % bs) * kvd + kvh * hd;
                        k_rows[j] = &K[at];
                        v_rows[j] = &V[at];
                    }
                    scores.resize(size_t(group * n_ctx));
                    cpu::attend_group(&m_qkv[t * n_qkv + kvh * group * hd], group, hd, k_rows.data(),
                                      v_rows.data(), n_ctx, scale, scores.data(), &m_attn[t * qd + kvh * group * hd]);
                }
            }
        }
    }

    // y (+)= down(silu(gate(x)) * up(x)) for x [M, H]. With `row_weight`, row m of the result is
    // scaled and added into y at row `rows[m]`; otherwise accumulated into y row by row.
    void swiglu(const float *x, int64_t M, const weight_matrix &w_gate_up, const weight_matrix &w_down,
                int64_t F, float *y, const std::vector<int32_t> *rows, const float *row_weight = nullptr) {
        const int64_t H = m_cfg.n_embd;
        m_gu.resize(size_t(M * 2 * F));
        m_act.resize(size_t(M * F));
        linear(x, w_gate_up, m_gu.data(), M, 2 * F, H);
#pragma omp parallel for schedule(static) if (M * F >= (1 << 16))
        for (int64_t m = 0; m < M; ++m) cpu::silu_mul(&m_gu[m * 2 * F], &m_gu[m * 2 * F + F], &m_act[m * F], F);
        if (!rows) {
            linear(m_act.data(), w_down, y, M, H, F, true);
            return;
        }
        m_eout.resize(size_t(M * H));
        linear(m_act.data(), w_down, m_eout.data(), M, H, F);
        for (int64_t m = 0; m < M; ++m) cpu::axpy(row_weight[m], &m_eout[m * H], &y[int64_t((*rows)[m]) * H], H);
    }

    void moe(const batch &b, const cpu_layer &L, int64_t il, int64_t T, routing_record &rec, phase_times &phases) {
        using clk = std::chrono::steady_clock;
        auto ms_since = [](clk::time_point t0) { return std::chrono::duration<double, std::milli>(clk::now() - t0).count(); };
        const auto &c = m_cfg;
        const int64_t H = c.n_embd, E = c.n_expert;
        m_router.resize(size_t(T * E));
        linear(m_xn.data(), L.router, m_router.data(), T, E, H);

        // Each sequence's view of its intervention in this layer (none: the model's routing), and
        // the record's k: the most any token selects.
        std::vector<layer_routing> seq_routing(b.seqs.size());
        int64_t K = 0;
        for (size_t s = 0; s < b.seqs.size(); ++s) {
            static const routing_intervention none;
            const auto &iv = b.seqs[s].routing ? *b.seqs[s].routing : none;
            seq_routing[s] = routing_for_layer(iv, int32_t(il), E, c.n_expert_used);
            K = std::max<int64_t>(K, seq_routing[s].k);
        }
        std::vector<int16_t> ids(size_t(T * K), int16_t(-1));
        std::vector<float> wts(size_t(T * K), 0.0f);
        std::vector<float> margin(size_t(T), std::numeric_limits<float>::quiet_NaN());
#pragma omp parallel if (T * E >= (1 << 14))
        {
            std::vector<int32_t> order(static_cast<size_t>(E));
            fvec biased(static_cast<size_t>(E));
#pragma omp for schedule(static)
            for (int64_t t = 0; t < T; ++t) {
                const layer_routing &lr = seq_routing[size_t(b.seq[t])];
                float *p = &m_router[t * E];
                // A disabled expert's logit is −∞: probability 0, the softmax taken without it.
                for (int64_t e = 0; e < E; ++e)
                    if (lr.disabled[size_t(e)]) p[e] = -INFINITY;
                cpu::softmax(p, E);
                for (int64_t e = 0; e < E; ++e)
                    biased[e] = lr.disabled[size_t(e)] ? -INFINITY
                                : lr.bias_scale == 1.0f ? p[e] + L.router_bias[e]
                                                        : p[e] + lr.bias_scale * L.router_bias[e];
                // Forced experts first, in their order; then the best of the rest by biased score,
                // ties broken by the lower expert id.
                const int64_t n_forced = int64_t(lr.forced.size()), k = lr.k;
                std::copy(lr.forced.begin(), lr.forced.end(), order.begin());
                int64_t n = n_forced;
                for (int32_t e = 0; e < int32_t(E); ++e)
                    if (std::find(lr.forced.begin(), lr.forced.end(), e) == lr.forced.end()) order[size_t(n++)] = e;
                std::partial_sort(order.begin() + n_forced, order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
                    return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
                });
                float sum = 0.0f;
                for (int64_t j = 0; j < k; ++j) sum += p[order[j]];
                const float denom = std::max(sum, float(c.moe_norm_min));
                for (int64_t j = 0; j < k; ++j) {
                    ids[t * K + j] = int16_t(order[j]);
                    wts[t * K + j] = p[order[j]] / denom;
                }
                // The margin: the last free choice's score over the best score left out.
                if (k > n_forced && k < E) {
                    float best_left = -INFINITY;
                    for (int64_t j = k; j < E; ++j) best_left = std::max(best_left, biased[order[size_t(j)]]);
                    if (best_left > -INFINITY) margin[size_t(t)] = biased[order[size_t(k - 1)]] - best_left;
                }
            }
        }

        // Shared experts see every token and are added unweighted.
        if (c.n_expert_shared > 0) {
            const auto t_shared = clk::now();
            swiglu(m_xn.data(), T, L.sh_gate_up, L.sh_down, c.n_ff_exp * c.n_expert_shared, m_x.data(),
                   nullptr);
            phases.moe_shared_ms += ms_since(t_shared);
        }

        // Group token slots by expert, then one GEMM per selected expert over its tokens only.
        std::vector<std::vector<int32_t>> tok_of(static_cast<size_t>(E));
        std::vector<fvec> w_of(static_cast<size_t>(E));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < K; ++j) {
                if (ids[t * K + j] < 0) continue; // past this token's k
                tok_of[ids[t * K + j]].push_back(int32_t(t));
                w_of[ids[t * K + j]].push_back(wts[t * K + j]);
            }
        for (int64_t e = 0; e < E; ++e) {
            const int64_t n = int64_t(tok_of[e].size());
            if (n == 0) continue;
            m_gather.resize(size_t(n * H));
            for (int64_t m = 0; m < n; ++m)
                std::memcpy(&m_gather[m * H], &m_xn[int64_t(tok_of[e][m]) * H], size_t(H) * sizeof(float));
            swiglu(m_gather.data(), n, L.exp_gate_up[e], L.exp_down[e], c.n_ff_exp, m_x.data(), &tok_of[e],
                   w_of[e].data());
        }

        rec.n_expert_used = int32_t(K);
        rec.moe_layers.push_back(int32_t(il));
        rec.ids.push_back(std::move(ids));
        rec.weights.push_back(std::move(wts));
        rec.margins.push_back(std::move(margin));
    }

    model_config m_cfg;
    cpu_backend_params m_params;
    int m_threads = 1;
    size_t m_weight_bytes = 0, m_planned_elements = 0;
    weight_matrix m_tok_embd, m_output; // [n_vocab, n_embd]; m_output empty when tied
    fvec m_output_norm;
    std::vector<cpu_layer> m_layers;
    fvec m_inv_freq;
    kv_cache_params m_kv;
    std::vector<fvec> m_k, m_v; // per layer: [n_blocks * block_size, kv_dim]
    // workspace, reused across steps
    static constexpr int64_t k_kept_logits_rows = 64;
    fvec m_last_logits; // [rows, n_vocab] of the last forward (logits_row), up to k_kept_logits_rows rows
    fvec m_x, m_xn, m_qkv, m_attn, m_rope_cos, m_rope_sin, m_rows, m_gu, m_act, m_eout, m_router, m_gather;
};

} // namespace

void round_cpu_weights(float *w, int64_t rows, int64_t cols, cpu_weight_rounding r) {
    if (r == cpu_weight_rounding::none) return;
    const int64_t n = rows * cols;
    if (r == cpu_weight_rounding::bf16) {
        for (int64_t i = 0; i < n; ++i) w[i] = round_bf16(w[i]);
        return;
    }
    // E4M3 per output channel, exactly as the GPU quantizes at load (from BF16).
    std::vector<bf16_t> b(static_cast<size_t>(cols));
    std::vector<fp8_t> q(static_cast<size_t>(cols));
    for (int64_t row = 0; row < rows; ++row) {
        float *wr = w + row * cols;
        for (int64_t i = 0; i < cols; ++i) b[size_t(i)] = float_to_bf16_bits(wr[i]);
        float scale = 1.0f;
        fp8_quantize_ref({b.data(), q.data(), &scale, 1, cols});
        for (int64_t i = 0; i < cols; ++i) wr[i] = fp8_e4m3_to_float(q[size_t(i)]) * scale;
    }
}

namespace {

// The bound tensors of a checkpoint as a weight source: the names bind_model_tensors bound, each
// checked against the elements the model expects, widened exactly to fp32.
weight_source tensor_source(const model_tensors &t) {
    auto by_name = std::make_shared<std::map<std::string, const tensor_view *>>();
    auto add = [&](const tensor_view *tv) {
        if (tv) (*by_name)[tv->name] = tv;
    };
    add(t.tok_embd);
    add(t.output_norm);
    add(t.output);
    for (const auto &L : t.layers) {
        for (auto *tv :
             {L.attn_norm, L.ffn_norm, L.wq, L.wk, L.wv, L.wo, L.ffn_gate, L.ffn_up, L.ffn_down,
              L.ffn_gate_inp, L.ffn_exp_probs_b, L.ffn_gate_shexp, L.ffn_up_shexp, L.ffn_down_shexp})
            add(tv);
        for (auto *tv : L.ffn_gate_exps) add(tv);
        for (auto *tv : L.ffn_up_exps) add(tv);
        for (auto *tv : L.ffn_down_exps) add(tv);
    }
    auto find = [by_name](const std::string &name) -> const tensor_view & {
        auto it = by_name->find(name);
        if (it == by_name->end()) throw load_error("missing tensor '" + name + "'");
        return *it->second;
    };
    weight_source s;
    s.type = [find](const std::string &name, int64_t rows, int64_t cols) {
        const tensor_view &tv = find(name);
        if (tv.n_elements() != rows * cols)
            throw load_error("tensor '" + name + "' in " + tv.file + " has shape " + tv.shape_str() +
                             ", expected " + std::to_string(rows * cols) + " elements");
        return tv.type;
    };
    s.rows = [find](const std::string &name, int64_t row0, int64_t n, int64_t cols, float *dst) {
        const tensor_view &tv = find(name);
        convert_to_f32(tv.type, tv.data + size_t(row0 * cols) * dtype_size(tv.type), dst, size_t(n * cols));
    };
    return s;
}

} // namespace

result<std::unique_ptr<backend>> make_cpu_backend(const model_config &cfg, const model_tensors &t,
                                                  const cpu_backend_params &p) {
    return catch_errors([&]() -> result<std::unique_ptr<backend>> {
        auto be = std::make_unique<cpu_backend>(cfg, p);
        be->build(tensor_source(t));
        return std::unique_ptr<backend>(std::move(be));
    });
}

result<size_t> cpu_weight_bytes(const model_config &cfg, const model_tensors &t,
                                const cpu_backend_params &p) {
    return catch_errors([&]() -> result<size_t> {
        cpu_backend be(cfg, p);
        return be.planned_bytes(tensor_source(t));
    });
}

result<size_t> cpu_weight_bytes(const model_config &cfg, const cpu_backend_params &p) {
    return catch_errors([&]() -> result<size_t> {
        cpu_backend be(cfg, p);
        weight_source s;
        s.type = [](const std::string &name, int64_t, int64_t) {
            const bool router = name.ends_with(".mlp.gate.weight") || name.ends_with("e_score_correction_bias");
            return router ? dtype::f32 : dtype::bf16;
        };
        return be.planned_bytes(s);
    });
}

double cpu_decode_weight_bytes(const backend &be) {
    const auto *cpu = dynamic_cast<const cpu_backend *>(&be);
    return cpu ? cpu->decode_weight_bytes() : 0.0;
}

result<std::unique_ptr<backend>> make_cpu_backend_random(const model_config &cfg, uint64_t seed,
                                                         const cpu_backend_params &p) {
    return catch_errors([&]() -> result<std::unique_ptr<backend>> {
        auto be = std::make_unique<cpu_backend>(cfg, p);
        weight_source s;
        s.type = [](const std::string &, int64_t, int64_t) { return dtype::bf16; };
        s.rows = [seed](const std::string &name, int64_t row0, int64_t rows, int64_t cols, float *dst) {
            // Each tensor its own stream (seed ^ hash(name)), so the result does not depend on order
            // or on the rows asked for. Uniform with the wanted standard deviation; splitmix64 keeps
            // 0.3B-sized fills fast.
            uint64_t state =
                (seed ^ std::hash<std::string>{}(name)) + uint64_t(row0 * cols) * 0x9e3779b97f4a7c15ull;
            auto next = [&state]() {
                uint64_t z = (state += 0x9e3779b97f4a7c15ull);
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                return z ^ (z >> 31);
            };
            const bool is_norm = name.find("norm") != std::string::npos;
            const bool is_bias = name.find("correction_bias") != std::string::npos;
            const float stddev = is_norm ? 0.1f : is_bias ? 0.01f : 1.0f / std::sqrt(float(cols));
            const float mean = is_norm ? 1.0f : 0.0f, half = stddev * 1.7320508f; // sqrt(3)·std
            const size_t n = size_t(rows * cols);
            for (size_t i = 0; i < n; ++i) {
                const float u = float(next() >> 40) * (1.0f / 16777216.0f); // [0, 1)
                dst[i] = round_bf16(mean + (2.0f * u - 1.0f) * half);       // as a BF16 checkpoint holds it
            }
        };
        be->build(s);
        return std::unique_ptr<backend>(std::move(be));
    });
}

} // namespace es
