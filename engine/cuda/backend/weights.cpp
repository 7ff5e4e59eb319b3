// The CUDA backend's weights: where a tensor comes from (a checkpoint, or random numbers made on
// the GPU), their placement in one allocation (plus the FP8 head copy's own), the upload with FP8
// quantization on the GPU, and the factories that build a backend from either source.
#include "engine/cuda/backend/cuda_backend_impl.h"

#include "engine/core/dtype.h"
#include "engine/core/switches.h"
#include "kernels/fill_random.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/fp8_tile_major.cuh"

#include <algorithm>
#include <cmath>
#include <map>

namespace es {

// Where the weights of a tensor come from: a checkpoint (host memory-mapped) or random on the GPU.
class weight_source {
public:
    virtual ~weight_source() = default;
    // Writes rows·cols BF16 values of tensor `name` to device memory dst (stream-ordered).
    virtual void fill_bf16(const std::string &name, int64_t rows, int64_t cols, bf16_t *dst, cudaStream_t s) = 0;
    // Writes n fp32 values (router, bias).
    virtual void fill_f32(const std::string &name, int64_t n, float *dst, cudaStream_t s) = 0;
};

class checkpoint_source final : public weight_source {
public:
    explicit checkpoint_source(const model_tensors &t) {
        auto add = [&](const tensor_view *tv) {
            if (tv) m_by_name[tv->name] = tv;
        };
        add(t.tok_embd);
        add(t.output_norm);
        add(t.output);
        for (const auto &L : t.layers) {
            for (auto *tv : {L.attn_norm, L.ffn_norm, L.wq, L.wk, L.wv, L.wo, L.ffn_gate, L.ffn_up, L.ffn_down,
                             L.ffn_gate_inp, L.ffn_exp_probs_b, L.ffn_gate_shexp, L.ffn_up_shexp, L.ffn_down_shexp})
                add(tv);
            for (auto *tv : L.ffn_gate_exps) add(tv);
            for (auto *tv : L.ffn_up_exps) add(tv);
            for (auto *tv : L.ffn_down_exps) add(tv);
        }
    }
    void fill_bf16(const std::string &name, int64_t rows, int64_t cols, bf16_t *dst, cudaStream_t s) override {
        const tensor_view &tv = find(name, rows * cols);
        const size_t n = size_t(rows * cols);
        if (tv.type == dtype::bf16) {
            ck(cudaMemcpyAsync(dst, tv.data, n * 2, cudaMemcpyHostToDevice, s), "upload of weights");
            return;
        }
        std::vector<float> f(n);
        convert_to_f32(tv.type, tv.data, f.data(), n);
        std::vector<uint16_t> h(n);
        for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
        ck(cudaMemcpyAsync(dst, h.data(), n * 2, cudaMemcpyHostToDevice, s), "upload of weights");
        ck(cudaStreamSynchronize(s), "upload of weights"); // h is freed on return
    }
    void fill_f32(const std::string &name, int64_t n, float *dst, cudaStream_t s) override {
        const tensor_view &tv = find(name, n);
        std::vector<float> f(static_cast<size_t>(n));
        convert_to_f32(tv.type, tv.data, f.data(), size_t(n));
        ck(cudaMemcpyAsync(dst, f.data(), size_t(n) * 4, cudaMemcpyHostToDevice, s), "upload of weights");
        ck(cudaStreamSynchronize(s), "upload of weights");
    }

private:
    const tensor_view &find(const std::string &name, int64_t n) const {
        auto it = m_by_name.find(name);
        if (it == m_by_name.end()) throw load_error("missing tensor '" + name + "'");
        const tensor_view &tv = *it->second;
        if (tv.n_elements() != n)
            throw load_error("tensor '" + name + "' in " + tv.file + " has shape " + tv.shape_str() + ", expected " +
                             std::to_string(n) + " elements");
        return tv;
    }
    std::map<std::string, const tensor_view *> m_by_name;
};

// Uniform values with the CPU random backend's spreads; BF16 tensors are generated on the GPU,
// the small fp32 ones (router, bias) on the host.
class random_source final : public weight_source {
public:
    explicit random_source(uint64_t seed) : m_seed(seed) {}
    void fill_bf16(const std::string &name, int64_t rows, int64_t cols, bf16_t *dst, cudaStream_t s) override {
        const bool is_norm = rows == 1 && name.find("norm") != std::string::npos;
        const float stddev = is_norm ? 0.1f : 1.0f / std::sqrt(float(cols));
        fill_random_params p;
        p.out = dst;
        p.n = rows * cols;
        p.seed = m_seed ^ std::hash<std::string>{}(name);
        p.mean = is_norm ? 1.0f : 0.0f;
        p.half_range = stddev * 1.7320508f;
        ck(launch_fill_random(p, s), "fill_random");
    }
    void fill_f32(const std::string &name, int64_t n, float *dst, cudaStream_t s) override {
        const bool is_bias = name.find("correction_bias") != std::string::npos;
        const float half = (is_bias ? 0.01f : 1.0f / std::sqrt(float(n_embd))) * 1.7320508f;
        uint64_t state = m_seed ^ std::hash<std::string>{}(name);
        std::vector<float> f(static_cast<size_t>(n));
        for (auto &v : f) {
            uint64_t z = (state += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            v = (2.0f * float(z >> 40) * (1.0f / 16777216.0f) - 1.0f) * half;
        }
        ck(cudaMemcpyAsync(dst, f.data(), size_t(n) * 4, cudaMemcpyHostToDevice, s), "upload of router weights");
        ck(cudaStreamSynchronize(s), "upload of router weights");
    }
    int64_t n_embd = 1; // the router's input width (its spread is 1/sqrt(n_embd))

private:
    uint64_t m_seed;
};


// The layers' weights, embeddings and norms in one allocation; what build() sizes the staging and
// dequantize buffers by.
struct cuda_backend_impl::weight_placement {
    size_t arena = 0;        // the layers' allocation
    size_t head_arena = 0;   // the FP8 head copy's (0: none)
    bool fp8 = false, blk = false;
    bool fp8_shapes_ok = true; // every FP8 linear fits cuBLASLt's FP8 rules (gemm_lt_fp8_dims_ok)
    int64_t max_piece = 0;     // the largest piece quantized at once (per-channel scales)
    int64_t max_grid = 0;      // block scales: the largest matrix quantized in one piece
    int64_t max_dense_lin = 0; // elements of the widest dense linear
};

// Builds every weight through `src`: placement, one allocation, fill with FP8 quantization.
void cuda_backend_impl::build(weight_source &src) {
    weight_placement wp;
    wp.fp8 = m_params.precision == weight_precision::fp8;
    wp.blk = wp.fp8 && m_params.fp8.scales == scale_layout::block128;
    choose_moe_layout(wp);
    place_weights(wp);
    m_w.arena.alloc(wp.arena, "the model's weights (" + std::string(wp.fp8 ? "FP8" : "BF16") + ")");
    m_w.head_copy.alloc(head_copy_alloc_bytes(wp.head_arena), "the FP8 copy of the LM head"); // (none at 0)
    m_w.head_copy_bytes = wp.head_arena;
    m_w.max_dense_lin = wp.max_dense_lin;
    if (wp.fp8) {
        // Block scales quantize a whole matrix (its pieces staged together: a 128-row block
        // may span q/k/v or gate/up); per-channel scales one piece at a time.
        m_staging.alloc(size_t(wp.blk ? std::max(wp.max_piece, wp.max_grid) : wp.max_piece) * 2,
                        "the FP8 quantization staging buffer");
        // The dequantize path's buffer: with BF16 activations (always with block scales), or
        // for linears the FP8 GEMM cannot take (else allocated on a refusal, ensure_dequantize_buffer).
        if (m_act == activation_format::bf16 || !wp.fp8_shapes_ok) ensure_dequantize_buffer();
    }
    resolve_pointers();
    fill_weights(src);
    m_staging.reset(); // only needed while quantizing
    compute_decode_bytes();
}

// The FP8 routed gate/up stacks tile-major where the kernels read that layout, else why not.
void cuda_backend_impl::choose_moe_layout(const weight_placement &wp) {
    const auto &c = m_cfg;
    const int64_t H = c.n_embd;
    const bool fp8 = wp.fp8, blk = wp.blk;
    if (m_opt.moe_tile_major && c.n_expert > 0) {
        std::string why;
        if (!fp8)
            why = "BF16 weights";
        else if (blk)
            why = "128x128 block scales";
        else if (!fp8_tile_major_ok(c.n_ff_exp, H))
            why = "the experts' width is no multiple of 16 or n_embd of 64";
        else if (m_opt.moe_mma <= 0)
            why = "ES_CUDA_MOE_MMA=0 (the CUDA-core gate/up reads row-major stacks)";
        else if (!moe_gate_up_mma_shape_ok(m_opt.moe_mma_shape, true))
            why = "a shape of the tensor-core gate/up without a tile-major instance "
                  "(ES_CUDA_MOE_MMA_SHAPE)";
        m_opt.moe_tile_major = why.empty();
        m_w.tile_major_note =
            why.empty() ? "routed gate/up stacks tile-major"
                        : "routed gate/up stacks row-major (tile-major does not apply: " + why + ")";
    } else if (c.n_expert > 0) {
        m_w.tile_major_note = "routed gate/up stacks row-major";
    } else {
        m_opt.moe_tile_major = false; // no routed experts
    }
}

// Offsets of every weight in the layers' allocation (and the FP8 head copy's), in upload order.
void cuda_backend_impl::place_weights(weight_placement &wp) {
    const auto &c = m_cfg;
    const int64_t H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim();
    const bool fp8 = wp.fp8;
    const weight_format lin_fmt = fp8 ? weight_format::fp8_e4m3 : weight_format::bf16;
    size_t &arena = wp.arena;
    auto take = [&](size_t bytes) {
        const size_t off = arena;
        arena += align256(bytes);
        return off;
    };
    const bool blk = wp.blk;
    int64_t &max_grid = wp.max_grid;
    // `stack`: the number of matrices (experts) of grid_rows = n / stack rows each.
    auto plan_lin = [&](dlin &L, int64_t n, int64_t k, weight_format f, const std::string &what,
                        int64_t stack = 1) {
        L.n = n;
        L.k = k;
        L.fmt = f;
        L.grid_rows = n / stack;
        L.layout = f == weight_format::fp8_e4m3 && blk ? scale_layout::block128 : scale_layout::channel;
        if (f == weight_format::fp8_e4m3 && !gemm_lt_fp8_dims_ok(n, k)) wp.fp8_shapes_ok = false;
        if (L.layout == scale_layout::block128) {
            if (k % 16 != 0)
                throw load_error(
                    "--fp8-scales block128: " + what + " has " + std::to_string(k) +
                    " input columns, not a multiple of 16 (the kernels' 16-byte FP8 vectors)");
            max_grid = std::max(max_grid, L.grid_rows * k);
        }
        L.w_off = take(size_t(n * k) * weight_format_bytes(f));
        if (f == weight_format::fp8_e4m3) L.s_off = take(size_t(L.scale_count()) * 4);
    };
    m_w.tok_embd_off = take(size_t(c.n_vocab * H) * 2);
    m_w.output_norm_off = take(size_t(H) * 2);
    if (!c.tie_word_embeddings) m_w.head_off = take(size_t(c.n_vocab * H) * 2);
    // fp8_policy::head: an E4M3 copy of the head, quantized from the BF16 table on the GPU, in
    // an allocation of its own: growing the weights' allocation by its size made the
    // 21B-A3B's decode 2-5% slower on the H200, so the layers' allocation stays the same size
    // with and without it.
    m_w.head_fp8 = dlin{};
    if (fp8 && m_params.fp8.head) {
        const size_t layers_arena = arena;
        arena = 0;
        plan_lin(m_w.head_fp8, c.n_vocab, H, weight_format::fp8_e4m3, "the LM head");
        wp.head_arena = arena;
        arena = layers_arena;
    }
    max_grid = 0; // the head is quantized from the BF16 table in place, not staged
    // Measuring aids: ES_CUDA_WEIGHTS_PAD_KB=N leaves N KiB unused before the layers' weights,
    // ES_CUDA_WEIGHTS_TAIL_KB=N after them. On the H200 the decode step depends on the weight
    // allocation's size, not on where the layers lie in it: 2 MiB more, either way, made the
    // 21B-A3B's step 3% slower, and an FP8 head copy's 253 MiB inside it 5% (hence the copy's
    // allocation of its own, above).
    auto env_kib = [](const char *name) -> size_t { // 0 when unset; at most 1 TiB
        return size_t(std::clamp<int64_t>(switch_int(name, 0), 0, int64_t(1) << 30)) << 10;
    };
    if (const size_t pad = env_kib("ES_CUDA_WEIGHTS_PAD_KB")) take(pad);
    m_w.layers.assign(size_t(c.n_layer), dlayer{});
    int64_t &max_piece = wp.max_piece, &max_dense_lin = wp.max_dense_lin;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        dlayer &L = m_w.layers[il];
        L.is_moe = c.is_moe_layer(il);
        L.attn_norm_off = take(size_t(H) * 2);
        L.ffn_norm_off = take(size_t(H) * 2);
        const std::string lp = "layer " + std::to_string(il) + "'s ";
        plan_lin(L.wqkv, qd + 2 * kvd, H, lin_fmt, lp + "q/k/v projection");
        plan_lin(L.wo, H, qd, fp8 && m_params.fp8.attn_out ? lin_fmt : weight_format::bf16,
                 lp + "o_proj");
        max_piece = std::max({max_piece, qd * H, H * qd});
        max_dense_lin = std::max({max_dense_lin, (qd + 2 * kvd) * H, H * qd});
        if (!L.is_moe) {
            plan_lin(L.gate_up, 2 * c.n_ff, H, lin_fmt, lp + "gate/up projection");
            plan_lin(L.down, H, c.n_ff, lin_fmt, lp + "down_proj");
            max_piece = std::max(max_piece, c.n_ff * H);
            max_dense_lin = std::max(max_dense_lin, 2 * c.n_ff * H);
            continue;
        }
        L.router_off = take(size_t(c.n_expert * H) * 4);
        L.bias_off = take(size_t(c.n_expert) * 4);
        plan_lin(L.exp_gate_up, c.n_expert * 2 * c.n_ff_exp, H, lin_fmt, lp + "experts' gate/up",
                 c.n_expert);
        plan_lin(L.exp_down, c.n_expert * H, c.n_ff_exp, lin_fmt, lp + "experts' down_proj", c.n_expert);
        max_piece = std::max(max_piece, c.n_ff_exp * H);
        if (c.n_expert_shared > 0) {
            const int64_t F = c.n_ff_exp * c.n_expert_shared;
            plan_lin(L.sh_gate_up, 2 * F, H, lin_fmt, lp + "shared experts' gate/up");
            plan_lin(L.sh_down, H, F, lin_fmt, lp + "shared experts' down_proj");
            max_piece = std::max(max_piece, F * H);
            max_dense_lin = std::max(max_dense_lin, 2 * F * H);
        }
    }
    m_w.inv_freq_off = take(size_t(c.head_dim / 2) * 4);
    // The same after them (the layers stay where they are; only the arena grows).
    if (const size_t pad = env_kib("ES_CUDA_WEIGHTS_TAIL_KB")) take(pad);
    // An FP8 head takes the dequantize path too when its step does (as the twin model has it).
    if (m_w.head_fp8.n) max_dense_lin = std::max(max_dense_lin, c.n_vocab * H);
}

// Every weight from `src` into its place: BF16 straight in, FP8 through the staging buffer and the
// quantize kernel, the routed gate/up rewritten tile-major where chosen; progress over elements.
void cuda_backend_impl::fill_weights(weight_source &src) {
    const auto &c = m_cfg;
    const int64_t H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim();
    // Fill, with progress over elements.
    size_t total = size_t(c.n_vocab * H) * (c.tie_word_embeddings ? 1 : 2), done = 0;
    for (const auto &L : m_w.layers)
        for (const dlin *d : {&L.wqkv, &L.wo, &L.gate_up, &L.down, &L.exp_gate_up, &L.exp_down, &L.sh_gate_up, &L.sh_down})
            total += size_t(d->n * d->k);
    auto progress = [&](int64_t n) {
        done += size_t(n);
        if (m_params.on_progress && total) m_params.on_progress(float(std::min(1.0, double(done) / double(total))));
    };
    // A piece of `rows` rows of a linear at row offset `row0`: straight in (BF16) or through
    // the staging buffer and the quantize kernel (FP8).
    auto piece = [&](dlin &L, int64_t row0, const std::string &name, int64_t rows) {
        if (L.fmt == weight_format::bf16) {
            src.fill_bf16(name, rows, L.k, m_w.arena.at<bf16_t>(L.w_off) + row0 * L.k, m_stream);
        } else if (L.layout == scale_layout::block128) {
            // Staged at its row in the matrix's grid; quantized when the grid is complete.
            src.fill_bf16(name, rows, L.k, m_staging.at<bf16_t>() + (row0 % L.grid_rows) * L.k, m_stream);
            if ((row0 % L.grid_rows) + rows == L.grid_rows) {
                const int64_t g = row0 / L.grid_rows;
                fp8_quantize_params q;
                q.w = m_staging.at<bf16_t>();
                q.q = m_w.arena.at<fp8_t>(L.w_off) + g * L.grid_rows * L.k;
                q.scale = m_w.arena.at<float>(L.s_off) + g * L.grid_scales();
                q.n = L.grid_rows;
                q.k = L.k;
                q.layout = scale_layout::block128;
                op("fp8_quantize", [&] { return launch_fp8_quantize(q, m_stream); });
            }
        } else {
            src.fill_bf16(name, rows, L.k, m_staging.at<bf16_t>(), m_stream);
            fp8_quantize_params q;
            q.w = m_staging.at<bf16_t>();
            q.q = m_w.arena.at<fp8_t>(L.w_off) + row0 * L.k;
            q.scale = m_w.arena.at<float>(L.s_off) + row0;
            q.n = rows;
            q.k = L.k;
            op("fp8_quantize", [&] { return launch_fp8_quantize(q, m_stream); });
        }
        progress(rows * L.k);
    };
    src.fill_bf16("model.embed_tokens.weight", c.n_vocab, H, m_w.arena.at<bf16_t>(m_w.tok_embd_off), m_stream);
    progress(c.n_vocab * H);
    src.fill_bf16("model.norm.weight", 1, H, m_w.arena.at<bf16_t>(m_w.output_norm_off), m_stream);
    if (!c.tie_word_embeddings) {
        src.fill_bf16("lm_head.weight", c.n_vocab, H, m_w.arena.at<bf16_t>(m_w.head_off), m_stream);
        progress(c.n_vocab * H);
    }
    if (m_w.head_fp8.n) quantize_head_copy(m_w.head_copy);
    if (auto *rs = dynamic_cast<random_source *>(&src)) rs->n_embd = H;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        dlayer &L = m_w.layers[il];
        const std::string p = "model.layers." + std::to_string(il) + ".";
        src.fill_bf16(p + "input_layernorm.weight", 1, H, m_w.arena.at<bf16_t>(L.attn_norm_off), m_stream);
        src.fill_bf16(p + "post_attention_layernorm.weight", 1, H, m_w.arena.at<bf16_t>(L.ffn_norm_off), m_stream);
        piece(L.wqkv, 0, p + "self_attn.q_proj.weight", qd);
        piece(L.wqkv, qd, p + "self_attn.k_proj.weight", kvd);
        piece(L.wqkv, qd + kvd, p + "self_attn.v_proj.weight", kvd);
        piece(L.wo, 0, p + "self_attn.o_proj.weight", H);
        if (!L.is_moe) {
            piece(L.gate_up, 0, p + "mlp.gate_proj.weight", c.n_ff);
            piece(L.gate_up, c.n_ff, p + "mlp.up_proj.weight", c.n_ff);
            piece(L.down, 0, p + "mlp.down_proj.weight", H);
            continue;
        }
        src.fill_f32(p + "mlp.gate.weight", c.n_expert * H, m_w.arena.at<float>(L.router_off), m_stream);
        src.fill_f32(p + "mlp.moe_statics.e_score_correction_bias", c.n_expert, m_w.arena.at<float>(L.bias_off),
                     m_stream);
        const int64_t Fe = c.n_ff_exp;
        for (int64_t e = 0; e < c.n_expert; ++e) {
            const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
            piece(L.exp_gate_up, e * 2 * Fe, q + "gate_proj.weight", Fe);
            piece(L.exp_gate_up, e * 2 * Fe + Fe, q + "up_proj.weight", Fe);
            if (m_opt.moe_tile_major) { // expert e's gate/up, quantized row-major, rewritten tile-major
                fp8_t *ex = m_w.arena.at<fp8_t>(L.exp_gate_up.w_off) + e * 2 * Fe * H;
                const size_t bytes = size_t(2 * Fe * H);
                ck(cudaMemcpyAsync(m_staging.at<fp8_t>(), ex, bytes, cudaMemcpyDeviceToDevice, m_stream),
                   "tile-major copy of the experts' gate/up");
                fp8_tile_major_params tm;
                tm.src = m_staging.at<fp8_t>();
                tm.dst = ex;
                tm.n_expert = 1;
                tm.n_ff = Fe;
                tm.n_embd = H;
                op("fp8_tile_major", [&] { return launch_fp8_tile_major(tm, m_stream); });
            }
            piece(L.exp_down, e * H, q + "down_proj.weight", H);
        }
        if (c.n_expert_shared > 0) {
            const int64_t F = Fe * c.n_expert_shared;
            piece(L.sh_gate_up, 0, p + "mlp.shared_experts.gate_proj.weight", F);
            piece(L.sh_gate_up, F, p + "mlp.shared_experts.up_proj.weight", F);
            piece(L.sh_down, 0, p + "mlp.shared_experts.down_proj.weight", H);
        }
    }
    // RoPE frequencies exactly as the CPU backend computes them (fp32 pow on the host).
    std::vector<float> inv_freq(size_t(c.head_dim / 2));
    for (int64_t i = 0; i < c.head_dim / 2; ++i)
        inv_freq[i] = 1.0f / std::pow(float(c.rope_theta), float(2 * i) / float(c.head_dim));
    ck(cudaMemcpyAsync(m_w.arena.at<float>(m_w.inv_freq_off), inv_freq.data(), inv_freq.size() * 4,
                       cudaMemcpyHostToDevice, m_stream),
       "upload of RoPE frequencies");
    ck(cudaStreamSynchronize(m_stream), "weight upload"); // (inv_freq and the sources' buffers are freed next)
}

