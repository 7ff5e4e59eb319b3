// What every file of the CUDA self-test shares: the runner that turns checks into report rows,
// the table of cases it walks, random inputs from one seeded generator, the error metrics and
// their limits, typed device copies of host vectors (over the backend's device_buffer), the
// routed experts' random weights, and the FP8 KV cache helpers.
#pragma once

#include "engine/cuda/backend/cuda_util.h"
#include "engine/cuda/selftest_api.h"

#include "kernels/kernel_common.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace es::selftest {

// A check that cannot go on for a reason of its own (a CUDA error is es::ck's es::load_error).
struct test_failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// ---- rows ---------------------------------------------------------------------------------------

class runner {
public:
    explicit runner(const selftest_options &o, selftest_report &r) : m_o(o), m_r(r) {}

    void add(const std::string &group, const std::string &name, const std::string &metric, double value,
             double limit, bool lower_is_better = true, const std::string &note = {});
    void info(const std::string &group, const std::string &name, const std::string &metric, double value,
              const std::string &note = "info");
    void failed(const std::string &group, const std::string &name, const std::string &why);
    // Runs one check when its name contains --only's text; an exception becomes a failed row.
    // False after a sticky CUDA error, which a "(remaining kernel tests)" row reports.
    template <typename F>
    bool run(const std::string &group, const std::string &name, F &&f) {
        if (!m_o.only.empty() && name.find(m_o.only) == std::string::npos) return true;
        try {
            f();
        } catch (const std::exception &e) {
            failed(group, name, e.what());
            const cudaError_t st = cudaDeviceSynchronize();
            if (st != cudaSuccess && st != cudaErrorInvalidValue) {
                failed(group, "(remaining kernel tests)",
                       std::string("stopped: the CUDA context is broken (") + cudaGetErrorString(st) + ")");
                return false;
            }
        }
        return true;
    }

private:
    void push(const selftest_row &row);
    const selftest_options &m_o;
    selftest_report &m_r;
};

// "op extra k=v k=v …": a kernel row's name from its shape.
std::string shape_name(const std::string &op, std::initializer_list<std::pair<const char *, int64_t>> dims,
                       const std::string &extra = {});

// ---- the table of cases -----------------------------------------------------------------------
// A case type C (selftest_cases.h) is an aggregate of its shape with name() (the row name, what
// --only matches) and run(R, name), which adds the rows and throws to fail. Optional: wanted()
// (false: the case adds no row, a case it depends on did not come through) and done(ok) (told
// R.run's answer). Every case draws its inputs from rng() inside run(), in table order, so a
// table's order is part of its inputs.
class selftest_case {
public:
    virtual ~selftest_case() = default;
    virtual bool wanted() const = 0;
    virtual std::string name() const = 0;
    virtual void run(runner &R, const std::string &name) const = 0;
    virtual void done(bool ok) const = 0;
};

template <typename C>
class case_of final : public selftest_case {
public:
    explicit case_of(C c) : m_c(std::move(c)) {}
    bool wanted() const override {
        if constexpr (requires(const C &c) { c.wanted(); })
            return m_c.wanted();
        else
            return true;
    }
    std::string name() const override { return m_c.name(); }
    void run(runner &R, const std::string &name) const override { m_c.run(R, name); }
    void done(bool ok) const override {
        if constexpr (requires(const C &c, bool b) { c.done(b); }) m_c.done(ok);
    }

private:
    C m_c;
};

using case_list = std::vector<std::unique_ptr<selftest_case>>;

template <typename C>
void add(case_list &cases, C c) {
    cases.push_back(std::make_unique<case_of<C>>(std::move(c)));
}

// Runs every wanted case in order under `group`, each one's name computed just before its run,
// and drops each case once its turn has passed (state that cases share goes with the last of
// them). A sticky CUDA error does not end the walk: R.run reports it, and later cases meet it too.
void walk(runner &R, const std::string &group, case_list &cases);

// ---- device memory ------------------------------------------------------------------------------

