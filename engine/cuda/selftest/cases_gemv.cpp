// The self-test's cases of the dense products (selftest_cases.h): gemv (BF16 and FP8 weights,
// split-K, block scales), its greedy pick in the head's rows kernel, its fusions (norm_in, the
// q|k|v RoPE + KV-write epilogue, the embedding), and cuBLASLt's BF16 and FP8 GEMMs (gemm_lt),
// each against its CPU twin.
#include "engine/cuda/selftest/selftest_cases.h"

#include "engine/core/compare.h"

#include "kernels/act_quantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/topk_logits.cuh"

#include <cmath>
#include <cstring>

namespace es::selftest {

std::string gemv_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name("gemv", {{"M", M}, {"N", N}, {"K", K}},
                      std::string(fp8 ? "fp8" : "bf16") +
                          (L == scale_layout::block128 ? " 128x128 blocks" : "") + (acc ? " +acc" : "") +
                          (splits > 1 ? " splitK=" + std::to_string(splits) : ""));
}

void gemv_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
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
}

std::string gemv_pick_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name("gemv pick", {{"N", N}, {"K", K}},
                      std::string(fp8 ? "fp8" : "bf16") +
                          (L == scale_layout::block128 ? " 128x128 blocks " : " ") + case_);
}

void gemv_pick_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
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
    R.add("kernel", name, "pick differing from topk_logits_ref(n_top 1) on its y (3 launches)",
          double(differing), 0.0);
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
        R.add("kernel", name + " twin", "pick id differing (the twin's own y)",
              double(did.download()[0] != id), 0.0);
    } else {
        int64_t nan_differ = 0;
        for (int64_t i = 0; i < N; ++i) nan_differ += std::isnan(gy[size_t(i)]) != std::isnan(y[size_t(i)]);
        R.add("kernel", name, "NaN outputs differing from the twin", double(nan_differ), 0.0);
        R.add("kernel", name + " twin", "pick id differing (the twin's own y)",
              double(did.download()[0] != id), 0.0);
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
    R.info("kernel", name, "µs per launch with the pick (the GEMV and the finish; 50 back to back)",
           time_us(p));
    R.info("kernel", name, "µs per launch without it", time_us(plain));
}

std::string gemv_fused_case::name() const {
    const bool fp8 = f == weight_format::fp8_e4m3;
    return shape_name("gemv fused", {{"T", T}, {"H", H}, {"heads", n_head}, {"kv", n_head_kv}, {"hd", hd}},
                      std::string(fp8 ? "fp8" : "bf16") +
                          (L == scale_layout::block128 ? " 128x128 blocks" : "") +
                          (embd ? " embedding+" : " ") +
                          (normed ? "rope_kv (normalized input)"
                           : rope ? "norm+rope_kv"
                                  : "norm")) +
           kv_label(kv);
}

void gemv_fused_case::run(runner &R, const std::string &name) const {
    const bool fp8 = f == weight_format::fp8_e4m3;
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
        R.add("kernel", name + " residual rows", "max abs err (exact)", scaled_err(dx.download(), x), 0.0);
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
    R.add("kernel", name + " q", "max scaled err (bf16)", scaled_err(widen(dq.download()), widen(q)),
          k_bf16_limit);
    add_kv_rows(R, name + " k cache", kv, dk.download(), k, false);
    add_kv_rows(R, name + " v cache", kv, dv.download(), v, false); // v: the GEMV's sums in another order
}

gemm_lt_state::~gemm_lt_state() {
    if (ready) destroy_gemm_lt_context(ctx);
}

void gemm_lt_context_case::run(runner &R, const std::string &name) const {
    ck(create_gemm_lt_context(&lt->ctx, static_cast<size_t>(32) << 20), "create");
}

std::string gemm_lt_case::name() const {
    return shape_name("gemm_lt", {{"M", M}, {"N", N}, {"K", K}}, acc ? "bf16 +acc" : "bf16");
}

void gemm_lt_case::run(runner &R, const std::string &name) const {
    gemm_lt_context *const ctx = lt->ctx;
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
}

std::string gemm_lt_fp8_case::name() const {
    const bool e4 = f == fp8_format::e4m3;
    return shape_name("gemm_lt", {{"M", M}, {"N", N}, {"K", K}},
                      std::string("fp8 ") + (e4 ? "e4m3" : "e5m2") + " act" + (acc ? " +acc" : ""));
}

void gemm_lt_fp8_case::run(runner &R, const std::string &name) const {
    gemm_lt_context *const ctx = lt->ctx;
    const bool e4 = f == fp8_format::e4m3;
    auto x = rand_bf16(static_cast<size_t>(M * K)), wb = rand_bf16(static_cast<size_t>(N * K), -0.05f, 0.05f);
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
                   std::string("the backend dequantizes FP8 weights instead: ") + gemm_lt_last_error(ctx));
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
        R.add("kernel", name + " vs bf16 activations", "cosine", cosine_similarity(gy, yb),
              e4 ? 0.999 : 0.995, false);
    }
}

} // namespace es::selftest
