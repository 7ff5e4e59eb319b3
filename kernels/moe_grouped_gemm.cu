// moe_grouped_gemm (see moe_grouped_gemm.cuh). Grid: (row tile of 64 slots, column tile of 128
// weight rows: 64 gate + the matching 64 up rows for glu, else 128 outputs). A row tile finds its
// expert by binary search in tile_offsets; tiles past the plan's total exit at once (the grid is
// an upper bound). Block 128 threads = 4 warps, each 64 slots × 32 weight rows of mma.sync
// m16n8k16 BF16 tiles with fp32 accumulators (glu: gate and up of the same 16 outputs, so SiLU·up
// is done in registers). k goes through a cp.async pipeline (BK 64; 3 stages BF16, 4 FP8; 3 blocks
// per SM) into XOR-swizzled shared memory, zero-filled past k and past the valid rows; FP8 stays
// bytes there. Fragments come from 128/64-bit shared loads in a k order permuted alike for A and B
// (a dot product ignores the order of its terms), one load serving two k16 steps; FP8 is widened
// to BF16 exactly as the B fragments are built, its row scales applied in the epilogue. Unaligned
// operands (odd k or lda, pointers) are staged by synchronous scalar loads instead.
#include "kernels/fp8_tile_major.cuh"
#include "kernels/kernel_common.cuh"
#include "kernels/mma.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/wgmma.cuh"

#include <type_traits>

namespace es {
namespace {

// Thread 0's lookup of the plan: the expert of `tile` (the last e with tile_offsets[e] <= tile, by
// binary search; −1 past the plan's last tile), the tile's first sorted row and its row count (at
// most rows_per_tile), into the block's shared variables. Both grouped kernels start with it.
__device__ __forceinline__ void tile_expert(const moe_grouped_gemm_params &p, int tile, int E,
                                            int rows_per_tile, int &expert, int &row0, int &rows) {
    int e = -1;
    if (tile < p.tile_offsets[E]) {
        int lo = 0, hi = E - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (p.tile_offsets[mid] <= tile)
                lo = mid;
            else
                hi = mid - 1;
        }
        e = lo;
        row0 = p.offsets[e] + (tile - p.tile_offsets[e]) * rows_per_tile;
        rows = min(rows_per_tile, p.offsets[e + 1] - row0);
    }
    expert = e;
}

constexpr int BM = 64;  // slot rows per tile (= moe_grouped_gemm_tile_rows)
constexpr int BW = 128; // weight rows per tile
constexpr int BK = 64;  // k per pipeline stage
constexpr int THREADS = 128;
static_assert(BM == moe_grouped_gemm_tile_rows, "the plan's tiles are the kernel's row tiles");

// qa: FP8 activation codes (act_quantize's) instead of BF16 rows, staged as bytes.
constexpr int a_stage_bytes(bool qa = false) { return BM * BK * (qa ? 1 : 2); }
constexpr int w_stage_bytes(bool fp8) { return BW * BK * (fp8 ? 1 : 2); }
constexpr int stage_bytes(bool fp8, bool qa = false) { return a_stage_bytes(qa) + w_stage_bytes(fp8); }
// Pipeline depth: 3 stages of 24 KB (BF16) or 4 of 16 KB (FP8; 12 KB with FP8 activations), so
// that 3 blocks (12 warps) fit an SM's 228 KB of shared memory either way.
constexpr int stages(bool fp8) { return fp8 ? 4 : 3; }
constexpr int smem_bytes(bool fp8, bool qa = false) { return stages(fp8) * stage_bytes(fp8, qa); }

// Two E4M3 values (low byte = low half) → BF16x2, exactly: E4M3 → f16 (exact; every nonzero
// E4M3 value is a normal f16), then the f16 sign/exponent/mantissa bits moved into BF16 fields
// unchanged, which reads as the value × 2^-112 (still normal: no subnormals anywhere), then × 2^112
// in BF16 (a power of two: exact). An E4M3 NaN (never produced by saturating quantization)
// becomes a large finite value rather than NaN.
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t v16) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v16 & 0xffffu), __NV_E4M3);
    const uint32_t x = uint32_t(h.x) | (uint32_t(h.y) << 16);
    const uint32_t t = ((x >> 3) & 0x0fff0fffu) | (x & 0x80008000u);
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(t), "r"(0x77807780u), "r"(0x80008000u));
    return r;
}

__device__ __forceinline__ uint4 pack8(const uint16_t (&t)[8]) {
    return make_uint4(uint32_t(t[0]) | (uint32_t(t[1]) << 16), uint32_t(t[2]) | (uint32_t(t[3]) << 16),
                      uint32_t(t[4]) | (uint32_t(t[5]) << 16), uint32_t(t[6]) | (uint32_t(t[7]) << 16));
}

// Shared-memory layouts of one stage (16-byte chunks, XOR-swizzled so that both the cp.async
// stores and the fragment loads below are free of bank conflicts):
//   A  [BM rows][BK BF16]: 8 chunks per 128-byte row, chunk c of row r at c ^ 4·(r & 1)
//   W  BF16 [BW rows][BK]: as A
//   W  FP8  [BW rows][BK]: 4 chunks per 64-byte row, chunk c of row r at c ^ 2·((r >> 1) & 1)
__device__ __forceinline__ int swz_bf16(int r, int c) { return r * 128 + ((c ^ ((r & 1) << 2)) << 4); }
__device__ __forceinline__ int swz_fp8(int r, int c) { return r * 64 + ((c ^ (((r >> 1) & 1) << 1)) << 4); }

