/*
 * gyre/link.h -- pipeline links (docs/pipelines.md, docs/protocol.md section 9): where a
 * pipeline stage's replies go instead of its own reply ring. Part of gyre/ring.h (which
 * includes it; include ring.h), over the poller's state and K0 (gyre/poller.h).
 *
 * A stage's link is one kernel argument `next` with GYRE_LINK_* flags:
 *
 *   direct (no BY_ID / FAN_OUT)  `next` is a region. Reply i goes to index i of its
 *       request ring (the next stage), or with TO_HEAD of its reply ring (the chain's
 *       head, which the host reads). Space: K3 waits on the ring's release count.
 *   BY_ID     `next` is a gyre_join naming the target region (a join stage, or the head
 *       with TO_HEAD). The reply to a request with correlation id c goes to index c of
 *       the target ring; the target's published head is advanced over the prefix of
 *       written slots by whichever of its producers completes it (the multi-producer
 *       sequencer of crates/gyre-core/src/ring/prefix.rs). Every request of a pipeline
 *       carries the host's index as its correlation id (the head stamps it: OWN_ID), and
 *       the host claims index c only once reply c - capacity was released: at most
 *       `capacity` requests are in the whole pipeline, so slot c of any ring written by
 *       id is free when c arrives, and no producer ever waits for space.
 *   FAN_OUT   `next` is a gyre_route of 2..8 branches. The handler writes the reply into
 *       this stage's own reply ring (a scratch slot nobody else reads: for the head it
 *       is slot c of the host's reply ring, unpublished until a branch answers c); K6
 *       picks the branch (round-robin, or by a key in the reply) and copies the reply
 *       into the branch's request ring at the branch's own next index. K3 takes a batch
 *       only when every branch has room for all of it. The route's scratch words (rr,
 *       head, released, ring) have this stage as their only writer; they are accessed as
 *       relaxed atomics all the same, because the host may read them while it runs
 *       (gyre_core::chain::LinkTables::routed).
 *
 * Stopping (L3) and following (L4) work over every kind: a stage that stops for good
 * tells each stage it writes to terminate (a join only once all its producers stopped:
 * gyre_join.stopped), and stops itself when a stage it writes to stopped for good.
 */
#ifndef GYRE_LINK_H
#define GYRE_LINK_H

#include "poller.h"

/** Where a pipeline stage's replies go: `next` is a region, a gyre_route (FAN_OUT) or a
 *  gyre_join (BY_ID); 0 for a kernel that is not chained. `flags`: GYRE_LINK_*.
 *  `msg_type`: the message type of the next stage's requests, written into each (direct
 *  and BY_ID to a join; a route holds one per branch; unused towards the head, whose
 *  replies keep the last stage's request's type, which the host does not check). */
typedef struct gyre_link {
    GYRE_GLOBAL unsigned char *next;
    uint32_t flags; /* GYRE_LINK_* */
    uint32_t msg_type;
} gyre_link;

/** How replies leave a stage (gyre_ring.out). */
#define GYRE_OUT_DIRECT 0u
#define GYRE_OUT_BY_ID 1u
#define GYRE_OUT_FAN_OUT 2u

/** What a port does after this stage published to, or commanded, a next stage (default:
 *  nothing; the C11 port rings the next stages' doorbells, since a CPU kernel parks when
 *  idle). */
#ifndef GYRE_NOTIFY_NEXT
#define GYRE_NOTIFY_NEXT(r) ((void)0)
#endif

/** The region at device address `addr` (a gyre_route / gyre_join target). */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *gyre_region_at(uint64_t addr) {
    return (GYRE_GLOBAL unsigned char *)addr;
}

static inline GYRE_DEVICE_FN GYRE_GLOBAL gyre_route *gyre_link_route(const gyre_ring *r) {
    return (GYRE_GLOBAL gyre_route *)r->link_next;
}

static inline GYRE_DEVICE_FN GYRE_GLOBAL gyre_join *gyre_link_join(const gyre_ring *r) {
    return (GYRE_GLOBAL gyre_join *)r->link_next;
}

/** Whether region `n` can take this stage's replies: a live control block with the
 *  stage's capacity and slot size. */
static inline GYRE_DEVICE_FN uint32_t gyre_link_fits(const gyre_ring *r,
                                                    GYRE_GLOBAL unsigned char *n) {
    GYRE_GLOBAL gyre_control_block *c = gyre_control(n);
    return n != 0 && GYRE_LOAD_ACQUIRE_U32(&c->magic) == GYRE_MAGIC &&
           GYRE_LOAD_ACQUIRE_U32(&c->abi_version) == GYRE_ABI_VERSION &&
           (uint64_t)GYRE_LOAD_ACQUIRE_U32(&c->capacity) == r->mask + 1u &&
           GYRE_LOAD_ACQUIRE_U32(&c->slot_size) == r->slot_size &&
           gyre_ring_aligned(gyre_request_ring(n));
}