void cuda_backend_impl::resolve_pointers() {
    auto res = [&](dlin &L) {
        if (L.n == 0) return;
        L.w = m_w.arena.at(L.w_off);
        L.scale = L.fmt == weight_format::fp8_e4m3 ? m_w.arena.at<float>(L.s_off) : nullptr;
    };
    for (auto &L : m_w.layers) {
        L.attn_norm = m_w.arena.at<bf16_t>(L.attn_norm_off);
        L.ffn_norm = m_w.arena.at<bf16_t>(L.ffn_norm_off);
        for (dlin *d : {&L.wqkv, &L.wo, &L.gate_up, &L.down, &L.exp_gate_up, &L.exp_down, &L.sh_gate_up, &L.sh_down})
            res(*d);
        if (L.is_moe) {
            L.router = m_w.arena.at<float>(L.router_off);
            L.bias = m_w.arena.at<float>(L.bias_off);
        }
    }
    m_w.head.n = m_cfg.n_vocab;
    m_w.head.k = m_cfg.n_embd;
    m_w.head.fmt = weight_format::bf16; // BF16 at either precision unless fp8_policy::head
    m_w.head.grid_rows = m_cfg.n_vocab;
    m_w.head.w = m_w.arena.at(m_cfg.tie_word_embeddings ? m_w.tok_embd_off : m_w.head_off);
    if (m_w.head_fp8.n) {
        m_w.head = m_w.head_fp8;
        m_w.head.w = m_w.head_copy.at(m_w.head_fp8.w_off);
        m_w.head.scale = m_w.head_copy.at<float>(m_w.head_fp8.s_off);
    }
}

