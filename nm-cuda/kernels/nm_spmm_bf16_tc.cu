// Vector-wise N:M SpMM on tensor cores: C (m×n, f32) = A (m×k, bf16) · B, B given as B′
// (W×np bf16, row-major) and D (W×G u16 offsets inside each window), f32 accumulation.
//
// All columns of one L-vector group share their kept rows, so the product of a group is a
// dense one over its kept rows of k: C[:, group] = A[:, K_group] · B′[:, group], with no zero
// multiplied. A arrives transposed (`at`, k×lda, lda = m rounded up to 8, from
// transpose_bf16.cu), so one kept k row of A is lda contiguous values: a block gathers, for
// each group its columns touch, the kept rows' MS-wide segments with 16-byte cp.async copies
// (no register staging, no scalar loads), and B′'s rows the same way, into a STAGES-deep
// pipeline of shared buffers. Fragments come from ldmatrix.trans (both tiles are k-major) into
// mma.sync m16n8k16. Needs L % 8 == 0 (an n8 tile lies in one group) and sm_80 or newer.
//
// Two ways to stage A (-D WINDOWS):
//   0  per group: every group slot gets its own KT gathered rows (GMAX·KT rows per stage), so
//      a row two groups keep is copied twice; ldmatrix reads rows in order, without bank
//      conflicts;
//   1  windows: the SPAN = KT·M/N dense k rows the stage's windows cover, each copied once and
//      only if some group of the block keeps it (the `need` bit mask, one per block column,
//      computed when the launch is prepared: the role of the paper's col_info), plus a zero
//      row; a per-stage table gives each (kept row, group slot) its row, and each lane hands
//      ldmatrix the row its group keeps. Fewer bytes from L2 (rows shared by groups come once),
//      at the price of bank conflicts between the kept rows one ldmatrix phase reads.
//
// -D parameters: MS NS (block tile), WM WN (warp tile), KT (kept rows per stage, multiple of
// 16, and of N with WINDOWS), STAGES (≥ 2), WINDOWS (0/1), MIN_BLOCKS (blocks per SM the
// registers are bounded for), GMAX (groups one block's columns can touch), NM_N NM_M NM_L.
// Shared memory is dynamic (the host opts in past 48 KiB). Ragged edges read zeros (cp.async
// zero fill) and store nothing. Split-K: gridDim.z slices of stages write partial products
// to out + z·m·n (splitk_reduce.cu).

#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#include "cp_async.cuh"
#endif

#define THREADS ((MS / WM) * (NS / WN) * 32)
#define WARP_COLS (NS / WN)
#define MI (WM / 16)
#define NI (WN / 8)
// Padded rows: the 8 rows one ldmatrix phase reads fall in distinct banks.
#define ASTR (MS + 8)
#define BSTR (NS + 8)
#if WINDOWS
#define SPAN (KT / NM_N * NM_M)
// SPAN dense rows, then the zero row.
#define A_STAGE ((SPAN + 1) * ASTR)
#define R_STAGE (KT * GMAX)
static_assert(KT % NM_N == 0, "a stage covers whole windows");
#else
#define A_STAGE (GMAX * KT * ASTR)
#define R_STAGE 0
#endif
#define B_STAGE (KT * BSTR)

static_assert(NM_L % 8 == 0, "an n8 tile must lie in one group");
static_assert(KT % 16 == 0, "kept rows per stage come in k16 slices");
static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tiles are made of m16 tiles and n16 pairs of n8 tiles");
static_assert(MS % WM == 0 && NS % WN == 0, "warp tiles cover the block tile");
static_assert(MS % 8 == 0 && NS % 8 == 0, "rows load in 16-byte chunks of 8 values");
static_assert(STAGES >= 2, "the pipeline needs two buffers at least");
static_assert(THREADS % (MS / 8) == 0 && THREADS % (NS / 8) == 0, "a thread keeps one chunk column");
// Every n8 tile of a warp in the same group: one A fragment serves all of them.
#define WARP_ONE_GROUP ((NM_L % WN == 0) && (NS % NM_L == 0 || NM_L % NS == 0))

