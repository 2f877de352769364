/*
 * gyre/wave.h -- checked rings (GYRE_HOST_FLAG_CHECKED, docs/protocol.md "Checked slots"):
 * how a kernel reads requests from remote memory and writes its replies there when every
 * dependent read costs a PCIe round trip (about 1.1 us) and every system fence about as
 * much. Part of gyre/block.h, which includes it after the block's shared state; compiled
 * where the port defines GYRE_PORT_CHECKED (CUDA, and the C11 port, which runs the same
 * steps over host memory and counts and charges them: the cost model).
 *
 * One iteration is ONE read wave: every lane issues its loads of the window's slots and
 * of the host line (line 0 of the control block) together, then waits once. Loads are
 * served in any order, so a slot counts only when its sequence is the index's and its
 * check word is the check of the words the wave read (gyre_check_slot); a slot that fails
 * is simply read again by the next wave. The loaded words land in the kernel's scratch
 * memory (device memory on CUDA), where the handler finds its request and writes its reply
 * (no dependent read of remote memory by the handler), and lane 0 finds the host line for
 * the slow tick (no dependent read there either). A message longer than the wave's prefix
 * of its slot takes a second wave, alone in its batch. Replies leave in one store wave,
 * each with its check word, with no fence: the host checks them. K7, heartbeats and
 * telemetry go out on the slow tick after its one fence (gyre_k7_flush).
 *
 * Per batch: 1 read wave (2 for a long message), 0 fences, the reply stores. Per slow tick
 * (every GYRE_SLOW_EVERY polls, on a command, while not Active): 1 fence, line 1, and
 * telemetry at most every GYRE_IDLE_TELEMETRY_NS.
 *
 * The port defines GYRE_WAVE_UNITS (16-byte units a lane loads per round; CUDA keeps them
 * in registers, so one wave is one round), GYRE_WAVE_PREFIX (bytes of a slot the first wave
 * reads), GYRE_UNROLL, GYRE_SHARED_MIN_U32(p, v), GYRE_WAVE_BEGIN() / GYRE_WAVE_END()
 * around each wave (the cost model counts and charges them there), and either
 * GYRE_LOAD_REMOTE_UNIT(p, a, b) / GYRE_STORE_REMOTE_UNIT(p, a, b) (one 16-byte access) or
 * GYRE_WAVE_PER_SLOT with gyre_port_wave_load_slot / gyre_port_wave_store_slot (a port in
 * one memory model with its host, the C11 port: a slot is read only after its sequence
 * (acquire), and a reply's sequence is stored last (release), so no access races).
 */
#ifndef GYRE_WAVE_H
#define GYRE_WAVE_H

#if defined(GYRE_PORT_CHECKED)

/** gyre_wave_begin's verdict: go on with the wave. */
#define GYRE_WAVE_GO 0xfffffffeu

/** What the cost model counts per poll (batches, empty polls: gyre/port_c11.h). */
#ifndef GYRE_COST_POLL
#define GYRE_COST_POLL(n) ((void)0)
#endif

/** A slot of the wave: taken, not there yet (or torn), or longer than the prefix read. */
#define GYRE_SLOT_READY 0u
#define GYRE_SLOT_NOT_READY 1u
#define GYRE_SLOT_LONG 2u

/** The 16-byte units a slot's first wave reads (GYRE_WAVE_PREFIX at most: 8 or 16). */
static inline GYRE_DEVICE_FN uint32_t gyre_wave_prefix_units(GYRE_SHARED const gyre_block_shared *sh) {
    return sh->prefix / 16u;
}

