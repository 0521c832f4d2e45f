// The second half of a deterministic split-K: every slice wrote its partial product to
// `parts` + z·len; the sum runs in slice order, so the result does not depend on scheduling.
#ifdef NMS_HOST_EMULATION
#include "emulate/cuda_host.h"
#endif

extern "C" __global__ void nm_splitk_reduce(float* __restrict__ out, const float* __restrict__ parts, long long len,
                                            int slices) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (long long)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int z = 0; z < slices; ++z) s += parts[z * len + i];
        out[i] = s;
    }
}
