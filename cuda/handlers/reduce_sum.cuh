/*
 * cuda/handlers/reduce_sum.cuh -- built-in kernel "reduce-sum"
 * (gyre_core::kernels::reduce_sum, id 3). Handler signature: cuda/handlers/echo.cuh.
 *
 *   request  u32 count, u32 0, f32 values[count]             (little-endian)
 *   reply    f32 sum, u32 count                              (8 bytes)
 *
 * HANDLER_REJECTED when the request is shorter than 4 bytes, when it does not hold
 * `count` values (8 + 4 * count > req_len: a count beyond the payload) or when the reply
 * has fewer than 8 bytes, exactly as the reference.
 *
 * A block-level tree reduction in f32: each lane sums a strided subset, each warp reduces
 * its lanes with shuffles, the warp sums meet in __shared__ memory and warp 0 reduces
 * them. The order differs from the reference's index order; the reference accepts any
 * order within its bound (gyre_core::kernels::reference::reduce_sum_ok). Works for any
 * block size up to 1024 (a partial last warp shuffles only among its own threads).
 */
#ifndef GYRE_HANDLER_REDUCE_SUM_CUH
#define GYRE_HANDLER_REDUCE_SUM_CUH

#include "gyre/abi.h"

/** Sums `v` over the first `active` lanes of the calling warp (all of them call this);
 *  the result is valid in lane 0. */
__device__ __forceinline__ float gyre_reduce_sum_warp(float v, unsigned int active) {
    const unsigned int wl = threadIdx.x & 31u;
    const unsigned int mask = active >= 32u ? 0xffffffffu : ((1u << active) - 1u);
    unsigned int off;
    for (off = 16u; off > 0u; off >>= 1) {
        const float o = __shfl_down_sync(mask, v, off);
        if (wl + off < active) {
            v += o;
        }
    }
    return v;
}

__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    __shared__ float warp_sums[32];
    const float *in = (const float *)(req + 8); /* payloads are 64-aligned */
    const unsigned int warp = lane >> 5;
    const unsigned int warps = (lanes + 31u) >> 5;
    const unsigned int rest = lanes - (warp << 5);
    unsigned int count;
    unsigned int i;
    float acc = 0.0f;
    (void)msg_type;
    if (req_len < 4u) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    count = ((const unsigned int *)req)[0];
    if (8ull + 4ull * (unsigned long long)count > req_len || reply_cap < 8u) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    for (i = lane; i < count; i += lanes) {
        acc += in[i];
    }
    acc = gyre_reduce_sum_warp(acc, rest < 32u ? rest : 32u);
    if ((lane & 31u) == 0u) {
        warp_sums[warp] = acc;
    }
    __syncthreads();
    if (warp == 0u) {
        const unsigned int active = lanes < 32u ? lanes : 32u;
        acc = lane < warps ? warp_sums[lane] : 0.0f;
        acc = gyre_reduce_sum_warp(acc, active);
        if (lane == 0u) {
            ((float *)reply)[0] = acc;
            ((unsigned int *)reply)[1] = count;
        }
    }
    *reply_len = 8u;
    return GYRE_ERR_NONE;
}

#endif /* GYRE_HANDLER_REDUCE_SUM_CUH */
