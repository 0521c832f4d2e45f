// Runs nm_f32_to_bf16_rows on the host (see cuda_host.h):
//   harness_to_bf16 IN OUT
// IN: 6 little-endian int64 (rows cols ld grid_x grid_y threads), then B (rows·cols f32).
// OUT: rows·ld bf16 bits, each widened to a u32. Written by nm-cuda's `emulated` test.
#include "../to_bf16.cu"
#include "../splitk_reduce.cu"

#include "harness.h"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* f = fopen(argv[1], "rb");
    if (!f) return 2;
    auto h = read<int64_t>(f, 6);
    const long long rows = h[0];
    const int cols = h[1], ld = h[2], gx = h[3], gy = h[4], threads = h[5];
    auto src = read<float>(f, rows * cols);
    fclose(f);
    // 16-byte aligned, as cudaMalloc's memory is (the kernel stores 16 bytes at a time).
    std::vector<uint4> storage(((size_t)rows * ld + 7) / 8, uint4{0xdeaddead, 0xdeaddead, 0xdeaddead, 0xdeaddead});
    auto* out = reinterpret_cast<unsigned short*>(storage.data());
    gridDim = dim3{(unsigned)gx, (unsigned)gy, 1};
    blockDim = dim3{(unsigned)threads, 1, 1};
    run_grid(gx, gy, 1, threads, 0, [&] { nm_f32_to_bf16_rows(src.data(), out, rows, cols, ld); });
    std::vector<unsigned short> dst(out, out + (size_t)rows * ld);
    std::vector<uint32_t> wide(dst.begin(), dst.end());
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(wide.data(), sizeof(uint32_t), wide.size(), o) != wide.size()) return 2;
    fclose(o);
    return 0;
}
