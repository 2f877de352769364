/*
 * cuda/handlers/vec_scale.h -- built-in kernel "vector scale" (gyre_core::kernels::vec_scale,
 * id 2), written once over the port macros (gyre/handler.h) for every backend.
 *
 *   request  f32 factor, u32 count, f32 values[count]        (little-endian)
 *   reply    u32 count, u32 0, f32 values[i] * factor        (8 + 4 * count bytes)
 *
 * HANDLER_REJECTED when the request is shorter than 8 bytes, when the reply would not fit
 * (8 + 4 * count > reply_cap: a count beyond the payload) or when the request does not
 * hold `count` values, exactly as the reference. Each product is one IEEE f32 multiply,
 * round to nearest, never fused (GYRE_FMUL), as the reference requires. One phase; lanes
 * stride over the values.
 */
#ifndef GYRE_HANDLER_VEC_SCALE_H
#define GYRE_HANDLER_VEC_SCALE_H

#include "gyre/handler.h"

static inline GYRE_DEVICE_FN uint32_t gyre_vec_scale_phase(uint32_t phase, const gyre_hcall *c,
                                                           gyre_hlane *l,
                                                           GYRE_SHARED gyre_hblock *b) {
    const GYRE_GLOBAL uint32_t *hdr = (const GYRE_GLOBAL uint32_t *)c->req;
    const GYRE_GLOBAL uint32_t *in = hdr + 2;
    GYRE_GLOBAL uint32_t *out = (GYRE_GLOBAL uint32_t *)c->reply;
    uint64_t out_len;
    uint32_t count;
    float factor;
    uint32_t i;
    (void)phase;
    (void)l;
    if (c->req_len < 8u) {
        if (c->lane == 0u) {
            b->status = GYRE_ERR_HANDLER_REJECTED;
            b->reply_len = 0u;
        }
        return GYRE_PHASE_DONE;
    }
    factor = GYRE_AS_FLOAT(hdr[0]);
    count = hdr[1];
    out_len = 8u + 4u * (uint64_t)count;
    if (out_len > c->reply_cap || out_len > c->req_len) {
        if (c->lane == 0u) {
            b->status = GYRE_ERR_HANDLER_REJECTED;
            b->reply_len = 0u;
        }
        return GYRE_PHASE_DONE;
    }
    for (i = c->lane; i < count; i += c->lanes) {
        out[2u + i] = GYRE_AS_UINT(GYRE_FMUL(GYRE_AS_FLOAT(in[i]), factor));
    }
    if (c->lane == 0u) {
        out[0] = count;
        out[1] = 0u;
        b->status = GYRE_ERR_NONE;
        b->reply_len = (uint32_t)out_len;
    }
    return GYRE_PHASE_DONE;
}

#ifndef GYRE_HANDLER_PHASE
#define GYRE_HANDLER_PHASE gyre_vec_scale_phase
#endif

#endif /* GYRE_HANDLER_VEC_SCALE_H */
