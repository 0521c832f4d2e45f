/* Every error path of the C API: each call returns its status and a useful message, and
 * nothing crashes. Built and run (also under valgrind) by capi/tests/c_api.rs. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nmsparse.h"
#include "expect.h"

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    char path[4096];

    /* Formats. */
    nms_format *f = NULL, *csr = NULL, *dense1 = NULL, *dense2 = NULL, *nm = NULL;
    EXPECT(nms_format_parse(NULL, 2, &f), NMS_ERR_NULL, "text");
    EXPECT(nms_format_parse("csr", 2, NULL), NMS_ERR_NULL, "out");
    EXPECT(nms_format_parse("csx", 2, &f), NMS_ERR_FORMAT, "csx");
    EXPECT(nms_format_parse("csr", 3, &f), NMS_ERR_FORMAT, "");
    if (f != NULL) {
        fprintf(stderr, "a failed call wrote its out-parameter\n");
        failures++;
    }
    OK(nms_format_parse("csr", 2, &csr));
    OK(nms_format_parse("dense", 1, &dense1));
    OK(nms_format_parse("dense", 2, &dense2));
    OK(nms_format_parse("nm(2,4,1)", 2, &nm));
    char text[64];
    size_t length = 0;
    EXPECT(nms_format_to_string(csr, text, 2, &length), NMS_ERR_INVALID_ARGUMENT, "buffer");
    OK(nms_format_to_string(csr, text, sizeof text, &length));
    if (length != strlen(text)) failures++;
    EXPECT(nms_format_to_string(NULL, text, sizeof text, NULL), NMS_ERR_NULL, "format");

    /* Tensors from arrays: NULLs, wrong sizes, invalid data. */
    size_t shape[2] = {3, 4};
    uint64_t coords[] = {0, 1, 2, 3, 0, 1};
    double values[] = {1.0, 2.0, 3.0};
    nms_tensor *t = NULL, *a = NULL;
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, NULL, 3, coords, values, csr, 0, &t), NMS_ERR_NULL, "shape");
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, shape, 3, NULL, values, csr, 0, &t), NMS_ERR_NULL, "coords");
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, shape, 3, coords, NULL, csr, 0, &t), NMS_ERR_NULL, "values");
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, shape, 3, coords, values, NULL, 0, &t), NMS_ERR_NULL, "format");
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, shape, 3, coords, values, csr, 0, NULL), NMS_ERR_NULL, "out");
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, shape, 3, coords, values, csr, 0, &t), NMS_ERR_TENSOR, "duplicate");
    OK(nms_tensor_from_coo(NMS_F64, 2, shape, 3, coords, values, csr, 1, &t)); /* summed */
    uint64_t out_of_shape[] = {0, 1, 5, 0};
    EXPECT(nms_tensor_from_coo(NMS_F64, 2, shape, 2, out_of_shape, values, csr, 0, &a), NMS_ERR_TENSOR, "out of range");
    size_t shape3[3] = {3, 4, 5};
    EXPECT(nms_tensor_from_coo(NMS_F64, 3, shape3, 1, coords, values, csr, 0, &a), NMS_ERR_TENSOR, "");
    uint64_t indptr[] = {0, 2, 1, 3}, indices[] = {1, 0, 3};
    EXPECT(nms_tensor_from_csr(NMS_F64, 3, 4, indptr, indices, values, &a), NMS_ERR_TENSOR, "indptr decreases");
    uint64_t unsorted_ptr[] = {0, 2, 2, 3};
    EXPECT(nms_tensor_from_csr(NMS_F64, 3, 4, unsorted_ptr, indices, values, &a), NMS_ERR_TENSOR, "ordered");
    uint64_t good_idx[] = {0, 1, 3};
    OK(nms_tensor_from_csr(NMS_F64, 3, 4, unsorted_ptr, good_idx, values, &a));
    double dense[12] = {0};
    EXPECT(nms_tensor_from_dense(NMS_F64, 2, shape, NULL, csr, &t), NMS_ERR_NULL, "values");

    /* Queries and exports with wrong sizes or types. */
    size_t small[1], nnz = 0, order = 0;
    EXPECT(nms_tensor_shape(a, small, 1), NMS_ERR_INVALID_ARGUMENT, "room");
    EXPECT(nms_tensor_nnz(NULL, &nnz), NMS_ERR_NULL, "tensor");
    EXPECT(nms_tensor_order(a, NULL), NMS_ERR_NULL, "out");
    OK(nms_tensor_order(a, &order));
    OK(nms_tensor_nnz(a, &nnz));
    if (order != 2 || nnz != 3) failures++;
    EXPECT(nms_tensor_to_dense(a, NMS_F64, dense, 11), NMS_ERR_INVALID_ARGUMENT, "12");
    EXPECT(nms_tensor_to_dense(a, NMS_F32, dense, 12), NMS_ERR_INVALID_ARGUMENT, "NMS_F64");
    OK(nms_tensor_to_dense(a, NMS_F64, dense, 12));
    if (dense[0] != 1.0 || dense[1 * 4 + 1] != 0.0 || dense[2 * 4 + 3] != 3.0) failures++;
    uint64_t ec[6];
    double ev[3];
    EXPECT(nms_tensor_to_coo(a, NMS_F64, ec, ev, 2), NMS_ERR_INVALID_ARGUMENT, "room for 2");
    /* CSR out: too little room, the wrong value type, not a matrix; queries given NULL. */
    uint64_t ip[4], ix[3];
    EXPECT(nms_tensor_to_csr(a, NMS_F64, ip, ix, ev, 2), NMS_ERR_INVALID_ARGUMENT, "room for 2 entries");
    EXPECT(nms_tensor_to_csr(a, NMS_F32, ip, ix, ev, 3), NMS_ERR_INVALID_ARGUMENT, "NMS_F64");
    EXPECT(nms_tensor_to_csr(NULL, NMS_F64, ip, ix, ev, 3), NMS_ERR_NULL, "tensor");
    OK(nms_tensor_to_csr(a, NMS_F64, ip, ix, ev, 3));
    if (ip[0] != 0 || ip[3] != 3 || ev[0] != 1.0 || ev[2] != 3.0) failures++;
    {
        size_t n6 = 6;
        double v6[6] = {1, 0, 2, 0, 0, 3};
        nms_tensor *vec = NULL;
        OK(nms_tensor_from_dense(NMS_F64, 1, &n6, v6, dense1, &vec));
        EXPECT(nms_tensor_to_csr(vec, NMS_F64, ip, ix, ev, 3), NMS_ERR_INVALID_ARGUMENT, "CSR needs a matrix");
        nms_tensor_free(vec);
    }
    nms_dtype dt = NMS_F32;
    EXPECT(nms_tensor_dtype(a, NULL), NMS_ERR_NULL, "out");
    OK(nms_tensor_dtype(a, &dt));
    if (dt != NMS_F64) failures++;
    nms_format *af = NULL;
    EXPECT(nms_tensor_format(NULL, &af), NMS_ERR_NULL, "tensor");
    OK(nms_tensor_format(a, &af));
    nms_format_free(af);
    nms_tensor *converted = NULL;
    EXPECT(nms_tensor_convert(a, NULL, &converted), NMS_ERR_NULL, "format");
    EXPECT(nms_tensor_convert(a, dense2, NULL), NMS_ERR_NULL, "out");

    /* N:M metadata: data that does not fit the pattern, without pruning. */
    double block[16] = {1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* 3 of 4 in a window */
    size_t nm_shape[2] = {16, 1};
    nms_tensor *bad = NULL, *pruned = NULL;
    EXPECT(nms_tensor_from_dense(NMS_F64, 2, nm_shape, block, nm, &bad), NMS_ERR_TENSOR, "2:4");
    size_t dropped = 0;
    nms_tensor *col = NULL;
    OK(nms_tensor_from_dense(NMS_F64, 2, nm_shape, block, dense2, &col));
    OK(nms_tensor_prune(col, nm, &pruned, &dropped));
    EXPECT(nms_tensor_convert(col, nm, &converted), NMS_ERR_TENSOR, "2:4");
    EXPECT(nms_tensor_convert(col, dense1, &converted), NMS_ERR_TENSOR, "the format stores 1");
    OK(nms_tensor_convert(pruned, dense2, &converted));
    nms_tensor_free(converted);
    if (dropped != 1) failures++;

    /* N:M SpMM: the CUDA kernels are f32; A must be dense with B's row count. */
    nms_tensor *c_nm = NULL;
    EXPECT(nms_nm_spmm(col, pruned, 1, NMS_DEVICE_CUDA, &c_nm), NMS_ERR_UNSUPPORTED, "f32");
    {
        /* f32 on CUDA: a result where a GPU is, else NMS_ERR_DEVICE saying what is missing. */
        float b32[16] = {1, 2, 0, 0, 0, 0, 3, 4, 0, 5, 0, 6, 7, 0, 0, 8};
        float a32[16];
        for (int i = 0; i < 16; i++) a32[i] = (float)(i % 3);
        size_t ashape[2] = {1, 16};
        nms_tensor *b32t = NULL, *a32t = NULL, *c32 = NULL;
        OK(nms_tensor_from_dense(NMS_F32, 2, nm_shape, b32, nm, &b32t));
        OK(nms_tensor_from_dense(NMS_F32, 2, ashape, a32, dense2, &a32t));
        nms_status s = nms_nm_spmm(a32t, b32t, 1, NMS_DEVICE_CUDA, &c32);
        if (s == NMS_OK) {
            float got = 0;
            OK(nms_tensor_to_dense(c32, NMS_F32, &got, 1));
            float want = 0;
            for (int i = 0; i < 16; i++) want += a32[i] * b32[i];
            if (got != want) fprintf(stderr, "CUDA N:M SpMM: %g, expected %g\n", got, want), failures++;
        } else if (s != NMS_ERR_DEVICE || strstr(nms_last_error(), "CUDA") == NULL) {
            fprintf(stderr, "CUDA N:M SpMM: %s: %s\n", nms_status_str(s), nms_last_error());
            failures++;
        }
        nms_tensor_free(b32t), nms_tensor_free(a32t), nms_tensor_free(c32);
    }
    EXPECT(nms_nm_spmm(a, pruned, 1, NMS_DEVICE_CPU, &c_nm), NMS_ERR_INVALID_ARGUMENT, "dense");
    EXPECT(nms_nm_spmm(col, col, 1, NMS_DEVICE_CPU, &c_nm), NMS_ERR_INVALID_ARGUMENT, "nm(N,M,L)");
    EXPECT(nms_nm_spmm(NULL, pruned, 1, NMS_DEVICE_CPU, &c_nm), NMS_ERR_NULL, "a");
    EXPECT(nms_nm_spmm(col, pruned, 1025, NMS_DEVICE_CPU, &c_nm), NMS_ERR_INVALID_ARGUMENT, "1 to 1024");
    double row16[16] = {0};
    size_t wide[2] = {1, 16}, wrong[2] = {1, 15};
    nms_tensor *xrow = NULL, *bad_row = NULL;
    OK(nms_tensor_from_dense(NMS_F64, 2, wide, row16, dense2, &xrow));
    OK(nms_nm_spmm(xrow, pruned, 1, NMS_DEVICE_CPU, &c_nm));
    EXPECT(nms_tensor_from_dense(NMS_F64, 2, wrong, row16, dense2, &bad_row), NMS_OK, "");
    nms_tensor *c_bad = NULL;
    EXPECT(nms_nm_spmm(bad_row, pruned, 1, NMS_DEVICE_CPU, &c_bad), NMS_ERR_TENSOR, "rows");
    nms_tensor_free(xrow), nms_tensor_free(bad_row), nms_tensor_free(c_nm);

    /* 2:4 SpMM with A in nv24 and B dense: the CPU kernel against a hand-written product; a
       B that is not dense or has the wrong rows is refused; CUDA computes it or says why not. */
    {
        nms_format *nv24 = NULL;
        OK(nms_format_parse("nv24", 2, &nv24));
        double a24[2 * 8] = {1, 0, 2, 0, 0, 3, 0, 4, /* row 1: */ 0, 5, 6, 0, 7, 0, 0, 8};
        double b24[8 * 2];
        for (int i = 0; i < 16; i++) b24[i] = (double)(i % 5) - 2.0;
        size_t ashape[2] = {2, 8}, bshape[2] = {8, 2}, short_shape[2] = {7, 2};
        nms_tensor *a_t = NULL, *b_t = NULL, *b_csr = NULL, *b_short = NULL, *c_t = NULL;
        OK(nms_tensor_from_dense(NMS_F64, 2, ashape, a24, nv24, &a_t));
        OK(nms_tensor_from_dense(NMS_F64, 2, bshape, b24, dense2, &b_t));
        OK(nms_tensor_from_dense(NMS_F64, 2, bshape, b24, csr, &b_csr));
        OK(nms_tensor_from_dense(NMS_F64, 2, short_shape, b24, dense2, &b_short));
        OK(nms_nm_spmm(a_t, b_t, 2, NMS_DEVICE_CPU, &c_t));
        double got[4], want[4] = {0, 0, 0, 0};
        OK(nms_tensor_to_dense(c_t, NMS_F64, got, 4));
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                for (int p = 0; p < 8; p++) want[i * 2 + j] += a24[i * 8 + p] * b24[p * 2 + j];
        for (int q = 0; q < 4; q++)
            if (got[q] != want[q]) fprintf(stderr, "nv24 SpMM [%d]: %g, expected %g\n", q, got[q], want[q]), failures++;
        nms_tensor *c_bad = NULL;
        EXPECT(nms_nm_spmm(a_t, b_csr, 1, NMS_DEVICE_CPU, &c_bad), NMS_ERR_INVALID_ARGUMENT, "dense");
        EXPECT(nms_nm_spmm(a_t, b_short, 1, NMS_DEVICE_CPU, &c_bad), NMS_ERR_TENSOR, "rows");
        EXPECT(nms_nm_spmm(a_t, b_t, 1, NMS_DEVICE_CUDA, &c_bad), NMS_ERR_UNSUPPORTED, "f32");
        float a32[16], b32[16];
        for (int i = 0; i < 16; i++) a32[i] = (float)a24[i], b32[i] = (float)b24[i];
        nms_tensor *a32t = NULL, *b32t = NULL, *c32 = NULL;
        OK(nms_tensor_from_dense(NMS_F32, 2, ashape, a32, nv24, &a32t));
        OK(nms_tensor_from_dense(NMS_F32, 2, bshape, b32, dense2, &b32t));
        nms_status s = nms_nm_spmm(a32t, b32t, 1, NMS_DEVICE_CUDA, &c32);
        if (s == NMS_OK) {
            float g32[4];
            OK(nms_tensor_to_dense(c32, NMS_F32, g32, 4));
            for (int q = 0; q < 4; q++)
                if (g32[q] != (float)want[q]) fprintf(stderr, "CUDA nv24 [%d]: %g\n", q, g32[q]), failures++;
        } else if (s != NMS_ERR_DEVICE || strstr(nms_last_error(), "CUDA") == NULL) {
            fprintf(stderr, "CUDA nv24 SpMM: %s: %s\n", nms_status_str(s), nms_last_error());
            failures++;
        }
        nms_tensor_free(a_t), nms_tensor_free(b_t), nms_tensor_free(b_csr), nms_tensor_free(b_short);
        nms_tensor_free(c_t), nms_tensor_free(a32t), nms_tensor_free(b32t), nms_tensor_free(c32);
        nms_format_free(nv24);
    }

    /* N:M from B' and D: metadata >= M, duplicated or decreasing in a block. */
    double bp[2] = {1.0, 2.0};
    uint16_t d_ok[2] = {0, 2}, d_big[2] = {0, 4}, d_dup[2] = {2, 2}, d_down[2] = {2, 0};
    nms_tensor *parts = NULL;
    OK(nms_tensor_from_nm_parts(NMS_F64, 4, 1, 2, 4, 1, bp, d_ok, &parts));
    double parts_dense[4];
    OK(nms_tensor_to_dense(parts, NMS_F64, parts_dense, 4));
    if (parts_dense[0] != 1.0 || parts_dense[2] != 2.0 || parts_dense[1] != 0.0) failures++;
    nms_tensor *bad_parts = NULL;
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, 4, 1, 2, 4, 1, bp, d_big, &bad_parts), NMS_ERR_TENSOR, "below M");
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, 4, 1, 2, 4, 1, bp, d_dup, &bad_parts), NMS_ERR_TENSOR, "distinct");
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, 4, 1, 2, 4, 1, bp, d_down, &bad_parts), NMS_ERR_TENSOR, "increasing");
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, 4, 1, 5, 4, 1, bp, d_ok, &bad_parts), NMS_ERR_FORMAT, "N <= M");
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, 4, 1, 2, 4, 1, bp, NULL, &bad_parts), NMS_ERR_NULL, "d");
    nms_tensor_free(parts);

    /* Files: missing, malformed (the message says the line). */
    EXPECT(nms_tensor_read("/nonexistent/m.mtx", NMS_F64, "csr", &t), NMS_ERR_IO, "nonexistent");
    snprintf(path, sizeof path, "%s/malformed.mtx", dir);
    FILE *file = fopen(path, "w");
    fputs("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 x 2.0\n", file);
    fclose(file);
    EXPECT(nms_tensor_read(path, NMS_F64, "csr", &t), NMS_ERR_IO, "line 4");
    EXPECT(nms_tensor_write(a, "/nonexistent/out.mtx"), NMS_ERR_IO, "nonexistent");

    /* Programs: malformed expressions, unknown formats, shape mismatches, wrong operands. */
    nms_program *p = NULL;
    nms_kernel *k = NULL;
    EXPECT(nms_program_new("y(i) = A(i,j) *", &p), NMS_ERR_PARSE, "");
    EXPECT(nms_program_new(NULL, &p), NMS_ERR_NULL, "expr");
    OK(nms_program_new("y(i) = A(i,j) * x(j)", &p));
    EXPECT(nms_program_tensor(p, "A", 2, shape, "csx"), NMS_ERR_FORMAT, "csx");
    OK(nms_program_tensor(p, "A", 2, shape, "csr"));
    size_t n4 = 4, n3 = 3, n5 = 5;
    OK(nms_program_tensor(p, "y", 1, &n3, "dense"));
    EXPECT(nms_program_compile(p, NMS_F64, NMS_BACKEND_INTERP, &k), NMS_ERR_SEMANTIC, "x");
    OK(nms_program_tensor(p, "x", 1, &n5, "dense"));
    EXPECT(nms_program_compile(p, NMS_F64, NMS_BACKEND_INTERP, &k), NMS_ERR_SEMANTIC, "");
    OK(nms_program_tensor(p, "x", 1, &n4, "dense"));
    OK(nms_program_schedule(p, "reorder(i, q)"));
    EXPECT(nms_program_compile(p, NMS_F64, NMS_BACKEND_INTERP, &k), NMS_ERR_SCHEDULE, "q");
    OK(nms_program_schedule(p, ""));
    OK(nms_program_compile(p, NMS_F64, NMS_BACKEND_INTERP, &k));
    /* A declaration naming what the statement does not have (a typo was ignored). */
    for (int typo = 0; typo < 2; typo++) {
        nms_program *q = NULL;
        nms_kernel *kq = NULL;
        OK(nms_program_new("y(i) = A(i,j) * x(j)", &q));
        OK(nms_program_tensor(q, "A", 2, shape, "csr"));
        OK(nms_program_tensor(q, "x", 1, &n4, "dense"));
        OK(nms_program_tensor(q, "y", 1, &n3, "dense"));
        if (typo == 0) {
            OK(nms_program_tensor(q, "Q", 1, &n4, "dense"));
            EXPECT(nms_program_compile(q, NMS_F64, NMS_BACKEND_INTERP, &kq), NMS_ERR_SEMANTIC, "no tensor `Q`");
        } else {
            OK(nms_program_index_size(q, "k", 7));
            EXPECT(nms_program_compile(q, NMS_F64, NMS_BACKEND_INTERP, &kq), NMS_ERR_SEMANTIC, "no index variable `k`");
        }
        EXPECT(nms_program_index_size(NULL, "k", 7), NMS_ERR_NULL, "program");
        nms_program_free(q);
    }
    nms_tensor *x = NULL, *y = NULL, *x32 = NULL;
    double xv[4] = {1, 2, 3, 4};
    float xf[4] = {1, 2, 3, 4};
    OK(nms_tensor_from_dense(NMS_F64, 1, &n4, xv, dense1, &x));
    OK(nms_tensor_from_dense(NMS_F32, 1, &n4, xf, dense1, &x32));
    const char *names[] = {"A", "x"};
    const nms_tensor *args[] = {a, x};
    const nms_tensor *wrong_type[] = {a, x32};
    const nms_tensor *wrong_shape[] = {x, x};
    EXPECT(nms_kernel_run(k, 2, names, wrong_type, &y), NMS_ERR_INVALID_ARGUMENT, "value type");
    EXPECT(nms_kernel_run(k, 2, names, wrong_shape, &y), NMS_ERR_TENSOR, "`A`");
    EXPECT(nms_kernel_run(k, 1, names, args, &y), NMS_ERR_INVALID_ARGUMENT, "`x`");
    EXPECT(nms_kernel_run(k, 2, NULL, args, &y), NMS_ERR_NULL, "names");
    EXPECT(nms_kernel_run(NULL, 2, names, args, &y), NMS_ERR_NULL, "kernel");
    EXPECT(nms_kernel_set_threads(k, 0), NMS_ERR_INVALID_ARGUMENT, "threads");
    EXPECT(nms_kernel_set_threads(k, 100000), NMS_ERR_INVALID_ARGUMENT, "1 to 1024");
    /* What runs the kernel, in words: the length first (a buffer too small), then the text. */
    size_t described = 0;
    EXPECT(nms_kernel_describe(k, NULL, 0, &described), NMS_ERR_INVALID_ARGUMENT, "buffer");
    char *description = malloc(described + 1);
    OK(nms_kernel_describe(k, description, described + 1, NULL));
    if (strlen(description) != described ||
        strcmp(description, "statement: y(i) = A(i,j) * x(j)\n"
                            "kernel: a generated loop nest, run by the interpreter, on 1 thread\n") != 0) {
        fprintf(stderr, "described in %zu bytes: %s\n", described, description);
        failures++;
    }
    free(description);
    EXPECT(nms_kernel_describe(NULL, text, sizeof text, NULL), NMS_ERR_NULL, "kernel");
    OK(nms_kernel_run(k, 2, names, args, &y));
    double yv[3];
    OK(nms_tensor_to_dense(y, NMS_F64, yv, 3));
    if (yv[0] != 5.0 || yv[1] != 0.0 || yv[2] != 12.0) {
        fprintf(stderr, "y = %g %g %g\n", yv[0], yv[1], yv[2]);
        failures++;
    }
    /* A compiler that does not exist: a clear error, not a crash. */
    setenv("CC", "/nonexistent/cc", 1);
    EXPECT(nms_program_compile(p, NMS_F64, NMS_BACKEND_JIT, &k), NMS_ERR_COMPILER, "/nonexistent/cc");
    unsetenv("CC");

    /* Freeing NULL is allowed. */
    nms_tensor_free(NULL);
    nms_format_free(NULL);
    nms_program_free(NULL);
    nms_kernel_free(NULL);

    nms_tensor_free(t), nms_tensor_free(a), nms_tensor_free(col), nms_tensor_free(pruned);
    nms_tensor_free(x), nms_tensor_free(x32), nms_tensor_free(y), nms_tensor_free(bad);
    nms_format_free(csr), nms_format_free(dense1), nms_format_free(dense2), nms_format_free(nm);
    nms_program_free(p);
    nms_kernel_free(k);
    if (strcmp(nms_status_str(NMS_OK), "success") != 0) failures++;
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all error paths ok\n");
    return 0;
}
