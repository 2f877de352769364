/*
 * gyre/tick.h -- part of gyre/ring.h (which includes it; include ring.h): the slow path
 * of the poller, run every GYRE_SLOW_EVERY polls, after a long pause and on checked
 * rings after its one fence: K8 telemetry, K7's line 1 of checked rings, K1 commands,
 * K9 heartbeats and L4 (a pipeline stage that follows its next stage's end).
 */
#ifndef GYRE_TICK_H
#define GYRE_TICK_H

#include "link.h"

/* ---- K8 telemetry ----------------------------------------------------------------- */

/** K8: publish the counters under the seqlock (docs/protocol.md §5; the writer of
 *  crates/gyre-core/src/seqlock.rs): seq odd (relaxed), fence, the fields (relaxed), seq
 *  even (release). With telemetry off (r->telemetry == 0) the counters are written as 0:
 *  only the state and the heartbeat are kept up to date. */
static inline GYRE_DEVICE_FN void gyre_k8_write(GYRE_GLOBAL gyre_telemetry_buffer *t,
                                                 const gyre_ring *r, uint32_t state,
                                                 uint32_t odd) {
    const uint64_t on = r->telemetry != 0u ? ~(uint64_t)0 : (uint64_t)0;
    GYRE_STORE_RELAXED_U32(&t->seq, odd);
    /* Orders the odd sequence before the field stores, for readers. */
    GYRE_FENCE_SYSTEM();
    GYRE_STORE_RELAXED_U32(&t->state, state);
    GYRE_STORE_RELAXED_U64(&t->messages_in, r->messages & on);
    GYRE_STORE_RELAXED_U64(&t->messages_out, r->messages & on);
    GYRE_STORE_RELAXED_U64(&t->errors, r->errors & on);
    GYRE_STORE_RELAXED_U64(&t->busy_polls, r->busy_polls & on);
    GYRE_STORE_RELAXED_U64(&t->idle_polls, r->idle_polls & on);
    GYRE_STORE_RELAXED_U64(&t->handler_ns_total, r->handler_ns_total & on);
    GYRE_STORE_RELAXED_U32(&t->handler_ns_max, r->handler_ns_max & (uint32_t)on);
    GYRE_STORE_RELAXED_U32(&t->heartbeat_ms, (uint32_t)((r->last_now - r->epoch) / 1000000u));
    GYRE_STORE_RELEASE_U32(&t->seq, odd + 1u);
}

/** K8 on the region's line, then on the export line if there is one (same values and
 *  sequence numbers: each line has this kernel as its single writer). Always written on a
 *  state change; see gyre_k8_refresh for the per-batch and idle writes. */
/** What the cost model counts per write of the telemetry line (gyre/port_c11.h). */
#ifndef GYRE_COST_TELEMETRY
#define GYRE_COST_TELEMETRY() ((void)0)
#endif

static inline GYRE_DEVICE_FN void gyre_k8_telemetry(gyre_ring *r, uint32_t state) {
    const uint32_t odd = (r->tel_seq + 1u) | 1u;
    GYRE_COST_TELEMETRY();
    gyre_k8_write(gyre_telemetry(r->region), r, state, odd);
    if (r->export_tel != 0) {
        gyre_k8_write(r->export_tel, r, state, odd);
    }
    r->tel_seq = odd + 1u;
    r->tel_at = r->last_now;
}

/** K8 after a batch or as the idle refresh: skipped with telemetry off. */
static inline GYRE_DEVICE_FN void gyre_k8_refresh(gyre_ring *r, uint32_t state) {
    if (r->telemetry != 0u) {
        gyre_k8_telemetry(r, state);
    }
}

/* ---- K7 on checked rings ----------------------------------------------------------- */

/** K7 of a checked ring, run on the slow tick and when the kernel stops, not per batch:
 *  one system fence (every reply written so far, and the host line the last wave read,
 *  ordered before what follows), then h2k_tail, k2h_head and processed as relaxed stores.
 *  The host needs neither index to take replies (it verifies each reply's check word) nor
 *  to bound its claims (k2h_tail and h2k_head are its own): they serve the watchdog,
 *  the protocol-error checks and a successor's K0, which all tolerate the lag. */
static inline GYRE_DEVICE_FN void gyre_k7_flush(gyre_ring *r) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    GYRE_FENCE_SYSTEM();
    if (r->published != r->tail) {
        GYRE_STORE_RELAXED_U64(&cb->h2k_tail, r->tail);
        GYRE_STORE_RELAXED_U64(&cb->k2h_head, r->tail);
        GYRE_STORE_RELAXED_U64(&cb->processed, r->processed);
        r->published = r->tail;
    }
}

/* ---- K1 command + K9 heartbeat (the slow path) ------------------------------------ */

/** K1: the state a command moves `state` to. */
static inline GYRE_DEVICE_FN uint32_t gyre_k1_next_state(uint32_t cmd, uint32_t state) {
    if (cmd == GYRE_CMD_HANDOVER) {
        return GYRE_STATE_HANDED_OVER;
    }
    if (cmd == GYRE_CMD_TERMINATE) {
        return GYRE_STATE_DRAINING;
    }
    if (cmd == GYRE_CMD_PAUSE && state == GYRE_STATE_ACTIVE) {
        return GYRE_STATE_PAUSED;
    }
    if (cmd == GYRE_CMD_RUN && state == GYRE_STATE_PAUSED) {
        return GYRE_STATE_ACTIVE;
    }
    return state;
}