// Two BF16 values times an fp32 scale, rounded to BF16 (BLK: a widened FP8 pair and its block scale).
__device__ __forceinline__ uint32_t bf16x2_scaled(uint32_t v, float s) {
    return uint32_t(f_to_bf16(bf16_lo(v) * s)) | (uint32_t(f_to_bf16(bf16_hi(v) * s)) << 16);
}

// BLK: 128×128 block scales, applied as the FP8 weights are widened (moe_grouped_gemm.cuh).
// TM: the FP8 gate/up stack tile-major (fp8_tile_major.cuh; the launcher checks its conditions).
// QA: FP8 activations (1: E4M3, 2: E5M2) with per-row scales: m16n8k32 FP8 × FP8 MMAs (compute
// capability 8.9 and later), both operands' bytes read in the same permuted k order (a thread's
// 8 bytes 8t … 8t + 7 of each 32 are the fragment's k 4t … 4t + 3 and 16 + 4t … 16 + 4t + 3),
// nothing widened; the slots' scales in the epilogue.
template <bool FP8, bool GLU, bool BLK = false, bool TM = false, int QA = 0>
__global__ void __launch_bounds__(THREADS, 3) moe_grouped_gemm_kernel(moe_grouped_gemm_params p) {
    static_assert(FP8 || !BLK, "block scales are FP8's");
    static_assert(!TM || (FP8 && GLU && !BLK), "the tile-major layout is the FP8 gate/up stacks'");
    static_assert(!QA || (FP8 && !BLK), "FP8 activations take FP8 weights with per-row scales");
    constexpr int A_BYTES = a_stage_bytes(QA > 0), STAGE_BYTES = stage_bytes(FP8, QA > 0);
    pdl_enter(); // the plan and the activations come from the kernels just before
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int row_slot[BM];
    __shared__ float row_scale[QA ? BM : 1]; // QA: the slots' activation scales
    __shared__ int s_expert, s_row0, s_rows;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x, E = int(p.n_expert);

    if (tid == 0) tile_expert(p, tile, E, BM, s_expert, s_row0, s_rows);
    __syncthreads();
    const int e = s_expert;
    if (e < 0) return;
    const int rows = s_rows;
    if (tid < BM) {
        const int slot = tid < rows ? p.sorted_slots[s_row0 + tid] : -1;
        row_slot[tid] = slot;
        if constexpr (QA > 0) row_scale[tid] = slot >= 0 ? p.a_scale[slot / p.a_row_div] : 0.0f;
    }
    __syncthreads();

    constexpr int ESZ = FP8 ? 1 : 2;            // weight element bytes
    constexpr int OUT_COLS = GLU ? BW / 2 : BW; // outputs per column tile
    const int64_t k = p.k, n = p.n, w_rows = GLU ? 2 * n : n, kbytes = k * ESZ;
    const int64_t n0 = int64_t(blockIdx.y) * OUT_COLS;
    const unsigned char *w_e = static_cast<const unsigned char *>(p.w) + int64_t(e) * w_rows * kbytes;

    // ---- this thread's share of a stage's copies ------------------------------------------------
    // A: rows a_r0 + 16·i (i < 4), chunk a_c (8 BF16); QA: rows q_r0 + 32·i (i < 2), chunk q_c
    // (16 codes). W: rows w_r0 + W_RPP·i (i < W_N), chunk w_c.
    const int a_c = tid & 7, a_r0 = tid >> 3, q_c = tid & 3, q_r0 = tid >> 2;
    const bf16_t *a_row[4];
    const fp8_t *q_row[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int slot = row_slot[a_r0 + 16 * i];
        a_row[i] = slot >= 0 && !QA ? p.a + int64_t(slot / p.a_row_div) * p.lda : nullptr;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int slot = row_slot[q_r0 + 32 * i];
        q_row[i] = slot >= 0 && QA ? p.a_q + int64_t(slot / p.a_row_div) * p.lda : nullptr;
    }
    constexpr int W_CPR = BK * ESZ / 16;   // chunks per weight row: 8 (BF16) or 4 (FP8)
    constexpr int W_RPP = THREADS / W_CPR; // rows per pass: 16 or 32
    constexpr int W_N = BW / W_RPP;        // passes: 8 or 4
    constexpr int W_EPC = 16 / ESZ;        // weight elements per chunk
    const int w_c = tid % W_CPR, w_r0 = tid / W_CPR;
    const unsigned char *w_base = w_e + (n0 + w_r0) * kbytes;
    uint32_t w_valid = 0; // bit i: row w_r0 + W_RPP·i exists (its output column is < n)
#pragma unroll
    for (int i = 0; i < W_N; ++i) {
        const int r = w_r0 + W_RPP * i;
        if (n0 + (GLU ? (r & (BW / 2 - 1)) : r) < n) w_valid |= 1u << i;
    }
    const bool vec_a = aligned16(p.a) && p.lda % 8 == 0;
    const bool vec_w = aligned16(p.w) && kbytes % 16 == 0;
    const uint32_t smem0 = smem_addr(smem);

    auto load_stage = [&](int stage, int64_t k0) {
        unsigned char *st = smem + stage * STAGE_BYTES;
        unsigned char *ws = st + A_BYTES;
        if constexpr (QA > 0) { // FP8 codes: 16-byte aligned rows (the launcher checks), short last chunks
                                // zero-filled
            const int64_t kc = k0 + q_c * 16;
            const int valid = int(max(int64_t(0), min(int64_t(16), k - kc)));
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const fp8_t *src = q_row[i];
                cp_async16(smem0 + uint32_t(stage * STAGE_BYTES + swz_fp8(q_r0 + 32 * i, q_c)),
                           src && valid > 0 ? src + kc : p.a_q, src ? valid : 0);
            }
        } else {
            const int64_t kc = k0 + a_c * 8;
            const int valid = int(max(int64_t(0), min(int64_t(8), k - kc)));
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int off = swz_bf16(a_r0 + 16 * i, a_c);
                const bf16_t *src = a_row[i];
                if (vec_a) {
                    cp_async16(smem0 + uint32_t(stage * STAGE_BYTES + off), src && valid > 0 ? src + kc : p.a,
                               src ? valid * 2 : 0);
                } else {
                    uint16_t v[8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) v[j] = src && j < valid ? src[kc + j] : 0;
                    *reinterpret_cast<uint4 *>(st + off) = pack8(v);
                }
            }
        }
        const int64_t kc = k0 + w_c * W_EPC;
        const int valid = int(max(int64_t(0), min(int64_t(W_EPC), k - kc)));
