/*
 * gyre/ring.h -- the device-side ring logic of gyre, written once for every backend and
 * device language: CUDA C++ under NVRTC / nvcc (cuda/ring_kernel.cu), OpenCL C 3.0
 * (cuda/ring_kernel.cl), and C11 for the CPU backend, whose host thread runs this very
 * code (cuda/ring_kernel_c11.c over gyre/port_c11.h).
 *
 * The protocol is docs/protocol.md; every function below names the step (K0..K9) it
 * implements. This is its only implementation. The byte layout is gyre/abi.h (mirror of
 * crates/gyre-abi/src/lib.rs); the region layout is crates/gyre-core/src/region.rs:
 *
 *   offset 0     gyre_control_block   (128 B)
 *   offset 128   gyre_telemetry_buffer (64 B)
 *   offset 192   gyre_placement (64 B): where the request ring lives, if not at 256
 *   offset 256   request ring: capacity x slot_size
 *   256 + capacity * slot_size   reply ring: capacity x slot_size
 *
 * The slot of free-running index i is  ring + (i & (capacity - 1)) * slot_size. A
 * request ring only kernels touch (a pipeline's inner ring) may live apart from its
 * region: gyre_request_ring reads where, once, at K0 (and a writer at its K0).
 *
 * Everything here runs on ONE device thread (the "poller", lane 0 of the block).
 * Block-level work (broadcasting a batch, running the handler on every lane, barriers)
 * is gyre/block.h, written once too; each backend's kernel file (cuda/ring_kernel.cu,
 * cuda/ring_kernel.cl, cuda/ring_kernel_c11.c) is a thin entry point that calls it.
 *
 * Language-neutral C: no C++ (templates, references, classes), no C-only syntax the CUDA
 * C++ front end rejects (designated initializers, compound literals). Everything that
 * differs per language comes from the port header, which must be included first:
 *
 *   GYRE_DEVICE_FN                    qualifier of every function (CUDA: __device__)
 *   GYRE_GLOBAL                       address space of shared-region pointers
 *                                     (CUDA: empty, OpenCL: __global)
 *   GYRE_LOAD_ACQUIRE_U32/U64(p)      load with acquire, system scope
 *   GYRE_LOAD_RELAXED_U32/U64(p)      relaxed atomic load
 *   GYRE_STORE_RELEASE_U32/U64(p, v)  store with release, system scope
 *   GYRE_STORE_RELAXED_U32/U64(p, v)  relaxed atomic store
 *   GYRE_FENCE_SYSTEM()               sequentially consistent fence, system scope
 *   GYRE_CAS_U64(p, e, d)             compare-and-swap (acq_rel), 1 if done: pipeline
 *                                     links written by id (gyre/link.h)
 *   GYRE_PAUSE()                      a short sleep / pause of the polling thread
 *   GYRE_NOW_NS()                     a monotonic device clock in nanoseconds (uint64_t)
 *
 * and the ABI types (uint32_t, uint64_t, gyre_control_block, ...), by including abi.h or
 * an equivalent.
 *
 * Ordering (docs/protocol.md §3 and §7): the kernel reads a request slot's sequence with acquire before
 * anything else in the slot; it writes a reply slot's header with plain stores, then a
 * system fence, then the sequence last with release; it publishes h2k_tail, then k2h_head,
 * with release, after the batch's replies. Control-block line 1 and the telemetry line are
 * written only here; line 0 only read.
 */
#ifndef GYRE_RING_H
#define GYRE_RING_H

/* The poller's state and K0 (gyre/poller.h), pipeline links (gyre/link.h), the slow
 * path (gyre/tick.h); then K2..K7 and the loop, below. */
#include "tick.h"

/* ---- K2 poll / K3 take batch ------------------------------------------------------ */

