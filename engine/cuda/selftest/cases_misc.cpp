// The self-test's cases of the small kernels (selftest_cases.h): fill_random, embedding,
// rms_norm, rope_kv, silu_mul, the FP8 quantization of weights and activations, argmax,
// copy_bytes, read_sum and topk_logits, each against its CPU twin.
#include "engine/cuda/selftest/selftest_cases.h"

#include "engine/core/compare.h"

#include "kernels/act_quantize.cuh"
#include "kernels/argmax.cuh"
#include "kernels/copy_bytes.cuh"
#include "kernels/read_sum.cuh"
#include "kernels/embedding.cuh"
#include "kernels/fill_random.cuh"
#include "kernels/fp8_dequantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/sample_rows.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/topk_logits.cuh"

#include <cmath>
#include <cstring>
#include <random>

namespace es::selftest {

namespace {

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

} // namespace

std::string fill_random_case::name() const { return shape_name("fill_random", {{"n", n}}); }

void fill_random_case::run(runner &R, const std::string &name) const {
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
}

std::string embedding_case::name() const { return shape_name("embedding", {{"T", T}, {"V", V}, {"H", H}}); }

void embedding_case::run(runner &R, const std::string &name) const {
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
}

std::string rms_norm_case::name() const {
    return shape_name("rms_norm", {{"rows", rows}, {"H", H}},
                      std::string(delta ? "+residual" : "") + (gather ? " gather" : ""));
}

void rms_norm_case::run(runner &R, const std::string &name) const {
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
    R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dout.download()), widen(out)),
          k_bf16_limit);
    if (delta) R.add("kernel", name + " residual", "max scaled err", scaled_err(dx.download(), x), 1e-6);
}

std::string rope_kv_case::name() const {
    return shape_name("rope_kv", {{"heads", n_head}, {"kv", n_head_kv}, {"hd", hd}}) + kv_label(kv);
}

void rope_kv_case::run(runner &R, const std::string &name) const {
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
    R.add("kernel", name + " q", "max scaled err (bf16)", scaled_err(widen(dq.download()), widen(q)),
          k_bf16_limit);
    add_kv_rows(R, name + " k cache", kv, dk.download(), k, false);
    add_kv_rows(R, name + " v cache", kv, dv.download(), v,
                true); // no arithmetic but the scale's division
}

std::string silu_mul_case::name() const { return shape_name("silu_mul", {{"T", T}, {"F", F}}); }

void silu_mul_case::run(runner &R, const std::string &name) const {
    auto gu = rand_f(static_cast<size_t>(T * 2 * F), -6, 6);
    dvec<float> dgu(gu);
    dvec<bf16_t> dout(static_cast<size_t>(T * F));
    silu_mul_params p{dgu.get(), dout.get(), T, F};
    ck(launch_silu_mul(p, nullptr), "launch");
    sync(name);
    std::vector<bf16_t> out(static_cast<size_t>(T * F));
    p = silu_mul_params{gu.data(), out.data(), T, F};
    silu_mul_ref(p);
    R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dout.download()), widen(out)),
          k_bf16_limit);
}

std::string fp8_quantize_case::name() const {
    const bool blk = L == scale_layout::block128;
    return shape_name("fp8_quantize", {{"N", N}, {"K", K}}, blk ? "128x128 blocks, edge rows" : "edge rows");
}

void fp8_quantize_case::run(runner &R, const std::string &name) const {
    auto w = rand_bf16(static_cast<size_t>(N * K), -0.3f, 0.3f);
    // Edge rows: all zero; one huge value (the rest round to subnormals/zero); tiny values.
    for (int64_t i = 0; i < K; ++i) w[0 * K + i] = 0;
    for (int64_t i = 0; i < K; ++i)
        w[1 * K + i] = float_to_bf16_bits(i == 3 ? -30000.0f : 0.01f * float(i % 7));
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
          double(std::fabs(fp8_e4m3_to_float(gq[1 * K + 3]) * gs[fp8_scale_index(1, 3, K, L)])) / big,
          0.99999, false);
}

std::string fp8_dequantize_case::name() const {
    return shape_name("fp8_dequantize", {{"N", N}, {"K", K}},
                      L == scale_layout::block128 ? "128x128 blocks" : "");
}

void fp8_dequantize_case::run(runner &R, const std::string &name) const {
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
}

std::string act_quantize_case::name() const {
    return shape_name("act_quantize", {{"M", M}, {"K", K}, {"ldx", ldx}},
                      std::string(f == fp8_format::e4m3 ? "e4m3" : "e5m2") + " edge rows");
}