// fp8_policy::head: the E4M3 copy of the head, quantized from the BF16 table on the GPU into `to`.
void cuda_backend_impl::quantize_head_copy(const device_buffer &to) {
    fp8_quantize_params q;
    q.w = m_w.arena.at<bf16_t>(m_cfg.tie_word_embeddings ? m_w.tok_embd_off : m_w.head_off);
    q.q = to.at<fp8_t>(m_w.head_fp8.w_off);
    q.scale = to.at<float>(m_w.head_fp8.s_off);
    q.n = m_cfg.n_vocab;
    q.k = m_cfg.n_embd;
    q.layout = m_w.head_fp8.layout;
    op("fp8_quantize", [&] { return launch_fp8_quantize(q, m_stream); });
}

// A KV cache that would leave less than a twentieth of the device free beside the FP8 head
// copy's placement slack (head_copy_alloc_bytes) gets that slack: the copy moves to an
// allocation of its own size, quantized again from the BF16 table (the same codes). The
// caller has cleared the graphs, which hold the old copy's address.
void cuda_backend_impl::give_back_head_slack_for(size_t kv_bytes) {
    if (m_w.head_copy.bytes() <= m_w.head_copy_bytes) return;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    if (free_b >= kv_bytes + total_b / 20) return;
    device_buffer exact;
    try {
        exact.alloc(m_w.head_copy_bytes, "the FP8 copy of the LM head");
    } catch (const load_error &) { // no room even for the copy: keep it where it is
        return;
    }
    quantize_head_copy(exact);
    ck(cudaStreamSynchronize(m_stream), "the FP8 head copy's move");
    m_w.head_copy.swap(exact); // (the old allocation is freed with `exact`)
    m_w.head.w = m_w.head_copy.at(m_w.head_fp8.w_off);
    m_w.head.scale = m_w.head_copy.at<float>(m_w.head_fp8.s_off);
}

