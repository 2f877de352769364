/*
 * cuda/handlers/echo.h -- built-in kernel "echo" (gyre_core::kernels::echo, id 1), written
 * once over the port macros (gyre/handler.h) for every backend: CUDA, OpenCL and the CPU
 * backend's C11 loop.
 *
 * The reply is the request, byte for byte; HANDLER_REJECTED if it does not fit the reply
 * (never, in a slot: both have the same payload size). One phase: the lanes copy 8-byte
 * words in a stride (payloads are 64-byte aligned), then the bytes after the last whole
 * word.
 */
#ifndef GYRE_HANDLER_ECHO_H
#define GYRE_HANDLER_ECHO_H

#include "gyre/handler.h"

static inline GYRE_DEVICE_FN uint32_t gyre_echo_phase(uint32_t phase, const gyre_hcall *c,
                                                      gyre_hlane *l, GYRE_SHARED gyre_hblock *b) {
    const uint32_t words = c->req_len / 8u;
    const GYRE_GLOBAL uint64_t *src = (const GYRE_GLOBAL uint64_t *)c->req;
    GYRE_GLOBAL uint64_t *dst = (GYRE_GLOBAL uint64_t *)c->reply;
    uint32_t i;
    (void)phase;
    (void)l;
    if (c->req_len > c->reply_cap) {
        if (c->lane == 0u) {
            b->status = GYRE_ERR_HANDLER_REJECTED;
            b->reply_len = 0u;
        }
        return GYRE_PHASE_DONE;
    }
    for (i = c->lane; i < words; i += c->lanes) {
        dst[i] = src[i];
    }
    for (i = words * 8u + c->lane; i < c->req_len; i += c->lanes) {
        c->reply[i] = c->req[i];
    }
    if (c->lane == 0u) {
        b->status = GYRE_ERR_NONE;
        b->reply_len = c->req_len;
    }
    return GYRE_PHASE_DONE;
}

#ifndef GYRE_HANDLER_PHASE
#define GYRE_HANDLER_PHASE gyre_echo_phase
#endif

#endif /* GYRE_HANDLER_ECHO_H */