void act_quantize_case::run(runner &R, const std::string &name) const {
    if (M < 6) throw test_failure("needs at least 6 rows for its edge rows");
    auto x = rand_bf16(static_cast<size_t>(M * ldx), -2.0f, 2.0f);
    auto at = [&](int64_t r, int64_t i) -> bf16_t & { return x[size_t(r * ldx + i)]; };
    const float fmax = fp8_format_max(f);
    for (int64_t i = 0; i < K; ++i) {
        at(0, i) = float_to_bf16_bits(i % 3 == 1 ? -0.0f : 0.0f);                  // all zero (signed zeros)
        at(1, i) = float_to_bf16_bits(i == K / 2 ? -3e38f : 0.01f * float(i % 7)); // one huge outlier
        at(2, i) = float_to_bf16_bits(1e-39f * float(i % 5 - 2));                  // BF16 subnormals
        at(3, i) =
            float_to_bf16_bits(i == 0 ? fmax : (i % 2 ? -1.0f : 1.0f) * fp8_midpoint(f, i)); // scale 1, ties
        at(4, i) = float_to_bf16_bits(1e-30f * float(i % 9 - 4));                            // tiny normals
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
    if (gs[0] != 1.0f || gs[3] != 1.0f) throw test_failure("the zero row and the ties row must have scale 1");
}

std::string argmax_case::name() const {
    return shape_name("argmax", {{"rows", rows}, {"V", V}}, "ties, NaN");
}

void argmax_case::run(runner &R, const std::string &name) const {
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
}

std::string copy_bytes_case::name() const {
    return shape_name("copy_bytes", {{"bytes", int64_t(bytes)}, {"offset", int64_t(offset)}},
                      "pinned host <-> device");
}

void copy_bytes_case::run(runner &R, const std::string &name) const {
    const size_t total = bytes + offset + 64;
    std::vector<unsigned char> src(total), want(total, 0xa5);
    for (size_t i = 0; i < total; ++i) src[i] = static_cast<unsigned char>(i * 131u + 7u);
    pinned_buffer pin_src, pin_dst;
    pin_src.alloc(total, "cudaMallocHost");
    pin_dst.alloc(total, "cudaMallocHost");
    unsigned char *host_src = pin_src.at(), *host_dst = pin_dst.at();
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
}

std::string read_sum_case::name() const {
    return shape_name("read_sum", {{"bytes", int64_t(bytes)}, {"blocks", int64_t(blocks)}});
}

void read_sum_case::run(runner &R, const std::string &name) const {
    std::vector<unsigned> words(bytes / 4);
    uint32_t x = 0x9e3779b9u ^ uint32_t(bytes); // its own sequence: the shared generator stays as it was
    for (auto &w : words) w = (x = x * 1664525u + 1013904223u);
    dvec<unsigned> src(words), out(std::vector<unsigned>(1, 0u));
    read_sum_params p;
    p.src = src.get();
    p.bytes = bytes;
    p.out = out.get();
    ck(launch_read_sum(p, nullptr, blocks), "launch");
    sync(name);
    unsigned want = 0;
    read_sum_params ref = p;
    ref.src = words.data();
    ref.out = &want;
    read_sum_ref(ref);
    R.add("kernel", name, "XOR differs from the twin", double(out.download()[0] != want), 0.0);
}

std::string copy_bytes_fed_case::name() const {
    return shape_name("copy_bytes", {{"tokens", n}, {"rows", rows}}, "fed tokens");
}

void copy_bytes_fed_case::run(runner &R, const std::string &name) const {
    constexpr size_t fed_offset = 48;
    constexpr int64_t stride = 3;
    const size_t bytes = (fed_offset + size_t(n) * 4 + 200 + 15) / 16 * 16;
    std::vector<unsigned char> src(bytes);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 37u + 11u);
    auto *tok = reinterpret_cast<int32_t *>(src.data() + fed_offset);
    std::mt19937 rng(unsigned(n * 7 + rows));
    for (int64_t i = 0; i < n; ++i)
        tok[i] = i == 0 ? -1 : rng() % 3 == 0 ? int32_t(rng() % 1000) : -1 - int32_t(rng() % uint32_t(rows));
    std::vector<int32_t> cand(size_t(rows * stride));
    for (size_t i = 0; i < cand.size(); ++i) cand[i] = int32_t(5000 + i * 13);
    pinned_buffer pin;
    pin.alloc(bytes, "cudaMallocHost");
    unsigned char *host = pin.at();
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
}

std::string topk_logits_case::name() const {
    return shape_name("topk_logits", {{"rows", rows}, {"V", V}, {"N", N}},
                      "ties, NaN, -inf, mostly NaN, periodic, constant, ±0 top");
}

void topk_logits_case::run(runner &R, const std::string &name) const {
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
}

} // namespace es::selftest