/** Where unit `u` of a wave comes from and goes to. First wave (`second` 0): units 0..4
 *  are the host line, then each slot's prefix units, slot by slot. Second wave: slot 0's
 *  units past its prefix. */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_wave_src(GYRE_SHARED const gyre_block_shared *sh, uint32_t second, uint32_t u) {
    const uint32_t per = gyre_wave_prefix_units(sh);
    if (second) {
        return gyre_slot_at(sh->request_ring, sh->mask, sh->slot_size, sh->first) + sh->prefix +
               16u * (uint64_t)u;
    }
    if (u < 4u) {
        return sh->region + 16u * u;
    }
    return gyre_slot_at(sh->request_ring, sh->mask, sh->slot_size, sh->first + (u - 4u) / per) +
           16u * ((u - 4u) % per);
}

static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_wave_dst(GYRE_SHARED const gyre_block_shared *sh, uint32_t second, uint32_t u) {
    const uint32_t per = gyre_wave_prefix_units(sh);
    if (second) {
        return gyre_block_req(sh, 0u) + sh->prefix + 16u * (uint64_t)u;
    }
    if (u < 4u) {
        return sh->scratch + GYRE_SCRATCH_LINE0 + 16u * u;
    }
    return gyre_block_req(sh, (u - 4u) / per) + 16u * ((u - 4u) % per);
}

#if defined(GYRE_WAVE_PER_SLOT)
/** A port in one memory model with its host (GYRE_WAVE_PER_SLOT, the C11 port): the wave
 *  on one lane, slot by slot. A slot's words are read only once its sequence (acquire)
 *  says it is published, so no read races with the producer; the staged copy then goes
 *  through the same check as anywhere else. The second wave reads slot 0's remaining
 *  units (published: the first wave acquired its sequence). */
static inline GYRE_DEVICE_FN void gyre_port_wave_load_slot(GYRE_SHARED const gyre_block_shared *sh,
                                                          uint32_t second) {
    uint32_t s;
    uint32_t j;
    if (second) {
        const GYRE_GLOBAL uint64_t *src = (const GYRE_GLOBAL uint64_t *)gyre_slot_at(
            sh->request_ring, sh->mask, sh->slot_size, sh->first);
        GYRE_GLOBAL uint64_t *dst = (GYRE_GLOBAL uint64_t *)gyre_block_req(sh, 0u);
        for (j = sh->prefix / 8u; j < sh->prefix / 8u + 2u * sh->extra; ++j) {
            dst[j] = src[j];
        }
        GYRE_WAVE_LOADS(sh->extra);
        return;
    }
    gyre_copy_host_line((GYRE_GLOBAL gyre_control_block *)(sh->scratch + GYRE_SCRATCH_LINE0),
                        gyre_control(sh->region));
    GYRE_WAVE_LOADS(4u);
    for (s = 0u; s < sh->wave_slots; ++s) {
        const uint64_t idx = sh->first + s;
        GYRE_GLOBAL uint64_t *src =
            (GYRE_GLOBAL uint64_t *)gyre_slot_at(sh->request_ring, sh->mask, sh->slot_size, idx);
        GYRE_GLOBAL uint64_t *dst = (GYRE_GLOBAL uint64_t *)gyre_block_req(sh, s);
        const uint64_t seq = GYRE_LOAD_ACQUIRE_U64(&src[0]);
        dst[0] = seq;
        if (seq == idx + 1u) {
            for (j = 1u; j < sh->prefix / 8u; ++j) {
                dst[j] = src[j];
            }
        }
        GYRE_WAVE_LOADS(sh->prefix / 16u);
    }
}

/** The store wave of such a port: each reply's words, then its sequence last (release),
 *  so the host, which reads the sequence with acquire, never races with these stores. */
