/*
 * cuda/handlers/vec_scale.cuh -- built-in kernel "vector scale"
 * (gyre_core::kernels::vec_scale, id 2). Handler signature: cuda/handlers/echo.cuh.
 *
 *   request  f32 factor, u32 count, f32 values[count]        (little-endian)
 *   reply    u32 count, u32 0, f32 values[i] * factor        (8 + 4 * count bytes)
 *
 * HANDLER_REJECTED when the request is shorter than 8 bytes, when the reply would not fit
 * (8 + 4 * count > reply_cap: a count beyond the payload) or when the request does not
 * hold `count` values, exactly as the reference. Each product is one IEEE f32 multiply,
 * round to nearest (__fmul_rn: never contracted into an FMA), as the reference requires.
 * Lanes stride over the values.
 */
#ifndef GYRE_HANDLER_VEC_SCALE_CUH
#define GYRE_HANDLER_VEC_SCALE_CUH

#include "gyre/abi.h"

__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    const unsigned int *hdr = (const unsigned int *)req; /* payloads are 64-aligned */
    const float *in = (const float *)(req + 8);
    float *out = (float *)(reply + 8);
    unsigned long long out_len;
    unsigned int count;
    float factor;
    unsigned int i;
    (void)msg_type;
    if (req_len < 8u) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    factor = __uint_as_float(hdr[0]);
    count = hdr[1];
    out_len = 8ull + 4ull * (unsigned long long)count;
    if (out_len > reply_cap || out_len > req_len) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    if (lane == 0u) {
        ((unsigned int *)reply)[0] = count;
        ((unsigned int *)reply)[1] = 0u;
    }
    for (i = lane; i < count; i += lanes) {
        out[i] = __fmul_rn(in[i], factor);
    }
    *reply_len = (unsigned int)out_len;
    return GYRE_ERR_NONE;
}

#endif /* GYRE_HANDLER_VEC_SCALE_CUH */
