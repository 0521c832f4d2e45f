// Just enough of CUDA to run nm_spmm_f32.cu and splitk_reduce.cu on the host: every thread of
// a block is an OS thread, __syncthreads is a barrier, blocks run one after another, and
// cp.async copies at once. Built with AddressSanitizer and UBSan by nm-cuda's `emulated`
// test, so out-of-bounds global or shared accesses and misaligned float4 accesses fail there
// as they would under compute-sanitizer. Not a performance model.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// A block's shared arrays: function statics, one copy for the block's threads (blocks run
// one after another).
#define __shared__ static

struct dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
using std::min;

inline std::barrier<>* emulated_barrier = nullptr;
inline float* emulated_shared = nullptr;
inline void __syncthreads() { emulated_barrier->arrive_and_wait(); }

// mma.sync.m16n8k16 bf16 → f32 for one warp: every lane leaves its fragments in the warp's
// staging area, waits for the others, computes its own four outputs from the PTX ISA's
// fragment layout (groupID g = lane/4, t = lane%4; A: a0 (g, 2t..2t+1), a1 (g+8, ·),
// a2 (g, 2t+8..), a3 (g+8, 2t+8..); B: b0 (k 2t..2t+1, n g), b1 (k 2t+8..); D: (g, 2t),
// (g, 2t+1), (g+8, 2t), (g+8, 2t+1); the lower index in the low half), and waits again
// before the area is reused.
struct EmulatedWarp {
    std::barrier<> barrier{32};
    uint32_t a[32][4];
    uint32_t b[32][2];
};
inline std::unique_ptr<EmulatedWarp[]> emulated_warps;

inline float emulated_bf16(uint32_t pair, int high) { 
    uint32_t bits = high ? (pair >> 16) : (pair & 0xffffu);
    float f;
    uint32_t word = bits << 16;
    std::memcpy(&f, &word, 4);
    return f;
}

inline void emulated_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const int lane = threadIdx.x % 32;
    EmulatedWarp& w = emulated_warps[threadIdx.x / 32];
    std::memcpy(w.a[lane], a, sizeof w.a[lane]);
    w.b[lane][0] = b0;
    w.b[lane][1] = b1;
    w.barrier.arrive_and_wait();
    auto A = [&](int r, int k) { return emulated_bf16(w.a[(r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)], k % 2); };
    auto B = [&](int k, int n) { return emulated_bf16(w.b[n * 4 + (k % 8) / 2][k / 8], k % 2); };
    const int g = lane / 4, t = lane % 4;
    for (int q = 0; q < 4; ++q) {
        const int r = g + (q / 2) * 8, n = 2 * t + q % 2;
        float s = d[q];
        for (int k = 0; k < 16; ++k) s = std::fma(A(r, k), B(k, n), s);
        d[q] = s;
    }
    w.barrier.arrive_and_wait();
}