/** K2 + K3: the contiguous run of published requests from r->tail (each slot's sequence
 *  == index + 1, acquire), at most `batch`; a pipeline stage's also bounded by the reply
 *  slots released (k2h_tail, re-read only when the ring looks full), a plain kernel's
 *  free by the host's claim rule (below). Returns its length.
 *
 *  When it is empty and `check_head` (the slow path): K4's protocol-error check. A head
 *  published beyond r->tail over a slot whose sequence is wrong (re-read after the head,
 *  since the first read may predate the publication) is a batch of one with *bad_seq = 1.
 */
static inline GYRE_DEVICE_FN uint32_t gyre_k2_k3_take(gyre_ring *r, uint32_t check_head,
                                                     uint32_t *bad_seq) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    const uint64_t cap = r->mask + 1u;
    /* Reply space (K3): a direct reply needs its reply slot released. A kernel that is
     * not a pipeline stage has it by the host's claim rule (P1): a producer claims index
     * i only while i - k2h_tail < capacity, and that release of reply i - capacity
     * happens before the stamp of request i this poll acquires, so reply slot i is free
     * without a read of k2h_tail here (a line the host writes at every release: reading
     * it cost the CPU backend's batch throughput 6-12%, docs/benchmarks.md). A stage's
     * reply ring is the next stage's request ring, freed by that stage's consumption:
     * checked per request below. A reply written by id has its slot free by the host's
     * claim rule (gyre/link.h); a fan-out needs room in every branch. */
    const uint32_t direct = r->out == GYRE_OUT_DIRECT;
    const uint32_t check_room = direct && r->link_next != 0;
    const uint32_t limit = r->out == GYRE_OUT_FAN_OUT ? gyre_route_room(r) : r->batch;
    uint32_t n = 0u;
    *bad_seq = 0u;
    if (r->head != ~(uint64_t)0) {
        /* Doorbell mode: a copy engine fills the ring, so only slots below the published
         * head are complete (a DMA copy may land a sequence before its payload). One
         * acquire of the head per poll; payloads are read after it. */
        r->head = GYRE_LOAD_ACQUIRE_U64(&cb->h2k_head);
    }
    while (n < limit) {
        const uint64_t idx = r->tail + n;
        if (GYRE_LOAD_ACQUIRE_U64(&gyre_request_slot(r, idx)->sequence) != idx + 1u) {
            break;
        }
        if (idx >= r->head) {
            break; /* doorbell mode: not yet covered by the published head */
        }
        if (check_room && idx - r->k2h_tail >= cap) {
            r->k2h_tail = GYRE_LOAD_ACQUIRE_U64(r->reply_release);
            if (idx - r->k2h_tail >= cap) {
                break;
            }
        }
        n++;
    }
    /* A stage in a fan-out's branch (GYRE_LINK_BRANCH) skips the check: its indices are
     * not the host's, so an error reply could not name its request (the correlation id
     * it would need is in the corrupt header); it waits instead. */
    if (n == 0u && check_head && limit > 0u && (r->link_flags & GYRE_LINK_BRANCH) == 0u) {
        /* K4 (slow path): a wrong sequence under the published head. */
        const uint64_t head = GYRE_LOAD_ACQUIRE_U64(&cb->h2k_head);
        if (head <= r->tail) {
            return 0u;
        }
        /* The error reply needs a free reply slot, checked here on every ring: the head
         * that names this slot may be corrupt, so no claim is proven (re-read k2h_tail
         * when the ring looks full; without the re-read a stale copy could hide the
         * error forever). */
        if (direct && r->tail - r->k2h_tail >= cap) {
            r->k2h_tail = GYRE_LOAD_ACQUIRE_U64(r->reply_release);
            if (r->tail - r->k2h_tail >= cap) {
                return 0u;
            }
        }
        if (GYRE_LOAD_ACQUIRE_U64(&gyre_request_slot(r, r->tail)->sequence) == r->tail + 1u) {
            return 0u; /* published meanwhile: taken next iteration */
        }
        *bad_seq = 1u;
        return 1u;
    }
    return n;
}

