// A (m×k bf16, row-major) transposed into at (k×lda, lda ≥ m a multiple of 8, rows m..lda
// zero), for nm_spmm_bf16_tc.cu: there a kept k row of A is one contiguous run of lda values
// that 16-byte copies can gather. 64×64 tiles through shared memory, two values per thread
// per access (4-byte loads and stores, coalesced on both sides); 256 threads, grid
// (⌈k/64⌉, ⌈lda/64⌉).

#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#endif

typedef unsigned short u16;
typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(256)
nm_bf16_transpose(const u16* __restrict__ a, u16* __restrict__ at, int m, int k, int lda) {
    // 66 columns: a row of the tile is 33 words, so a warp reading one column touches every bank.
    __shared__ __align__(4) u16 tile[64][66];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int k0 = blockIdx.x * 64, i0 = blockIdx.y * 64;
    // Rows i0.. of A: lane tx reads columns k0 + 2tx, k0 + 2tx + 1 (one word when both lie in
    // a row that starts on a word: k even).
    for (int r = ty; r < 64; r += 8) {
        const int i = i0 + r, kk = k0 + 2 * tx;
        u16 lo = 0, hi = 0;
        if (i < m && kk + 1 < k && (k % 2) == 0) {
            const u32 pair = *reinterpret_cast<const u32*>(a + (size_t)i * k + kk);
            lo = (u16)(pair & 0xffffu);
            hi = (u16)(pair >> 16);
        } else if (i < m) {
            if (kk < k) lo = a[(size_t)i * k + kk];
            if (kk + 1 < k) hi = a[(size_t)i * k + kk + 1];
        }
        *reinterpret_cast<u32*>(&tile[r][2 * tx]) = (u32)lo | (u32)hi << 16;
    }
    __syncthreads();
    // Rows k0.. of at: lane tx writes columns i0 + 2tx, i0 + 2tx + 1 (lda is a multiple of 8,
    // so i0 + 2tx < lda covers both).
    for (int r = ty; r < 64; r += 8) {
        const int kk = k0 + r, i = i0 + 2 * tx;
        if (kk < k && i < lda) {
            const u32 pair = (u32)tile[2 * tx][r] | (u32)tile[2 * tx + 1][r] << 16;
            *reinterpret_cast<u32*>(at + (size_t)kk * lda + i) = pair;
        }
    }
}
