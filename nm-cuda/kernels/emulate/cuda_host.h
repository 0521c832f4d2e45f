// Just enough of CUDA to run the kernels (nm_spmm_f32.cu, nm_spmm_bf16_tc.cu, nv24_spmm_sp.cu,
// splitk_reduce.cu, to_bf16.cu) on the host: every thread of
// a block is an OS thread, __syncthreads is a barrier, blocks run one after another, and
// cp.async copies at once. Built with AddressSanitizer and UBSan by nm-cuda's `emulated`
// test, so out-of-bounds global or shared accesses and misaligned float4 accesses fail there
// as they would under compute-sanitizer. Not a performance model.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
struct alignas(8) float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
using std::min;
inline unsigned int __float_as_uint(float x) {
    unsigned int u;
    std::memcpy(&u, &x, sizeof u);
    return u;
}

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
    uint32_t b[32][4];
    uint32_t e[32];
    const uint16_t* rows[32];
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

// ldmatrix.m8n8.x4(.trans).b16 for one warp: lane l names row l % 8 of matrix l / 8. Without
// .trans, register j of lane l holds matrix j's row l / 4, columns 2(l % 4) and 2(l % 4) + 1;
// with .trans, its rows 2(l % 4) and 2(l % 4) + 1 of column l / 4 (lower index in the low half).
inline void emulated_ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans) {
    const int lane = threadIdx.x % 32;
    EmulatedWarp& w = emulated_warps[threadIdx.x / 32];
    w.rows[lane] = row;
    w.barrier.arrive_and_wait();
    for (int j = 0; j < 4; ++j) {
        const uint16_t *lo, *hi;
        if (trans) {
            lo = w.rows[8 * j + 2 * (lane % 4)] + lane / 4;
            hi = w.rows[8 * j + 2 * (lane % 4) + 1] + lane / 4;
        } else {
            lo = w.rows[8 * j + lane / 4] + 2 * (lane % 4);
            hi = lo + 1;
        }
        r[j] = (uint32_t)*lo | (uint32_t)*hi << 16;
    }
    w.barrier.arrive_and_wait();
}

// mma.sp.m16n8k32 bf16 → f32, sparsity selector 0, for one warp. A is the 16×16 compressed
// matrix in the m16n8k16 A layout (see emulated_mma_bf16); its element (r, c) sits in chunk
// c / 2 (columns 4(c/2)..4(c/2)+3 of the k32 slice) at the 2-bit offset the metadata gives:
// lane 4g + h (h = 0, 1) holds rows g (bits 0-15) and g + 8 (bits 16-31) for chunks 4h..4h+3,
// 4 bits per chunk, the even c's offset in the low 2 bits. B (k32 × n8): register q of lane
// 4n + t holds k = 8q + 2t, 8q + 2t + 1 of column n. Offsets that are not increasing within
// a chunk (invalid for mma.sp::ordered_metadata; 0b0000, 0b0101, 0b1010, 0b1111 are undefined
// for mma.sp) abort the emulation.
inline void emulated_mma_sp_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[4], uint32_t e) {
    const int lane = threadIdx.x % 32;
    EmulatedWarp& w = emulated_warps[threadIdx.x / 32];
    std::memcpy(w.a[lane], a, sizeof w.a[lane]);
    std::memcpy(w.b[lane], b, sizeof w.b[lane]);
    w.e[lane] = e;
    w.barrier.arrive_and_wait();
    auto A = [&](int r, int c) { return emulated_bf16(w.a[(r % 8) * 4 + (c % 8) / 2][r / 8 + 2 * (c / 8)], c % 2); };
    auto offset = [&](int r, int c) {
        const int chunk = c / 2;
        const uint32_t word = w.e[(r % 8) * 4 + chunk / 4] >> (16 * (r / 8) + 4 * (chunk % 4));
        const int lo = word & 3, hi = (word >> 2) & 3;
        if (lo >= hi) {
            std::fprintf(stderr, "mma.sp: invalid metadata %x for row %d, chunk %d\n", word & 15, r, chunk);
            std::abort();
        }
        return c % 2 ? hi : lo;
    };
    auto B = [&](int k, int n) { return emulated_bf16(w.b[n * 4 + (k % 8) / 2][k / 8], k % 2); };
    const int g = lane / 4, t = lane % 4;
    for (int q = 0; q < 4; ++q) {
        const int r = g + (q / 2) * 8, n = 2 * t + q % 2;
        float s = d[q];
        for (int c = 0; c < 16; ++c) s = std::fma(A(r, c), B(4 * (c / 2) + offset(r, c), n), s);
        d[q] = s;
    }
    w.barrier.arrive_and_wait();
}
