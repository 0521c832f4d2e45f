// Runs nm_spmm_bf16_tc on the host (see cuda_host.h; mma.sync is emulated per warp):
//   harness_tc IN OUT
// IN: 10 little-endian int64 (m n k w np groups steps grid_x grid_y threads), then A (m·k bf16
// bits), B′ (w·np bf16 bits), D (w·groups u16). OUT: C (m·n f32). Written by nm-cuda's
// `emulated` test.
#include "../nm_spmm_bf16_tc.cu"

#include "input.h"

#include <cstdio>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    auto h = read<int64_t>(f, 10);
    const int m = h[0], n = h[1], k = h[2], w = h[3], np = h[4], groups = h[5], steps = h[6];
    const int gx = h[7], gy = h[8], threads = h[9];
    auto a = read<u16>(f, (int64_t)m * k);
    auto bp = read<u16>(f, (int64_t)w * np);
    auto d = read<u16>(f, (int64_t)w * groups);
    fclose(f);
    if (threads != THREADS) {
        fprintf(stderr, "threads %d, kernel built for %d\n", threads, THREADS);
        return 2;
    }
    std::vector<float> c((size_t)m * n);
    for (int y = 0; y < gy; ++y)
        for (int x = 0; x < gx; ++x) {
            std::barrier<> barrier(threads);
            emulated_barrier = &barrier;
            emulated_warps = std::make_unique<EmulatedWarp[]>(threads / 32);
            std::vector<std::thread> team;
            for (int t = 0; t < threads; ++t)
                team.emplace_back([&, t] {
                    threadIdx = dim3{(unsigned)t, 0, 0};
                    blockIdx = dim3{(unsigned)x, (unsigned)y, 0};
                    nm_spmm_bf16_tc(a.data(), bp.data(), d.data(), c.data(), m, n, k, w, np, groups, steps, steps);
                });
            for (auto& t : team) t.join();
        }
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(c.data(), sizeof(float), c.size(), o) != c.size()) return 2;
    fclose(o);
    return 0;
}
