// CUDA backend (see cuda_backend.h): device memory arenas (weights, KV pools, workspace), the
// forward pass as a sequence of kernels from kernels/, CUDA graphs for decode-sized steps, and
// the translation of every CUDA failure into an es::error. Device memory comes from plain
// cudaMalloc: one allocation per arena for weights and KV, per-step scratch from the caching
// workspace allocator (device_allocator.h). Invariants: one stream; the host waits for the stream
// only at the end of forward() (logits and the routing record come back then); a workspace block
// a live CUDA graph captured is never freed (the allocator pins them until clear_graphs).
#include "engine/cuda/backend/cuda_backend.h"

#include "engine/core/dtype.h"
#include "engine/core/switches.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_twin_model.h"
#include "engine/cuda/device_allocator.h"

#include "kernels/act_quantize.cuh"
#include "kernels/argmax.cuh"
#include "kernels/attention.cuh"
#include "kernels/copy_bytes.cuh"
#include "kernels/embedding.cuh"
#include "kernels/fill_random.cuh"
#include "kernels/fp8_dequantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/fp8_tile_major.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/gemv.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_down_gemv.cuh"
#include "kernels/moe_front.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/topk_logits.cuh"

#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <tuple>

namespace es {
namespace {

// Steps with at most this many tokens use the GEMV kernels (weights streamed once per step);
// larger ones use cuBLASLt and the grouped expert GEMM (shared with the twin model).
constexpr int64_t k_gemv_max_tokens = cuda_gemv_max_tokens;
// Routed experts: GEMV per (token, choice) up to this many tokens, then grouped by expert
// (ES_CUDA_MOE_GEMV_MAX_TOKENS, a measuring aid, changes it).
constexpr int64_t k_moe_gemv_max_tokens = 8;
// Steps with at most this many tokens are captured as CUDA graphs and replayed.
constexpr int64_t k_graph_max_tokens = 8;
// Captured decode graphs kept at most (least recently replayed dropped first). A graph is keyed by
// the step's shape (tokens, rows, sequences, block-table stride, tiles, KV splits, …): one chat
// needs a few dozen over a long reply, a server's mix of batches can ask for thousands.
constexpr size_t k_max_graphs = 256;
// Steps of at most this many tokens fuse norms, RoPE/KV writes and the MoE front into fewer
// launches (gemv.cuh, moe_front.cuh). On the H200 one token gains 3–5%; at 4 and 8 tokens the fused kernels, which normalize every row in every
// block, lose 20–35% against the separate launches.
constexpr int64_t k_fuse_max_tokens = 1;
// Attention of decode-sized steps splits each sequence's KV range over up to this many blocks
// (flash-decoding: a step has only n_head_kv tiles of work otherwise), one split per 32-position
// chunk of the longest context in the step. Measured on the H200 (0.3B, tg128): always 16 splits
// 847 tok/s, one split per 256 positions (so none below 256) 696 tok/s. The split count is part
// of the CUDA graph key, so a long generation captures at most 16 graphs.
constexpr int64_t k_decode_kv_splits = 16;
// chunks: 32-position chunks per split at least (1 by default; ES_CUDA_KV_SPLIT_CHUNKS, a measuring aid).
int64_t decode_kv_splits(int64_t max_pos, int64_t chunks = 1) {
    return std::min<int64_t>(k_decode_kv_splits, max_pos / 32 / std::max<int64_t>(chunks, 1) + 1);
}
constexpr size_t k_cublas_workspace_bytes = size_t(32) << 20;

std::string mib(size_t b) { return std::to_string((b + (1u << 19)) >> 20) + " MiB"; }

bool is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
        return true;
    default:
        return false;
    }
}

[[noreturn]] void throw_cuda(cudaError_t e, const std::string &what) {
    std::string msg = "CUDA error in " + what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    if (is_sticky(e)) msg += "; the GPU context is no longer usable, restart the program";
    throw load_error(msg);
}

void ck(cudaError_t e, const char *what) {
    if (e != cudaSuccess) throw_cuda(e, what);
}

size_t align256(size_t b) { return (b + 255) & ~size_t(255); }

// One cudaMalloc; out of memory becomes a message with the sizes involved.
class device_buffer {
public:
    device_buffer() = default;
    ~device_buffer() { reset(); }
    device_buffer(const device_buffer &) = delete;
    device_buffer &operator=(const device_buffer &) = delete;

    void alloc(size_t bytes, const std::string &what) {
        reset();
        if (bytes == 0) return;
        const cudaError_t e = cudaMalloc(&m_p, bytes);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError(); // not sticky: clear it
            m_p = nullptr;
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            throw load_error("out of GPU memory: " + what + " needs " + mib(bytes) + " but only " + mib(free_b) +
                             " of " + mib(total_b) + " are free");
        }
        ck(e, ("cudaMalloc for " + what).c_str());
        m_bytes = bytes;
    }
    void reset() {
        if (m_p) cudaFree(m_p);
        m_p = nullptr;
        m_bytes = 0;
    }
    void swap(device_buffer &o) noexcept {
        std::swap(m_p, o.m_p);
        std::swap(m_bytes, o.m_bytes);
    }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_p) + offset);
    }
    size_t bytes() const { return m_bytes; }

private:
    void *m_p = nullptr;
    size_t m_bytes = 0;
};

class pinned_buffer {
public:
    pinned_buffer() = default;
    ~pinned_buffer() { reset(); }
    pinned_buffer(const pinned_buffer &) = delete;
    pinned_buffer &operator=(const pinned_buffer &) = delete;
    void alloc(size_t bytes, const char *what) {
        reset();
        if (bytes == 0) return;
        ck(cudaMallocHost(&m_p, bytes), what);
        m_bytes = bytes;
    }
    void reset() {
        if (m_p) cudaFreeHost(m_p);
        m_p = nullptr;
        m_bytes = 0;
    }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_p) + offset);
    }
    size_t bytes() const { return m_bytes; }

private:
    void *m_p = nullptr;
    size_t m_bytes = 0;
};

// The workspace allocator's segments: plain cudaMalloc on the current device (never managed
// memory). Out of memory is nullptr, so the allocator can give its cache back and ask again; any
// other CUDA error is thrown.
device_memory_source cuda_memory_source() {
    device_memory_source s;
    s.alloc = [](size_t bytes) -> void * {
        void *p = nullptr;
        const cudaError_t e = cudaMalloc(&p, bytes);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError(); // not sticky: clear it
            return nullptr;
        }
        ck(e, "cudaMalloc for the workspace");
        return p;
    };
    s.free = [](void *p, size_t) {
        if (cudaFree(p) != cudaSuccess) cudaGetLastError();
    };
    s.describe = []() -> std::string {
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            cudaGetLastError();
            return {};
        }
        return "device: " + format_bytes(free_b) + " free of " + format_bytes(total_b);
    };
    return s;
}

// A block of the workspace allocator with device_buffer's interface, for per-step scratch (the
// forward pass's workspace, the batch inputs, the FP8 dequantize and staging buffers). Out of
// memory is an es::load_error naming the request and the allocator's state; so is reset() of a
// block a live CUDA graph uses (it stays allocated: the graph still reads it).
class workspace_buffer {
public:
    explicit workspace_buffer(device_allocator &a) : m_alloc(a) {}
    ~workspace_buffer() {
        if (m_p) (void)m_alloc.free(m_p); // the backend's destructor destroyed the graphs first
    }
    workspace_buffer(const workspace_buffer &) = delete;
    workspace_buffer &operator=(const workspace_buffer &) = delete;

    void alloc(size_t bytes, const std::string &what) {
        reset();
        if (bytes == 0) return;
        result<void *> r = m_alloc.allocate(bytes, what);
        if (!r) throw load_error(r.message());
        m_p = *r;
        m_bytes = bytes;
    }
    void reset() {
        if (!m_p) return;
        if (const status st = m_alloc.free(m_p); !st) throw load_error(st.message());
        m_p = nullptr;
        m_bytes = 0;
    }
    template <typename T = unsigned char>
    T *at(size_t offset = 0) const {
        return reinterpret_cast<T *>(static_cast<unsigned char *>(m_p) + offset);
    }
    size_t bytes() const { return m_bytes; }

private:
    device_allocator &m_alloc;
    void *m_p = nullptr;
    size_t m_bytes = 0;
};

// A linear layer's weights in the weights arena: [n, k] in fmt, plus fp32 scales for FP8 in
// `layout`. Stacks of experts are one dlin with n = n_expert · rows per expert; with block scales
// each expert's [grid_rows, k] matrix has its own grid of fp8_scale_count(grid_rows, k) scales,
// expert e's at scale + e · fp8_scale_count(grid_rows, k, block128) (grid_rows = n: one matrix).
struct dlin {
    size_t w_off = 0, s_off = 0;
    int64_t n = 0, k = 0;
    weight_format fmt = weight_format::bf16;
    scale_layout layout = scale_layout::channel; // FP8 only
    int64_t grid_rows = 0;                       // rows of one scale grid (a stack's expert; else n)
    const void *w = nullptr;
    const float *scale = nullptr;
    int64_t grid_scales() const { return fp8_scale_count(grid_rows, k, layout); }
    int64_t scale_count() const { return grid_rows > 0 ? n / grid_rows * grid_scales() : 0; }
    size_t bytes() const {
        return size_t(n * k) * weight_format_bytes(fmt) +
               (fmt == weight_format::fp8_e4m3 ? size_t(scale_count()) * 4 : 0);
    }
};

struct dlayer {
    size_t attn_norm_off = 0, ffn_norm_off = 0;
    const bf16_t *attn_norm = nullptr, *ffn_norm = nullptr; // [n_embd]
    dlin wqkv, wo;                                          // [q+2kv, H], [H, q]
    bool is_moe = false;
    dlin gate_up, down;                                     // dense: [2F, H], [H, F]
    size_t router_off = 0, bias_off = 0;
    const float *router = nullptr, *bias = nullptr;         // [E, H], [E]
    dlin exp_gate_up, exp_down;                             // [E·2Fe, H], [E·H, Fe]
    dlin sh_gate_up, sh_down;                               // [2Fs, H], [H, Fs]
};

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

