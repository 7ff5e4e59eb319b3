// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only): the shared-memory matrix descriptor
// for 128-byte-swizzled K-major tiles, the m64n64k16 BF16 instruction with fp32 accumulators,
// and the fences and waits around it. Device code only; every function compiles to nothing (or
// a trap) for other targets, so callers guard their use with ES_WGMMA (the build has sm_90a) at
// compile time and with the device's compute capability 9.0 at run time.
//
// Tiles: rows of 64 BF16 (128 bytes) along k, 16-byte chunk c of row r stored at c ^ (r % 8)
// (CUTLASS's Swizzle<3,4,3>, the pattern TMA writes with CU_TENSOR_MAP_SWIZZLE_128B), the tile
// 1024-byte aligned; a descriptor's stride byte offset is the 1,024 bytes between groups of 8
// rows; one k16 step further along the row is its start address + 32 bytes.
#pragma once

#include "kernels/kernel_common.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ES_WGMMA_DEVICE 1
#endif

// The accumulators as asm operands (%0 … %N−1) and their register list, for N = 32 and 64.
#define ES_WGMMA_REGS32                                                                                      \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ES_WGMMA_REGS64                                                                                      \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
    "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
    "%62, %63}"
#define ES_WGMMA_ACC32(d)                                                                                    \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),          \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),             \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),           \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),           \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define ES_WGMMA_ACC64(d)                                                                                    \
    ES_WGMMA_ACC32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),         \
        "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),           \
        "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),           \
        "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]),           \
        "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
// One MMA on 32 or 64 accumulators d, descriptors desc_a / desc_b and the bool accumulate (the
// scale-d predicate); `op` is the instruction, `tail` its immediates after the predicate.
#define ES_WGMMA_ASM32(op, tail)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" op " " ES_WGMMA_REGS32 ", %32, %33, p, " tail  \
                 ";\n}\n"                                                                                    \
                 : ES_WGMMA_ACC32(d)                                                                         \
                 : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)))
#define ES_WGMMA_ASM64(op, tail)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" op " " ES_WGMMA_REGS64 ", %64, %65, p, " tail  \
                 ";\n}\n"                                                                                    \
                 : ES_WGMMA_ACC64(d)                                                                         \
                 : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)))

namespace es {

// 128-byte swizzle, K-major: start address >> 4 (bits 0–13), leading byte offset (unused for
// this layout) 0, stride byte offset 1,024 >> 4 (bits 32–45), base offset 0 (the tile is
// 1024-byte aligned), layout type 1 = 128B swizzle (bits 62–63).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_byte_addr) {
    return uint64_t((smem_byte_addr >> 4) & 0x3fffu) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// Byte offset of 16-byte chunk c (0…7) of row r in a 128-byte-swizzled tile.
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) {
    return uint32_t(r * 128 + ((c ^ (r & 7)) << 4));
}

// Orders this thread's earlier generic-proxy writes to shared memory (st.shared, completed
// cp.async copies) before later async-proxy reads (wgmma's operands).
__device__ __forceinline__ void fence_proxy_async_shared() {
#ifdef ES_WGMMA_DEVICE
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef ES_WGMMA_DEVICE
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef ES_WGMMA_DEVICE
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef ES_WGMMA_DEVICE
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// After wgmma_wait: the accumulators' values are the MMAs' results from here on (keeps the
// compiler from moving their uses above the wait, which has no register operands).
template <int N>
__device__ __forceinline__ void wgmma_fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d[64×64] = A[64×16] · B[16×64]ᵀ + (accumulate ? d : 0), BF16 operands from shared memory (both K-major,
// descriptors above), fp32 accumulators. Thread t of the warpgroup holds, with w = t / 32, g = (t % 32) / 4,
// q = t % 4: d[4j + 0/1] = (row 16w + g, columns 8j + 2q / + 1), d[4j + 2/3] = (row 16w + g + 8, the
// same columns), j = 0…7.
// (The first MMA of a sum passes accumulate = false rather than the accumulators zeroed: moves
// into them inside the MMA pipeline make ptxas serialize every wgmma, its warning C7515.)
// (d may be longer: its first 32 are the accumulators.)
template <int N>
__device__ __forceinline__ void wgmma_m64n64k16_bf16(float (&d)[N], uint64_t desc_a, uint64_t desc_b,
                                                     bool accumulate) {
    static_assert(N >= 32, "64 columns: 32 accumulators a thread");
#ifdef ES_WGMMA_DEVICE
    ES_WGMMA_ASM32("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "1, 1, 0, 0");
#else
    (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}

// The same with 128 columns: d[4j + …] as above for j = 0…15.
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      bool accumulate) {
#ifdef ES_WGMMA_DEVICE
    ES_WGMMA_ASM64("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "1, 1, 0, 0");
#else
    (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}

// FP8: d[64×N] = A[64×32] · B[32×N]ᵀ + (accumulate ? d : 0), A E4M3 (the weights), B E4M3 or
// E5M2 (B_E5M2: the activations), both K-major 128-byte-swizzled (a k32 step is 32 bytes, as a
// BF16 k16 step), fp32 accumulators laid out as above. N = 64 or 128; d may be longer than N / 2.
template <int N, bool B_E5M2, int NR>
__device__ __forceinline__ void wgmma_m64k32_fp8(float (&d)[NR], uint64_t desc_a, uint64_t desc_b,
                                                 bool accumulate) {
    static_assert((N == 64 || N == 128) && NR >= N / 2, "64 or 128 columns: N / 2 accumulators a thread");
#ifdef ES_WGMMA_DEVICE
    if constexpr (N == 64 && !B_E5M2)
        ES_WGMMA_ASM32("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3", "1, 1");
    else if constexpr (N == 64)
        ES_WGMMA_ASM32("wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2", "1, 1");
    else if constexpr (!B_E5M2)
        ES_WGMMA_ASM64("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "1, 1");
    else
        ES_WGMMA_ASM64("wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2", "1, 1");
#else
    (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
    __trap();
#endif
}

} // namespace es

// The operand-list macros serve the functions above only.
#undef ES_WGMMA_REGS32
#undef ES_WGMMA_REGS64
#undef ES_WGMMA_ACC32
#undef ES_WGMMA_ACC64
#undef ES_WGMMA_ASM32
#undef ES_WGMMA_ASM64
