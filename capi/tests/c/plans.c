/* N:M plans: the structured operand prepared once and run many times, each run equal to the
 * one-shot product (nms_nm_spmm), on the CPU (f32 and f64, B in nm(N,M,L) and A in nv24) and on
 * CUDA where a GPU is (else NMS_ERR_DEVICE saying what is missing); every misuse refused with
 * its status. Built and run (also under valgrind) by capi/tests/c_api.rs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nmsparse.h"
#include "expect.h"

enum { M = 5, K = 24, N = 7 };

/* The one-shot product of `a` and `b` (of `dtype`), as f64 values (m·n). */
static void one_shot(const nms_tensor *a, const nms_tensor *b, nms_dtype dtype, double *out, size_t count) {
    nms_tensor *c = NULL;
    float out32[M * N];
    OK(nms_nm_spmm(a, b, 1, NMS_DEVICE_CPU, &c));
    if (dtype == NMS_F32) {
        OK(nms_tensor_to_dense(c, NMS_F32, out32, count));
        for (size_t i = 0; i < count; i++) out[i] = out32[i];
    } else {
        OK(nms_tensor_to_dense(c, NMS_F64, out, count));
    }
    nms_tensor_free(c);
}

/* Runs `plan` (host memory) on three dense operands of `dense_len` values built from `seed`
 * and compares each result with the one-shot product of the same operands. `sparse_is_b`:
 * the plan's structured operand is B (the dense one is A). */
static void check_plan(nms_nm_plan *plan, const nms_tensor *sparse, nms_dtype dtype, int sparse_is_b,
                       const char *what) {
    size_t m = 0, k = 0, n = 0;
    OK(nms_nm_plan_shape(plan, &m, &k, &n));
    size_t dense_shape[2] = {sparse_is_b ? m : k, sparse_is_b ? k : n};
    size_t dense_len = dense_shape[0] * dense_shape[1];
    nms_format *dense2 = NULL;
    OK(nms_format_parse("dense", 2, &dense2));
    for (int run = 0; run < 3; run++) {
        double dense64[M * K > K * N ? M * K : K * N], want[M * N], got[M * N];
        float dense32[M * K > K * N ? M * K : K * N], got32[M * N];
        for (size_t i = 0; i < dense_len; i++) dense64[i] = (double)((i * 7 + run * 3) % 9) - 4.0;
        for (size_t i = 0; i < dense_len; i++) dense32[i] = (float)dense64[i];
        nms_tensor *dense = NULL;
        const void *values = dtype == NMS_F32 ? (const void *)dense32 : (const void *)dense64;
        OK(nms_tensor_from_dense(dtype, 2, dense_shape, values, dense2, &dense));
        one_shot(sparse_is_b ? dense : sparse, sparse_is_b ? sparse : dense, dtype, want, m * n);
        if (dtype == NMS_F32) {
            OK(nms_nm_plan_run(plan, dense32, got32, NMS_MEMORY_HOST, NULL));
            for (size_t i = 0; i < m * n; i++) got[i] = got32[i];
        } else {
            OK(nms_nm_plan_run(plan, dense64, got, NMS_MEMORY_HOST, NULL));
        }
        for (size_t i = 0; i < m * n; i++)
            if (got[i] != want[i]) fprintf(stderr, "%s run %d [%zu]: %g, expected %g\n", what, run, i, got[i], want[i]), failures++;
        nms_tensor_free(dense);
    }
    nms_format_free(dense2);
}