class cuda_backend_impl final : public cuda_backend {
public:
    cuda_backend_impl(const model_config &cfg, const cuda_backend_params &p, const cuda_device_info &dev)
        : m_cfg(cfg), m_params(p), m_dev(dev) {
        ck(cudaSetDevice(p.device), "cudaSetDevice");
        ck(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
        for (cudaEvent_t &e : m_done) ck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
        ck(create_gemm_lt_context(&m_lt, k_cublas_workspace_bytes), "cuBLASLt initialisation");
        // FP8 activations need cuBLASLt's outer-vector scaling, which needs compute capability
        // 9.0: below, the dequantize path from the start (a refusal at run time does the same).
        m_act = p.precision == weight_precision::fp8 ? p.activations : activation_format::bf16;
        if (m_act != activation_format::bf16 && dev.cc_major < 9) {
            m_act_note = "FP8 activations need compute capability 9.0 (cuBLASLt outer-vector scaling); " +
                         dev.name + " has " + std::to_string(dev.cc_major) + "." +
                         std::to_string(dev.cc_minor) + ": BF16 activations, weights dequantized";
            m_act = activation_format::bf16;
        }
        // Block scales: cuBLASLt's FP8 GEMM scales weights per row (outer vector) only.
        if (m_act != activation_format::bf16 && p.fp8.scales == scale_layout::block128) {
            m_act_note = "128x128 block scales (cuBLASLt's FP8 GEMM takes per-row weight scales only): BF16 "
                         "activations, weights dequantized";
            m_act = activation_format::bf16;
        }
        read_switches(dev);
    }

    // The runtime switches (core/switches.h has each one's meaning; those that change results
    // are read only in developer builds).
    void read_switches(const cuda_device_info &dev) {
        set_programmatic_launch(dev.cc_major >= 9 && switch_flag("ES_CUDA_PDL", true));
        m_moe_down_rows = switch_value("ES_CUDA_MOE_DOWN").value_or("rows") != "gather";
        m_fuse = switch_flag("ES_CUDA_FUSE", m_fuse);
        m_kv_split_chunks = int(std::max<int64_t>(1, switch_int("ES_CUDA_KV_SPLIT_CHUNKS", m_kv_split_chunks)));
        if (const auto rw = switch_value("ES_CUDA_MOE_DOWN_ROWS_PER_WARP")) {
            if (*rw != "1" && *rw != "2" && *rw != "4")
                throw load_error("ES_CUDA_MOE_DOWN_ROWS_PER_WARP must be 1, 2 or 4, not '" + *rw + "'");
            m_moe_down_rows_per_warp = std::stoi(*rw);
        }
        m_moe_gemv_max_tokens = std::max<int64_t>(0, switch_int("ES_CUDA_MOE_GEMV_MAX_TOKENS", m_moe_gemv_max_tokens));
        m_moe_slot_counters = switch_flag("ES_CUDA_MOE_SLOT_COUNTERS", m_moe_slot_counters);
        m_router_tiles_min = std::max<int64_t>(0, switch_int("ES_CUDA_ROUTER_TILES_MIN", m_router_tiles_min));
        m_moe_wgmma = switch_flag("ES_CUDA_MOE_WGMMA", m_moe_wgmma);
        m_moe_wgmma_min = std::max<int64_t>(0, switch_int("ES_CUDA_MOE_WGMMA_MIN", m_moe_wgmma_min));
        m_moe_fp8_act = switch_flag("ES_CUDA_MOE_FP8_ACT", m_moe_fp8_act);
        m_moe_mma = int(std::max<int64_t>(0, switch_int("ES_CUDA_MOE_MMA", m_moe_mma)));
        if (const auto ms = switch_value("ES_CUDA_MOE_MMA_SHAPE")) m_moe_mma_shape = parse_mma_shape(*ms);
        m_moe_tile_major = switch_flag("ES_CUDA_MOE_TILE_MAJOR", m_params.moe_tile_major);
        m_max_graphs = size_t(std::max<int64_t>(1, switch_int("ES_CUDA_MAX_GRAPHS", int64_t(m_max_graphs))));
        if (const auto co = switch_value("ES_CUDA_CARVEOUT")) set_kernel_carveout(std::atoi(co->c_str()));
        if (const auto pm = switch_value("ES_CUDA_GEMV_PRELOAD_MIN_KB"))
            set_gemv_preload_min_bytes(int64_t(std::max(0, std::atoi(pm->c_str()))) << 10);
        if (const auto nr = switch_value("ES_CUDA_NORM_ROWS")) set_moe_gate_up_norm_rows(std::atoi(nr->c_str()));
        if (const auto lp = switch_value("ES_CUDA_L2_PREFETCH_KB")) {
            const long long kb = std::atoll(lp->c_str());
            set_l2_prefetch_max_bytes(kb < 0 ? -1 : int64_t(kb) << 10);
        }
        m_combine_norm = switch_flag("ES_CUDA_COMBINE_NORM", m_combine_norm);
        m_head_pick = switch_flag("ES_CUDA_HEAD_PICK", m_head_pick);
        m_zero_copy = switch_flag("ES_CUDA_ZERO_COPY", m_zero_copy);
        if (switch_value("ES_CUDA_ATTN_CLUSTER")) set_attention_cluster_merge(switch_flag("ES_CUDA_ATTN_CLUSTER", true));
        if (const auto am = switch_value("ES_CUDA_ATTN_MERGE")) set_attention_merge_push(*am == "push");
        if (const auto skip = switch_value("ES_CUDA_SKIP_OPS")) {
            std::string cur;
            for (const char ch : *skip + ",") {
                if (ch != ',') {
                    cur += ch;
                } else if (!cur.empty()) {
                    m_skip_ops.push_back(cur);
                    cur.clear();
                }
            }
        }
    }

    // "warps/tiles/depth[/wave]" → an instance of the tensor-core routed gate/up, or a refusal.
    static moe_gate_up_gemv_params::mma_shape_t parse_mma_shape(const std::string &text) {
        moe_gate_up_gemv_params::mma_shape_t m;
        std::vector<std::string> part;
        for (std::string v = text; !v.empty();) {
            const size_t slash = v.find('/');
            part.push_back(v.substr(0, slash));
            v = slash == std::string::npos ? "" : v.substr(slash + 1);
        }
        bool ok = part.size() >= 3;
        try {
            if (ok) {
                m.warps = std::stoi(part[0]);
                m.tiles = std::stoi(part[1]);
                m.depth = std::stoi(part[2]);
            }
        } catch (const std::exception &) {
            ok = false;
        }
        for (size_t k = 3; ok && k < part.size(); ++k) ok = part[k] == "wave";
        if (ok && part.size() > 3) m.wave = true;
        if (!ok || !moe_gate_up_mma_shape_ok(m))
            throw load_error("ES_CUDA_MOE_MMA_SHAPE='" + text +
                             "' is not a shape of the routed gate/up's tensor-core kernel "
                             "(warps/tiles/depth[/wave]; kernels/moe_gate_up_gemv.cu lists them)");
        return m;
    }
    ~cuda_backend_impl() override {
        if (m_stream) cudaStreamSynchronize(m_stream);
        clear_graphs();
        for (cudaEvent_t e : m_events) cudaEventDestroy(e);
        for (cudaEvent_t e : m_done)
            if (e) cudaEventDestroy(e);
        destroy_gemm_lt_context(m_lt);
        if (m_stream) cudaStreamDestroy(m_stream);
    }

    std::string name() const override {
        return "cuda:" + std::to_string(m_params.device) + " " + m_dev.name +
               (m_params.precision == weight_precision::fp8
                    ? std::string(" (fp8, ") +
                          (m_params.fp8.scales == scale_layout::block128 ? "block128 scales, " : "") +
                          activation_format_name(m_act) + " activations" + kv_name_suffix() + ")"
                    : std::string(" (bf16") + kv_name_suffix() + ")");
    }
    const model_config &config() const override { return m_cfg; }
    size_t weights_bytes() const override { return m_weights.bytes() + m_head_copy_bytes; }
    const kv_cache_params &kv_params() const override { return m_kv; }
    size_t kv_block_bytes() const override {
        return size_t(m_kv.block_size) * size_t(m_cfg.kv_dim()) * 2 * kv_format_bytes(kv_fmt()) *
               size_t(m_cfg.n_layer);
    }
    weight_precision precision() const override { return m_params.precision; }
    activation_format activations() const override { return m_act; }
    std::string activation_note() const override { return m_act_note; }
    double decode_weight_bytes() const override { return m_decode_bytes; }

    void set_profiling(bool on) override {
        m_profiling = on;
        m_prof.clear();
    }
    std::vector<kernel_profile_row> profile() const override {
        std::vector<kernel_profile_row> rows;
        for (const auto &[name, v] : m_prof) rows.push_back({name, v.first, v.second});
        std::sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) { return a.total_ms > b.total_ms; });
        return rows;
    }
    std::string graph_status() const override {
        if (!m_params.use_graphs) return "off";
        std::string skipped, notes;
        for (const auto &o : m_skip_ops) skipped += (skipped.empty() ? "" : ",") + o;
        if (!skipped.empty()) notes = "; LEAVING OUT launches named " + skipped + " (ES_CUDA_SKIP_OPS)";
        if (!m_tile_major_note.empty()) notes += "; " + m_tile_major_note;
        const std::string pdl = programmatic_launch() ? ", programmatic launch" : ", no programmatic launch";
        if (!m_graph_error.empty()) return "failed: " + m_graph_error + pdl + notes;
        return "on, " + std::to_string(m_graphs.size()) + " captured" + pdl + notes;
    }
    void set_record_routing(bool on) override { m_record_routing = on; }
    double graph_replay_us(int replays) override {
        if (!m_last_graph || replays <= 0 || !m_broken.empty()) return 0.0;
        return time_replays(m_last_graph, replays);
    }
    double launched_graphs_replay_us(int replays) override {
        if (replays <= 0) { // only forget the counts
            m_graph_runs.clear();
            return 0.0;
        }
        double sum = 0.0;
        int64_t steps = 0;
        if (!m_flight.empty()) return 0.0; // (only between forwards)
        // The slots' inputs as the latest forwards left them, put back at the end (graph_replay_us,
        // logits_row and the next step see what they would have).
        const std::vector<unsigned char> latest0(m_pinned[0].at(), m_pinned[0].at() + m_pinned[0].bytes()),
            latest1(m_pinned[1].at(), m_pinned[1].at() + m_pinned[1].bytes());
        if (m_broken.empty())
            for (const auto &[exec, gr] : m_graph_runs) {
                // Its latest launch's inputs back in place: a graph of fewer KV splits replayed
                // with a later step's positions would attend over more keys a split.
                pinned_buffer &pin = m_pinned[gr.slot];
                if (!gr.launches || gr.inputs.size() > pin.bytes()) continue;
                std::memcpy(pin.at(), gr.inputs.data(), gr.inputs.size());
                if (cudaMemcpyAsync(m_inputs.at(), pin.at(), gr.inputs.size(), cudaMemcpyHostToDevice, m_stream) !=
                    cudaSuccess)
                    break;
                const double us = time_replays(exec, replays);
                if (us <= 0.0) break;
                sum += us * double(gr.launches);
                steps += gr.launches;
            }
        cudaStreamSynchronize(m_stream);
        if (!latest0.empty()) std::memcpy(m_pinned[0].at(), latest0.data(), latest0.size());
        if (!latest1.empty()) std::memcpy(m_pinned[1].at(), latest1.data(), latest1.size());
        if (m_in.total && m_pinned[0].bytes() >= m_in.total && m_broken.empty())
            cudaMemcpyAsync(m_inputs.at(), m_pinned[m_last_slot].at(), m_in.total, cudaMemcpyHostToDevice, m_stream);
        cudaStreamSynchronize(m_stream);
        cudaGetLastError();
        m_graph_runs.clear();
        // The replays rewrote the workspace's candidates: no fed token may read them now.
        m_fed.valid = false;
        m_last_tops_current = false;
        return steps ? sum / double(steps) : 0.0;
    }
    forward_host_times host_times(bool reset) override {
        const forward_host_times t = m_host_times;
        if (reset) m_host_times = forward_host_times{};
        return t;
    }
    // One replay's device time in µs, from `replays` back to back after a warm one (0 on failure).
    double time_replays(cudaGraphExec_t exec, int replays) {
        cudaEvent_t a = nullptr, b = nullptr;
        float ms = 0.0f;
        bool ok = cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess &&
                  cudaGraphLaunch(exec, m_stream) == cudaSuccess && // warm
                  cudaEventRecord(a, m_stream) == cudaSuccess;
        for (int i = 0; ok && i < replays; ++i) ok = cudaGraphLaunch(exec, m_stream) == cudaSuccess;
        ok = ok && cudaEventRecord(b, m_stream) == cudaSuccess && cudaEventSynchronize(b) == cudaSuccess &&
             cudaEventElapsedTime(&ms, a, b) == cudaSuccess;
        if (a) cudaEventDestroy(a);
        if (b) cudaEventDestroy(b);
        cudaGetLastError();
        return ok ? 1000.0 * double(ms) / replays : 0.0;
    }

    std::vector<kernel_timeline_row> graph_timeline() override {
        std::vector<kernel_timeline_row> rows;
        const auto names = m_graph_ops.find(m_last_graph);
        if (!m_last_graph || names == m_graph_ops.end() || !m_broken.empty()) return rows;
        const size_t n = names->second.size(), words = 1 + 2 * size_t(kernel_timeline_max);
        unsigned long long *buf = nullptr;
        std::vector<unsigned long long> host(words, 0);
        bool ok = cudaMalloc(reinterpret_cast<void **>(&buf), words * 8) == cudaSuccess &&
                  cudaMemset(buf, 0, words * 8) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
                  set_kernel_timeline(buf) == cudaSuccess &&
                  cudaGraphLaunch(m_last_graph, m_stream) == cudaSuccess &&
                  cudaStreamSynchronize(m_stream) == cudaSuccess &&
                  cudaMemcpy(host.data(), buf, words * 8, cudaMemcpyDeviceToHost) == cudaSuccess;
        set_kernel_timeline(nullptr);
        if (buf) cudaFree(buf);
        cudaGetLastError();
        const unsigned recorded = unsigned(host[0] & 0xffffffffu);
        if (!ok || recorded == 0) return rows;
        // A launch without pdl_enter (none in a decode graph today) would misalign the names:
        // then the rows are numbered instead.
        const size_t m = std::min<size_t>(recorded, kernel_timeline_max);
        const double t0 = double(host[2]);
        for (size_t i = 0; i < m; ++i) {
            char label[32];
            std::snprintf(label, sizeof label, "#%zu", i);
            rows.push_back({m == n ? names->second[i] : std::string(label),
                            (double(host[1 + 2 * i]) - t0) / 1000.0,
                            (double(host[2 + 2 * i]) - t0) / 1000.0});
        }
        return rows;
    }

    // The workspace figures are the allocator's (device_allocator_stats); the device's come from
    // cudaMemGetInfo (0 when it fails, e.g. after a sticky error).
    cuda_memory_report memory_report() const override {
        cuda_memory_report r;
        r.weights_bytes = weights_bytes();
        r.placement_slack_bytes = m_head_weights.bytes() - m_head_copy_bytes;
        r.kv_bytes = m_kv_pool.bytes();
        r.kv_cache = m_params.kv_cache;
        const device_allocator_stats ws = m_ws.stats();
        r.workspace_bytes = ws.reserved;
        r.workspace_in_use_bytes = ws.in_use;
        r.workspace_largest_free_bytes = ws.largest_free_block;
        r.workspace_peak_bytes = ws.peak_in_use;
        r.workspace_segments = ws.n_segments;
        r.library_bytes = k_cublas_workspace_bytes;
        if (cudaMemGetInfo(&r.device_free_bytes, &r.device_total_bytes) != cudaSuccess) {
            cudaGetLastError();
            r.device_free_bytes = r.device_total_bytes = 0;
        }
        return r;
    }
    backend_memory memory() const override {
        backend_memory m;
        const device_allocator_stats ws = m_ws.stats();
        m.reserved = ws.reserved;
        m.in_use = ws.in_use;
        m.largest_free = ws.largest_free_block;
        size_t f = 0, t = 0;
        if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
            cudaGetLastError();
            f = t = 0;
        }
        m.device_free = f;
        m.device_total = t;
        return m;
    }

    status init_kv_cache(const kv_cache_params &p) override {
        return catch_errors([&]() -> status {
            check_usable();
            if (p.block_size <= 0 || p.n_blocks <= 0)
                throw load_error("KV cache: block_size and n_blocks must be positive");
            if (!m_flight.empty()) throw load_error("KV cache: a submitted forward is not finished");
            ck(cudaStreamSynchronize(m_stream), "KV cache re-initialisation");
            clear_graphs();
            m_kv_pool.reset();
            m_kv = kv_cache_params{};
            const size_t per_layer = size_t(p.n_blocks) * size_t(p.block_size) * size_t(m_cfg.kv_dim());
            const size_t kv_bytes = per_layer * 2 * kv_format_bytes(kv_fmt()) * size_t(m_cfg.n_layer);
            give_back_head_slack_for(kv_bytes);
            m_kv_pool.alloc(kv_bytes, "the KV cache (" + std::to_string(p.n_blocks) + " blocks of " +
                                          std::to_string(p.block_size) + " tokens, " +
                                          (kv_fmt() == kv_format::bf16 ? "BF16" : "FP8 E4M3") + ")");
            ck(cudaMemsetAsync(m_kv_pool.at(), 0, m_kv_pool.bytes(), m_stream), "KV cache clear");
            m_kv_layer_elems = per_layer;
            m_kv = p;
            return ok_status();
        });
    }

    status forward(const batch &b, forward_output &out) override {
        if (!m_flight.empty()) return error{"forward: a submitted forward is not finished (finish it first)"};
        const auto t0 = std::chrono::steady_clock::now();
        if (auto s = submit(b); !s) return s;
        auto s = finish(out);
        if (s) out.phases.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return s;
    }

    // Overlapped steps (backend::submit): a forward is enqueued with its outputs' host copies in
    // one of two slots of pinned buffers, so that the next one can be enqueued before its outputs
    // are read; fed tokens come from the previous forward's candidates on the GPU (copy_bytes).
    status submit(const batch &b) override {
        return catch_errors([&]() -> status {
            check_usable();
            guard_sticky([&] {
                if (m_flight.size() >= 2) throw load_error("submit: two forwards are in flight already; finish one first");
                check_batch(b, true);
                m_flight.push_back(start(b));
            });
            return ok_status();
        });
    }

    status finish(forward_output &out) override {
        return catch_errors([&]() -> status {
            if (m_flight.empty()) throw load_error("finish: no forward was submitted");
            pending_forward p = std::move(m_flight.front());
            m_flight.pop_front();
            if (p.done) {
                if (p.st) out = std::move(p.out);
                return p.st;
            }
            check_usable();
            guard_sticky([&] { collect(p, out, m_flight.empty()); });
            return ok_status();
        });
    }

    int32_t in_flight() const override { return int32_t(m_flight.size()); }
    bool overlaps_steps() const override { return true; }

    // Runs f; a CUDA error that leaves the context unusable marks the backend broken.
    template <typename F>
    void guard_sticky(F &&f) {
        try {
            f();
        } catch (const load_error &e) {
            const cudaError_t st = cudaGetLastError();
            if (is_sticky(st) || std::string(e.what()).find("no longer usable") != std::string::npos) m_broken = e.what();
            throw;
        }
    }

    bool supports_candidates() const override { return true; }

    status logits_row(int32_t row, std::span<float> out) override {
        return catch_errors([&]() -> status {
            check_usable();
            if (!m_flight.empty())
                throw load_error("logits_row: a forward is in flight (the workspace's rows are the newer one's)");
            if (row < 0 || row >= m_last_rows)
                throw load_error("logits_row: row " + std::to_string(row) +
                                 " is not a logits row of the last forward pass (" +
                                 std::to_string(m_last_rows) + " rows)");
            if (int64_t(out.size()) != m_cfg.n_vocab)
                throw load_error("logits_row: the output holds " + std::to_string(out.size()) +
                                 " values, n_vocab is " + std::to_string(m_cfg.n_vocab));
            const size_t bytes = size_t(m_cfg.n_vocab) * 4;
            if (m_pinned_logits[0].bytes() < bytes)
                m_pinned_logits[0].alloc(size_t(k_graph_max_tokens * m_cfg.n_vocab) * 4, "pinned logits buffer");
            ck(cudaMemcpyAsync(m_pinned_logits[0].at(), m_work.at(m_lay.logits + size_t(row) * bytes), bytes,
                               cudaMemcpyDeviceToHost, m_stream),
               "logits row download");
            ck(cudaStreamSynchronize(m_stream), "logits row download");
            std::memcpy(out.data(), m_pinned_logits[0].at(), bytes);
            return ok_status();
        });
    }

    // Builds every weight through `src` (plan offsets, one allocation, fill, quantize).
    void build(weight_source &src) {
        const auto &c = m_cfg;
        const int64_t H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim();
        const bool fp8 = m_params.precision == weight_precision::fp8;
        const weight_format lin_fmt = fp8 ? weight_format::fp8_e4m3 : weight_format::bf16;
        size_t arena = 0;
        auto take = [&](size_t bytes) {
            const size_t off = arena;
            arena += align256(bytes);
            return off;
        };
        bool fp8_shapes_ok = true; // every FP8 linear fits cuBLASLt's FP8 rules (gemm_lt_fp8_dims_ok)
        const bool blk = fp8 && m_params.fp8.scales == scale_layout::block128;
        if (m_moe_tile_major && c.n_expert > 0) { // taken where the kernels read that layout, else why not
            std::string why;
            if (!fp8)
                why = "BF16 weights";
            else if (blk)
                why = "128x128 block scales";
            else if (!fp8_tile_major_ok(c.n_ff_exp, H))
                why = "the experts' width is no multiple of 16 or n_embd of 64";
            else if (m_moe_mma <= 0)
                why = "ES_CUDA_MOE_MMA=0 (the CUDA-core gate/up reads row-major stacks)";
            else if (!moe_gate_up_mma_shape_ok(m_moe_mma_shape, true))
                why = "a shape of the tensor-core gate/up without a tile-major instance "
                      "(ES_CUDA_MOE_MMA_SHAPE)";
            m_moe_tile_major = why.empty();
            m_tile_major_note =
                why.empty() ? "routed gate/up stacks tile-major"
                            : "routed gate/up stacks row-major (tile-major does not apply: " + why + ")";
        } else if (c.n_expert > 0) {
            m_tile_major_note = "routed gate/up stacks row-major";
        } else {
            m_moe_tile_major = false; // no routed experts
        }
        int64_t max_grid = 0; // block scales: the largest matrix quantized in one piece
        // `stack`: the number of matrices (experts) of grid_rows = n / stack rows each.
        auto plan_lin = [&](dlin &L, int64_t n, int64_t k, weight_format f, const std::string &what,
                            int64_t stack = 1) {
            L.n = n;
            L.k = k;
            L.fmt = f;
            L.grid_rows = n / stack;
            L.layout = f == weight_format::fp8_e4m3 && blk ? scale_layout::block128 : scale_layout::channel;
            if (f == weight_format::fp8_e4m3 && !gemm_lt_fp8_dims_ok(n, k)) fp8_shapes_ok = false;
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
        m_tok_embd_off = take(size_t(c.n_vocab * H) * 2);
        m_output_norm_off = take(size_t(H) * 2);
        if (!c.tie_word_embeddings) m_head_off = take(size_t(c.n_vocab * H) * 2);
        // fp8_policy::head: an E4M3 copy of the head, quantized from the BF16 table on the GPU, in
        // an allocation of its own: growing the weights' allocation by its size made the
        // 21B-A3B's decode 2-5% slower on the H200, so the layers' allocation stays the same size
        // with and without it.
        m_head_fp8 = dlin{};
        size_t head_arena = 0;
        if (fp8 && m_params.fp8.head) {
            const size_t layers_arena = arena;
            arena = 0;
            plan_lin(m_head_fp8, c.n_vocab, H, weight_format::fp8_e4m3, "the LM head");
            head_arena = arena;
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
        m_layers.assign(size_t(c.n_layer), dlayer{});
        int64_t max_piece = 0, max_dense_lin = 0;
        for (int64_t il = 0; il < c.n_layer; ++il) {
            dlayer &L = m_layers[il];
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
        m_inv_freq_off = take(size_t(c.head_dim / 2) * 4);
        // The same after them (the layers stay where they are; only the arena grows).
        if (const size_t pad = env_kib("ES_CUDA_WEIGHTS_TAIL_KB")) take(pad);
        // An FP8 head takes the dequantize path too when its step does (as the twin model has it).
        if (m_head_fp8.n) max_dense_lin = std::max(max_dense_lin, c.n_vocab * H);

        m_weights.alloc(arena, "the model's weights (" + std::string(fp8 ? "FP8" : "BF16") + ")");
        m_head_weights.alloc(head_copy_alloc_bytes(head_arena), "the FP8 copy of the LM head"); // (none at 0)
        m_head_copy_bytes = head_arena;
        m_max_dense_lin = max_dense_lin;
        if (fp8) {
            // Block scales quantize a whole matrix (its pieces staged together: a 128-row block
            // may span q/k/v or gate/up); per-channel scales one piece at a time.
            m_staging.alloc(size_t(blk ? std::max(max_piece, max_grid) : max_piece) * 2,
                            "the FP8 quantization staging buffer");
            // The dequantize path's buffer: with BF16 activations (always with block scales), or
            // for linears the FP8 GEMM cannot take (else allocated on a refusal, ensure_dequantize_buffer).
            if (m_act == activation_format::bf16 || !fp8_shapes_ok) ensure_dequantize_buffer();
        }
        resolve_pointers();

        // Fill, with progress over elements.
        size_t total = size_t(c.n_vocab * H) * (c.tie_word_embeddings ? 1 : 2), done = 0;
        for (const auto &L : m_layers)
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
                src.fill_bf16(name, rows, L.k, m_weights.at<bf16_t>(L.w_off) + row0 * L.k, m_stream);
            } else if (L.layout == scale_layout::block128) {
                // Staged at its row in the matrix's grid; quantized when the grid is complete.
                src.fill_bf16(name, rows, L.k, m_staging.at<bf16_t>() + (row0 % L.grid_rows) * L.k, m_stream);
                if ((row0 % L.grid_rows) + rows == L.grid_rows) {
                    const int64_t g = row0 / L.grid_rows;
                    fp8_quantize_params q;
                    q.w = m_staging.at<bf16_t>();
                    q.q = m_weights.at<fp8_t>(L.w_off) + g * L.grid_rows * L.k;
                    q.scale = m_weights.at<float>(L.s_off) + g * L.grid_scales();
                    q.n = L.grid_rows;
                    q.k = L.k;
                    q.layout = scale_layout::block128;
                    op("fp8_quantize", [&] { return launch_fp8_quantize(q, m_stream); });
                }
            } else {
                src.fill_bf16(name, rows, L.k, m_staging.at<bf16_t>(), m_stream);
                fp8_quantize_params q;
                q.w = m_staging.at<bf16_t>();
                q.q = m_weights.at<fp8_t>(L.w_off) + row0 * L.k;
                q.scale = m_weights.at<float>(L.s_off) + row0;
                q.n = rows;
                q.k = L.k;
                op("fp8_quantize", [&] { return launch_fp8_quantize(q, m_stream); });
            }
            progress(rows * L.k);
        };
        src.fill_bf16("model.embed_tokens.weight", c.n_vocab, H, m_weights.at<bf16_t>(m_tok_embd_off), m_stream);
        progress(c.n_vocab * H);
        src.fill_bf16("model.norm.weight", 1, H, m_weights.at<bf16_t>(m_output_norm_off), m_stream);
        if (!c.tie_word_embeddings) {
            src.fill_bf16("lm_head.weight", c.n_vocab, H, m_weights.at<bf16_t>(m_head_off), m_stream);
            progress(c.n_vocab * H);
        }
        if (m_head_fp8.n) quantize_head_copy(m_head_weights);
        if (auto *rs = dynamic_cast<random_source *>(&src)) rs->n_embd = H;
        for (int64_t il = 0; il < c.n_layer; ++il) {
            dlayer &L = m_layers[il];
            const std::string p = "model.layers." + std::to_string(il) + ".";
            src.fill_bf16(p + "input_layernorm.weight", 1, H, m_weights.at<bf16_t>(L.attn_norm_off), m_stream);
            src.fill_bf16(p + "post_attention_layernorm.weight", 1, H, m_weights.at<bf16_t>(L.ffn_norm_off), m_stream);
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
            src.fill_f32(p + "mlp.gate.weight", c.n_expert * H, m_weights.at<float>(L.router_off), m_stream);
            src.fill_f32(p + "mlp.moe_statics.e_score_correction_bias", c.n_expert, m_weights.at<float>(L.bias_off),
                         m_stream);
            const int64_t Fe = c.n_ff_exp;
            for (int64_t e = 0; e < c.n_expert; ++e) {
                const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
                piece(L.exp_gate_up, e * 2 * Fe, q + "gate_proj.weight", Fe);
                piece(L.exp_gate_up, e * 2 * Fe + Fe, q + "up_proj.weight", Fe);
                if (m_moe_tile_major) { // expert e's gate/up, quantized row-major, rewritten tile-major
                    fp8_t *ex = m_weights.at<fp8_t>(L.exp_gate_up.w_off) + e * 2 * Fe * H;
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
        ck(cudaMemcpyAsync(m_weights.at<float>(m_inv_freq_off), inv_freq.data(), inv_freq.size() * 4,
                           cudaMemcpyHostToDevice, m_stream),
           "upload of RoPE frequencies");
        ck(cudaStreamSynchronize(m_stream), "weight upload");
        m_staging.reset(); // only needed while quantizing
        compute_decode_bytes();
    }

private:
    void resolve_pointers() {
        auto res = [&](dlin &L) {
            if (L.n == 0) return;
            L.w = m_weights.at(L.w_off);
            L.scale = L.fmt == weight_format::fp8_e4m3 ? m_weights.at<float>(L.s_off) : nullptr;
        };
        for (auto &L : m_layers) {
            L.attn_norm = m_weights.at<bf16_t>(L.attn_norm_off);
            L.ffn_norm = m_weights.at<bf16_t>(L.ffn_norm_off);
            for (dlin *d : {&L.wqkv, &L.wo, &L.gate_up, &L.down, &L.exp_gate_up, &L.exp_down, &L.sh_gate_up, &L.sh_down})
                res(*d);
            if (L.is_moe) {
                L.router = m_weights.at<float>(L.router_off);
                L.bias = m_weights.at<float>(L.bias_off);
            }
        }
        m_head.n = m_cfg.n_vocab;
        m_head.k = m_cfg.n_embd;
        m_head.fmt = weight_format::bf16; // BF16 at either precision unless fp8_policy::head
        m_head.grid_rows = m_cfg.n_vocab;
        m_head.w = m_weights.at(m_cfg.tie_word_embeddings ? m_tok_embd_off : m_head_off);
        if (m_head_fp8.n) {
            m_head = m_head_fp8;
            m_head.w = m_head_weights.at(m_head_fp8.w_off);
            m_head.scale = m_head_weights.at<float>(m_head_fp8.s_off);
        }
    }

    // fp8_policy::head: the E4M3 copy of the head, quantized from the BF16 table on the GPU into `to`.
    void quantize_head_copy(const device_buffer &to) {
        fp8_quantize_params q;
        q.w = m_weights.at<bf16_t>(m_cfg.tie_word_embeddings ? m_tok_embd_off : m_head_off);
        q.q = to.at<fp8_t>(m_head_fp8.w_off);
        q.scale = to.at<float>(m_head_fp8.s_off);
        q.n = m_cfg.n_vocab;
        q.k = m_cfg.n_embd;
        q.layout = m_head_fp8.layout;
        op("fp8_quantize", [&] { return launch_fp8_quantize(q, m_stream); });
    }

    // A KV cache that would leave less than a twentieth of the device free beside the FP8 head
    // copy's placement slack (head_copy_alloc_bytes) gets that slack: the copy moves to an
    // allocation of its own size, quantized again from the BF16 table (the same codes). The
    // caller has cleared the graphs, which hold the old copy's address.
    void give_back_head_slack_for(size_t kv_bytes) {
        if (m_head_weights.bytes() <= m_head_copy_bytes) return;
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        if (free_b >= kv_bytes + total_b / 20) return;
        device_buffer exact;
        try {
            exact.alloc(m_head_copy_bytes, "the FP8 copy of the LM head");
        } catch (const load_error &) { // no room even for the copy: keep it where it is
            return;
        }
        quantize_head_copy(exact);
        ck(cudaStreamSynchronize(m_stream), "the FP8 head copy's move");
        m_head_weights.swap(exact); // (the old allocation is freed with `exact`)
        m_head.w = m_head_weights.at(m_head_fp8.w_off);
        m_head.scale = m_head_weights.at<float>(m_head_fp8.s_off);
    }

    void compute_decode_bytes() {
        const auto &c = m_cfg;
        double b = double(c.n_embd) * 2 * 2 + double(m_head.bytes()); // one embedding row, final norm, head
        for (const auto &L : m_layers) {
            b += double(c.n_embd) * 2 * 2 + double(L.wqkv.bytes() + L.wo.bytes());
            if (!L.is_moe) {
                b += double(L.gate_up.bytes() + L.down.bytes());
                continue;
            }
            b += double(c.n_expert * c.n_embd + c.n_expert) * 4;
            b += double(L.exp_gate_up.bytes() + L.exp_down.bytes()) * double(c.n_expert_used) / double(c.n_expert);
            b += double(L.sh_gate_up.bytes() + L.sh_down.bytes());
        }
        m_decode_bytes = b;
    }

    void check_usable() const {
        if (!m_broken.empty()) throw load_error("the CUDA backend stopped after an earlier error: " + m_broken);
    }

    void check_batch(const batch &b, bool fed = false) const {
        if (!m_kv_pool.bytes()) throw load_error("batch: the KV cache is not initialised");
        es::check_batch(b, m_cfg, m_kv, fed);
    }

    // ---- workspace ---------------------------------------------------------------------------
    struct work_layout {
        int64_t T = 0, R = 0, bt = 0; // capacities: tokens, logits rows, block-table entries
        size_t x, xn, qkv, q, attn, gu, act, out, act_e, y_e, counts, offsets, tile_offsets, sorted, xr, logits;
        size_t out_bytes = 0; // the download block's capacity (out_layout)
        size_t router_logits, router_counters, attn_counters, slot_rows, attn_partial;
        // Logit candidates (batch::top_n): topk_logits' scratch and per-row counters (zeroed at
        // allocation, left zero by the kernel); its output is in the download block (out_layout).
        size_t topk_scratch = 0, topk_counters = 0;
        // The greedy pick fused into the head's GEMV (gemv_pick): its warps' keys.
        size_t pick_keys = 0;
        // FP8 activations of prefill-sized linears: [T, act_k] codes, [T] scales
        size_t act_q = 0, act_scale = 0;
        int64_t act_k = 0;
        // FP8 activations of the routed experts' grouped GEMM: the gate/up's [T, H] codes, then
        // (the same bytes) the down's [T·K, n_ff_exp]; [T·K] scales
        size_t ex_q = 0, ex_scale = 0;
        size_t total = 0;
        size_t in_total = 0; // the inputs' device region and its pinned mirror (input_layout)
    };

    // The batch's inputs (int32 and fp32 bits), packed for this forward's T, R and block-table
    // length so that one transfer of in_total bytes carries them: a layout sized for the workspace's
    // largest T would upload its empty tails every step (~40 KB a decode step after a 2,048-token
    // prefill). A graph's key holds T, R and the table's size, so the offsets a graph was captured
    // with are the offsets of every replay under that key.
    struct input_layout {
        size_t tokens, pos, seq, rows, temps, tiles, bt, total;
    };
    static input_layout make_input_layout(int64_t T, int64_t R, int64_t bt) {
        input_layout l{};
        size_t i = 0;
        auto in = [&](int64_t n) { // each array 16-byte aligned, as the workspace's were
            const size_t r = i;
            i += (size_t(n) * 4 + 15) / 16 * 16;
            return r;
        };
        l.tokens = in(T);
        l.pos = in(T);
        l.seq = in(T);
        l.rows = in(R);
        l.temps = in(R); // fp32 bits
        l.tiles = in(2 * T);
        l.bt = in(bt);
        l.total = i;
        return l;
    }

    // The download block of a forward (work_layout::out): the routing record, ids [n_moe, T, K]
    // then weights [n_moe, T, K], then the candidates — ids [R, n], logits [R, n], row max [R],
    // row sums [R] (double, 8-aligned) — 16-byte aligned after them. Placed for this forward's T
    // (a graph's key holds T), so a step with candidates downloads its record and its candidates
    // in one transfer, where the record would take two more (the telemetry's price on the
    // H200 is then about 0.2% of a 4-layer 21B-A3B's tg128 instead of 1%).
    struct out_layout {
        size_t ids, wts, cand;
    };
    out_layout make_out_layout(int64_t T) const {
        const size_t nk = size_t(n_moe_layers() * T * std::max<int64_t>(m_cfg.n_expert_used, 1));
        out_layout l;
        l.ids = m_lay.out;
        l.wts = l.ids + nk * 4;
        l.cand = l.ids + (nk * 8 + 15) / 16 * 16;
        return l;
    }

    int64_t max_ff() const {
        int64_t f = 0;
        for (const auto &L : m_layers) {
            if (!L.is_moe) f = std::max(f, m_cfg.n_ff);
            else if (m_cfg.n_expert_shared > 0) f = std::max(f, m_cfg.n_ff_exp * m_cfg.n_expert_shared);
        }
        return std::max<int64_t>(f, 1);
    }

    int64_t n_moe_layers() const {
        int64_t n = 0;
        for (const auto &L : m_layers) n += L.is_moe;
        return n;
    }

    work_layout make_layout(int64_t T, int64_t R, int64_t bt) const {
        const auto &c = m_cfg;
        const int64_t H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), F = max_ff();
        const int64_t K = std::max<int64_t>(c.n_expert_used, 1), E = std::max<int64_t>(c.n_expert, 1);
        const int64_t n_moe = n_moe_layers();
        work_layout w;
        w.T = T;
        w.R = R;
        w.bt = bt;
        size_t o = 0;
        auto take = [&](size_t bytes) {
            const size_t r = o;
            o += align256(bytes);
            return r;
        };
        w.x = take(size_t(T * H) * 4);
        w.xn = take(size_t(T * H) * 2);
        w.qkv = take(size_t(T * (qd + 2 * kvd)) * 4);
        w.q = take(size_t(T * qd) * 2);
        w.attn = take(size_t(T * qd) * 2);
        w.gu = take(size_t(T * 2 * F) * 4);
        w.act = take(size_t(T * F) * 2);
        // The step's download block (out_layout): the routing record's ids and weights, then the
        // logit candidates, placed for each forward's T and R so one transfer brings them all.
        w.out_bytes = size_t(std::max<int64_t>(n_moe, 1) * T * K) * 8 + 16 + cand_bytes(R, topk_logits_max_top);
        w.out = take(w.out_bytes);
        if (n_moe > 0) {
            w.act_e = take(size_t(T * K * c.n_ff_exp) * 2);
            w.y_e = take(size_t(T * (K + 1) * H) * 4); // + the shared experts' slot (decode)
            w.counts = take(size_t(E) * 4);
            w.offsets = take(size_t(E + 1) * 4);
            w.tile_offsets = take(size_t(E + 1) * 4);
            w.sorted = take(size_t(T * K) * 4);
        } else {
            w.act_e = w.y_e = w.counts = w.offsets = w.tile_offsets = w.sorted = 0;
        }
        w.xr = take(size_t(R * H) * 2);
        w.logits = take(size_t(R * c.n_vocab) * 4);
        w.router_logits = take(size_t(T * E) * 4);
        w.router_counters = take(size_t(T) * 4); // zeroed at allocation; the router leaves it zero
        w.attn_counters = take(size_t(T * c.n_head_kv) * 4); // the same for attention's split merging
        w.slot_rows = take(size_t(T * K) * 4); // the same: moe_combine resets it
        w.topk_scratch = take(topk_logits_scratch_bytes(R, c.n_vocab, topk_logits_max_top));
        w.topk_counters = take(size_t(R) * 4);
        w.pick_keys = take(size_t(pick_keys_cap()) * 8);
        w.attn_partial = take(size_t(attention_partial_floats(std::min<int64_t>(T, k_graph_max_tokens), c.n_head,
                                                              c.n_head_kv, c.head_dim, k_decode_kv_splits)) * 4);
        if (m_params.precision == weight_precision::fp8 && m_params.activations != activation_format::bf16) {
            w.act_k = std::max({H, qd, F}); // the widest input of a dense linear
            w.act_q = take(size_t(T * w.act_k));
            w.act_scale = take(size_t(T) * 4);
            if (n_moe > 0) {
                w.ex_q = take(size_t(T * std::max(H, K * c.n_ff_exp)));
                w.ex_scale = take(size_t(T * K) * 4);
            }
        }
        w.total = o;
        w.in_total = make_input_layout(T, R, bt).total;
        return w;
    }

    // The candidates' output block for R rows of n: ids, logits, row max, then the 8-aligned sums.
    static size_t cand_sums_offset(int64_t R, int64_t n) {
        return (size_t(R * n) * 8 + size_t(R) * 4 + 7) / 8 * 8;
    }
    static size_t cand_bytes(int64_t R, int64_t n) { return cand_sums_offset(R, n) + size_t(R) * 8; }

    static int64_t round_cap(int64_t need, int64_t at_least) {
        int64_t c = at_least;
        while (c < need) c *= 2;
        return c;
    }

    bool workspace_fits(int64_t T, int64_t R, int64_t bt) const {
        return m_work.bytes() && T <= m_lay.T && R <= m_lay.R && bt <= m_lay.bt;
    }
    void ensure_workspace(int64_t T, int64_t R, int64_t bt) {
        if (workspace_fits(T, R, bt)) return;
        ck(cudaStreamSynchronize(m_stream), "workspace resize");
        clear_graphs();
        const work_layout w = make_layout(round_cap(T, std::max<int64_t>(m_lay.T, 16)),
                                          round_cap(std::max<int64_t>(R, 1), std::max<int64_t>(m_lay.R, 1)),
                                          round_cap(std::max<int64_t>(bt, 1), std::max<int64_t>(m_lay.bt, 64)));
        m_work.reset();
        m_inputs.reset();
        for (int i = 0; i < 2; ++i) {
            m_pinned[i].reset();
            m_pinned_out[i].reset();
            m_pinned_io[i].reset();
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
            m_pinned[i].alloc(w.in_total, "pinned batch inputs");
            m_pinned_out[i].alloc(
                size_t(std::max<int64_t>(n_moe_layers(), 1) * w.T * std::max<int64_t>(m_cfg.n_expert_used, 1)) * 8,
                "pinned routing record");
            m_pinned_io[i].alloc(w.out_bytes, "pinned download block");
        }
        // Layouts only grow: a segment the old layout emptied goes back to the device (the KV
        // cache, cuBLASLt and other processes may need it); partly used ones stay as free blocks.
        m_ws.release_cached();
        m_lay = w;
    }

    void clear_graphs() {
        m_last_graph = nullptr;
        for (auto &kv : m_graphs) cudaGraphExecDestroy(kv.second);
        m_graphs.clear();
        m_graph_used.clear();
        m_graph_ops.clear();
        m_graph_runs.clear();
        m_seen_keys.clear();
        m_ws.unpin_all(); // no graph holds workspace pointers any more
    }

    // ---- the forward pass --------------------------------------------------------------------
    // Every launch goes through here: checked, and timed with events while profiling.
    template <typename F>
    void op(const std::string &name, F &&launch) {
        for (const auto &o : m_skip_ops)
            if (name.find(o) != std::string::npos) return;
        if (m_capture_ops) m_capture_ops->push_back(name);
        if (!m_profiling) {
            const cudaError_t e = launch();
            if (e == cudaErrorUnknown && name.find("gemm_lt") != std::string::npos)
                throw load_error(std::string("cuBLASLt: ") + gemm_lt_last_error(m_lt));
            ck(e, name.c_str());
            return;
        }
        while (m_events.size() < m_event_next + 2) {
            cudaEvent_t e = nullptr;
            ck(cudaEventCreate(&e), "cudaEventCreate");
            m_events.push_back(e);
        }
        cudaEvent_t a = m_events[m_event_next++], b = m_events[m_event_next++];
        ck(cudaEventRecord(a, m_stream), "cudaEventRecord");
        const cudaError_t e = launch();
        if (e == cudaErrorUnknown && name.find("gemm_lt") != std::string::npos)
            throw load_error(std::string("cuBLASLt: ") + gemm_lt_last_error(m_lt));
        ck(e, name.c_str());
        ck(cudaEventRecord(b, m_stream), "cudaEventRecord");
        m_pending.push_back({name, m_event_next - 2});
    }

    void collect_profile() {
        for (const auto &[name, i] : m_pending) {
            float ms = 0.0f;
            ck(cudaEventElapsedTime(&ms, m_events[i], m_events[i + 1]), "cudaEventElapsedTime");
            auto &v = m_prof[name];
            v.first += ms;
            v.second += 1;
        }
        m_pending.clear();
        m_event_next = 0;
    }

    // The dequantize path's BF16 weight buffer (the widest dense linear), allocated once.
    void ensure_dequantize_buffer() {
        if (!m_deq.bytes()) m_deq.alloc(size_t(m_max_dense_lin) * 2, "the FP8 prefill dequantization buffer");
    }

    // A prefill-sized FP8 linear with FP8 activations: act_quantize (per-token scales) into the
    // workspace, then cuBLASLt's FP8 GEMM with per-token and per-channel scales. False, with
    // nothing left to undo, when the shape breaks cuBLASLt's FP8 rules (that linear takes the
    // dequantize path) or cuBLASLt refuses the GEMM: the refusal is remembered (m_act becomes
    // bf16, m_act_note the reason) and every later step takes the dequantize path directly.
    bool linear_fp8(const std::string &role, const dlin &L, const bf16_t *x, int64_t ldx, float *y,
                    int64_t ldy, int64_t M, bool acc) {
        const work_layout &w = m_lay;
        act_quantize_params aq;
        aq.x = x;
        aq.ldx = ldx;
        aq.q = m_work.at<fp8_t>(w.act_q);
        aq.scale = m_work.at<float>(w.act_scale);
        aq.m = M;
        aq.k = L.k;
        aq.fmt = m_act == activation_format::e5m2 ? fp8_format::e5m2 : fp8_format::e4m3;
        gemm_lt_fp8_params g;
        g.ctx = m_lt;
        g.a = aq.q;
        g.lda = L.k;
        g.a_scale = aq.scale;
        g.a_fmt = aq.fmt;
        g.w = static_cast<const fp8_t *>(L.w);
        g.ldw = L.k;
        g.w_scale = L.scale;
        g.y = y;
        g.ldy = ldy;
        g.m = M;
        g.n = L.n;
        g.k = L.k;
        g.accumulate = acc;
        if (M > w.T || L.k > w.act_k || !gemm_lt_fp8_shape_ok(g)) return false;
        op(role + " act_quantize", [&] { return launch_act_quantize(aq, m_stream); });
        cudaError_t e = cudaSuccess;
        op(role + " gemm_lt fp8", [&] {
            e = launch_gemm_lt_fp8(g, m_stream);
            return e == cudaErrorNotSupported ? cudaSuccess : e;
        });
        if (e != cudaErrorNotSupported) return true;
        // Nothing was launched for the GEMM; the quantized activations are scratch.
        m_act_note = std::string(gemm_lt_last_error(m_lt)) + ": BF16 activations, weights dequantized";
        m_act = activation_format::bf16;
        ensure_dequantize_buffer();
        return false;
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
    size_t head_copy_alloc_bytes(size_t bytes) const {
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

    // y_ready: accumulating into a y that neither of the last two launches writes (gemv.cuh).
    void linear(const char *role, const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy, int64_t M, bool acc,
                bool y_ready = false) {
        if (M <= 0) return;
        if (M > k_gemv_max_tokens) {
            // (m_act is bf16 with block scales: cuBLASLt's FP8 GEMM scales weights per row only.)
            if (L.fmt == weight_format::fp8_e4m3 && m_act != activation_format::bf16 &&
                L.layout == scale_layout::channel && linear_fp8(role, L, x, ldx, y, ldy, M, acc))
                return;
            gemm_lt_params g;
            g.ctx = m_lt;
            g.a = x;
            g.lda = ldx;
            g.w = L.fmt == weight_format::bf16 ? static_cast<const bf16_t *>(L.w) : m_deq.at<bf16_t>();
            g.ldw = L.k;
            g.y = y;
            g.ldy = ldy;
            g.m = M;
            g.n = L.n;
            g.k = L.k;
            g.accumulate = acc;
            const bool deq_ok = L.fmt == weight_format::bf16 || m_deq.bytes() >= size_t(L.n * L.k) * 2;
            if (deq_ok && gemm_lt_shape_ok(g)) {
                if (L.fmt == weight_format::fp8_e4m3) {
                    fp8_dequantize_params d;
                    d.q = static_cast<const fp8_t *>(L.w);
                    d.scale = L.scale;
                    d.out = m_deq.at<bf16_t>();
                    d.n = L.n;
                    d.k = L.k;
                    d.layout = L.layout;
                    op(std::string(role) + " fp8_dequantize", [&] { return launch_fp8_dequantize(d, m_stream); });
                }
                op(std::string(role) + " gemm_lt", [&] { return launch_gemm_lt(g, m_stream); });
                return;
            }
        }
        gemv_params p = gemv_for(L, x, ldx, y, ldy, M, acc);
        p.y_ready = y_ready && m_skip_ops.empty(); // skipped launches shorten the two-launch distance
        op(std::string(role) + " gemv", [&] { return launch_gemv(p, m_stream); });
    }

    static gemv_params gemv_for(const dlin &L, const bf16_t *x, int64_t ldx, float *y, int64_t ldy, int64_t M,
                                bool acc) {
        gemv_params p;
        p.x = x;
        p.ldx = ldx;
        p.w = L.w;
        p.wfmt = L.fmt;
        p.w_scale = L.scale;
        p.w_layout = L.layout;
        p.y = y;
        p.ldy = ldy;
        p.n_tokens = M;
        p.n = L.n;
        p.k = L.k;
        p.accumulate = acc;
        return p;
    }

    // Everything between the input upload and the output download; no host synchronization,
    // so it can be captured into a CUDA graph.
    void enqueue(int64_t T, int64_t R, int64_t n_tiles, int64_t bt_stride, int64_t kv_splits, int64_t max_tile) {
        set_decode_carveout(decode_carveout_for_tokens(T)); // the split all of the step's kernels ask for
        const auto &c = m_cfg;
        const work_layout &w = m_lay;
        const int64_t H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, K = c.n_expert_used;
        unsigned char *base = m_work.at();
        float *x = reinterpret_cast<float *>(base + w.x);
        bf16_t *xn = reinterpret_cast<bf16_t *>(base + w.xn);
        float *qkv = reinterpret_cast<float *>(base + w.qkv);
        bf16_t *q = reinterpret_cast<bf16_t *>(base + w.q);
        bf16_t *attn = reinterpret_cast<bf16_t *>(base + w.attn);
        float *gu = reinterpret_cast<float *>(base + w.gu);
        bf16_t *act = reinterpret_cast<bf16_t *>(base + w.act);
        const input_layout &il = m_in;
        const int32_t *tokens = m_inputs.at<int32_t>(il.tokens), *pos = m_inputs.at<int32_t>(il.pos),
                      *seq = m_inputs.at<int32_t>(il.seq), *rows = m_inputs.at<int32_t>(il.rows),
                      *tiles = m_inputs.at<int32_t>(il.tiles), *bt = m_inputs.at<int32_t>(il.bt);

        embedding_params ep;
        ep.tokens = tokens;
        ep.table = m_weights.at<bf16_t>(m_tok_embd_off);
        ep.out = x;
        ep.n_tokens = T;
        ep.n_embd = H;
        // One-token steps fold the embedding into layer 0's fused q/k/v GEMV (gemv.cuh: embd_table);
        // otherwise it is its own launch, before layer 0.
        bool embedded = false;
        auto embed = [&] {
            if (!embedded) op("embedding", [&] { return launch_embedding(ep, m_stream); });
            embedded = true;
        };

        int64_t moe_slot = 0;
        // The layer's attention input was normalized by the combine before it (xn): its q/k/v
        // GEMV reads xn instead of normalizing x itself.
        bool xn_ready = false;
        bool head_normed = false; // the last combine wrote the head's normalized row (xr)
        for (int64_t il = 0; il < c.n_layer; ++il) {
            const bool xn_in = xn_ready;
            xn_ready = false;
            const dlayer &L = m_layers[il];
            rms_norm_params nrm;
            nrm.x = x;
            nrm.weight = L.attn_norm;
            nrm.out = xn;
            nrm.n_rows = T;
            nrm.n_embd = H;
            nrm.eps = float(c.rms_eps);
            // Layer il's K pool, then its V pool, of kv_fmt() elements.
            const size_t kv_pool_bytes = m_kv_layer_elems * kv_format_bytes(kv_fmt());
            unsigned char *kc = m_kv_pool.at<unsigned char>() + size_t(il) * 2 * kv_pool_bytes,
                          *vc = kc + kv_pool_bytes;
            rope_kv_params rp;
            rp.qkv = qkv;
            rp.pos = pos;
            rp.seq = seq;
            rp.block_tables = bt;
            rp.bt_stride = bt_stride;
            rp.inv_freq = m_weights.at<float>(m_inv_freq_off);
            rp.q_out = q;
            rp.k_cache = kc;
            rp.v_cache = vc;
            rp.n_tokens = T;
            rp.n_head = c.n_head;
            rp.n_head_kv = c.n_head_kv;
            rp.head_dim = hd;
            rp.block_size = m_kv.block_size;
            rp.kv = kv_fmt(); // FP8: per-tensor scales 1.0 (k_scale, v_scale defaults)
            // Decode: norm → q/k/v → RoPE + KV write as one GEMV launch (gemv.cuh's fusions).
            gemv_params fq;
            if (T <= k_fuse_max_tokens && m_fuse) {
                fq.w = L.wqkv.w;
                fq.wfmt = L.wqkv.fmt;
                fq.w_scale = L.wqkv.scale;
                fq.w_layout = L.wqkv.layout;
                fq.n_tokens = T;
                fq.n = L.wqkv.n;
                fq.k = L.wqkv.k;
                if (xn_in) {
                    fq.x = xn;
                    fq.ldx = H;
                } else {
                    fq.norm = {x, L.attn_norm, float(c.rms_eps), nullptr};
                }
                fq.rope_on = true;
                fq.rope = rp;
                fq.rope_inputs_after_wait = il == 0 && m_inputs_by_kernel;
                fq.k_splits = 1;
            }
            if (il == 0 && fq.rope_on && T == 1 && m_skip_ops.empty()) {
                gemv_params fe = fq; // the embedding too, if the fused kernel takes it
                fe.embd_tokens = tokens;
                fe.embd_table = ep.table;
                fe.embd_out = x;
                if (gemv_fusion_ok(fe)) {
                    fq = fe;
                    embedded = true;
                }
            }
            embed();
            if (fq.rope_on && gemv_fusion_ok(fq)) {
                op(fq.embd_table ? "embedding+norm+qkv+rope_kv gemv"
                   : xn_in       ? "qkv+rope_kv gemv"
                                 : "norm+qkv+rope_kv gemv",
                   [&] { return launch_gemv(fq, m_stream); });
            } else if (xn_in) {
                linear("qkv", L.wqkv, xn, H, qkv, qd + 2 * kvd, T, false);
                op("rope_kv", [&] { return launch_rope_kv(rp, m_stream); });
            } else {
                op("rms_norm", [&] { return launch_rms_norm(nrm, m_stream); });
                linear("qkv", L.wqkv, xn, H, qkv, qd + 2 * kvd, T, false);
                op("rope_kv", [&] { return launch_rope_kv(rp, m_stream); });
            }

            attention_params ap;
            ap.q = q;
            ap.k_cache = kc;
            ap.v_cache = vc;
            ap.pos = pos;
            ap.seq = seq;
            ap.block_tables = bt;
            ap.bt_stride = bt_stride;
            ap.tiles = tiles;
            ap.n_tiles = n_tiles;
            ap.max_tile_tokens = max_tile;
            ap.out = attn;
            ap.n_tokens = T;
            ap.n_head = c.n_head;
            ap.n_head_kv = c.n_head_kv;
            ap.head_dim = hd;
            ap.block_size = m_kv.block_size;
            ap.kv = kv_fmt();
            ap.scale = 1.0f / std::sqrt(float(hd));
            if (T <= k_graph_max_tokens && kv_splits > 1) {
                ap.kv_splits = kv_splits;
                ap.partial = reinterpret_cast<float *>(base + w.attn_partial);
                ap.counters = reinterpret_cast<unsigned *>(base + w.attn_counters);
            }
            op("attention", [&] { return launch_attention(ap, m_stream); });
            // Residual add fused (accumulate); x was last written by the layer before's FFN (or
            // the embedding), at least two launches back.
            linear("o_proj", L.wo, attn, qd, x, H, T, true, true);

            nrm.weight = L.ffn_norm;
            // FFN / MoE. One-token steps fuse the FFN norm into the next kernel: a dense MLP's
            // gate/up GEMV (norm_in), an MoE layer's moe_front (norm + router + shared gate/up).
            // ES_CUDA_FUSE=0 (m_fuse) keeps the separate launches.
            norm_in ffn_in;
            ffn_in.x = x;
            ffn_in.weight = L.ffn_norm;
            ffn_in.eps = float(c.rms_eps);
            if (!L.is_moe) {
                if (!m_fuse || T > k_fuse_max_tokens || !swiglu("ffn", L.gate_up, L.down, c.n_ff, xn, x, gu, act, T, &ffn_in)) {
                    op("rms_norm", [&] { return launch_rms_norm(nrm, m_stream); });
                    swiglu("ffn", L.gate_up, L.down, c.n_ff, xn, x, gu, act, T);
                }
                continue;
            }
            int32_t *ids = reinterpret_cast<int32_t *>(base + m_out.ids) + moe_slot * T * K;
            float *wts = reinterpret_cast<float *>(base + m_out.wts) + moe_slot * T * K;
            ++moe_slot;
            const int64_t F_sh = c.n_ff_exp * c.n_expert_shared;
            moe_front_params fr;
            fr.norm = ffn_in;
            fr.norm.out = xn; // for the routed experts' gate/up
            fr.router_w = L.router;
            fr.bias = L.bias;
            fr.ids = ids;
            fr.weights = wts;
            fr.n_expert = c.n_expert;
            fr.n_expert_used = K;
            fr.norm_min = float(c.moe_norm_min);
            fr.logits = reinterpret_cast<float *>(base + w.router_logits);
            fr.counter = reinterpret_cast<unsigned *>(base + w.router_counters);
            fr.sh_w = L.sh_gate_up.w;
            fr.sh_wfmt = L.sh_gate_up.fmt;
            fr.sh_w_scale = L.sh_gate_up.scale;
            fr.sh_w_layout = L.sh_gate_up.layout;
            fr.sh_act = act;
            fr.n_ff_sh = F_sh;
            fr.n_tokens = T;
            fr.n_embd = H;
            // The shared experts' down projection as one more slot of the routed down launch
            // (per-slot mode), added first by moe_combine.
            const bool front = m_fuse && T <= k_fuse_max_tokens && moe_front_supported(fr);
            const bool shared_slot = front && F_sh > 0 && m_moe_down_rows &&
                                     L.sh_down.fmt == L.exp_down.fmt && L.sh_down.layout == L.exp_down.layout;
            if (front) {
                op("moe_front", [&] { return launch_moe_front(fr, m_stream); });
                if (F_sh > 0 && !shared_slot)
                    linear("shared down", L.sh_down, act, F_sh, x, H, T, true);
            } else {
                op("rms_norm", [&] { return launch_rms_norm(nrm, m_stream); });
                moe_router_params mr;
                mr.x = xn;
                mr.w = L.router;
                mr.bias = L.bias;
                mr.ids = ids;
                mr.weights = wts;
                mr.n_tokens = T;
                mr.n_embd = H;
                mr.n_expert = c.n_expert;
                mr.n_expert_used = K;
                mr.norm_min = float(c.moe_norm_min);
                mr.logits = reinterpret_cast<float *>(base + w.router_logits);
                mr.counters = reinterpret_cast<unsigned *>(base + w.router_counters);
                mr.tiles_min_tokens = m_router_tiles_min;
                op("moe_router", [&] { return launch_moe_router(mr, m_stream); });
                if (F_sh > 0) swiglu("shared", L.sh_gate_up, L.sh_down, F_sh, xn, x, gu, act, T);
            }
            bf16_t *act_e = reinterpret_cast<bf16_t *>(base + w.act_e);
            if (T <= m_moe_gemv_max_tokens) {
                moe_gate_up_gemv_params g;
                g.x = xn;
                g.ids = ids;
                g.w = L.exp_gate_up.w;
                g.wfmt = L.exp_gate_up.fmt;
                g.w_scale = L.exp_gate_up.scale;
                g.w_layout = L.exp_gate_up.layout;
                g.act = act_e;
                // Slot counters: the down kernel starts on each slot as soon as its rows are in
                // (kernels/moe_down_gemv.cuh); not while launches are left out (a measuring aid
                // that could leave the down kernel waiting for rows nobody writes).
                unsigned *slot_rows =
                    m_moe_slot_counters && m_moe_down_rows && m_skip_ops.empty()
                        ? reinterpret_cast<unsigned *>(base + w.slot_rows)
                        : nullptr;
                g.slot_rows_done = slot_rows;
                g.mma = m_moe_mma;
                g.mma_shape = m_moe_mma_shape;
                g.w_tile_major = m_moe_tile_major;
                g.n_tokens = T;
                g.n_embd = H;
                g.n_expert_used = K;
                g.n_ff_exp = c.n_ff_exp;
                op("moe_gate_up_gemv", [&] { return launch_moe_gate_up_gemv(g, m_stream); });
                moe_down_gemv_params d;
                d.act = act_e;
                d.ids = ids;
                d.weights = wts;
                d.w = L.exp_down.w;
                d.wfmt = L.exp_down.fmt;
                d.w_scale = L.exp_down.scale;
                d.w_layout = L.exp_down.layout; // the shared slot's too (shared_slot: the same layout)
                d.y = x;
                d.n_tokens = T;
                d.n_embd = H;
                d.n_expert_used = K;
                d.n_ff_exp = c.n_ff_exp;
                d.rows_per_warp = m_moe_down_rows_per_warp; // per-slot mode only
                if (m_moe_down_rows) {
                    // Per-slot rows, then the combine in choice order (faster than gathering
                    // every choice of an output element in one block: docs/benchmarks.md).
                    d.y_slots = reinterpret_cast<float *>(base + w.y_e);
                    if (shared_slot) {
                        d.sh_w = L.sh_down.w;
                        d.sh_w_scale = L.sh_down.scale;
                        d.sh_act = act;
                        d.y_shared = d.y_slots + T * K * H; // the workspace's extra T rows
                        d.n_ff_sh = F_sh;
                        d.sh_ready = m_skip_ops.empty(); // moe_front wrote sh_act two launches back
                    }
                    d.slot_rows_done = slot_rows;
                    op("moe_down_gemv", [&] { return launch_moe_down_gemv(d, m_stream); });
                    moe_combine_params cb;
                    cb.y = d.y_slots;
                    cb.y_shared = d.y_shared;
                    cb.weights = wts;
                    cb.x = x;
                    cb.n_tokens = T;
                    cb.n_embd = H;
                    cb.n_expert_used = K;
                    cb.x_ready = front && m_skip_ops.empty(); // x: o_proj's, before moe_front, gate/up and down
                    cb.reset = slot_rows; // read by the down kernel, which has finished
                    cb.n_reset = T * K;
                    // The next norm too, where a cluster holds a token's row: the next layer's
                    // attention norm, or after the last layer (one token, one logits row) the
                    // head's, into the rows the head GEMV reads.
                    const bool last = il + 1 == c.n_layer;
                    if (m_combine_norm && m_fuse && T <= k_fuse_max_tokens && (!last || (T == 1 && R == 1))) {
                        cb.norm_weight =
                            last ? m_weights.at<bf16_t>(m_output_norm_off) : m_layers[il + 1].attn_norm;
                        cb.norm_eps = float(c.rms_eps);
                        cb.norm_out = last ? reinterpret_cast<bf16_t *>(base + w.xr) : xn;
                        if (!moe_combine_norm_ok(cb)) cb.norm_weight = nullptr, cb.norm_out = nullptr;
                    }
                    xn_ready = cb.norm_out != nullptr && !last;
                    head_normed = cb.norm_out != nullptr && last;
                    op(cb.norm_out ? "moe_down_combine+norm" : "moe_down_combine",
                       [&] { return launch_moe_combine(cb, m_stream); });
                } else {
                    op("moe_down_gemv", [&] { return launch_moe_down_gemv(d, m_stream); });
                }
            } else {
                // Both GEMMs read one plan, so its row tile is the one kernel both can take.
                float *y_e = reinterpret_cast<float *>(base + w.y_e);
                moe_grouped_gemm_params gu, dn;
                gu.a = xn;
                gu.lda = H;
                gu.a_row_div = K;
                gu.n_expert = c.n_expert;
                gu.w = L.exp_gate_up.w;
                gu.wfmt = L.exp_gate_up.fmt;
                gu.w_scale = L.exp_gate_up.scale;
                gu.w_layout = L.exp_gate_up.layout;
                gu.k = H;
                gu.n = c.n_ff_exp;
                gu.glu = true;
                gu.w_tile_major = m_moe_tile_major;
                gu.allow_wgmma = m_moe_wgmma && T * K >= m_moe_wgmma_min * c.n_expert;
                gu.out_act = act_e;
                gu.ldo = c.n_ff_exp;
                dn = gu;
                dn.w_tile_major = false; // the down stacks stay row-major
                dn.a = act_e;
                dn.lda = c.n_ff_exp;
                dn.a_row_div = 1;
                dn.w = L.exp_down.w;
                dn.wfmt = L.exp_down.fmt;
                dn.w_scale = L.exp_down.scale;
                dn.w_layout = L.exp_down.layout;
                dn.k = c.n_ff_exp;
                dn.n = H;
                dn.glu = false;
                dn.out_act = nullptr;
                dn.out_f32 = y_e;
                dn.ldo = H;
                // FP8 activations (act_quantize's, per token for the gate/up and per slot for the
                // down) where both GEMMs can take them (compute capability 8.9 and later, on
                // either kernel), as the dense linears of prefill take theirs; else BF16.
                act_quantize_params qx, qe;
                if (m_act != activation_format::bf16 && w.ex_q && m_moe_fp8_act) {
                    qx.x = xn;
                    qx.ldx = H;
                    qx.q = reinterpret_cast<fp8_t *>(base + w.ex_q);
                    qx.scale = reinterpret_cast<float *>(base + w.ex_scale);
                    qx.m = T;
                    qx.k = H;
                    qx.fmt = m_act == activation_format::e5m2 ? fp8_format::e5m2 : fp8_format::e4m3;
                    qe = qx; // the same buffers: the gate/up has read its codes when the down's are written
                    qe.x = act_e;
                    qe.ldx = c.n_ff_exp;
                    qe.m = T * K;
                    qe.k = c.n_ff_exp;
                    gu.a_q = qx.q;
                    gu.a_scale = qx.scale;
                    gu.a_fmt = qx.fmt;
                    dn.a_q = qe.q;
                    dn.a_scale = qe.scale;
                    dn.a_fmt = qe.fmt;
                }
                auto fp8_act_both = [&] {
                    return moe_grouped_gemm_fp8_act_ok(gu) && moe_grouped_gemm_fp8_act_ok(dn);
                };
                if (gu.a_q && !fp8_act_both()) gu.a_q = dn.a_q = nullptr;
                if (moe_grouped_gemm_plan_rows(gu) != moe_grouped_gemm_plan_rows(dn)) {
                    gu.allow_wgmma = dn.allow_wgmma = false;
                    if (gu.a_q && !fp8_act_both()) gu.a_q = dn.a_q = nullptr;
                }
                moe_plan_params pl;
                pl.ids = ids;
                pl.n_slots = T * K;
                pl.n_expert = c.n_expert;
                pl.tile_rows = moe_grouped_gemm_plan_rows(gu);
                pl.counts = reinterpret_cast<int32_t *>(base + w.counts);
                pl.offsets = reinterpret_cast<int32_t *>(base + w.offsets);
                pl.tile_offsets = reinterpret_cast<int32_t *>(base + w.tile_offsets);
                pl.sorted_slots = reinterpret_cast<int32_t *>(base + w.sorted);
                op("moe_plan", [&] { return launch_moe_plan(pl, m_stream); });
                for (moe_grouped_gemm_params *g : {&gu, &dn}) {
                    g->sorted_slots = pl.sorted_slots;
                    g->offsets = pl.offsets;
                    g->tile_offsets = pl.tile_offsets;
                    g->tile_rows = pl.tile_rows;
                    g->max_tiles = moe_plan_max_tiles(T * K, c.n_expert, pl.tile_rows);
                }
                if (gu.a_q)
                    op("moe act_quantize (gate/up)", [&] { return launch_act_quantize(qx, m_stream); });
                op("moe_grouped_gemm (gate/up)", [&] { return launch_moe_grouped_gemm(gu, m_stream); });
                if (dn.a_q) op("moe act_quantize (down)", [&] { return launch_act_quantize(qe, m_stream); });
                op("moe_grouped_gemm (down)", [&] { return launch_moe_grouped_gemm(dn, m_stream); });
                moe_combine_params cb;
                cb.y = y_e;
                cb.weights = wts;
                cb.x = x;
                cb.n_tokens = T;
                cb.n_embd = H;
                cb.n_expert_used = K;
                op("moe_combine", [&] { return launch_moe_combine(cb, m_stream); });
            }
        }

        embed(); // a model without layers (bench --layers 0)

        // Head: final norm of the requested rows only, then logits.
        bf16_t *xr = reinterpret_cast<bf16_t *>(base + w.xr);
        rms_norm_params nrm;
        nrm.x = x;
        nrm.rows = rows;
        nrm.weight = m_weights.at<bf16_t>(m_output_norm_off);
        nrm.out = xr;
        nrm.n_rows = R;
        nrm.n_embd = H;
        nrm.eps = float(c.rms_eps);
        if (!head_normed) op("rms_norm (head)", [&] { return launch_rms_norm(nrm, m_stream); });
        float *logits = reinterpret_cast<float *>(base + w.logits);
        // A greedy one-row step (m_pick) takes its one candidate from the head's GEMV itself
        // (gemv_pick), the same outputs topk_logits writes at n_top = 1, without its launch.
        gemv_params hp = gemv_for(m_head, xr, H, logits, c.n_vocab, R, false);
        if (m_pick && m_top_n == 1 && R == 1) {
            const size_t cand = m_out.cand;
            hp.pick.id = reinterpret_cast<int32_t *>(base + cand);
            hp.pick.value = reinterpret_cast<float *>(base + cand + 4);
            hp.pick.row_max = reinterpret_cast<float *>(base + cand + 8);
            hp.pick.row_sum = reinterpret_cast<double *>(base + cand + cand_sums_offset(1, 1));
            hp.pick.warp_keys = reinterpret_cast<unsigned long long *>(base + w.pick_keys);
            hp.pick.warp_keys_cap = pick_keys_cap();
        }
        if (hp.pick.on() && gemv_pick_ok(hp)) {
            op("head gemv+pick", [&] { return launch_gemv(hp, m_stream); });
            op("pick finish", [&] { return launch_gemv_pick_finish(hp, m_stream); });
            return;
        }
        linear("head", m_head, xr, H, logits, c.n_vocab, R, false);
        if (m_top_n > 0 && R > 0) {
            // Candidates instead of full rows: the logits stay in the workspace for logits_row().
            const int64_t n = m_top_n;
            topk_logits_params tk;
            tk.logits = reinterpret_cast<const float *>(base + w.logits);
            tk.temperatures = m_inputs.at<float>(m_in.temps);
            const size_t cand = m_out.cand;
            tk.ids = reinterpret_cast<int32_t *>(base + cand);
            tk.values = reinterpret_cast<float *>(base + cand + size_t(R * n) * 4);
            tk.row_max = reinterpret_cast<float *>(base + cand + size_t(R * n) * 8);
            tk.row_sum = reinterpret_cast<double *>(base + cand + cand_sums_offset(R, n));
            tk.n_rows = R;
            tk.n_vocab = c.n_vocab;
            tk.n_top = int32_t(n);
            tk.scratch = base + w.topk_scratch;
            tk.counters = reinterpret_cast<unsigned *>(base + w.topk_counters);
            op("topk_logits", [&] { return launch_topk_logits(tk, m_stream); });
        }
    }

    // y += down(silu(gate(x)) · up(x)) over T tokens (dense MLP and shared experts). With `in`,
    // x is instead the norm of in->x, fused into the gate/up GEMV: false, with nothing launched,
    // when that path does not apply (more than two tokens, shapes the fused kernel cannot take);
    // the caller then runs rms_norm and calls again without it.
    bool swiglu(const char *role, const dlin &gate_up, const dlin &down, int64_t F, const bf16_t *x, float *y, float *gu,
                bf16_t *act, int64_t T, const norm_in *in = nullptr) {
        const int64_t H = m_cfg.n_embd;
        if (T <= 2) {
            // Decode: gate/up GEMV with SiLU·up in its epilogue (the MoE kernel with one "expert"),
            // one launch fewer per MLP; with the norm fused, two fewer.
            moe_gate_up_gemv_params g;
            g.x = x;
            g.ids = nullptr; // expert 0: a dense MLP
            g.w = gate_up.w;
            g.wfmt = gate_up.fmt;
            g.w_scale = gate_up.scale;
            g.w_layout = gate_up.layout;
            g.act = act;
            g.n_tokens = T;
            g.n_embd = H;
            g.n_expert_used = 1;
            g.n_ff_exp = F;
            if (in) {
                g.x = nullptr;
                g.norm = *in;
                if (!moe_gate_up_gemv_norm_ok(g)) return false;
            }
            op(std::string(role) + (in ? " norm+gate_up+silu gemv" : " gate_up+silu gemv"),
               [&] { return launch_moe_gate_up_gemv(g, m_stream); });
            // y (the residual) was last written by o_proj, at least two launches back.
            linear((std::string(role) + " down").c_str(), down, act, F, y, H, T, true, true);
            return true;
        }
        if (in) return false;
        linear((std::string(role) + " gate_up").c_str(), gate_up, x, H, gu, 2 * F, T, false);
        silu_mul_params s;
        s.gate_up = gu;
        s.out = act;
        s.n_tokens = T;
        s.n_ff = F;
        op("silu_mul", [&] { return launch_silu_mul(s, m_stream); });
        linear((std::string(role) + " down").c_str(), down, act, F, y, H, T, true);
        return true;
    }

    // A forward submitted and not finished: what its outputs' unpacking needs.
    struct pending_forward {
        int slot = 0;
        int64_t T = 0, R = 0, top_n = 0, nk = 0;
        size_t cand_rel = 0, logit_bytes = 0;
        bool via_pinned = false, cand_block = false, io_done = false, replayed = false;
        bool done = false;       // its outputs already in `out` (run synchronously, or drained)
        status st = ok_status(); // its status, when done
        forward_output out;
        std::chrono::steady_clock::time_point h0, h1, h2, h3, h4;
    };

    // Collects every forward in flight into its pending entry (their outputs read now), so that
    // the workspace or its pinned buffers can change.
    void drain() {
        for (pending_forward &p : m_flight)
            if (!p.done) {
                p.done = true;
                try {
                    collect(p, p.out, &p == &m_flight.back());
                } catch (const load_error &e) {
                    p.st = error{e.what()};
                }
            }
    }

    // Enqueues a forward (submit): inputs into its slot's pinned mirror, the step's launches (a
    // graph or eagerly), its outputs' download; returns what collect() needs. Profiling and
    // full-row forwards larger than decode's run to the end here (done).
    pending_forward start(const batch &b) {
        using hclk = std::chrono::steady_clock;
        pending_forward pf;
        pf.h0 = hclk::now();
        const auto &c = m_cfg;
        const int64_t T = b.n_tokens(), R = int64_t(b.logits_rows.size()), S = int64_t(b.seqs.size());
        const int64_t top_n = b.top_n > 0 ? std::min<int64_t>(b.top_n, topk_logits_max_top) : 0;
        if (b.top_n < 0 || (!b.temperatures.empty() && int64_t(b.temperatures.size()) != R))
            throw load_error("batch: top_n must be >= 0 and temperatures one per logits row");
        const bool has_fed = std::any_of(b.tokens.begin(), b.tokens.end(), [](int32_t t) { return t < 0; });
        pf.T = T;
        pf.R = R;
        pf.top_n = top_n;
        if (T == 0) {
            pf.done = true;
            pf.out.logits.clear();
            m_fed.valid = false;
            m_last_tops.clear();
            m_last_tops_current = true;
            return pf;
        }
        m_top_n = top_n;
        // Greedy rows need no row sum: one candidate from the head's GEMV (enqueue, gemv_pick)
        // where the step has one row; the graph key tells the two apart.
        m_pick = m_head_pick && top_n == 1 && R == 1 &&
                 std::all_of(b.temperatures.begin(), b.temperatures.end(), [](float t) { return !(t > 0.0f); });
        int64_t stride = 1;
        for (const auto &s : b.seqs) stride = std::max<int64_t>(stride, int64_t(s.block_table.size()));
        stride = round_cap(stride, 1);
        const std::vector<int32_t> tiles = attention_tiles(b.seq.data(), T, c.n_head / c.n_head_kv);
        const int64_t n_tiles = int64_t(tiles.size() / 2);
        int64_t max_tile = 1;
        for (int64_t i = 0; i < n_tiles; ++i) max_tile = std::max<int64_t>(max_tile, tiles[2 * i + 1]);
        // The workspace grows only with nothing in flight (its pinned buffers hold their outputs).
        if (!workspace_fits(T, R, S * stride)) drain();
        ensure_workspace(T, R, S * stride);
        const work_layout &w = m_lay;
        // Fed tokens: from the previous forward's candidates on the GPU where they still are, else
        // from its top candidates on the host (collected first if it is still in flight).
        bool fed_on_gpu = false;
        std::vector<int32_t> tokens(b.tokens);
        if (has_fed) {
            const int64_t prev_rows = m_fed.valid ? m_fed.R : int64_t(m_last_tops.size());
            for (int32_t t : tokens)
                if (t < 0 && -int64_t(t) - 1 >= prev_rows)
                    throw load_error("batch: a fed token names row " + std::to_string(-int64_t(t) - 1) +
                                     " of the previous forward, which had " + std::to_string(prev_rows) +
                                     " candidate rows (fed tokens need its candidates: batch::top_n >= 1)");
            fed_on_gpu = m_fed.valid && !m_profiling;
            if (!fed_on_gpu) {
                if (!m_last_tops_current) drain_for_tops();
                for (int32_t &t : tokens)
                    if (t < 0) {
                        t = m_last_tops[size_t(-int64_t(t) - 1)];
                        if (t < 0)
                            throw load_error("batch: a fed token names a row of the previous forward that had no "
                                             "candidate (every logit NaN)");
                    }
            }
        }
        const int slot = m_flight.empty() ? 0 : 1 - m_flight.back().slot;
        pf.slot = slot;
        m_last_slot = slot;
        pinned_buffer &pin = m_pinned[slot], &pin_logits = m_pinned_logits[slot], &pin_out = m_pinned_out[slot],
                      &pin_io = m_pinned_io[slot];

        // Inputs → the slot's pinned mirror → one transfer of this batch's bytes.
        m_in = make_input_layout(T, R, S * stride);
        m_out = make_out_layout(T);
        const input_layout &il = m_in;
        std::memcpy(pin.at(il.tokens), tokens.data(), size_t(T) * 4);
        std::memcpy(pin.at(il.pos), b.pos.data(), size_t(T) * 4);
        std::memcpy(pin.at(il.seq), b.seq.data(), size_t(T) * 4);
        if (R) std::memcpy(pin.at(il.rows), b.logits_rows.data(), size_t(R) * 4);
        for (int64_t r = 0; r < R; ++r)
            pin.at<float>(il.temps)[r] = b.temperatures.empty() ? 0.0f : b.temperatures[size_t(r)];
        std::memcpy(pin.at(il.tiles), tiles.data(), tiles.size() * 4);
        int32_t *btp = pin.at<int32_t>(il.bt);
        for (int64_t s = 0; s < S; ++s) {
            const auto &tbl = b.seqs[s].block_table;
            std::copy(tbl.begin(), tbl.end(), btp + s * stride);
            std::fill(btp + s * stride + int64_t(tbl.size()), btp + (s + 1) * stride, 0);
        }
        // Outputs.
        // Decode-sized logits come through a pinned buffer (one DMA at full speed, then a host
        // copy), larger ones straight into the (pageable) output, at once (done).
        // Candidates: one small DMA of the download block (out_layout) through the same pinned
        // buffer, the routing record with them when it is on; with full logits rows the record
        // comes in a transfer of its own.
        const int64_t n_moe = n_moe_layers(), K = c.n_expert_used, nk = m_record_routing ? n_moe * T * K : 0;
        const size_t logit_bytes = top_n > 0 ? cand_bytes(R, top_n) : size_t(R * c.n_vocab) * 4;
        const bool via_pinned = R > 0 && (R <= k_graph_max_tokens || top_n > 0);
        const size_t cand_rel = m_out.cand - m_out.ids; // the candidates' offset in the block
        const bool cand_block = R > 0 && top_n > 0;
        pf.nk = nk;
        pf.cand_rel = cand_rel;
        pf.logit_bytes = logit_bytes;
        pf.via_pinned = via_pinned;
        pf.cand_block = cand_block;
        const bool sync_now = m_profiling || (R > 0 && !via_pinned);
        if (sync_now) drain(); // (the forward's rows go straight into its output below)
        if (!via_pinned) pf.out.logits.resize(size_t(R * c.n_vocab)); // every element is written below
        if (via_pinned && pin_logits.bytes() < cand_rel + logit_bytes)
            pin_logits.alloc(std::max(cand_rel + logit_bytes, size_t(k_graph_max_tokens * c.n_vocab) * 4),
                             "pinned logits buffer");
        // The inputs in: a copy, or (fed tokens on the GPU) copy_bytes patching them on the way.
        copy_bytes_params in;
        in.dst = m_inputs.at();
        in.src = pin.at();
        in.bytes = il.total;
        if (fed_on_gpu) {
            in.fed_offset = il.tokens;
            in.fed_n = T;
            in.fed_ids = m_work.at<int32_t>(m_fed.cand);
            in.fed_stride = m_fed.top_n;
        }
        const std::function<void()> upload = [&] {
            if (fed_on_gpu)
                op("inputs in", [&] { return launch_copy_bytes(in, m_stream); });
            else
                ck(cudaMemcpyAsync(m_inputs.at(), pin.at(), il.total, cudaMemcpyHostToDevice, m_stream), "input upload");
        };
        const std::function<void()> download = [&] {
            if (cand_block) {
                const size_t from = nk ? 0 : cand_rel; // the record too when it is on
                ck(cudaMemcpyAsync(pin_logits.at(from), m_work.at(m_out.ids + from), cand_rel - from + logit_bytes,
                                   cudaMemcpyDeviceToHost, m_stream),
                   "candidates download");
            } else if (R)
                ck(cudaMemcpyAsync(via_pinned ? pin_logits.at() : static_cast<void *>(pf.out.logits.data()),
                                   m_work.at(w.logits), logit_bytes, cudaMemcpyDeviceToHost, m_stream),
                   "logits download");
            if (nk && !cand_block)
                ck(cudaMemcpyAsync(pin_out.at(), m_work.at(m_out.ids), size_t(nk) * 8, cudaMemcpyDeviceToHost, m_stream),
                   "routing download");
        };
        // Zero-copy I/O: a candidates step's graph reads its inputs from the slot's pinned mirror
        // and writes its download block to the slot's m_pinned_io itself (copy_bytes kernels, the
        // device reaching pinned host memory directly), so that a replay is one launch call and no
        // transfer (the host's share of a 21B-A3B token 9.4-10.8 µs instead of 14.5-15.7 with
        // transfers around the replay). The same transfers as copies inside the graph made its launch call 3-7×
        // longer. ES_CUDA_ZERO_COPY=0 keeps the transfers around every step.
        const bool io_in_graph = m_zero_copy && cand_block;
        const size_t dl_from = nk ? 0 : cand_rel, dl_bytes = cand_rel - dl_from + logit_bytes;
        const std::function<void()> copy_in = [&] { op("inputs in", [&] { return launch_copy_bytes(in, m_stream); }); };
        const std::function<void()> copy_out = [&] {
            copy_bytes_params cp;
            cp.dst = pin_io.at(dl_from);
            cp.src = m_work.at(m_out.ids + dl_from);
            cp.bytes = dl_bytes;
            op("download block out", [&] { return launch_copy_bytes(cp, m_stream); });
        };
        const int64_t max_pos = *std::max_element(b.pos.begin(), b.pos.end());
        const int64_t kv_splits = T <= k_graph_max_tokens ? decode_kv_splits(max_pos, m_kv_split_chunks) : 1;
        // The graph holds the slot's pinned pointers when it carries its I/O, and the fed tokens'
        // source (the previous forward's candidates: their offset and stride).
        const int64_t io_key = io_in_graph ? 1 + (nk ? 1 : 0) + 2 * slot : 0;
        const int64_t fed_key = fed_on_gpu ? int64_t(m_fed.cand) * 128 + m_fed.top_n : -1;
        const auto key = std::make_tuple(T, R, S, stride, n_tiles, kv_splits, max_tile, top_n, m_pick, io_key, fed_key);
        pf.h1 = hclk::now();
        pf.h2 = pf.h1;
        bool launched = false, replayed = false, io_done = false;
        if (m_params.use_graphs && !m_profiling && m_graph_error.empty() && T <= k_graph_max_tokens) {
            auto it = m_graphs.find(key);
            if (it != m_graphs.end()) {
                if (!io_in_graph) upload();
                pf.h2 = hclk::now();
                m_last_graph = it->second;
                m_graph_used[key] = ++m_graph_tick;
                ck(cudaGraphLaunch(it->second, m_stream), "cudaGraphLaunch");
                note_graph_launch(it->second, slot);
                launched = replayed = true;
                io_done = io_in_graph;
            } else if (m_seen_keys.count(key)) {
                if (!io_in_graph) upload();
                m_inputs_by_kernel = io_in_graph || fed_on_gpu; // layer 0's GEMV reads them after its wait
                launched = capture_and_launch(key, T, R, n_tiles, stride, kv_splits, max_tile,
                                              io_in_graph ? copy_in : nullptr, io_in_graph ? copy_out : nullptr, slot);
                io_done = launched && io_in_graph;
                if (!launched && io_in_graph) upload(); // the eager launches below need the inputs
            } else {
                m_seen_keys.insert(key); // run eagerly once first: lazy initialization stays out of the graph
                upload();
            }
        } else {
            upload();
        }
        if (!launched) {
            m_inputs_by_kernel = fed_on_gpu;
            enqueue(T, R, n_tiles, stride, kv_splits, max_tile);
        }
        pf.h3 = hclk::now();
        if (!io_done) download();
        ck(cudaEventRecord(m_done[slot], m_stream), "cudaEventRecord");
        pf.h4 = hclk::now();
        pf.io_done = io_done;
        pf.replayed = replayed;
        // What the next forward's fed tokens read: these candidates, on the GPU.
        m_fed = fed_source{m_out.cand, top_n, R, cand_block};
        m_last_tops_current = false;
        if (sync_now) {
            collect(pf, pf.out, true);
            pf.done = true;
        }
        return pf;
    }

    // The previous submitted forward's top candidates on the host (m_last_tops): collects the
    // forwards in flight.
    void drain_for_tops() {
        drain();
        if (!m_last_tops_current)
            throw load_error("batch: fed tokens need the previous forward's candidates (batch::top_n >= 1)");
    }

    // Waits for a started forward and reads its outputs from its slot's pinned buffers into out.
    // latest: pf is the last forward submitted (its top candidates are what fed tokens name next).
    void collect(pending_forward &pf, forward_output &out, bool latest) {
        using hclk = std::chrono::steady_clock;
        const auto &c = m_cfg;
        const int64_t T = pf.T, R = pf.R, top_n = pf.top_n, nk = pf.nk, K = c.n_expert_used;
        const int slot = pf.slot;
        ck(cudaEventSynchronize(m_done[slot]), "the forward pass");
        ck(cudaGetLastError(), "the forward pass");
        const auto h5 = hclk::now();
        // The routing record's ids and weights and the candidates are sized and filled in place,
        // so a caller that passes the same output every step (the bench, the engine) allocates
        // nothing for them in a decode step.
        routing_record &rr = out.routing;
        rr.moe_layers.clear();
        rr.n_expert_used = int32_t(c.n_expert_used);
        logit_candidate_rows &cr = out.candidates;
        cr.top_n = 0;
        cr.ids.clear();
        cr.logits.clear();
        cr.row_max.clear();
        cr.row_sum.clear();
        out.phases = phase_times{};
        if (&out != &pf.out) {
            if (pf.via_pinned || R == 0) out.logits.clear();
            else out.logits = std::move(pf.out.logits);
        }
        // The download block's host copy: written by the graph itself (zero-copy) or by the copy.
        const unsigned char *dl = pf.io_done ? m_pinned_io[slot].at() : m_pinned_logits[slot].at();
        if (pf.via_pinned && top_n > 0) {
            const unsigned char *p = dl + pf.cand_rel;
            cr.top_n = int32_t(top_n);
            cr.ids.assign(reinterpret_cast<const int32_t *>(p), reinterpret_cast<const int32_t *>(p) + R * top_n);
            p += size_t(R * top_n) * 4;
            cr.logits.assign(reinterpret_cast<const float *>(p), reinterpret_cast<const float *>(p) + R * top_n);
            p += size_t(R * top_n) * 4;
            cr.row_max.assign(reinterpret_cast<const float *>(p), reinterpret_cast<const float *>(p) + R);
            const double *sums = reinterpret_cast<const double *>(dl + pf.cand_rel + cand_sums_offset(R, top_n));
            cr.row_sum.assign(sums, sums + R);
        } else if (pf.via_pinned) {
            out.logits.resize(size_t(R * c.n_vocab));
            std::memcpy(out.logits.data(), m_pinned_logits[slot].at(), pf.logit_bytes);
        }
        m_last_rows = R;
        // The top candidates, for fed tokens of a next forward that cannot read them on the GPU.
        m_last_tops.clear();
        for (int64_t r = 0; r < (top_n > 0 ? R : 0); ++r) m_last_tops.push_back(cr.ids[size_t(r * top_n)]);
        m_last_tops_current = latest && top_n > 0;
        if (m_profiling) collect_profile();
        if (nk) {
            const unsigned char *rec = pf.cand_block ? dl : m_pinned_out[slot].at();
            const int32_t *ids = reinterpret_cast<const int32_t *>(rec);
            const float *wts = reinterpret_cast<const float *>(rec + size_t(nk) * 4);
            rr.ids.resize(size_t(n_moe_layers()));
            rr.weights.resize(size_t(n_moe_layers()));
            int64_t m = 0;
            for (int64_t il = 0; il < c.n_layer; ++il) {
                if (!m_layers[il].is_moe) continue;
                rr.moe_layers.push_back(int32_t(il));
                std::vector<int16_t> &li = rr.ids[size_t(m)];
                li.resize(size_t(T * K));
                for (int64_t i = 0; i < T * K; ++i) li[size_t(i)] = int16_t(ids[m * T * K + i]);
                rr.weights[size_t(m)].assign(wts + m * T * K, wts + (m + 1) * T * K);
                ++m;
            }
        } else {
            rr.ids.clear();
            rr.weights.clear();
        }
        if (pf.replayed) {
            auto us = [](hclk::time_point a, hclk::time_point b) {
                return std::chrono::duration<double, std::micro>(b - a).count();
            };
            forward_host_times &h = m_host_times;
            ++h.forwards;
            h.prep_us += us(pf.h0, pf.h1);
            h.upload_us += us(pf.h1, pf.h2);
            h.launch_us += us(pf.h2, pf.h3);
            h.download_us += us(pf.h3, pf.h4);
            h.wait_us += us(std::max(pf.h4, m_last_collect), h5); // (overlapped: from the previous one's end)
            h.unpack_us += us(h5, hclk::now());
        }
        m_last_collect = hclk::now();
    }

    // Counts a launch of `exec` and keeps the inputs it ran with (launched_graphs_replay_us).
    void note_graph_launch(cudaGraphExec_t exec, int slot) {
        graph_run &gr = m_graph_runs[exec];
        ++gr.launches;
        gr.slot = slot;
        gr.inputs.assign(m_pinned[slot].at(), m_pinned[slot].at() + m_in.total);
    }

    // T, R, S, stride, n_tiles, kv_splits, max_tile, top_n, m_pick, the transfers in the graph
    // (0: none; 1 + record + 2 · slot), the fed tokens' source (−1: none).
    using graph_key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool,
                                 int64_t, int64_t>;

    // Drops the graph replayed longest ago (k_max_graphs; ES_CUDA_MAX_GRAPHS). The stream is
    // drained first: that graph may be the one still running. Its workspace stays pinned until
    // clear_graphs.
    void evict_least_recent_graph() {
        auto oldest = m_graph_used.begin();
        for (auto it = m_graph_used.begin(); it != m_graph_used.end(); ++it)
            if (it->second < oldest->second) oldest = it;
        if (oldest == m_graph_used.end()) return;
        const auto g = m_graphs.find(oldest->first);
        if (g != m_graphs.end()) {
            ck(cudaStreamSynchronize(m_stream), "graph eviction");
            if (m_last_graph == g->second) m_last_graph = nullptr;
            m_graph_ops.erase(g->second);
            m_graph_runs.erase(g->second);
            cudaGraphExecDestroy(g->second);
            m_graphs.erase(g);
        }
        m_graph_used.erase(oldest);
    }

    // pre and post (when set) enqueue transfers captured before and after the step's launches.
    bool capture_and_launch(const graph_key &key, int64_t T, int64_t R, int64_t n_tiles, int64_t stride, int64_t kv_splits,
                            int64_t max_tile, const std::function<void()> &pre, const std::function<void()> &post,
                            int slot) {
        cudaGraph_t graph = nullptr;
        ck(cudaStreamBeginCapture(m_stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        std::vector<std::string> ops; // the launch names, for graph_timeline
        struct stop_logging {
            std::vector<std::string> *&log;
            ~stop_logging() { log = nullptr; }
        } guard{m_capture_ops = &ops};
        try {
            if (pre) pre();
            enqueue(T, R, n_tiles, stride, kv_splits, max_tile);
            if (post) post();
        } catch (const load_error &e) {
            cudaStreamEndCapture(m_stream, &graph);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            m_graph_error = e.what();
            return false; // run eagerly; graphs stay off for this backend
        }
        cudaError_t e = cudaStreamEndCapture(m_stream, &graph);
        if (e != cudaSuccess || !graph) {
            cudaGetLastError();
            m_graph_error = std::string("stream capture failed: ") + cudaGetErrorString(e);
            return false;
        }
        cudaGraphExec_t exec = nullptr;
        e = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            cudaGetLastError();
            m_graph_error = std::string("graph instantiation failed: ") + cudaGetErrorString(e);
            return false;
        }
        if (m_graphs.size() >= m_max_graphs) evict_least_recent_graph();
        m_graphs.emplace(key, exec);
        m_graph_used[key] = ++m_graph_tick;
        m_graph_ops[exec] = std::move(ops);
        m_ws.pin_in_use(); // the graph holds the workspace's raw pointers until clear_graphs
        m_last_graph = exec;
        ck(cudaGraphLaunch(exec, m_stream), "cudaGraphLaunch");
        note_graph_launch(exec, slot);
        return true;
    }

    model_config m_cfg;
    cuda_backend_params m_params;
    cuda_device_info m_dev;
    cudaStream_t m_stream = nullptr;
    gemm_lt_context *m_lt = nullptr;
    std::string m_broken, m_graph_error;
    activation_format m_act = activation_format::bf16; // in effect for FP8 linears (activations())
    std::string m_act_note;                            // why m_act differs from the request
    int64_t m_max_dense_lin = 0;                       // elements of the widest dense linear

    device_buffer m_weights, m_kv_pool;
    device_buffer m_head_weights; // the FP8 head copy (fp8_policy::head), apart from m_weights
    size_t m_head_copy_bytes = 0; // its bytes (the allocation may be larger: head_copy_alloc_bytes)
    // Per-step scratch from the caching workspace allocator (declared first: it outlives its blocks).
    device_allocator m_ws{cuda_memory_source()};
    workspace_buffer m_staging{m_ws}, m_deq{m_ws}, m_work{m_ws}, m_inputs{m_ws};
    // Pinned host buffers, one set a slot (a forward in flight each, submit): the inputs' mirror,
    // the routing record's and the logits' or candidates' copies, and the download block as
    // zero-copy graphs write it (sized with the workspace layout, so that its address changes only
    // where the graphs are cleared; m_pinned_logits grows as needed: graphs never hold it).
    pinned_buffer m_pinned[2], m_pinned_out[2], m_pinned_logits[2], m_pinned_io[2];
    cudaEvent_t m_done[2] = {nullptr, nullptr}; // recorded after each slot's forward
    std::deque<pending_forward> m_flight; // submitted, not finished (oldest first)
    // Where the last submitted forward left its candidates in the workspace (fed tokens of the
    // next one read them on the GPU), and the top candidate of each row of the last one finished
    // (fed tokens resolved on the host, where the workspace has moved since).
    struct fed_source {
        size_t cand = 0;
        int64_t top_n = 0, R = 0;
        bool valid = false;
    } m_fed;
    std::vector<int32_t> m_last_tops;
    bool m_last_tops_current = false; // m_last_tops is of the last submitted forward
    int64_t m_top_n = 0;     // candidates per row of the forward being enqueued (0: none)
    bool m_pick = false;     // …and its one row is greedy (top_n 1, T ≤ 0): the head's GEMV picks it
    int64_t m_last_rows = 0; // logits rows of the last finished forward (logits_row())
    size_t m_tok_embd_off = 0, m_output_norm_off = 0, m_head_off = 0, m_inv_freq_off = 0;
    std::vector<dlayer> m_layers;
    dlin m_head, m_head_fp8;
    double m_decode_bytes = 0.0;
    kv_cache_params m_kv;
    // The KV pools' element format (cuda_backend_params::kv_cache) and the name's mention of it.
    kv_format kv_fmt() const {
        return m_params.kv_cache == kv_cache_dtype::fp8 ? kv_format::fp8_e4m3 : kv_format::bf16;
    }
    std::string kv_name_suffix() const { return m_params.kv_cache == kv_cache_dtype::fp8 ? ", fp8 KV" : ""; }
    size_t m_kv_layer_elems = 0;
    work_layout m_lay{};
    input_layout m_in{}; // the inputs of the forward being enqueued or captured
    out_layout m_out{};  // its download block
    std::map<graph_key, cudaGraphExec_t> m_graphs;
    std::map<graph_key, uint64_t> m_graph_used; // last capture or replay, for k_max_graphs
    uint64_t m_graph_tick = 0;
    size_t m_max_graphs = k_max_graphs; // ES_CUDA_MAX_GRAPHS (a testing aid: eviction with few graphs)
    std::set<graph_key> m_seen_keys;
    cudaGraphExec_t m_last_graph = nullptr;
    // Launch names of each captured graph, in order (graph_timeline), and the list op() appends
    // to while a capture runs.
    std::map<cudaGraphExec_t, std::vector<std::string>> m_graph_ops;
    std::vector<std::string> *m_capture_ops = nullptr;
    // Steps that launched each graph since launched_graphs_replay_us last ran, and the inputs of
    // its latest launch (the pinned mirror's bytes), so that it can be replayed as it ran.
    struct graph_run {
        int64_t launches = 0;
        int slot = 0; // the pinned slot its inputs come from
        std::vector<unsigned char> inputs;
    };
    std::map<cudaGraphExec_t, graph_run> m_graph_runs;
    forward_host_times m_host_times; // host_times()
    std::chrono::steady_clock::time_point m_last_collect{}; // the last collect()'s end (host_times' wait)
    int m_last_slot = 0;                                    // the last submitted forward's slot
    // The step being enqueued gets its inputs from a kernel (copy_bytes), not a copy before its
    // first launch: layer 0's fused q/k/v GEMV must read them after its wait.
    bool m_inputs_by_kernel = false;
    int m_kv_split_chunks = 1; // ES_CUDA_KV_SPLIT_CHUNKS
    int64_t m_moe_gemv_max_tokens = k_moe_gemv_max_tokens; // ES_CUDA_MOE_GEMV_MAX_TOKENS
    int m_moe_down_rows_per_warp = 0; // ES_CUDA_MOE_DOWN_ROWS_PER_WARP; 0: the kernel's default
    std::vector<std::string> m_skip_ops;
    bool m_moe_down_rows = true;
    bool m_moe_slot_counters = true; // ES_CUDA_MOE_SLOT_COUNTERS=0: false
    int64_t m_router_tiles_min = moe_router_tiles_min_tokens; // ES_CUDA_ROUTER_TILES_MIN
    bool m_combine_norm = true;                               // ES_CUDA_COMBINE_NORM
    bool m_head_pick = true;                                  // ES_CUDA_HEAD_PICK
    bool m_zero_copy = true;                                  // ES_CUDA_ZERO_COPY
    // Warps of the head's persistent grid the pick's keys have room for: 64 an SM (an SM holds at
    // most 2,048 threads).
    unsigned pick_keys_cap() const { return 64u * unsigned(std::max(m_dev.n_sm, 1)); }
    bool m_moe_wgmma = true;                                  // ES_CUDA_MOE_WGMMA
    int64_t m_moe_wgmma_min = moe_grouped_gemm_wgmma_min_slots_per_expert; // ES_CUDA_MOE_WGMMA_MIN
    bool m_moe_fp8_act = true;                                // ES_CUDA_MOE_FP8_ACT
    int m_moe_mma = 1;               // ES_CUDA_MOE_MMA
    moe_gate_up_gemv_params::mma_shape_t m_moe_mma_shape; // ES_CUDA_MOE_MMA_SHAPE
    // The FP8 routed gate/up stacks stored tile-major (cuda_backend_params::moe_tile_major,
    // ES_CUDA_MOE_TILE_MAJOR=0|1), and what the graph line says about it.
    bool m_moe_tile_major = false;
    std::string m_tile_major_note;
    bool m_fuse = true;
    bool m_record_routing = true;
    bool m_profiling = false;
    std::vector<cudaEvent_t> m_events;
    size_t m_event_next = 0;
    std::vector<std::pair<std::string, size_t>> m_pending;
    std::map<std::string, std::pair<double, int64_t>> m_prof;
};

} // namespace

int cuda_driver_version(std::string *why) {
    std::string reason;
    int v = 0;
    if (void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); !h) {
        const char *e = dlerror();
        reason = std::string("no NVIDIA driver is installed (libcuda.so.1 cannot be loaded: ") +
                 (e ? e : "?") + ")";
    } else {
        dlclose(h);
        const cudaError_t e = cudaDriverGetVersion(&v);
        if (e != cudaSuccess || v == 0) {
            cudaGetLastError();
            reason = e != cudaSuccess
                         ? std::string("the NVIDIA driver cannot be used (") + cudaGetErrorString(e) + ")"
                         : std::string("no NVIDIA driver is loaded (libcuda.so.1 reports no version)");
            v = 0;
        } else if (v / 1000 < CUDART_VERSION / 1000) {
            // CUDA's minor-version compatibility: any driver of the runtime's major version works.
            reason = "the NVIDIA driver is too old: it supports CUDA " + cuda_version_string(v) +
                     ", this build needs " + std::to_string(CUDART_VERSION / 1000) + ".x (update the driver)";
        }
    }
    if (why) *why = reason;
    return v;
}

result<cuda_device_info> probe_cuda_device(int device) {
    std::string why;
    if (cuda_driver_version(&why) == 0 || !why.empty()) return error{why};
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")"};
    }
    if (count <= device) return error{"no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)"};
    cudaDeviceProp prop{};
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("cannot query CUDA device: ") + cudaGetErrorString(e)};
    }
    cuda_device_info info;
    info.device = device;
    info.name = prop.name;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.n_sm = prop.multiProcessorCount;
