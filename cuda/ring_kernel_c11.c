/*
 * cuda/ring_kernel_c11.c -- gyre's ring kernel for the CPU backend: the loop of
 * docs/protocol.md (K0..K9) from gyre/ring.h, over the C11 port (gyre/port_c11.h), run by
 * one host thread. Built by crates/gyre-cpu/build.rs with the `cc` crate; called from Rust
 * (crates/gyre-cpu/src/ffi.rs).
 *
 * The same steps, in the same order, as cuda/ring_kernel.cu with one lane: the poller takes
 * a batch (gyre_ring_next), then for each request K4 (check), K5 (the handler), K6 (stamp
 * the reply, sequence last), then K7 and K8 for the batch (gyre_ring_batch_done).
 *
 * The handler is the host's: a function pointer and a context (the Rust trampoline of
 * crates/gyre-cpu/src/ffi.rs, which calls a Rust handler and catches its panics, so nothing
 * unwinds through this file). A handler that panicked reports it through `*panicked`: its
 * request is answered HANDLER_PANIC and the kernel faults (gyre_ring_fault_batch), as the
 * fault table of docs/reliability.md says. A status the handler returns goes through K5's
 * rule (gyre_k5_result).
 */
/* POSIX (clock_gettime, nanosleep, sched_yield) under -std=c11. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "gyre/port_c11.h"
#include "gyre/ring.h"

/** The host's handler: answers request `req` (req_len bytes) of type msg_type into
 *  `reply` (reply_cap bytes), sets *reply_len and returns a status (GYRE_ERR_NONE or an
 *  error status); sets *panicked when the handler panicked instead. */
typedef uint32_t (*gyre_c11_handler_fn)(void *ctx, uint32_t msg_type, const unsigned char *req,
                                        uint32_t req_len, unsigned char *reply,
                                        uint32_t reply_cap, uint32_t *reply_len,
                                        uint32_t *panicked);

/** One kernel: the poller's state and the handler. */
typedef struct gyre_c11_kernel {
    gyre_ring r;
    gyre_c11_handler_fn handler;
    void *ctx;
} gyre_c11_kernel;

/** A kernel, or NULL when out of memory. Free it with gyre_c11_kernel_free. */
gyre_c11_kernel *gyre_c11_kernel_new(void) {
    return (gyre_c11_kernel *)calloc(1u, sizeof(gyre_c11_kernel));
}

void gyre_c11_kernel_free(gyre_c11_kernel *k) {
    free(k);
}

/** K0 over `region`, then the first K8 (state ACTIVE). `telemetry` 0: K8 only on state
 *  changes (counters written as 0). Returns GYRE_ERR_NONE, or the code the kernel faulted
 *  with (error_code and state FAULTED written). The idle strategy applies to the calling
 *  thread; `park` (may be NULL: sleep instead) is the host's doorbell park, called with
 *  `park_ctx` once the back-off reaches its parking phase. */
uint32_t gyre_c11_start(gyre_c11_kernel *k, unsigned char *region, gyre_c11_handler_fn handler,
                        void *ctx, const gyre_c11_idle_cfg *idle, gyre_c11_park_fn park,
                        void *park_ctx, uint32_t telemetry) {
    const uint32_t e = gyre_k0_validate(&k->r, region);
    if (e != GYRE_ERR_NONE) {
        return e;
    }
    k->r.telemetry = telemetry != 0u ? 1u : 0u;
    k->handler = handler;
    k->ctx = ctx;
    gyre_c11_idle_set(idle, park, park_ctx);
    gyre_k8_telemetry(&k->r, GYRE_STATE_ACTIVE);
    return GYRE_ERR_NONE;
}

/** K4..K8 for the batch of `n` requests from k->r.tail (clock reading t0 before it).
 *  Returns 0, or 1 when a handler panicked and the kernel faulted. */
static uint32_t gyre_c11_answer(gyre_c11_kernel *k, uint32_t n, uint32_t bad_seq, uint64_t t0) {
    gyre_ring *r = &k->r;
    const uint64_t first = r->tail;
    uint32_t i;
    for (i = 0u; i < n; i++) {
        const uint64_t idx = first + i;
        gyre_slot_meta m;
        if (gyre_k4_check(r, idx, bad_seq, &m)) {
            const unsigned char *req =
                gyre_slot_at(r->region, GYRE_RINGS_OFFSET, r->mask, r->slot_size, idx) +
                GYRE_SLOT_HEADER_SIZE;
            unsigned char *reply = gyre_slot_at(r->region, r->reply_off, r->mask, r->slot_size, idx) +
                                   GYRE_SLOT_HEADER_SIZE;
            uint32_t reply_len = 0u;
            uint32_t panicked = 0u;
            const uint32_t status = k->handler(k->ctx, m.msg_type, req, m.len, reply, r->payload,
                                               &reply_len, &panicked);
            if (panicked != 0u) {
                m.status = GYRE_ERR_HANDLER_PANIC;
                m.len = 0u;
                gyre_k6_stamp_reply(r, idx, &m);
                gyre_ring_fault_batch(r, i + 1u, GYRE_ERR_HANDLER_PANIC);
                return 1u;
            }
            gyre_k5_result(r, &m, status, reply_len);
        }
        gyre_k6_stamp_reply(r, idx, &m);
    }
    gyre_ring_batch_done(r, n, t0);
    return 0u;
}

/** Runs the loop until the kernel stops (terminated, faulted). */
void gyre_c11_run(gyre_c11_kernel *k) {
    for (;;) {
        uint32_t bad_seq = 0u;
        const uint32_t n = gyre_ring_next(&k->r, &bad_seq);
        if (n == 0u) {
            return;
        }
        if (gyre_c11_answer(k, n, bad_seq, GYRE_NOW_NS()) != 0u) {
            return;
        }
    }
}

/** One iteration, for single-step tests: the slow path (K1, K9, K4's head check) forced,
 *  then at most one batch. Returns the requests answered (0: none, or paused), or -1 once
 *  the kernel has stopped. Never idles. */
int64_t gyre_c11_step(gyre_c11_kernel *k) {
    uint32_t bad_seq = 0u;
    uint32_t n;
    if (GYRE_STATE_IS_FINAL(k->r.state)) {
        return -1;
    }
    k->r.slow_next = 1u;
    n = gyre_ring_poll(&k->r, &bad_seq);
    if (n == GYRE_POLL_STOPPED) {
        return -1;
    }
    if (n == 0u) {
        return 0;
    }
    if (gyre_c11_answer(k, n, bad_seq, GYRE_NOW_NS()) != 0u) {
        return -1;
    }
    return (int64_t)n;
}

/** The state the kernel last wrote (GYRE_STATE_*). */
uint32_t gyre_c11_state(const gyre_c11_kernel *k) {
    return k->r.state;
}
