// moe_grouped_gemm (see moe_grouped_gemm.cuh). Grid: (row tile, column tile of 64). Block 128
// threads = 4 warps in 2×2, each warp a 32×32 piece of the 64×64 output tile as 2×2 WMMA 16×16×16
// BF16 fragments (two sets for glu: gate and up). A row tile finds its expert by binary search in
// tile_offsets (tiles past the plan's total exit at once: the grid is an upper bound). Per k-step
// of 32 the block stages the gathered activation rows and the expert's weight rows in shared
// memory (16-byte loads where size and alignment allow, FP8 widened to BF16), then the
// accumulators go through shared memory to the epilogue (scales, SiLU·up, BF16 or fp32 stores).
// Single-stage (no cp.async pipeline yet): a first version, correct on any shape.
#include "moe_grouped_gemm.cuh"
#include "kernel_common.cuh"

#include <mma.h>

namespace es {
namespace {

using namespace nvcuda;

constexpr int BM = 64, BN = 64, BK = 32, LDS = BK + 8, LDC = BN + 4;
constexpr int k_ab_bytes = 3 * BM * LDS * 2;   // A, gate B, up B (BF16)
constexpr int k_c_bytes = 2 * BM * LDC * 4;    // gate C, up C (fp32)
constexpr int k_smem_bytes = k_ab_bytes > k_c_bytes ? k_ab_bytes : k_c_bytes;

__device__ __forceinline__ uint4 pack8(const uint16_t (&t)[8]) {
    return make_uint4(uint32_t(t[0]) | (uint32_t(t[1]) << 16), uint32_t(t[2]) | (uint32_t(t[3]) << 16),
                      uint32_t(t[4]) | (uint32_t(t[5]) << 16), uint32_t(t[6]) | (uint32_t(t[7]) << 16));
}

template <bool FP8>
__device__ __forceinline__ void stage_weights(uint16_t *dst, const unsigned char *w_e, int64_t row_begin, int64_t n_rows_valid,
                                              int64_t k, int64_t k0, bool vec, int tid) {
    for (int idx = tid; idx < BN * BK / 8; idx += 128) {
        const int r = idx / (BK / 8), c8 = (idx % (BK / 8)) * 8;
        const int64_t kc = k0 + c8;
        uint4 out = make_uint4(0, 0, 0, 0);
        if (r < n_rows_valid && kc < k) {
            const int64_t row = row_begin + r;
            if (vec && kc + 8 <= k) {
                if constexpr (FP8) {
                    const uint2 v = __ldg(reinterpret_cast<const uint2 *>(w_e + row * k + kc));
                    const uint32_t in[2] = {v.x, v.y};
                    uint32_t o[4];
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        const float2 a = fp8x2_to_f2(in[i] & 0xffffu), b = fp8x2_to_f2(in[i] >> 16);
                        o[2 * i] = uint32_t(f_to_bf16(a.x)) | (uint32_t(f_to_bf16(a.y)) << 16);
                        o[2 * i + 1] = uint32_t(f_to_bf16(b.x)) | (uint32_t(f_to_bf16(b.y)) << 16);
                    }
                    out = make_uint4(o[0], o[1], o[2], o[3]);
                } else {
                    out = __ldg(reinterpret_cast<const uint4 *>(w_e + (row * k + kc) * 2));
                }
            } else {
                uint16_t tmp[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) tmp[i] = kc + i < k ? f_to_bf16(wval<FP8>(w_e + row * k * (FP8 ? 1 : 2), kc + i)) : 0;
                out = pack8(tmp);
            }
        }
        *reinterpret_cast<uint4 *>(dst + r * LDS + c8) = out;
    }
}

template <bool FP8, bool GLU>
__global__ void __launch_bounds__(128) moe_grouped_gemm_kernel(moe_grouped_gemm_params p) {
    pdl_enter();
    __shared__ __align__(128) unsigned char smem[k_smem_bytes];
    __shared__ int row_src[BM], row_slot[BM];
    __shared__ int s_expert, s_row0, s_rows;
    uint16_t *As = reinterpret_cast<uint16_t *>(smem), *Bs = As + BM * LDS, *Bs2 = Bs + BN * LDS;
    float *Cs = reinterpret_cast<float *>(smem), *Cs2 = Cs + BM * LDC;
    const int tid = threadIdx.x, warp = tid / 32, wm = warp / 2, wn = warp % 2;
    const int tile = blockIdx.x;
    const int E = int(p.n_expert);

    if (tid == 0) {
        int e = -1;
        if (tile < p.tile_offsets[E]) {
            int lo = 0, hi = E - 1; // last e with tile_offsets[e] <= tile
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (p.tile_offsets[mid] <= tile) lo = mid;
                else hi = mid - 1;
            }
            e = lo;
            s_row0 = p.offsets[e] + (tile - p.tile_offsets[e]) * BM;
            s_rows = min(BM, p.offsets[e + 1] - s_row0);
        }
        s_expert = e;
    }
    __syncthreads();
    const int e = s_expert;
    if (e < 0) return;
    const int row0 = s_row0, rows = s_rows;
    if (tid < BM) {
        const int slot = tid < rows ? p.sorted_slots[row0 + tid] : -1;
        row_slot[tid] = slot;
        row_src[tid] = slot >= 0 ? int(slot / p.a_row_div) : -1;
    }
    const int64_t n0 = int64_t(blockIdx.y) * BN, k = p.k, n = p.n;
    const int64_t w_rows = GLU ? 2 * n : n;
    const unsigned char *w_e = static_cast<const unsigned char *>(p.w) + int64_t(e) * w_rows * k * (FP8 ? 1 : 2);
    const bool vec_a = p.lda % 8 == 0 && k % 8 == 0 && aligned16(p.a);
    const bool vec_w = k % 8 == 0 && aligned16(p.w);
    const int64_t n_valid = n - n0 < BN ? n - n0 : BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2], acc2[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::fill_fragment(acc[i][j], 0.0f);
            if (GLU) wmma::fill_fragment(acc2[i][j], 0.0f);
        }
    __syncthreads();

    for (int64_t k0 = 0; k0 < k; k0 += BK) {
        for (int idx = tid; idx < BM * BK / 8; idx += 128) {
            const int r = idx / (BK / 8), c8 = (idx % (BK / 8)) * 8;
            const int64_t kc = k0 + c8;
            uint4 v = make_uint4(0, 0, 0, 0);
            const int src = row_src[r];
            if (src >= 0 && kc < k) {
                const uint16_t *arow = p.a + int64_t(src) * p.lda;
                if (vec_a && kc + 8 <= k) {
                    v = __ldg(reinterpret_cast<const uint4 *>(arow + kc));
                } else {
                    uint16_t tmp[8];
#pragma unroll
                    for (int i = 0; i < 8; ++i) tmp[i] = kc + i < k ? arow[kc + i] : 0;
                    v = pack8(tmp);
                }
            }
            *reinterpret_cast<uint4 *>(As + r * LDS + c8) = v;
        }
        stage_weights<FP8>(Bs, w_e, n0, n_valid, k, k0, vec_w, tid);
        if (GLU) stage_weights<FP8>(Bs2, w_e, n + n0, n_valid, k, k0, vec_w, tid);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(fa[i], reinterpret_cast<const __nv_bfloat16 *>(As + (wm * 32 + i * 16) * LDS + kk), LDS);
#pragma unroll
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(fb[j], reinterpret_cast<const __nv_bfloat16 *>(Bs + (wn * 32 + j * 16) * LDS + kk), LDS);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            if (GLU) {
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    wmma::load_matrix_sync(fb[j], reinterpret_cast<const __nv_bfloat16 *>(Bs2 + (wn * 32 + j * 16) * LDS + kk), LDS);
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j) wmma::mma_sync(acc2[i][j], fa[i], fb[j], acc2[i][j]);
            }
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, acc[i][j], LDC, wmma::mem_row_major);
            if (GLU)
                wmma::store_matrix_sync(Cs2 + (wm * 32 + i * 16) * LDC + wn * 32 + j * 16, acc2[i][j], LDC, wmma::mem_row_major);
        }
    __syncthreads();
    const float *scale = FP8 ? p.w_scale + int64_t(e) * w_rows : nullptr;
    for (int idx = tid; idx < BM * BN; idx += 128) {
        const int r = idx / BN, c = idx % BN;
        if (r >= rows || c >= n_valid) continue;
        const int64_t slot = row_slot[r], col = n0 + c;
        float v = Cs[r * LDC + c];
        if (FP8) v *= scale[col];
        if (GLU) {
            float u = Cs2[r * LDC + c];
            if (FP8) u *= scale[n + col];
            p.out_act[slot * p.ldo + col] = f_to_bf16(silu_f(v) * u);
        } else {
            p.out_f32[slot * p.ldo + col] = v;
        }
    }
}

} // namespace

cudaError_t launch_moe_grouped_gemm(const moe_grouped_gemm_params &p, cudaStream_t stream) {
    if (p.max_tiles <= 0 || p.n <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if ((fp8 && !p.w_scale) || p.k <= 0 || p.n_expert <= 0 || (p.glu ? !p.out_act : !p.out_f32))
        return cudaErrorInvalidValue;
    const dim3 grid(unsigned(p.max_tiles), ceil_div_u(p.n, BN));
    if (fp8) {
        if (p.glu) return launch_kernel(moe_grouped_gemm_kernel<true, true>, grid, 128, 0, stream, p);
        return launch_kernel(moe_grouped_gemm_kernel<true, false>, grid, 128, 0, stream, p);
    }
    if (p.glu) return launch_kernel(moe_grouped_gemm_kernel<false, true>, grid, 128, 0, stream, p);
    return launch_kernel(moe_grouped_gemm_kernel<false, false>, grid, 128, 0, stream, p);
}

} // namespace es
