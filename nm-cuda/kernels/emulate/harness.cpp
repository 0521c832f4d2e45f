// Runs nm_spmm_f32 and the split-K reduction on the host (see cuda_host.h):
//   harness IN OUT
// IN: 14 little-endian int64 (m n k w np steps steps_per_slice slices grid_x grid_y threads
// shared_bytes dtab_len col_info_len), then A (m·k f32), B′ (w·np f32), dtab, col_info (i32).
// OUT: C (m·n f32). Written by nm-cuda's `emulated` test.
#include "../nm_spmm_f32.cu"
#include "../splitk_reduce.cu"

#include "harness.h"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    auto h = read<int64_t>(f, 14);
    const int m = h[0], n = h[1], k = h[2], w = h[3], np = h[4], steps = h[5], per_slice = h[6], slices = h[7];
    const int gx = h[8], gy = h[9], threads = h[10];
    const size_t shared_bytes = h[11];
    auto a = read<float>(f, (int64_t)m * k);
    auto bp = read<float>(f, (int64_t)w * np);
    auto dtab = read<int>(f, h[12]);
    auto info = read<int>(f, h[13]);
    fclose(f);
    if (threads != THREADS) {
        fprintf(stderr, "threads %d, kernel built for %d\n", threads, THREADS);
        return 2;
    }
    std::vector<float> out((size_t)m * n * slices);
    run_grid(gx, gy, slices, threads, shared_bytes, [&] {
        nm_spmm_f32(a.data(), bp.data(), dtab.data(), info.data(), out.data(), m, n, k, w, np, steps, per_slice);
    });
    return write_result(argv[2], out, m, n, slices);
}
