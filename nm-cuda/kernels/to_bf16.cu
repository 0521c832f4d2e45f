// B (rows×cols f32, row-major) as bf16 bits in rows of ld ≥ cols values (ld a multiple of 8),
// columns cols..ld zero: the 2:4 kernel's B when a plan is handed f32. Rounded to nearest even
// exactly as the host's `to_bf16` rounds (a NaN stays a NaN), so host and device operands give
// one result. Each thread writes 8 consecutive outputs of a row with one 16-byte store; grid
// (⌈ld/8/256⌉, min(rows, 65535)) of 256 threads, rows strided by gridDim.y.
#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#endif

__device__ __forceinline__ unsigned int nm_round_bf16(float x) {
    const unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40u;
    return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

extern "C" __global__ void nm_f32_to_bf16_rows(const float* __restrict__ src, unsigned short* __restrict__ dst,
                                               long long rows, int cols, int ld) {
    const int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (c0 >= ld) return;
    for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
        const float* row = src + r * cols;
        unsigned int pair[4];
        for (int q = 0; q < 4; ++q) {
            const int c = c0 + 2 * q;
            const unsigned int lo = c < cols ? nm_round_bf16(row[c]) : 0u;
            const unsigned int hi = c + 1 < cols ? nm_round_bf16(row[c + 1]) : 0u;
            pair[q] = lo | (hi << 16);
        }
        *reinterpret_cast<uint4*>(dst + r * ld + c0) = make_uint4(pair[0], pair[1], pair[2], pair[3]);
    }
}