#pragma unroll
        for (int i = 0; i < W_N; ++i) {
            const int r = w_r0 + W_RPP * i;
            const int off = FP8 ? swz_fp8(r, w_c) : swz_bf16(r, w_c);
            const bool ok = (w_valid >> i) & 1u;
            const unsigned char *src = w_base + int64_t(W_RPP * i) * kbytes;
            if (GLU && i >= W_N / 2) src += (n - BW / 2) * kbytes; // up rows: n + column
            src += kc * ESZ;
            if constexpr (TM) // the same row and column, where the tile-major stack keeps them
                src = w_e + fp8_tile_major_offset(n0 + r + (i >= W_N / 2 ? n - BW / 2 : 0), kc, n, k);
            if (vec_w) {
                cp_async16(smem0 + uint32_t(stage * STAGE_BYTES + A_BYTES + off), ok && valid > 0 ? src : w_e,
                           ok ? valid * ESZ : 0);
            } else if constexpr (FP8) {
                uint32_t v[4] = {0, 0, 0, 0};
#pragma unroll
                for (int j = 0; j < 16; ++j)
                    if (ok && j < valid) v[j / 4] |= uint32_t(src[j]) << (8 * (j % 4));
                *reinterpret_cast<uint4 *>(ws + off) = make_uint4(v[0], v[1], v[2], v[3]);
            } else {
                uint16_t v[8];
                const uint16_t *s16 = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = ok && j < valid ? s16[j] : 0;
                *reinterpret_cast<uint4 *>(ws + off) = pack8(v);
            }
        }
    };

    // ---- main loop --------------------------------------------------------------------------------
    // Fragment k order: within each 32-wide k block, the lane with t = lane % 4 holds physical k
    // 8t…8t+7; for k16 step s its logical pairs (2t, 2t+1) and (2t+8, 2t+9) of the m16n8k16 layout
    // are physical 8t+4s+{0,1} and 8t+4s+{2,3} — a bijection of the 32 k, the same for A and B.
    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[mt][j][q] = 0.0f;

    int b_row[4]; // this warp's four n8 column blocks, as rows of the weight stage
#pragma unroll
    for (int j = 0; j < 4; ++j)
        b_row[j] =
            (GLU ? (j < 2 ? warp * 16 + j * 8 : BW / 2 + warp * 16 + (j - 2) * 8) : warp * 32 + j * 8) + g;
    // BLK: each fragment row's block-scale row in expert e's grid (rows past n, zero-filled, read
    // a valid row's scales).
    const float *b_scale[4];
    if constexpr (BLK) {
        const float *scale_e = p.w_scale + int64_t(e) * fp8_scale_count(w_rows, k, scale_layout::block128);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = b_row[j];
            int64_t wr = GLU ? (r < BW / 2 ? n0 + r : n + n0 + (r - BW / 2)) : n0 + r;
            if (wr >= w_rows) wr = w_rows - 1;
            b_scale[j] = scale_e + fp8_scale_index(wr, 0, k, scale_layout::block128);
        }
    }

    constexpr int STAGES = stages(FP8);
    const int ktiles = int((k + BK - 1) / BK);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, int64_t(s) * BK);
        cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>(); // this thread's copies of stage kt have landed
        __syncthreads();             // everybody's have, and everybody is done with stage kt − 1
        if (kt + STAGES - 1 < ktiles) load_stage((kt + STAGES - 1) % STAGES, int64_t(kt + STAGES - 1) * BK);
        cp_async_commit();

        const unsigned char *st = smem + (kt % STAGES) * STAGE_BYTES;
        const unsigned char *ws = st + A_BYTES;
        float bsc[4]; // BLK: the stage's block scale per fragment row (BK divides fp8_block)
        if constexpr (BLK) {
#pragma unroll
            for (int j = 0; j < 4; ++j) bsc[j] = __ldg(b_scale[j] + int64_t(kt) * BK / fp8_block);
        }
