// Types shared by every kernel's params struct and CPU twin, and the host-side element
// conversions the twins use (BF16 round-to-nearest-even; FP8 E4M3 with saturation to ±448 and
// E5M2 with saturation to ±57344, as the device's __nv_cvt_float_to_fp8(…, __NV_SATFINITE, …)). Plain C++: it
// compiles without a CUDA toolkit, so the twins and their tests build everywhere. Launchers are declared only
// where ES_KERNELS_WITH_CUDA is defined (targets that link es_kernels).
#pragma once

#include "engine/core/scale_layout.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(ES_KERNELS_WITH_CUDA)
#include <cuda_runtime_api.h>
#define ES_KERNELS_HAVE_LAUNCHERS 1
#endif

// Functions the twins and the kernels both call.
#if defined(__CUDACC__)
#define ES_HOST_DEVICE __host__ __device__
#else
#define ES_HOST_DEVICE
#endif

namespace es {

using bf16_t = uint16_t; // raw BF16 bits (device code reinterprets as __nv_bfloat16)
using fp8_t = uint8_t;   // raw FP8 bits (E4M3 unless a format says otherwise)

enum class weight_format : uint8_t { bf16, fp8_e4m3 };
// The two FP8 encodings of activations (weights are always E4M3).
enum class fp8_format : uint8_t { e4m3, e5m2 };

// An RMSNorm fused into a consumer kernel's input (kernel_common.cuh: block_rms_norm_to_smem). When x is
// set, the kernel reads these fp32 residual rows [n_tokens, n_embd] and normalizes them with `weight`
// (rms_norm's arithmetic) instead of reading BF16 activations; when `out` is set too, one block also
// writes the normalized rows there for later kernels. The twins run rms_norm_ref first.
struct norm_in {
    const float *x = nullptr;        // [n_tokens, n_embd]
    const bf16_t *weight = nullptr;  // [n_embd]
    float eps = 1e-5f;
    bf16_t *out = nullptr;           // [n_tokens, n_embd] or null
    bool on() const { return x != nullptr; }
};

inline constexpr float fp8_e4m3_max = 448.0f;
inline constexpr float fp8_e5m2_max = 57344.0f;
inline constexpr float fp8_format_max(fp8_format f) {
    return f == fp8_format::e4m3 ? fp8_e4m3_max : fp8_e5m2_max;
}

inline float bf16_bits_to_float(bf16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even; NaN stays a quiet NaN.
inline bf16_t float_to_bf16_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16_t(u >> 16);
}

inline float round_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// E4M3 (bias 7, no infinities, S.1111.111 is NaN, max finite 448).
inline float fp8_e4m3_to_float(fp8_t v) {
    const int sign = v & 0x80, exp = (v >> 3) & 0xf, man = v & 7;
    float r;
    if (exp == 0xf && man == 7)
        r = NAN;
    else if (exp == 0)
        r = std::ldexp(float(man), -9);
    else
        r = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
    return sign ? -r : r;
}

// Round to nearest even, finite values saturate to ±448, NaN → NaN.
inline fp8_t float_to_fp8_e4m3(float f) {
    const fp8_t sign = std::signbit(f) ? 0x80 : 0x00;
    if (std::isnan(f)) return fp8_t(sign | 0x7f);
    const float a = std::fabs(f);
    if (a >= fp8_e4m3_max) return fp8_t(sign | 0x7e);
    if (a < 0.015625f) { // below 2^-6: subnormal steps of 2^-9 (m == 8 is the smallest normal)
        const int m = int(std::nearbyint(a * 512.0f));
        return fp8_t(sign | m);
    }
    int e = 0;
    std::frexp(a, &e); // a = fr · 2^e, fr in [0.5, 1)
    int exp = e - 1;   // a = 1.m · 2^exp, exp in [-6, 8]
    int m = int(std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 8.0f));
    if (m == 8) {
        m = 0;
        ++exp;
    }
    if (exp > 8 || (exp == 8 && m == 7)) return fp8_t(sign | 0x7e);
    return fp8_t(sign | ((exp + 7) << 3) | m);
}

// E5M2 (bias 15, IEEE-like: S.11111.00 is ±infinity, S.11111.xx NaN, max finite 57344,
// subnormals m · 2^-16).
inline float fp8_e5m2_to_float(fp8_t v) {
    const int sign = v & 0x80, exp = (v >> 2) & 0x1f, man = v & 3;
    float r;
    if (exp == 0x1f)
        r = man ? NAN : INFINITY;
    else if (exp == 0)
        r = std::ldexp(float(man), -16);
    else
        r = std::ldexp(1.0f + float(man) / 4.0f, exp - 15);
    return sign ? -r : r;
}

