// Vector-wise N:M SpMM on CUDA cores, f32: C (m×n) = A (m×k, row-major) · B, with B given as
// B′ (W×np, row-major, W = ⌈k/M⌉·N kept rows) and a per-block index table.
//
// One source, three versions (NM-SpMM's V1–V3), chosen by -D parameters at NVRTC time:
//   MS NS      block tile of C            MR NR   warp tile          MT NT  thread tile
//   KS         dense k per step (whole windows), WS = KS·N/M kept rows per step
//   AROWS      rows of the A tile in shared memory: KS, or fewer when PACKED
//   GMAX       column groups (L-vectors) one block's NS columns can touch
//   PACKED     1: load only the k columns the block's windows keep (col_info), V2/V3
//   PIPELINE   1: double-buffered shared tiles filled by cp.async while computing, V3
//   VEC_A      1: k is a multiple of 4, so A rows load as float4 (non-packed only)
//   NM_L       L (columns per group)
//   MIN_BLOCKS blocks per SM the register allocation must allow
//
// The host prepares, once per B (see nm-cuda's `plan.rs`):
//   dtab[(bx·W + r)·GMAX + s]   the A-tile row (0..AROWS) that kept row r of block column bx,
//                               group slot s reads: its k offset in the step, or, when PACKED,
//                               its position among the step's kept columns;
//   col_info[(bx·steps + c)·AROWS + p]   when PACKED: the step-relative k of packed row p, or -1.
// Ragged edges (m, n, k not multiples of the tiles) read zeros and store nothing.
// Split-K: gridDim.z slices of steps write partial products to `out` + z·m·n; the reduce
// kernel adds them in slice order, so results do not depend on scheduling.

#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#include "cp_async.cuh"
#endif

#define THREADS ((MS / MT) * (NS / NT))
#define LANE_ROWS (MR / MT)
#define LANE_COLS (NR / NT)
#define WARP_COLS (NS / NR)
#define ASTRIDE (MS + 4)
#define A_TILE (AROWS * ASTRIDE)
#define B_TILE (WS * NS)
// Rounded up to 4 ints: the second buffer after it must stay 16-byte aligned for float4.
#define D_TILE ((WS * GMAX + 3) / 4 * 4)

static_assert(LANE_ROWS * LANE_COLS == 32, "a warp tile holds 32 thread tiles");
static_assert((MS / MR) * (NS / NR) * 32 == THREADS, "warp tiles cover the block tile");
static_assert(MT % 4 == 0 && NT % 4 == 0, "thread tiles are made of float4 chunks");
static_assert(NS % 4 == 0 && MS % 4 == 0, "tiles are made of float4 chunks");

// One group for the whole warp tile: every lane reads the same A row per kept row.
#define WARP_ONE_GROUP (NM_L % NR == 0 && NS % NM_L == 0)
// One group per float4 chunk of columns.
#define CHUNK_ONE_GROUP (NM_L % 4 == 0)

struct Problem {
    const float* a;
    const float* bp;
    const int* dtab;
    const int* col_info;
    float* out;
    int m, n, k, w, np, steps, steps_per_slice;
};

// The A tile of step `step` into `as` (AROWS × MS, k-major so a thread's rows are one float4).
__device__ __forceinline__ void load_a(const Problem& p, float* as, int step, int m0, int tid) {
    const int k0 = step * KS;
#if PACKED
    const int* info = p.col_info + ((size_t)blockIdx.x * p.steps + step) * AROWS;
    for (int e = tid; e < AROWS * MS; e += THREADS) {
        const int row = e / AROWS, q = e % AROWS;
        const int kk = info[q];
        const int gm = m0 + row, gk = k0 + kk;
        const bool ok = kk >= 0 && gm < p.m && gk < p.k;
        const float* src = ok ? p.a + (size_t)gm * p.k + gk : p.a;
#if PIPELINE
        cp_async4(&as[q * ASTRIDE + row], src, ok ? 4 : 0);
#else
        as[q * ASTRIDE + row] = ok ? *src : 0.0f;
#endif
    }
#elif VEC_A
    static_assert(KS % 4 == 0, "float4 loads of A need KS % 4 == 0");
    for (int e = tid; e < (KS / 4) * MS; e += THREADS) {
        const int row = e / (KS / 4), kk = (e % (KS / 4)) * 4;
        const int gm = m0 + row, gk = k0 + kk;
        const bool ok = gm < p.m && gk < p.k;
#if PIPELINE
        const float* src = ok ? p.a + (size_t)gm * p.k + gk : p.a;
        for (int i = 0; i < 4; ++i) cp_async4(&as[(kk + i) * ASTRIDE + row], src + (ok ? i : 0), ok ? 4 : 0);
#else
        float4 v = ok ? *reinterpret_cast<const float4*>(p.a + (size_t)gm * p.k + gk) : make_float4(0.f, 0.f, 0.f, 0.f);
        as[(kk + 0) * ASTRIDE + row] = v.x;
        as[(kk + 1) * ASTRIDE + row] = v.y;
        as[(kk + 2) * ASTRIDE + row] = v.z;
        as[(kk + 3) * ASTRIDE + row] = v.w;
#endif
    }
#else
    for (int e = tid; e < KS * MS; e += THREADS) {
        const int row = e / KS, kk = e % KS;
        const int gm = m0 + row, gk = k0 + kk;
        const bool ok = gm < p.m && gk < p.k;
        const float* src = ok ? p.a + (size_t)gm * p.k + gk : p.a;
#if PIPELINE
        cp_async4(&as[kk * ASTRIDE + row], src, ok ? 4 : 0);
#else
        as[kk * ASTRIDE + row] = ok ? *src : 0.0f;
#endif
    }
#endif
}