/* ---- K4 check slot ---------------------------------------------------------------- */

/** K4 over the request header at `h` (owned: published and not yet answered; the ring
 *  slot, or a staged copy of it on a checked ring): read its fields into `m` and validate
 *  them. A wrong sequence (`bad_seq`) is answered BAD_SEQUENCE with correlation `idx`; len
 *  > `payload` is answered BAD_LENGTH; with `pass_status` (a stage fed by a stage) a
 *  non-zero status is passed on as it is. Returns 1 when the handler should run
 *  (m->status == NONE, m->len = request length), else 0 (m->len = 0). */
static inline GYRE_DEVICE_FN uint32_t gyre_k4_check_at(const GYRE_GLOBAL gyre_slot_header *h,
                                                      uint64_t idx, uint32_t bad_seq,
                                                      uint32_t payload, uint32_t link_flags,
                                                      uint32_t pass_status,
                                                      gyre_slot_meta *m) {
    m->correlation_id = h->correlation_id;
    m->enqueue_ns = h->enqueue_ns;
    m->msg_type = h->msg_type;
    m->len = h->len;
    m->flags = h->flags;
    m->status = GYRE_ERR_NONE;
    m->passed = 0u;
    m->pad = 0u;
    if ((link_flags & GYRE_LINK_OWN_ID) != 0u) {
        m->correlation_id = idx; /* later stages write by id: the host's index */
    }
    if (bad_seq) {
        m->correlation_id = idx;
        m->status = GYRE_ERR_BAD_SEQUENCE;
    } else if (pass_status && h->status != GYRE_ERR_NONE) {
        /* A pipeline's earlier stage answered it with an error: passed on as it is. */
        m->status = h->status;
        m->passed = 1u;
    } else if (m->len > payload) {
        m->status = GYRE_ERR_BAD_LENGTH;
    }
    if (m->status != GYRE_ERR_NONE) {
        m->len = 0u;
        return 0u;
    }
    return 1u;
}

/** K4 of request `idx` in the ring (gyre_k4_check_at with the poller's settings). */
static inline GYRE_DEVICE_FN uint32_t gyre_k4_check(const gyre_ring *r, uint64_t idx,
                                                   uint32_t bad_seq, gyre_slot_meta *m) {
    return gyre_k4_check_at(gyre_request_slot(r, idx), idx, bad_seq, r->payload, r->link_flags,
                            r->pass_status, m);
}

/* ---- K5 handle (result) ----------------------------------------------------------- */

/** K5 (after the handler ran): a handler error status is sent back as is when it is
 *  HANDLER_REJECTED, UNKNOWN_TYPE, BAD_LOAN or at least USER_BASE, and as HANDLER_REJECTED
 *  when it is
 *  any other code below USER_BASE (a protocol code: the host must never mistake a
 *  handler's status for one; gyre_core::handler::reply_status is the same rule); a reply
 *  longer than the payload is BAD_LENGTH; otherwise m->len = reply_len. */
static inline GYRE_DEVICE_FN void gyre_k5_result_at(uint32_t payload, gyre_slot_meta *m,
                                                   uint32_t status, uint32_t reply_len) {
    m->len = 0u;
    if (status != GYRE_ERR_NONE) {
        m->status = (status >= GYRE_ERR_USER_BASE || status == GYRE_ERR_HANDLER_REJECTED ||
                     status == GYRE_ERR_UNKNOWN_TYPE || status == GYRE_ERR_BAD_LOAN)
                        ? status
                        : GYRE_ERR_HANDLER_REJECTED;
    } else if (reply_len > payload) {
        m->status = GYRE_ERR_BAD_LENGTH;
    } else {
        m->len = reply_len;
    }
}

