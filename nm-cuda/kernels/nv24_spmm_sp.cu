// Element-wise 2:4 SpMM on sparse tensor cores: C (m×n, f32) = A (m×k, nv24, bf16) · B (k×n,
// bf16, row-major, leading dimension ldb), f32 accumulation, with mma.sp m16n8k32.
//
// A arrives compressed as the instruction reads it (nm-cuda's `Nv24Sp::compress`, the role of
// cuSPARSELt's compress step):
//   av  m × kc bf16, row-major, kc = ⌈k/32⌉·16: each row's kept values, two per 4 columns
//       (k padded with zero groups to a whole k32 slice);
//   ae  one u32 per (k32 slice s, 16-row tile rt, row g of 8, half p of the slice):
//       ae[(s·row_tiles + rt)·16 + 2g + p] = meta(rt·16 + g, 2s + p) | meta(rt·16 + g + 8, 2s + p) << 16,
//       meta(r, h) the 16 bits of row r's 16 columns h·16..h·16+15: per group of 4, two 2-bit
//       offsets, the lower one first (valid for both mma.sp and mma.sp::ordered_metadata).
//   Rows past m of the last tile carry metadata 0x4444 (offsets 0, 1) over zero values.
// Then the lane with groupID g and t = lane % 4 ∈ {0, 1} (sparsity selector 0) hands the
// instruction its metadata word with one 4-byte load: ae[… + 2g + (lane & 1)].
//
// -D parameters: MS NS (block tile), WM WN (warp tile), KSTEP (k32 slices per stage), STAGES
// (shared buffers of the cp.async pipeline, ≥ 2). A stage holds KSTEP k32 slices: 16·KSTEP
// compressed columns of A's MS rows, 32·KSTEP rows of B, their metadata words; one barrier per
// stage, so a deeper stage spends fewer barriers per mma. Shared memory is dynamic (the host
// opts in past 48 KiB). Ragged m, n, k read zeros (cp.async zero fill) and store nothing; ldb
// is a multiple of 8 so B's rows split into whole 16-byte chunks, and columns in n..ldb only
// reach unstored outputs. Split-K: gridDim.z slices of stages write partial products to
// out + z·m·n (splitk_reduce.cu).

#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#include "cp_async.cuh"
#endif

#define THREADS ((MS / WM) * (NS / WN) * 32)
#define WARP_COLS (NS / WN)
#define MI (WM / 16)
#define NI (WN / 8)
// Padded rows: the 8 rows one ldmatrix phase reads fall in distinct banks.
#define ASTR (16 * KSTEP + 8)
#define BSTR (NS + 8)
#define A_STAGE (MS * ASTR)
#define B_STAGE (32 * KSTEP * BSTR)
// Metadata words of one k32 slice, then of a stage.
#define E_SLICE (MS / 16 * 16)
#define E_STAGE (KSTEP * E_SLICE)

static_assert(WM % 16 == 0 && WN % 8 == 0, "warp tiles are made of m16n8 tiles");
static_assert(MS % WM == 0 && NS % WN == 0, "warp tiles cover the block tile");
static_assert(NS % 8 == 0, "B's rows load in 16-byte chunks of 8 columns");
static_assert(STAGES >= 2, "the pipeline needs two buffers at least");
static_assert(KSTEP >= 1, "a stage holds one k32 slice at least");

#ifdef NMS_HOST_EMULATION
__device__ __forceinline__ void mma_sp(float (&d)[4], const u32 (&a)[4], const u32 (&b)[4], u32 e) {
    emulated_mma_sp_bf16(d, a, b, e);
}
#else
__device__ __forceinline__ void mma_sp(float (&d)[4], const u32 (&a)[4], const u32 (&b)[4], u32 e) {
#if __CUDA_ARCH__ >= 900
#define MMA_SP "mma.sp::ordered_metadata"
#else
#define MMA_SP "mma.sp"
#endif
    asm volatile(MMA_SP ".sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                        "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),
                   "r"(e));
#undef MMA_SP
}
#endif

