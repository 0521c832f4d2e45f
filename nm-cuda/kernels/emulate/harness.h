// What both harnesses share: reading the binary input, running a grid block after block, and
// writing C reduced from its split-K slices. Included after the kernel sources.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

template <typename T>
static std::vector<T> read(FILE* f, int64_t len) {
    std::vector<T> v(len);
    if (len > 0 && fread(v.data(), sizeof(T), len, f) != (size_t)len) {
        fprintf(stderr, "short input\n");
        std::exit(2);
    }
    return v;
}

// Runs `kernel()` on `threads` threads for every block of the gx × gy × slices grid, one
// block after another. Each block gets exactly `shared_bytes` of dynamic shared memory (so
// AddressSanitizer reports any access past it), a barrier and its warps' mma staging.
template <typename Kernel>
static void run_grid(int gx, int gy, int slices, int threads, size_t shared_bytes, Kernel kernel) {
    for (int z = 0; z < slices; ++z)
        for (int y = 0; y < gy; ++y)
            for (int x = 0; x < gx; ++x) {
                std::vector<float> smem(shared_bytes / sizeof(float));
                emulated_shared = smem.data();
                std::barrier<> barrier(threads);
                emulated_barrier = &barrier;
                emulated_warps = std::make_unique<EmulatedWarp[]>((threads + 31) / 32);
                std::vector<std::thread> team;
                for (int t = 0; t < threads; ++t)
                    team.emplace_back([&, t] {
                        threadIdx = dim3{(unsigned)t, 0, 0};
                        blockIdx = dim3{(unsigned)x, (unsigned)y, (unsigned)z};
                        kernel();
                    });
                for (auto& t : team) t.join();
            }
}

// C (m·n) from the slices' partial products in `out`, reduced by the split-K kernel in slice
// order, written to `path`; the exit status.
static int write_result(const char* path, const std::vector<float>& out, int m, int n, int slices) {
    std::vector<float> c((size_t)m * n);
    if (slices > 1) {
        gridDim = dim3{1, 1, 1};
        blockDim = dim3{1, 1, 1};
        threadIdx = blockIdx = dim3{0, 0, 0};
        nm_splitk_reduce(c.data(), out.data(), (long long)m * n, slices);
    } else {
        c = out;
    }
    FILE* o = fopen(path, "wb");
    if (!o || fwrite(c.data(), sizeof(float), c.size(), o) != c.size()) return 2;
    fclose(o);
    return 0;
}
