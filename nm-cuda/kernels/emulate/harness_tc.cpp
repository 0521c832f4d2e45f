// Runs nm_spmm_bf16_tc on the host (see cuda_host.h; mma.sync is emulated per warp):
//   harness_tc IN OUT
// IN: 12 little-endian int64 (m n k w np groups steps steps_per_slice slices grid_x grid_y
// threads), then A (m·k bf16 bits), B′ (w·np bf16 bits), D (w·groups u16). OUT: C (m·n f32).
// Written by nm-cuda's `emulated` test.
#include "../nm_spmm_bf16_tc.cu"
#include "../splitk_reduce.cu"

#include "harness.h"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    auto h = read<int64_t>(f, 12);
    const int m = h[0], n = h[1], k = h[2], w = h[3], np = h[4], groups = h[5], steps = h[6];
    const int per_slice = h[7], slices = h[8], gx = h[9], gy = h[10], threads = h[11];
    auto a = read<u16>(f, (int64_t)m * k);
    auto bp = read<u16>(f, (int64_t)w * np);
    auto d = read<u16>(f, (int64_t)w * groups);
    fclose(f);
    if (threads != THREADS) {
        fprintf(stderr, "threads %d, kernel built for %d\n", threads, THREADS);
        return 2;
    }
    std::vector<float> out((size_t)m * n * slices);
    run_grid(gx, gy, slices, threads, 0, [&] {
        nm_spmm_bf16_tc(a.data(), bp.data(), d.data(), out.data(), m, n, k, w, np, groups, steps, per_slice);
    });
    return write_result(argv[2], out, m, n, slices);
}