#pragma unroll
        for (int kk = 0; kk < BK / 32; ++kk) {
            if constexpr (QA > 0) {
                // Rows g and g + 8 (bit 1 of the row is g's either way, so one swizzle for both
                // operands): 8 bytes of each, the fragment's two k quarters.
                const int c = (kk * 2 + (t >> 1)) ^ (((g >> 1) & 1) << 1), cb = c * 16 + (t & 1) * 8;
                uint2 wv[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) wv[j] = *reinterpret_cast<const uint2 *>(ws + b_row[j] * 64 + cb);
#pragma unroll
                for (int mt = 0; mt < 4; ++mt) {
                    if (mt * 16 >= rows) break; // uniform across the block
                    const uint2 lo = *reinterpret_cast<const uint2 *>(st + (mt * 16 + g) * 64 + cb);
                    const uint2 hi = *reinterpret_cast<const uint2 *>(st + (mt * 16 + g + 8) * 64 + cb);
                    const uint32_t a[4] = {lo.x, hi.x, lo.y, hi.y};
#pragma unroll
                    for (int j = 0; j < 4; ++j) mma_fp8<QA == 2>(acc[mt][j], a, wv[j].x, wv[j].y);
                }
                continue;
            }
            const int lane_chunk = (kk * 4 + t) ^ ((g & 1) << 2); // 16-byte chunk of rows with parity g
            uint32_t bf[4][4];                                    // [j][k16 step · 2 + reg]
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if constexpr (FP8) {
                    const int c = (kk * 2 + (t >> 1)) ^ (((g >> 1) & 1) << 1);
                    const uint2 v =
                        *reinterpret_cast<const uint2 *>(ws + b_row[j] * 64 + c * 16 + (t & 1) * 8);
                    bf[j][0] = fp8x2_to_bf16x2(v.x);
                    bf[j][1] = fp8x2_to_bf16x2(v.x >> 16);
                    bf[j][2] = fp8x2_to_bf16x2(v.y);
                    bf[j][3] = fp8x2_to_bf16x2(v.y >> 16);
                    if constexpr (BLK) {
#pragma unroll
                        for (int q = 0; q < 4; ++q) bf[j][q] = bf16x2_scaled(bf[j][q], bsc[j]);
                    }
                } else {
                    const uint4 v = *reinterpret_cast<const uint4 *>(ws + b_row[j] * 128 + lane_chunk * 16);
                    bf[j][0] = v.x;
                    bf[j][1] = v.y;
                    bf[j][2] = v.z;
                    bf[j][3] = v.w;
                }
            }
#pragma unroll
            for (int mt = 0; mt < 4; ++mt) {
                if (mt * 16 >= rows) break; // uniform across the block: the tile's last rows are empty
                const uint4 lo = *reinterpret_cast<const uint4 *>(st + (mt * 16 + g) * 128 + lane_chunk * 16);
                const uint4 hi =
                    *reinterpret_cast<const uint4 *>(st + (mt * 16 + g + 8) * 128 + lane_chunk * 16);
                const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    mma_bf16(acc[mt][j], a0, bf[j][0], bf[j][1]);
                    mma_bf16(acc[mt][j], a1, bf[j][2], bf[j][3]);
                }
            }
        }
    }
    cp_async_wait<0>(); // only empty groups remain; leave nothing in flight

    // ---- epilogue: accumulator (row g or g + 8 of m tile mt, columns 2t, 2t + 1 of block j) ------
    const float *scale = FP8 && !BLK ? p.w_scale + int64_t(e) * w_rows : nullptr;
    if constexpr (GLU) {
        const bool vec_o = (reinterpret_cast<uintptr_t>(p.out_act) & 3u) == 0 && p.ldo % 2 == 0;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int64_t col = n0 + warp * 16 + j * 8 + 2 * t;
            float sg[2] = {1.0f, 1.0f}, su[2] = {1.0f, 1.0f};
            if constexpr (FP8 && !BLK) {
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    if (col + q < n) {
                        sg[q] = scale[col + q];
                        su[q] = scale[n + col + q];
                    }
            }
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = mt * 16 + g + 8 * h;
                    if (r >= rows) continue;
                    const float sa = QA ? row_scale[r] : 1.0f;
                    float v[2];
#pragma unroll
                    for (int q = 0; q < 2; ++q)
                        v[q] =
                            QA ? silu_f(sa * (acc[mt][j][2 * h + q] * sg[q])) *
                                     (sa * (acc[mt][j + 2][2 * h + q] * su[q]))
                               : silu_f(acc[mt][j][2 * h + q] * sg[q]) * (acc[mt][j + 2][2 * h + q] * su[q]);
                    bf16_t *dst = p.out_act + int64_t(row_slot[r]) * p.ldo + col;
                    if (vec_o && col + 1 < n) {
                        *reinterpret_cast<uint32_t *>(dst) =
                            uint32_t(f_to_bf16(v[0])) | (uint32_t(f_to_bf16(v[1])) << 16);
                    } else {
                        if (col < n) dst[0] = f_to_bf16(v[0]);
                        if (col + 1 < n) dst[1] = f_to_bf16(v[1]);
                    }
                }
        }
    } else {
        const bool vec_o = (reinterpret_cast<uintptr_t>(p.out_f32) & 7u) == 0 && p.ldo % 2 == 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t col = n0 + warp * 32 + j * 8 + 2 * t;
            float sc[2] = {1.0f, 1.0f};
            if constexpr (FP8 && !BLK) {
#pragma unroll
                for (int q = 0; q < 2; ++q)
                    if (col + q < n) sc[q] = scale[col + q];
            }
#pragma unroll
            for (int mt = 0; mt < 4; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = mt * 16 + g + 8 * h;
                    if (r >= rows) continue;
                    float v0 = acc[mt][j][2 * h] * sc[0], v1 = acc[mt][j][2 * h + 1] * sc[1];
                    if constexpr (QA > 0) {
                        v0 *= row_scale[r];
                        v1 *= row_scale[r];
                    }
                    float *dst = p.out_f32 + int64_t(row_slot[r]) * p.ldo + col;
                    if (vec_o && col + 1 < n) {
                        *reinterpret_cast<float2 *>(dst) = make_float2(v0, v1);
                    } else {
                        if (col < n) dst[0] = v0;
                        if (col + 1 < n) dst[1] = v1;
                    }
                }
        }
    }
}

