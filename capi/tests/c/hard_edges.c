/* The C API's hard edges: sizes, counts, orders and enumerated values a caller gets wrong are
 * refused with a status of their own (never NMS_ERR_INTERNAL, never an abort or a crash), and a
 * kernel's operands are checked by name. Built and run (also under valgrind) by
 * capi/tests/c_api.rs. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nmsparse.h"
#include "expect.h"

int main(void) {
    /* Orders: 0 and beyond NMS_MAX_ORDER are refused at once. */
    nms_format *f = NULL;
    EXPECT(nms_format_parse("dense", 0, &f), NMS_ERR_INVALID_ARGUMENT, "order 0");
    EXPECT(nms_format_parse("dense", SIZE_MAX, &f), NMS_ERR_INVALID_ARGUMENT, "NMS_MAX_ORDER");
    EXPECT(nms_format_parse("csf", 1000000, &f), NMS_ERR_INVALID_ARGUMENT, "NMS_MAX_ORDER");
    OK(nms_format_parse("csf", NMS_MAX_ORDER, &f));
    nms_format_free(f);
    f = NULL;

    nms_format *csr = NULL, *dense1 = NULL;
    OK(nms_format_parse("csr", 2, &csr));
    OK(nms_format_parse("dense", 1, &dense1));

    /* Counts that no array can have. */
    size_t shape[2] = {3, 4};
    uint64_t coords[] = {0, 1, 2, 3};
    double values[] = {1.0, 2.0, 3.0, 4.0};
    nms_tensor *t = NULL;
    EXPECT(nms_tensor_from_coo(NMS_F64, 1, shape, SIZE_MAX / 2, coords, values, dense1, 0, &t),
           NMS_ERR_INVALID_ARGUMENT, "larger than any array");
    EXPECT(nms_tensor_from_coo(NMS_F64, SIZE_MAX, shape, 1, coords, values, csr, 0, &t), NMS_ERR_INVALID_ARGUMENT,
           "NMS_MAX_ORDER");
    EXPECT(nms_tensor_from_dense(NMS_F64, SIZE_MAX, shape, values, csr, &t), NMS_ERR_INVALID_ARGUMENT,
           "NMS_MAX_ORDER");
    uint16_t d[4] = {0, 1, 0, 1};
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, SIZE_MAX, SIZE_MAX, 2, 4, 1, values, d, &t), NMS_ERR_INVALID_ARGUMENT,
           "overflows");
    EXPECT(nms_tensor_from_nm_parts(NMS_F64, SIZE_MAX, 1, 2, 4, SIZE_MAX, values, d, &t), NMS_ERR_INVALID_ARGUMENT,
           "");

    /* CSR offsets are checked before they are trusted as lengths. */
    uint64_t huge[2] = {0, 1000000000000000000ull};
    uint64_t indices[1] = {0};
    EXPECT(nms_tensor_from_csr(NMS_F64, 1, 2, huge, indices, values, &t), NMS_ERR_TENSOR, "more than");
    EXPECT(nms_tensor_from_csr(NMS_F64, 1, (size_t)1 << 62, huge, indices, values, &t), NMS_ERR_OUT_OF_MEMORY,
           "cannot allocate");
    uint64_t decreasing[3] = {0, 2, 1};
    EXPECT(nms_tensor_from_csr(NMS_F64, 2, 4, decreasing, indices, values, &t), NMS_ERR_TENSOR, "decreases");
    uint64_t late[2] = {1, 1};
    EXPECT(nms_tensor_from_csr(NMS_F64, 1, 4, late, indices, values, &t), NMS_ERR_TENSOR, "indptr[0]");
    if (t != NULL) {
        fprintf(stderr, "a failed call wrote its out-parameter\n");
        failures++;
    }

    /* Enumerated values outside their lists. */
    EXPECT(nms_tensor_from_coo((nms_dtype)5, 2, shape, 2, coords, values, csr, 0, &t), NMS_ERR_INVALID_ARGUMENT,
           "dtype 5");
    EXPECT(nms_tensor_from_dense((nms_dtype)-1, 2, shape, values, csr, &t), NMS_ERR_INVALID_ARGUMENT, "dtype -1");
    EXPECT(nms_tensor_read("unused.mtx", (nms_dtype)2, "csr", &t), NMS_ERR_INVALID_ARGUMENT, "dtype 2");
    if (strcmp(nms_status_str((nms_status)99), "unknown status") != 0) {
        fprintf(stderr, "nms_status_str(99) is \"%s\"\n", nms_status_str((nms_status)99));
        failures++;
    }

    /* A program: orders, dtypes and backends checked; operands checked by name. */
    nms_program *p = NULL;
    OK(nms_program_new("y(i) = A(i,j) * x(j)", &p));
    EXPECT(nms_program_tensor(p, "x", SIZE_MAX, shape, "dense"), NMS_ERR_INVALID_ARGUMENT, "NMS_MAX_ORDER");
    size_t ashape[2] = {2, 2}, vshape[1] = {2};
    OK(nms_program_tensor(p, "A", 2, ashape, "csr"));
    OK(nms_program_tensor(p, "x", 1, vshape, "dense"));
    OK(nms_program_tensor(p, "y", 1, vshape, "dense"));
    nms_kernel *k = NULL;
    EXPECT(nms_program_compile(p, (nms_dtype)7, NMS_BACKEND_INTERP, &k), NMS_ERR_INVALID_ARGUMENT, "dtype 7");
    EXPECT(nms_program_compile(p, NMS_F64, (nms_backend)9, &k), NMS_ERR_INVALID_ARGUMENT, "backend 9");
    OK(nms_program_compile(p, NMS_F64, NMS_BACKEND_INTERP, &k));

    uint64_t acoords[] = {0, 0, 1, 1};
    double avalues[] = {2.0, 3.0}, xvalues[] = {1.0, 10.0};
    nms_tensor *a = NULL, *x = NULL, *y = NULL;
    OK(nms_tensor_from_coo(NMS_F64, 2, ashape, 2, acoords, avalues, csr, 0, &a));
    OK(nms_tensor_from_dense(NMS_F64, 1, vshape, xvalues, dense1, &x));
    const char *twice[] = {"A", "x", "x"};
    const nms_tensor *twice_t[] = {a, x, x};
    EXPECT(nms_kernel_run(k, 3, twice, twice_t, &y), NMS_ERR_INVALID_ARGUMENT, "given twice");
    const char *unknown[] = {"A", "x", "z"};
    EXPECT(nms_kernel_run(k, 3, unknown, twice_t, &y), NMS_ERR_INVALID_ARGUMENT, "`z` is not an operand");
    const char *result[] = {"A", "x", "y"};
    EXPECT(nms_kernel_run(k, 3, result, twice_t, &y), NMS_ERR_INVALID_ARGUMENT, "is the result");
    const char *missing[] = {"A"};
    EXPECT(nms_kernel_run(k, 1, missing, twice_t, &y), NMS_ERR_INVALID_ARGUMENT, "no tensor given for `x`");
    const char *names[] = {"A", "x"};
    OK(nms_kernel_run(k, 2, names, twice_t, &y));
    double out[2] = {0, 0};
    OK(nms_tensor_to_dense(y, NMS_F64, out, 2));
    if (out[0] != 2.0 || out[1] != 30.0) {
        fprintf(stderr, "y = [%g, %g], expected [2, 30]\n", out[0], out[1]);
        failures++;
    }

    /* N:M SpMM: the device checked. */
    nms_tensor *c = NULL;
    EXPECT(nms_nm_spmm(a, a, 1, (nms_device)3, &c), NMS_ERR_INVALID_ARGUMENT, "device 3");

    nms_tensor_free(y);
    nms_tensor_free(x);
    nms_tensor_free(a);
    nms_kernel_free(k);
    nms_program_free(p);
    nms_format_free(dense1);
    nms_format_free(csr);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all hard edges ok\n");
    return 0;
}