static inline GYRE_DEVICE_FN void gyre_port_wave_store_slot(GYRE_SHARED const gyre_block_shared *sh,
                                                           uint32_t count) {
    uint32_t k;
    uint32_t j;
    for (k = 0u; k < count; ++k) {
        const GYRE_GLOBAL uint64_t *w = (const GYRE_GLOBAL uint64_t *)gyre_block_rep(sh, k);
        GYRE_GLOBAL uint64_t *d = (GYRE_GLOBAL uint64_t *)gyre_slot_at(
            sh->reply_ring, sh->mask, sh->slot_size, sh->first + k);
        const uint32_t words = gyre_check_words((uint32_t)(w[3] >> 32), sh->payload);
        for (j = 1u; j < words; ++j) {
            d[j] = w[j];
        }
        GYRE_STORE_RELEASE_U64(&d[0], w[0]);
        GYRE_WAVE_STORES((words + 1u) / 2u);
    }
}
#endif

/** One lane's share of a wave of `total` units: all of its loads first, then their
 *  copies into scratch. */
static inline GYRE_DEVICE_FN void gyre_wave_load(GYRE_SHARED const gyre_block_shared *sh,
                                                uint32_t second, uint32_t total, uint32_t lane,
                                                uint32_t lanes) {
#if defined(GYRE_WAVE_PER_SLOT)
    (void)total;
    (void)lanes;
    if (lane == 0u) {
        gyre_port_wave_load_slot(sh, second);
    }
#else
    uint32_t base;
    for (base = 0u; base < total; base += lanes * (uint32_t)GYRE_WAVE_UNITS) {
        uint64_t a[GYRE_WAVE_UNITS];
        uint64_t b[GYRE_WAVE_UNITS];
        uint32_t k;
        GYRE_UNROLL
        for (k = 0u; k < (uint32_t)GYRE_WAVE_UNITS; ++k) {
            const uint32_t u = base + lane + k * lanes;
            a[k] = 0u;
            b[k] = 0u;
            if (u < total) {
                GYRE_LOAD_REMOTE_UNIT(gyre_wave_src(sh, second, u), a[k], b[k]);
            }
        }
        GYRE_UNROLL
        for (k = 0u; k < (uint32_t)GYRE_WAVE_UNITS; ++k) {
            const uint32_t u = base + lane + k * lanes;
            if (u < total) {
                GYRE_GLOBAL uint64_t *d = (GYRE_GLOBAL uint64_t *)gyre_wave_dst(sh, second, u);
                d[0] = a[k];
                d[1] = b[k];
            }
        }
    }
#endif
}

/** Slot `s` of the wave as staged: READY (sequence and check hold over `bytes` read of
 *  it), NOT_READY, or LONG (its check covers more than `bytes`: *units is how many units
 *  it needs in all). */
static inline GYRE_DEVICE_FN uint32_t gyre_wave_slot(GYRE_SHARED const gyre_block_shared *sh,
                                                    uint32_t s, uint32_t bytes,
                                                    uint32_t *units) {
    const GYRE_GLOBAL uint64_t *w = (const GYRE_GLOBAL uint64_t *)gyre_block_req(sh, s);
    uint32_t words;
    if (w[0] != sh->first + s + 1u) {
        return GYRE_SLOT_NOT_READY;
    }
    words = gyre_check_words((uint32_t)(w[3] >> 32), sh->payload);
    if (words * 8u > bytes) {
        *units = (words + 1u) / 2u;
        return GYRE_SLOT_LONG;
    }
    return gyre_check_slot(w, sh->payload) == w[GYRE_CHECK_WORD] ? GYRE_SLOT_READY
                                                                 : GYRE_SLOT_NOT_READY;
}

/** Lane 0 before a wave: the slow tick when due (from the host line the last wave read),
 *  then the window. sh->n: GYRE_WAVE_GO, or GYRE_POLL_STOPPED. */