/** K5's result with the poller's payload size. */
static inline GYRE_DEVICE_FN void gyre_k5_result(const gyre_ring *r, gyre_slot_meta *m,
                                                uint32_t status, uint32_t reply_len) {
    gyre_k5_result_at(r->payload, m, status, reply_len);
}

/* ---- K6 stamp reply --------------------------------------------------------------- */

/** K6: write reply `idx`'s header (plain stores: the slot is ours, idx - k2h_tail <
 *  capacity by P1, checked by K3 on a stage's ring), a system fence (the reply payload,
 *  written by any thread of the block before the barrier that precedes this call, and
 *  the header), then sequence = idx + 1 last, with release. */
/** K6's header of a reply (every field but the sequence, plain stores: the slot is the
 *  writer's), with message type `msg_type`. */
static inline GYRE_DEVICE_FN void gyre_k6_header(GYRE_GLOBAL gyre_slot_header *h,
                                                const gyre_slot_meta *m, uint32_t msg_type) {
    h->correlation_id = m->correlation_id;
    h->enqueue_ns = m->enqueue_ns;
    h->msg_type = msg_type;
    h->len = m->len;
    h->flags = m->flags;
    h->status = m->status;
}

static inline GYRE_DEVICE_FN void gyre_k6_stamp_reply(gyre_ring *r, uint64_t idx,
                                                     const gyre_slot_meta *m) {
    const uint64_t at = gyre_reply_index(r, idx, m);
    GYRE_GLOBAL gyre_slot_header *h = gyre_reply_slot(r, at);
    if (m->status != GYRE_ERR_NONE && !m->passed) {
        r->errors++;
    }
    if (r->out == GYRE_OUT_FAN_OUT) {
        gyre_route_pass(r, h, m); /* the reply, written here, goes on to its branch */
        return;
    }
    gyre_k6_header(h, m, r->next_cb != 0 ? r->next_type : m->msg_type);
    GYRE_FENCE_SYSTEM();
    GYRE_STORE_RELEASE_U64(&h->sequence, at + 1u);
}

/* ---- K7 publish ------------------------------------------------------------------- */

/** K7: after the batch, release `n` requests and publish `n` replies: h2k_tail, then
 *  k2h_head (a pipeline stage: the next stage's h2k_head, or the head's k2h_head; written
 *  by id or fanned out: gyre_link_publish), then processed (release; one store of each
 *  per batch). */
static inline GYRE_DEVICE_FN void gyre_k7_publish(gyre_ring *r, uint32_t n) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    r->tail += n;
    r->processed += n;
    r->messages += n;
    if (r->checked) {
        return; /* line 1 on the slow tick: gyre_k7_flush */
    }
    GYRE_STORE_RELEASE_U64(&cb->h2k_tail, r->tail);
    if (r->out == GYRE_OUT_DIRECT) {
        GYRE_STORE_RELEASE_U64(r->reply_publish, r->tail);
    } else {
        gyre_link_publish(r);
    }
    GYRE_STORE_RELEASE_U64(&cb->processed, r->processed);
    if (r->next_cb != 0 || r->out == GYRE_OUT_FAN_OUT) {
        GYRE_NOTIFY_NEXT(r);
    }
}

/* ---- the poller's loop ------------------------------------------------------------ */

/** What a port may add to the idle step (defaults: nothing). GYRE_IDLE_PAUSE(r) is the
 *  pause itself, given the poller's state (the C11 port parks on a doorbell that needs the
 *  ring's tail and last command to re-check for work; default GYRE_PAUSE()).
 *  GYRE_PAUSE_PARKED() says whether the last pause was long (a park or a sleep): the next
 *  poll then runs the slow path, so the kernel heartbeat and commands are not left waiting
 *  128 long pauses. GYRE_IDLE_RESET() is called when a batch was found (a backing-off
 *  pause starts over). */