// One block per SM at least: without the 1, ptxas capped the 128×128 tile at 128 registers and
// spilled; it needs about 140.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
nv24_spmm_sp(const u16* __restrict__ av, const u32* __restrict__ ae, const u16* __restrict__ b,
             float* __restrict__ out, int m, int n, int k, int kc, int ldb, int row_tiles, int k32_steps,
             int stages, int stages_per_slice) {
    DYNAMIC_SHARED_U16(as);
    u16* bs = as + STAGES * A_STAGE;
    u32* es = reinterpret_cast<u32*>(bs + STAGES * B_STAGE);

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t4 = lane % 4;
    const int m0 = blockIdx.y * MS, n0 = blockIdx.x * NS;
    const int wr = (warp / WARP_COLS) * WM, wc = (warp % WARP_COLS) * WN;
    const int first = blockIdx.z * stages_per_slice;
    const int last = min(stages, first + stages_per_slice);

    // Stage `stage` into buffer `buf`: A's compressed slices, B's 32·KSTEP rows, the metadata.
    auto load = [&](int stage, int buf) {
        u16* a_s = as + buf * A_STAGE;
        u16* b_s = bs + buf * B_STAGE;
        u32* e_s = es + buf * E_STAGE;
        for (int e = tid; e < MS * 2 * KSTEP; e += THREADS) {
            const int row = e / (2 * KSTEP), chunk = e % (2 * KSTEP), gm = m0 + row;
            const int col = stage * 16 * KSTEP + chunk * 8;
            const bool ok = gm < m && col < kc;
            cp_async16(a_s + row * ASTR + chunk * 8, ok ? av + (size_t)gm * kc + col : av, ok ? 16 : 0);
        }
        for (int e = tid; e < 32 * KSTEP * (NS / 8); e += THREADS) {
            const int r = e / (NS / 8), chunk = e % (NS / 8);
            const int gk = stage * 32 * KSTEP + r, gn = n0 + chunk * 8;
            const bool ok = gk < k && gn < ldb;
            cp_async16(b_s + r * BSTR + chunk * 8, ok ? b + (size_t)gk * ldb + gn : b, ok ? 16 : 0);
        }
        for (int e = tid; e < KSTEP * (MS / 16) * 4; e += THREADS) {
            const int q = e / (MS / 16 * 4), tile = (e / 4) % (MS / 16), quarter = e % 4;
            const int s = stage * KSTEP + q, rt = m0 / 16 + tile;
            u32* dst = e_s + q * E_SLICE + tile * 16 + quarter * 4;
            if (rt < row_tiles && s < k32_steps) {
                cp_async16(dst, ae + ((size_t)s * row_tiles + rt) * 16 + quarter * 4, 16);
            } else {
                // A tile wholly past m or a slice past k: valid metadata (offsets 0, 1) over
                // the zeros loaded above.
                for (int w = 0; w < 4; ++w) dst[w] = 0x44444444u;
            }
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    // The pipeline: STAGES - 1 slices in flight ahead of the one being multiplied. Every
    // iteration commits one group (empty past the end) so the wait counts stay uniform.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (first + s < last) load(first + s, s);
        cp_async_commit();
    }
    for (int step = first; step < last; ++step) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        // The buffer the previous iteration read: every warp is past it (the barrier above).
        const int ahead = step + STAGES - 1;
        if (ahead < last) load(ahead, (ahead - first) % STAGES);
        cp_async_commit();

        const int buf = (step - first) % STAGES;
#pragma unroll
        for (int q = 0; q < KSTEP; ++q) {
            const u16* a_s = as + buf * A_STAGE + q * 16;
            const u16* b_s = bs + buf * B_STAGE + q * 32 * BSTR;
            const u32* e_s = es + buf * E_STAGE + q * E_SLICE;
            u32 af[MI][4], meta[MI];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                // Lanes 0-15 name rows 0-15 at column 0, lanes 16-31 the same rows at column 8:
                // the four 8×8 quarters land as a0 (g, 2t), a1 (g+8, 2t), a2 (g, 2t+8), a3 (g+8, 2t+8).
                ldmatrix_x4(af[i], shared_ptr(a_s + (wr + i * 16 + lane % 16) * ASTR + (lane / 16) * 8));
                meta[i] = e_s[((wr / 16) + i) * 16 + 2 * g + (lane & 1)];
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                // Lane l names k row l of the slice at the tile's first column; transposed, each
                // 8-row quarter gives the lane k = 2t, 2t+1 of column g: b0..b3 at k offsets 0, 8, 16, 24.
                u32 bf[4];
                ldmatrix_x4_trans(bf, shared_ptr(b_s + lane * BSTR + wc + j * 8));
#pragma unroll
                for (int i = 0; i < MI; ++i) mma_sp(acc[i][j], af[i], bf, meta[i]);
            }
        }
    }
    // Nothing may still be writing shared memory when the block exits (empty groups only).
    cp_async_wait<0>();

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
