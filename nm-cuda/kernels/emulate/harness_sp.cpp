// Runs nv24_spmm_sp on the host (see cuda_host.h; ldmatrix and mma.sp are emulated per warp):
//   harness_sp IN OUT
// IN: 14 little-endian int64 (m n k kc ldb row_tiles k32_steps stages stages_per_slice slices
// grid_x grid_y threads shared_bytes), then A's compressed values (m·kc bf16 bits), its metadata
// words (k32_steps·row_tiles·16 u32) and B (k·ldb bf16 bits). OUT: C (m·n f32). Written by
// nm-cuda's `emulated` test.
#include "../nv24_spmm_sp.cu"
#include "../splitk_reduce.cu"

#include "harness.h"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    auto h = read<int64_t>(f, 14);
    const int m = h[0], n = h[1], k = h[2], kc = h[3], ldb = h[4], row_tiles = h[5], k32_steps = h[6];
    const int stages = h[7], per_slice = h[8], slices = h[9], gx = h[10], gy = h[11], threads = h[12];
    const size_t shared_bytes = h[13];
    auto av = read<u16>(f, (int64_t)m * kc);
    auto ae = read<u32>(f, (int64_t)k32_steps * row_tiles * 16);
    auto b = read<u16>(f, (int64_t)k * ldb);
    fclose(f);
    if (threads != THREADS) {
        fprintf(stderr, "threads %d, kernel built for %d\n", threads, THREADS);
        return 2;
    }
    std::vector<float> out((size_t)m * n * slices);
    run_grid(gx, gy, slices, threads, shared_bytes, [&] {
        nv24_spmm_sp(av.data(), ae.data(), b.data(), out.data(), m, n, k, kc, ldb, row_tiles, k32_steps, stages,
                     per_slice);
    });
    return write_result(argv[2], out, m, n, slices);
}