// Both grouped kernels' launch: more than the default 48 KB of dynamic shared memory, and all of
// the SM's unified L1 / shared memory given to shared memory (a hint), so that several blocks fit.
template <typename Kernel>
cudaError_t launch_large_smem(Kernel *kernel, dim3 grid, unsigned threads, int smem,
                              const moe_grouped_gemm_params &p, cudaStream_t stream) {
    if (const cudaError_t err =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        err != cudaSuccess)
        return err;
    if (const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                     int(cudaSharedmemCarveoutMaxShared));
        err != cudaSuccess)
        return err;
    return launch_kernel(kernel, grid, threads, size_t(smem), stream, p);
}

template <bool FP8, bool GLU, bool BLK = false, bool TM = false, int QA = 0>
cudaError_t launch_variant(const moe_grouped_gemm_params &p, cudaStream_t stream) {
    const dim3 grid(unsigned(p.max_tiles), ceil_div_u(p.n, GLU ? BW / 2 : BW));
    return launch_large_smem(moe_grouped_gemm_kernel<FP8, GLU, BLK, TM, QA>, grid, THREADS,
                             smem_bytes(FP8, QA > 0), p, stream);
}

// ---- Hopper: FP8 stacks with per-row scales on warpgroup MMA ----------------------------------
// One warpgroup a block: 128 weight rows (glu: 64 outputs, rows 16i … 16i + 7 the gate rows of 8
// outputs and rows 16i + 8 … 16i + 15 their up rows, so that each thread's accumulators hold the
// gate and the up of the same output) × the plan's 128-slot row tile (m64n128 MMAs, or m64n64
// where the tile holds at most 64 slots), k in stages of one 128-byte swizzled row through a
// cp.async pipeline, both operands from shared memory.
//  - BF16 activations (QA = 0): a stage is 64 k. The FP8 weights land as bytes in a staging
//    buffer; each thread widens the chunks it copied to BF16 (exactly, as above) into a swizzled
//    tile, double-buffered so that a stage's MMAs overlap the next stage's widening.
//  - FP8 activations (QA = 1: E4M3, 2: E5M2; act_quantize's codes and per-row scales): a stage is
//    128 k, both operands land by cp.async where the MMAs read them, nothing is converted.
// Per-row scales (and QA's per-slot scales) in the epilogue, as the mma.sync kernel applies them.
namespace wg {
constexpr int BW = 128, BN = 128, STAGES = 3, THREADS = 128;
constexpr int row_bytes = 128;               // a stage's k: one swizzled row (64 BF16 / 128 FP8)
constexpr int w_tile_bytes = BW * row_bytes; // a stage's weights as the MMAs read them
constexpr int b_bytes = BN * row_bytes;      // a stage's activations
constexpr int staging_bytes = BW * 64;       // QA = 0: a stage's FP8 weight bytes (64 k)
template <int QA>
constexpr int smem_bytes() { // + 1 KB: the tiles are aligned to 1 KB in the dynamic allocation
    return (QA ? STAGES * (w_tile_bytes + b_bytes) : 2 * w_tile_bytes + STAGES * (b_bytes + staging_bytes)) +
           1024;
}
static_assert(BN == moe_grouped_gemm_wgmma_tile_rows, "the plan's tiles are the kernel's slot tiles");
} // namespace wg

