// The CUDA self-test (see cuda_selftest.h). Metrics follow the output's dtype: fp32 outputs use
// the largest error scaled by magnitude, |gpu − ref| / (|ref| + rms(ref)); BF16 outputs the same
// with a limit of about two BF16 ulps; FP8 paths NMSE and cosine against the unquantized result;
// indices exact or set equality. A sticky CUDA error ends the kernel section (later rows would
// only repeat it).
#include "engine/cuda/selftest/cuda_selftest.h"

#include "engine/core/compare.h"

#include "engine/runtime/engine.h"

#include "engine/cuda/backend/cuda_backend.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"
#include "engine/cuda/cuda_twin_model.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/model.h"

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
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace es {
namespace {

struct test_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void ck(cudaError_t e, const std::string &what) {
    if (e != cudaSuccess) throw test_failure(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Device copy of a host vector; download() brings it back.
template <typename T>
class dvec {
public:
    explicit dvec(const std::vector<T> &h) : m_n(h.size()) {
        ck(cudaMalloc(reinterpret_cast<void **>(&m_p), std::max<size_t>(1, m_n) * sizeof(T)), "cudaMalloc");
        if (m_n) ck(cudaMemcpy(m_p, h.data(), m_n * sizeof(T), cudaMemcpyHostToDevice), "upload");
    }
    explicit dvec(size_t n) : m_n(n) {
        ck(cudaMalloc(reinterpret_cast<void **>(&m_p), std::max<size_t>(1, n) * sizeof(T)), "cudaMalloc");
        ck(cudaMemset(m_p, 0, std::max<size_t>(1, n) * sizeof(T)), "cudaMemset");
    }
    ~dvec() { cudaFree(m_p); }
    dvec(const dvec &) = delete;
    dvec &operator=(const dvec &) = delete;
    T *get() const { return m_p; }
    std::vector<T> download() const {
        std::vector<T> h(m_n);
        if (m_n) ck(cudaMemcpy(h.data(), m_p, m_n * sizeof(T), cudaMemcpyDeviceToHost), "download");
        return h;
    }

private:
    T *m_p = nullptr;
    size_t m_n = 0;
};

// Pinned host bytes (cudaMallocHost), freed with the object: what a zero-copy kernel reads or writes.
class pinned_bytes {
public:
    explicit pinned_bytes(size_t n) {
        ck(cudaMallocHost(reinterpret_cast<void **>(&m_p), std::max<size_t>(1, n)), "cudaMallocHost");
    }
    ~pinned_bytes() { cudaFreeHost(m_p); }
    pinned_bytes(const pinned_bytes &) = delete;
    pinned_bytes &operator=(const pinned_bytes &) = delete;
    unsigned char *get() const { return m_p; }

private:
    unsigned char *m_p = nullptr;
};

void sync(const std::string &what) {
    ck(cudaGetLastError(), what + " (launch)");
    ck(cudaDeviceSynchronize(), what);
}

std::mt19937 &rng() {
    static std::mt19937 g(12345);
    return g;
}
std::vector<float> rand_f(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = d(rng());
    return v;
}
std::vector<bf16_t> rand_bf16(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<bf16_t> v(n);
    std::uniform_real_distribution<float> d(lo, hi);
    for (auto &x : v) x = float_to_bf16_bits(d(rng()));
    return v;
}
std::vector<float> widen(const std::vector<bf16_t> &v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_bits_to_float(v[i]);
    return f;
}

// max_i |a − b| / (|b| + rms(b))
double scaled_err(const std::vector<float> &a, const std::vector<float> &b) {
    if (a.size() != b.size()) return INFINITY;
    double ss = 0.0;
    for (float v : b) ss += double(v) * v;
    const double rms = b.empty() ? 0.0 : std::sqrt(ss / double(b.size()));
    double worst = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(double(a[i]) - double(b[i]));
        if (!std::isfinite(a[i])) return INFINITY;
        worst = std::max(worst, d / (std::fabs(double(b[i])) + rms + 1e-30));
    }
    return worst;
}
constexpr double k_f32_limit = 1e-4;  // fp32 accumulation in a different order
constexpr double k_bf16_limit = 1e-2; // ≈ 2.5 BF16 ulps at the value's magnitude
// The tensor-core attention kernels feed P·V with P rounded to BF16 (as flash-attention does);
// a CPU emulation of the kernel against the fp32 twin reached 0.0113 (prefill 700, group 5).
constexpr double k_attention_tc_limit = 2e-2;

class runner {
public:
    explicit runner(const selftest_options &o, selftest_report &r) : m_o(o), m_r(r) {}

    void add(const std::string &group, const std::string &name, const std::string &metric, double value, double limit,
             bool lower_is_better = true, const std::string &note = {}) {
        selftest_row row{group, name, metric, value, limit, false, note};
        row.pass = std::isfinite(value) && (lower_is_better ? value <= limit : value >= limit);
        push(row);
    }
    void info(const std::string &group, const std::string &name, const std::string &metric, double value,
              const std::string &note = "info") {
        push(selftest_row{group, name, metric, value, 0.0, true, note});
    }
    void failed(const std::string &group, const std::string &name, const std::string &why) {
        push(selftest_row{group, name, "error", NAN, 0.0, false, why});
    }
    // Runs one case; an exception becomes a failed row. Returns false on a sticky CUDA error.
    template <typename F>
    bool run(const std::string &group, const std::string &name, F &&f) {
        if (!m_o.only.empty() && name.find(m_o.only) == std::string::npos) return true;
        try {
            f();
        } catch (const std::exception &e) {
            failed(group, name, e.what());
            const cudaError_t st = cudaDeviceSynchronize();
            if (st != cudaSuccess && st != cudaErrorInvalidValue) {
                failed(group, "(remaining kernel tests)", std::string("stopped: the CUDA context is broken (") +
                                                              cudaGetErrorString(st) + ")");
                return false;
            }
        }
        return true;
    }

private:
    void push(const selftest_row &row) {
        m_r.rows.push_back(row);
        if (m_o.on_row) m_o.on_row(row);
    }
    const selftest_options &m_o;
    selftest_report &m_r;
};

std::string shape_name(const std::string &op, std::initializer_list<std::pair<const char *, int64_t>> dims,
                       const std::string &extra = {}) {
    std::string s = op;
    if (!extra.empty()) s += " " + extra;
    for (auto [k, v] : dims) s += std::string(" ") + k + "=" + std::to_string(v);
    return s;
}

// FP8 KV cache (kernel_common.h's kv_format): the per-tensor scales of the kernel rows (not powers
// of two, so the scale's arithmetic is exercised both ways).
constexpr float k_test_k_scale = 0.75f, k_test_v_scale = 1.5f;

std::string kv_label(kv_format kv) { return kv == kv_format::fp8_e4m3 ? " fp8 KV" : ""; }

// A K or V pool (raw bytes of kv elements), GPU against twin. BF16: max scaled error (limit
// k_bf16_limit, or exact). FP8: the largest distance between codes in E4M3 steps — 0 when exact,
// else at most 1 (a value within fp32 rounding of an E4M3 rounding boundary may go either way when
// the GPU computes it in another order or with fused multiply-adds; a wrong layout, scale or
// conversion differs by many steps).
void add_kv_rows(runner &R, const std::string &name, kv_format kv, const std::vector<uint8_t> &got,
                 const std::vector<uint8_t> &want, bool exact) {
    if (kv == kv_format::bf16) {
        std::vector<bf16_t> a(got.size() / 2), b(want.size() / 2);
        std::memcpy(a.data(), got.data(), a.size() * 2);
        std::memcpy(b.data(), want.data(), b.size() * 2);
        R.add("kernel", name, exact ? "max abs err (exact)" : "max scaled err (bf16)",
              scaled_err(widen(a), widen(b)), exact ? 0.0 : k_bf16_limit);
        return;
    }
    double worst = got.size() == want.size() ? 0.0 : INFINITY;
    int64_t differ = 0;
    const auto ord = [](uint8_t c) {
        return (c & 0x80) ? -int(c & 0x7f) : int(c & 0x7f);
    }; // monotonic in value
    for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
        const int d = std::abs(ord(got[i]) - ord(want[i]));
        worst = std::max(worst, double(d));
        differ += d != 0;
    }
    R.add("kernel", name, exact ? "max E4M3 code steps (exact)" : "max E4M3 code steps", worst,
          exact ? 0.0 : 1.0);
    if (!exact) R.info("kernel", name, "E4M3 codes differing", double(differ));
}

// BF16 values → a pool of kv elements (raw bytes): BF16 as they are, FP8 stored as rope_kv stores them.
std::vector<uint8_t> kv_pool_of(const std::vector<bf16_t> &v, kv_format kv, float scale) {
    std::vector<uint8_t> out(v.size() * kv_format_bytes(kv));
    if (kv == kv_format::bf16)
        std::memcpy(out.data(), v.data(), out.size());
    else
        for (size_t i = 0; i < v.size(); ++i) out[i] = kv_store_fp8(bf16_bits_to_float(v[i]), scale);
    return out;
}

// ---- kernel cases ------------------------------------------------------------------------------

void test_embedding(runner &R, int64_t T, int64_t V, int64_t H) {
    const std::string name = shape_name("embedding", {{"T", T}, {"V", V}, {"H", H}});
    R.run("kernel", name, [&] {
        std::vector<int32_t> tok(static_cast<size_t>(T));
        for (auto &t : tok) t = int32_t(rng()() % uint32_t(V));
        if (T > 1) tok[1] = int32_t(V - 1);
        auto table = rand_bf16(static_cast<size_t>(V * H));
        dvec<int32_t> dt(tok);
        dvec<bf16_t> dtab(table);
        dvec<float> dout(static_cast<size_t>(T * H));
        embedding_params p{dt.get(), dtab.get(), dout.get(), T, H};
        ck(launch_embedding(p, nullptr), "launch");
        sync(name);
        std::vector<float> ref(static_cast<size_t>(T * H));
        p = embedding_params{tok.data(), table.data(), ref.data(), T, H};
        embedding_ref(p);
        R.add("kernel", name, "max abs err (exact)", scaled_err(dout.download(), ref), 0.0);
    });
}

void test_rms_norm(runner &R, int64_t rows, int64_t H, bool delta, bool gather) {
    const std::string name = shape_name("rms_norm", {{"rows", rows}, {"H", H}}, std::string(delta ? "+residual" : "") + (gather ? " gather" : ""));
    R.run("kernel", name, [&] {
        const int64_t src_rows = gather ? rows + 2 : rows;
        auto x = rand_f(static_cast<size_t>(src_rows * H), -3, 3), d = rand_f(static_cast<size_t>(src_rows * H));
        auto w = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
        std::vector<int32_t> idx;
        for (int64_t r = 0; r < rows; ++r) idx.push_back(int32_t((r * 7 + 1) % src_rows));
        dvec<float> dx(x), dd(d);
        dvec<bf16_t> dw(w), dout(static_cast<size_t>(rows * H));
        dvec<int32_t> didx(idx);
        rms_norm_params p;
        p.x = dx.get();
        p.delta = delta ? dd.get() : nullptr;
        p.rows = gather ? didx.get() : nullptr;
        p.weight = dw.get();
        p.out = dout.get();
        p.n_rows = rows;
        p.n_embd = H;
        ck(launch_rms_norm(p, nullptr), "launch");
        sync(name);
        std::vector<bf16_t> out(static_cast<size_t>(rows * H));
        p.x = x.data();
        p.delta = delta ? d.data() : nullptr;
        p.rows = gather ? idx.data() : nullptr;
        p.weight = w.data();
        p.out = out.data();
        rms_norm_ref(p);
        R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dout.download()), widen(out)), k_bf16_limit);
        if (delta) R.add("kernel", name + " residual", "max scaled err", scaled_err(dx.download(), x), 1e-6);
    });
}

void test_rope_kv(runner &R, int64_t n_head, int64_t n_head_kv, int64_t hd, kv_format kv = kv_format::bf16) {
    const std::string name =
        shape_name("rope_kv", {{"heads", n_head}, {"kv", n_head_kv}, {"hd", hd}}) + kv_label(kv);
    R.run("kernel", name, [&] {
        const std::vector<int32_t> pos = {0, 1, 17, 4000, 131000};
        const int64_t T = int64_t(pos.size()), bs = 16, qd = n_head * hd, kvd = n_head_kv * hd;
        int64_t stride = 0;
        for (int32_t p : pos) stride = std::max<int64_t>(stride, p / bs + 1);
        std::vector<int32_t> seq(static_cast<size_t>(T)), bt(static_cast<size_t>(T * stride), 0);
        for (int64_t t = 0; t < T; ++t) {
            seq[t] = int32_t(t);
            bt[t * stride + pos[t] / bs] = int32_t(t + 1); // block t+1: slots never collide
        }
        const int64_t n_blocks = T + 1;
        std::vector<float> inv(static_cast<size_t>(hd / 2));
        for (int64_t i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(500000.0f, float(2 * i) / float(hd));
        auto qkv = rand_f(static_cast<size_t>(T * (qd + 2 * kvd)), -2, 2);
        dvec<float> dqkv(qkv), dinv(inv);
        dvec<int32_t> dpos(pos), dseq(seq), dbt(bt);
        const size_t pool = static_cast<size_t>(n_blocks * bs * kvd) * kv_format_bytes(kv);
        dvec<bf16_t> dq(static_cast<size_t>(T * qd));
        dvec<uint8_t> dk(pool), dv(pool);
        rope_kv_params p;
        p.kv = kv;
        p.k_scale = k_test_k_scale;
        p.v_scale = k_test_v_scale;
        p.qkv = dqkv.get();
        p.pos = dpos.get();
        p.seq = dseq.get();
        p.block_tables = dbt.get();
        p.bt_stride = stride;
        p.inv_freq = dinv.get();
        p.q_out = dq.get();
        p.k_cache = dk.get();
        p.v_cache = dv.get();
        p.n_tokens = T;
        p.n_head = n_head;
        p.n_head_kv = n_head_kv;
        p.head_dim = hd;
        p.block_size = bs;
        ck(launch_rope_kv(p, nullptr), "launch");
        sync(name);
        std::vector<bf16_t> q(static_cast<size_t>(T * qd));
        std::vector<uint8_t> k(pool, 0), v(pool, 0);
        p.qkv = qkv.data();
        p.pos = pos.data();
        p.seq = seq.data();
        p.block_tables = bt.data();
        p.inv_freq = inv.data();
        p.q_out = q.data();
        p.k_cache = k.data();
        p.v_cache = v.data();
        rope_kv_ref(p);
        R.add("kernel", name + " q", "max scaled err (bf16)", scaled_err(widen(dq.download()), widen(q)), k_bf16_limit);
        add_kv_rows(R, name + " k cache", kv, dk.download(), k, false);
        add_kv_rows(R, name + " v cache", kv, dv.download(), v,
                    true); // no arithmetic but the scale's division
    });
}

// Elements of two GPU outputs whose bits differ (one kernel's two ways to the same result).
template <typename T>
double bit_diffs(const std::vector<T> &a, const std::vector<T> &b) {
    if (a.size() != b.size()) return double(std::max(a.size(), b.size()));
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
    return double(n);
}

// seqs: (first position, token count) per sequence; tokens of a sequence are contiguous (the
// positions before the first are in the cache too). The name says " tc" when the tensor-core
// kernel runs (forced by path, or chosen by the automatic rule), " cuda-core" when forced off.
void test_attention(runner &R, int64_t n_head, int64_t n_head_kv, int64_t hd,
                    const std::vector<std::pair<int32_t, int32_t>> &seqs, const std::string &label,
                    int64_t splits = 1, int64_t bs = 16, attention_path path = attention_path::automatic,
                    kv_format kv = kv_format::bf16) {
    attention_params shape; // the launcher's choice from the shape (the device buffers are aligned)
    std::vector<int32_t> seq_of;
    for (size_t s = 0; s < seqs.size(); ++s) seq_of.insert(seq_of.end(), size_t(seqs[s].second), int32_t(s));
    shape.n_tokens = int64_t(seq_of.size());
    const std::vector<int32_t> shape_tiles = attention_tiles(seq_of.data(), shape.n_tokens, n_head / n_head_kv);
    shape.n_tiles = int64_t(shape_tiles.size() / 2);
    // As the engine passes it: the most tokens a tile holds (1 lets the decode kernel skip the plan).
    for (size_t i = 1; i < shape_tiles.size(); i += 2)
        shape.max_tile_tokens = std::max<int64_t>(shape.max_tile_tokens, shape_tiles[i]);
    shape.n_head = n_head;
    shape.n_head_kv = n_head_kv;
    shape.head_dim = hd;
    shape.block_size = bs;
    shape.kv_splits = splits;
    shape.path = path;
    shape.kv = kv;
    const bool tc = attention_uses_tensor_cores(shape);
    const std::string name = shape_name("attention", {{"heads", n_head}, {"kv", n_head_kv}, {"hd", hd}},
                                        label + (splits > 1 ? " kv_splits=" + std::to_string(splits) : "") +
                                            (bs != 16 ? " bs=" + std::to_string(bs) : "") +
                                            (tc                                  ? " tc"
                                             : path == attention_path::cuda_core ? " cuda-core"
                                                                                 : "") +
                                            kv_label(kv));
    R.run("kernel", name, [&] {
        const int64_t qd = n_head * hd, kvd = n_head_kv * hd;
        std::vector<int32_t> pos, seq;
        int64_t stride = 1;
        for (size_t s = 0; s < seqs.size(); ++s) {
            for (int32_t i = 0; i < seqs[s].second; ++i) {
                pos.push_back(seqs[s].first + i);
                seq.push_back(int32_t(s));
            }
            stride = std::max<int64_t>(stride, (seqs[s].first + seqs[s].second + bs - 1) / bs);
        }
        const int64_t T = int64_t(pos.size()), S = int64_t(seqs.size()), n_blocks = S * stride + 3;
        // Each sequence's blocks are distinct and out of order (the block table is honoured).
        std::vector<int32_t> bt(static_cast<size_t>(S * stride));
        std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng());
        for (size_t i = 0; i < bt.size(); ++i) bt[i] = perm[i];
        auto q = rand_bf16(static_cast<size_t>(T * qd), -2, 2);
        // K, V: BF16 pools, or FP8 ones quantized from the same kind of values (the twin reads the
        // same codes, widened as the kernels widen them).
        const auto k = kv_pool_of(rand_bf16(static_cast<size_t>(n_blocks * bs * kvd), -2, 2), kv,
                                  k_test_k_scale),
                   v = kv_pool_of(rand_bf16(static_cast<size_t>(n_blocks * bs * kvd)), kv, k_test_v_scale);
        const int64_t group = n_head / n_head_kv;
        const std::vector<int32_t> tiles = attention_tiles(seq.data(), T, group);
        dvec<bf16_t> dq(q), dout(static_cast<size_t>(T * qd));
        dvec<uint8_t> dk(k), dv(v);
        dvec<int32_t> dpos(pos), dseq(seq), dbt(bt), dtiles(tiles);
        attention_params p;
        p.q = dq.get();
        p.k_cache = dk.get();
        p.v_cache = dv.get();
        p.pos = dpos.get();
        p.seq = dseq.get();
        p.block_tables = dbt.get();
        p.bt_stride = stride;
        p.tiles = dtiles.get();
        p.n_tiles = int64_t(tiles.size() / 2);
        p.max_tile_tokens = shape.max_tile_tokens;
        p.out = dout.get();
        p.n_tokens = T;
        p.n_head = n_head;
        p.n_head_kv = n_head_kv;
        p.head_dim = hd;
        p.block_size = bs;
        p.scale = 1.0f / std::sqrt(float(hd));
        p.kv = kv;
        p.k_scale = k_test_k_scale;
        p.v_scale = k_test_v_scale;
        dvec<float> dpart(static_cast<size_t>(attention_partial_floats(p.n_tiles, n_head, n_head_kv, hd, splits)));
        dvec<unsigned> dcounters(std::vector<unsigned>(static_cast<size_t>(p.n_tiles * n_head_kv), 0u));
        p.kv_splits = splits;
        p.partial = splits > 1 ? dpart.get() : nullptr;
        p.counters = dcounters.get();
        p.path = path;
        if (attention_uses_tensor_cores(p) != tc) throw test_failure("kernel choice differs from the shape's");
        ck(launch_attention(p, nullptr), "launch");
        sync(name);
        const std::vector<bf16_t> first = dout.download();
        ck(launch_attention(p, nullptr), "launch"); // again: split merging re-arms its counters
        sync(name);
        // Where the splits merged inside a cluster: the merge through memory and a counter, once
        // more after it re-armed its counters, gives the same bits (attention_decode.cu: merge_fold).
        // So does the cluster merge by pushes (attention.cuh: set_attention_merge_push).
        std::vector<bf16_t> by_counter, by_push;
        if (path == attention_path::automatic && attention_decode_clustered(p)) {
            set_attention_cluster_merge(false);
            const auto launched = launch_attention(p, nullptr);
            const auto again = launched == cudaSuccess ? launch_attention(p, nullptr) : launched;
            set_attention_cluster_merge(true);
            ck(again, "launch (counter merge)");
            sync(name);
            by_counter = dout.download();
            set_attention_merge_push(true);
            if (attention_decode_clustered(p)) {
                const auto pushed = launch_attention(p, nullptr);
                set_attention_merge_push(false);
                ck(pushed, "launch (cluster merge by pushes)");
                sync(name);
                by_push = dout.download();
            }
            set_attention_merge_push(false);
        }
        std::vector<bf16_t> out(static_cast<size_t>(T * qd));
        p.q = q.data();
        p.k_cache = k.data();
        p.v_cache = v.data();
        p.pos = pos.data();
        p.seq = seq.data();
        p.block_tables = bt.data();
        p.tiles = tiles.data();
        p.out = out.data();
        attention_ref(p);
        // Both tensor-core kernels (prefill, and decode when the launcher takes it) round P to BF16.
        const double limit = tc || (path == attention_path::automatic && attention_decode_ok(p))
                                 ? k_attention_tc_limit
                                 : k_bf16_limit;
        R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dout.download()), widen(out)), limit);
        R.add("kernel", name + " (first launch)", "max scaled err (bf16)", scaled_err(widen(first), widen(out)),
              limit);
        if (!by_counter.empty())
            R.add("kernel", name + " cluster merge", "outputs differing from the counter merge's (bits)",
                  bit_diffs(first, by_counter), 0.0);
        if (!by_push.empty())
            R.add("kernel", name + " cluster merge by pushes",
                  "outputs differing from the counter merge's (bits)", bit_diffs(by_push, by_counter), 0.0);
    });
}