// The B′ rows and index rows of step `step` into `bs` (WS × NS) and `ds` (WS × GMAX).
__device__ __forceinline__ void load_b(const Problem& p, float* bs, int* ds, int step, int n0, int tid, bool b_vec) {
    const int r0 = step * WS;
    if (b_vec) {
        for (int e = tid; e < WS * (NS / 4); e += THREADS) {
            const int t = e / (NS / 4), col = (e % (NS / 4)) * 4;
            const int gr = r0 + t, gc = n0 + col;
            const bool ok = gr < p.w && gc < p.np;
            const float* src = ok ? p.bp + (size_t)gr * p.np + gc : p.bp;
#if PIPELINE
            cp_async16(&bs[t * NS + col], src, ok ? 16 : 0);
#else
            *reinterpret_cast<float4*>(&bs[t * NS + col]) =
                ok ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
#endif
        }
    } else {
        for (int e = tid; e < WS * NS; e += THREADS) {
            const int t = e / NS, col = e % NS;
            const int gr = r0 + t, gc = n0 + col;
            const bool ok = gr < p.w && gc < p.np;
            const float* src = ok ? p.bp + (size_t)gr * p.np + gc : p.bp;
#if PIPELINE
            cp_async4(&bs[t * NS + col], src, ok ? 4 : 0);
#else
            bs[t * NS + col] = ok ? *src : 0.0f;
#endif
        }
    }
    const int* dsrc = p.dtab + ((size_t)blockIdx.x * p.w + r0) * GMAX;
    for (int e = tid; e < WS * GMAX; e += THREADS) {
        const bool ok = r0 + e / GMAX < p.w;
#if PIPELINE
        cp_async4(&ds[e], ok ? dsrc + e : p.dtab, ok ? 4 : 0);
#else
        ds[e] = ok ? dsrc[e] : 0;
#endif
    }
}

// The thread's B values of kept row t.
__device__ __forceinline__ void b_fragment(const float* bs, int t, int col0, float (&b)[NT]) {
#pragma unroll
    for (int c = 0; c < NT / 4; ++c) {
        const float4 v = *reinterpret_cast<const float4*>(&bs[t * NS + col0 + c * LANE_COLS * 4]);
        b[c * 4 + 0] = v.x;
        b[c * 4 + 1] = v.y;
        b[c * 4 + 2] = v.z;
        b[c * 4 + 3] = v.w;
    }
}

#if WARP_ONE_GROUP
// The thread's A values of kept row t, the warp's one group in slot `slot`.
__device__ __forceinline__ void a_fragment(const float* as, const int* ds, int t, int row0, int slot, float (&a)[MT]) {
    const float* arow = as + ds[t * GMAX + slot] * ASTRIDE;
#pragma unroll
    for (int r = 0; r < MT / 4; ++r) {
        const float4 v = *reinterpret_cast<const float4*>(&arow[row0 + r * LANE_ROWS * 4]);
        a[r * 4 + 0] = v.x;
        a[r * 4 + 1] = v.y;
        a[r * 4 + 2] = v.z;
        a[r * 4 + 3] = v.w;
    }
}

__device__ __forceinline__ void outer_product(const float (&a)[MT], const float (&b)[NT], float (&acc)[MT][NT]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
}
#endif

