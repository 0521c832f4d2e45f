// Just enough of CUDA to run nm_spmm_f32.cu and splitk_reduce.cu on the host: every thread of
// a block is an OS thread, __syncthreads is a barrier, blocks run one after another, and
// cp.async copies at once. Built with AddressSanitizer and UBSan by nm-cuda's `emulated`
// test, so out-of-bounds global or shared accesses and misaligned float4 accesses fail there
// as they would under compute-sanitizer. Not a performance model.
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

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
