// nmsparse from C++17: a few lines of RAII around the C API, then SpMV checked against a
// naive loop.
//
//   c++ -std=c++17 -I include examples/cpp/spmv.cpp -L target/release -lnmsparse -o spmv
//   ./spmv data/power_law_500.mtx
#include <cmath>
#include <cstdio>
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
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
}