// acc += the step's contribution, reading the tiles in shared memory.
__device__ __forceinline__ void compute(const float* as, const float* bs, const int* ds, float (&acc)[MT][NT],
                                        int row0, int col0, int n0) {
#if WARP_ONE_GROUP
    const int slot = (n0 + col0) / NM_L - n0 / NM_L;
#if PIPELINE
    // Register double buffering (V3): kept row t + 1's index and fragments load while row t's
    // outer product runs.
    float a[2][MT], b[2][NT];
    a_fragment(as, ds, 0, row0, slot, a[0]);
    b_fragment(bs, 0, col0, b[0]);
#pragma unroll
    for (int t = 0; t < WS; ++t) {
        if (t + 1 < WS) {
            a_fragment(as, ds, t + 1, row0, slot, a[(t + 1) & 1]);
            b_fragment(bs, t + 1, col0, b[(t + 1) & 1]);
        }
        outer_product(a[t & 1], b[t & 1], acc);
    }
#else
#pragma unroll 2
    for (int t = 0; t < WS; ++t) {
        float a[MT], b[NT];
        a_fragment(as, ds, t, row0, slot, a);
        b_fragment(bs, t, col0, b);
        outer_product(a, b, acc);
    }
#endif
#else
#pragma unroll 2
    for (int t = 0; t < WS; ++t) {
        float b[NT];
        b_fragment(bs, t, col0, b);
#if CHUNK_ONE_GROUP
#pragma unroll
        for (int c = 0; c < NT / 4; ++c) {
            const int col = n0 + col0 + c * LANE_COLS * 4;
            const float* arow = as + ds[t * GMAX + col / NM_L - n0 / NM_L] * ASTRIDE;
#pragma unroll
            for (int r = 0; r < MT / 4; ++r) {
                const float4 v = *reinterpret_cast<const float4*>(&arow[row0 + r * LANE_ROWS * 4]);
                const float a[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[r * 4 + i][c * 4 + j] = fmaf(a[i], b[c * 4 + j], acc[r * 4 + i][c * 4 + j]);
            }
        }
#else
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int col = n0 + col0 + (j / 4) * LANE_COLS * 4 + j % 4;
            const float* arow = as + ds[t * GMAX + col / NM_L - n0 / NM_L] * ASTRIDE;
#pragma unroll
            for (int i = 0; i < MT; ++i) acc[i][j] = fmaf(arow[row0 + (i / 4) * LANE_ROWS * 4 + i % 4], b[j], acc[i][j]);
        }
#endif
    }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
nm_spmm_f32(const float* __restrict__ a, const float* __restrict__ bp, const int* __restrict__ dtab,
            const int* __restrict__ col_info, float* __restrict__ out, int m, int n, int k, int w, int np,
            int steps, int steps_per_slice) {
#ifdef NMS_HOST_EMULATION
    float* smem = emulated_shared;
#else
    extern __shared__ __align__(16) float smem[];
#endif
    const Problem p = {a, bp, dtab, col_info, out, m, n, k, w, np, steps, steps_per_slice};
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * MS, n0 = blockIdx.x * NS;
    // Warp tiling, then thread tiling inside the warp; a thread's rows and columns are
    // float4 chunks spaced LANE_ROWS·4 and LANE_COLS·4 apart.
    const int row0 = (warp / WARP_COLS) * MR + (lane / LANE_COLS) * 4;
    const int col0 = (warp % WARP_COLS) * NR + (lane % LANE_COLS) * 4;
    const bool b_vec = (np % 4) == 0;
    const int first = blockIdx.z * steps_per_slice;
    const int last = min(steps, first + steps_per_slice);

    float acc[MT][NT];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) acc[i][j] = 0.0f;

    float* as0 = smem;
    float* bs0 = as0 + A_TILE;
    int* ds0 = reinterpret_cast<int*>(bs0 + B_TILE);
#if PIPELINE
    float* as1 = reinterpret_cast<float*>(ds0 + D_TILE);
    float* bs1 = as1 + A_TILE;
    int* ds1 = reinterpret_cast<int*>(bs1 + B_TILE);
    if (first < last) {
        load_a(p, as0, first, m0, tid);
        load_b(p, bs0, ds0, first, n0, tid, b_vec);
        cp_async_commit();
    }
    for (int step = first; step < last; ++step) {
        const bool odd = (step - first) & 1;
        float* as = odd ? as1 : as0;
        float* bs = odd ? bs1 : bs0;
        int* ds = odd ? ds1 : ds0;
        cp_async_wait<0>();
        __syncthreads();
        // The next step's copies run while this step computes: the other buffer was last
        // read before the barrier above.
        if (step + 1 < last) {
            load_a(p, odd ? as0 : as1, step + 1, m0, tid);
            load_b(p, odd ? bs0 : bs1, odd ? ds0 : ds1, step + 1, n0, tid, b_vec);
            cp_async_commit();
        }
        compute(as, bs, ds, acc, row0, col0, n0);
    }
#else
    for (int step = first; step < last; ++step) {
        load_a(p, as0, step, m0, tid);
        load_b(p, bs0, ds0, step, n0, tid, b_vec);
        __syncthreads();
        compute(as0, bs0, ds0, acc, row0, col0, n0);
        __syncthreads();
    }
#endif

    float* c = out + (size_t)blockIdx.z * m * n;
    const bool c_vec = (n % 4) == 0;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        const int gm = m0 + row0 + (i / 4) * LANE_ROWS * 4 + i % 4;
        if (gm >= m) continue;
#pragma unroll
        for (int cc = 0; cc < NT / 4; ++cc) {
            const int gn = n0 + col0 + cc * LANE_COLS * 4;
            if (c_vec && gn + 3 < n) {
                *reinterpret_cast<float4*>(&c[(size_t)gm * n + gn]) =
                    make_float4(acc[i][cc * 4], acc[i][cc * 4 + 1], acc[i][cc * 4 + 2], acc[i][cc * 4 + 3]);
            } else {
                for (int j = 0; j < 4; ++j)
                    if (gn + j < n) c[(size_t)gm * n + gn + j] = acc[i][cc * 4 + j];
            }
        }
    }
}