namespace es::selftest {

std::string sample_rows_case::name() const {
    return shape_name("sample_rows", {{"rows", rows}, {"V", V}, {"draws", draws}},
                      "flat, peaked, ties, NaN, -inf, ±0, +inf; greedy, T, top-k, top-p, min-p, penalties");
}

namespace {

// The row kinds and parameter sets the case cycles through (row r: kind r % 9, set (r / 9) % 12).
void fill_sample_row(float *row, int64_t V, int kind, std::mt19937 &rng) {
    std::normal_distribution<float> flat(0.0f, 0.05f), wide(0.0f, 3.0f);
    for (int64_t v = 0; v < V; ++v) row[v] = kind == 0 ? flat(rng) : wide(rng);
    switch (kind) {
    case 1: row[V / 3] = 25.0f; break; // peaked
    case 2:
        for (int64_t v = 0; v < V; ++v) row[v] = std::round(row[v] * 2.0f) / 2.0f; // many ties
        break;
    case 3:
        for (int64_t v = 0; v < V; v += 7) row[v] = NAN;
        break;
    case 4:
        for (int64_t v = 0; v < V; ++v)
            if (v % 13) row[v] = -INFINITY;
        break;
    case 5:
        for (int64_t v = 0; v < V; ++v) row[v] = 1.5f; // every key differs by id only
        break;
    case 6:
        for (int64_t v = 0; v < V; ++v) row[v] = v % 5 ? -std::abs(row[v]) - 0.5f : (v % 2 ? -0.0f : 0.0f);
        break;
    case 7: row[V / 2] = INFINITY; break;
    case 8:
        for (int64_t v = 0; v < V; ++v) row[v] = v % 2 ? NAN : -INFINITY;
        break;
    default: break;
    }
}

row_sampling sample_spec(int set, uint64_t seed) {
    row_sampling s;
    s.seed = seed;
    s.temperature = 0.8f;
    switch (set) {
    case 0: s.temperature = 0.0f; break;
    case 1: break;
    case 2: s.top_p = 0.8f; break;
    case 3: s.top_k = 50; break;
    case 4:
        s.temperature = 0.7f;
        s.top_k = 40;
        s.top_p = 0.9f;
        s.min_p = 0.05f;
        break;
    case 5:
        s.temperature = 1.2f;
        s.min_p = 0.1f;
        break;
    case 6:
        s.repetition = 1.3f;
        s.presence = 0.5f;
        s.frequency = 0.2f;
        s.top_p = 0.95f;
        break;
    case 7: s.top_p = 1e-4f; break;
    case 8: s.top_k = 1; break;
    case 9: s.temperature = 2e-5f; break;
    case 10:
        s.temperature = 1.0f;
        s.top_k = 1000;
        s.top_p = 0.5f;
        break;
    case 11:
        s.repetition = 0.8f; // a penalty that raises logits
        s.temperature = 0.5f;
        break;
    default: break;
    }
    return s;
}

} // namespace

void sample_rows_case::run(runner &R, const std::string &name) const {
    std::mt19937 rng(unsigned(rows * 31 + V));
    std::vector<float> x(static_cast<size_t>(rows * V));
    for (int64_t r = 0; r < rows; ++r) fill_sample_row(x.data() + r * V, V, int(r % 9), rng);
    // Penalty lists in pinned memory (the device reads them there, as the backend's are), and a
    // batch of tokens whose entry r is row r's fed token.
    std::vector<penalty_entry> entries;
    std::vector<row_sampling> specs(static_cast<size_t>(rows));
    std::vector<int32_t> tokens(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        row_sampling &s = specs[size_t(r)];
        s = sample_spec(int((r / 9) % 12), 1000 + uint64_t(r));
        tokens[size_t(r)] = int32_t((r * 7919) % V);
        if (!sampling_has_penalties(s)) continue;
        s.penalties = entries.size();
        for (int64_t id = r % 3; id < V; id += 1 + V / 50) entries.push_back({int32_t(id), int32_t(id % 4)});
        s.n_penalties = int32_t(entries.size() - s.penalties);
        s.extra_token = int32_t(r); // sometimes listed already, sometimes not
    }
    pinned_buffer pen;
    pen.alloc(std::max<size_t>(entries.size(), 1) * sizeof(penalty_entry), "cudaMallocHost");
    if (!entries.empty()) std::memcpy(pen.at(), entries.data(), entries.size() * sizeof(penalty_entry));
    for (row_sampling &s : specs)
        s.penalties = s.n_penalties ? reinterpret_cast<uint64_t>(pen.at()) + s.penalties * sizeof(penalty_entry) : 0;

    dvec<float> dx(x), dvals(static_cast<size_t>(rows)), dmax(static_cast<size_t>(rows));
    dvec<float> scratch(static_cast<size_t>(rows * V));
    dvec<int32_t> dids(static_cast<size_t>(rows)), dtok(tokens);
    int64_t token_diff = 0, value_diff = 0, logit_diff = 0, sampled_rows = 0;
    std::vector<int> distinct(static_cast<size_t>(rows), 0);
    std::vector<int32_t> last(static_cast<size_t>(rows), -1);
    for (int32_t d = 0; d < draws; ++d) {
        for (row_sampling &s : specs) s.counter = uint64_t(d);
        dvec<row_sampling> dspec(specs);
        std::vector<float> hx = x;
        ck(cudaMemcpy(dx.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload");
        sample_rows_params p;
        p.logits = dx.get();
        p.rows = dspec.get();
        p.tokens = dtok.get();
        p.ids = dids.get();
        p.values = dvals.get();
        p.row_max = dmax.get();
        p.scratch = scratch.get();
        p.n_rows = rows;
        p.n_vocab = V;
        ck(launch_sample_rows(p, nullptr), "launch");
        sync(name);
        std::vector<int32_t> ids(static_cast<size_t>(rows));
        std::vector<float> vals(static_cast<size_t>(rows)), mx(static_cast<size_t>(rows));
        sample_rows_params h = p;
        h.logits = hx.data();
        h.rows = specs.data();
        h.tokens = tokens.data();
        h.ids = ids.data();
        h.values = vals.data();
        h.row_max = mx.data();
        h.scratch = nullptr;
        sample_rows_ref(h);
        const auto gi = dids.download();
        const auto gx = dx.download();
        const auto gv = dvals.download(), gm = dmax.download();
        for (int64_t r = 0; r < rows; ++r) {
            token_diff += gi[size_t(r)] != ids[size_t(r)];
            value_diff += std::memcmp(&gv[size_t(r)], &vals[size_t(r)], 4) != 0 ||
                          std::memcmp(&gm[size_t(r)], &mx[size_t(r)], 4) != 0;
            distinct[size_t(r)] += gi[size_t(r)] != last[size_t(r)];
            last[size_t(r)] = gi[size_t(r)];
        }
        for (size_t i = 0; i < gx.size(); ++i) // (a NaN's payload is the platform's)
            logit_diff += !(std::isnan(gx[i]) && std::isnan(hx[i])) && std::memcmp(&gx[i], &hx[i], 4) != 0;
        sampled_rows += rows;
    }
    // The draws move with the counter: rows with a wide kept set give more than one token.
    int64_t stuck = 0;
    for (int64_t r = 0; r < rows; ++r)
        if (const int set = int((r / 9) % 12); r % 9 == 0 && draws > 2 && distinct[size_t(r)] < 2 &&
                                                 (set == 1 || set == 2 || set == 3 || set == 5 || set == 6 || set == 10))
            ++stuck;
    R.add("kernel", name, "tokens differing from the twin (" + std::to_string(sampled_rows) + " draws)",
          double(token_diff), 0.0);
    R.add("kernel", name, "drawn logit or row max differing (exact)", double(value_diff), 0.0);
    R.add("kernel", name, "penalized logits differing (exact)", double(logit_diff), 0.0);
    R.add("kernel", name, "flat rows whose draws never changed with the counter", double(stuck), 0.0);

    // Timing: flat rows at temperature 0.8, top-p 0.8 (the chat's sampled decode on random weights).
    for (int64_t n : {int64_t(1), std::min<int64_t>(rows, 8)}) {
        std::vector<float> flat(static_cast<size_t>(n * V));
        for (int64_t r = 0; r < n; ++r) fill_sample_row(flat.data() + r * V, V, 0, rng);
        std::vector<row_sampling> ts(static_cast<size_t>(n), sample_spec(2, 7));
        dvec<float> fx(flat);
        dvec<row_sampling> dts(ts);
        sample_rows_params p;
        p.logits = fx.get();
        p.rows = dts.get();
        p.tokens = dtok.get();
        p.ids = dids.get();
        p.scratch = scratch.get();
        p.n_rows = n;
        p.n_vocab = V;
        cudaEvent_t a = nullptr, b = nullptr;
        ck(cudaEventCreate(&a), "cudaEventCreate");
        ck(cudaEventCreate(&b), "cudaEventCreate");
        ck(launch_sample_rows(p, nullptr), "launch");
        ck(cudaEventRecord(a), "cudaEventRecord");
        for (int i = 0; i < 100; ++i) ck(launch_sample_rows(p, nullptr), "launch");
        ck(cudaEventRecord(b), "cudaEventRecord");
        sync(name);
        float ms = 0.0f;
        ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        cudaEventDestroy(a);
        cudaEventDestroy(b);
        R.info("kernel", name,
               "µs per launch, " + std::to_string(n) + " flat rows, T 0.8 top-p 0.8 (" + sample_rows_path(V) + ")",
               1000.0 * ms / 100.0);
    }
}

} // namespace es::selftest
