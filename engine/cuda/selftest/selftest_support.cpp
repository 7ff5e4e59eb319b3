// The self-test's shared pieces (selftest_support.h): the runner's rows, the walk over a table of
// cases, the generator and the random inputs drawn from it, the error metric and the KV helpers.
#include "engine/cuda/selftest/selftest_support.h"

#include "kernels/fp8_quantize.cuh"
#include "kernels/fp8_tile_major.cuh"

#include <atomic>
#include <numeric>
#include <thread>

namespace es::selftest {

void runner::add(const std::string &group, const std::string &name, const std::string &metric, double value,
                 double limit, bool lower_is_better, const std::string &note) {
    selftest_row row{group, name, metric, value, limit, false, note};
    row.pass = std::isfinite(value) && (lower_is_better ? value <= limit : value >= limit);
    push(row);
}

void runner::info(const std::string &group, const std::string &name, const std::string &metric, double value,
                  const std::string &note) {
    push(selftest_row{group, name, metric, value, 0.0, true, note});
}

void runner::failed(const std::string &group, const std::string &name, const std::string &why) {
    push(selftest_row{group, name, "error", NAN, 0.0, false, why});
}

void runner::push(const selftest_row &row) {
    m_r.rows.push_back(row);
    if (m_o.on_row) m_o.on_row(row);
}

void walk(runner &R, const std::string &group, case_list &cases) {
    for (std::unique_ptr<selftest_case> &c : cases) {
        if (c->wanted()) {
            const std::string name = c->name();
            c->done(R.run(group, name, [&] { c->run(R, name); }));
        }
        c.reset();
    }
}

std::string shape_name(const std::string &op, std::initializer_list<std::pair<const char *, int64_t>> dims,
                       const std::string &extra) {
    std::string s = op;
    if (!extra.empty()) s += " " + extra;
    for (auto [k, v] : dims) s += std::string(" ") + k + "=" + std::to_string(v);
    return s;
}

void sync(const std::string &what) {
    ck(cudaGetLastError(), what + " (launch)");
    ck(cudaDeviceSynchronize(), what);
}

std::mt19937 &rng() {
    static std::mt19937 g(12345);
    return g;
}
std::vector<float> rand_f(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = d(rng());
    return v;
}
std::vector<bf16_t> rand_bf16(size_t n, float lo, float hi) {
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

expert_weights make_expert_weights(weight_format f, int64_t rows, int64_t k, scale_layout L, int64_t stack,
                                   const std::vector<int32_t> &used) {
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

std::vector<fp8_t> tile_major(const std::vector<fp8_t> &q, int64_t E, int64_t F, int64_t H) {
    std::vector<fp8_t> t(q.size());
    fp8_tile_major_ref({q.data(), t.data(), E, F, H});
    return t;
}

std::string blk_suffix(scale_layout L) { return L == scale_layout::block128 ? " 128x128 blocks" : ""; }

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

std::string kv_label(kv_format kv) { return kv == kv_format::fp8_e4m3 ? " fp8 KV" : ""; }

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

std::vector<uint8_t> kv_pool_of(const std::vector<bf16_t> &v, kv_format kv, float scale) {
    std::vector<uint8_t> out(v.size() * kv_format_bytes(kv));
    if (kv == kv_format::bf16)
        std::memcpy(out.data(), v.data(), out.size());
    else
        for (size_t i = 0; i < v.size(); ++i) out[i] = kv_store_fp8(bf16_bits_to_float(v[i]), scale);
    return out;
}

} // namespace es::selftest
