// Warp-level tensor-core and asynchronous-copy helpers shared by the kernels that use mma.sync
// (attention prefill and decode, the grouped expert GEMM): m16n8k16 BF16 MMA with fp32
// accumulation, ldmatrix (plain and transposed) and cp.async. Device code only.
#pragma once

#include "kernels/kernel_common.cuh"

namespace es {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global → shared, asynchronously; bytes past src_bytes (0…16) are zero-filled and not read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
// 16 bytes global → shared, or 16 zero bytes when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    cp_async16(smem_addr(dst), src, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Four 8×8 BF16 matrices from shared memory; lane i gives the address of row i % 8 of matrix i / 8.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
// The same, each matrix transposed (a row-major [k][n] tile read as an MMA B fragment).
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
// d += a·b for one m16n8k16 tile. With g = lane / 4, t = lane % 4: a (16×16, row-major) is
// {(g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}; b (16×8) is {(2t..2t+1, g), (2t+8.., g)};
// d is {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. BF16 pairs: the lower index in the low half.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// d += a·b for one m16n8k32 FP8 tile (compute capability 8.9 and later): a (16×32 bytes,
// row-major; E4M3, or E5M2 when A_E5M2) is {(g, 4t..4t+3), (g+8, 4t..), (g, 16+4t..), (g+8, 16+4t..)},
// b (32×8, E4M3) {(4t..4t+3, g), (16+4t.., g)}, the lower k in the lower byte; d as mma_bf16's.
template <bool A_E5M2>
__device__ __forceinline__ void mma_fp8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if constexpr (A_E5M2)
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d, (void)a, (void)b0, (void)b1;
    __trap();
#endif
}
// (lo, hi) → BF16x2 with lo in the low half (the lower column of a fragment pair).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return uint32_t(f_to_bf16(lo)) | (uint32_t(f_to_bf16(hi)) << 16);
}

} // namespace es