// Device copy of a host vector (or n zeroed elements); download() brings it back. At least one
// element is allocated, so an empty input is still a valid pointer.
template <typename T>
class dvec {
public:
    explicit dvec(const std::vector<T> &h) : m_n(h.size()) {
        m_buf.alloc(std::max<size_t>(1, m_n) * sizeof(T), "a self-test input");
        if (m_n) ck(cudaMemcpy(get(), h.data(), m_n * sizeof(T), cudaMemcpyHostToDevice), "upload");
    }
    explicit dvec(size_t n) : m_n(n) {
        m_buf.alloc(std::max<size_t>(1, n) * sizeof(T), "a self-test buffer");
        ck(cudaMemset(get(), 0, m_buf.bytes()), "cudaMemset");
    }
    T *get() const { return m_buf.template at<T>(); }
    std::vector<T> download() const {
        std::vector<T> h(m_n);
        if (m_n) ck(cudaMemcpy(h.data(), get(), m_n * sizeof(T), cudaMemcpyDeviceToHost), "download");
        return h;
    }

private:
    device_buffer m_buf;
    size_t m_n = 0;
};

// The last launch's error, then the device's, with `what` in the message.
void sync(const std::string &what);

// ---- random inputs ------------------------------------------------------------------------------

// The one generator every case draws from (seeded once per process).
std::mt19937 &rng();
std::vector<float> rand_f(size_t n, float lo = -1.0f, float hi = 1.0f);
std::vector<bf16_t> rand_bf16(size_t n, float lo = -1.0f, float hi = 1.0f);
std::vector<float> widen(const std::vector<bf16_t> &v);

// T tokens' top-k: K distinct experts of E each, in random order.
std::vector<int32_t> random_topk_ids(int64_t T, int64_t E, int64_t K);

struct expert_weights {
    std::vector<bf16_t> b;
    std::vector<fp8_t> q;
    std::vector<float> s;
};
// FP8: `stack` matrices of rows / stack rows, each quantized with its own scale grid in layout L
// (kernel_common.h: fp8_stack_scale_index), as the backend stores the routed experts.
// used (the routed cases' ids): only the experts named get random weights, the others stay zero
// — a kernel that reads a wrong expert still shows, and a 64-expert stack does not cost tens of
// seconds of random numbers and quantization on the CPU per case. Empty: every expert.
// The experts are filled and quantized on threads of their own, each with a generator seeded from
// rng() in expert order (the values do not depend on the thread count): the 21B-A3B's T = 8 cases
// would spend ~20 s of a self-test here on one core.
expert_weights make_expert_weights(weight_format f, int64_t rows, int64_t k,
                                   scale_layout L = scale_layout::channel, int64_t stack = 1,
                                   const std::vector<int32_t> &used = {});

// An FP8 gate/up stack of E experts [2·F, H] each, tile-major (fp8_tile_major's twin).
std::vector<fp8_t> tile_major(const std::vector<fp8_t> &q, int64_t E, int64_t F, int64_t H);

std::string blk_suffix(scale_layout L);

// ---- error metrics ------------------------------------------------------------------------------

// max_i |a − b| / (|b| + rms(b))
double scaled_err(const std::vector<float> &a, const std::vector<float> &b);
constexpr double k_f32_limit = 1e-4;  // fp32 accumulation in a different order
constexpr double k_bf16_limit = 1e-2; // ≈ 2.5 BF16 ulps at the value's magnitude

// Elements of two GPU outputs whose bits differ (one kernel's two ways to the same result).
template <typename T>
double bit_diffs(const std::vector<T> &a, const std::vector<T> &b) {
    if (a.size() != b.size()) return double(std::max(a.size(), b.size()));
    int64_t n = 0;
    for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
    return double(n);
}

// ---- the FP8 KV cache ---------------------------------------------------------------------------

// FP8 KV cache (kernel_common.h's kv_format): the per-tensor scales of the kernel rows (not powers
// of two, so the scale's arithmetic is exercised both ways).
constexpr float k_test_k_scale = 0.75f, k_test_v_scale = 1.5f;

std::string kv_label(kv_format kv);

// A K or V pool (raw bytes of kv elements), GPU against twin. BF16: max scaled error (limit
// k_bf16_limit, or exact). FP8: the largest distance between codes in E4M3 steps — 0 when exact,
// else at most 1 (a value within fp32 rounding of an E4M3 rounding boundary may go either way when
// the GPU computes it in another order or with fused multiply-adds; a wrong layout, scale or
// conversion differs by many steps).
void add_kv_rows(runner &R, const std::string &name, kv_format kv, const std::vector<uint8_t> &got,
                 const std::vector<uint8_t> &want, bool exact);

// BF16 values → a pool of kv elements (raw bytes): BF16 as they are, FP8 stored as rope_kv stores them.
std::vector<uint8_t> kv_pool_of(const std::vector<bf16_t> &v, kv_format kv, float scale);

} // namespace es::selftest
