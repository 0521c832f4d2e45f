/* nmsparse from C: read a matrix, run SpMV and SpGEMM (A·Aᵀ) through compiled kernels, prune a
 * dense matrix into the 2:4 vector-wise N:M format, multiply by it (N:M SpMM), and check every
 * result against a naive loop.
 *
 *   cc -std=c99 -I include examples/c/spmv_spgemm.c -L target/release -lnmsparse -o spmv_spgemm
 *   ./spmv_spgemm data/power_law_500.mtx [jit|interp]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nmsparse.h"

/* Prints the failed call, its status and the library's message, and leaves. */
#define CHECK(call)                                                                                \
    do {                                                                                           \
        nms_status status_ = (call);                                                               \
        if (status_ != NMS_OK) {                                                                   \
            fprintf(stderr, "%s failed: %s: %s\n", #call, nms_status_str(status_), nms_last_error()); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (1.0 + fabs(b)); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MATRIX.mtx [jit|interp]\n", argv[0]);
        return 2;
    }
    nms_backend backend = (argc > 2 && strcmp(argv[2], "interp") == 0) ? NMS_BACKEND_INTERP : NMS_BACKEND_JIT;
    printf("nmsparse %s\n", nms_version());

    /* The matrix, in CSR, and its arrays for the naive loops. */
    nms_tensor *a = NULL;
    CHECK(nms_tensor_read(argv[1], NMS_F64, "csr", &a));
    size_t shape[2], nnz;
    CHECK(nms_tensor_shape(a, shape, 2));
    CHECK(nms_tensor_nnz(a, &nnz));
    size_t m = shape[0], n = shape[1];
    uint64_t *indptr = malloc((m + 1) * sizeof *indptr), *indices = malloc((nnz + 1) * sizeof *indices);
    double *values = malloc((nnz + 1) * sizeof *values);
    CHECK(nms_tensor_to_csr(a, NMS_F64, indptr, indices, values, nnz));
    printf("A: %zu x %zu, %zu stored\n", m, n, nnz);

    /* SpMV: y = A x. */
    double *x = malloc(n * sizeof *x), *y = malloc(m * sizeof *y);
    for (size_t j = 0; j < n; j++) x[j] = 1.0 + (double)(j % 7);
    nms_format *dense1 = NULL;
    CHECK(nms_format_parse("dense", 1, &dense1));
    nms_tensor *xt = NULL;
    CHECK(nms_tensor_from_dense(NMS_F64, 1, &n, x, dense1, &xt));
    nms_program *spmv = NULL;
    CHECK(nms_program_new("y(i) = A(i,j) * x(j)", &spmv));
    CHECK(nms_program_tensor(spmv, "A", 2, shape, "csr"));
    CHECK(nms_program_tensor(spmv, "x", 1, &n, "dense"));
    CHECK(nms_program_tensor(spmv, "y", 1, &m, "dense"));
    nms_kernel *spmv_kernel = NULL;
    CHECK(nms_program_compile(spmv, NMS_F64, backend, &spmv_kernel));
    const char *spmv_names[] = {"A", "x"};
    const nms_tensor *spmv_args[] = {a, xt};
    nms_tensor *yt = NULL;
    CHECK(nms_kernel_run(spmv_kernel, 2, spmv_names, spmv_args, &yt));
    CHECK(nms_tensor_to_dense(yt, NMS_F64, y, m));
    double checksum = 0;
    for (size_t i = 0; i < m; i++) {
        double expected = 0;
        for (uint64_t p = indptr[i]; p < indptr[i + 1]; p++) expected += values[p] * x[indices[p]];
        if (!close_to(y[i], expected)) {
            fprintf(stderr, "SpMV: y[%zu] = %g, expected %g\n", i, y[i], expected);
            return 1;
        }
        checksum += y[i];
    }
    printf("SpMV: ok, sum(y) = %.6g\n", checksum);

    /* SpGEMM: C = A·Aᵀ, with Aᵀ built from A's coordinates, checked row by row. */
    uint64_t *coords = malloc((2 * nnz + 1) * sizeof *coords);
    double *coo_values = malloc((nnz + 1) * sizeof *coo_values);
    CHECK(nms_tensor_to_coo(a, NMS_F64, coords, coo_values, nnz));
    for (size_t e = 0; e < nnz; e++) {
        uint64_t t = coords[2 * e];
        coords[2 * e] = coords[2 * e + 1];
        coords[2 * e + 1] = t;
    }
    nms_format *csr = NULL;
    CHECK(nms_format_parse("csr", 2, &csr));
    size_t tshape[2] = {n, m}, cshape[2] = {m, m};
    nms_tensor *at = NULL;
    CHECK(nms_tensor_from_coo(NMS_F64, 2, tshape, nnz, coords, coo_values, csr, 0, &at));
    nms_program *spgemm = NULL;
    CHECK(nms_program_new("C(i,j) = A(i,k) * B(k,j)", &spgemm));
    CHECK(nms_program_tensor(spgemm, "A", 2, shape, "csr"));
    CHECK(nms_program_tensor(spgemm, "B", 2, tshape, "csr"));
    CHECK(nms_program_tensor(spgemm, "C", 2, cshape, "csr"));
    nms_kernel *spgemm_kernel = NULL;
    CHECK(nms_program_compile(spgemm, NMS_F64, backend, &spgemm_kernel));
    CHECK(nms_kernel_set_threads(spgemm_kernel, 2));
    const char *spgemm_names[] = {"A", "B"};
    const nms_tensor *spgemm_args[] = {a, at};
    nms_tensor *ct = NULL;
    CHECK(nms_kernel_run(spgemm_kernel, 2, spgemm_names, spgemm_args, &ct));
    size_t cnnz;
    CHECK(nms_tensor_nnz(ct, &cnnz));
    uint64_t *cptr = malloc((m + 1) * sizeof *cptr), *cidx = malloc((cnnz + 1) * sizeof *cidx);
    double *cval = malloc((cnnz + 1) * sizeof *cval), *row = calloc(m, sizeof *row);
    CHECK(nms_tensor_to_csr(ct, NMS_F64, cptr, cidx, cval, cnnz));
    for (size_t i = 0; i < m; i++) {
        /* Row i of A·Aᵀ: the dot products of row i with every row r. */
        for (uint64_t p = indptr[i]; p < indptr[i + 1]; p++) row[indices[p]] = values[p];
        for (size_t r = 0; r < m; r++) {
            double expected = 0;
            for (uint64_t q = indptr[r]; q < indptr[r + 1]; q++) expected += row[indices[q]] * values[q];
            double got = 0;
            for (uint64_t q = cptr[i]; q < cptr[i + 1]; q++)
                if (cidx[q] == r) got = cval[q];
            if (!close_to(got, expected)) {
                fprintf(stderr, "SpGEMM: C[%zu,%zu] = %g, expected %g\n", i, r, got, expected);
                return 1;
            }
        }
        for (uint64_t p = indptr[i]; p < indptr[i + 1]; p++) row[indices[p]] = 0;
    }
    printf("SpGEMM: ok, C = A*A' has %zu stored values\n", cnnz);

    /* N:M: prune a dense 64x32 matrix into vector-wise 2:4 (L = 4) and count what was kept. */
    enum { K = 64, N = 32 };
    double *w = malloc(K * N * sizeof *w);
    for (size_t q = 0; q < K * N; q++) w[q] = (double)((q * 37) % 11) - 5.0;
    nms_format *dense2 = NULL, *nm = NULL;
    CHECK(nms_format_parse("dense", 2, &dense2));
    CHECK(nms_format_parse("nm(2,4,4)", 2, &nm));
    size_t wshape[2] = {K, N}, dropped = 0, kept = 0;
    nms_tensor *wt = NULL, *pruned = NULL;
    CHECK(nms_tensor_from_dense(NMS_F64, 2, wshape, w, dense2, &wt));
    CHECK(nms_tensor_prune(wt, nm, &pruned, &dropped));
    double *back = malloc(K * N * sizeof *back);
    CHECK(nms_tensor_to_dense(pruned, NMS_F64, back, K * N));
    for (size_t q = 0; q < K * N; q++) kept += back[q] != 0;
    for (size_t q = 0; q < K * N; q++)
        if (back[q] != 0 && back[q] != w[q]) {
            fprintf(stderr, "N:M: kept value %g differs from %g\n", back[q], w[q]);
            return 1;
        }
    printf("N:M prune to nm(2,4,4): ok, %zu nonzeros kept, %zu dropped\n", kept, dropped);

    /* N:M SpMM: X (5 x 64, dense) times the pruned W, on 2 threads, checked against a naive loop. */
    enum { R = 5 };
    double *xv = malloc(R * K * sizeof *xv), *xw = malloc(R * N * sizeof *xw);
    for (size_t q = 0; q < R * K; q++) xv[q] = (double)(q % 5) - 2.0;
    size_t xshape[2] = {R, K};
    nms_tensor *xm = NULL, *xw_t = NULL;
    CHECK(nms_tensor_from_dense(NMS_F64, 2, xshape, xv, dense2, &xm));
    CHECK(nms_nm_spmm(xm, pruned, 2, NMS_DEVICE_CPU, &xw_t));
    CHECK(nms_tensor_to_dense(xw_t, NMS_F64, xw, R * N));
    for (size_t i = 0; i < R; i++)
        for (size_t j = 0; j < N; j++) {
            double expected = 0;
            for (size_t p = 0; p < K; p++) expected += xv[i * K + p] * back[p * N + j];
            if (!close_to(xw[i * N + j], expected)) {
                fprintf(stderr, "N:M SpMM: C[%zu,%zu] = %g, expected %g\n", i, j, xw[i * N + j], expected);
                return 1;
            }
        }
    printf("N:M SpMM (5x64 times nm(2,4,4) 64x32): ok\n");
    nms_tensor_free(xm);
    nms_tensor_free(xw_t);
    free(xv), free(xw);

    nms_tensor_free(a);
    nms_tensor_free(xt);
    nms_tensor_free(yt);
    nms_tensor_free(at);
    nms_tensor_free(ct);
    nms_tensor_free(wt);
    nms_tensor_free(pruned);
    nms_format_free(dense1);
    nms_format_free(dense2);
    nms_format_free(csr);
    nms_format_free(nm);
    nms_program_free(spmv);
    nms_program_free(spgemm);
    nms_kernel_free(spmv_kernel);
    nms_kernel_free(spgemm_kernel);
    free(indptr), free(indices), free(values), free(x), free(y), free(coords), free(coo_values);
    free(cptr), free(cidx), free(cval), free(row), free(w), free(back);
    printf("all ok\n");
    return 0;
}