void cuda_backend_impl::compute_decode_bytes() {
    const auto &c = m_cfg;
    double b = double(c.n_embd) * 2 * 2 + double(m_w.head.bytes()); // one embedding row, final norm, head
    for (const auto &L : m_w.layers) {
        b += double(c.n_embd) * 2 * 2 + double(L.wqkv.bytes() + L.wo.bytes());
        if (!L.is_moe) {
            b += double(L.gate_up.bytes() + L.down.bytes());
            continue;
        }
        b += double(c.n_expert * c.n_embd + c.n_expert) * 4;
        b += double(L.exp_gate_up.bytes() + L.exp_down.bytes()) * double(c.n_expert_used) / double(c.n_expert);
        b += double(L.sh_gate_up.bytes() + L.sh_down.bytes());
    }
    m_w.decode_bytes = b;
}

// The FP8 head copy's allocation: a copy of 128 MiB to 1 GiB gets 1 GiB where that slack costs
// at most 1% of the device's memory and leaves a tenth of it free (the memory report names the
// slack; weights_bytes() and the will-it-fit estimate count the copy's own bytes; a KV cache
// that needs the room takes it back: give_back_head_slack_for). With the
// 21B-A3B's 253 MiB copy in an allocation of its own size, the routed gate/up GEMV of every MoE
// layer ran ~1.4 µs slower on the H200 (17.6–18.2 against 16.4–16.6 µs; 2 MiB more: 20.6); at 1
// or 2 GiB it runs as without the copy, the step 1,484–1,492 → 1,451–1,461 µs (the 0.3B's 101 MiB
// copy: no difference). Why one allocation's placement slows the reads of another is not
// known; the layers' own allocation shows the same (build(), ES_CUDA_WEIGHTS_PAD_KB).
// ES_CUDA_HEAD_ALLOC_MIB=N (a measuring aid) takes max(N MiB, the copy) instead.
size_t cuda_backend_impl::head_copy_alloc_bytes(size_t bytes) const {
    if (bytes == 0) return 0;
    const size_t want = size_t(1) << 30;
    if (const auto v = switch_value("ES_CUDA_HEAD_ALLOC_MIB"))
        return std::max(bytes, size_t(std::clamp(std::atoll(v->c_str()), 0LL, 1LL << 20)) << 20);
    if (bytes >= want || bytes < want / 8) return bytes;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return bytes;
    }
    const bool cheap = (want - bytes) * 100 <= total_b, room = free_b >= want + total_b / 10;
    return cheap && room ? want : bytes;
}

result<std::unique_ptr<backend>> make_cuda_backend(const model_config &cfg, const model_tensors &t,
                                                   const cuda_backend_params &p) {
    auto dev = probe_cuda_device(p.device);
    if (!dev) return dev.err();
    return catch_errors([&]() -> result<std::unique_ptr<backend>> {
        auto be = std::make_unique<cuda_backend_impl>(cfg, p, *dev);
        checkpoint_source src(t);
        be->build(src);
        return std::unique_ptr<backend>(std::move(be));
    });
}

result<std::unique_ptr<backend>> make_cuda_backend_random(const model_config &cfg, uint64_t seed,
                                                          const cuda_backend_params &p) {
    auto dev = probe_cuda_device(p.device);
    if (!dev) return dev.err();
    return catch_errors([&]() -> result<std::unique_ptr<backend>> {
        auto be = std::make_unique<cuda_backend_impl>(cfg, p, *dev);
        random_source src(seed);
        be->build(src);
        return std::unique_ptr<backend>(std::move(be));
    });
}

} // namespace es