template <bool GLU, bool TM, int QA>
__global__ void __launch_bounds__(wg::THREADS, 2) moe_grouped_gemm_wgmma_kernel(moe_grouped_gemm_params p) {
    static_assert(!TM || GLU, "the tile-major layout is the gate/up stacks'");
    pdl_enter();
    extern __shared__ unsigned char smem_raw[];
    __shared__ int row_slot[wg::BN];
    __shared__ float row_scale[QA ? wg::BN : 1]; // QA: the slots' activation scales
    __shared__ int s_expert, s_row0, s_rows;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
    const int tile = blockIdx.x, E = int(p.n_expert);
    if (tid == 0) tile_expert(p, tile, E, wg::BN, s_expert, s_row0, s_rows);
    __syncthreads();
    const int e = s_expert;
    if (e < 0) return;
    const int rows = s_rows;
    if (tid < wg::BN) {
        const int slot = tid < rows ? p.sorted_slots[s_row0 + tid] : -1;
        row_slot[tid] = slot;
        if constexpr (QA > 0) row_scale[tid] = slot >= 0 ? p.a_scale[slot / p.a_row_div] : 0.0f;
    }
    __syncthreads();

    const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023u) & ~1023u;
    unsigned char *const smem = smem_raw + (base - raw);
    // QA = 0: widened weights [2] | activations [STAGES] | staging [STAGES];
    // QA > 0: weights [STAGES] | activations [STAGES].
    const uint32_t w_0 = base, b_0 = base + (QA ? wg::STAGES : 2) * wg::w_tile_bytes,
                   st_0 = b_0 + wg::STAGES * wg::b_bytes;
    const unsigned char *const staging = smem + (st_0 - base);

    const int64_t k = p.k, n = p.n, w_rows = GLU ? 2 * n : n;
    const int64_t out0 = int64_t(blockIdx.y) * (GLU ? wg::BW / 2 : wg::BW);
    const unsigned char *w_e = static_cast<const unsigned char *>(p.w) + int64_t(e) * w_rows * k;
    constexpr int KS = QA ? 128 : 64; // k per stage

    // Copies: 16-byte chunk c16 = tid % 8 of rows tid / 8 + 16i, for the activations (i < 8) and,
    // with QA, for the weights; without QA the weights' staging takes chunk tid % 4 of rows
    // tid / 4 + 32i (i < 4): bytes 16·tid + 2048i of [128 rows][64 bytes].
    const int c16 = tid & 7, r16 = tid >> 3;
    constexpr int W_N = QA ? 8 : 4;
    const int w_c = QA ? c16 : (tid & 3), w_r0 = QA ? r16 : (tid >> 2), w_rstep = QA ? 16 : 32;
    const unsigned char *b_src[8]; // the row's chunk c16 at k = 0
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int slot = row_slot[r16 + 16 * i];
        const int64_t ar = slot / p.a_row_div;
        b_src[i] = slot < 0 ? nullptr
                   : QA     ? reinterpret_cast<const unsigned char *>(p.a_q + ar * p.lda) + c16 * 16
                            : reinterpret_cast<const unsigned char *>(p.a + ar * p.lda + c16 * 8);
    }
    // The weight chunk's source at k = 0 (tile-major: its place in 64-column chunk 0, the chunk
    // index then follows k).
    const unsigned char *w_src[W_N];
#pragma unroll
    for (int i = 0; i < W_N; ++i) {
        const int r = w_r0 + w_rstep * i;
        const int kc = 16 * w_c; // the chunk's first k within the stage
        if constexpr (GLU) {
            const int64_t f = out0 + 8 * (r / 16) + (r % 8);
            const int up = (r % 16) >= 8;
            if constexpr (TM)
                w_src[i] = f < n ? w_e + (f / 16) * 32 * k + (2 * ((f / 8) % 2) + up) * 512 + (r % 8) * 64 +
                                       (kc / 64) * 2048 + kc % 64
                                 : nullptr;
            else
                w_src[i] = f < n ? w_e + (up ? n + f : f) * k + kc : nullptr;
        } else {
            w_src[i] = out0 + r < n ? w_e + (out0 + r) * k + kc : nullptr;
        }
    }
    auto load_stage = [&](int s, int64_t k0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) { // activations: chunk c16 holds k0 + 16·c16 (FP8) or + 8·c16 (BF16)
            const bool ok = b_src[i] && k0 + (QA ? 16 : 8) * c16 < k;
            cp_async16(b_0 + uint32_t(s * wg::b_bytes) + sw128_offset(r16 + 16 * i, c16),
                       ok ? b_src[i] + k0 * (QA ? 1 : 2) : w_e, ok ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < W_N; ++i) {
            const bool ok = w_src[i] && k0 + 16 * w_c < k;
            const unsigned char *src = w_src[i] + (TM ? (k0 / 64) * 2048 : k0);
            const uint32_t dst = QA ? w_0 + uint32_t(s * wg::w_tile_bytes) + sw128_offset(w_r0 + 16 * i, w_c)
                                    : st_0 + uint32_t(s * wg::staging_bytes + 16 * tid + 2048 * i);
            cp_async16(dst, ok ? src : w_e, ok ? 16 : 0);
        }
    };

    float acc[2][64]; // set by the first MMAs (accumulate = false); [0, 32) only when rows <= 64
    const int ktiles = int((k + KS - 1) / KS);
