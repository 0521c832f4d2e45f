// Runs nm_bf16_transpose and then nm_spmm_bf16_tc on the host (see cuda_host.h; ldmatrix and
// mma.sync are emulated per warp):
//   harness_tc IN OUT
// IN: 14 little-endian int64 (m n k w np groups steps steps_per_slice slices grid_x grid_y
// threads shared_bytes need_words), then A (m·k bf16 bits), B′ (w·np bf16 bits), D (w·groups
// u16), the need mask (grid_x·need_words u32).
// OUT: C (m·n f32). Written by nm-cuda's `emulated` test.
#include "../nm_spmm_bf16_tc.cu"
#include "../splitk_reduce.cu"
#include "../transpose_bf16.cu"

#include "harness.h"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    auto h = read<int64_t>(f, 14);
    const int m = h[0], n = h[1], k = h[2], w = h[3], np = h[4], groups = h[5], steps = h[6];
    const int per_slice = h[7], slices = h[8], gx = h[9], gy = h[10], threads = h[11];
    const size_t shared_bytes = h[12];
    const int need_words = h[13];
    auto a = read<u16>(f, (int64_t)m * k);
    auto bp = read<u16>(f, (int64_t)w * np);
    auto d = read<u16>(f, (int64_t)w * groups);
    // At least one word, as the library passes for per-group staging.
    auto need = read<u32>(f, (int64_t)gx * need_words);
    if (need.empty()) need.push_back(0);
    fclose(f);
    if (threads != THREADS) {
        fprintf(stderr, "threads %d, kernel built for %d\n", threads, THREADS);
        return 2;
    }
    // A transposed as the library does it, into a buffer of exactly k·lda values (poisoned, so
    // a value the transpose fails to write shows up in C).
    const int lda = (m + 7) / 8 * 8;
    std::vector<u16> at((size_t)k * lda, 0x7fc0);
    run_grid((k + 63) / 64, (lda + 63) / 64, 1, 256, 0,
             [&] { nm_bf16_transpose(a.data(), at.data(), m, k, lda); });
    std::vector<float> out((size_t)m * n * slices);
    run_grid(gx, gy, slices, threads, shared_bytes, [&] {
        nm_spmm_bf16_tc(at.data(), bp.data(), d.data(), need.data(), out.data(), m, n, k, lda, w, np, groups,
                        need_words, steps, per_slice);
    });
    return write_result(argv[2], out, m, n, slices);
}
