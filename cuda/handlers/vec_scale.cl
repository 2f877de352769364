/*
 * cuda/handlers/vec_scale.cl -- built-in kernel "vector scale"
 * (gyre_core::kernels::vec_scale, id 2), OpenCL C. Handler signature:
 * cuda/handlers/echo.cl; the CUDA twin is vec_scale.cuh.
 *
 *   request  f32 factor, u32 count, f32 values[count]        (little-endian)
 *   reply    u32 count, u32 0, f32 values[i] * factor        (8 + 4 * count bytes)
 *
 * HANDLER_REJECTED when the request is shorter than 8 bytes, when the reply would not fit
 * (8 + 4 * count > reply_cap) or when the request does not hold `count` values, exactly as
 * the reference. Each product is one IEEE f32 multiply, which OpenCL rounds correctly
 * (full profile: 0 ulp for x * y); a lone multiply cannot be contracted into an FMA.
 * Lanes stride over the values.
 */
#ifndef GYRE_HANDLER_VEC_SCALE_CL
#define GYRE_HANDLER_VEC_SCALE_CL

#include "gyre/abi.h"

uint32_t gyre_handler(uint32_t msg_type, const __global unsigned char *req, uint32_t req_len,
                      __global unsigned char *reply, uint32_t reply_cap, uint32_t *reply_len,
                      uint32_t lane, uint32_t lanes, __local uint32_t *scratch) {
    const __global uint32_t *hdr = (const __global uint32_t *)req; /* 64-aligned */
    const __global float *in = (const __global float *)(req + 8);
    __global float *out = (__global float *)(reply + 8);
    uint64_t out_len;
    uint32_t count;
    float factor;
    uint32_t i;
    (void)msg_type;
    (void)scratch;
    if (req_len < 8u) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    factor = as_float(hdr[0]);
    count = hdr[1];
    out_len = 8ul + 4ul * (uint64_t)count;
    if (out_len > reply_cap || out_len > req_len) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    if (lane == 0u) {
        ((__global uint32_t *)reply)[0] = count;
        ((__global uint32_t *)reply)[1] = 0u;
    }
    for (i = lane; i < count; i += lanes) {
        out[i] = in[i] * factor;
    }
    *reply_len = (uint32_t)out_len;
    return GYRE_ERR_NONE;
}

#endif /* GYRE_HANDLER_VEC_SCALE_CL */