void test_silu_mul(runner &R, int64_t T, int64_t F) {
    const std::string name = shape_name("silu_mul", {{"T", T}, {"F", F}});
    R.run("kernel", name, [&] {
        auto gu = rand_f(static_cast<size_t>(T * 2 * F), -6, 6);
        dvec<float> dgu(gu);
        dvec<bf16_t> dout(static_cast<size_t>(T * F));
        silu_mul_params p{dgu.get(), dout.get(), T, F};
        ck(launch_silu_mul(p, nullptr), "launch");
        sync(name);
        std::vector<bf16_t> out(static_cast<size_t>(T * F));
        p = silu_mul_params{gu.data(), out.data(), T, F};
        silu_mul_ref(p);
        R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dout.download()), widen(out)), k_bf16_limit);
    });
}

void test_moe_router(runner &R, int64_t T, int64_t H, int64_t E, int64_t K, bool all_tied) {
    const std::string name = shape_name("moe_router", {{"T", T}, {"H", H}, {"E", E}, {"k", K}}, all_tied ? "all tied" : "");
    R.run("kernel", name, [&] {
        auto x = rand_bf16(static_cast<size_t>(T * H), -2, 2);
        auto w = all_tied ? std::vector<float>(static_cast<size_t>(E * H), 0.0f) : rand_f(static_cast<size_t>(E * H), -0.1f, 0.1f);
        auto bias = all_tied ? std::vector<float>(static_cast<size_t>(E), 0.25f) : rand_f(static_cast<size_t>(E), -0.02f, 0.02f);
        dvec<bf16_t> dx(x);
        dvec<float> dw(w), db(bias), dwt(static_cast<size_t>(T * K)), dlogits(static_cast<size_t>(T * E));
        dvec<int32_t> dids(static_cast<size_t>(T * K));
        dvec<unsigned> dcount(static_cast<size_t>(T));
        moe_router_params p;
        p.x = dx.get();
        p.w = dw.get();
        p.bias = db.get();
        p.ids = dids.get();
        p.weights = dwt.get();
        p.n_tokens = T;
        p.n_embd = H;
        p.n_expert = E;
        p.n_expert_used = K;
        p.tiles_min_tokens = 64; // rows of 64 tokens and more: the token-tiled kernel, whatever the default
        p.logits = dlogits.get();
        p.counters = dcount.get();
        ck(launch_moe_router(p, nullptr), "launch");
        sync(name);
        ck(launch_moe_router(p, nullptr), "second launch"); // the counters were left at zero
        sync(name);
        std::vector<int32_t> ids(static_cast<size_t>(T * K));
        std::vector<float> wts(static_cast<size_t>(T * K));
        p.x = x.data();
        p.w = w.data();
        p.bias = bias.data();
        p.ids = ids.data();
        p.weights = wts.data();
        moe_router_ref(p);
        const auto gids = dids.download();
        int64_t same_set = 0, same_order = 0;
        for (int64_t t = 0; t < T; ++t) {
            std::set<int32_t> a(gids.begin() + t * K, gids.begin() + (t + 1) * K), b(ids.begin() + t * K, ids.begin() + (t + 1) * K);
            same_set += a == b;
            same_order += std::equal(gids.begin() + t * K, gids.begin() + (t + 1) * K, ids.begin() + t * K);
        }
        R.add("kernel", name + " ids", "tokens with the same top-k set and order", double(std::min(same_set, same_order)),
              double(T), false);
        if (same_set == T) R.add("kernel", name + " weights", "max scaled err", scaled_err(dwt.download(), wts), 1e-5);
    });
}

void test_gemv(runner &R, weight_format f, int64_t M, int64_t N, int64_t K, bool acc, int splits = 0,
               scale_layout L = scale_layout::channel) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string name =
        shape_name("gemv", {{"M", M}, {"N", N}, {"K", K}},
                   std::string(fp8 ? "fp8" : "bf16") + (L == scale_layout::block128 ? " 128x128 blocks" : "") +
                       (acc ? " +acc" : "") + (splits > 1 ? " splitK=" + std::to_string(splits) : ""));
    R.run("kernel", name, [&] {
        auto x = rand_bf16(static_cast<size_t>(M * K));
        auto wb = rand_bf16(static_cast<size_t>(N * K), -0.05f, 0.05f);
        std::vector<fp8_t> wq(static_cast<size_t>(N * K));
        std::vector<float> sc(size_t(fp8_scale_count(N, K, L)));
        if (fp8) {
            fp8_quantize_params q{wb.data(), wq.data(), sc.data(), N, K, L};
            fp8_quantize_ref(q);
        }
        auto y0 = rand_f(static_cast<size_t>(M * N));
        dvec<bf16_t> dx(x), dwb(wb);
        dvec<fp8_t> dwq(wq);
        dvec<float> dsc(sc), dy(y0);
        gemv_params p;
        p.x = dx.get();
        p.ldx = K;
        p.w = fp8 ? static_cast<const void *>(dwq.get()) : dwb.get();
        p.wfmt = f;
        p.w_scale = fp8 ? dsc.get() : nullptr;
        p.w_layout = L;
        p.y = dy.get();
        p.ldy = N;
        p.n_tokens = M;
        p.n = N;
        p.k = K;
        p.accumulate = acc;
        p.y_ready = acc; // read before the (here absent) wait; ignored under split-K
        p.k_splits = splits;
        ck(launch_gemv(p, nullptr), "launch");
        sync(name);
        std::vector<float> y = y0;
        p.x = x.data();
        p.w = fp8 ? static_cast<const void *>(wq.data()) : wb.data();
        p.w_scale = fp8 ? sc.data() : nullptr;
        p.y = y.data();
        gemv_ref(p);
        const auto gy = dy.download();
        R.add("kernel", name, "max scaled err", scaled_err(gy, y), k_f32_limit);
        if (fp8 && !acc) {
            std::vector<float> yb(static_cast<size_t>(M * N));
            gemv_params pb = p;
            pb.w = wb.data();
            pb.wfmt = weight_format::bf16;
            pb.w_scale = nullptr;
            pb.y = yb.data();
            gemv_ref(pb);
            R.add("kernel", name + " vs bf16 weights", "NMSE (FP8 quantization)", nmse(gy, yb), 5e-3);
            R.add("kernel", name + " vs bf16 weights", "cosine", cosine_similarity(gy, yb), 0.997, false);
        }
    });
}

// gemv's greedy pick (gemv.cuh: gemv_pick) in the head's rows kernel: y against the twin, and the
// pick exactly what topk_logits_ref writes at n_top = 1 over the y the GPU wrote (the twin's y
// may round differently at a near-tie), over three launches (the warps' keys are rewritten each
// time); then the launch timed with and without the pick (info rows). case_: "random" (two equal top rows: the
// lower id wins), "nan-top" (the largest row NaN, BF16 weights: the next one wins), "zero" (x = 0:
// every value ±0, id 0), "nan" (x NaN: no value, id −1, value and max −inf).
void test_gemv_pick(runner &R, weight_format f, int64_t N, int64_t K, const std::string &case_,
                    scale_layout L = scale_layout::channel) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string name =
        shape_name("gemv pick", {{"N", N}, {"K", K}},
                   std::string(fp8 ? "fp8" : "bf16") + (L == scale_layout::block128 ? " 128x128 blocks " : " ") +
                       case_);
    R.run("kernel", name, [&] {
        auto x = rand_bf16(static_cast<size_t>(K));
        auto wb = rand_bf16(static_cast<size_t>(N * K), -0.05f, 0.05f);
        // Two equal rows far apart, larger than the rest: a tie at the top.
        const int64_t a = 5000 % N, b = 90000 % N;
        for (int64_t k = 0; k < K; ++k) {
            const float v = bf16_bits_to_float(x[size_t(k)]) >= 0 ? 0.2f : -0.2f;
            wb[size_t(a * K + k)] = wb[size_t(b * K + k)] = float_to_bf16_bits(v);
        }
        if (case_ == "nan-top") wb[size_t(a * K + 7)] = float_to_bf16_bits(NAN);
        if (case_ == "zero") std::fill(x.begin(), x.end(), bf16_t(0));
        if (case_ == "nan") x[3] = float_to_bf16_bits(NAN);
        std::vector<fp8_t> wq(static_cast<size_t>(N * K));
        std::vector<float> sc(size_t(fp8_scale_count(N, K, L)));
        if (fp8) {
            fp8_quantize_params q{wb.data(), wq.data(), sc.data(), N, K, L};
            fp8_quantize_ref(q);
        }
        dvec<bf16_t> dx(x), dwb(wb);
        dvec<fp8_t> dwq(wq);
        dvec<float> dsc(sc), dy(static_cast<size_t>(N)), dval(1), dmax(1);
        dvec<int32_t> did(1);
        dvec<double> dsum(std::vector<double>{-1.0});
        gemv_params p;
        p.x = dx.get();
        p.ldx = K;
        p.w = fp8 ? static_cast<const void *>(dwq.get()) : dwb.get();
        p.wfmt = f;
        p.w_scale = fp8 ? dsc.get() : nullptr;
        p.w_layout = L;
        p.y = dy.get();
        p.ldy = N;
        p.n_tokens = 1;
        p.n = N;
        p.k = K;
        int n_sm = 0;
        ck(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
        const unsigned cap = 64u * unsigned(std::max(n_sm, 1)); // warps: as the backend sizes them
        dvec<unsigned long long> dkeys(cap);
        p.pick = {did.get(), dval.get(), dmax.get(), dsum.get(), dkeys.get(), cap};
        if (!gemv_pick_ok(p)) throw std::runtime_error("gemv_pick_ok refused the case");
        // The GEMV, then the pick's finish (as the backend launches them).
        auto launch_pick = [&](const gemv_params &q) {
            ck(launch_gemv(q, nullptr), "launch");
            if (q.pick.on()) ck(launch_gemv_pick_finish(q, nullptr), "launch (pick finish)");
        };
        int64_t differing = 0;
        std::vector<float> gy;
        for (int launch = 0; launch < 3; ++launch) {
            launch_pick(p);
            sync(name);
            gy = dy.download();
            int32_t id = 0;
            float val = 0.0f, mx = 0.0f;
            double sum = 0.0;
            topk_logits_params t;
            t.logits = gy.data();
            t.ids = &id;
            t.values = &val;
            t.row_max = &mx;
            t.row_sum = &sum;
            t.n_rows = 1;
            t.n_vocab = N;
            t.n_top = 1;
            topk_logits_ref(t);
            const float gv = dval.download()[0], gm = dmax.download()[0];
            differing += did.download()[0] != id || std::memcmp(&gv, &val, 4) != 0 ||
                         std::memcmp(&gm, &mx, 4) != 0 || dsum.download()[0] != sum;
        }
        R.add("kernel", name, "pick differing from topk_logits_ref(n_top 1) on its y (3 launches)", double(differing),
              0.0);
        std::vector<float> y(static_cast<size_t>(N));
        int32_t id = 0;
        float val = 0.0f, mx = 0.0f;
        double sum = 0.0;
        gemv_params h = p;
        h.x = x.data();
        h.w = fp8 ? static_cast<const void *>(wq.data()) : wb.data();
        h.w_scale = fp8 ? sc.data() : nullptr;
        h.y = y.data();
        h.pick = {&id, &val, &mx, &sum, nullptr, 0};
        gemv_ref(h);
        if (case_ == "random" || case_ == "zero") {
            R.add("kernel", name, "max scaled err", scaled_err(gy, y), k_f32_limit);
            R.add("kernel", name + " twin", "pick id differing (the twin's own y)", double(did.download()[0] != id),
                  0.0);
        } else {
            int64_t nan_differ = 0;
            for (int64_t i = 0; i < N; ++i) nan_differ += std::isnan(gy[size_t(i)]) != std::isnan(y[size_t(i)]);
            R.add("kernel", name, "NaN outputs differing from the twin", double(nan_differ), 0.0);
            R.add("kernel", name + " twin", "pick id differing (the twin's own y)", double(did.download()[0] != id),
                  0.0);
        }
        auto time_us = [&](const gemv_params &q) {
            cudaEvent_t e0 = nullptr, e1 = nullptr;
            ck(cudaEventCreate(&e0), "cudaEventCreate");
            ck(cudaEventCreate(&e1), "cudaEventCreate");
            ck(cudaEventRecord(e0), "cudaEventRecord");
            for (int i = 0; i < 50; ++i) launch_pick(q);
            ck(cudaEventRecord(e1), "cudaEventRecord");
            sync(name);
            float ms = 0.0f;
            ck(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
            return 1000.0 * ms / 50.0;
        };
        gemv_params plain = p;
        plain.pick = {};
        R.info("kernel", name, "µs per launch with the pick (the GEMV and the finish; 50 back to back)", time_us(p));
        R.info("kernel", name, "µs per launch without it", time_us(plain));
    });
}

// gemv's fusions (gemv.cuh): the input normalized in the kernel (norm_in) and/or the q|k|v
// projection's RoPE + KV-write epilogue, against the twin (rms_norm_ref, gemv_ref, rope_kv_ref).
// embd: the embedding folded in too (one token): the input row a table row, widened into the
// residual stream, which is checked exactly.
// normed: rope without the norm, x BF16 rows normalized already (decode's MoE layers, after a
// moe_combine with norm_out).
void test_gemv_fused(runner &R, weight_format f, int64_t T, int64_t H, int64_t n_head, int64_t n_head_kv,
                     int64_t hd, bool rope, scale_layout L = scale_layout::channel,
                     kv_format kv = kv_format::bf16, bool embd = false, bool normed = false) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string name =
        shape_name("gemv fused", {{"T", T}, {"H", H}, {"heads", n_head}, {"kv", n_head_kv}, {"hd", hd}},
                   std::string(fp8 ? "fp8" : "bf16") +
                       (L == scale_layout::block128 ? " 128x128 blocks" : "") + (embd ? " embedding+" : " ") +
                       (normed ? "rope_kv (normalized input)"
                        : rope ? "norm+rope_kv"
                               : "norm")) +
        kv_label(kv);
    R.run("kernel", name, [&] {
        const int64_t qd = n_head * hd, kvd = n_head_kv * hd, N = qd + 2 * kvd, bs = 16;
        std::vector<int32_t> pos(static_cast<size_t>(T)), seq(static_cast<size_t>(T));
        const int32_t starts[] = {0, 1, 17, 4000, 130999, 63, 5, 300};
        for (int64_t t = 0; t < T; ++t) {
            pos[t] = starts[t % 8];
            seq[t] = int32_t(t);
        }
        int64_t stride = 0;
        for (int32_t q : pos) stride = std::max<int64_t>(stride, q / bs + 1);
        std::vector<int32_t> bt(static_cast<size_t>(T * stride), 0);
        for (int64_t t = 0; t < T; ++t) bt[t * stride + pos[t] / bs] = int32_t(t + 1); // distinct blocks
        const int64_t n_blocks = T + 1;
        std::vector<float> inv(static_cast<size_t>(hd / 2));
        for (int64_t i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(500000.0f, float(2 * i) / float(hd));
        auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
        const std::vector<bf16_t> xb =
            normed ? rand_bf16(static_cast<size_t>(T * H), -2, 2) : std::vector<bf16_t>();
        dvec<bf16_t> dxb(xb);
        const int64_t V = embd ? 1000 : 0;
        const std::vector<bf16_t> table =
            embd ? rand_bf16(static_cast<size_t>(V * H), -3.0f, 3.0f) : std::vector<bf16_t>();
        const std::vector<int32_t> tok(static_cast<size_t>(T),
                                       int32_t(V > 0 ? V - 1 : 0)); // the table's last row
        dvec<bf16_t> dtab(table);
        dvec<int32_t> dtok(tok);
        auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
        auto wb = rand_bf16(static_cast<size_t>(N * H), -0.05f, 0.05f);
        std::vector<fp8_t> wq(static_cast<size_t>(N * H));
        std::vector<float> sc(size_t(fp8_scale_count(N, H, L)));
        if (fp8) {
            fp8_quantize_params q{wb.data(), wq.data(), sc.data(), N, H, L};
            fp8_quantize_ref(q);
        }
        dvec<float> dx(x), dinv(inv), dsc(sc), dy(static_cast<size_t>(T * N));
        const size_t pool = static_cast<size_t>(n_blocks * bs * kvd) * kv_format_bytes(kv);
        dvec<bf16_t> dnw(nw), dwb(wb), dq(static_cast<size_t>(T * qd)), dxn(static_cast<size_t>(T * H));
        dvec<uint8_t> dk(pool), dv(pool);
        dvec<fp8_t> dwq(wq);
        dvec<int32_t> dpos(pos), dseq(seq), dbt(bt);
        gemv_params p;
        p.w = fp8 ? static_cast<const void *>(dwq.get()) : dwb.get();
        p.wfmt = f;
        p.w_scale = fp8 ? dsc.get() : nullptr;
        p.w_layout = L;
        p.y = dy.get();
        p.ldy = N;
        p.n_tokens = T;
        p.n = N;
        p.k = H;
        if (normed) {
            p.x = dxb.get();
            p.ldx = H;
        } else {
            p.norm = {dx.get(), dnw.get(), 1e-5f, dxn.get()};
        }
        if (embd) {
            p.embd_tokens = dtok.get();
            p.embd_table = dtab.get();
            p.embd_out = dx.get();
        }
        p.rope_on = rope;
        p.rope.pos = dpos.get();
        p.rope.seq = dseq.get();
        p.rope.block_tables = dbt.get();
        p.rope.bt_stride = stride;
        p.rope.inv_freq = dinv.get();
        p.rope.q_out = dq.get();
        p.rope.k_cache = dk.get();
        p.rope.v_cache = dv.get();
        p.rope.n_head = n_head;
        p.rope.n_head_kv = n_head_kv;
        p.rope.head_dim = hd;
        p.rope.block_size = bs;
        p.rope.kv = kv;
        p.rope.k_scale = k_test_k_scale;
        p.rope.v_scale = k_test_v_scale;
        if (!gemv_fusion_ok(p)) throw std::runtime_error("gemv_fusion_ok refused the case");
        ck(launch_gemv(p, nullptr), "launch");
        sync(name);
        std::vector<float> y(static_cast<size_t>(T * N), 0.0f);
        std::vector<bf16_t> q(static_cast<size_t>(T * qd)), xn(static_cast<size_t>(T * H));
        std::vector<uint8_t> k(pool, 0), v(pool, 0);
        p.w = fp8 ? static_cast<const void *>(wq.data()) : wb.data();
        p.w_scale = fp8 ? sc.data() : nullptr;
        p.y = y.data();
        if (normed)
            p.x = xb.data();
        else
            p.norm = {x.data(), nw.data(), 1e-5f, xn.data()};
        if (embd) {
            p.embd_tokens = tok.data();
            p.embd_table = table.data();
            p.embd_out = x.data();
        }
        p.rope.pos = pos.data();
        p.rope.seq = seq.data();
        p.rope.block_tables = bt.data();
        p.rope.inv_freq = inv.data();
        p.rope.q_out = q.data();
        p.rope.k_cache = k.data();
        p.rope.v_cache = v.data();
        gemv_ref(p);
        if (embd)
            R.add("kernel", name + " residual rows", "max abs err (exact)", scaled_err(dx.download(), x),
                  0.0);
        if (!normed)
            R.add("kernel", name + " normalized rows", "max scaled err (bf16)",
                  scaled_err(widen(dxn.download()), widen(xn)), k_bf16_limit);
        if (!rope) {
            // The product against the twin fed the kernel's own normalized rows (a row's sum of
            // squares in another order can round an element to the neighbouring BF16, checked above).
            gemv_params g = p;
            const std::vector<bf16_t> gxn = dxn.download();
            g.norm = {};
            g.embd_tokens = nullptr;
            g.embd_table = nullptr;
            g.embd_out = nullptr;
            g.x = gxn.data();
            g.ldx = H;
            gemv_ref(g);
            R.add("kernel", name, "max scaled err", scaled_err(dy.download(), y), k_f32_limit);
            return;
        }
        R.add("kernel", name + " q", "max scaled err (bf16)", scaled_err(widen(dq.download()), widen(q)), k_bf16_limit);
        add_kv_rows(R, name + " k cache", kv, dk.download(), k, false);
        add_kv_rows(R, name + " v cache", kv, dv.download(), v, false); // v: the GEMV's sums in another order
    });
}

void test_fp8_quantize(runner &R, int64_t N, int64_t K, scale_layout L = scale_layout::channel) {
    const bool blk = L == scale_layout::block128;
    const std::string name = shape_name("fp8_quantize", {{"N", N}, {"K", K}}, blk ? "128x128 blocks, edge rows" : "edge rows");
    R.run("kernel", name, [&] {
        auto w = rand_bf16(static_cast<size_t>(N * K), -0.3f, 0.3f);
        // Edge rows: all zero; one huge value (the rest round to subnormals/zero); tiny values.
        for (int64_t i = 0; i < K; ++i) w[0 * K + i] = 0;
        for (int64_t i = 0; i < K; ++i) w[1 * K + i] = float_to_bf16_bits(i == 3 ? -30000.0f : 0.01f * float(i % 7));
        for (int64_t i = 0; i < K; ++i) w[2 * K + i] = float_to_bf16_bits(1e-30f * float(i % 5 - 2));
        dvec<bf16_t> dw(w);
        dvec<fp8_t> dq(static_cast<size_t>(N * K));
        const size_t ns = size_t(fp8_scale_count(N, K, L));
        dvec<float> ds(ns);
        fp8_quantize_params p{dw.get(), dq.get(), ds.get(), N, K, L};
        ck(launch_fp8_quantize(p, nullptr), "launch");
        sync(name);
        std::vector<fp8_t> q(static_cast<size_t>(N * K));
        std::vector<float> s(ns);
        p = fp8_quantize_params{w.data(), q.data(), s.data(), N, K, L};
        fp8_quantize_ref(p);
        const auto gq = dq.download();
        const auto gs = ds.download();
        int64_t diff = 0;
        for (size_t i = 0; i < q.size(); ++i) diff += gq[i] != q[i];
        R.add("kernel", name, "codes differing from the twin", double(diff), 0.0);
        R.add("kernel", name + " scales", "max scaled err", scaled_err(gs, s), 0.0);
        // Quantization error itself (rows 3.. are ordinary random rows).
        std::vector<float> deq, orig;
        for (int64_t r = 3; r < N; ++r)
            for (int64_t i = 0; i < K; ++i) {
                deq.push_back(fp8_e4m3_to_float(gq[r * K + i]) * gs[fp8_scale_index(r, i, K, L)]);
                orig.push_back(bf16_bits_to_float(w[r * K + i]));
            }
        R.add("kernel", name + " dequantized", "NMSE vs bf16", nmse(deq, orig), 5e-3);
        // The row's largest magnitude maps to ±448 and back to itself (up to the scale's rounding).
        const double big = std::fabs(double(bf16_bits_to_float(w[1 * K + 3])));
        R.add("kernel", name + " saturation", "|dequantized max| / |max|",
              double(std::fabs(fp8_e4m3_to_float(gq[1 * K + 3]) * gs[fp8_scale_index(1, 3, K, L)])) / big, 0.99999,
              false);
    });
}

// Ties of round-to-nearest-even: the midpoint between two neighbouring codes (normal or
// subnormal), exact in BF16; j picks which.
float fp8_midpoint(fp8_format f, int64_t j) {
    const bool e4 = f == fp8_format::e4m3;
    const int man_bits = e4 ? 3 : 2, min_exp = e4 ? -6 : -14, max_exp = e4 ? 7 : 14;
    const int64_t per_exp = int64_t(1) << man_bits, span = (max_exp - min_exp + 1) * per_exp;
    const int64_t i = j % (span + per_exp);
    if (i >= span)
        return std::ldexp(float(2 * (i - span) + 1), min_exp - man_bits - 1); // subnormal midpoints
    const int e = min_exp + int(i / per_exp);
    return std::ldexp(1.0f + float(2 * (i % per_exp) + 1) / float(2 * per_exp), e);
}

void test_act_quantize(runner &R, int64_t M, int64_t K, int64_t ldx, fp8_format f) {
    const std::string name = shape_name("act_quantize", {{"M", M}, {"K", K}, {"ldx", ldx}},
                                        std::string(f == fp8_format::e4m3 ? "e4m3" : "e5m2") + " edge rows");
    R.run("kernel", name, [&] {
        if (M < 6) throw test_failure("needs at least 6 rows for its edge rows");
        auto x = rand_bf16(static_cast<size_t>(M * ldx), -2.0f, 2.0f);
        auto at = [&](int64_t r, int64_t i) -> bf16_t & { return x[size_t(r * ldx + i)]; };
        const float fmax = fp8_format_max(f);
        for (int64_t i = 0; i < K; ++i) {
            at(0, i) = float_to_bf16_bits(i % 3 == 1 ? -0.0f : 0.0f); // all zero (signed zeros)
            at(1, i) = float_to_bf16_bits(i == K / 2 ? -3e38f : 0.01f * float(i % 7)); // one huge outlier
            at(2, i) = float_to_bf16_bits(1e-39f * float(i % 5 - 2));                  // BF16 subnormals
            at(3, i) = float_to_bf16_bits(
                i == 0 ? fmax : (i % 2 ? -1.0f : 1.0f) * fp8_midpoint(f, i)); // scale 1, ties
            at(4, i) = float_to_bf16_bits(1e-30f * float(i % 9 - 4));         // tiny normals
            at(5, i) =
                float_to_bf16_bits(i % 11 == 0 ? 5000.0f : 0.001f * float(i % 13 - 6)); // FP8 subnormal range
        }
        dvec<bf16_t> dx(x);
        dvec<fp8_t> dq(static_cast<size_t>(M * K));
        dvec<float> ds(static_cast<size_t>(M));
        act_quantize_params p;
        p.x = dx.get();
        p.ldx = ldx;
        p.q = dq.get();
        p.scale = ds.get();
        p.m = M;
        p.k = K;
        p.fmt = f;
        ck(launch_act_quantize(p, nullptr), "launch");
        sync(name);
        std::vector<fp8_t> q(static_cast<size_t>(M * K));
        std::vector<float> sc(static_cast<size_t>(M));
        p.x = x.data();
        p.q = q.data();
        p.scale = sc.data();
        act_quantize_ref(p);
        const auto gq = dq.download();
        const auto gs = ds.download();
        int64_t diff = 0, sdiff = 0;
        for (size_t i = 0; i < q.size(); ++i) diff += gq[i] != q[i];
        for (size_t i = 0; i < sc.size(); ++i) sdiff += std::memcmp(&gs[i], &sc[i], 4) != 0;
        R.add("kernel", name, "codes differing from the twin", double(diff), 0.0);
        R.add("kernel", name + " scales", "scales differing from the twin (bits)", double(sdiff), 0.0);
        if (gs[0] != 1.0f || gs[3] != 1.0f)
            throw test_failure("the zero row and the ties row must have scale 1");
    });
}

void test_fp8_dequantize(runner &R, int64_t N, int64_t K, scale_layout L = scale_layout::channel) {
    const std::string name =
        shape_name("fp8_dequantize", {{"N", N}, {"K", K}}, L == scale_layout::block128 ? "128x128 blocks" : "");
    R.run("kernel", name, [&] {
        auto w = rand_bf16(static_cast<size_t>(N * K));
        std::vector<fp8_t> q(static_cast<size_t>(N * K));
        std::vector<float> s(size_t(fp8_scale_count(N, K, L)));
        fp8_quantize_params qp{w.data(), q.data(), s.data(), N, K, L};
        fp8_quantize_ref(qp);
        dvec<fp8_t> dq(q);
        dvec<float> ds(s);
        dvec<bf16_t> dout(static_cast<size_t>(N * K));
        fp8_dequantize_params p{dq.get(), ds.get(), dout.get(), N, K, L};
        ck(launch_fp8_dequantize(p, nullptr), "launch");
        sync(name);
        std::vector<bf16_t> out(static_cast<size_t>(N * K));
        p = fp8_dequantize_params{q.data(), s.data(), out.data(), N, K, L};
        fp8_dequantize_ref(p);
        R.add("kernel", name, "max abs err (exact)", scaled_err(widen(dout.download()), widen(out)), 0.0);
    });
}

struct expert_weights {
    std::vector<bf16_t> b;
    std::vector<fp8_t> q;
    std::vector<float> s;
};
// FP8: `stack` matrices of rows / stack rows, each quantized with its own scale grid in layout L
// (kernel_common.h: fp8_stack_scale_index), as the backend stores the routed experts.
// used (the routed cases' ids): only the experts named get random weights, the others stay zero
// — a kernel that reads a wrong expert still shows, and a 64-expert stack no longer costs tens of
// seconds of random numbers and quantization on the CPU per case. Empty: every expert.
// The experts are filled and quantized on threads of their own, each with a generator seeded from
// rng() in expert order (the values do not depend on the thread count): the 21B-A3B's T = 8 cases
// would spend ~20 s of a self-test here on one core.
expert_weights make_expert_weights(weight_format f, int64_t rows, int64_t k,
                                   scale_layout L = scale_layout::channel, int64_t stack = 1,
                                   const std::vector<int32_t> &used = {}) {
    const int64_t mr = rows / stack;
    std::vector<char> on(static_cast<size_t>(stack), used.empty() ? 1 : 0);
    for (const int32_t e : used)
        if (e >= 0 && e < stack) on[static_cast<size_t>(e)] = 1;
    std::vector<int64_t> todo;
    std::vector<uint32_t> seeds;
    for (int64_t e = 0; e < stack; ++e)
        if (on[static_cast<size_t>(e)]) {
            todo.push_back(e);
            seeds.push_back(static_cast<uint32_t>(rng()()));
        }
    const bool fp8 = f == weight_format::fp8_e4m3;
    const int64_t cnt = fp8 ? fp8_scale_count(mr, k, L) : 0;
    expert_weights w;
    w.b.assign(static_cast<size_t>(rows * k), bf16_t(0));
    if (fp8) {
        w.q.assign(w.b.size(), fp8_t(0));
        w.s.assign(static_cast<size_t>(stack * cnt), 0.0f);
    }
    auto fill = [&](size_t j) {
        const int64_t e = todo[j];
        std::mt19937 g(seeds[j]);
        std::uniform_real_distribution<float> d(-0.08f, 0.08f);
        for (int64_t i = e * mr * k; i < (e + 1) * mr * k; ++i)
            w.b[static_cast<size_t>(i)] = float_to_bf16_bits(d(g));
        if (fp8) {
            fp8_quantize_params p{
                w.b.data() + e * mr * k, w.q.data() + e * mr * k, w.s.data() + e * cnt, mr, k, L};
            fp8_quantize_ref(p);
        }
    };
    const size_t n_threads = std::min<size_t>(todo.size(), std::max(1u, std::thread::hardware_concurrency()));
    if (n_threads <= 1 || mr * k < (int64_t(1) << 20)) {
        for (size_t j = 0; j < todo.size(); ++j) fill(j);
        return w;
    }
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (size_t t = 0; t < n_threads; ++t)
        pool.emplace_back([&] {
            for (size_t j; (j = next.fetch_add(1)) < todo.size();) fill(j);
        });
    for (auto &th : pool) th.join();
    return w;
}

std::string blk_suffix(scale_layout L) { return L == scale_layout::block128 ? " 128x128 blocks" : ""; }

// An FP8 gate/up stack of E experts [2·F, H] each, tile-major (fp8_tile_major's twin).
std::vector<fp8_t> tile_major(const std::vector<fp8_t> &q, int64_t E, int64_t F, int64_t H) {
    std::vector<fp8_t> t(q.size());
    fp8_tile_major_ref({q.data(), t.data(), E, F, H});
    return t;
}

std::vector<int32_t> random_topk_ids(int64_t T, int64_t E, int64_t K) {
    std::vector<int32_t> ids;
    std::vector<int32_t> all(static_cast<size_t>(E));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t t = 0; t < T; ++t) {
        std::shuffle(all.begin(), all.end(), rng());
        ids.insert(ids.end(), all.begin(), all.begin() + K);
    }
    return ids;
}