/** K0 of a FAN_OUT stage: a sane route (2..8 branches, a known mode, a key inside the
 *  payload) over regions of this stage's geometry; its scratch words from the branches'
 *  counters. Returns 1 when it holds. */
static inline GYRE_DEVICE_FN uint32_t gyre_k0_route(gyre_ring *r) {
    GYRE_GLOBAL gyre_route *rt = gyre_link_route(r);
    const uint32_t count = rt->count;
    uint32_t j;
    if (count < 2u || count > GYRE_ROUTE_MAX_BRANCHES ||
        (rt->mode != GYRE_ROUTE_ROUND_ROBIN && rt->mode != GYRE_ROUTE_KEY) ||
        (rt->mode == GYRE_ROUTE_KEY && (rt->key_offset > r->payload ||
                                        r->payload - rt->key_offset < 8u))) {
        return 0u;
    }
    for (j = 0u; j < count; ++j) {
        GYRE_GLOBAL unsigned char *b = gyre_region_at(rt->target[j]);
        if (!gyre_link_fits(r, b)) {
            return 0u;
        }
        GYRE_STORE_RELAXED_U64(&rt->head[j], GYRE_LOAD_ACQUIRE_U64(&gyre_control(b)->h2k_head));
        GYRE_STORE_RELAXED_U64(&rt->ring[j], (uint64_t)gyre_request_ring(b));
        GYRE_STORE_RELAXED_U64(&rt->released[j],
                               GYRE_LOAD_ACQUIRE_U64(&gyre_control(b)->h2k_tail));
    }
    return 1u;
}

/** K0 of a pipeline stage, after gyre_k0_validate: the replies go where `link` says (see
 *  the top of this file); every region written must hold this stage's geometry (else
 *  BAD_GEOMETRY, faulting this stage). Returns GYRE_ERR_NONE or the fault's code. */
static inline GYRE_DEVICE_FN uint32_t gyre_k0_link(gyre_ring *r, const gyre_link *link) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    GYRE_GLOBAL unsigned char *target = link->next;
    GYRE_GLOBAL gyre_control_block *n;
    if (link->next == 0) {
        return GYRE_ERR_NONE;
    }
    r->link_next = link->next;
    r->link_flags = link->flags;
    r->pass_status = (link->flags & GYRE_LINK_FROM_STAGE) != 0u ? 1u : 0u;
    if ((link->flags & GYRE_LINK_FAN_OUT) != 0u) {
        r->out = GYRE_OUT_FAN_OUT; /* replies stay in our own ring until K6 passes them */
        return gyre_k0_route(r) ? GYRE_ERR_NONE : gyre_fault(cb, GYRE_ERR_BAD_GEOMETRY);
    }
    if ((link->flags & GYRE_LINK_BY_ID) != 0u) {
        r->out = GYRE_OUT_BY_ID;
        target = gyre_region_at(gyre_link_join(r)->target);
    }
    if (!gyre_link_fits(r, target)) {
        return gyre_fault(cb, GYRE_ERR_BAD_GEOMETRY);
    }
    n = gyre_control(target);
    if ((link->flags & GYRE_LINK_TO_HEAD) != 0u) {
        r->reply_ring = gyre_reply_ring_of(target, r->mask, r->slot_size);
        r->reply_release = &n->k2h_tail;
        r->reply_publish = &n->k2h_head;
    } else {
        r->reply_ring = gyre_request_ring(target);
        r->reply_release = &n->h2k_tail;
        r->reply_publish = &n->h2k_head;
        r->next_cb = n;
        r->next_type = link->msg_type;
    }
    r->k2h_tail = GYRE_LOAD_ACQUIRE_U64(r->reply_release);
    return GYRE_ERR_NONE;
}

/* ---- K3 / K6 / K7 of the link kinds ------------------------------------------------- */

/** The reply index request `idx` is answered at: its correlation id when written by id,
 *  else `idx` (a fan-out stage's scratch slot, too). */
static inline GYRE_DEVICE_FN uint64_t gyre_reply_index(const gyre_ring *r, uint64_t idx,
                                                      const gyre_slot_meta *m) {
    return r->out == GYRE_OUT_BY_ID ? m->correlation_id : idx;
}

/** K3 of a FAN_OUT stage: the most requests it may take now, the smallest room of any
 *  branch (a branch's h2k_tail is re-read only when its room looks short of a batch). */