#ifndef GYRE_IDLE_PAUSE
#define GYRE_IDLE_PAUSE(r) GYRE_PAUSE()
#endif
#ifndef GYRE_PAUSE_PARKED
#define GYRE_PAUSE_PARKED() 0u
#endif
#ifndef GYRE_IDLE_RESET
#define GYRE_IDLE_RESET()
#endif
/** GYRE_REPLIES_PUBLISHED(r): after K7 of a batch (its replies published; on a checked
 *  ring k2h_head follows on the slow tick, and the host then looks at every outstanding
 *  slot; a batch that faults the kernel calls nothing, the host looks when the loop
 *  ends). The C11 port tells the host, which then serves the waiters of those replies on
 *  the kernel's thread (gyre_core::channel::bell); elsewhere nothing. */
#ifndef GYRE_REPLIES_PUBLISHED
#define GYRE_REPLIES_PUBLISHED(r)
#endif

/** The handler time of K8: GYRE_BATCH_STAMP() is taken when a batch is found (on the
 *  request's critical path), GYRE_BATCH_ELAPSED_NS(stamp, now) gives the nanoseconds from
 *  it to `now` (a GYRE_NOW_NS reading at the batch's end). Default: the clock itself. A
 *  port whose clock is costly there uses a cheaper counter (the C11 port: the vDSO's
 *  clock_gettime orders itself after earlier loads, so the payload load waited for it). */
#ifndef GYRE_BATCH_STAMP
#define GYRE_BATCH_STAMP() GYRE_NOW_NS()
#define GYRE_BATCH_ELAPSED_NS(stamp, now) ((now) - (stamp))
#endif

/** The idle step after an empty poll: spin GYRE_IDLE_SPINS polls, then pause on each. */
static inline GYRE_DEVICE_FN void gyre_idle(gyre_ring *r) {
#if GYRE_IDLE_SPINS > 0
    if (r->idle_spins < GYRE_IDLE_SPINS) {
        r->idle_spins++;
        return;
    }
#endif
    GYRE_IDLE_PAUSE(r);
    if (GYRE_PAUSE_PARKED()) {
        r->slow_next = 1u;
    }
}

/** gyre_ring_poll's answer once the kernel has stopped. */
#define GYRE_POLL_STOPPED 0xffffffffu

/** One iteration of the poller: K1 + K9 on the slow path (every GYRE_SLOW_EVERY
 *  iterations, after a long pause, and on every iteration while not Active), then K2 + K3
 *  (+ K4's slow-path check). Returns the length n >= 1 of a batch to answer (requests
 *  r->tail .. r->tail + n - 1, *bad_seq set for K4's one-request protocol-error batch), 0
 *  when there is nothing to do (the caller idles), or GYRE_POLL_STOPPED once the kernel
 *  has stopped: drained after Terminate, or host heartbeat stale, or a corrupt control
 *  block (final state and telemetry written). */
static inline GYRE_DEVICE_FN uint32_t gyre_ring_poll(gyre_ring *r, uint32_t *bad_seq) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    uint32_t slow;
    uint32_t n;
    if (GYRE_STATE_IS_STOPPED(r->state)) {
        return GYRE_POLL_STOPPED;
    }
    r->iter++;
    slow = (r->iter % GYRE_SLOW_EVERY) == 0u || r->slow_next != 0u;
    r->slow_next = 0u;
    *bad_seq = 0u;
    /* K1 + K9: commands and heartbeats, on the slow path. */
    if (slow || r->state != GYRE_STATE_ACTIVE) {
        if (!gyre_k1_k9_slow_tick(r)) {
            return GYRE_POLL_STOPPED;
        }
        if (r->state == GYRE_STATE_PAUSED) {
            /* L4 holds while paused too: a chain whose later stage stopped must end
             * even with its intake paused. */
            return gyre_link_check(r) ? GYRE_POLL_STOPPED : 0u;
        }
    }
    /* K2 + K3 (+ K4's slow-path check). */
    n = gyre_k2_k3_take(r, slow, bad_seq);
    if (n > 0u) {
        return n;
    }
    r->idle_polls++;
    if (r->state == GYRE_STATE_DRAINING && GYRE_LOAD_ACQUIRE_U64(&cb->h2k_head) <= r->tail) {
        /* Everything published before Terminate is answered. */
        gyre_ring_stop(r, GYRE_STATE_TERMINATED, GYRE_ERR_NONE);
        return GYRE_POLL_STOPPED;
    }
    if (slow && gyre_link_check(r)) {
        return GYRE_POLL_STOPPED;
    }
    return 0u;
}