using mma_shape = moe_gate_up_gemv_params::mma_shape_t;

// " mma rounds r" and, for another shape than the default, " shape W/RT/D[ wave]".
std::string mma_suffix(int mma, const mma_shape &m) {
    if (!mma) return "";
    std::string s = " mma rounds " + std::to_string(mma);
    const mma_shape d;
    if (m.warps != d.warps || m.tiles != d.tiles || m.depth != d.depth || m.wave != d.wave)
        s += " shape " + std::to_string(m.warps) + "/" + std::to_string(m.tiles) + "/" +
             std::to_string(m.depth) + (m.wave ? " wave" : "");
    return s;
}

// fp8_tile_major against its twin (bytes), and the twin's inverse restoring the row-major stack.
void test_fp8_tile_major(runner &R, int64_t E, int64_t F, int64_t H) {
    const std::string name = shape_name("fp8_tile_major", {{"E", E}, {"F", F}, {"H", H}}, "");
    R.run("kernel", name, [&] {
        std::vector<fp8_t> q(static_cast<size_t>(E * 2 * F * H));
        std::uniform_int_distribution<int> byte(0, 255);
        for (auto &v : q) v = fp8_t(byte(rng()));
        dvec<fp8_t> dsrc(q), ddst(q.size());
        fp8_tile_major_params p{dsrc.get(), ddst.get(), E, F, H};
        ck(launch_fp8_tile_major(p, nullptr), "launch");
        sync(name);
        const std::vector<fp8_t> want = tile_major(q, E, F, H);
        R.add("kernel", name, "bytes differing from the twin's", bit_diffs(ddst.download(), want), 0.0);
        std::vector<fp8_t> back(q.size());
        p.src = want.data();
        p.dst = back.data();
        fp8_tile_major_inverse_ref(p);
        R.add("kernel", name + " inverse", "bytes the twin's inverse does not restore", bit_diffs(back, q),
              0.0);
    });
}

// tm: the gate/up stack tile-major on the GPU (fp8_tile_major.cuh), the twin on the row-major
// one; the kernel's output is also compared bit for bit with its own on the row-major stack.
void test_moe_gemv(runner &R, weight_format f, int64_t T, int64_t H, int64_t E, int64_t K, int64_t Fe,
                   scale_layout L = scale_layout::channel, int mma = 0, const mma_shape &ms = {},
                   bool tm = false) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string fmt =
        (fp8 ? "fp8" : "bf16") + blk_suffix(L) + mma_suffix(mma, ms) + (tm ? " tile-major" : "");
    const std::string n1 = shape_name("moe_gate_up_gemv", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}}, fmt);
    const std::string n2 = shape_name("moe_down_gemv", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}}, fmt);
    R.run("kernel", n1, [&] {
        auto x = rand_bf16(static_cast<size_t>(T * H));
        auto ids = random_topk_ids(T, E, K);
        auto wts = rand_f(static_cast<size_t>(T * K), 0.0f, 0.5f);
        auto gu = make_expert_weights(f, E * 2 * Fe, H, L, E, ids);
        auto dn = make_expert_weights(f, E * H, Fe, L, E, ids);
        dvec<bf16_t> dx(x), dgub(gu.b), ddnb(dn.b), dact(static_cast<size_t>(T * K * Fe));
        dvec<fp8_t> dguq(tm ? tile_major(gu.q, E, Fe, H) : gu.q), ddnq(dn.q);
        dvec<float> dgus(gu.s), ddns(dn.s), dwts(wts);
        dvec<int32_t> dids(ids);
        moe_gate_up_gemv_params g;
        g.x = dx.get();
        g.ids = dids.get();
        g.w = fp8 ? static_cast<const void *>(dguq.get()) : dgub.get();
        g.wfmt = f;
        g.w_scale = fp8 ? dgus.get() : nullptr;
        g.w_layout = L;
        g.act = dact.get();
        g.n_tokens = T;
        g.n_embd = H;
        g.n_expert_used = K;
        g.n_ff_exp = Fe;
        g.mma = mma;
        g.mma_shape = ms;
        g.w_tile_major = tm;
        ck(launch_moe_gate_up_gemv(g, nullptr), "launch");
        sync(n1);
        const std::vector<bf16_t> gpu_act = dact.download();
        if (tm) { // the same kernel on the row-major stack: the same sums in the same order
            dvec<fp8_t> drm(gu.q);
            dvec<bf16_t> dact_rm(static_cast<size_t>(T * K * Fe));
            moe_gate_up_gemv_params r = g;
            r.w = drm.get();
            r.act = dact_rm.get();
            r.w_tile_major = false;
            ck(launch_moe_gate_up_gemv(r, nullptr), "launch");
            sync(n1);
            R.add("kernel", n1, "outputs differing from the row-major stack's",
                  bit_diffs(gpu_act, dact_rm.download()), 0.0);
        }
        std::vector<bf16_t> act(static_cast<size_t>(T * K * Fe));
        g.x = x.data();
        g.ids = ids.data();
        g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
        g.w_scale = fp8 ? gu.s.data() : nullptr;
        g.act = act.data();
        g.w_tile_major = false;
        moe_gate_up_gemv_ref(g);
        R.add("kernel", n1, "max scaled err (bf16)", scaled_err(widen(gpu_act), widen(act)), k_bf16_limit);

        // Down: both sides start from the twin's activations so only this kernel is measured.
        dvec<bf16_t> dact2(act);
        auto y0 = rand_f(static_cast<size_t>(T * H));
        dvec<float> dy(y0);
        moe_down_gemv_params d;
        d.act = dact2.get();
        d.ids = dids.get();
        d.weights = dwts.get();
        d.w = fp8 ? static_cast<const void *>(ddnq.get()) : ddnb.get();
        d.wfmt = f;
        d.w_scale = fp8 ? ddns.get() : nullptr;
        d.w_layout = L;
        d.y = dy.get();
        d.n_tokens = T;
        d.n_embd = H;
        d.n_expert_used = K;
        d.n_ff_exp = Fe;
        ck(launch_moe_down_gemv(d, nullptr), "launch");
        sync(n2);
        std::vector<float> y = y0;
        d.act = act.data();
        d.ids = ids.data();
        d.weights = wts.data();
        d.w = fp8 ? static_cast<const void *>(dn.q.data()) : dn.b.data();
        d.w_scale = fp8 ? dn.s.data() : nullptr;
        d.y = y.data();
        moe_down_gemv_ref(d);
        R.add("kernel", n2, "max scaled err", scaled_err(dy.download(), y), k_f32_limit);
    });
}

// ---- the fused decode kernels (norm_in, moe_front, the shared-expert slot) ---------------------
// Each compares the normalized rows the GPU stores (norm.out) with rms_norm's twin, then the rest
// with the twins run on the GPU's own normalized rows, so a BF16 rounding of the fused norm (its
// sum of squares is in another order) cannot flip a router choice and only the kernel is measured.

// Same top-k set and order for every token (the router rows' rule); the count of such tokens.
int64_t same_choices(const std::vector<int32_t> &a, const std::vector<int32_t> &b, int64_t T, int64_t K) {
    int64_t same = 0;
    for (int64_t t = 0; t < T; ++t) same += std::equal(a.begin() + t * K, a.begin() + (t + 1) * K, b.begin() + t * K);
    return same;
}

// The ids, weights and (all tied) exact tie-break rows of a router result against its twin.
void router_rows(runner &R, const std::string &name, const std::vector<int32_t> &gids, const std::vector<float> &gwts,
                 const std::vector<int32_t> &ids, const std::vector<float> &wts, int64_t T, int64_t K, bool all_tied) {
    const int64_t same = same_choices(gids, ids, T, K);
    R.add("kernel", name + " ids", "tokens with the same top-k set and order", double(same), double(T), false);
    if (same == T) R.add("kernel", name + " weights", "max scaled err", scaled_err(gwts, wts), 1e-5);
    if (all_tied) {
        int64_t lowest = 0; // every choice is the lowest free id: 0, 1, …, k−1
        for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < K; ++j) lowest += gids[t * K + j] == int32_t(j);
        R.add("kernel", name + " ties", "choices that are the lowest id", double(lowest), double(T * K), false);
    }
}

// The rows a fused kernel normalized into norm.out (dxn) against rms_norm's twin; returns them, the
// input of every twin after the norm.
std::vector<bf16_t> normalized_rows(runner &R, const std::string &name, const std::vector<float> &x,
                                    const std::vector<bf16_t> &nw, dvec<bf16_t> &dxn, int64_t T, int64_t H) {
    norm_in ni;
    ni.x = x.data();
    ni.weight = nw.data();
    const auto xn_ref = norm_in_ref(ni, T, H), xn = dxn.download();
    R.add("kernel", name + " norm", "max scaled err (bf16)", scaled_err(widen(xn), widen(xn_ref)),
          k_bf16_limit);
    return xn;
}

// A fused router's choices (dids, dwt) against moe_router_ref run on the GPU's normalized rows xn.
void router_twin_rows(runner &R, const std::string &name, const std::vector<bf16_t> &xn,
                      const std::vector<float> &w, const std::vector<float> &bias, dvec<int32_t> &dids,
                      dvec<float> &dwt, int64_t T, int64_t H, int64_t E, int64_t K, bool all_tied) {
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> wts(static_cast<size_t>(T * K));
    moe_router_params r;
    r.x = xn.data();
    r.w = w.data();
    r.bias = bias.data();
    r.ids = ids.data();
    r.weights = wts.data();
    r.n_tokens = T;
    r.n_embd = H;
    r.n_expert = E;
    r.n_expert_used = K;
    moe_router_ref(r);
    router_rows(R, name, dids.download(), dwt.download(), ids, wts, T, K, all_tied);
}

void test_moe_router_norm(runner &R, int64_t T, int64_t H, int64_t E, int64_t K, bool all_tied) {
    const std::string name = shape_name("moe_router norm_in", {{"T", T}, {"H", H}, {"E", E}, {"k", K}}, all_tied ? "all tied" : "");
    R.run("kernel", name, [&] {
        auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
        auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
        auto w = all_tied ? std::vector<float>(static_cast<size_t>(E * H), 0.0f) : rand_f(static_cast<size_t>(E * H), -0.1f, 0.1f);
        auto bias = all_tied ? std::vector<float>(static_cast<size_t>(E), 0.25f) : rand_f(static_cast<size_t>(E), -0.02f, 0.02f);
        dvec<float> dx(x), dw(w), db(bias), dwt(static_cast<size_t>(T * K)), dlogits(static_cast<size_t>(T * E));
        dvec<bf16_t> dnw(nw), dxn(static_cast<size_t>(T * H));
        dvec<int32_t> dids(static_cast<size_t>(T * K));
        dvec<unsigned> dcount(static_cast<size_t>(T));
        moe_router_params p;
        p.norm.x = dx.get();
        p.norm.weight = dnw.get();
        p.norm.out = dxn.get();
        p.w = dw.get();
        p.bias = db.get();
        p.ids = dids.get();
        p.weights = dwt.get();
        p.n_tokens = T;
        p.n_embd = H;
        p.n_expert = E;
        p.n_expert_used = K;
        p.logits = dlogits.get();
        p.counters = dcount.get();
        if (!moe_router_norm_ok(p)) throw std::runtime_error("moe_router_norm_ok refuses the shape");
        ck(launch_moe_router(p, nullptr), "launch");
        sync(name);
        ck(launch_moe_router(p, nullptr), "second launch"); // the counters were left at zero
        sync(name);
        const auto xn = normalized_rows(R, name, x, nw, dxn, T, H);
        router_twin_rows(R, name, xn, w, bias, dids, dwt, T, H, E, K, all_tied);
    });
}

// moe_gate_up_gemv with the fused norm: a dense MLP (routed = false: ids null, one "expert") or
// routed experts.
void test_gate_up_norm(runner &R, weight_format f, int64_t T, int64_t H, int64_t F, bool routed,
                       scale_layout L = scale_layout::channel) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const int64_t E = routed ? 5 : 1, K = routed ? 3 : 1;
    const std::string name =
        shape_name("moe_gate_up_gemv norm_in", {{"T", T}, {"H", H}, {"F", F}, {"k", K}},
                   std::string(fp8 ? "fp8" : "bf16") + (routed ? " routed" : " dense") + blk_suffix(L));
    R.run("kernel", name, [&] {
        auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
        auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
        auto ids = random_topk_ids(T, E, K);
        auto gu = make_expert_weights(f, E * 2 * F, H, L, E);
        dvec<float> dx(x), dgus(gu.s);
        dvec<bf16_t> dnw(nw), dxn(static_cast<size_t>(T * H)), dgub(gu.b), dact(static_cast<size_t>(T * K * F));
        dvec<fp8_t> dguq(gu.q);
        dvec<int32_t> dids(ids);
        moe_gate_up_gemv_params g;
        g.ids = routed ? dids.get() : nullptr;
        g.w = fp8 ? static_cast<const void *>(dguq.get()) : dgub.get();
        g.wfmt = f;
        g.w_scale = fp8 ? dgus.get() : nullptr;
        g.w_layout = L;
        g.act = dact.get();
        g.n_tokens = T;
        g.n_embd = H;
        g.n_expert_used = K;
        g.n_ff_exp = F;
        g.norm.x = dx.get();
        g.norm.weight = dnw.get();
        g.norm.out = dxn.get();
        if (!moe_gate_up_gemv_norm_ok(g)) throw std::runtime_error("moe_gate_up_gemv_norm_ok refuses the shape");
        ck(launch_moe_gate_up_gemv(g, nullptr), "launch");
        sync(name);
        const auto xn = normalized_rows(R, name, x, nw, dxn, T, H);
        std::vector<bf16_t> act(static_cast<size_t>(T * K * F));
        g.x = xn.data();
        g.norm = norm_in{};
        g.ids = routed ? ids.data() : nullptr;
        g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
        g.w_scale = fp8 ? gu.s.data() : nullptr;
        g.act = act.data();
        moe_gate_up_gemv_ref(g);
        R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dact.download()), widen(act)), k_bf16_limit);
    });
}