// Round to nearest even; finite values and infinities saturate to ±57344 (SATFINITE: no
// infinity is produced); NaN → 0x7f, the canonical NaN of the device's conversion.
inline fp8_t float_to_fp8_e5m2(float f) {
    if (std::isnan(f)) return fp8_t(0x7f);
    const fp8_t sign = std::signbit(f) ? 0x80 : 0x00;
    const float a = std::fabs(f);
    if (a >= 61440.0f) return fp8_t(sign | 0x7b); // 57344 + half an ulp: a tie rounds to 65536, out of range
    if (a < 0x1p-14f) {                           // below the smallest normal: subnormal steps of 2^-16
        const int m = int(std::nearbyint(a * 65536.0f)); // m == 4 is the smallest normal
        return fp8_t(sign | m);
    }
    int e = 0;
    std::frexp(a, &e);
    int exp = e - 1; // a = 1.m · 2^exp, exp in [-14, 15]
    int m = int(std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 4.0f));
    if (m == 4) {
        m = 0;
        ++exp;
    }
    if (exp > 15) return fp8_t(sign | 0x7b);
    return fp8_t(sign | ((exp + 15) << 2) | m);
}

inline float fp8_to_float(fp8_t v, fp8_format f) {
    return f == fp8_format::e4m3 ? fp8_e4m3_to_float(v) : fp8_e5m2_to_float(v);
}
inline fp8_t float_to_fp8(float x, fp8_format f) {
    return f == fp8_format::e4m3 ? float_to_fp8_e4m3(x) : float_to_fp8_e5m2(x);
}

// Element of a weight matrix in either format, widened to fp32 (no scale applied).
inline float weight_at(const void *w, weight_format f, int64_t i) {
    return f == weight_format::bf16 ? bf16_bits_to_float(static_cast<const bf16_t *>(w)[i])
                                    : fp8_e4m3_to_float(static_cast<const fp8_t *>(w)[i]);
}

inline size_t weight_format_bytes(weight_format f) { return f == weight_format::bf16 ? 2 : 1; }

// scale_layout (engine/core/scale_layout.h): where an FP8 weight matrix [n, k] keeps its fp32
// scales; block128's scale of element (r, c) is scale[(r / 128) · ceil(k / 128) + c / 128].
// The scale of element (r, c) in an FP8 matrix with k columns.
ES_HOST_DEVICE inline int64_t fp8_scale_index(int64_t r, int64_t c, int64_t k, scale_layout l) {
    return l == scale_layout::channel ? r : (r / fp8_block) * ((k + fp8_block - 1) / fp8_block) + c / fp8_block;
}

// A stack of matrices [rows, k] (the routed experts: [n_expert, rows, k]) keeps matrix e's scales
// at e · fp8_scale_count(rows, k, l), each matrix its own grid (with block scales a 128-row block
// never spans two experts); per-channel scales are then simply row e · rows + r.
ES_HOST_DEVICE inline int64_t fp8_stack_scale_index(int64_t e, int64_t r, int64_t c, int64_t rows, int64_t k,
                                                    scale_layout l) {
    return e * fp8_scale_count(rows, k, l) + fp8_scale_index(r, c, k, l);
}

// Twins: row r of matrix e of a weight stack [*, rows, k] (w_row: its first element, `f`) dotted
// with the activations x(c), the FP8 scale applied as the kernels apply it: per-channel after the
// whole sum; block128 to each 128-column block's partial sum (gemv_ref's order). BF16: no scale.
template <class X>
inline float scaled_row_dot_ref(const void *w, weight_format f, int64_t w_row, int64_t k, const float *scale,
                                scale_layout l, int64_t e, int64_t r, int64_t rows, X x) {
    if (f == weight_format::fp8_e4m3 && l == scale_layout::block128) {
        float acc = 0.0f;
        for (int64_t c0 = 0; c0 < k; c0 += fp8_block) {
            float part = 0.0f;
            for (int64_t c = c0; c < k && c < c0 + fp8_block; ++c) part += weight_at(w, f, w_row + c) * x(c);
            acc += part * scale[fp8_stack_scale_index(e, r, c0, rows, k, l)];
        }
        return acc;
    }
    float acc = 0.0f;
    for (int64_t c = 0; c < k; ++c) acc += weight_at(w, f, w_row + c) * x(c);
    return f == weight_format::fp8_e4m3 ? acc * scale[fp8_stack_scale_index(e, r, 0, rows, k, l)] : acc;
}

// Element format of the paged KV cache (rope_kv writes it, attention reads it). fp8_e4m3 (vLLM's
// kv_cache_dtype=fp8) halves the pools: with a per-tensor scale s (k_scale, v_scale; 1.0 without
// calibration, as vLLM) a value x is stored as the saturating E4M3 of x / s and read back as the
// BF16 of fp8 · s (exact when s is a power of two), which every attention kernel then uses as it
// uses a BF16 cache element. kv_store_fp8 / kv_read_fp8 are those two steps, the device's bit for bit.
enum class kv_format : uint8_t { bf16, fp8_e4m3 };
inline size_t kv_format_bytes(kv_format f) { return f == kv_format::bf16 ? 2 : 1; }
inline const char *kv_format_name(kv_format f) { return f == kv_format::bf16 ? "bf16" : "fp8"; }
inline fp8_t kv_store_fp8(float x, float scale) { return float_to_fp8_e4m3(x / scale); }
inline bf16_t kv_read_fp8(fp8_t v, float scale) { return float_to_bf16_bits(fp8_e4m3_to_float(v) * scale); }