static inline GYRE_DEVICE_FN void gyre_wave_begin(GYRE_SHARED gyre_block_shared *sh, gyre_ring *r) {
    const uint64_t cap = r->mask + 1u;
    uint32_t slow;
    uint64_t room;
    uint32_t w;
    sh->n = GYRE_WAVE_GO;
    if (GYRE_STATE_IS_STOPPED(r->state)) {
        sh->n = GYRE_POLL_STOPPED;
        return;
    }
    r->iter++;
    /* A new command is acted on at once: the copy says so, no read needed. */
    slow = (r->iter % GYRE_SLOW_EVERY) == 0u || r->slow_next != 0u ||
           r->state != GYRE_STATE_ACTIVE ||
           GYRE_LOAD_RELAXED_U32(&r->line0->command) != r->last_cmd;
    r->slow_next = 0u;
    if (slow && !gyre_k1_k9_slow_tick(r)) {
        sh->n = GYRE_POLL_STOPPED;
        return;
    }
    /* K3: as many slots as the host released reply slots for, at most the window (it
     * grows while batches fill it and falls back to one slot when idle: a wide wave
     * costs latency). Paused: no slot, the host line alone (the next command). */
    room = r->k2h_tail + cap - r->tail;
    w = r->window < sh->window_max ? r->window : sh->window_max;
    w = (uint64_t)w < room ? w : (uint32_t)room;
    if (r->state == GYRE_STATE_PAUSED) {
        w = 0u;
    }
    sh->wave_slots = w;
    sh->first = r->tail;
    sh->first_bad = w;
    sh->extra = 0u;
    sh->bad_seq = 0u;
}

/** Lane 0 after the wave(s): the batch (sh->n), or the idle poll's checks: K4's protocol
 *  error under a head seen before the last fence, the drain's end, the window. */
static inline GYRE_DEVICE_FN void gyre_wave_end(GYRE_SHARED gyre_block_shared *sh, gyre_ring *r) {
    GYRE_GLOBAL gyre_control_block *l0 = r->line0;
    uint32_t n = sh->first_bad;
    uint32_t units = 0u;
    r->k2h_tail = GYRE_LOAD_RELAXED_U64(&l0->k2h_tail);
    if (sh->extra != 0u) {
        n = gyre_wave_slot(sh, 0u, sh->slot_size, &units) == GYRE_SLOT_READY ? 1u : 0u;
    }
    if (n == 0u) {
        r->idle_polls++;
        /* K4 (slow path): the host published a head beyond the tail before the last
         * slow tick's fence, which this wave follows, so the tail slot must be whole. */
        if (r->suspect == r->tail + 1u && sh->wave_slots > 0u &&
            (r->link_flags & GYRE_LINK_BRANCH) == 0u) {
            n = 1u;
            sh->bad_seq = 1u;
        } else if (r->state == GYRE_STATE_DRAINING &&
                   GYRE_LOAD_RELAXED_U64(&l0->h2k_head) <= r->tail) {
            /* Everything published before Terminate is answered (the head read by this
             * wave, after the fence of the tick that saw Terminate). */
            gyre_ring_stop(r, GYRE_STATE_TERMINATED, GYRE_ERR_NONE);
            sh->n = GYRE_POLL_STOPPED;
            return;
        }
        r->window = 1u;
    } else {
        r->window = 2u * n < sh->window_max ? 2u * n : sh->window_max;
    }
    r->suspect = 0u;
    sh->n = n;
    sh->t0 = GYRE_BATCH_STAMP();
    GYRE_COST_POLL(n);
}

/** One poll of a checked ring, on every lane: the batch's length (0: none), or
 *  GYRE_POLL_STOPPED. */