void test_moe_front(runner &R, weight_format f, int64_t T, int64_t H, int64_t E, int64_t K, int64_t Fs,
                    bool all_tied, scale_layout L = scale_layout::channel) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string name =
        shape_name("moe_front", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"Fsh", Fs}},
                   std::string(fp8 ? "fp8" : "bf16") + (all_tied ? " all tied" : "") + blk_suffix(L));
    R.run("kernel", name, [&] {
        auto x = rand_f(static_cast<size_t>(T * H), -3, 3);
        auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
        auto w = all_tied ? std::vector<float>(static_cast<size_t>(E * H), 0.0f) : rand_f(static_cast<size_t>(E * H), -0.1f, 0.1f);
        auto bias = all_tied ? std::vector<float>(static_cast<size_t>(E), 0.25f) : rand_f(static_cast<size_t>(E), -0.02f, 0.02f);
        auto gu = make_expert_weights(f, 2 * Fs, H, L);
        dvec<float> dx(x), dw(w), db(bias), dwt(static_cast<size_t>(T * K)), dlogits(static_cast<size_t>(T * E)), dgus(gu.s);
        dvec<bf16_t> dnw(nw), dxn(static_cast<size_t>(T * H)), dgub(gu.b), dact(static_cast<size_t>(T * Fs));
        dvec<fp8_t> dguq(gu.q);
        dvec<int32_t> dids(static_cast<size_t>(T * K));
        dvec<unsigned> dcount(1);
        moe_front_params p;
        p.norm.x = dx.get();
        p.norm.weight = dnw.get();
        p.norm.out = dxn.get();
        p.router_w = dw.get();
        p.bias = db.get();
        p.ids = dids.get();
        p.weights = dwt.get();
        p.n_expert = E;
        p.n_expert_used = K;
        p.logits = dlogits.get();
        p.counter = dcount.get();
        p.sh_w = Fs ? (fp8 ? static_cast<const void *>(dguq.get()) : dgub.get()) : nullptr;
        p.sh_wfmt = f;
        p.sh_w_scale = fp8 && Fs ? dgus.get() : nullptr;
        p.sh_w_layout = L;
        p.sh_act = Fs ? dact.get() : nullptr;
        p.n_ff_sh = Fs;
        p.n_tokens = T;
        p.n_embd = H;
        if (!moe_front_supported(p)) throw std::runtime_error("moe_front_supported refuses the shape");
        ck(launch_moe_front(p, nullptr), "launch");
        sync(name);
        ck(launch_moe_front(p, nullptr), "second launch"); // the counter was left at zero
        sync(name);
        const auto xn = normalized_rows(R, name, x, nw, dxn, T, H);
        router_twin_rows(R, name, xn, w, bias, dids, dwt, T, H, E, K, all_tied);
        if (Fs > 0) {
            std::vector<bf16_t> act(static_cast<size_t>(T * Fs));
            moe_gate_up_gemv_params g;
            g.x = xn.data();
            g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
            g.wfmt = f;
            g.w_scale = fp8 ? gu.s.data() : nullptr;
            g.w_layout = L;
            g.act = act.data();
            g.n_tokens = T;
            g.n_embd = H;
            g.n_expert_used = 1;
            g.n_ff_exp = Fs;
            moe_gate_up_gemv_ref(g);
            R.add("kernel", name + " shared act", "max scaled err (bf16)", scaled_err(widen(dact.download()), widen(act)),
                  k_bf16_limit);
        }
    });
}

// moe_down_gemv's per-slot mode with the shared experts' slot, then moe_combine adding it first.
// ready: the shared slot before pdl_wait (sh_ready) and moe_combine's x_ready, as decode runs them
// (here the inputs were uploaded before the launch, which is what those flags promise).
// rpw: rows_per_warp, 0 = the kernel's default (2 for the 21B-A3B's FP8 widths and the small
// shapes, 1 for its BF16 ones); 1 = one row per warp; 2 or 4 also compare the slots with one row
// per warp's bit for bit.
void test_moe_down_shared(runner &R, weight_format f, int64_t T, int64_t H, int64_t E, int64_t K, int64_t Fe,
                          int64_t Fs, bool ready, scale_layout L = scale_layout::channel, int rpw = 0) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string name =
        shape_name("moe_down_gemv +shared", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}, {"Fsh", Fs}},
                   std::string(fp8 ? "fp8" : "bf16") + (ready ? " ready" : "") + blk_suffix(L) +
                       (rpw > 0 ? " rows/warp " + std::to_string(rpw) : ""));
    R.run("kernel", name, [&] {
        auto act = rand_bf16(static_cast<size_t>(T * K * Fe)), sh_act = rand_bf16(static_cast<size_t>(T * Fs));
        auto ids = random_topk_ids(T, E, K);
        auto wts = rand_f(static_cast<size_t>(T * K), 0.0f, 0.5f);
        auto dn = make_expert_weights(f, E * H, Fe, L, E, ids), sh = make_expert_weights(f, H, Fs, L);
        auto x0 = rand_f(static_cast<size_t>(T * H));
        dvec<bf16_t> dact(act), dsha(sh_act), ddnb(dn.b), dshb(sh.b);
        dvec<fp8_t> ddnq(dn.q), dshq(sh.q);
        dvec<float> ddns(dn.s), dshs(sh.s), dwts(wts), dys(static_cast<size_t>((T * K + T) * H)), dx(x0);
        dvec<int32_t> dids(ids);
        moe_down_gemv_params d;
        d.act = dact.get();
        d.ids = dids.get();
        d.weights = dwts.get();
        d.w = fp8 ? static_cast<const void *>(ddnq.get()) : ddnb.get();
        d.wfmt = f;
        d.w_scale = fp8 ? ddns.get() : nullptr;
        d.w_layout = L;
        d.y_slots = dys.get();
        d.n_tokens = T;
        d.n_embd = H;
        d.n_expert_used = K;
        d.n_ff_exp = Fe;
        d.sh_w = fp8 ? static_cast<const void *>(dshq.get()) : dshb.get();
        d.sh_w_scale = fp8 ? dshs.get() : nullptr;
        d.sh_act = dsha.get();
        d.y_shared = dys.get() + T * K * H;
        d.n_ff_sh = Fs;
        d.sh_ready = ready;
        if (rpw > 1) {
            // rows_per_warp 1 first, into a second buffer (this launch's inputs are ready as well).
            dvec<float> dys1(static_cast<size_t>((T * K + T) * H));
            moe_down_gemv_params d1 = d;
            d1.rows_per_warp = 1;
            d1.y_slots = dys1.get();
            d1.y_shared = dys1.get() + T * K * H;
            ck(launch_moe_down_gemv(d1, nullptr), "launch with rows_per_warp 1");
            d.rows_per_warp = rpw;
            ck(launch_moe_down_gemv(d, nullptr), "launch");
            sync(name);
            R.add("kernel", name + " vs rows/warp 1", "slot elements whose bits differ",
                  bit_diffs(dys.download(), dys1.download()), 0.0);
            moe_down_gemv_params d3 = d;
            d3.rows_per_warp = 3;
            R.add("kernel", name + " rows/warp 3", "refused (cudaErrorInvalidValue)",
                  launch_moe_down_gemv(d3, nullptr) == cudaErrorInvalidValue ? 1.0 : 0.0, 1.0, false);
        } else {
            d.rows_per_warp = rpw;
            ck(launch_moe_down_gemv(d, nullptr), "launch");
        }
        moe_combine_params cb{dys.get(), dwts.get(), dx.get(), T, H, K};
        cb.y_shared = d.y_shared;
        cb.x_ready = ready;
        ck(launch_moe_combine(cb, nullptr), "combine launch");
        sync(name);
        std::vector<float> ys(static_cast<size_t>((T * K + T) * H)), x = x0;
        d.act = act.data();
        d.ids = ids.data();
        d.weights = wts.data();
        d.w = fp8 ? static_cast<const void *>(dn.q.data()) : dn.b.data();
        d.w_scale = fp8 ? dn.s.data() : nullptr;
        d.y_slots = ys.data();
        d.sh_w = fp8 ? static_cast<const void *>(sh.q.data()) : sh.b.data();
        d.sh_w_scale = fp8 ? sh.s.data() : nullptr;
        d.sh_act = sh_act.data();
        d.y_shared = ys.data() + T * K * H;
        moe_down_gemv_ref(d);
        R.add("kernel", name + " slots", "max scaled err", scaled_err(dys.download(), ys), k_f32_limit);
        // The combine on the GPU's own slots (only the combine measured).
        const auto gys = dys.download();
        cb = moe_combine_params{gys.data(), wts.data(), x.data(), T, H, K};
        cb.y_shared = gys.data() + T * K * H;
        moe_combine_ref(cb);
        R.add("kernel", name + " combine", "max scaled err", scaled_err(dx.download(), x), 1e-6);
    });
}

// moe_combine with the next layer's norm (norm_out: one cluster a token), against the twin: the
// residual rows as the plain combine's (the same arithmetic), the normalized rows within BF16's
// rounding (the row's sum of squares in another order). Only where moe_combine_norm_ok holds.
void test_moe_combine_norm(runner &R, int64_t T, int64_t H, int64_t K, bool shared) {
    const std::string name =
        shape_name("moe_combine norm_out", {{"T", T}, {"H", H}, {"k", K}}, shared ? "shared" : "");
    R.run("kernel", name, [&] {
        const auto y = rand_f(static_cast<size_t>(T * K * H), -1, 1),
                   ysh = rand_f(static_cast<size_t>(T * H), -1, 1),
                   wts = rand_f(static_cast<size_t>(T * K), 0, 1),
                   x0 = rand_f(static_cast<size_t>(T * H), -3, 3);
        const auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
        dvec<float> dy(y), dysh(ysh), dwts(wts), dx(x0);
        dvec<bf16_t> dnw(nw), dout(static_cast<size_t>(T * H));
        moe_combine_params cb{dy.get(), dwts.get(), dx.get(), T, H, K};
        cb.y_shared = shared ? dysh.get() : nullptr;
        cb.norm_weight = dnw.get();
        cb.norm_eps = 1e-5f;
        cb.norm_out = dout.get();
        if (!moe_combine_norm_ok(cb)) {
            R.add("kernel", name, "skipped: no thread-block cluster holds a row here (moe_combine_norm_ok)",
                  0.0, 0.0);
            return;
        }
        ck(launch_moe_combine(cb, nullptr), "launch");
        ck(launch_moe_combine(cb, nullptr), "launch (again, on its own output)");
        sync(name);
        std::vector<float> x = x0;
        std::vector<bf16_t> out(static_cast<size_t>(T * H));
        cb = moe_combine_params{y.data(), wts.data(), x.data(), T, H, K};
        cb.y_shared = shared ? ysh.data() : nullptr;
        cb.norm_weight = nw.data();
        cb.norm_eps = 1e-5f;
        cb.norm_out = out.data();
        moe_combine_ref(cb);
        moe_combine_ref(cb);
        R.add("kernel", name + " residual", "max scaled err", scaled_err(dx.download(), x), 1e-6);
        R.add("kernel", name + " normalized rows", "max scaled err (bf16)",
              scaled_err(widen(dout.download()), widen(out)), k_bf16_limit);
    });
}

// Decode's routed experts as the backend chains them with slot counters: moe_gate_up_gemv
// reporting each slot's rows, moe_down_gemv (per-slot, the shared slot before the wait) starting
// on a slot once its rows are in, back to back under programmatic launch (pdl) so the two
// kernels overlap, then moe_combine resetting the counters; against the twins' chain.
void test_moe_slot_counters(runner &R, weight_format f, int64_t T, int64_t H, int64_t E, int64_t K,
                            int64_t Fe, int64_t Fs, int rpw, bool pdl, int mma = 0, const mma_shape &ms = {},
                            bool tm = false) {
    const bool fp8 = f == weight_format::fp8_e4m3;
    const std::string name = shape_name(
        "moe gate/up → down, slot counters", {{"T", T}, {"H", H}, {"E", E}, {"k", K}, {"F", Fe}, {"Fsh", Fs}},
        std::string(fp8 ? "fp8" : "bf16") + (rpw > 0 ? " rows/warp " + std::to_string(rpw) : "") +
            (pdl ? " programmatic launch" : "") + mma_suffix(mma, ms) + (tm ? " tile-major" : ""));
    R.run("kernel", name, [&] {
        const bool was = programmatic_launch();
        set_programmatic_launch(pdl);
        // A stream of its own, as the backend's (programmatic launch is a property of launches
        // into one stream; the legacy default stream is not where the backend runs them).
        cudaStream_t st = nullptr;
        ck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream");
        struct restore {
            bool on;
            cudaStream_t st;
            ~restore() {
                set_programmatic_launch(on);
                cudaStreamDestroy(st);
            }
        } keep{was, st};
        const int64_t S = T * K;
        auto x = rand_bf16(static_cast<size_t>(T * H)), sh_act = rand_bf16(static_cast<size_t>(T * Fs));
        auto ids = random_topk_ids(T, E, K);
        auto wts = rand_f(static_cast<size_t>(S), 0.0f, 0.5f);
        auto gu = make_expert_weights(f, E * 2 * Fe, H, scale_layout::channel, E, ids);
        auto dn = make_expert_weights(f, E * H, Fe, scale_layout::channel, E, ids);
        auto sh = make_expert_weights(f, H, Fs, scale_layout::channel);
        auto res0 = rand_f(static_cast<size_t>(T * H));
        dvec<bf16_t> dx(x), dsha(sh_act), dgub(gu.b), ddnb(dn.b), dshb(sh.b), dact(static_cast<size_t>(S * Fe));
        dvec<fp8_t> dguq(tm ? tile_major(gu.q, E, Fe, H) : gu.q), ddnq(dn.q), dshq(sh.q);
        dvec<float> dgus(gu.s), ddns(dn.s), dshs(sh.s), dwts(wts), dys(static_cast<size_t>((S + T) * H)), dres(res0);
        dvec<int32_t> dids(ids);
        dvec<unsigned> dctr(std::vector<unsigned>(static_cast<size_t>(S), 0u));
        moe_gate_up_gemv_params g;
        g.x = dx.get();
        g.ids = dids.get();
        g.w = fp8 ? static_cast<const void *>(dguq.get()) : dgub.get();
        g.wfmt = f;
        g.w_scale = fp8 ? dgus.get() : nullptr;
        g.act = dact.get();
        g.n_tokens = T;
        g.n_embd = H;
        g.n_expert_used = K;
        g.n_ff_exp = Fe;
        g.mma = mma;
        g.mma_shape = ms;
        g.w_tile_major = tm;
        g.slot_rows_done = dctr.get();
        moe_down_gemv_params d;
        d.act = dact.get();
        d.ids = dids.get();
        d.weights = dwts.get();
        d.w = fp8 ? static_cast<const void *>(ddnq.get()) : ddnb.get();
        d.wfmt = f;
        d.w_scale = fp8 ? ddns.get() : nullptr;
        d.y_slots = dys.get();
        d.n_tokens = T;
        d.n_embd = H;
        d.n_expert_used = K;
        d.n_ff_exp = Fe;
        d.sh_w = fp8 ? static_cast<const void *>(dshq.get()) : dshb.get();
        d.sh_w_scale = fp8 ? dshs.get() : nullptr;
        d.sh_act = dsha.get();
        d.y_shared = dys.get() + S * H;
        d.n_ff_sh = Fs;
        d.sh_ready = true;
        d.rows_per_warp = rpw;
        d.slot_rows_done = dctr.get();
        ck(launch_moe_gate_up_gemv(g, st), "gate/up launch");
        ck(launch_moe_down_gemv(d, st), "down launch");
        sync(name);
        const auto counted = dctr.download();
        R.add("kernel", name + " counters after down", "slots whose count is not F",
              double(std::count_if(counted.begin(), counted.end(), [&](unsigned v) { return v != unsigned(Fe); })), 0.0);
        moe_combine_params cb{dys.get(), dwts.get(), dres.get(), T, H, K};
        cb.y_shared = d.y_shared;
        cb.reset = dctr.get();
        cb.n_reset = S;
        ck(launch_moe_combine(cb, st), "combine launch");
        sync(name);
        const auto after = dctr.download();
        R.add("kernel", name + " counters after combine", "left non-zero",
              double(std::count_if(after.begin(), after.end(), [](unsigned v) { return v != 0; })), 0.0);
        // The twins' chain.
        std::vector<bf16_t> act(static_cast<size_t>(S * Fe));
        std::vector<float> ys(static_cast<size_t>((S + T) * H)), res = res0;
        g.x = x.data();
        g.ids = ids.data();
        g.w = fp8 ? static_cast<const void *>(gu.q.data()) : gu.b.data();
        g.w_scale = fp8 ? gu.s.data() : nullptr;
        g.act = act.data();
        g.slot_rows_done = nullptr;
        g.w_tile_major = false;
        moe_gate_up_gemv_ref(g);
        d.act = act.data();
        d.ids = ids.data();
        d.weights = wts.data();
        d.w = fp8 ? static_cast<const void *>(dn.q.data()) : dn.b.data();
        d.w_scale = fp8 ? dn.s.data() : nullptr;
        d.y_slots = ys.data();
        d.sh_w = fp8 ? static_cast<const void *>(sh.q.data()) : sh.b.data();
        d.sh_w_scale = fp8 ? sh.s.data() : nullptr;
        d.sh_act = sh_act.data();
        d.y_shared = ys.data() + S * H;
        d.slot_rows_done = nullptr;
        moe_down_gemv_ref(d);
        cb = moe_combine_params{ys.data(), wts.data(), res.data(), T, H, K};
        cb.y_shared = ys.data() + S * H;
        moe_combine_ref(cb);
        // The GPU's activations round to BF16 like the twin's, so an activation can differ by one
        // BF16 step: the residual takes the BF16 tolerance.
        R.add("kernel", name + " residual", "max scaled err", scaled_err(dres.download(), res), k_bf16_limit);
    });
}

void test_moe_plan(runner &R, int64_t T, int64_t E, int64_t K,
                   int64_t tile_rows = moe_grouped_gemm_tile_rows) {
    const std::string name = shape_name("moe_plan", {{"slots", T * K}, {"E", E}, {"tile", tile_rows}});
    R.run("kernel", name, [&] {
        auto ids = random_topk_ids(T, E, K);
        const int64_t S = T * K;
        dvec<int32_t> dids(ids), dc(static_cast<size_t>(E)), doff(static_cast<size_t>(E + 1)), dto(static_cast<size_t>(E + 1)), ds(static_cast<size_t>(S));
        moe_plan_params p;
        p.ids = dids.get();
        p.n_slots = S;
        p.n_expert = E;
        p.tile_rows = tile_rows;
        p.counts = dc.get();
        p.offsets = doff.get();
        p.tile_offsets = dto.get();
        p.sorted_slots = ds.get();
        ck(launch_moe_plan(p, nullptr), "launch");
        sync(name);
        std::vector<int32_t> c(static_cast<size_t>(E)), off(static_cast<size_t>(E + 1)), to(static_cast<size_t>(E + 1)), s(static_cast<size_t>(S));
        p.ids = ids.data();
        p.counts = c.data();
        p.offsets = off.data();
        p.tile_offsets = to.data();
        p.sorted_slots = s.data();
        moe_plan_ref(p);
        const bool exact = dc.download() == c && doff.download() == off && dto.download() == to;
        const auto gs = ds.download();
        int64_t bad_groups = 0;
        for (int64_t e = 0; e < E; ++e) {
            std::multiset<int32_t> a(gs.begin() + off[e], gs.begin() + off[e + 1]), b(s.begin() + off[e], s.begin() + off[e + 1]);
            bad_groups += a != b;
        }
        R.add("kernel", name + " counts/offsets/tiles", "mismatches (exact)", exact ? 0.0 : 1.0, 0.0);
        R.add("kernel", name + " groups", "experts whose slot sets differ", double(bad_groups), 0.0);
        R.add("kernel", name + " tiles", "tiles ≤ grid bound", double(to[E]) <= double(moe_plan_max_tiles(S, E, 64)) ? 1.0 : 0.0,
              1.0, false);
    });
}