/** The loop's end outside a batch: error_code, processed, final telemetry, then the state
 *  (release: a successor, or the host, sees everything before it); a pipeline stage that
 *  reached a final state then tells the next stage to terminate. */
static inline GYRE_DEVICE_FN void gyre_ring_stop(gyre_ring *r, uint32_t stop_state,
                                                 uint32_t code) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    if (r->checked) {
        gyre_k7_flush(r); /* the counters K7 left for the slow tick, before the state */
    }
    GYRE_STORE_RELEASE_U32(&cb->error_code, code);
    GYRE_STORE_RELEASE_U64(&cb->processed, r->processed);
    gyre_k8_telemetry(r, stop_state);
    GYRE_STORE_RELEASE_U32(&cb->state, stop_state);
    r->state = stop_state;
    if (GYRE_STATE_IS_FINAL(stop_state)) {
        gyre_link_stop(r);
    }
}

/** K9 then K1 (then K8): write the kernel heartbeat; if the host heartbeat has not
 *  changed for host_timeout_ns on the device clock, error_code = HOST_HEARTBEAT_STALE and
 *  state = TERMINATED, returning 0 (stop). Otherwise read the command, apply it, publish
 *  telemetry and return 1. Heartbeats are compared for change, never by value. */
static inline GYRE_DEVICE_FN uint32_t gyre_k1_k9_slow_tick(gyre_ring *r) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    /* The host line: the control block itself, or on a checked ring the copy the last
     * wave read (no dependent read of remote memory here). */
    GYRE_GLOBAL gyre_control_block *l0 = r->line0;
    const uint64_t now = GYRE_NOW_NS();
    uint64_t hb;
    uint32_t next = r->state;
    uint32_t stop_state = 0u;
    uint32_t stop_code = GYRE_ERR_NONE;
    r->last_now = now;
    /* K9: our heartbeat (nonzero, changes while we run), then the host's. */
    if (r->checked) {
        /* The deferred K7; its fence also orders the host line the last wave read before
         * the next wave, so a command seen here is followed by a fresh h2k_head (the
         * drain's end, K4's protocol-error check: gyre/block.h). */
        gyre_k7_flush(r);
        GYRE_STORE_RELAXED_U64(&cb->kernel_heartbeat, now - r->epoch + 1u);
        r->suspect = GYRE_LOAD_RELAXED_U64(&l0->h2k_head) > r->tail ? r->tail + 1u : 0u;
    } else {
        GYRE_STORE_RELEASE_U64(&cb->kernel_heartbeat, now - r->epoch + 1u);
    }
    hb = GYRE_LOAD_ACQUIRE_U64(&l0->host_heartbeat);
    if (hb != r->host_hb) {
        r->host_hb = hb;
        r->host_hb_changed = now;
    } else if (r->host_timeout_ns != 0u && now - r->host_hb_changed > r->host_timeout_ns) {
        stop_state = GYRE_STATE_TERMINATED;
        stop_code = GYRE_ERR_HOST_HEARTBEAT_STALE;
    }
    /* K1: the host line's identity. A corrupt control block faults the kernel (the
     * host reports the code to every waiter) instead of being trusted. */
    if (stop_state == 0u && (GYRE_LOAD_ACQUIRE_U32(&l0->magic) != GYRE_MAGIC ||
                             GYRE_LOAD_ACQUIRE_U32(&l0->abi_version) != GYRE_ABI_VERSION)) {
        stop_state = GYRE_STATE_FAULTED;
        stop_code = GYRE_ERR_BAD_MAGIC;
    }
    if (stop_state == 0u) {
        /* K1: the command; a handover (commanded, or the epoch ran out) stops the loop
         * here, at a batch boundary. */
        r->last_cmd = GYRE_LOAD_ACQUIRE_U32(&l0->command);
        next = gyre_k1_next_state(r->last_cmd, r->state);
        if (next == GYRE_STATE_HANDED_OVER ||
            (r->epoch_ns != 0u && now - r->epoch >= r->epoch_ns)) {
            stop_state = GYRE_STATE_HANDED_OVER;
        }
    }
    /* One exit for all: error code, processed, final telemetry, then the state (release:
     * a successor, or the host, sees everything before it). */
    if (stop_state != 0u) {
        gyre_ring_stop(r, stop_state, stop_code);
        return 0u;
    }
    /* K1: K8 on a state change, else at most every GYRE_IDLE_TELEMETRY_NS (batches
     * publish their own): idle or paused, the line is not rewritten on every slow tick,
     * which would starve its readers. */
    if (next != r->state) {
        r->state = next;
        GYRE_STORE_RELEASE_U32(&cb->state, next);
        gyre_k8_telemetry(r, r->state);
    } else if (now - r->tel_at >= GYRE_IDLE_TELEMETRY_NS) {
        gyre_k8_refresh(r, r->state);
    }
    return 1u;
}

/** L4 (on the slow path, when idle or paused): the next stage of a pipeline stopped for
 *  good, so what this stage holds can never be passed on: it stops too (TERMINATED,
 *  STAGE_STOPPED), and so, in turn, do the stages before it. Returns whether it stopped. */
static inline GYRE_DEVICE_FN uint32_t gyre_link_check(gyre_ring *r) {
    if (!gyre_link_next_final(r)) {
        return 0u;
    }
    gyre_ring_stop(r, GYRE_STATE_TERMINATED, GYRE_ERR_STAGE_STOPPED);
    return 1u;
}

#endif /* GYRE_TICK_H */