#ifdef NMS_HOST_EMULATION
__device__ __forceinline__ void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    emulated_mma_bf16(d, a, b0, b1);
}
#else
__device__ __forceinline__ void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

// The A fragment of rows row..row+15 and kept rows k16..k16+15 of one group: lane l names
// kept row k16 + l % 8 + 8·(l / 16) (its k-major row `a_row`, from a_row_of) at column
// row + 8·((l / 8) % 2), so the four transposed 8×8 quarters land as a0 (g, 2t), a1 (g+8, 2t),
// a2 (g, 2t+8), a3 (g+8, 2t+8).
__device__ __forceinline__ void a_fragment(u32 (&af)[4], sptr a_row, int row, int lane) {
    ldmatrix_x4_trans(af, sp_add(a_row, row + 8 * ((lane / 8) % 2)));
}

// B fragments of columns col..col+15 (two n8 tiles) and kept rows k16..k16+15 of the k-major
// tile `b_s`: lane l names kept row k16 + l % 8 + 8·((l / 8) % 2) at column col + 8·(l / 16), so
// the quarters land as b0, b1 of the first n8 tile, then b0, b1 of the second.
__device__ __forceinline__ void b_fragments(u32 (&bf)[4], sptr b_s, int k16, int col, int lane) {
    ldmatrix_x4_trans(bf, sp_add(b_s, (k16 + lane % 8 + 8 * ((lane / 8) % 2)) * BSTR + col + 8 * (lane / 16)));
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
nm_spmm_bf16_tc(const u16* __restrict__ at, const u16* __restrict__ bp, const u16* __restrict__ d,
                const u32* __restrict__ need, float* __restrict__ out, int m, int n, int k, int lda, int w, int np,
                int groups, int need_words, int steps, int steps_per_slice) {
    DYNAMIC_SHARED_U16(as);
    u16* bs = as + STAGES * A_STAGE;
    // Per stage, the A row of each (kept row, group slot) (WINDOWS only).
    u16* rel = bs + STAGES * B_STAGE;
    (void)rel;
    (void)need;
    (void)need_words;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t4 = lane % 4;
    const int m0 = blockIdx.y * MS, n0 = blockIdx.x * NS, g0 = n0 / NM_L;
    const int wr = (warp / WARP_COLS) * WM, wc = (warp % WARP_COLS) * WN;
    const int first = blockIdx.z * steps_per_slice;
    const int last = min(steps, first + steps_per_slice);

    // Each thread copies one fixed 16-byte chunk column of A's rows and of B′'s rows, so its
    // column offsets and bounds are worked out once.
    const int a_chunk = tid % (MS / 8), a_col = m0 + a_chunk * 8;
    const u16* a_src = at + (a_col < lda ? a_col : 0);
    const int b_chunk = tid % (NS / 8), b_col = n0 + b_chunk * 8;
    const u16* b_src = bp + (b_col < np ? b_col : 0);

    // Stage `step` into buffer `buf`: A's rows (per group slot, or the windows' rows some
    // group keeps); B′'s KT rows. Rows past W, k columns past k, groups past G and rows of A
    // past lda read zeros.
    auto load = [&](int step, int buf) {
        u16* a_s = as + buf * A_STAGE + a_chunk * 8;
        u16* b_s = bs + buf * B_STAGE + b_chunk * 8;
        const int r0 = step * KT;
#if WINDOWS
        const int base = step * SPAN;
        const u32* need_col = need + (size_t)blockIdx.x * need_words;
#pragma unroll 4
        for (int j = tid / (MS / 8); j < SPAN + 1; j += THREADS / (MS / 8)) {
            const int kk = base + j;
            // Row SPAN is the zero row; a row no group keeps is left as it is (no lane reads it).
            if (j < SPAN && !((need_col[kk / 32] >> (kk % 32)) & 1u)) continue;
            const bool ok = j < SPAN && kk < k && a_col < lda;
            cp_async16(a_s + j * ASTR, ok ? a_src + (size_t)kk * lda : at, ok ? 16 : 0);
        }
        u16* rel_s = rel + buf * R_STAGE;
        for (int e = tid; e < KT * GMAX; e += THREADS) {
            const int t = e / GMAX, s = e % GMAX, r = r0 + t, grp = g0 + s;
            int j = SPAN;
            if (r < w && grp < groups) {
                const int off = (t / NM_N) * NM_M + d[(size_t)r * groups + grp];
                if (base + off < k) j = off;
            }
            rel_s[e] = (u16)j;
        }
#else
#pragma unroll 4
        for (int e = tid / (MS / 8); e < GMAX * KT; e += THREADS / (MS / 8)) {
            const int s = e / KT, t = e % KT, r = r0 + t, grp = g0 + s;
            int kk = k;
            if (r < w && grp < groups) kk = (r / NM_N) * NM_M + d[(size_t)r * groups + grp];
            const bool ok = kk < k && a_col < lda;
            cp_async16(a_s + e * ASTR, ok ? a_src + (size_t)kk * lda : at, ok ? 16 : 0);
        }
#endif
#pragma unroll 4
        for (int t = tid / (NS / 8); t < KT; t += THREADS / (NS / 8)) {
            const int r = r0 + t;
            const bool ok = r < w && b_col < np;
            cp_async16(b_s + t * BSTR, ok ? b_src + (size_t)r * np : bp, ok ? 16 : 0);
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

    // The pipeline: STAGES - 1 stages in flight ahead of the one being multiplied. Every
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
        const sptr a_buf = shared_ptr(as + buf * A_STAGE);
        const sptr b_s = shared_ptr(bs + buf * B_STAGE);
        // The k-major row of A this lane names for kept row k16 + lane % 8 + 8·(lane / 16) of
        // group slot `s`.
        auto a_row_of = [&](int k16, int s) {
            const int t = k16 + lane % 8 + 8 * (lane / 16);
#if WINDOWS
            return sp_add(a_buf, rel[buf * R_STAGE + t * GMAX + s] * ASTR);
#else
            return sp_add(a_buf, (s * KT + t) * ASTR);
#endif
        };
#pragma unroll
        for (int k16 = 0; k16 < KT; k16 += 16) {
#if WARP_ONE_GROUP
            const sptr a_row = a_row_of(k16, (n0 + wc) / NM_L - g0);
            u32 af[MI][4];
#pragma unroll
            for (int i = 0; i < MI; ++i) a_fragment(af[i], a_row, wr + i * 16, lane);
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                u32 bf[4];
                b_fragments(bf, b_s, k16, wc + j * 8, lane);
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                    mma_bf16(acc[i][j], af[i], bf[0], bf[1]);
                    mma_bf16(acc[i][j + 1], af[i], bf[2], bf[3]);
                }
            }
#else
            // The warp's n8 tiles lie in different groups: an A fragment per tile.
#pragma unroll
            for (int j = 0; j < NI; j += 2) {
                u32 bf[4];
                b_fragments(bf, b_s, k16, wc + j * 8, lane);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const sptr a_row = a_row_of(k16, (n0 + wc + (j + h) * 8) / NM_L - g0);
#pragma unroll
                    for (int i = 0; i < MI; ++i) {
                        u32 af[4];
                        a_fragment(af, a_row, wr + i * 16, lane);
                        mma_bf16(acc[i][j + h], af, bf[2 * h], bf[2 * h + 1]);
                    }
                }
            }
#endif
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
            for (int q = 0; q < 4; q += 2) {
                const int gm = m0 + wr + i * 16 + g + (q / 2) * 8;
                const int gn = n0 + wc + j * 8 + 2 * t4;
                if (gm >= m) continue;
                float* row = c + (size_t)gm * n;
                if (gn + 1 < n && (n % 2) == 0) {
                    *reinterpret_cast<float2*>(row + gn) = make_float2(acc[i][j][q], acc[i][j][q + 1]);
                } else {
                    if (gn < n) row[gn] = acc[i][j][q];
                    if (gn + 1 < n) row[gn + 1] = acc[i][j][q + 1];
                }
            }
}
