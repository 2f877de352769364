/*
 * cuda/handlers/reduce_sum.cl -- built-in kernel "reduce-sum"
 * (gyre_core::kernels::reduce_sum, id 3), OpenCL C. Handler signature:
 * cuda/handlers/echo.cl; the CUDA twin is reduce_sum.cuh.
 *
 *   request  u32 count, u32 0, f32 values[count]             (little-endian)
 *   reply    f32 sum, u32 count                              (8 bytes)
 *
 * HANDLER_REJECTED when the request is shorter than 4 bytes, when it does not hold
 * `count` values (8 + 4 * count > req_len) or when the reply has fewer than 8 bytes,
 * exactly as the reference. Each lane sums a strided subset in f32, the partial sums meet
 * in the loop's __local scratch and lane 0 adds them in lane order. The order differs
 * from the reference's index order when lanes > 1; the reference accepts any order within
 * its bound (gyre_core::kernels::reference::reduce_sum_ok). Every early return is taken by
 * all lanes alike (it depends only on the request), so the barrier is reached uniformly.
 */
#ifndef GYRE_HANDLER_REDUCE_SUM_CL
#define GYRE_HANDLER_REDUCE_SUM_CL

#include "gyre/abi.h"

uint32_t gyre_handler(uint32_t msg_type, const __global unsigned char *req, uint32_t req_len,
                      __global unsigned char *reply, uint32_t reply_cap, uint32_t *reply_len,
                      uint32_t lane, uint32_t lanes, __local uint32_t *scratch) {
    const __global float *in = (const __global float *)(req + 8); /* 64-aligned */
    uint32_t count;
    uint32_t i;
    float acc = 0.0f;
    (void)msg_type;
    if (req_len < 4u) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    count = ((const __global uint32_t *)req)[0];
    if (8ul + 4ul * (uint64_t)count > req_len || reply_cap < 8u) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    for (i = lane; i < count; i += lanes) {
        acc += in[i];
    }
    scratch[lane] = as_uint(acc);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0u) {
        float sum = as_float(scratch[0]);
        for (i = 1u; i < lanes; ++i) {
            sum += as_float(scratch[i]);
        }
        ((__global float *)reply)[0] = sum;
        ((__global uint32_t *)reply)[1] = count;
    }
    /* scratch is reused by the next call: every lane has read nothing from it, lane 0 is
     * done with it before the loop's next barrier. */
    *reply_len = 8u;
    return GYRE_ERR_NONE;
}

#endif /* GYRE_HANDLER_REDUCE_SUM_CL */
