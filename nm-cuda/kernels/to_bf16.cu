// B (rows×cols f32, row-major) as bf16 bits in rows of ld ≥ cols values, columns cols..ld
// zero: the 2:4 kernel's B when a plan is handed f32. Rounded to nearest even exactly as the
// host's `to_bf16` rounds (a NaN stays a NaN), so host and device operands give one result.
// Grid-stride over the rows·ld outputs.
#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#endif

extern "C" __global__ void nm_f32_to_bf16_rows(const float* __restrict__ src, unsigned short* __restrict__ dst,
                                               long long rows, int cols, int ld) {
    const long long total = rows * ld;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / ld;
        const int c = (int)(i - r * ld);
        unsigned short v = 0;
        if (c < cols) {
            const unsigned int bits = __float_as_uint(src[r * cols + c]);
            if ((bits & 0x7fffffffu) > 0x7f800000u) {
                v = (unsigned short)((bits >> 16) | 0x40u);
            } else {
                v = (unsigned short)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
            }
        }
        dst[i] = v;
    }
}