#ifdef ES_KERNELS_HAVE_LAUNCHERS
// Programmatic dependent launch (Hopper and later): when on, every launcher asks that its kernel
// may start while the previous kernel on the stream is still finishing; each kernel then waits
// (griddepcontrol.wait) before it touches memory an earlier kernel writes or reads, so only the
// launch and what comes before the wait (block scheduling, loads of weights nobody writes)
// overlap. Process-wide; the CUDA backend switches it on for compute capability 9.0 and later
// (ES_CUDA_PDL=0 in the environment keeps it off, for measuring). Off by default.
void set_programmatic_launch(bool on);
bool programmatic_launch();
// One shared-memory carveout (percent of the SM's maximum) for every kernel launched through
// launch_kernel, set once per kernel; −1 (the default): only the decode kernels' per-launch
// carveout (launch_decode, below). A measuring aid (ES_CUDA_CARVEOUT).
void set_kernel_carveout(int percent);
int kernel_carveout();
void apply_kernel_carveout(const void *kernel);
// The carveout (percent) the kernels of a decode step launch with (kernel_common.cuh:
// launch_decode), for the calling thread: the CUDA backend sets it per step from the step's token
// count (decode_carveout_for_tokens) before it enqueues or captures the step's launches.
void set_decode_carveout(int percent);
int decode_carveout();
// Bytes of a weight matrix the decode GEMVs (gemv's L2 path, the dense MLP's fused-norm gate/up)
// send towards L2 before their programmatic-launch wait, at most: each warp the same leading
// fraction of each of its rows' slices (cap / matrix bytes; whole slices under the cap). A matrix
// much larger than what the previous kernel's time can bring, prefetched whole, queues ahead of
// that kernel's own loads (the kernel on the critical path) and stretches it: in the 21B-A3B's
// dense layer 0 the o_proj under the gate/up's 63 MB prefetch took 7.9 µs of the step against
// ~3.5 in the other layers. Default 8 MiB (on the H200 the 21B-A3B's FP8 `--fp8-head` decode is
// 0.5% shorter a token than without a cap; the 0.3B's FP8 matrices are all under it, and no
// prefetch at all costs the 0.3B 5%: docs/benchmarks.md). Process-wide; −1: no cap
// (ES_CUDA_L2_PREFETCH_KB).
void set_l2_prefetch_max_bytes(int64_t bytes);
int64_t l2_prefetch_max_bytes();
// The fraction of a matrix of `total` bytes the cap lets through: 1 within it.
inline float l2_prefetch_fraction(int64_t total) {
    const int64_t cap = l2_prefetch_max_bytes();
    return cap < 0 || total <= cap ? 1.0f : float(double(cap) / double(total));
}
// 64 KB (28% of Hopper's 228 KB) for one-token steps and steps of more than 8 tokens, 32 KB (14%)
// for 2–8 tokens (measured: kernel_common.cuh, launch_decode).
inline int decode_carveout_for_tokens(int64_t tokens) { return tokens >= 2 && tokens <= 8 ? 14 : 28; }
// How many blocks of `threads` threads and `smem` bytes of dynamic shared memory of this kernel
// the current device holds at once (blocks an SM × SMs; cached per kernel, device, threads and
// shared memory): the grid
// of a persistent kernel, one wave. 0 when the runtime cannot say (the caller then keeps its grid).
unsigned resident_blocks(const void *kernel, int threads, size_t smem);
// The current device's compute capability as major·10 + minor (90 for Hopper), 0 when the runtime
// cannot say; cached per device.
int device_compute_capability();
// Whether clusters of `size` blocks (along one dimension) of this kernel, `threads` threads and
// `smem` bytes of dynamic shared memory each, can run on the current device (compute capability
// 9.0 or later, at least one such cluster resident at once at the decode carveout); sizes above
// the portable 8 are allowed for the kernel first. Cached per kernel, size and device.
bool cluster_fits(const void *kernel, int size, int threads, size_t smem);
// Launch timeline (a measuring aid: expertscope-cli bench --timeline). While a buffer is set,
// block (0, 0, 0) of every kernel records in pdl_enter the %globaltimer before and after its
// programmatic-launch wait: buf[0] counts records (an unsigned, zero before the launches),
// record i is buf[1 + 2i] (ready: its pre-wait work done) and buf[2 + 2i] (released: the kernel
// before it finished), in release order, at most kernel_timeline_max records. nullptr switches it
// off. Every translation unit that includes kernel_common.cuh holds its own copy of the pointer
// (no relocatable device code) and registers a setter at load time; this sets them all.
inline constexpr unsigned kernel_timeline_max = 4096;
cudaError_t set_kernel_timeline(unsigned long long *buf);
using kernel_timeline_setter = cudaError_t (*)(unsigned long long *);
void register_kernel_timeline_setter(kernel_timeline_setter f);
#endif

} // namespace es
