// nmsparse from C++17: a few lines of RAII around the C API, then SpMV, SpGEMM (A·Aᵀ) and an
// N:M SpMM, each checked against a naive loop.
//
//   c++ -std=c++17 -I include examples/cpp/spmv.cpp -L target/release -lnmsparse -o spmv
//   ./spmv data/power_law_500.mtx
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "nmsparse.h"

namespace nms {

// Throws the library's message when a call fails.
inline void check(nms_status status) {
    if (status != NMS_OK) throw std::runtime_error(std::string(nms_status_str(status)) + ": " + nms_last_error());
}

template <typename T, void (*Free)(T *)>
struct Deleter {
    void operator()(T *p) const { Free(p); }
};
using Tensor = std::unique_ptr<nms_tensor, Deleter<nms_tensor, nms_tensor_free>>;
using Format = std::unique_ptr<nms_format, Deleter<nms_format, nms_format_free>>;
using ProgramHandle = std::unique_ptr<nms_program, Deleter<nms_program, nms_program_free>>;
using Kernel = std::unique_ptr<nms_kernel, Deleter<nms_kernel, nms_kernel_free>>;

}  // namespace nms

int main(int argc, char **argv) try {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MATRIX.mtx\n", argv[0]);
        return 2;
    }
    nms_tensor *raw = nullptr;
    nms::check(nms_tensor_read(argv[1], NMS_F64, "csr", &raw));
    nms::Tensor a(raw);
    size_t shape[2], nnz;
    nms::check(nms_tensor_shape(a.get(), shape, 2));
    nms::check(nms_tensor_nnz(a.get(), &nnz));
    std::vector<uint64_t> indptr(shape[0] + 1), indices(nnz + 1);
    std::vector<double> values(nnz + 1), x(shape[1]), y(shape[0]);
    nms::check(nms_tensor_to_csr(a.get(), NMS_F64, indptr.data(), indices.data(), values.data(), nnz));
    for (size_t j = 0; j < x.size(); j++) x[j] = 0.5 * double(j % 5);

    nms_format *fraw = nullptr;
    nms::check(nms_format_parse("dense", 1, &fraw));
    nms::Format dense(fraw);
    nms::check(nms_tensor_from_dense(NMS_F64, 1, &shape[1], x.data(), dense.get(), &raw));
    nms::Tensor xt(raw);

    nms_program *praw = nullptr;
    nms::check(nms_program_new("y(i) = A(i,j) * x(j)", &praw));
    nms::ProgramHandle program(praw);
    nms::check(nms_program_tensor(program.get(), "A", 2, shape, "csr"));
    nms::check(nms_program_tensor(program.get(), "x", 1, &shape[1], "dense"));
    nms::check(nms_program_tensor(program.get(), "y", 1, &shape[0], "dense"));
    nms_kernel *kraw = nullptr;
    nms::check(nms_program_compile(program.get(), NMS_F64, NMS_BACKEND_JIT, &kraw));
    nms::Kernel kernel(kraw);

    const char *names[] = {"A", "x"};
    const nms_tensor *args[] = {a.get(), xt.get()};
    nms::check(nms_kernel_run(kernel.get(), 2, names, args, &raw));
    nms::Tensor yt(raw);
    nms::check(nms_tensor_to_dense(yt.get(), NMS_F64, y.data(), y.size()));
    for (size_t i = 0; i < y.size(); i++) {
        double expected = 0;
        for (uint64_t p = indptr[i]; p < indptr[i + 1]; p++) expected += values[p] * x[indices[p]];
        if (std::fabs(y[i] - expected) > 1e-9 * (1 + std::fabs(expected))) {
            std::fprintf(stderr, "y[%zu] = %g, expected %g\n", i, y[i], expected);
            return 1;
        }
    }
    std::printf("C++ SpMV: ok (%zu rows)\n", y.size());

    // SpGEMM: C = A·Aᵀ (Aᵀ from A's coordinates), checked entry by entry.
    const size_t m = shape[0], n = shape[1];
    std::vector<uint64_t> coords(2 * nnz + 2);
    std::vector<double> coo(nnz + 1);
    nms::check(nms_tensor_to_coo(a.get(), NMS_F64, coords.data(), coo.data(), nnz));
    for (size_t e = 0; e < nnz; e++) std::swap(coords[2 * e], coords[2 * e + 1]);
    nms::check(nms_format_parse("csr", 2, &fraw));
    nms::Format csr(fraw);
    size_t tshape[2] = {n, m}, cshape[2] = {m, m};
    nms::check(nms_tensor_from_coo(NMS_F64, 2, tshape, nnz, coords.data(), coo.data(), csr.get(), 0, &raw));
    nms::Tensor at(raw);
    nms::check(nms_program_new("C(i,j) = A(i,k) * B(k,j)", &praw));
    nms::ProgramHandle spgemm(praw);
    nms::check(nms_program_tensor(spgemm.get(), "A", 2, shape, "csr"));
    nms::check(nms_program_tensor(spgemm.get(), "B", 2, tshape, "csr"));
    nms::check(nms_program_tensor(spgemm.get(), "C", 2, cshape, "csr"));
    nms::check(nms_program_compile(spgemm.get(), NMS_F64, NMS_BACKEND_JIT, &kraw));
    nms::Kernel spgemm_kernel(kraw);
    const char *gnames[] = {"A", "B"};
    const nms_tensor *gargs[] = {a.get(), at.get()};
    nms::check(nms_kernel_run(spgemm_kernel.get(), 2, gnames, gargs, &raw));
    nms::Tensor c(raw);
    std::vector<double> cd(m * m), row(n);
    nms::check(nms_tensor_to_dense(c.get(), NMS_F64, cd.data(), cd.size()));
    for (size_t i = 0; i < m; i++) {
        std::fill(row.begin(), row.end(), 0.0);
        for (uint64_t p = indptr[i]; p < indptr[i + 1]; p++) row[indices[p]] = values[p];
        for (size_t r = 0; r < m; r++) {
            double expected = 0;
            for (uint64_t q = indptr[r]; q < indptr[r + 1]; q++) expected += row[indices[q]] * values[q];
            if (std::fabs(cd[i * m + r] - expected) > 1e-9 * (1 + std::fabs(expected))) {
                std::fprintf(stderr, "C[%zu,%zu] = %g, expected %g\n", i, r, cd[i * m + r], expected);
                return 1;
            }
        }
    }
    std::printf("C++ SpGEMM: ok\n");

    // N:M SpMM: a 6x40 X times a 40x24 W pruned into nm(1,4,8).
    const size_t K = 40, N = 24, R = 6;
    std::vector<double> w(K * N), xr(R * K), out(R * N), pruned(K * N);
    for (size_t q = 0; q < w.size(); q++) w[q] = double((q * 13) % 9) - 4.0;
    for (size_t q = 0; q < xr.size(); q++) xr[q] = double(q % 5) - 2.0;
    nms::check(nms_format_parse("dense", 2, &fraw));
    nms::Format dense2(fraw);
    nms::check(nms_format_parse("nm(1,4,8)", 2, &fraw));
    nms::Format nm(fraw);
    size_t wshape[2] = {K, N}, xshape[2] = {R, K}, dropped = 0;
    nms::check(nms_tensor_from_dense(NMS_F64, 2, wshape, w.data(), dense2.get(), &raw));
    nms::Tensor wt(raw);
    nms::check(nms_tensor_prune(wt.get(), nm.get(), &raw, &dropped));
    nms::Tensor wp(raw);
    nms::check(nms_tensor_to_dense(wp.get(), NMS_F64, pruned.data(), pruned.size()));
    nms::check(nms_tensor_from_dense(NMS_F64, 2, xshape, xr.data(), dense2.get(), &raw));
    nms::Tensor xt2(raw);
    nms::check(nms_nm_spmm(xt2.get(), wp.get(), 2, NMS_DEVICE_CPU, &raw));
    nms::Tensor prod(raw);
    nms::check(nms_tensor_to_dense(prod.get(), NMS_F64, out.data(), out.size()));
    for (size_t i = 0; i < R; i++)
        for (size_t j = 0; j < N; j++) {
            double expected = 0;
            for (size_t p = 0; p < K; p++) expected += xr[i * K + p] * pruned[p * N + j];
            if (out[i * N + j] != expected) {
                std::fprintf(stderr, "N:M C[%zu,%zu] = %g, expected %g\n", i, j, out[i * N + j], expected);
                return 1;
            }
        }
    std::printf("C++ N:M SpMM: ok (%zu nonzeros pruned)\n", dropped);
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