#ifdef ES_CUDA_MIN_CC
    if (prop.major * 10 + prop.minor < ES_CUDA_MIN_CC)
        return error{info.name + " has compute capability " + std::to_string(prop.major) + "." +
                     std::to_string(prop.minor) + "; this build's kernels need " +
                     std::to_string(ES_CUDA_MIN_CC / 10) + "." + std::to_string(ES_CUDA_MIN_CC % 10) +
                     " or newer (rebuild with ES_CUDA_ARCHITECTURES naming this GPU)"};
#endif
    // Launch one tiny kernel: proves the driver, the context and that this build has code for
    // the GPU's architecture (cudaErrorNoKernelImageForDevice otherwise).
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("cannot use CUDA device: ") + cudaGetErrorString(e)};
    }
    void *buf = nullptr;
    if ((e = cudaMalloc(&buf, 256)) != cudaSuccess) {
        cudaGetLastError();
        return error{std::string("cannot allocate on the CUDA device: ") + cudaGetErrorString(e)};
    }
    fill_random_params p;
    p.out = static_cast<bf16_t *>(buf);
    p.n = 16;
    e = launch_fill_random(p, nullptr);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    cudaFree(buf);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return error{info.name + " (compute capability " + std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                     ") cannot run this build's kernels: " + cudaGetErrorString(e) +
                     " (rebuild with ES_CUDA_ARCHITECTURES naming this GPU)"};
    }
    cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
    return info;
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
