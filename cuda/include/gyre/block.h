/*
 * gyre/block.h -- the block loop: the poller of gyre/ring.h (K0..K9 on lane 0) and the
 * handler (K5 on every lane) in one block, written once for every backend over the port
 * macros (gyre/handler.h lists the block's). Every backend's kernel is this loop and a
 * thin entry point: cuda/ring_kernel.cu (a CUDA block), cuda/ring_kernel.cl (an OpenCL
 * work-group), cuda/ring_kernel_c11.c (lanes emulated on one host thread).
 *
 * Include it after a port header, gyre/handler.h and the handler, which names its phase
 * function with GYRE_HANDLER_PHASE.
 */
#ifndef GYRE_BLOCK_H
#define GYRE_BLOCK_H

#include "ring.h"
#include "loan.h"

/* Per batch:
 *   lane 0: gyre_ring_next (K1, K9, K2, K3) -> n, first index -> block-shared   barrier
 *   for each request:  lane 0: K4 -> run?, msg_type, len -> block-shared      barrier
 *                      (a loan kernel: lane 0 resolves the request's handle, gyre/loan.h,
 *                      and the handler works on the block in place: req == reply)
 *                      all lanes: K5, the handler's phases, a barrier after each
 *                      lane 0: K5 result, K6 header + system fence + sequence (release)
 *   lane 0: gyre_ring_batch_done (handler time, K7 publish, K8 telemetry)
 * Block-shared values are written by lane 0 only between the last barrier their readers
 * passed and the next one they wait at, so no other synchronisation is needed. The reply
 * payload written by any lane before the handler's last barrier is ordered before lane 0's
 * fence and release (the barrier synchronises the block; release is cumulative). */
#ifndef GYRE_HANDLER_PHASE
#error "no handler: define GYRE_HANDLER_PHASE (a phase function, gyre/handler.h) before gyre/block.h"
#endif

#include "handler.h"

/** What lane 0 broadcasts to the block, and the handler's block-shared memory. */
typedef struct gyre_block_shared {
    uint64_t first;     /* index of the batch's first request */
    uint64_t mask;      /* capacity - 1 (set at K0, read-only after) */
    GYRE_GLOBAL unsigned char *request_ring; /* the request ring's first slot (set at K0) */
    GYRE_GLOBAL unsigned char *reply_ring;   /* the replies' ring (a pipeline: the next's) */
    uint64_t t0;        /* GYRE_BATCH_STAMP() when the batch was found */
    uint64_t reply_idx; /* the request's reply index (gyre_reply_index) */
    uint32_t ok;        /* K0 passed */
    uint32_t slot_size;
    uint32_t n;         /* batch length; 0 = none, GYRE_POLL_STOPPED = stopped */
    uint32_t bad_seq;   /* K4's protocol-error batch of one */
    uint32_t run;       /* K4 passed: run the handler on this request */
    uint32_t msg_type;
    uint32_t len;       /* request length */
    uint32_t stopped;   /* the kernel faulted inside a batch (a CPU handler panicked) */
    uint32_t lanes;     /* the block's lanes (set at K0) */
    uint32_t loan;      /* the request's loan was resolved: loan_off / loan_cap are its */
    uint64_t loan_off;  /* the block's offset in the loan pool */
    uint64_t loan_cap;  /* the block's bytes */
    gyre_hblock h;
} gyre_block_shared;

/** K0 on lane 0 (r: lane 0's poller state, `export_tel` the export line or 0,
 *  `telemetry` 0 for state-change-only K8, `lanes` the block's size, 1..=GYRE_MAX_LANES,
 *  `link` where a pipeline stage's replies go: gyre_k0_link), broadcast to the block.
 *  Returns whether the kernel may run (every lane gets the same answer). A pipeline stage
 *  that fails here still tells the next stage to terminate. */
static inline GYRE_DEVICE_FN uint32_t gyre_block_start(GYRE_GLOBAL unsigned char *region,
                                                      GYRE_GLOBAL gyre_telemetry_buffer *export_tel,
                                                      uint32_t telemetry, uint32_t lanes,
                                                      const gyre_link *link,
                                                      GYRE_SHARED gyre_block_shared *sh,
                                                      gyre_ring *r) {
    GYRE_LANE0_BEGIN
    sh->ok = gyre_k0_validate(r, region) == GYRE_ERR_NONE &&
             gyre_k0_link(r, link) == GYRE_ERR_NONE;
    if (!sh->ok && link->next != 0) {
        gyre_link_tell(link->next, link->flags);
        GYRE_NOTIFY_NEXT(r);
    }
    sh->stopped = 0u;
    sh->lanes = lanes;
    if (sh->ok) {
        r->export_tel = export_tel;
        r->telemetry = telemetry != 0u ? 1u : 0u;
        sh->mask = r->mask;
        sh->request_ring = r->request_ring;
        sh->reply_ring = r->reply_ring;
        sh->slot_size = r->slot_size;
        gyre_k8_telemetry(r, GYRE_STATE_ACTIVE);
    }
    GYRE_LANE0_END
    GYRE_BARRIER();
    return sh->ok;
}

