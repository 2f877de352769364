/*
 * cuda/handlers/reduce_sum.h -- built-in kernel "reduce-sum" (gyre_core::kernels::reduce_sum,
 * id 3), written once over the port macros (gyre/handler.h) for every backend.
 *
 *   request  u32 count, u32 0, f32 values[count]             (little-endian)
 *   reply    f32 sum, u32 count                              (8 bytes)
 *
 * HANDLER_REJECTED when the request is shorter than 4 bytes, when it does not hold
 * `count` values (8 + 4 * count > req_len: a count beyond the payload) or when the reply
 * has fewer than 8 bytes, exactly as the reference.
 *
 * Phases, a barrier after each: (0) each lane sums a strided subset in f32 (from -0.0,
 * the identity of IEEE addition, as Rust's `sum`) and leaves its partial sum in the
 * block's words; (k >= 1) a tree: with w = P >> k (P the lane count rounded up to a power
 * of two), lane i < w adds word i + w (when it exists) into word i; the phase with w == 1
 * leaves the total in word 0 and lane 0 writes the reply. log2(P) + 1 phases: 8 for CUDA's
 * 128 lanes, 1 for one lane (which sums in index order, bit for bit the reference). The
 * order differs from the reference's index order when lanes > 1; the reference accepts
 * any order within its bound (gyre_core::kernels::reference::reduce_sum_ok).
 */
#ifndef GYRE_HANDLER_REDUCE_SUM_H
#define GYRE_HANDLER_REDUCE_SUM_H

#include "gyre/handler.h"

/** The smallest power of two >= n (n >= 1). */
static inline GYRE_DEVICE_FN uint32_t gyre_reduce_sum_pow2(uint32_t n) {
    uint32_t p = 1u;
    while (p < n) {
        p <<= 1u;
    }
    return p;
}

/** Lane 0: the reply (sum, count) and the status. */
static inline GYRE_DEVICE_FN void gyre_reduce_sum_answer(const gyre_hcall *c, float sum,
                                                         GYRE_SHARED gyre_hblock *b) {
    GYRE_GLOBAL uint32_t *out = (GYRE_GLOBAL uint32_t *)c->reply;
    out[0] = GYRE_AS_UINT(sum);
    out[1] = ((const GYRE_GLOBAL uint32_t *)c->req)[0];
    b->status = GYRE_ERR_NONE;
    b->reply_len = 8u;
}

static inline GYRE_DEVICE_FN uint32_t gyre_reduce_sum_phase(uint32_t phase, const gyre_hcall *c,
                                                            gyre_hlane *l,
                                                            GYRE_SHARED gyre_hblock *b) {
    const GYRE_GLOBAL uint32_t *hdr = (const GYRE_GLOBAL uint32_t *)c->req;
    uint32_t w;
    (void)l;
    if (phase == 0u) {
        uint32_t count;
        uint32_t i;
        float acc = -0.0f;
        if (c->req_len < 4u) {
            if (c->lane == 0u) {
                b->status = GYRE_ERR_HANDLER_REJECTED;
                b->reply_len = 0u;
            }
            return GYRE_PHASE_DONE;
        }
        count = hdr[0];
        if (8u + 4u * (uint64_t)count > c->req_len || c->reply_cap < 8u) {
            if (c->lane == 0u) {
                b->status = GYRE_ERR_HANDLER_REJECTED;
                b->reply_len = 0u;
            }
            return GYRE_PHASE_DONE;
        }
        for (i = c->lane; i < count; i += c->lanes) {
            acc += GYRE_AS_FLOAT(hdr[2u + i]);
        }
        if (c->lanes == 1u) {
            gyre_reduce_sum_answer(c, acc, b);
            return GYRE_PHASE_DONE;
        }
        b->words[c->lane] = GYRE_AS_UINT(acc);
        return 1u;
    }
    /* phase k >= 1: every word written in phase k - 1 is visible (the barrier). */
    w = gyre_reduce_sum_pow2(c->lanes) >> phase;
    if (c->lane < w && c->lane + w < c->lanes) {
        b->words[c->lane] = GYRE_AS_UINT(GYRE_AS_FLOAT(b->words[c->lane]) +
                                         GYRE_AS_FLOAT(b->words[c->lane + w]));
    }
    if (w > 1u) {
        return phase + 1u;
    }
    if (c->lane == 0u) {
        gyre_reduce_sum_answer(c, GYRE_AS_FLOAT(b->words[0]), b);
    }
    return GYRE_PHASE_DONE;
}

#ifndef GYRE_HANDLER_PHASE
#define GYRE_HANDLER_PHASE gyre_reduce_sum_phase
#endif

#endif /* GYRE_HANDLER_REDUCE_SUM_H */
