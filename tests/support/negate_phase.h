/*
 * tests/support/negate_phase.h -- a user handler written once over the port macros (a
 * phase function, gyre/handler.h): each reply byte is the request byte inverted. The
 * OpenCL tests run it (tests/device_handlers_opencl.rs, KernelSpec::device_handler) and
 * NVRTC compiles it for every architecture (crates/gyre-cuda/tests/nvrtc_compile.rs).
 */
#include "gyre/handler.h"

static inline GYRE_DEVICE_FN uint32_t negate(uint32_t phase, const gyre_hcall *c,
                                             gyre_hlane *l, GYRE_SHARED gyre_hblock *b) {
    (void)phase;
    (void)l;
    for (uint32_t i = c->lane; i < c->req_len; i += c->lanes) {
        c->reply[i] = (unsigned char)~c->req[i];
    }
    if (c->lane == 0u) {
        b->status = GYRE_ERR_NONE;
        b->reply_len = c->req_len;
    }
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE negate