/** Runs the poller until there is a batch to answer (gyre_ring_poll, idling between empty
 *  polls). Returns its length n >= 1, or 0 once the kernel has stopped (state and
 *  telemetry written). */
static inline GYRE_DEVICE_FN uint32_t gyre_ring_next(gyre_ring *r, uint32_t *bad_seq) {
    for (;;) {
        const uint32_t n = gyre_ring_poll(r, bad_seq);
        if (n == GYRE_POLL_STOPPED) {
            return 0u;
        }
        if (n > 0u) {
            return n;
        }
        gyre_idle(r);
    }
}

/** After request `answered - 1` of a batch made the kernel fault (a handler panicked; its
 *  error reply is already stamped): K7 for the `answered` requests, then error_code,
 *  final telemetry and state FAULTED. Requests after it stay unanswered; the host fails
 *  them with the code, or relaunches the kernel, which answers them (R2..R6).
 *  A pipeline stage the host relaunches (GYRE_LINK_RESTARTS) hands over instead: state
 *  HANDED_OVER with the code, which no stage reads as final, so the stages around it
 *  wait for its successor and it tells none to terminate (docs/pipelines.md). */
static inline GYRE_DEVICE_FN void gyre_ring_fault_batch(gyre_ring *r, uint32_t answered,
                                                       uint32_t code) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    const uint32_t restarts = (r->link_flags & GYRE_LINK_RESTARTS) != 0u;
    const uint32_t stop_state = restarts ? GYRE_STATE_HANDED_OVER : GYRE_STATE_FAULTED;
    gyre_k7_publish(r, answered);
    if (r->checked) {
        gyre_k7_flush(r);
    }
    GYRE_STORE_RELEASE_U32(&cb->error_code, code);
    gyre_k8_telemetry(r, stop_state);
    GYRE_STORE_RELEASE_U32(&cb->state, stop_state);
    r->state = stop_state;
    if (!restarts) {
        gyre_link_stop(r);
    }
}

/** After K4..K6 of a batch of `n` found at GYRE_BATCH_STAMP() `t0`: handler time, K7
 *  publish, K8 telemetry. */
static inline GYRE_DEVICE_FN void gyre_ring_batch_done(gyre_ring *r, uint32_t n, uint64_t t0) {
    const uint64_t now = GYRE_NOW_NS();
    const uint64_t dt = GYRE_BATCH_ELAPSED_NS(t0, now);
    const uint32_t dt32 = dt > 0xffffffffu ? 0xffffffffu : (uint32_t)dt;
    r->last_now = now;
    r->handler_ns_total += dt;
    if (dt32 > r->handler_ns_max) {
        r->handler_ns_max = dt32;
    }
    gyre_k7_publish(r, n);
    GYRE_REPLIES_PUBLISHED(r);
    r->busy_polls++;
    if (!r->checked) {
        gyre_k8_refresh(r, r->state); /* checked rings: on the slow tick, at most every 1 ms */
    }
    if (r->epoch_ns != 0u && now - r->epoch >= r->epoch_ns) {
        r->slow_next = 1u; /* the epoch ran out: hand over on the next poll (K1) */
    }
    r->idle_spins = 0u;
    GYRE_IDLE_RESET();
}

#endif /* GYRE_RING_H */