// counts (optional): the number of slots of each expert (summing to T·K), to place group sizes on
// the tile edges (0, 1, 63, 64, 65, 128 rows); otherwise random top-k with the last expert empty.
// lda_pad: activation rows longer than k (a k that is not a multiple of 8 with 16-byte aligned rows).
void test_grouped_gemm(runner &R, weight_format f, bool glu, int64_t T, int64_t K, int64_t E, int64_t k,
                       int64_t n, int64_t lda_pad = 0, const std::vector<int32_t> &counts = {},
                       scale_layout L = scale_layout::channel, bool tm = false, bool wg = false, int qa = 0) {
    // qa: FP8 activations (1: E4M3, 2: E5M2), act_quantize's codes of the rows (the wgmma kernel).
    const bool fp8 = f == weight_format::fp8_e4m3;
    const fp8_format afmt = qa == 2 ? fp8_format::e5m2 : fp8_format::e4m3;
    const std::string name = shape_name(
        "moe_grouped_gemm", {{"T", T}, {"k_used", K}, {"E", E}, {"K", k}, {"N", n}},
        std::string(fp8 ? "fp8" : "bf16") + (glu ? " glu" : " plain") +
            (counts.empty() ? "" : " edge groups") + (lda_pad ? " lda=" + std::to_string(k + lda_pad) : "") +
            blk_suffix(L) + (tm ? " tile-major" : "") + (wg ? " wgmma" : "") +
            (qa ? std::string(" fp8 activations ") + (qa == 2 ? "e5m2" : "e4m3") : ""));
    R.run("kernel", name, [&] {
        const int64_t S = T * K, rows_a = glu ? T : S, w_rows = glu ? 2 * n : n, lda = k + lda_pad;
        std::vector<int32_t> ids;
        if (counts.empty()) {
            ids = random_topk_ids(T, E, K);
            // One expert gets no slot, to exercise empty groups.
            for (auto &e : ids)
                if (e == E - 1) e = 0;
        } else {
            for (int64_t e = 0; e < E; ++e)
                ids.insert(ids.end(), static_cast<size_t>(counts[static_cast<size_t>(e)]), int32_t(e));
            if (int64_t(ids.size()) != S) throw test_failure("edge-group counts do not sum to T·k_used");
            std::shuffle(ids.begin(), ids.end(), rng());
        }
        auto a = rand_bf16(static_cast<size_t>(rows_a * lda));
        auto w = make_expert_weights(f, E * w_rows, k, L, E);
        dvec<bf16_t> da(a), dwb(w.b), dact(static_cast<size_t>(S * n));
        dvec<fp8_t> dwq(tm ? tile_major(w.q, E, n, k) : w.q);
        dvec<float> dws(w.s), dy(static_cast<size_t>(S * n));
        moe_grouped_gemm_params p;
        p.a = da.get();
        p.lda = lda;
        p.a_row_div = glu ? K : 1;
        p.n_expert = E;
        p.w = fp8 ? static_cast<const void *>(dwq.get()) : dwb.get();
        p.wfmt = f;
        p.w_scale = fp8 ? dws.get() : nullptr;
        p.w_layout = L;
        p.k = k;
        p.n = n;
        p.glu = glu;
        p.w_tile_major = tm;
        p.out_act = glu ? dact.get() : nullptr;
        p.out_f32 = glu ? nullptr : dy.get();
        p.ldo = n;
        p.allow_wgmma = wg; // the rows without: the mma.sync kernel, whatever the GPU
        std::vector<fp8_t> aq;
        std::vector<float> as;
        std::unique_ptr<dvec<fp8_t>> daq;
        std::unique_ptr<dvec<float>> das;
        if (qa) { // codes of all lda columns (rows of lda codes), the pad's too
            aq.resize(static_cast<size_t>(rows_a * lda));
            as.resize(static_cast<size_t>(rows_a));
            act_quantize_ref({a.data(), lda, aq.data(), as.data(), rows_a, lda, afmt});
            daq = std::make_unique<dvec<fp8_t>>(aq);
            das = std::make_unique<dvec<float>>(as);
            p.a_q = daq->get();
            p.a_scale = das->get();
            p.a_fmt = afmt;
        }
        if (qa && !moe_grouped_gemm_fp8_act_ok(p)) {
            R.info("kernel", name, "skipped", 0, "FP8 × FP8 MMAs need compute capability 8.9 or later");
            return;
        }
        if (wg && !moe_grouped_gemm_wgmma_ok(p)) {
            R.info("kernel", name, "skipped", 0,
                   "the warpgroup-MMA kernel needs compute capability 9.0 and sm_90a code");
            return;
        }
        std::vector<int32_t> c(static_cast<size_t>(E)), off(static_cast<size_t>(E + 1)),
            to(static_cast<size_t>(E + 1)), sorted(static_cast<size_t>(S));
        moe_plan_params pl;
        pl.ids = ids.data();
        pl.n_slots = S;
        pl.n_expert = E;
        pl.tile_rows = moe_grouped_gemm_plan_rows(p);
        pl.counts = c.data();
        pl.offsets = off.data();
        pl.tile_offsets = to.data();
        pl.sorted_slots = sorted.data();
        moe_plan_ref(pl);
        dvec<int32_t> dsorted(sorted), doff(off), dto(to);
        p.sorted_slots = dsorted.get();
        p.offsets = doff.get();
        p.tile_offsets = dto.get();
        p.tile_rows = pl.tile_rows;
        p.max_tiles = moe_plan_max_tiles(S, E, pl.tile_rows);
        ck(launch_moe_grouped_gemm(p, nullptr), "launch");
        sync(name);
        std::vector<bf16_t> act(static_cast<size_t>(S * n));
        std::vector<float> y(static_cast<size_t>(S * n));
        p.a = a.data();
        p.sorted_slots = sorted.data();
        p.offsets = off.data();
        p.tile_offsets = to.data();
        p.w = fp8 ? static_cast<const void *>(w.q.data()) : w.b.data();
        p.w_scale = fp8 ? w.s.data() : nullptr;
        p.out_act = glu ? act.data() : nullptr;
        p.out_f32 = glu ? nullptr : y.data();
        p.w_tile_major = false;
        if (qa) {
            p.a_q = aq.data();
            p.a_scale = as.data();
        }
        moe_grouped_gemm_ref(p);
        // FP8 activations: NMSE, as the FP8 rows elsewhere. Hopper's FP8 × FP8 MMAs keep fewer
        // bits of their running sums than fp32 FMAs (measured against this fp32 twin: max scaled
        // error ~3e-3 at k = 1,536 … 2,560, NMSE ~1e-6; a wrong layout or scale costs ~1).
        const std::vector<float> got = glu ? widen(dact.download()) : dy.download(),
                                 want = glu ? widen(act) : y;
        if (qa) {
            R.add("kernel", name, "NMSE", nmse(got, want), 1e-4);
            R.info("kernel", name, "max scaled err", scaled_err(got, want));
        } else {
            R.add("kernel", name, glu ? "max scaled err (bf16)" : "max scaled err", scaled_err(got, want),
                  glu ? k_bf16_limit : k_f32_limit);
        }
    });
}

void test_moe_combine(runner &R, int64_t T, int64_t H, int64_t K) {
    const std::string name = shape_name("moe_combine", {{"T", T}, {"H", H}, {"k", K}});
    R.run("kernel", name, [&] {
        auto y = rand_f(static_cast<size_t>(T * K * H)), w = rand_f(static_cast<size_t>(T * K), 0, 1), x = rand_f(static_cast<size_t>(T * H));
        dvec<float> dy(y), dw(w), dx(x);
        moe_combine_params p{dy.get(), dw.get(), dx.get(), T, H, K};
        ck(launch_moe_combine(p, nullptr), "launch");
        sync(name);
        p = moe_combine_params{y.data(), w.data(), x.data(), T, H, K};
        moe_combine_ref(p);
        R.add("kernel", name, "max scaled err", scaled_err(dx.download(), x), 1e-6);
    });
}

void test_gemm_lt(runner &R, gemm_lt_context *ctx, int64_t M, int64_t N, int64_t K, bool acc) {
    const std::string name = shape_name("gemm_lt", {{"M", M}, {"N", N}, {"K", K}}, acc ? "bf16 +acc" : "bf16");
    R.run("kernel", name, [&] {
        auto a = rand_bf16(static_cast<size_t>(M * K)), w = rand_bf16(static_cast<size_t>(N * K), -0.05f, 0.05f);
        auto y0 = rand_f(static_cast<size_t>(M * N));
        dvec<bf16_t> da(a), dw(w);
        dvec<float> dy(y0);
        gemm_lt_params p;
        p.ctx = ctx;
        p.a = da.get();
        p.lda = K;
        p.w = dw.get();
        p.ldw = K;
        p.y = dy.get();
        p.ldy = N;
        p.m = M;
        p.n = N;
        p.k = K;
        p.accumulate = acc;
        if (!gemm_lt_shape_ok(p)) throw test_failure("shape rejected by gemm_lt_shape_ok");
        const cudaError_t e = launch_gemm_lt(p, nullptr);
        if (e == cudaErrorUnknown) throw test_failure(std::string("cuBLASLt: ") + gemm_lt_last_error(ctx));
        ck(e, "launch");
        sync(name);
        std::vector<float> y = y0;
        p.a = a.data();
        p.w = w.data();
        p.y = y.data();
        gemm_lt_ref(p);
        R.add("kernel", name, "max scaled err", scaled_err(dy.download(), y), k_f32_limit);
    });
}

// The FP8 path: activations quantized by the twin (act_quantize is checked on its own), weights
// by fp8_quantize's twin, then cuBLASLt against gemm_lt_fp8_ref (the same product in fp32: only
// the summation order differs) and, without accumulation, against BF16 activations (what the
// activation quantization costs: ~6e-4 NMSE for E4M3's 3 mantissa bits, ~4× that for E5M2).
void test_gemm_lt_fp8(runner &R, gemm_lt_context *ctx, int cc_major, int64_t M, int64_t N, int64_t K,
                      bool acc, fp8_format f) {
    const bool e4 = f == fp8_format::e4m3;
    const std::string name =
        shape_name("gemm_lt", {{"M", M}, {"N", N}, {"K", K}},
                   std::string("fp8 ") + (e4 ? "e4m3" : "e5m2") + " act" + (acc ? " +acc" : ""));
    R.run("kernel", name, [&] {
        auto x = rand_bf16(static_cast<size_t>(M * K)),
             wb = rand_bf16(static_cast<size_t>(N * K), -0.05f, 0.05f);
        std::vector<fp8_t> wq(static_cast<size_t>(N * K)), aq(static_cast<size_t>(M * K));
        std::vector<float> ws(static_cast<size_t>(N)), as(static_cast<size_t>(M));
        fp8_quantize_ref({wb.data(), wq.data(), ws.data(), N, K});
        act_quantize_params q;
        q.x = x.data();
        q.ldx = K;
        q.q = aq.data();
        q.scale = as.data();
        q.m = M;
        q.k = K;
        q.fmt = f;
        act_quantize_ref(q);
        auto y0 = rand_f(static_cast<size_t>(M * N));
        dvec<fp8_t> dwq(wq), daq(aq);
        dvec<float> dws(ws), das(as), dy(y0);
        gemm_lt_fp8_params p;
        p.ctx = ctx;
        p.a = daq.get();
        p.lda = K;
        p.a_scale = das.get();
        p.a_fmt = f;
        p.w = dwq.get();
        p.ldw = K;
        p.w_scale = dws.get();
        p.y = dy.get();
        p.ldy = N;
        p.m = M;
        p.n = N;
        p.k = K;
        p.accumulate = acc;
        if (!gemm_lt_fp8_shape_ok(p)) throw test_failure("shape rejected by gemm_lt_fp8_shape_ok");
        const cudaError_t e = launch_gemm_lt_fp8(p, nullptr);
        if (e == cudaErrorNotSupported) {
            if (cc_major < 9) { // outer-vector scaling is a compute capability 9.0 feature
                R.info("kernel", name, "not supported below compute capability 9.0", 0.0,
                       std::string("the backend dequantizes FP8 weights instead: ") +
                           gemm_lt_last_error(ctx));
                return;
            }
            throw test_failure(std::string("cuBLASLt refused the FP8 GEMM (the backend falls back to BF16 "
                                           "activations and dequantized weights): ") +
                               gemm_lt_last_error(ctx));
        }
        if (e == cudaErrorUnknown) throw test_failure(std::string("cuBLASLt: ") + gemm_lt_last_error(ctx));
        ck(e, "launch");
        sync(name);
        std::vector<float> y = y0;
        p.a = aq.data();
        p.a_scale = as.data();
        p.w = wq.data();
        p.w_scale = ws.data();
        p.y = y.data();
        gemm_lt_fp8_ref(p);
        const auto gy = dy.download();
        R.add("kernel", name, "NMSE vs twin", nmse(gy, y), 1e-5);
        R.add("kernel", name, "cosine vs twin", cosine_similarity(gy, y), 0.99999, false);
        R.info("kernel", name, "max scaled err vs twin", scaled_err(gy, y));
        if (!acc && M <= 64) {
            std::vector<float> yb(static_cast<size_t>(M * N));
            gemv_params g;
            g.x = x.data();
            g.ldx = K;
            g.w = wq.data();
            g.wfmt = weight_format::fp8_e4m3;
            g.w_scale = ws.data();
            g.y = yb.data();
            g.ldy = N;
            g.n_tokens = M;
            g.n = N;
            g.k = K;
            gemv_ref(g);
            R.add("kernel", name + " vs bf16 activations", "NMSE (activation quantization)", nmse(gy, yb),
                  e4 ? 2e-3 : 1e-2);
            R.add("kernel", name + " vs bf16 activations", "cosine", cosine_similarity(gy, yb), e4 ? 0.999 : 0.995,
                  false);
        }
    });
}

void test_argmax(runner &R, int64_t rows, int64_t V) {
    const std::string name = shape_name("argmax", {{"rows", rows}, {"V", V}}, "ties, NaN");
    R.run("kernel", name, [&] {
        auto x = rand_f(static_cast<size_t>(rows * V), -5, 5);
        x[0 * V + 5000] = 9.0f; // tie: the lower index wins
        x[0 * V + 90000 % V] = 9.0f;
        if (rows > 1) {
            x[1 * V + 7] = NAN;
            x[1 * V + V - 1] = 8.5f;
        }
        dvec<float> dx(x);
        dvec<int32_t> dout(static_cast<size_t>(rows));
        argmax_params p{dx.get(), dout.get(), rows, V};
        ck(launch_argmax(p, nullptr), "launch");
        sync(name);
        std::vector<int32_t> out(static_cast<size_t>(rows));
        p = argmax_params{x.data(), out.data(), rows, V};
        argmax_ref(p);
        const auto g = dout.download();
        int64_t diff = 0;
        for (int64_t r = 0; r < rows; ++r) diff += g[r] != out[r];
        R.add("kernel", name, "rows differing (exact)", double(diff), 0.0);
    });
}

// copy_bytes (the zero-copy I/O of decode graphs): pinned host memory to device memory and device
// memory to pinned host memory (the device reaching the host's pages directly), aligned and at odd
// offsets and sizes, against the twin's memcpy, exact; the bytes around the target untouched.
void test_copy_bytes(runner &R, size_t bytes, size_t offset) {
    const std::string name = shape_name("copy_bytes", {{"bytes", int64_t(bytes)}, {"offset", int64_t(offset)}},
                                        "pinned host <-> device");
    R.run("kernel", name, [&] {
        const size_t total = bytes + offset + 64;
        std::vector<unsigned char> src(total), want(total, 0xa5);
        for (size_t i = 0; i < total; ++i) src[i] = static_cast<unsigned char>(i * 131u + 7u);
        const pinned_bytes pin_src(total), pin_dst(total);
        unsigned char *host_src = pin_src.get(), *host_dst = pin_dst.get();
        std::memcpy(host_src, src.data(), total);
        std::memset(host_dst, 0xa5, total);
        dvec<unsigned char> dev(std::vector<unsigned char>(total, 0xa5));
        copy_bytes_params in{dev.get() + offset, host_src + offset, bytes};
        copy_bytes_params out{host_dst + offset, dev.get() + offset, bytes};
        ck(launch_copy_bytes(in, nullptr), "launch (host to device)");
        ck(launch_copy_bytes(out, nullptr), "launch (device to host)");
        sync(name);
        copy_bytes_params ref{want.data() + offset, src.data() + offset, bytes};
        copy_bytes_ref(ref);
        const auto d = dev.download();
        int64_t dev_diff = 0, host_diff = 0;
        for (size_t i = 0; i < total; ++i) {
            dev_diff += d[i] != want[i];
            host_diff += host_dst[i] != want[i];
        }
        R.add("kernel", name, "device bytes differing from the twin (host to device)", double(dev_diff), 0.0);
        R.add("kernel", name, "host bytes differing from the twin (device to host)", double(host_diff), 0.0);
    });
}

// copy_bytes with fed tokens (backend::submit): a step's input block from pinned memory, its n
// tokens at fed_offset mixing ids and placeholders −row − 1 (row 0's −1 first: a one-token
// step's only kind; the kernel loads row 0's candidate beside the block), patched from a [rows,
// stride] candidates array on the GPU, against the twin, exact.
void test_copy_bytes_fed(runner &R, int64_t n, int64_t rows) {
    const std::string name = shape_name("copy_bytes", {{"tokens", n}, {"rows", rows}}, "fed tokens");
    R.run("kernel", name, [&] {
        constexpr size_t fed_offset = 48;
        constexpr int64_t stride = 3;
        const size_t bytes = (fed_offset + size_t(n) * 4 + 200 + 15) / 16 * 16;
        std::vector<unsigned char> src(bytes);
        for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 37u + 11u);
        auto *tok = reinterpret_cast<int32_t *>(src.data() + fed_offset);
        std::mt19937 rng(unsigned(n * 7 + rows));
        for (int64_t i = 0; i < n; ++i)
            tok[i] = i == 0           ? -1
                     : rng() % 3 == 0 ? int32_t(rng() % 1000)
                                      : -1 - int32_t(rng() % uint32_t(rows));
        std::vector<int32_t> cand(size_t(rows * stride));
        for (size_t i = 0; i < cand.size(); ++i) cand[i] = int32_t(5000 + i * 13);
        const pinned_bytes pin(bytes);
        unsigned char *host = pin.get();
        std::memcpy(host, src.data(), bytes);
        dvec<unsigned char> dev(std::vector<unsigned char>(bytes, 0xa5));
        dvec<int32_t> dcand(cand);
        copy_bytes_params p{dev.get(), host, bytes, fed_offset, n, dcand.get(), stride};
        ck(launch_copy_bytes(p, nullptr), "launch");
        sync(name);
        std::vector<unsigned char> want(bytes);
        copy_bytes_params ref{want.data(), src.data(), bytes, fed_offset, n, cand.data(), stride};
        copy_bytes_ref(ref);
        const auto d = dev.download();
        int64_t diff = 0;
        for (size_t i = 0; i < bytes; ++i) diff += d[i] != want[i];
        R.add("kernel", name, "bytes differing from the twin", double(diff), 0.0);
    });
}

// topk_logits vs its twin: exact ids and values (set and order), row max exact, sums within 1e-5
// relative; launched twice (the per-row counters must re-arm), then timed (info row).
void test_topk_logits(runner &R, int64_t rows, int64_t V, int32_t N) {
    const std::string name =
        shape_name("topk_logits", {{"rows", rows}, {"V", V}, {"N", N}},
                   "ties, NaN, -inf, mostly NaN, periodic, constant, ±0 top");
    R.run("kernel", name, [&] {
        auto x = rand_f(static_cast<size_t>(rows * V), -5, 5);
        std::vector<float> temps(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            float *row = x.data() + r * V;
            temps[size_t(r)] = r == 1 ? 0.0f : 0.6f + 0.1f * float(r);
            for (int64_t v = 0; v < V; v += 3) row[v] = std::round(row[v] * 4.0f) / 4.0f; // many ties
            row[5000 % V] = row[90000 % V] = 9.0f; // a tie at the top: the lower id first
            if (r % 3 == 1)
                for (int64_t v = 0; v < V; v += 11) row[v] = NAN;
            if (r % 4 == 2)
                for (int64_t v = 1; v < V; v += 7) row[v] = -INFINITY;
            if (r == 5) // few values per block: N = 256 takes the merge's overflow path
                for (int64_t v = 0; v < V; ++v)
                    if (v % 50) row[v] = NAN;
            if (r == 3) // a row without a finite value
                for (int64_t v = 0; v < V; ++v) row[v] = v % 2 ? -INFINITY : NAN;
            if (r == 4) // every 2048-value block the same: the top keys differ by id only, across blocks
                for (int64_t v = 2048; v < V; ++v) row[v] = row[v % 2048];
            if (r == 6) // one value everywhere: every comparison a tie (the keys order by id)
                for (int64_t v = 0; v < V; ++v) row[v] = 1.5f;
            if (r == 7) // the top values are zeros of both signs (the value is decoded from the key)
                for (int64_t v = 0; v < V; ++v)
                    row[v] = v % 5 ? -std::abs(row[v]) - 0.5f : (v % 2 ? -0.0f : 0.0f);
            if (r == 8) // a masked row: −inf but for every 997th value (the −inf slots order by id)
                for (int64_t v = 0; v < V; ++v)
                    if (v % 997) row[v] = -INFINITY;
            // Rows 9, 10: the N ≤ 64 kernel's bounds loose, its sorting-network fallbacks taken: the
            // top values of a block all in its warps' first 4 lanes (phase 1), in every other block
            // (phase 2).
            if (r == 9)
                for (int64_t v = 0; v < V; ++v)
                    if (v % 32 < 4) row[v] += 20.0f;
            if (r == 10)
                for (int64_t v = 0; v < V; ++v)
                    if ((v / 2048) % 2 == 0) row[v] += 20.0f;
        }
        dvec<float> dx(x), dt(temps), dmax(static_cast<size_t>(rows));
        dvec<int32_t> dids(static_cast<size_t>(rows * N));
        dvec<float> dvals(static_cast<size_t>(rows * N));
        dvec<double> dsum(static_cast<size_t>(rows));
        dvec<uint8_t> scratch(topk_logits_scratch_bytes(rows, V, N));
        dvec<unsigned> counters(static_cast<size_t>(rows));
        topk_logits_params p;
        p.logits = dx.get();
        p.temperatures = dt.get();
        p.ids = dids.get();
        p.values = dvals.get();
        p.row_max = dmax.get();
        p.row_sum = dsum.get();
        p.n_rows = rows;
        p.n_vocab = V;
        p.n_top = N;
        p.scratch = scratch.get();
        p.counters = counters.get();
        std::vector<int32_t> ids(static_cast<size_t>(rows * N));
        std::vector<float> vals(static_cast<size_t>(rows * N)), mx(static_cast<size_t>(rows));
        std::vector<double> sums(static_cast<size_t>(rows));
        topk_logits_params h = p;
        h.logits = x.data();
        h.temperatures = temps.data();
        h.ids = ids.data();
        h.values = vals.data();
        h.row_max = mx.data();
        h.row_sum = sums.data();
        topk_logits_ref(h);
        int64_t diff = 0, max_diff = 0;
        double sum_err = 0.0;
        for (int launch = 0; launch < 2; ++launch) {
            ck(launch_topk_logits(p, nullptr), "launch");
            sync(name);
            const auto gi = dids.download();
            const auto gv = dvals.download();
            const auto gm = dmax.download();
            const auto gs = dsum.download();
            for (size_t i = 0; i < gi.size(); ++i)
                diff += gi[i] != ids[i] || std::memcmp(&gv[i], &vals[i], 4) != 0;
            for (int64_t r = 0; r < rows; ++r) {
                max_diff += !(gm[size_t(r)] == mx[size_t(r)]);
                const double ref = sums[size_t(r)];
                sum_err = std::max(sum_err, std::abs(gs[size_t(r)] - ref) / std::max(ref, 1e-30));
                if (ref == 0.0) sum_err = std::max(sum_err, std::abs(gs[size_t(r)]));
            }
        }
        R.add("kernel", name, "candidates differing (id or value, exact, 2 launches)", double(diff), 0.0);
        R.add("kernel", name, "row max differing (exact)", double(max_diff), 0.0);
        R.add("kernel", name, "row sum max rel err", sum_err, 1e-5);
        cudaEvent_t a = nullptr, b = nullptr;
        ck(cudaEventCreate(&a), "cudaEventCreate");
        ck(cudaEventCreate(&b), "cudaEventCreate");
        ck(cudaEventRecord(a), "cudaEventRecord");
        for (int i = 0; i < 100; ++i) ck(launch_topk_logits(p, nullptr), "launch");
        ck(cudaEventRecord(b), "cudaEventRecord");
        sync(name);
        float ms = 0.0f;
        ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        R.info("kernel", name, "µs per launch (100 back to back)", 1000.0 * ms / 100.0);
    });
}

void test_fill_random(runner &R, int64_t n) {
    const std::string name = shape_name("fill_random", {{"n", n}});
    R.run("kernel", name, [&] {
        dvec<bf16_t> d(static_cast<size_t>(n));
        fill_random_params p{d.get(), n, 42, 0.5f, 0.25f};
        ck(launch_fill_random(p, nullptr), "launch");
        sync(name);
        std::vector<bf16_t> h(static_cast<size_t>(n));
        p.out = h.data();
        fill_random_ref(p);
        const auto g = d.download();
        int64_t diff = 0;
        for (int64_t i = 0; i < n; ++i) diff += g[i] != h[i];
        R.add("kernel", name, "values differing (exact)", double(diff), 0.0);
    });
}