static inline GYRE_DEVICE_FN uint32_t gyre_route_room(gyre_ring *r) {
    GYRE_GLOBAL gyre_route *rt = gyre_link_route(r);
    const uint64_t cap = r->mask + 1u;
    uint64_t room = r->batch;
    uint32_t j;
    for (j = 0u; j < rt->count; ++j) {
        const uint64_t head = GYRE_LOAD_RELAXED_U64(&rt->head[j]);
        uint64_t free_slots = cap - (head - GYRE_LOAD_RELAXED_U64(&rt->released[j]));
        if (free_slots < room) {
            const uint64_t released =
                GYRE_LOAD_ACQUIRE_U64(&gyre_control(gyre_region_at(rt->target[j]))->h2k_tail);
            GYRE_STORE_RELAXED_U64(&rt->released[j], released);
            free_slots = cap - (head - released);
            room = free_slots < room ? free_slots : room;
        }
    }
    return (uint32_t)room;
}

/** SplitMix64's finaliser (gyre_core::chain::route_branch is the same function). */
static inline GYRE_DEVICE_FN uint64_t gyre_splitmix64(uint64_t x) {
    uint64_t z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/** The branch of a FAN_OUT stage's reply (`payload` its bytes, `m` its header). */
static inline GYRE_DEVICE_FN uint32_t gyre_route_pick(GYRE_GLOBAL gyre_route *rt,
                                                     const GYRE_GLOBAL unsigned char *payload,
                                                     const gyre_slot_meta *m) {
    const uint32_t count = rt->count;
    uint64_t key = 0u;
    uint32_t b;
    if (rt->mode == GYRE_ROUTE_ROUND_ROBIN) {
        const uint32_t j = GYRE_LOAD_RELAXED_U32(&rt->rr);
        GYRE_STORE_RELAXED_U32(&rt->rr, j + 1u);
        return j % count;
    }
    if (m->status == GYRE_ERR_NONE && m->len >= rt->key_offset &&
        m->len - rt->key_offset >= 8u) {
        for (b = 0u; b < 8u; ++b) { /* little-endian, at any alignment */
            key |= (uint64_t)payload[rt->key_offset + b] << (8u * b);
        }
    }
    return (uint32_t)(gyre_splitmix64(key) % (uint64_t)count);
}

/** K6 of a FAN_OUT stage: the reply in scratch slot `h` (its payload written by the
 *  handler, `m` its header) is copied into its branch's next request slot (header, the
 *  payload in 8-byte words: a payload is a multiple of 64 bytes), then a system fence and
 *  the sequence last (release). K7 publishes it (gyre_link_publish). */
static inline GYRE_DEVICE_FN void gyre_route_pass(gyre_ring *r,
                                                 const GYRE_GLOBAL gyre_slot_header *h,
                                                 const gyre_slot_meta *m) {
    GYRE_GLOBAL gyre_route *rt = gyre_link_route(r);
    const GYRE_GLOBAL unsigned char *src = (const GYRE_GLOBAL unsigned char *)h;
    const uint32_t j = gyre_route_pick(rt, src + GYRE_SLOT_HEADER_SIZE, m);
    const uint64_t at = GYRE_LOAD_RELAXED_U64(&rt->head[j]);
    GYRE_GLOBAL gyre_slot_header *d = (GYRE_GLOBAL gyre_slot_header *)gyre_slot_at(
        gyre_region_at(GYRE_LOAD_RELAXED_U64(&rt->ring[j])), r->mask, r->slot_size, at);
    const GYRE_GLOBAL uint64_t *from = (const GYRE_GLOBAL uint64_t *)(src + GYRE_SLOT_HEADER_SIZE);
    GYRE_GLOBAL uint64_t *to =
        (GYRE_GLOBAL uint64_t *)((GYRE_GLOBAL unsigned char *)d + GYRE_SLOT_HEADER_SIZE);
    uint32_t w;
    for (w = 0u; w < (m->len + 7u) / 8u; ++w) {
        to[w] = from[w];
    }
    d->correlation_id = m->correlation_id;
    d->enqueue_ns = m->enqueue_ns;
    d->msg_type = rt->msg_type[j];
    d->len = m->len;
    d->flags = m->flags;
    d->status = m->status;
    GYRE_FENCE_SYSTEM();
    GYRE_STORE_RELEASE_U64(&d->sequence, at + 1u);
    GYRE_STORE_RELAXED_U64(&rt->head[j], at + 1u);
}

/** K7 of a stage writing by id or fanning out. BY_ID: advance the target's published
 *  head over every slot whose sequence says its index was written (its own lap or a later
 *  one; prefix.rs's advance_prefix:
 *  a system fence after our sequence stores, then scan and compare-and-swap; of two
 *  producers finishing at once, at least one sees the other's slot, so none is left
 *  unpublished). FAN_OUT: each branch's h2k_head (this stage is its only producer). */
static inline GYRE_DEVICE_FN void gyre_link_publish(gyre_ring *r) {
    const uint64_t cap = r->mask + 1u;
    uint64_t h;
    if (r->out == GYRE_OUT_FAN_OUT) {
        GYRE_GLOBAL gyre_route *rt = gyre_link_route(r);
        uint32_t j;
        for (j = 0u; j < rt->count; ++j) {
            GYRE_STORE_RELEASE_U64(&gyre_control(gyre_region_at(rt->target[j]))->h2k_head,
                                   GYRE_LOAD_RELAXED_U64(&rt->head[j]));
        }
        return;
    }
    GYRE_FENCE_SYSTEM();
    h = GYRE_LOAD_ACQUIRE_U64(r->reply_publish);
    for (;;) {
        uint64_t n = h;
        /* `>= n + 1`, not `==`: the consumers read by sequence, not by this head, so
         * slot n may already hold a later lap (index n + k * capacity, written only once
         * index n was consumed and released) when the scan gets there. */
        while (n - h < cap && GYRE_LOAD_ACQUIRE_U64(&gyre_reply_slot(r, n)->sequence) >= n + 1u) {
            n++;
        }
        if (n == h) {
            return;
        }
        if (GYRE_CAS_U64(r->reply_publish, h, n)) {
            h = n;
        } else {
            h = GYRE_LOAD_ACQUIRE_U64(r->reply_publish);
        }
    }
}

/* ---- L3 stop / L4 follow ------------------------------------------------------------ */

/** Whether a stage this one writes to stopped for good (a fan-out: any branch; towards
 *  the head: never, the head is the chain's entry). */
static inline GYRE_DEVICE_FN uint32_t gyre_link_next_final(const gyre_ring *r) {
    if (r->out == GYRE_OUT_FAN_OUT) {
        GYRE_GLOBAL gyre_route *rt = gyre_link_route(r);
        uint32_t j;
        for (j = 0u; j < rt->count; ++j) {
            if (GYRE_STATE_IS_FINAL(GYRE_LOAD_ACQUIRE_U32(
                    &gyre_control(gyre_region_at(rt->target[j]))->state))) {
                return 1u;
            }
        }
        return 0u;
    }
    return r->next_cb != 0 && GYRE_STATE_IS_FINAL(GYRE_LOAD_ACQUIRE_U32(&r->next_cb->state));
}

static inline GYRE_DEVICE_FN void gyre_link_terminate(GYRE_GLOBAL unsigned char *region) {
    if (region != 0) {
        GYRE_STORE_RELEASE_U32(&gyre_control(region)->command, GYRE_CMD_TERMINATE);
    }
}

/** L3 from the link argument alone (also when K0 failed before the link was checked):
 *  the stages written to are told to terminate; a join only by the last of its
 *  producers to stop (each counts itself once into gyre_join.stopped). */
static inline GYRE_DEVICE_FN void gyre_link_tell(GYRE_GLOBAL unsigned char *next,
                                                uint32_t flags) {
    if (next == 0) {
        return;
    }
    if ((flags & GYRE_LINK_FAN_OUT) != 0u) {
        GYRE_GLOBAL gyre_route *rt = (GYRE_GLOBAL gyre_route *)next;
        uint32_t j;
        for (j = 0u; j < rt->count && j < GYRE_ROUTE_MAX_BRANCHES; ++j) {
            gyre_link_terminate(gyre_region_at(rt->target[j]));
        }
    } else if ((flags & GYRE_LINK_BY_ID) != 0u) {
        GYRE_GLOBAL gyre_join *jt = (GYRE_GLOBAL gyre_join *)next;
        uint64_t s = GYRE_LOAD_ACQUIRE_U64(&jt->stopped);
        while (!GYRE_CAS_U64(&jt->stopped, s, s + 1u)) {
            s = GYRE_LOAD_ACQUIRE_U64(&jt->stopped);
        }
        if (s + 1u >= (uint64_t)jt->producers && (flags & GYRE_LINK_TO_HEAD) == 0u) {
            gyre_link_terminate(gyre_region_at(jt->target));
        }
    } else if ((flags & GYRE_LINK_TO_HEAD) == 0u) {
        gyre_link_terminate(next);
    }
}

/** L3: a stage that stops (any final state) tells the stages it writes to terminate:
 *  each drains what it was given, then stops and tells its own. */
static inline GYRE_DEVICE_FN void gyre_link_stop(gyre_ring *r) {
    if (r->link_next != 0) {
        gyre_link_tell(r->link_next, r->link_flags);
        GYRE_NOTIFY_NEXT(r);
    }
}

#endif /* GYRE_LINK_H */