static inline GYRE_DEVICE_FN uint32_t gyre_wave_poll(GYRE_SHARED gyre_block_shared *sh,
                                                    gyre_ring *r) {
    GYRE_LANE0_BEGIN
    gyre_wave_begin(sh, r);
    GYRE_LANE0_END
    GYRE_BARRIER();
    if (sh->n != GYRE_WAVE_GO) {
        return sh->n;
    }
    GYRE_WAVE_BEGIN();
    GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
    gyre_wave_load(sh, 0u, 4u + sh->wave_slots * gyre_wave_prefix_units(sh), lane, sh->lanes);
    GYRE_EACH_LANE_END
    GYRE_WAVE_END();
    GYRE_BARRIER(); /* the wave, in scratch */
    GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
    uint32_t s;
    for (s = lane; s < sh->wave_slots; s += sh->lanes) {
        uint32_t units = 0u;
        const uint32_t st = gyre_wave_slot(sh, s, sh->prefix, &units);
        if (st != GYRE_SLOT_READY) {
            GYRE_SHARED_MIN_U32(&sh->first_bad, s);
        }
        if (st == GYRE_SLOT_LONG && s == 0u) {
            sh->extra = units - gyre_wave_prefix_units(sh);
        }
    }
    GYRE_EACH_LANE_END
    GYRE_BARRIER(); /* the verdicts */
    if (sh->extra != 0u) {
        /* A message longer than the prefix: the rest of it, alone in its batch. */
        GYRE_WAVE_BEGIN();
        GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
        gyre_wave_load(sh, 1u, sh->extra, lane, sh->lanes);
        GYRE_EACH_LANE_END
        GYRE_WAVE_END();
        GYRE_BARRIER();
    }
    GYRE_LANE0_BEGIN
    gyre_wave_end(sh, r);
    GYRE_LANE0_END
    GYRE_BARRIER(); /* the batch */
    return sh->n;
}

/** The store wave: the `count` staged replies of the batch, each with its sequence and
 *  check word, to the reply ring (one lane per reply computes its check first). */
static inline GYRE_DEVICE_FN void gyre_wave_publish(GYRE_SHARED gyre_block_shared *sh,
                                                   uint32_t count) {
    GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
    uint32_t k;
    for (k = lane; k < count; k += sh->lanes) {
        GYRE_GLOBAL uint64_t *w = (GYRE_GLOBAL uint64_t *)gyre_block_rep(sh, k);
        w[0] = sh->first + k + 1u;
        w[GYRE_CHECK_WORD] = gyre_check_slot(w, sh->payload);
    }
    GYRE_EACH_LANE_END
    GYRE_BARRIER(); /* the check words */
    GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
#if defined(GYRE_WAVE_PER_SLOT)
    if (lane == 0u) {
        gyre_port_wave_store_slot(sh, count);
    }
#else
    /* Units of every reply, lane-strided over (reply, unit) pairs of the prefix, then
     * the units of any reply longer than the prefix. */
    const uint32_t per = gyre_wave_prefix_units(sh);
    uint32_t x;
    for (x = lane; x < count * per; x += sh->lanes) {
        const uint32_t k = x / per;
        const uint32_t u = x % per;
        const GYRE_GLOBAL uint64_t *w = (const GYRE_GLOBAL uint64_t *)gyre_block_rep(sh, k);
        const uint32_t units = (gyre_check_words((uint32_t)(w[3] >> 32), sh->payload) + 1u) / 2u;
        if (u < units) {
            GYRE_STORE_REMOTE_UNIT(
                gyre_slot_at(sh->reply_ring, sh->mask, sh->slot_size, sh->first + k) + 16u * u,
                w[2u * u], w[2u * u + 1u]);
        }
    }
    for (x = 0u; x < count; ++x) {
        const GYRE_GLOBAL uint64_t *w = (const GYRE_GLOBAL uint64_t *)gyre_block_rep(sh, x);
        const uint32_t units = (gyre_check_words((uint32_t)(w[3] >> 32), sh->payload) + 1u) / 2u;
        uint32_t u;
        for (u = per + lane; u < units; u += sh->lanes) {
            GYRE_STORE_REMOTE_UNIT(
                gyre_slot_at(sh->reply_ring, sh->mask, sh->slot_size, sh->first + x) + 16u * u,
                w[2u * u], w[2u * u + 1u]);
        }
    }
#endif
    GYRE_EACH_LANE_END
}

#endif /* GYRE_PORT_CHECKED */

#endif /* GYRE_WAVE_H */