void run_kernel_tests(runner &R, int cc_major) {
    const auto bf = weight_format::bf16, f8 = weight_format::fp8_e4m3;
    test_fill_random(R, 1 << 20);
    test_embedding(R, 7, 1000, 40);
    test_embedding(R, 1, 103424, 64);
    test_embedding(R, 3, 5000, 2560); // 16-byte vectors, a partial last round
    test_embedding(R, 2, 300, 36);    // 4-element loads, one partial round
    test_embedding(R, 2, 300, 38);    // a width that is no multiple of 4: one element at a time
    test_rms_norm(R, 5, 40, true, false);
    test_rms_norm(R, 3, 2560, false, false);
    test_rms_norm(R, 4, 1024, false, true);
    test_rope_kv(R, 6, 2, 12);
    test_rope_kv(R, 16, 2, 128);
    // FP8 KV cache: the writers (rope_kv, the q/k/v GEMV's epilogue).
    test_rope_kv(R, 6, 2, 12, kv_format::fp8_e4m3);
    test_rope_kv(R, 16, 2, 128, kv_format::fp8_e4m3);
    test_gemv_fused(R, weight_format::fp8_e4m3, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::fp8_e4m3);
    test_gemv_fused(R, weight_format::bf16, 5, 1024, 16, 2, 64, true, scale_layout::channel, kv_format::fp8_e4m3);
    test_gemv_fused(R, weight_format::bf16, 3, 96, 6, 2, 12, true, scale_layout::channel, kv_format::fp8_e4m3);
    for (weight_format f : {weight_format::fp8_e4m3, weight_format::bf16}) {
        test_gemv_fused(R, f, 1, 1024, 16, 2, 64, true);    // 0.3B decode
        test_gemv_fused(R, f, 1, 2560, 20, 4, 128, true);   // 21B-A3B decode
        test_gemv_fused(R, f, 1, 1024, 16, 2, 64, true, scale_layout::channel, kv_format::bf16,
                        true); // layer 0
        test_gemv_fused(R, f, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::fp8_e4m3, true);
        test_gemv_fused(R, f, 1, 96, 6, 2, 12, false, scale_layout::channel, kv_format::bf16,
                        true);                              // no rope
        test_gemv_fused(R, f, 5, 2560, 20, 4, 128, true);   // batch 5: MT = 8, three rows idle
        test_gemv_fused(R, f, 8, 2560, 20, 4, 128, true);
        test_gemv_fused(R, f, 3, 96, 6, 2, 12, true);       // head_dim / 2 odd
        test_gemv_fused(R, f, 2, 96, 5, 1, 6, true);        // 42 rows: the last block half empty
        test_gemv_fused(R, f, 2, 1024, 16, 2, 64, false);   // norm only
        // The input normalized already (moe_combine's norm_out): the 21B-A3B's one-token shape loads
        // its rows into registers before the wait; the 0.3B's and batches do not.
        test_gemv_fused(R, f, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::bf16, false, true);
        test_gemv_fused(R, f, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::fp8_e4m3, false, true);
        test_gemv_fused(R, f, 1, 2048, 16, 4, 128, true, scale_layout::channel, kv_format::bf16, false, true);
        test_gemv_fused(R, f, 1, 1024, 16, 2, 64, true, scale_layout::channel, kv_format::fp8_e4m3, false,
                        true);
        test_gemv_fused(R, f, 5, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::bf16, false, true);
        test_gemv_fused(R, f, 2, 96, 5, 1, 6, true, scale_layout::channel, kv_format::bf16, false, true);
        // One token, matrices of 6 MB and more: uneven lanes (FP8 2,000: 125 vectors), norm only.
        test_gemv_fused(R, f, 1, f == weight_format::fp8_e4m3 ? 2000 : 1024, 32, 8, 64, true);
        test_gemv_fused(R, f, 1, f == weight_format::fp8_e4m3 ? 2560 : 1280, 32, 8, 128, false);
    }
    test_attention(R, 16, 2, 128, {{0, 37}}, "prefill 37");
    test_attention(R, 6, 2, 12, {{50, 3}, {0, 20}}, "2 seqs");
    test_attention(R, 20, 4, 128, {{300, 1}}, "decode pos 300");
    test_attention(R, 20, 4, 128, {{0, 1}}, "decode pos 0");
    test_attention(R, 40, 1, 64, {{10, 5}}, "group 40");
    test_attention(R, 8, 8, 256, {{0, 2}, {33, 1}}, "hd 256");
    test_attention(R, 20, 4, 128, {{300, 1}}, "decode pos 300", 16);
    test_attention(R, 16, 2, 128, {{2047, 1}}, "decode pos 2047", 16);
    test_attention(R, 6, 2, 12, {{50, 3}, {0, 20}}, "2 seqs", 4);
    test_attention(R, 40, 1, 64, {{10, 5}}, "group 40", 3);
    // The decode kernel (attention_decode_ok: ≤ 8 rows per tile, head_dim 64/128/256).
    test_attention(R, 16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4");
    test_attention(R, 16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4", 4);
    test_attention(R, 16, 2, 128, {{0, 1}}, "decode pos 0", 16);
    test_attention(R, 20, 4, 128, {{127, 1}, {1000, 1}}, "decode batch 2", 16);
    test_attention(R, 8, 2, 64, {{40, 2}}, "decode 2 tokens", 2);
    test_attention(R, 4, 2, 256, {{63, 1}, {64, 1}}, "decode hd 256", 5);
    // Tensor-core (prefill) kernel: chunk lengths around the 16-row MMA tile and the 64-key KV
    // tile, from position 0 and from 37 (a cached prefix), group 8 (0.3B) and 5 (21B-A3B), block
    // size 16 and 7 (key tiles crossing blocks), two sequences in one batch (a CTA whose two
    // planner tiles belong to different sequences), head_dim 64.
    const auto tc = attention_path::tensor_core;
    const auto chunk = [](int32_t n, int32_t at) { return "prefill " + std::to_string(n) + " at " + std::to_string(at); };
    for (int32_t n : {1, 15, 16, 17, 64, 200, 700})
        for (int32_t at : {0, 37}) test_attention(R, 16, 2, 128, {{at, n}}, chunk(n, at), 1, 16, tc);
    for (int32_t n : {1, 17, 200, 700}) test_attention(R, 20, 4, 128, {{37, n}}, chunk(n, 37), 1, 16, tc);
    test_attention(R, 20, 4, 128, {{0, 64}}, "prefill 64 at 0", 1, 16, tc);
    test_attention(R, 16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, tc);
    test_attention(R, 20, 4, 128, {{0, 700}}, "prefill 700 at 0", 1, 7, tc);
    test_attention(R, 16, 2, 128, {{37, 198}, {0, 17}}, "2 seqs", 1, 16, tc);
    test_attention(R, 20, 4, 128, {{0, 15}, {100, 64}}, "2 seqs", 1, 7, tc);
    test_attention(R, 20, 4, 128, {{5, 3}, {300, 1}, {0, 40}, {64, 1}}, "4 seqs", 1, 16, tc);
    test_attention(R, 8, 1, 64, {{37, 200}}, "prefill 200 at 37", 1, 16, tc);
    test_attention(R, 10, 2, 64, {{0, 64}, {20, 33}}, "2 seqs", 1, 7, tc);
    test_attention(R, 16, 2, 128, {{37, 17}}, "prefill 17 at 37", 1, 1, tc);
    // 20 single decode tokens: every tensor-core CTA runs two passes (its tiles are of two
    // sequences); the automatic rule gives such a batch to the CUDA-core kernel.
    std::vector<std::pair<int32_t, int32_t>> decodes;
    for (int32_t i = 0; i < 20; ++i) decodes.push_back({37 * i, 1});
    test_attention(R, 16, 2, 128, decodes, "20 decode tokens", 1, 16, tc);
    test_attention(R, 16, 2, 128, decodes, "20 decode tokens");
    // The automatic choice on a prefill chunk (tensor cores), and the CUDA-core kernel on one.
    test_attention(R, 16, 2, 128, {{100, 300}}, "prefill 300 at 100");
    test_attention(R, 16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, attention_path::cuda_core);
    // FP8 KV cache: every reader. The decode kernel at head_dim 64 / 128 / 256, with and without
    // splits; the general kernel (16-byte and pairwise staging, splits); the tensor-core kernel.
    {
        const auto f8kv = kv_format::fp8_e4m3;
        const auto au = attention_path::automatic, cc = attention_path::cuda_core;
        test_attention(R, 16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4", 1, 16, au,
                       f8kv);
        test_attention(R, 16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4", 4, 16, au,
                       f8kv);
        test_attention(R, 20, 4, 128, {{300, 1}}, "decode pos 300", 16, 16, au, f8kv);
        test_attention(R, 16, 2, 128, {{2047, 1}}, "decode pos 2047", 16, 7, au, f8kv);
        test_attention(R, 16, 2, 128, {{0, 1}}, "decode pos 0", 16, 16, au, f8kv);
        test_attention(R, 8, 2, 64, {{40, 2}}, "decode 2 tokens", 2, 16, au, f8kv);
        test_attention(R, 8, 1, 64, {{500, 1}, {3, 1}}, "decode batch 2", 8, 16, au, f8kv);
        test_attention(R, 4, 2, 256, {{63, 1}, {64, 1}}, "decode hd 256", 5, 16, au, f8kv);
        test_attention(R, 4, 2, 256, {{700, 1}}, "decode hd 256", 1, 16, au, f8kv);
        test_attention(R, 40, 1, 64, {{10, 5}}, "group 40", 3, 16, au, f8kv);
        test_attention(R, 6, 2, 12, {{50, 3}, {0, 20}}, "2 seqs", 4, 4, au, f8kv);
        test_attention(R, 8, 8, 256, {{0, 2}, {33, 1}}, "hd 256", 1, 16, cc, f8kv);
        test_attention(R, 16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, cc, f8kv);
        test_attention(R, 16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, tc, f8kv);
        test_attention(R, 16, 2, 128, {{0, 17}}, "prefill 17 at 0", 1, 16, tc, f8kv);
        test_attention(R, 20, 4, 128, {{0, 700}}, "prefill 700 at 0", 1, 16, tc, f8kv);
        test_attention(R, 20, 4, 128, {{5, 3}, {300, 1}, {0, 40}, {64, 1}}, "4 seqs", 1, 16, tc, f8kv);
        test_attention(R, 8, 1, 64, {{37, 200}}, "prefill 200 at 37", 1, 16, tc, f8kv);
        test_attention(R, 10, 2, 64, {{0, 64}, {20, 33}}, "2 seqs", 1, 7, tc, f8kv);
        test_attention(R, 16, 2, 128, {{100, 300}}, "prefill 300 at 100", 1, 16, au, f8kv); // automatic: tc
    }
    test_silu_mul(R, 3, 100);
    test_silu_mul(R, 1, 1536);
    test_silu_mul(R, 70, 3072); // the four-wide kernel: rows of 768 groups, three blocks a row
    test_silu_mul(R, 5, 1028);  // the four-wide kernel, a partial last block
    test_silu_mul(R, 3, 102);   // rows of no multiple of 4: the grid-stride kernel
    test_moe_router(R, 5, 2560, 64, 6, false);
    test_moe_router(R, 7, 40, 6, 3, false);
    test_moe_router(R, 2, 64, 8, 2, true);
    // Steps of 64 tokens and more take the token-tiled kernel (16 tokens × 8 experts a block): a
    // partial last group of tokens, fewer experts than a block's warps, more than 64 experts (the
    // general tail), all tied.
    test_moe_router(R, 80, 2560, 64, 6, false);
    test_moe_router(R, 129, 40, 6, 3, false);
    test_moe_router(R, 70, 128, 160, 8, false);
    test_moe_router(R, 64, 64, 8, 2, true);
    for (auto f : {bf, f8}) {
        test_gemv(R, f, 1, 2560, 2560, false);
        test_gemv(R, f, 1, 40003, 1024, false); // the head's kernel (≥ 32,768 rows), a partial last warp
        test_gemv(R, f, 1, 103424, 1024, false); // the 0.3B's head: several row groups a warp (one wave)
        // The greedy pick in the head's kernel: the heads of both shapes, a partial last group and
        // warp (40,003 rows), and the edge rows.
        test_gemv_pick(R, f, 103424, 2560, "random");
        test_gemv_pick(R, f, 40003, 1024, "random");
        test_gemv_pick(R, f, 103424, 1024, "zero");
        test_gemv_pick(R, f, 40003, 1024, "nan");
        if (f == bf) test_gemv_pick(R, f, 40003, 1024, "nan-top");
        test_gemv(R, f, 1, 32769, 512, true);
        test_gemv(R, f, 3, 1000, 40, false);
        test_gemv(R, f, 13, 100, 100, false);
        test_gemv(R, f, 1, 64, 2560, false);
        test_gemv(R, f, 2, 512, 1024, true, 4);
        test_gemv(R, f, 8, 1536, 2560, true);
        // One token, a lane's share of the row preloaded before the wait (≤ 6 vectors, ≥ 4 MB):
        // the whole six, an uneven last round and a partial last block; then a matrix below 4 MB
        // (the L2 path).
        test_gemv(R, f, 1, 2048, f == f8 ? 3072 : 1536, true);
        test_gemv(R, f, 1, 4100, 1040, false);
        test_gemv(R, f, 1, 700, 40, true);
    }
    test_fp8_quantize(R, 64, 2560);
    test_fp8_dequantize(R, 33, 100);
    // 128×128 block scales: partial blocks in both dimensions, the GEMV's paths (one row per warp,
    // the head's rows kernel, split-K, eight tokens, the fused q/k/v launch).
    const scale_layout blk = scale_layout::block128;
    test_fp8_quantize(R, 300, 2600, blk);
    test_fp8_dequantize(R, 200, 272, blk);
    test_gemv(R, weight_format::fp8_e4m3, 1, 2560, 2560, false, 0, blk);
    test_gemv(R, weight_format::fp8_e4m3, 1, 40003, 1024, false, 0, blk);
    test_gemv_pick(R, weight_format::fp8_e4m3, 40003, 1024, "random", blk);
    test_gemv(R, weight_format::fp8_e4m3, 2, 512, 1024, true, 4, blk);
    test_gemv(R, weight_format::fp8_e4m3, 8, 1536, 2560, true, 0, blk);
    test_gemv(R, weight_format::fp8_e4m3, 3, 1000, 48, false, 0, blk);
    test_gemv_fused(R, weight_format::fp8_e4m3, 1, 2560, 20, 4, 128, true, blk);
    test_gemv_fused(R, weight_format::fp8_e4m3, 3, 96, 6, 2, 12, true, blk);
    test_gemv_fused(R, weight_format::fp8_e4m3, 1, 2560, 20, 4, 128, true, blk, kv_format::bf16, false, true);
    for (auto f : {fp8_format::e4m3, fp8_format::e5m2}) {
        test_act_quantize(R, 6, 2560, 2560, f); // 16-byte path
        test_act_quantize(R, 7, 100, 104, f);   // k not a multiple of 8: element path
        test_act_quantize(R, 9, 40, 48, f);     // k not a multiple of 16, padded rows
    }
    test_act_quantize(R, 300, 1024, 1024, fp8_format::e4m3);
    for (auto f : {bf, f8}) {
        test_moe_gemv(R, f, 1, 2560, 8, 6, 1536);
        test_moe_gemv(R, f, 3, 40, 6, 3, 24);
        test_moe_gemv(R, f, 8, 2560, 64, 6, 1536); // the most tokens decode runs through these
        // 125 vectors a row (lanes of 4 and of 3), a partial block of gate/up rows
        test_moe_gemv(R, f, 2, f == f8 ? 2000 : 1000, 8, 3, 37);
    }
    // The fused decode kernels: the 21B-A3B's widths (hidden 2560, 64 experts, top-6, expert FFN
    // 1536, shared FFN 3072, dense FFN 12288), the 0.3B's (hidden 1024, FFN 3072), odd shapes
    // (hidden not a multiple of 8 or 16: scalar paths; FFN widths that leave partial blocks; an
    // odd expert count), 1–4 tokens, router ties.
    test_moe_router_norm(R, 1, 2560, 64, 6, false);
    test_moe_router_norm(R, 3, 44, 7, 3, false);
    test_moe_router_norm(R, 2, 64, 8, 2, true);
    for (auto f : {bf, f8}) {
        // (At 132 SMs the first and the 12,300-row one take three rows a warp, the last block of
        // the latter partial: moe_gate_up_gemv.cu, launch_norm.)
        test_gate_up_norm(R, f, 1, 2560, 12288, false);
        test_gate_up_norm(R, f, 1, 2560, 12300, false);
        test_gate_up_norm(R, f, 2, 2560, 12288, false);
        test_gate_up_norm(R, f, 1, 1024, 3072, false);
        test_gate_up_norm(R, f, 2, 1024, 3072, false);
        test_gate_up_norm(R, f, 2, 44, 23, false);
        test_gate_up_norm(R, f, 3, 40, 37, true);
        test_gate_up_norm(R, f, 1, 2560, 1536, true);
        test_moe_front(R, f, 1, 2560, 64, 6, 3072, false);
        test_moe_front(R, f, 2, 2560, 64, 6, 3072, false);
        test_moe_front(R, f, 3, 2560, 64, 6, 3072, false);
        test_moe_front(R, f, 4, 2560, 64, 6, 3072, false);
        test_moe_front(R, f, 3, 44, 7, 3, 23, false);
        test_moe_front(R, f, 1, 40, 6, 2, 0, false);
        test_moe_front(R, f, 4, 64, 8, 2, 48, true);
        test_moe_front(R, f, 2, 1024, 64, 6, 3072, true);
        test_moe_down_shared(R, f, 1, 2560, 8, 6, 1536, 3072, true);
        test_moe_down_shared(R, f, 1, 2560, 8, 6, 1536, 3072, false);
        test_moe_down_shared(R, f, 4, 2560, 8, 6, 1536, 3072, true);
        test_moe_down_shared(R, f, 8, 2560, 64, 6, 1536, 3072, false);
        test_moe_down_shared(R, f, 3, 40, 6, 3, 24, 40, false);
        test_moe_down_shared(R, f, 2, 44, 5, 2, 23, 17, true);
        // Rows per warp (the cases above: the default): the 21B-A3B's widths at one row per warp,
        // and at 2 and 4 (FP8: every vector loaded first; BF16: 6 vectors a lane, one row after
        // another), 640-wide rows (unequal lanes) with 101 rows (a warp partly past the end, routed
        // and shared), odd widths (scalar paths), the shared slot before and after the wait.
        test_moe_down_shared(R, f, 1, 2560, 8, 6, 1536, 3072, true, scale_layout::channel, 1);
        test_moe_down_shared(R, f, 4, 2560, 8, 6, 1536, 3072, false, scale_layout::channel, 1);
        for (int rpw : {2, 4}) {
            test_moe_down_shared(R, f, 1, 2560, 8, 6, 1536, 3072, true, scale_layout::channel, rpw);
            test_moe_down_shared(R, f, 1, 2560, 8, 6, 1536, 3072, false, scale_layout::channel, rpw);
            test_moe_down_shared(R, f, 2, 101, 7, 4, 640, 96, false, scale_layout::channel, rpw);
            test_moe_down_shared(R, f, 3, 40, 6, 3, 24, 40, true, scale_layout::channel, rpw);
            test_moe_down_shared(R, f, 2, 44, 5, 2, 23, 17, false, scale_layout::channel, rpw);
        }
    }
    // moe_combine with the next layer's norm: the 21B-A3B's rows (a cluster of ten blocks), a
    // partial last block, sixteen blocks (the non-portable size), one block.
    test_moe_combine_norm(R, 1, 2560, 6, true);
    test_moe_combine_norm(R, 4, 2560, 6, false);
    test_moe_combine_norm(R, 2, 1000, 3, true);
    test_moe_combine_norm(R, 1, 4096, 8, true);
    test_moe_combine_norm(R, 3, 44, 2, false);
    // Slot counters between gate/up and down (decode's default): the 21B-A3B's widths at 1, 4
    // and 8 tokens, one and four rows per warp, odd widths (scalar paths, partial blocks), and
    // once without programmatic launch (the down kernel then starts after gate/up has finished).
    const bool pdl = cc_major >= 9;
    for (auto f : {bf, f8}) {
        test_moe_slot_counters(R, f, 1, 2560, 64, 6, 1536, 3072, 0, pdl);
        test_moe_slot_counters(R, f, 4, 2560, 64, 6, 1536, 3072, 0, pdl);
        test_moe_slot_counters(R, f, 8, 2560, 64, 6, 1536, 3072, 0, pdl);
        test_moe_slot_counters(R, f, 1, 2560, 64, 6, 1536, 3072, 1, pdl);
        test_moe_slot_counters(R, f, 2, 2560, 64, 6, 1536, 3072, 4, pdl);
        test_moe_slot_counters(R, f, 3, 44, 5, 2, 23, 17, 0, pdl);
    }
    test_moe_slot_counters(R, f8, 1, 2560, 64, 6, 1536, 3072, 0, false);
    // The routed gate/up on tensor cores (decode's FP8 default: one round of tiles; more rounds are
    // ES_CUDA_MOE_MMA's measuring aid): 1, 2, 3 and 8 rounds, 1 and 8 tokens, a width no multiple
    // of 16 (a partial last tile), 4,096-wide rows.
    for (int mma : {1, 2, 3, 8}) {
        test_moe_slot_counters(R, f8, 1, 2560, 64, 6, 1536, 3072, 0, pdl, mma);
        test_moe_slot_counters(R, f8, 8, 2560, 64, 6, 1536, 3072, 0, pdl, mma);
        test_moe_gemv(R, f8, 3, 4096, 8, 2, 40, scale_layout::channel, mma);
    }
    test_moe_gemv(R, f8, 1, 2560, 8, 6, 1536, scale_layout::channel, 2);
    // Every other instance of the tensor-core kernel (ES_CUDA_MOE_MMA_SHAPE): one round and one
    // resident wave, with slot counters at the 21B-A3B's widths, and at widths whose chunks do not
    // split evenly over the warps (a 1,600-wide row: 25 chunks) with a partial last tile.
    for (int w : {2, 4, 8})
        for (int rt : {1, 2})
            for (int d = 1; d <= 4; ++d) {
                const mma_shape m{w, rt, d, false};
                if (!moe_gate_up_mma_shape_ok(m) || (w == 4 && rt == 2 && d == 1)) continue;
                for (bool wave : {false, true}) {
                    const mma_shape mw{w, rt, d, wave};
                    test_moe_slot_counters(R, f8, 1, 2560, 64, 6, 1536, 3072, 0, pdl, 1, mw);
                    test_moe_gemv(R, f8, 3, 1600, 8, 2, 44, scale_layout::channel, 1, mw);
                }
            }
    test_moe_slot_counters(R, f8, 8, 2560, 64, 6, 1536, 3072, 0, pdl, 1, mma_shape{4, 2, 1, true});
    // The routed gate/up stacks tile-major (cuda_backend_params::moe_tile_major, the default for
    // FP8 where it applies): the layout's kernel, the tensor-core gate/up on it (1, 3 and 8 tokens, rounds,
    // one wave, with slot counters), the prefill grouped GEMM on it.
    test_fp8_tile_major(R, 3, 48, 1600);
    test_fp8_tile_major(R, 2, 1536, 2560);
    test_moe_gemv(R, f8, 1, 2560, 64, 6, 1536, scale_layout::channel, 1, {}, true);
    test_moe_gemv(R, f8, 3, 1600, 8, 2, 48, scale_layout::channel, 1, {}, true);
    test_moe_gemv(R, f8, 8, 2560, 16, 6, 1536, scale_layout::channel, 2, {}, true);
    test_moe_slot_counters(R, f8, 1, 2560, 64, 6, 1536, 3072, 0, pdl, 1, {}, true);
    test_moe_slot_counters(R, f8, 8, 2560, 64, 6, 1536, 3072, 0, pdl, 1, mma_shape{4, 2, 1, true}, true);
    test_grouped_gemm(R, f8, true, 150, 4, 16, 512, 256, 0, {}, scale_layout::channel, true);
    test_grouped_gemm(R, f8, true, 300, 2, 4, 256, 192, 0, {}, scale_layout::channel, true);
    // Hopper's warpgroup-MMA kernel (FP8, per-row scales; the default where it applies): the
    // tile-major and row-major gate/up and the down at the shapes above, the 21B-A3B's widths
    // (64 experts, top-6, 2,560 / 1,536), and edge groups with n not a multiple of the block's
    // outputs (64 glu, 128 plain) at k = 208 (the last k stage 16 wide).
    {
        const auto ch = scale_layout::channel;
        const std::vector<int32_t> edge{0, 1, 64, 65, 63, 128};
        test_grouped_gemm(R, f8, true, 150, 4, 16, 512, 256, 0, {}, ch, true, true);
        test_grouped_gemm(R, f8, true, 300, 2, 4, 256, 192, 0, {}, ch, true, true);
        test_grouped_gemm(R, f8, true, 96, 6, 64, 2560, 1536, 0, {}, ch, true, true);
        test_grouped_gemm(R, f8, true, 260, 2, 4, 2560, 1536, 0, {}, ch, true,
                          true); // tiles of 128 and partial
        for (bool glu : {true, false}) {
            test_grouped_gemm(R, f8, glu, 150, 4, 16, glu ? 512 : 256, glu ? 256 : 512, 0, {}, ch, false,
                              true);
            test_grouped_gemm(R, f8, glu, 300, 2, 4, 256, 192, 0, {}, ch, false, true);
            test_grouped_gemm(R, f8, glu, 107, 3, 6, 208, glu ? 67 : 131, 0, edge, ch, false, true);
        }
        test_grouped_gemm(R, f8, false, 96, 6, 64, 1536, 2560, 0, {}, ch, false, true);
        // FP8 activations (E4M3, E5M2): the same kernel with both operands FP8.
        for (int qa : {1, 2}) {
            test_grouped_gemm(R, f8, true, 260, 2, 4, 2560, 1536, 0, {}, ch, true, true, qa);
            test_grouped_gemm(R, f8, false, 260, 2, 4, 1536, 2560, 0, {}, ch, false, true, qa);
        }
        test_grouped_gemm(R, f8, true, 150, 4, 16, 512, 256, 0, {}, ch, true, true, 1);
        test_grouped_gemm(R, f8, true, 107, 3, 6, 208, 67, 0, edge, ch, false, true, 1);
        test_grouped_gemm(R, f8, false, 107, 3, 6, 208, 131, 0, edge, ch, false, true, 1);
        test_grouped_gemm(R, f8, false, 96, 6, 64, 1536, 2560, 0, {}, ch, false, true, 1);
        // FP8 activations on mma.sync (batched decode's sizes; Ada): the same shapes, and k not
        // a multiple of 16 (a short last chunk of codes; rows of 208 codes) on row-major stacks.
        for (int qa : {1, 2}) {
            test_grouped_gemm(R, f8, true, 96, 6, 64, 2560, 1536, 0, {}, ch, true, false, qa);
            test_grouped_gemm(R, f8, false, 96, 6, 64, 1536, 2560, 0, {}, ch, false, false, qa);
        }
        test_grouped_gemm(R, f8, true, 150, 4, 16, 512, 256, 0, {}, ch, false, false, 1);
        test_grouped_gemm(R, f8, true, 107, 3, 6, 200, 67, 8, edge, ch, false, false, 1);
        test_grouped_gemm(R, f8, false, 107, 3, 6, 200, 131, 8, edge, ch, false, false, 1);
    }
    test_moe_gemv(R, f8, 3, 1600, 8, 2, 44, scale_layout::channel, 1);
    test_moe_plan(R, 24, 6, 3);
    test_moe_plan(R, 2048, 64, 6);
    test_moe_plan(R, 2048, 64, 6, moe_grouped_gemm_wgmma_tile_rows);
    for (auto f : {bf, f8})
        for (bool glu : {true, false}) {
            test_grouped_gemm(R, f, glu, 37, 3, 6, glu ? 40 : 24, glu ? 24 : 40);
            test_grouped_gemm(R, f, glu, 150, 4, 16, glu ? 512 : 256, glu ? 256 : 512);
            // Several row tiles per expert, every copy on the 16-byte path.
            test_grouped_gemm(R, f, glu, 300, 2, 4, 256, 192);
            // Groups of 0, 1, 64, 65, 63 and 128 rows; n not a multiple of the column tile (64 glu,
            // 128 plain) and odd (scalar stores); the last k tile partial, with k odd (scalar
            // staging of A and W), k % 8 ≠ 0 on 16-byte aligned rows (A by cp.async with a short
            // last chunk, W scalar), k = 208 (everything by cp.async, last k tile 16 wide).
            const std::vector<int32_t> edge{0, 1, 64, 65, 63, 128};
            for (int64_t k : {135, 100, 208})
                test_grouped_gemm(R, f, glu, 107, 3, 6, k, glu ? 67 : 131, k == 100 ? 4 : 0, edge);
        }
    // The MoE kernels with 128×128 block scales (each expert its own grid): the channel rows' real
    // widths, and partial blocks in both dimensions (rows and k not multiples of 128).
    test_moe_gemv(R, f8, 1, 2560, 8, 6, 1536, blk);
    test_moe_gemv(R, f8, 3, 272, 6, 3, 144, blk);
    test_moe_gemv(R, f8, 2, 48, 12, 10, 16, blk); // ten choices: the gather kernel's one-at-a-time loop
    test_gate_up_norm(R, f8, 1, 2560, 12288, false, blk);
    test_gate_up_norm(R, f8, 2, 1024, 3072, false, blk);
    test_gate_up_norm(R, f8, 3, 272, 200, true, blk);
    test_gate_up_norm(R, f8, 1, 2560, 1536, true, blk);
    test_moe_front(R, f8, 1, 2560, 64, 6, 3072, false, blk);
    test_moe_front(R, f8, 4, 2560, 64, 6, 3072, false, blk);
    test_moe_front(R, f8, 3, 272, 7, 3, 200, false, blk);
    test_moe_down_shared(R, f8, 1, 2560, 8, 6, 1536, 3072, true, blk);
    test_moe_down_shared(R, f8, 4, 2560, 8, 6, 1536, 3072, false, blk);
    test_moe_down_shared(R, f8, 3, 200, 6, 3, 144, 272, false, blk);
    for (bool glu : {true, false}) {
        test_grouped_gemm(R, f8, glu, 150, 4, 16, glu ? 512 : 256, glu ? 256 : 512, 0, {}, blk);
        test_grouped_gemm(R, f8, glu, 300, 2, 4, 256, 192, 0, {}, blk);
        const std::vector<int32_t> edge{0, 1, 64, 65, 63, 128};
        for (int64_t k : {135, 100, 208})
            test_grouped_gemm(R, f8, glu, 107, 3, 6, k, glu ? 67 : 131, k == 100 ? 4 : 0, edge, blk);
    }
    test_moe_combine(R, 5, 40, 3);
    gemm_lt_context *ctx = nullptr;
    if (R.run("kernel", "gemm_lt context", [&] { ck(create_gemm_lt_context(&ctx, static_cast<size_t>(32) << 20), "create"); })) {
        test_gemm_lt(R, ctx, 64, 256, 512, false);
        test_gemm_lt(R, ctx, 100, 384, 1024, true);
        test_gemm_lt(R, ctx, 17, 1000, 64, false);
        const auto e4 = fp8_format::e4m3, e5 = fp8_format::e5m2;
        test_gemm_lt_fp8(R, ctx, cc_major, 9, 2560, 1024, false, e4);
        test_gemm_lt_fp8(R, ctx, cc_major, 64, 1024, 3072, true, e4);
        test_gemm_lt_fp8(R, ctx, cc_major, 300, 2560, 1024, true, e4);
        test_gemm_lt_fp8(R, ctx, cc_major, 17, 1008, 48, false, e4);
        test_gemm_lt_fp8(R, ctx, cc_major, 64, 2560, 1024, false, e5);
        test_gemm_lt_fp8(R, ctx, cc_major, 300, 1024, 3072, false, e5);
        test_gemm_lt_fp8(R, ctx, cc_major, 9, 1024, 3072, true, e5);
        destroy_gemm_lt_context(ctx);
    }
    test_argmax(R, 3, 103424);
    for (size_t bytes : {size_t(16), size_t(368), size_t(1344), size_t(5000), size_t(70000)})
        for (size_t offset : {size_t(0), size_t(3)}) test_copy_bytes(R, bytes, offset);
    test_copy_bytes_fed(R, 1, 1);
    test_copy_bytes_fed(R, 9, 4);
    test_copy_bytes_fed(R, 64, 64);
    for (int32_t N : {1, 64, 256}) {
        test_topk_logits(R, 1, 103424, N);
        test_topk_logits(R, 8, 103424, N);
        test_topk_logits(R, 8, 3001, N); // a small odd vocabulary: two blocks per row, one partial
    }
    test_topk_logits(R, 5, 97, 64); // N below V in one block; and 5 rows
    test_topk_logits(R, 2, 40, 64); // N > V: unused slots id -1
    test_topk_logits(R, 64, 103424, 64); // the largest decode batch
    test_topk_logits(R, 3, 6144, 63);    // V a multiple of the block's 2048; N odd
    test_topk_logits(R, 8, 2049, 64);    // a last block of one value
    test_topk_logits(R, 8, 600000, 64);  // more lists than phase 2 holds in registers (293 blocks)
}

// ---- end to end --------------------------------------------------------------------------------

std::vector<int32_t> read_prompt(const std::filesystem::path &dir) {
    std::ifstream f(dir / "reference.json");
    std::stringstream ss;
    ss << f.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.contains("prompt_ids")) throw test_failure("reference.json without prompt_ids");
    return j["prompt_ids"].get<std::vector<int32_t>>();
}

// The token counts of logits_prefill's steps (the twin model needs them: FP8 activations are
// quantized only in steps of more than cuda_gemv_max_tokens tokens).
constexpr int32_t k_prefill_split = 10;
std::vector<int64_t> prefill_steps(int64_t T) {
    const int64_t split = std::min<int64_t>(k_prefill_split, T);
    std::vector<int64_t> steps{split};
    if (T > split) steps.push_back(T - split);
    return steps;
}

// Prefill in two chunks through a non-contiguous block table (as the CPU reference test).
std::vector<float> logits_prefill(backend &be, const std::vector<int32_t> &prompt,
                                  routing_record *first_chunk_routing = nullptr) {
    const int32_t T = int32_t(prompt.size()), split = std::min<int32_t>(k_prefill_split, T);
    // Blocks of 16 positions, the first four out of order (3, 1, 0, 2), then in order.
    const int32_t n_blocks = std::max<int32_t>(4, (T + 15) / 16);
    auto s = be.init_kv_cache({16, n_blocks});
    if (!s) throw test_failure(s.message());
    std::vector<float> logits;
    batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = {3, 1, 0, 2};
    for (int32_t i = 4; i < n_blocks; ++i) b.seqs[0].block_table.push_back(i);
    b.seqs[0].block_table.resize(static_cast<size_t>((T + 15) / 16));
    for (int32_t start : {0, split}) {
        const int32_t end = start == 0 ? split : T;
        if (end <= start) continue;
        b.tokens.assign(prompt.begin() + start, prompt.begin() + end);
        b.pos.clear();
        b.seq.assign(b.tokens.size(), 0);
        b.logits_rows.clear();
        for (int32_t i = start; i < end; ++i) {
            b.pos.push_back(i);
            b.logits_rows.push_back(i - start);
        }
        forward_output out;
        auto st = be.forward(b, out);
        if (!st) throw test_failure(st.message());
        if (start == 0 && first_chunk_routing) *first_chunk_routing = out.routing;
        logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    }
    return logits;
}

// Decode steps asking for N logit candidates (batch::top_n, inside the decode graph): 64 at a
// temperature (topk_logits after the head), or one at T = 0 as a greedy sampler asks (the pick in
// the head's GEMV where the vocabulary takes the rows kernel, else topk_logits at n_top = 1): each
// step's candidates against the twin over the same step's full row (backend::logits_row).
// Returns {candidate slots differing, max relative sum error, a wrong logits_row answer (0/1)}.
std::array<double, 3> candidates_decode(backend &be, const std::vector<int32_t> &prompt, int32_t N = 64,
                                        float temperature = 0.8f) {
    auto s = be.init_kv_cache({16, 4});
    if (!s) throw test_failure(s.message());
    const int64_t V = be.config().n_vocab;
    batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = {2, 0};
    b.seqs[0].block_table.resize(static_cast<size_t>((prompt.size() + 15) / 16));
    b.top_n = N;
    b.temperatures = {temperature};
    std::array<double, 3> r{0, 0, 0};
    std::vector<float> row(static_cast<size_t>(V)), tv(N), mx(1);
    std::vector<int32_t> ti(N);
    std::vector<double> ts(1);
    for (size_t i = 0; i < prompt.size(); ++i) {
        b.tokens = {prompt[i]};
        b.pos = {int32_t(i)};
        b.seq = {0};
        b.logits_rows = {0};
        forward_output out;
        auto st = be.forward(b, out);
        if (!st) throw test_failure(st.message());
        const logit_candidate_rows &c = out.candidates;
        if (c.top_n != N || c.ids.size() != size_t(N) || c.logits.size() != size_t(N) ||
            c.row_sum.size() != 1 || !out.logits.empty())
            throw test_failure("forward() with top_n did not return " + std::to_string(N) +
                               " candidates instead of the row");
        if (auto g = be.logits_row(0, row); !g) throw test_failure(g.message());
        r[2] = std::max(r[2], be.logits_row(1, row).ok() ? 1.0 : 0.0); // no such row: must fail
        if (auto g = be.logits_row(0, row); !g) throw test_failure(g.message());
        topk_logits_params h;
        h.logits = row.data();
        h.temperatures = b.temperatures.data();
        h.ids = ti.data();
        h.values = tv.data();
        h.row_max = mx.data();
        h.row_sum = ts.data();
        h.n_rows = 1;
        h.n_vocab = V;
        h.n_top = N;
        topk_logits_ref(h);
        for (int32_t j = 0; j < N; ++j)
            r[0] += c.ids[size_t(j)] != ti[size_t(j)] ||
                    std::memcmp(&c.logits[size_t(j)], &tv[size_t(j)], 4) != 0;
        r[1] = std::max(r[1], std::abs(c.row_sum[0] - ts[0]) / std::max(ts[0], 1e-30));
    }
    return r;
}

// One token per step (decode path, CUDA graphs from the second step on).
std::vector<float> logits_decode(backend &be, const std::vector<int32_t> &prompt) {
    auto s = be.init_kv_cache({16, 4});
    if (!s) throw test_failure(s.message());
    std::vector<float> logits;
    batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = {2, 0};
    b.seqs[0].block_table.resize(static_cast<size_t>((prompt.size() + 15) / 16));
    for (size_t i = 0; i < prompt.size(); ++i) {
        b.tokens = {prompt[i]};
        b.pos = {int32_t(i)};
        b.seq = {0};
        b.logits_rows = {0};
        forward_output out;
        auto st = be.forward(b, out);
        if (!st) throw test_failure(st.message());
        logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    }
    return logits;
}

// The routed gate/up stacks tile-major (cuda_backend_params::moe_tile_major) end to end: random
// FP8 weights of the 21B-A3B's widths, two layers (one dense, one MoE), loaded both ways from one
// seed; the kernels read each stack in its own order but add the same products in the same order.
// The one-token GEMVs of n = 2,560 rows split k and add the parts with atomics (gemv.cuh), so two
// runs of one load may already differ in the last bits, and 24 decode steps amplify that: on the
// H200 the decode rows give 0 … 2.5e-10, rarely up to ~1.3e-8 (re-runs of one build: 0, 0,
// 7.7e-11, 7.7e-11). A stack read in the wrong
// order gives ~1, so the limit is an NMSE of 1e-5; the logits differing in any bit are information.
void test_tile_major_model(runner &R) {
    const std::string name =
        "ernie-4.5-21b-a3b widths, 2 layers, random fp8 weights, routed gate/up tile-major";
    R.run("model", name, [&] {
        auto cfg = model_config_for_shape("ernie-4.5-21b-a3b");
        if (!cfg) throw test_failure(cfg.message());
        cfg->n_layer = 2; // layer 0 dense, layer 1 MoE (as bench --layers 2)
        cfg->moe_layer_end = std::min<int64_t>(cfg->moe_layer_end, cfg->n_layer - 1);
        cfg->moe_layer_start = std::min(cfg->moe_layer_start, cfg->moe_layer_end);
        if (auto v = validate_model_config(*cfg); !v) throw test_failure(v.message());
        std::vector<int32_t> prompt(24);
        std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg->n_vocab - 1));
        for (auto &t : prompt) t = tok(rng());
        struct run_out {
            std::vector<float> pre, dec;
            std::string status;
        };
        auto run = [&](bool tm) {
            cuda_backend_params p;
            p.precision = weight_precision::fp8;
            p.moe_tile_major = tm;
            auto be = make_cuda_backend_random(*cfg, 1234, p);
            if (!be) throw test_failure(be.message());
            run_out r;
            r.pre = logits_prefill(**be, prompt);
            r.dec = logits_decode(**be, prompt);
            if (auto *cb = dynamic_cast<cuda_backend *>(be->get())) r.status = cb->graph_status();
            return r;
        };
        const run_out rm = run(false), tm = run(true);
        const bool taken = tm.status.find("stacks tile-major") != std::string::npos &&
                           tm.status.find("asked for") == std::string::npos;
        R.add("model", name + " layout", "tile-major taken (1)", taken ? 1.0 : 0.0, 1.0, false, tm.status);
        R.add("model", name + " prefill", "NMSE vs the row-major load", nmse(tm.pre, rm.pre), 1e-5);
        R.info("model", name + " prefill", "logits differing in any bit", bit_diffs(tm.pre, rm.pre));
        R.add("model", name + " decode", "NMSE vs the row-major load", nmse(tm.dec, rm.dec), 1e-5);
        R.info("model", name + " decode", "logits differing in any bit", bit_diffs(tm.dec, rm.dec));
    });
}