#pragma unroll
    for (int s = 0; s < wg::STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, int64_t(s) * KS);
        cp_async_commit();
    }
    // The main loop, one instance per MMA width (a branch on the width inside it has ptxas insert
    // warpgroup arrives around every MMA).
    auto main_loop = [&](auto wide_c) {
        constexpr int N = decltype(wide_c)::value ? 128 : 64;
#pragma unroll 1
        for (int kt = 0; kt < ktiles; ++kt) {
            const int s = kt % wg::STAGES, buf = QA ? s : kt & 1;
            cp_async_wait<wg::STAGES - 2>(); // this thread's copies of stage kt have landed
            if constexpr (QA == 0) {
                // Widen the weight chunks this thread copied (16 E4M3 → 16 BF16, two swizzled chunks).
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = w_r0 + 32 * i;
                    const uint4 v = *reinterpret_cast<const uint4 *>(staging + s * wg::staging_bytes +
                                                                     16 * tid + 2048 * i);
                    const uint4 lo = make_uint4(fp8x2_to_bf16x2(v.x), fp8x2_to_bf16x2(v.x >> 16),
                                                fp8x2_to_bf16x2(v.y), fp8x2_to_bf16x2(v.y >> 16));
                    const uint4 hi = make_uint4(fp8x2_to_bf16x2(v.z), fp8x2_to_bf16x2(v.z >> 16),
                                                fp8x2_to_bf16x2(v.w), fp8x2_to_bf16x2(v.w >> 16));
                    unsigned char *dst = smem + buf * wg::w_tile_bytes;
                    *reinterpret_cast<uint4 *>(dst + sw128_offset(r, 2 * w_c)) = lo;
                    *reinterpret_cast<uint4 *>(dst + sw128_offset(r, 2 * w_c + 1)) = hi;
                }
            }
            fence_proxy_async_shared(); // what this thread's copies and stores put there, for wgmma
            __syncthreads();            // everybody's
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) { // k16 (BF16) or k32 (FP8) steps: 32 bytes each
                const uint64_t db = wgmma_desc_sw128(b_0 + uint32_t(s * wg::b_bytes + kk * 32));
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    const uint64_t da =
                        wgmma_desc_sw128(w_0 + uint32_t(buf * wg::w_tile_bytes + mt * 8192 + kk * 32));
                    if constexpr (QA > 0)
                        wgmma_m64k32_fp8<N, QA == 2>(acc[mt], da, db, kt > 0 || kk > 0);
                    else if constexpr (N == 128)
                        wgmma_m64n128k16_bf16(acc[mt], da, db, kt > 0 || kk > 0);
                    else
                        wgmma_m64n64k16_bf16(acc[mt], da, db, kt > 0 || kk > 0);
                }
            }
            wgmma_commit();
            // The MMAs of stage kt − 1 have finished: its buffers (refilled below; without QA the
            // widened buffer it read, written again at kt + 1) are free.
            wgmma_wait<1>();
            if (kt + wg::STAGES - 1 < ktiles)
                load_stage((kt + wg::STAGES - 1) % wg::STAGES, int64_t(kt + wg::STAGES - 1) * KS);
            cp_async_commit();
        }
    };
    if (rows > 64) // uniform across the block
        main_loop(std::true_type{});
    else
        main_loop(std::false_type{});
    wgmma_wait<0>();
    wgmma_fence_acc(acc[0]);
    wgmma_fence_acc(acc[1]);
    cp_async_wait<0>();

    // Epilogue. acc[mt][4j + 2h + c]: weight row 64mt + 16·warp + g + 8h, slot 8j + 2q + c (slots
    // past 64 only when rows > 64).
    const float *scale = p.w_scale + int64_t(e) * w_rows;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        if constexpr (GLU) {
            const int64_t f = out0 + 8 * (4 * mt + warp) + g;
            if (f >= n) continue;
            const float sg = scale[f], su = scale[n + f];
#pragma unroll
            for (int j = 0; j < wg::BN / 8; ++j)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    const int t = 8 * j + 2 * q + c;
                    if (t >= rows) continue;
                    const float sa = QA ? row_scale[t] : 1.0f;
                    p.out_act[int64_t(row_slot[t]) * p.ldo + f] = f_to_bf16(
                        silu_f(sa * (acc[mt][4 * j + c] * sg)) * (sa * (acc[mt][4 * j + 2 + c] * su)));
                }
        } else {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t col = out0 + 64 * mt + 16 * warp + g + 8 * h;
                if (col >= n) continue;
                const float sc = scale[col];
#pragma unroll
                for (int j = 0; j < wg::BN / 8; ++j)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int t = 8 * j + 2 * q + c;
                        if (t >= rows) continue;
                        const float sa = QA ? row_scale[t] : 1.0f;
                        p.out_f32[int64_t(row_slot[t]) * p.ldo + col] =
                            sa * (acc[mt][4 * j + 2 * h + c] * sc);
                    }
            }
        }
    }
}

