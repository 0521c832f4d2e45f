// Vector-wise N:M SpMM on tensor cores: C (m×n, f32) = A (m×k, bf16, row-major) · B, B given
// as B′ (W×np bf16, row-major) and D (W×G u16 offsets inside each window), f32 accumulation.
//
// All columns of one L-vector group share their kept rows, so for every group a block touches
// the kept k columns of A are gathered into a dense shared tile, and the product is a dense
// mma.sync.m16n8k16 over kept rows: no zero is multiplied. Needs L % 8 == 0 (an n8 tile lies
// in one group) and sm_80 or newer.
//
// -D parameters: MS NS (block tile), WM WN (warp tile), KT (kept rows per step, multiple of 16),
// GMAX (groups one block's columns can touch), NM_N NM_M NM_L.
// Ragged edges read zeros and store nothing. Split-K as in nm_spmm_f32.cu.

#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#endif

typedef unsigned short u16;
typedef unsigned int u32;

#define THREADS ((MS / WM) * (NS / WN) * 32)
#define WARP_COLS (NS / WN)
#define MI (WM / 16)
#define NI (WN / 8)
#define KSTR (KT + 8)

static_assert(NM_L % 8 == 0, "an n8 tile must lie in one group");
static_assert(KT % 16 == 0, "kept rows per step come in k16 slices");
static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tiles are made of m16n8 tiles");
// Every n8 tile of a warp in the same group: one A fragment serves all of them.
#define WARP_ONE_GROUP (NM_L % WN == 0 && NS % NM_L == 0)

__device__ __forceinline__ void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#ifdef NMS_HOST_EMULATION
    emulated_mma_bf16(d, a, b0, b1);
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ u32 pair(const u16* p) { return *reinterpret_cast<const u32*>(p); }

extern "C" __global__ void __launch_bounds__(THREADS)
nm_spmm_bf16_tc(const u16* __restrict__ a, const u16* __restrict__ bp, const u16* __restrict__ d,
                float* __restrict__ out, int m, int n, int k, int w, int np, int groups, int steps,
                int steps_per_slice) {
    __shared__ int kidx[KT * GMAX];
    __shared__ __align__(16) u16 ag[GMAX * MS * KSTR];
    __shared__ __align__(16) u16 bt[NS * KSTR];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t4 = lane % 4;
    const int m0 = blockIdx.y * MS, n0 = blockIdx.x * NS, g0 = n0 / NM_L;
    const int wr = (warp / WARP_COLS) * WM, wc = (warp % WARP_COLS) * WN;
    const int first = blockIdx.z * steps_per_slice;
    const int last = min(steps, first + steps_per_slice);

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    for (int step = first; step < last; ++step) {
        const int r0 = step * KT;
        // The k column each (kept row, group) reads: window base + offset.
        for (int e = tid; e < KT * GMAX; e += THREADS) {
            const int r = r0 + e / GMAX, grp = g0 + e % GMAX;
            int kk = -1;
            if (r < w && grp < groups) {
                kk = (r / NM_N) * NM_M + d[(size_t)r * groups + grp];
                if (kk >= k) kk = -1;
            }
            kidx[e] = kk;
        }
        for (int e = tid; e < KT * NS; e += THREADS) {
            const int t = e / NS, col = e % NS;
            const int r = r0 + t, gc = n0 + col;
            bt[col * KSTR + t] = (r < w && gc < np) ? bp[(size_t)r * np + gc] : (u16)0;
        }
        __syncthreads();
        for (int e = tid; e < GMAX * MS * KT; e += THREADS) {
            const int s = e / (MS * KT), row = (e / KT) % MS, t = e % KT;
            const int kk = kidx[t * GMAX + s], gm = m0 + row;
            ag[(s * MS + row) * KSTR + t] = (kk >= 0 && gm < m) ? a[(size_t)gm * k + kk] : (u16)0;
        }
        __syncthreads();

#pragma unroll
        for (int k16 = 0; k16 < KT; k16 += 16) {
            const int kc = k16 + 2 * t4;
#if WARP_ONE_GROUP
            const int s = (n0 + wc) / NM_L - g0;
            u32 af[MI][4];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                const u16* base = ag + (s * MS + wr + i * 16 + g) * KSTR + kc;
                af[i][0] = pair(base);
                af[i][1] = pair(base + 8 * KSTR);
                af[i][2] = pair(base + 8);
                af[i][3] = pair(base + 8 * KSTR + 8);
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const u16* bb = bt + (wc + j * 8 + g) * KSTR + kc;
                const u32 b0 = pair(bb), b1 = pair(bb + 8);
#pragma unroll
                for (int i = 0; i < MI; ++i) mma_bf16(acc[i][j], af[i], b0, b1);
            }
#else
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                const int s = (n0 + wc + j * 8) / NM_L - g0;
                const u16* bb = bt + (wc + j * 8 + g) * KSTR + kc;
                const u32 b0 = pair(bb), b1 = pair(bb + 8);
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    const u16* base = ag + (s * MS + wr + i * 16 + g) * KSTR + kc;
                    const u32 af[4] = {pair(base), pair(base + 8 * KSTR), pair(base + 8), pair(base + 8 * KSTR + 8)};
                    mma_bf16(acc[i][j], af, b0, b1);
                }
            }
#endif
        }
        __syncthreads();
    }

    float* c = out + (size_t)blockIdx.z * m * n;
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int gm = m0 + wr + i * 16 + g + (q / 2) * 8;
                const int gn = n0 + wc + j * 8 + 2 * t4 + q % 2;
                if (gm < m && gn < n) c[(size_t)gm * n + gn] = acc[i][j][q];
            }
}