// Overlapped greedy decode (backend::submit, each step's token fed on the GPU from the step before)
// against the same decode one forward() at a time with the token picked on the host, from an
// empty cache: {steps whose token differs, steps whose candidate value differs in any bit}.
std::array<double, 2> overlapped_vs_serial(backend &be, int32_t steps, int32_t first_token) {
    auto run = [&](bool overlapped, std::vector<int32_t> &tokens, std::vector<float> &values) {
        auto s = be.init_kv_cache({16, (steps + 15) / 16 + 1});
        if (!s) throw test_failure(s.message());
        batch b;
        b.seqs.resize(1);
        for (int32_t i = 0; i < (steps + 15) / 16 + 1; ++i) b.seqs[0].block_table.push_back(i);
        b.seq = {0};
        b.logits_rows = {0};
        b.top_n = 1;
        b.temperatures = {0.0f};
        forward_output out;
        auto take = [&] {
            if (out.candidates.top_n != 1 || out.candidates.ids.empty())
                throw test_failure("a greedy step did not return its candidate");
            tokens.push_back(out.candidates.ids[0]);
            values.push_back(out.candidates.logits[0]);
        };
        int32_t token = first_token;
        for (int32_t i = 0; i < steps; ++i) {
            b.pos = {i};
            b.tokens = {overlapped && i > 0 ? -1 : token};
            if (!overlapped) {
                if (auto f = be.forward(b, out); !f) throw test_failure(f.message());
                take();
                token = tokens.back();
                continue;
            }
            if (auto f = be.submit(b); !f) throw test_failure(f.message());
            if (i == 0) continue;
            if (auto f = be.finish(out); !f) throw test_failure(f.message());
            take();
        }
        if (overlapped) {
            if (auto f = be.finish(out); !f) throw test_failure(f.message());
            take();
        }
    };
    std::vector<int32_t> ts, to;
    std::vector<float> vs, vo;
    run(false, ts, vs);
    run(true, to, vo);
    std::array<double, 2> r{0, 0};
    for (size_t i = 0; i < ts.size() && i < to.size(); ++i) {
        r[0] += ts[i] != to[i];
        r[1] += std::memcmp(&vs[i], &vo[i], 4) != 0;
    }
    r[0] += double(std::max(ts.size(), to.size()) - std::min(ts.size(), to.size()));
    return r;
}

