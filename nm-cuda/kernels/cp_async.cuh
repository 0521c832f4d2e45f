// The copy and fragment helpers the pipelined kernels share (nm_spmm_f32.cu's V3,
// nm_spmm_bf16_tc.cu, nv24_spmm_sp.cu). NVRTC gets this file ahead of each kernel's source
// (src/kernels.rs); the host emulation includes it after emulate/cuda_host.h, where a copy
// lands at once and ldmatrix is emulated per warp.
#pragma once

typedef unsigned short u16;
typedef unsigned int u32;

// `u16* name`: the block's dynamic shared memory (in the host emulation, the buffer the
// harness gives each block).
#ifdef NMS_HOST_EMULATION
#define DYNAMIC_SHARED_U16(name) u16* name = reinterpret_cast<u16*>(emulated_shared)
#else
#define DYNAMIC_SHARED_U16(name)                            \
    extern __shared__ __align__(16) u16 name##_storage[]; \
    u16* name = name##_storage
#endif

#ifdef NMS_HOST_EMULATION
__device__ __forceinline__ void cp_async_zfill(void* dst, const void* src, int size, int bytes) {
    std::memcpy(dst, src, bytes);
    std::memset(static_cast<char*>(dst) + bytes, 0, size - bytes);
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int bytes) { cp_async_zfill(dst, src, 4, bytes); }
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) { cp_async_zfill(dst, src, 16, bytes); }
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait() {}
// A shared-memory address as ldmatrix takes it (see below).
typedef const u16* sptr;
__device__ __forceinline__ sptr shared_ptr(const u16* p) { return p; }
__device__ __forceinline__ sptr sp_add(sptr p, int elems) { return p + elems; }
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], sptr row) { emulated_ldmatrix_x4(r, row, false); }
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], sptr row) { emulated_ldmatrix_x4(r, row, true); }
#else
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
// cp.async with zero fill: `bytes` of `src` land in `dst`, the rest of the 4 or 16 is zero.
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// A shared-memory address as ldmatrix takes it: 32 bits, where a generic pointer would hold
// 64 (the tensor-core kernels' 16-warp tiles live within 128 registers).
typedef unsigned sptr;
__device__ __forceinline__ sptr shared_ptr(const u16* p) { return smem_addr(p); }
__device__ __forceinline__ sptr sp_add(sptr p, int elems) { return p + 2 * elems; }
// Four 8×8 b16 matrices; lane l names row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], sptr row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}
// The same, transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], sptr row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}
#endif