int main(void) {
    nms_format *nm = NULL, *nv24 = NULL, *dense2 = NULL;
    OK(nms_format_parse("nm(2,4,4)", 2, &nm));
    OK(nms_format_parse("nv24", 2, &nv24));
    OK(nms_format_parse("dense", 2, &dense2));
    /* B (K×N) in nm(2,4,4) and A (M×K) in nv24, small integers (every sum exact in f32). */
    double b[K * N], a[M * K];
    for (int i = 0; i < K * N; i++) {
        int row = i / N, group = (i % N) / 4;
        b[i] = ((row + group) % 4 < 2) ? (double)((i * 5) % 7) - 3.0 : 0.0;
    }
    for (int i = 0; i < M * K; i++) a[i] = ((i + i / K) % 4 < 2) ? (double)((i * 3) % 5) - 2.0 : 0.0;
    float b32[K * N], a32[M * K];
    for (int i = 0; i < K * N; i++) b32[i] = (float)b[i];
    for (int i = 0; i < M * K; i++) a32[i] = (float)a[i];
    size_t bshape[2] = {K, N}, ashape[2] = {M, K};
    nms_tensor *b64 = NULL, *b32t = NULL, *a64 = NULL, *a32t = NULL;
    OK(nms_tensor_from_dense(NMS_F64, 2, bshape, b, nm, &b64));
    OK(nms_tensor_from_dense(NMS_F32, 2, bshape, b32, nm, &b32t));
    OK(nms_tensor_from_dense(NMS_F64, 2, ashape, a, nv24, &a64));
    OK(nms_tensor_from_dense(NMS_F32, 2, ashape, a32, nv24, &a32t));

    /* CPU plans, both value types and both structured operands; shapes as asked. */
    nms_nm_plan *plan = NULL;
    size_t m = 0, k = 0, n = 0;
    OK(nms_nm_plan_create(b64, M, 2, NMS_DEVICE_CPU, &plan));
    OK(nms_nm_plan_shape(plan, &m, &k, &n));
    if (m != M || k != K || n != N) fprintf(stderr, "shape %zu×%zu×%zu\n", m, k, n), failures++;
    check_plan(plan, b64, NMS_F64, 1, "CPU nm f64");
    /* Misuse of a CPU plan: device memory, a stream, an unknown memory kind, NULL arrays. */
    double x[M * K] = {0}, y[M * N];
    int fake_stream = 0;
    EXPECT(nms_nm_plan_run(plan, x, y, NMS_MEMORY_DEVICE, NULL), NMS_ERR_INVALID_ARGUMENT, "host memory");
    EXPECT(nms_nm_plan_run(plan, x, y, NMS_MEMORY_HOST, &fake_stream), NMS_ERR_INVALID_ARGUMENT, "no stream");
    EXPECT(nms_nm_plan_run(plan, x, y, 7, NULL), NMS_ERR_INVALID_ARGUMENT, "NMS_MEMORY_HOST");
    EXPECT(nms_nm_plan_run(plan, NULL, y, NMS_MEMORY_HOST, NULL), NMS_ERR_NULL, "dense");
    EXPECT(nms_nm_plan_run(plan, x, NULL, NMS_MEMORY_HOST, NULL), NMS_ERR_NULL, "c");
    EXPECT(nms_nm_plan_run(NULL, x, y, NMS_MEMORY_HOST, NULL), NMS_ERR_NULL, "plan");
    EXPECT(nms_nm_plan_shape(NULL, &m, &k, &n), NMS_ERR_NULL, "plan");
    OK(nms_nm_plan_shape(plan, NULL, NULL, &n));
    nms_nm_plan_free(plan);
    plan = NULL;
    OK(nms_nm_plan_create(b32t, M, 1, NMS_DEVICE_CPU, &plan));
    check_plan(plan, b32t, NMS_F32, 1, "CPU nm f32");
    nms_nm_plan_free(plan);
    plan = NULL;
    OK(nms_nm_plan_create(a64, N, 0, NMS_DEVICE_CPU, &plan));
    OK(nms_nm_plan_shape(plan, &m, &k, &n));
    if (m != M || k != K || n != N) fprintf(stderr, "nv24 shape %zu×%zu×%zu\n", m, k, n), failures++;
    check_plan(plan, a64, NMS_F64, 0, "CPU nv24 f64");
    nms_nm_plan_free(plan);
    plan = NULL;
    OK(nms_nm_plan_create(a32t, N, 1, NMS_DEVICE_CPU, &plan));
    check_plan(plan, a32t, NMS_F32, 0, "CPU nv24 f32");
    nms_nm_plan_free(plan);
    nms_nm_plan_free(NULL);

    /* Plans refused when made. */
    nms_tensor *plain = NULL;
    OK(nms_tensor_from_dense(NMS_F64, 2, bshape, b, dense2, &plain));
    plan = NULL;
    EXPECT(nms_nm_plan_create(plain, M, 1, NMS_DEVICE_CPU, &plan), NMS_ERR_INVALID_ARGUMENT, "nm(N,M,L) or A in nv24");
    EXPECT(nms_nm_plan_create(b64, M, 1, 9, &plan), NMS_ERR_INVALID_ARGUMENT, "NMS_DEVICE_CPU");
    EXPECT(nms_nm_plan_create(b64, SIZE_MAX, 1, NMS_DEVICE_CPU, &plan), NMS_ERR_INVALID_ARGUMENT, "overflow");
    EXPECT(nms_nm_plan_create(a64, SIZE_MAX / 2, 1, NMS_DEVICE_CPU, &plan), NMS_ERR_INVALID_ARGUMENT, "overflow");
    EXPECT(nms_nm_plan_create(b64, M, 1025, NMS_DEVICE_CPU, &plan), NMS_ERR_INVALID_ARGUMENT, "1 to 1024");
    EXPECT(nms_nm_plan_create(b64, M, 1, NMS_DEVICE_CUDA, &plan), NMS_ERR_UNSUPPORTED, "f32");
    EXPECT(nms_nm_plan_create(NULL, M, 1, NMS_DEVICE_CPU, &plan), NMS_ERR_NULL, "sparse");
    EXPECT(nms_nm_plan_create(b64, M, 1, NMS_DEVICE_CPU, NULL), NMS_ERR_NULL, "out");
    if (plan != NULL) fprintf(stderr, "a refused plan was written\n"), failures++;

    /* CUDA plans: each run equal to the CPU's where a GPU is, else NMS_ERR_DEVICE naming CUDA. */
    nms_tensor *cuda_operands[2] = {b32t, a32t};
    size_t dims[2] = {M, N};
    for (int which = 0; which < 2; which++) {
        nms_nm_plan *gpu_plan = NULL;
        nms_status s = nms_nm_plan_create(cuda_operands[which], dims[which], 1, NMS_DEVICE_CUDA, &gpu_plan);
        if (s == NMS_OK) {
            check_plan(gpu_plan, cuda_operands[which], NMS_F32, which == 0, which == 0 ? "CUDA nm" : "CUDA nv24");
            float xf[M * K] = {0}, yf[M * N];
            EXPECT(nms_nm_plan_run(gpu_plan, xf, yf, NMS_MEMORY_DEVICE, NULL), NMS_ERR_UNSUPPORTED, "not device memory");
            nms_nm_plan_free(gpu_plan);
            printf("CUDA plan %d ran\n", which);
        } else if (s != NMS_ERR_DEVICE || strstr(nms_last_error(), "CUDA") == NULL) {
            fprintf(stderr, "CUDA plan %d: %s: %s\n", which, nms_status_str(s), nms_last_error());
            failures++;
        }
    }

    nms_tensor_free(b64), nms_tensor_free(b32t), nms_tensor_free(a64), nms_tensor_free(a32t), nms_tensor_free(plain);
    nms_format_free(nm), nms_format_free(nv24), nms_format_free(dense2);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("all plan checks ok\n");
    return 0;
}