template <bool GLU, bool TM, int QA>
cudaError_t launch_wgmma_variant(const moe_grouped_gemm_params &p, cudaStream_t stream) {
    const dim3 grid(unsigned(p.max_tiles), ceil_div_u(p.n, GLU ? wg::BW / 2 : wg::BW));
    return launch_large_smem(moe_grouped_gemm_wgmma_kernel<GLU, TM, QA>, grid, wg::THREADS,
                             wg::smem_bytes<QA>(), p, stream);
}

template <int QA>
cudaError_t launch_wgmma_qa(const moe_grouped_gemm_params &p, cudaStream_t stream) {
    if (!p.glu) return launch_wgmma_variant<false, false, QA>(p, stream);
    return p.w_tile_major ? launch_wgmma_variant<true, true, QA>(p, stream)
                          : launch_wgmma_variant<true, false, QA>(p, stream);
}

} // namespace

// The device is of compute capability 9.0 and the module has sm_90a code (wgmma is not in the
// PTX of any other target, and sm_90a code runs on 9.0 only).
bool moe_grouped_gemm_wgmma_device() {
#ifdef ES_KERNELS_SM90A
    return device_compute_capability() == 90;
#else
    return false;
#endif
}

bool moe_grouped_gemm_fp8_mma_device() {
#ifdef ES_KERNELS_SM89
    return device_compute_capability() >= 89;
#else
    return false;
#endif
}

bool moe_grouped_gemm_fp8_act_ok(const moe_grouped_gemm_params &p) {
    if (!p.a_q || !p.a_scale || p.wfmt != weight_format::fp8_e4m3 || p.w_layout != scale_layout::channel ||
        !p.w_scale || p.k <= 0 || p.lda % 16 != 0 || !aligned16(p.a_q))
        return false;
    if (moe_grouped_gemm_wgmma_ok(p)) return true;
    if (p.w_tile_major && (!p.glu || !fp8_tile_major_ok(p.n, p.k) || !aligned16(p.w))) return false;
    return moe_grouped_gemm_fp8_mma_device();
}

int64_t moe_grouped_gemm_plan_rows(const moe_grouped_gemm_params &p) {
    return moe_grouped_gemm_wgmma_ok(p) ? moe_grouped_gemm_wgmma_tile_rows : moe_grouped_gemm_tile_rows;
}

bool moe_grouped_gemm_wgmma_ok(const moe_grouped_gemm_params &p) {
    if (!p.allow_wgmma || p.wfmt != weight_format::fp8_e4m3 || p.w_layout != scale_layout::channel ||
        !p.w_scale)
        return false;
    if (p.k <= 0 || p.k % 16 != 0 || !aligned16(p.w)) return false;
    if (p.a_q ? (!p.a_scale || p.lda % 16 != 0 || !aligned16(p.a_q)) : (p.lda % 8 != 0 || !aligned16(p.a)))
        return false;
    if (p.w_tile_major && (!p.glu || !fp8_tile_major_ok(p.n, p.k))) return false;
    return moe_grouped_gemm_wgmma_device();
}

cudaError_t launch_moe_grouped_gemm(const moe_grouped_gemm_params &p, cudaStream_t stream) {
    if (p.max_tiles <= 0 || p.n <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if ((fp8 && !p.w_scale) || p.k <= 0 || p.n_expert <= 0 || (p.glu ? !p.out_act : !p.out_f32))
        return cudaErrorInvalidValue;
    if (p.tile_rows != moe_grouped_gemm_plan_rows(p))
        return cudaErrorInvalidValue; // a plan for the other kernel
    if (moe_grouped_gemm_wgmma_ok(p)) {
        if (!p.a_q) return launch_wgmma_qa<0>(p, stream);
        return p.a_fmt == fp8_format::e5m2 ? launch_wgmma_qa<2>(p, stream) : launch_wgmma_qa<1>(p, stream);
    }
    if (p.a_q) { // FP8 activations on mma.sync (compute capability 8.9 and later)
        if (!moe_grouped_gemm_fp8_act_ok(p)) return cudaErrorInvalidValue;
        const bool e5 = p.a_fmt == fp8_format::e5m2;
        if (p.w_tile_major)
            return e5 ? launch_variant<true, true, false, true, 2>(p, stream)
                      : launch_variant<true, true, false, true, 1>(p, stream);
        if (p.glu)
            return e5 ? launch_variant<true, true, false, false, 2>(p, stream)
                      : launch_variant<true, true, false, false, 1>(p, stream);
        return e5 ? launch_variant<true, false, false, false, 2>(p, stream)
                  : launch_variant<true, false, false, false, 1>(p, stream);
    }
    if (p.w_tile_major) {
        if (!fp8 || !p.glu || p.w_layout != scale_layout::channel || !fp8_tile_major_ok(p.n, p.k) ||
            !aligned16(p.w))
            return cudaErrorInvalidValue;
        return launch_variant<true, true, false, true>(p, stream);
    }
    if (fp8 && p.w_layout == scale_layout::block128)
        return p.glu ? launch_variant<true, true, true>(p, stream)
                     : launch_variant<true, false, true>(p, stream);
    if (fp8) return p.glu ? launch_variant<true, true>(p, stream) : launch_variant<true, false>(p, stream);
    return p.glu ? launch_variant<false, true>(p, stream) : launch_variant<false, false>(p, stream);
}

} // namespace es