// The greedy pick in the head's GEMV (gemv.cuh: gemv_pick) end to end: the reference checkpoints'
// vocabularies (≤ 6,000) are below the rows kernel's 32,768, so their greedy rows take topk_logits
// at n_top = 1; random weights of the 0.3B's widths (103,424 rows), two layers, BF16 and FP8 (the
// head BF16, and FP8 with --fp8-head), one-candidate greedy steps and 64-candidate sampled steps
// in the same decode graphs, each step's candidates against the twin over its full row; and the
// same greedy decode overlapped (submit, fed tokens) against it one step at a time.
void test_head_pick_model(runner &R) {
    for (const bool fp8 : {false, true})
        for (const bool fp8_head : {false, true}) {
            if (fp8_head && !fp8) continue;
            const std::string name = std::string("ernie-4.5-0.3b widths, 2 layers, random ") +
                                     (fp8 ? fp8_head ? "fp8 weights and head" : "fp8 weights" : "bf16 weights") +
                                     ", greedy pick in the head";
            R.run("model", name, [&] {
                auto cfg = model_config_for_shape("ernie-4.5-0.3b");
                if (!cfg) throw test_failure(cfg.message());
                cfg->n_layer = 2;
                if (auto v = validate_model_config(*cfg); !v) throw test_failure(v.message());
                std::vector<int32_t> prompt(20);
                std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg->n_vocab - 1));
                for (auto &t : prompt) t = tok(rng());
                cuda_backend_params p;
                p.precision = fp8 ? weight_precision::fp8 : weight_precision::bf16;
                p.fp8.head = fp8_head;
                auto be = make_cuda_backend_random(*cfg, 4321, p);
                if (!be) throw test_failure(be.message());
                const auto pick = candidates_decode(**be, prompt, 1, 0.0f);
                R.add("model", name, "greedy candidate differing from the twin over logits_row (exact)", pick[0], 0.0);
                R.add("model", name, "greedy row sum (T = 0) not 0", pick[1], 0.0);
                const auto cand = candidates_decode(**be, prompt);
                R.add("model", name, "64 candidates' slots differing from the twin over logits_row (exact)", cand[0],
                      0.0);
                R.add("model", name, "64 candidates' row sum max rel err", cand[1], 1e-5);
                // 40 steps: graphs of one to two KV splits, the fed tokens' graphs and the eager first steps.
                const auto ov = overlapped_vs_serial(**be, 40, prompt[0]);
                R.add("model", name, "overlapped decode (fed tokens): steps whose token differs from serial", ov[0], 0.0);
                // (information: the one-token GEMVs' split-k atomics may change the last bits of a run)
                R.info("model", name, "overlapped decode (fed tokens): steps whose logit differs from serial (bits)",
                       ov[1]);
            });
        }
}

double top1_agreement(const std::vector<float> &a, const std::vector<float> &b, int64_t V) {
    const int64_t T = int64_t(b.size()) / V;
    if (int64_t(a.size()) != T * V || T == 0) return 0.0;
    int64_t same = 0;
    for (int64_t t = 0; t < T; ++t)
        same += std::max_element(a.begin() + t * V, a.begin() + (t + 1) * V) - (a.begin() + t * V) ==
                std::max_element(b.begin() + t * V, b.begin() + (t + 1) * V) - (b.begin() + t * V);
    return double(same) / double(T);
}

// The routed experts' FP8 activations (the grouped GEMM on warpgroup MMA with act_quantize's
// codes): the MoE reference checkpoints whose widths allow it, a 160-token random prompt (its
// second prefill step, 150 tokens, has enough slots per expert), FP8 weights with E4M3
// activations, against the twin model that quantizes the routed experts' activations as the
// backend does — and, as information, against the twin that does not (how far apart the two
// readings are, so that the checked limit is seen to tell them apart).
void test_routed_fp8_model(runner &R, const std::filesystem::path &data_dir) {
    if (!moe_grouped_gemm_fp8_mma_device()) {
        R.info("model", "routed FP8 activations", "skipped", 0, "needs compute capability 8.9 or later");
        return;
    }
    for (const char *mname : {"moe-shared", "moe-sharded"}) {
        const std::filesystem::path dir = data_dir / mname;
        if (!std::filesystem::exists(dir / "config.json")) continue;
        const std::string name = std::string(mname) + " routed fp8 activations";
        R.run("model", name, [&] {
            auto cfg = load_model_config(dir);
            auto store = weight_store::open_dir(dir);
            if (!cfg || !store) throw test_failure(!cfg ? cfg.message() : store.message());
            auto bound = bind_model_tensors(*cfg, **store);
            if (!bound) throw test_failure(bound.message());
            std::vector<int32_t> prompt(160);
            std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg->n_vocab - 1));
            for (auto &t : prompt) t = tok(rng());
            model_load_params lp;
            lp.need_tokenizer = false;
            lp.kind = backend_kind::cuda;
            lp.precision = weight_precision::fp8;
            lp.activations = activation_format::e4m3;
            auto m = load_model(dir, lp);
            if (!m) throw test_failure(m.message());
            const auto pre = logits_prefill(*(*m)->be, prompt);
            auto twin = [&](bool routed) {
                twin_options o;
                o.activations = activation_format::e4m3;
                o.steps = prefill_steps(int64_t(prompt.size()));
                o.grouped_fp8 = routed;
                auto tw = twin_forward_logits(*cfg, *bound, prompt, weight_precision::fp8, o);
                if (!tw) throw test_failure(tw.message());
                return std::move(*tw);
            };
            const auto tw_routed = twin(true), tw_plain = twin(false);
            R.add("model", name, "NMSE vs twin model (routed FP8 activations)", nmse(pre, tw_routed), 5e-2);
            R.info("model", name, "NMSE vs twin model with BF16 routed activations", nmse(pre, tw_plain));
            R.info("model", name, "NMSE between the two twins", nmse(tw_plain, tw_routed));
        });
    }
}

// The FP8 head copy's placement slack (cuda_backend.cpp: head_copy_alloc_bytes, whose measuring aid
// forces it here on a tiny checkpoint): the memory report names it and the weights figure leaves
// it out; a KV cache that needs the room takes it back (give_back_head_slack_for), and the
// logits stay the same bits.
void test_head_slack(runner &R, const std::filesystem::path &dir) {
    const std::string name = dir.filename().string() + " fp8 head copy's placement slack";
    R.run("model", name, [&] {
        const std::vector<int32_t> prompt = read_prompt(dir);
        model_load_params lp;
        lp.need_tokenizer = false;
        lp.kind = backend_kind::cuda;
        lp.precision = weight_precision::fp8;
        lp.fp8.head = true;
        ::setenv("ES_CUDA_HEAD_ALLOC_MIB", "1024", 1);
        auto m = load_model(dir, lp);
        ::unsetenv("ES_CUDA_HEAD_ALLOC_MIB");
        if (!m) throw test_failure(m.message());
        auto *cb = dynamic_cast<cuda_backend *>((*m)->be.get());
        if (!cb) throw test_failure("not the CUDA backend: " + (*m)->be->name());
        const cuda_memory_report r0 = cb->memory_report();
        const model_config &c = (*m)->config;
        const double est = double(cuda_weight_bytes(c, lp.precision, lp.fp8)),
                     copy = est - double(cuda_weight_bytes(c, lp.precision, fp8_policy{}));
        R.add("model", name, "weights: |estimate − reported| (bytes)",
              std::abs(est - double(r0.weights_bytes)), 0.0);
        R.add("model", name, "|slack − (1 GiB − the copy)| (bytes)",
              std::abs(double(r0.placement_slack_bytes) - (double(1u << 30) - copy)), 0.0);
        const std::vector<float> before = logits_prefill(*cb, prompt);
        // A KV cache that leaves less than a twentieth of the device free beside the slack.
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) throw test_failure("cudaMemGetInfo failed");
        const size_t block = cb->kv_block_bytes();
        if (free_b < total_b / 20 + 64 * block)
            throw test_failure("too little free device memory for this test");
        const size_t want = free_b - total_b / 40;
        const int64_t n_blocks = std::clamp<int64_t>(int64_t(want / block), 4, INT32_MAX / 2);
        auto s = cb->init_kv_cache({16, int32_t(n_blocks)});
        if (!s) throw test_failure("a KV cache of " + std::to_string(n_blocks) + " blocks: " + s.message());
        R.add("model", name, "slack after a KV cache that needs it (bytes)",
              double(cb->memory_report().placement_slack_bytes), 0.0);
        const std::vector<float> after = logits_prefill(*cb, prompt);
        if (after.size() != before.size()) throw test_failure("the logits changed size after the move");
        double differ = 0.0;
        for (size_t i = 0; i < before.size(); ++i)
            differ += std::memcmp(&before[i], &after[i], sizeof(float)) != 0;
        R.add("model", name, "logits differing after the move (bits)", differ, 0.0);
    });
}

void run_model_tests(runner &R, const std::filesystem::path &data_dir) {
    std::vector<std::filesystem::path> dirs;
    std::error_code ec;
    for (const auto &e : std::filesystem::directory_iterator(data_dir, ec))
        if (e.is_directory() && std::filesystem::exists(e.path() / "ref_logits.npy")) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    if (dirs.empty()) {
        R.failed("model", data_dir.string(), "no reference checkpoints (folders with ref_logits.npy) found");
        return;
    }
    test_head_slack(R, dirs.front());
    for (const auto &dir : dirs) {
        const std::string mname = dir.filename().string();
        std::vector<int32_t> prompt;
        std::vector<float> golden, cpu;
        routing_record cpu_routing;
        int64_t V = 0;
        const bool ready = R.run("model", mname + " cpu reference", [&] {
            prompt = read_prompt(dir);
            auto g = read_npy_f32(dir / "ref_logits.npy");
            if (!g) throw test_failure(g.message());
            golden = g->data;
            model_load_params lp;
            lp.need_tokenizer = false;
            auto m = load_model(dir, lp);
            if (!m) throw test_failure(m.message());
            V = (*m)->config.n_vocab;
            cpu = logits_prefill(*(*m)->be, prompt, &cpu_routing);
            R.add("model", mname + " cpu", "NMSE vs HF", nmse(cpu, golden), 1e-6);
        });
        if (!ready || cpu.empty()) continue;
        struct variant {
            weight_precision prec;
            activation_format act; // of prefill-sized FP8 linears (the backend's default: e4m3)
            bool decode;           // also the token-by-token decode (BF16 activations whatever act says)
            fp8_policy policy;     // FP8: the head and o_proj
            kv_cache_dtype kv = kv_cache_dtype::bf16;
        };
        fp8_policy flipped; // the other side of both choices of the per-layer policy
        flipped.head = true;
        flipped.attn_out = false;
        fp8_policy blk, blk_flipped; // 128×128 block scales (--fp8-scales block128)
        blk.scales = blk_flipped.scales = scale_layout::block128;
        blk_flipped.head = true;
        blk_flipped.attn_out = false;
        for (const variant v :
             {variant{weight_precision::bf16, activation_format::e4m3, true, {}},
              variant{weight_precision::fp8, activation_format::e4m3, true, {}},
              variant{weight_precision::fp8, activation_format::e5m2, false, {}},
              variant{weight_precision::fp8, activation_format::e4m3, true, flipped},
              variant{weight_precision::bf16, activation_format::e4m3, true, {}, kv_cache_dtype::fp8},
              variant{weight_precision::fp8, activation_format::e4m3, true, {}, kv_cache_dtype::fp8},
              variant{weight_precision::fp8, activation_format::e4m3, true, blk},
              variant{weight_precision::fp8, activation_format::e4m3, true, blk_flipped}}) {
            const weight_precision prec = v.prec;
            const bool fp8 = prec == weight_precision::fp8;
            const bool blk_scales = fp8 && v.policy.scales == scale_layout::block128;
            const std::string pn =
                mname +
                (fp8 ? std::string(" fp8 ") + activation_format_name(v.act) + " act" +
                           (v.policy.head ? ", head fp8" : "") + (v.policy.attn_out ? "" : ", o_proj bf16") +
                           (blk_scales ? ", block128 scales" : "")
                     : " bf16") +
                (v.kv == kv_cache_dtype::fp8 ? ", fp8 KV" : "");
            // Against the twin model (the same numerics on the CPU) the GPU must agree closely;
            // against HF the limit is what BF16 activations / FP8 weights and activations cost on
            // these tiny random models (the twin model measures the same figures without a GPU).
            // FP8 prefill linears whose shape cuBLASLt's FP8 GEMM cannot take (k or n not a
            // multiple of 16: many in these tiny models) dequantize weights to BF16 for cuBLASLt,
            // as the twin model does too; only fp32 summation order differs (the kernel rows:
            // ~1e-8), but FP8 activations turn such differences into whole-step code changes now
            // and then (an element, or a row's amax and so its scale, crossing a BF16 rounding
            // boundary, then an FP8 one), and on these tiny random models, whose logits amplify
            // per-linear noise ~20×, that measured 2e-3 – 2e-2 (E5M2 and routing flips the most:
            // H200, 2026-11-29) — the size of what quantizing activations costs at all. So the
            // end-to-end limit for FP8 activations is loose (5e-2: a wrong scale, layout or path
            // gives ≫ 0.1); the exact checks are the act_quantize (identical codes and scales) and
            // gemm_lt fp8 (NMSE ≤ 1e-5) kernel rows above. E5M2 activations (two mantissa bits) cost the
            // most: the twin model measures 0.03–0.1 against HF on these models (E4M3: ≤ 0.042).
            //
            // An FP8 KV cache rounds every key and value to 3 mantissa bits. Against the twin, which
            // stores and reads the same E4M3 codes, the only difference is a value that the GPU
            // computes within fp32 rounding of an E4M3 rounding boundary landing on the other
            // code: 16× a BF16 step, about 16× rarer, so NMSE about 16× what a BF16 cache shows —
            // the limits are 10× (a wrong layout, scale or conversion of the cache costs ≫ 1e-2).
            // Against HF the KV rounding adds to the weights' (limit 10× BF16's for BF16 weights).
            const bool kv8 = v.kv == kv_cache_dtype::fp8;
            const double hf_limit = !fp8 ? (kv8 ? 5e-2 : 5e-3) : v.act == activation_format::e5m2 ? 0.2 : 0.1;
            // Block scales: prefill-sized steps take BF16 activations and dequantized weights (the
            // backend's activation_note says so), hence the BF16-activation limit; the routed
            // experts' grouped GEMM rounds each block-scaled weight to BF16 (fp8_dequantize's value)
            // where the twin keeps the GEMV's fp32 product — ~2⁻⁹ per weight, far inside it.
            const double twin_limit = kv8 ? 1e-3 : 1e-4,
                         twin_limit_prefill = !fp8                                             ? twin_limit
                                              : v.act == activation_format::bf16 || blk_scales ? 2e-3
                                                                                               : 5e-2;
            R.run("model", pn, [&] {
                auto twin_of = [&](const twin_options &to) {
                    auto cfg = load_model_config(dir);
                    auto store = weight_store::open_dir(dir);
                    if (!cfg || !store) throw test_failure(!cfg ? cfg.message() : store.message());
                    auto bound = bind_model_tensors(*cfg, **store);
                    if (!bound) throw test_failure(bound.message());
                    twin_options tt = to;
                    tt.fp8 = v.policy;
                    tt.kv_cache = v.kv;
                    auto tw = twin_forward_logits(*cfg, *bound, prompt, prec, tt);
                    if (!tw) throw test_failure(tw.message());
                    return std::move(*tw);
                };
                model_load_params lp;
                lp.need_tokenizer = false;
                lp.kind = backend_kind::cuda;
                lp.precision = prec;
                lp.activations = v.act;
                lp.fp8 = v.policy;
                lp.kv_cache = v.kv;
                if (blk_scales) {
                    // Block scales load where every FP8 matrix's k is a multiple of 16 (the
                    // kernels' 16-byte vectors); elsewhere the load must be refused with a message
                    // naming the option.
                    auto cfg = load_model_config(dir);
                    if (!cfg) throw test_failure(cfg.message());
                    const model_config &mc = *cfg;
                    bool loads = mc.n_embd % 16 == 0 && (!v.policy.attn_out || mc.q_dim() % 16 == 0);
                    for (int64_t il = 0; il < mc.n_layer; ++il)
                        loads = loads && (mc.is_moe_layer(il) ? mc.n_ff_exp % 16 == 0 : mc.n_ff % 16 == 0);
                    if (!loads) {
                        auto refused = load_model(dir, lp);
                        R.add("model", pn + " load",
                              "block scales on shapes they cannot take: not refused by name",
                              !refused && refused.message().find("--fp8-scales block128") != std::string::npos
                                  ? 0.0
                                  : 1.0,
                              0.0);
                        if (!refused) R.info("model", pn + " load", "refusal", 0.0, refused.message());
                        return;
                    }
                }
                auto m = load_model(dir, lp);
                if (!m) throw test_failure(m.message());
                backend &be = *(*m)->be;
                if (blk_scales && be.name().find("block128") == std::string::npos)
                    throw test_failure("the backend's name does not mention its block scales: " + be.name());
                if (kv8 && be.name().find("fp8 KV") == std::string::npos)
                    throw test_failure("the backend's name does not mention its FP8 KV cache: " + be.name());
                // The will-it-fit estimate's weight bytes must be what the backend allocated.
                const double est = double(cuda_weight_bytes((*m)->config, prec, v.policy)), got = double(be.weights_bytes());
                R.add("model", pn + " load", "weights: |estimate − allocated| / allocated", std::abs(est - got) / got, 0.0);
                routing_record rr;
                const auto pre = logits_prefill(be, prompt, &rr);
                // The KV budget's unit (engine.cpp plans from it): the pools' real size per block.
                const model_config &mc = (*m)->config;
                const double kv_expect =
                    16.0 * double(mc.kv_dim()) * 2.0 * (kv8 ? 1.0 : 2.0) * double(mc.n_layer);
                R.add("model", pn + " KV", "|kv_block_bytes − block·kv_dim·2·element·layers|",
                      std::abs(double(be.kv_block_bytes()) - kv_expect), 0.0);
                // The twin of the prefill uses the activations the backend used (a refused FP8
                // GEMM falls back to BF16 activations: reported here, and as a failed kernel row).
                const cuda_backend *cb = linked_cuda_module().as_cuda_backend(&be);
                if (!cb) throw test_failure("the loaded backend is not the CUDA backend");
                twin_options tp;
                tp.activations = cb->activations();
                tp.grouped_fp8 = moe_grouped_gemm_fp8_mma_device();
                tp.steps = prefill_steps(int64_t(prompt.size()));
                if (fp8)
                    R.info("model", pn + " prefill",
                           std::string("activations in effect: ") + activation_format_name(tp.activations),
                           0.0, cb->activation_note().empty() ? "info" : cb->activation_note());
                const auto twin = twin_of(tp);
                R.add("model", pn + " prefill", "NMSE vs twin model", nmse(pre, twin), twin_limit_prefill);
                R.add("model", pn + " prefill", "NMSE vs HF", nmse(pre, golden), hf_limit);
                R.info("model", pn + " prefill", "NMSE vs CPU backend", nmse(pre, cpu));
                R.info("model", pn + " prefill", "top-1 agreement with HF", top1_agreement(pre, golden, V));
                R.info("model", pn + " prefill", "top-1 agreement with the twin model", top1_agreement(pre, twin, V));
                // The workspace allocator's figures as telemetry gets them (backend::memory()):
                // coherent after prefill steps and after graph-replayed decode steps.
                auto memory_rows = [&](const std::string &stage) {
                    const backend_memory bm = be.memory();
                    const bool coherent = bm.in_use > 0 && bm.in_use <= bm.reserved &&
                                          bm.largest_free <= bm.reserved - bm.in_use && bm.device_total > 0 &&
                                          bm.device_free <= bm.device_total;
                    R.add("model", pn + " memory " + stage,
                          "workspace figures wrong (0: 0 < in use ≤ reserved, largest free ≤ reserved − in use)",
                          coherent ? 0.0 : 1.0, 0.0);
                    const uint64_t free_ws = bm.reserved - std::min(bm.reserved, bm.in_use);
                    R.info("model", pn + " memory " + stage, "workspace reserved (MiB)", double(bm.reserved) / 1048576.0,
                           "in use " + std::to_string(bm.in_use >> 10) + " KiB, largest free " +
                               std::to_string(bm.largest_free >> 10) + " KiB, fragmentation " +
                               std::to_string(free_ws ? 1.0 - double(bm.largest_free) / double(free_ws) : 0.0));
                };
                memory_rows("after prefill");
                if (!v.decode) return;
                twin_options td; // decode steps of one token: BF16 activations everywhere
                td.activations = activation_format::bf16;
                td.steps.assign(prompt.size(), 1);
                const auto twin_dec = twin_of(td);
                const auto dec = logits_decode(be, prompt);
                R.add("model", pn + " decode", "NMSE vs twin model", nmse(dec, twin_dec), twin_limit);
                R.add("model", pn + " decode", "NMSE vs HF", nmse(dec, golden), hf_limit);
                R.info("model", pn + " decode", "top-1 agreement with HF", top1_agreement(dec, golden, V));
                const auto cand = candidates_decode(be, prompt);
                R.add("model", pn + " decode candidates",
                      "slots differing from the twin over logits_row (exact)", cand[0], 0.0);
                R.add("model", pn + " decode candidates", "row sum max rel err", cand[1], 1e-5);
                R.add("model", pn + " decode candidates", "logits_row accepted a row the step did not have",
                      cand[2], 0.0);
                const auto pick = candidates_decode(be, prompt, 1, 0.0f);
                R.add("model", pn + " decode greedy candidate",
                      "id or value differing from the twin over logits_row (exact)", pick[0], 0.0);
                R.add("model", pn + " decode greedy candidate", "row sum (T = 0) not 0", pick[1], 0.0);
                const auto ov = overlapped_vs_serial(be, 24, prompt[0]);
                R.add("model", pn + " decode overlapped", "steps whose token differs from serial (fed tokens)", ov[0],
                      0.0);
                R.info("model", pn + " decode overlapped", "steps whose logit differs from serial (bits)", ov[1]);
                memory_rows("after decode");
                if (!cpu_routing.ids.empty()) {
                    // Router choices of the first chunk against the CPU's: set overlap per token.
                    double same = 0, total = 0;
                    for (size_t l = 0; l < std::min(rr.ids.size(), cpu_routing.ids.size()); ++l) {
                        const int64_t K = rr.n_expert_used, T = int64_t(rr.ids[l].size()) / std::max<int64_t>(K, 1);
                        for (int64_t t = 0; t < T; ++t) {
                            std::set<int16_t> a(rr.ids[l].begin() + t * K, rr.ids[l].begin() + (t + 1) * K);
                            for (int64_t j = 0; j < K; ++j) same += a.count(cpu_routing.ids[l][t * K + j]);
                            total += double(K);
                        }
                    }
                    R.info("model", pn + " routing", "top-k overlap with CPU router", total > 0 ? same / total : 0.0);
                }
            });
        }
    }
}

} // namespace

selftest_report run_cuda_selftest(const selftest_options &o) {
    // load_model(backend_kind::cuda) below uses the CUDA code linked here, not a module file.
    detail::use_linked_cuda_module(&linked_cuda_module());
    selftest_report rep;
    auto dev = probe_cuda_device(0);
    if (!dev) {
        rep.skipped = true;
        rep.skip_reason = dev.message();
        return rep;
    }
    char cc[32];
    std::snprintf(cc, sizeof cc, "%d.%d", dev->cc_major, dev->cc_minor);
    rep.device = dev->name + " (compute capability " + cc + ", " + std::to_string(dev->n_sm) + " SMs, " +
                 std::to_string(dev->total_bytes >> 30) + " GiB)";
    runner R(o, rep);
    if (o.kernels) run_kernel_tests(R, dev->cc_major);
    if (o.models && !o.data_dir.empty()) run_model_tests(R, o.data_dir);
    if (o.models) test_tile_major_model(R); // random weights of a real shape: no data needed
    if (o.models) test_head_pick_model(R);
    if (o.models && !o.data_dir.empty()) test_routed_fp8_model(R, o.data_dir);
    return rep;
}

} // namespace es