/** A loan kernel's K4 on lane 0, after gyre_k4_check passed: resolves the handle in the
 *  payload of request `idx` (gyre/loan.h) into sh->loan_off / loan_cap and m->len (the loan's
 *  length), or answers BAD_LOAN (m->status, no handler run). Returns whether to run. */
static inline GYRE_DEVICE_FN uint32_t gyre_block_loan_in(const gyre_loan_pool *pool,
                                                        const GYRE_GLOBAL unsigned char *req,
                                                        GYRE_SHARED gyre_block_shared *sh,
                                                        gyre_slot_meta *m,
                                                        gyre_loan_handle *lh, uint64_t idx) {
    uint64_t cap = 0u;
    if (!gyre_loan_read(req, m->len, lh) ||
        gyre_loan_resolve(pool, lh, idx, &cap) != GYRE_ERR_NONE) {
        m->status = GYRE_ERR_BAD_LOAN;
        m->len = 0u;
        return 0u;
    }
    sh->loan = 1u;
    sh->loan_off = lh->offset;
    sh->loan_cap = cap;
    m->len = lh->len;
    return 1u;
}

/** A loan kernel's K5 on lane 0: the handler's answer over the block (status, reply length
 *  up to the block's bytes, else BAD_LENGTH) becomes a reply carrying the handle of the
 *  same block with the reply's length. The host takes the block back once K6 has published
 *  the reply. */
static inline GYRE_DEVICE_FN void gyre_block_loan_out(const gyre_ring *r,
                                                     GYRE_GLOBAL unsigned char *reply,
                                                     GYRE_SHARED gyre_block_shared *sh,
                                                     gyre_slot_meta *m,
                                                     gyre_loan_handle *lh) {
    /* BAD_LOAN is the resolver's answer alone: it tells the host the request held no
     * block, so the host frees none. A handler that held the block and says BAD_LOAN is
     * HANDLER_REJECTED, or its block would never return. */
    const uint32_t status =
        sh->h.status == GYRE_ERR_BAD_LOAN ? GYRE_ERR_HANDLER_REJECTED : sh->h.status;
    if (status == GYRE_ERR_NONE && (uint64_t)sh->h.reply_len > sh->loan_cap) {
        m->status = GYRE_ERR_BAD_LENGTH;
        m->len = 0u;
    } else {
        gyre_k5_result(r, m, status, status == GYRE_ERR_NONE ? GYRE_LOAN_HANDLE_SIZE : 0u);
        if (m->status == GYRE_ERR_NONE) {
            lh->len = sh->h.reply_len;
            gyre_loan_write(reply, lh);
        }
    }
}

/** K4..K8 for the batch of sh->n requests from sh->first, on every lane. `pool` is the
 *  kernel's loan pool (bytes 0: not a loan kernel). Returns 0, or 1 when the kernel
 *  faulted in it (a CPU backend's host handler panicked: its request is answered
 *  HANDLER_PANIC, the ones before it published, the rest left to the host). */
static inline GYRE_DEVICE_FN uint32_t gyre_block_answer(GYRE_SHARED gyre_block_shared *sh,
                                                       gyre_ring *r,
                                                       const gyre_loan_pool *pool) {
    const uint32_t n = sh->n;
    const uint64_t first = sh->first;
    const uint64_t mask = sh->mask;
    const uint32_t slot_size = sh->slot_size;
    const uint32_t payload = slot_size - GYRE_SLOT_HEADER_SIZE;
    const uint32_t lanes = sh->lanes;
    gyre_slot_meta m;    /* lane 0's */
    gyre_loan_handle lh; /* lane 0's: the request's loan */
    uint32_t k;
    GYRE_LANE_STATE_DECL;
    lh.offset = 0u; /* only a resolved loan's is used; set so no compiler sees it unset */
    lh.len = 0u;
    lh.generation = 0u;
    for (k = 0u; k < n; ++k) {
        const uint64_t idx = first + k;
        /* K4: check the slot (lane 0). */
        GYRE_LANE0_BEGIN
        sh->run = gyre_k4_check(r, idx, sh->bad_seq, &m); /* bad_seq: n == 1 */
        sh->loan = 0u;
        if (sh->run && pool->bytes != 0u) {
            sh->run = gyre_block_loan_in(
                pool,
                gyre_slot_at(sh->request_ring, mask, slot_size, idx) +
                    GYRE_SLOT_HEADER_SIZE,
                sh, &m, &lh, idx);
        }
        sh->msg_type = m.msg_type;
        sh->len = m.len;
        sh->reply_idx = gyre_reply_index(r, idx, &m);
        sh->h.status = GYRE_ERR_NONE;
        sh->h.reply_len = 0u;
        sh->h.panicked = 0u;
        GYRE_LANE0_END
        GYRE_BARRIER(); /* K4's verdict */
        if (sh->run) {
            /* K5: every lane runs the handler's phases, a barrier after each. */
            uint32_t phase = 0u;
            while (phase != GYRE_PHASE_DONE) {
                uint32_t next = GYRE_PHASE_DONE;
                GYRE_EACH_LANE_BEGIN(lane, lanes)
                gyre_hcall c;
                c.req = gyre_slot_at(sh->request_ring, mask, slot_size, idx) +
                        GYRE_SLOT_HEADER_SIZE;
                c.reply = gyre_slot_at(sh->reply_ring, mask, slot_size, sh->reply_idx) +
                          GYRE_SLOT_HEADER_SIZE;
                c.msg_type = sh->msg_type;
                c.req_len = sh->len;
                c.reply_cap = payload;
                if (sh->loan) {
                    c.req = pool->base + sh->loan_off;
                    c.reply = pool->base + sh->loan_off;
                    c.reply_cap = (uint32_t)sh->loan_cap;
                }
                c.lane = lane;
                c.lanes = lanes;
                c.seq = (uint32_t)idx;
                next = GYRE_HANDLER_PHASE(phase, &c, GYRE_LANE_STATE(lane), &sh->h);
                GYRE_EACH_LANE_END
                GYRE_BARRIER(); /* the phase's writes, to every lane */
                phase = next;
            }
        }
        GYRE_LANE0_BEGIN
        if (sh->run && sh->h.panicked != 0u) {
            m.status = GYRE_ERR_HANDLER_PANIC;
            m.len = 0u;
            gyre_k6_stamp_reply(r, idx, &m);
            gyre_ring_fault_batch(r, k + 1u, GYRE_ERR_HANDLER_PANIC);
            sh->stopped = 1u;
        } else {
            if (sh->run && sh->loan) {
                gyre_block_loan_out(r,
                                    gyre_slot_at(sh->reply_ring, mask, slot_size, sh->reply_idx) +
                                        GYRE_SLOT_HEADER_SIZE,
                                    sh, &m, &lh);
            } else if (sh->run) {
                gyre_k5_result(r, &m, sh->h.status, sh->h.reply_len);
            }
            /* K6: header, system fence, sequence last (release). */
            gyre_k6_stamp_reply(r, idx, &m);
        }
        GYRE_LANE0_END
        GYRE_BARRIER(); /* sh->stopped, and the next request's K4 after this K6 */
        if (sh->stopped) {
            return 1u;
        }
    }
    /* Handler time, K7 publish (h2k_tail, k2h_head, processed), K8 telemetry. */
    GYRE_LANE0_BEGIN
    gyre_ring_batch_done(r, n, sh->t0);
    GYRE_LANE0_END
    return 0u;
}

/** Lane 0 polls once (gyre_ring_poll) and broadcasts: returns the batch length (0: none,
 *  GYRE_POLL_STOPPED: the kernel stopped), the same on every lane. */
static inline GYRE_DEVICE_FN uint32_t gyre_block_poll(GYRE_SHARED gyre_block_shared *sh,
                                                     gyre_ring *r, uint32_t wait) {
    GYRE_LANE0_BEGIN
    uint32_t bad = 0u;
    sh->n = wait ? gyre_ring_next(r, &bad) : gyre_ring_poll(r, &bad);
    if (wait && sh->n == 0u) {
        sh->n = GYRE_POLL_STOPPED;
    }
    sh->bad_seq = bad;
    sh->first = r->tail;
    sh->t0 = GYRE_BATCH_STAMP();
    GYRE_LANE0_END
    GYRE_BARRIER(); /* the batch */
    return sh->n;
}

/** The kernel: K0, then batches until it stops (terminated, faulted). Every lane runs it;
 *  `pool` is the loan pool (every lane's copy; bytes 0: not a loan kernel), `link` where a
 *  pipeline stage's replies go (next 0: not chained). */
static inline GYRE_DEVICE_FN void gyre_block_run(GYRE_GLOBAL unsigned char *region,
                                                GYRE_GLOBAL gyre_telemetry_buffer *export_tel,
                                                uint32_t telemetry, uint32_t lanes,
                                                GYRE_SHARED gyre_block_shared *sh, gyre_ring *r,
                                                const gyre_loan_pool *pool,
                                                const gyre_link *link) {
    if (!gyre_block_start(region, export_tel, telemetry, lanes, link, sh, r)) {
        return; /* FAULTED at K0 (error_code written), no trap */
    }
    for (;;) {
        const uint32_t n = gyre_block_poll(sh, r, 1u);
        if (n == GYRE_POLL_STOPPED) {
            return; /* TERMINATED: state and telemetry written by lane 0 */
        }
        if (gyre_block_answer(sh, r, pool) != 0u) {
            return; /* FAULTED by a handler panic */
        }
    }
}

#endif /* GYRE_BLOCK_H */
