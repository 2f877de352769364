/*
 * gyre/poller.h -- the first part of gyre/ring.h (which includes it; include ring.h): the
 * region's layout, the check word of checked slots, the tuning knobs, the polling
 * thread's state (gyre_ring), the addresses of the rings and slots, and K0. No step
 * after K0 is here, so gyre/link.h builds on it without a circle.
 */
#ifndef GYRE_POLLER_H
#define GYRE_POLLER_H

#if !defined(GYRE_LOAD_ACQUIRE_U64) || !defined(GYRE_STORE_RELEASE_U64) ||                     \
    !defined(GYRE_FENCE_SYSTEM) || !defined(GYRE_NOW_NS) || !defined(GYRE_PAUSE) ||            \
    !defined(GYRE_DEVICE_FN) || !defined(GYRE_GLOBAL) || !defined(GYRE_CAS_U64)
#error "include a gyre port header (gyre/port_cuda.h, port_opencl.h, port_c11.h) before gyre/ring.h"
#endif

#include "abi.h"

/* ---- region layout (crates/gyre-core/src/region.rs) ------------------------------- */
/** Offset of the telemetry line in the shared region. */
#define GYRE_TELEMETRY_OFFSET 128u
/** Offset of the request ring (unless placed apart); the reply ring follows it. */
#define GYRE_RINGS_OFFSET 256u

/* ---- the check word of checked slots (gyre_abi::check) --------------------------- */

/** MurmurHash3's 64-bit finaliser (gyre_abi::check::fmix64). */
static inline GYRE_DEVICE_FN uint64_t gyre_fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/** Word `j`'s contribution to a slot's check (gyre_abi::check::term). */
static inline GYRE_DEVICE_FN uint64_t gyre_check_term(uint64_t w, uint32_t j) {
    return gyre_fmix64(w ^ (GYRE_CHECK_KEY * ((uint64_t)j + 1u)));
}

/** Words a slot's check covers (gyre_abi::check::words): the header's, then the payload's
 *  first `len` bytes rounded up to whole words, at most `payload` bytes. */
static inline GYRE_DEVICE_FN uint32_t gyre_check_words(uint32_t len, uint32_t payload) {
    const uint32_t l = len < payload ? len : payload;
    return GYRE_CHECK_HEADER_WORDS + (l + 7u) / 8u;
}

/** The check of the slot image at `w` (its words, header first: a staged copy, never the
 *  shared ring itself), for a slot of `payload` payload bytes (gyre_abi::check::slot). */
static inline GYRE_DEVICE_FN uint64_t gyre_check_slot(const GYRE_GLOBAL uint64_t *w,
                                                     uint32_t payload) {
    const uint32_t n = gyre_check_words((uint32_t)(w[3] >> 32), payload);
    uint64_t sum = 0u;
    uint32_t j;
    for (j = 0u; j < n; ++j) {
        if (j != GYRE_CHECK_WORD) {
            sum += gyre_check_term(w[j], j);
        }
    }
    return sum;
}

/* ---- tuning ----------------------------------------------------------------------- */
/** Loop iterations between slow-path checks while Active (K1 command, K9 heartbeats,
 *  protocol errors under the head); every iteration otherwise. */
#ifndef GYRE_SLOW_EVERY
#define GYRE_SLOW_EVERY 128u
#endif
/** Empty polls spun at full speed before each further empty poll pauses (GYRE_PAUSE). */
#ifndef GYRE_IDLE_SPINS
#define GYRE_IDLE_SPINS 64u
#endif
/** Longest gap between telemetry writes while no batch is processed (1 ms): bounds the
 *  write rate when idle or paused, so readers are not starved by a writer that is always
 *  mid-write. */
#ifndef GYRE_IDLE_TELEMETRY_NS
#define GYRE_IDLE_TELEMETRY_NS 1000000u
#endif

/* ---- state of the polling thread -------------------------------------------------- */

/** Everything the poller keeps between iterations. Lives in registers / private memory
 *  of the polling thread. */
typedef struct gyre_ring {
    GYRE_GLOBAL unsigned char *region;
    /* The request ring's first slot (gyre_request_ring, read at K0). */
    GYRE_GLOBAL unsigned char *request_ring;
    /* Where replies go (K0: this region's reply ring; gyre_k0_link: a pipeline's next
     * stage's request ring, or the chain head's reply ring): the ring's first slot, the
     * count its consumer releases (K3 reads it), the count K7 publishes. */
    GYRE_GLOBAL unsigned char *reply_ring;
    GYRE_GLOBAL uint64_t *reply_release;
    GYRE_GLOBAL uint64_t *reply_publish;
    /* The next stage of a pipeline that this stage writes (not the head, not a fan-out's
     * branches), or 0: its message type is written into each request (K6), and it is
     * notified after each publication (K7). */
    GYRE_GLOBAL gyre_control_block *next_cb;
    /* The link argument (gyre/link.h): a region, a gyre_route (GYRE_LINK_FAN_OUT) or a
     * gyre_join (GYRE_LINK_BY_ID); 0 when not chained. */
    GYRE_GLOBAL unsigned char *link_next;
    /* A second telemetry line K8 also writes (the registered export file of
     * crates/gyre-core/src/shm.rs), or 0. Set by the language's loop after K0. */
    GYRE_GLOBAL gyre_telemetry_buffer *export_tel;
    uint64_t mask;            /* capacity - 1 */
    uint64_t tail;            /* next request index to consume (our copy of h2k_tail) */
    uint64_t k2h_tail;        /* reply slots released by the host, as last read */
    uint64_t head;            /* doorbell mode: h2k_head as last read; else UINT64_MAX */
    uint64_t epoch;           /* GYRE_NOW_NS() at K0 */
    uint64_t epoch_ns;        /* hand over once now - epoch reaches it (0 = never) */
    uint64_t host_hb;         /* host_heartbeat as last read */
    uint64_t host_hb_changed; /* GYRE_NOW_NS() when host_hb last changed */
    uint64_t host_timeout_ns; /* 0 = never */
    uint64_t processed;
    uint64_t last_now; /* the last clock reading (one per batch or slow tick) */
    uint64_t tel_at;   /* last_now at the last K8 */
    /* K8 accumulators (gyre_abi::TelemetrySnapshot); messages_in == messages_out. */
    uint64_t messages;
    uint64_t errors;
    uint64_t busy_polls;
    uint64_t idle_polls;
    uint64_t handler_ns_total;
    uint32_t handler_ns_max;
    uint32_t tel_seq; /* the telemetry line's seq as last written (single writer) */
    uint32_t slot_size;
    uint32_t payload; /* slot_size - GYRE_SLOT_HEADER_SIZE */
    uint32_t batch;
    uint32_t state; /* GYRE_STATE_*, our copy of control.state */
    uint32_t iter;
    uint32_t idle_spins;
    uint32_t telemetry; /* K8 per batch and idle refresh (1), or only on state changes (0) */
    uint32_t slow_next; /* run the slow path on the next poll (after a long pause) */
    uint32_t last_cmd;  /* the command as K1 last read it */
    uint32_t pass_status; /* requests come from a stage: pass a non-zero status on (K4) */
    uint32_t next_type;   /* the message type of the next stage's requests (next_cb != 0) */
    uint32_t link_flags;  /* GYRE_LINK_* of link_next */
    uint32_t out;         /* GYRE_OUT_*: how replies leave (gyre/link.h) */
    /* Checked slots (GYRE_HOST_FLAG_CHECKED, gyre/block.h's waves): the host line as the
     * last wave read it (a staged copy in the scratch memory), the next wave's window,
     * the tail last published to line 1 (K7 runs on the slow tick), and the head a
     * fenced slow tick saw beyond the tail (K4's protocol-error check, next wave). */
    GYRE_GLOBAL gyre_control_block *line0;
    uint64_t published; /* h2k_tail / k2h_head as last written to line 1 */
    uint64_t suspect;   /* a published head beyond the tail, seen after a fence; else 0 */
    uint32_t checked;   /* GYRE_HOST_FLAG_CHECKED was set at K0 */
    uint32_t window;    /* slots the next wave reads (1..window_max) */
} gyre_ring;

/** The header fields of one request, then of its reply (K4..K6). */
typedef struct gyre_slot_meta {
    uint64_t correlation_id;
    uint64_t enqueue_ns;
    uint32_t msg_type;
    uint32_t len; /* request length after K4; reply length after K5 */
    uint32_t flags;
    uint32_t status; /* GYRE_ERR_* */
    uint32_t passed; /* the status came with the request (a pipeline's earlier stage) */
    uint32_t pad;
} gyre_slot_meta;

/* ---- addresses -------------------------------------------------------------------- */

static inline GYRE_DEVICE_FN GYRE_GLOBAL gyre_control_block *
gyre_control(GYRE_GLOBAL unsigned char *region) {
    return (GYRE_GLOBAL gyre_control_block *)region;
}

static inline GYRE_DEVICE_FN GYRE_GLOBAL gyre_telemetry_buffer *
gyre_telemetry(GYRE_GLOBAL unsigned char *region) {
    return (GYRE_GLOBAL gyre_telemetry_buffer *)(region + GYRE_TELEMETRY_OFFSET);
}

/** The request ring of `region`: where its placement line says (a pipeline's inner ring,
 *  apart from the region), else inline at GYRE_RINGS_OFFSET. The line is host-written
 *  before the first launch and never after, so each kernel reads it once, at its K0. */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_request_ring(GYRE_GLOBAL unsigned char *region) {
    GYRE_GLOBAL gyre_placement *p = (GYRE_GLOBAL gyre_placement *)(region + GYRE_PLACEMENT_OFFSET);
    const uint64_t at = GYRE_LOAD_ACQUIRE_U64(&p->request_ring);
    return at != 0u ? (GYRE_GLOBAL unsigned char *)at : region + GYRE_RINGS_OFFSET;
}

/** Whether a ring's first slot is 128-byte aligned, as every slot must be (a placement
 *  line that says otherwise is corrupt: BAD_GEOMETRY). */
static inline GYRE_DEVICE_FN uint32_t gyre_ring_aligned(GYRE_GLOBAL unsigned char *ring) {
    return ((uint64_t)ring & 127u) == 0u ? 1u : 0u;
}

/** The reply ring of `region` (always inline: the host reads it). */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_reply_ring_of(GYRE_GLOBAL unsigned char *region, uint64_t mask, uint32_t slot_size) {
    return region + GYRE_RINGS_OFFSET + (mask + 1u) * (uint64_t)slot_size;
}

/** The slot of free-running index `idx` in the ring whose first slot is `ring`. */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_slot_at(GYRE_GLOBAL unsigned char *ring, uint64_t mask, uint32_t slot_size, uint64_t idx) {
    return ring + (idx & mask) * (uint64_t)slot_size;
}

static inline GYRE_DEVICE_FN GYRE_GLOBAL gyre_slot_header *
gyre_request_slot(const gyre_ring *r, uint64_t idx) {
    return (GYRE_GLOBAL gyre_slot_header *)gyre_slot_at(r->request_ring, r->mask, r->slot_size,
                                                        idx);
}

static inline GYRE_DEVICE_FN GYRE_GLOBAL gyre_slot_header *
gyre_reply_slot(const gyre_ring *r, uint64_t idx) {
    return (GYRE_GLOBAL gyre_slot_header *)gyre_slot_at(r->reply_ring, r->mask, r->slot_size,
                                                        idx);
}

/* ---- K0 validate ------------------------------------------------------------------ */

/** gyre_abi::check_geometry: 1 when capacity, slot size and batch size are legal. */
static inline GYRE_DEVICE_FN uint32_t gyre_geometry_ok(uint32_t capacity, uint32_t slot_size,
                                                      uint32_t batch) {
    if (capacity < GYRE_MIN_CAPACITY || capacity > GYRE_MAX_CAPACITY ||
        (capacity & (capacity - 1u)) != 0u) {
        return 0u;
    }
    if (slot_size < GYRE_MIN_SLOT_SIZE || slot_size > GYRE_MAX_SLOT_SIZE ||
        slot_size % GYRE_SLOT_ALIGN != 0u) {
        return 0u;
    }
    if (batch == 0u || batch > capacity) {
        return 0u;
    }
    return 1u;
}

/** Faults the kernel: error_code, then state = FAULTED (both release). Returns `code`. */
static inline GYRE_DEVICE_FN uint32_t gyre_fault(GYRE_GLOBAL gyre_control_block *cb,
                                                uint32_t code) {
    GYRE_STORE_RELEASE_U32(&cb->error_code, code);
    GYRE_STORE_RELEASE_U32(&cb->state, GYRE_STATE_FAULTED);
    return code;
}

/** K0: state = LAUNCHING; check magic, ABI version and geometry; initialise `r` from the
 *  control block; state = ACTIVE. Returns GYRE_ERR_NONE, or the error code after faulting
 *  the kernel (error_code set, state FAULTED): the caller then returns, no trap. */
static inline GYRE_DEVICE_FN uint32_t gyre_k0_validate(gyre_ring *r,
                                                      GYRE_GLOBAL unsigned char *region) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(region);
    uint32_t cap;
    uint32_t slot;
    uint32_t batch;
    uint64_t now;
    /* A successor (docs/protocol.md, handover) starts with its predecessor's line: the
     * error code of a fault it restarts after is cleared first. */
    GYRE_STORE_RELEASE_U32(&cb->error_code, GYRE_ERR_NONE);
    GYRE_STORE_RELEASE_U32(&cb->state, GYRE_STATE_LAUNCHING);
    if (GYRE_LOAD_ACQUIRE_U32(&cb->magic) != GYRE_MAGIC) {
        return gyre_fault(cb, GYRE_ERR_BAD_MAGIC);
    }
    if (GYRE_LOAD_ACQUIRE_U32(&cb->abi_version) != GYRE_ABI_VERSION) {
        return gyre_fault(cb, GYRE_ERR_BAD_ABI_VERSION);
    }
    cap = GYRE_LOAD_ACQUIRE_U32(&cb->capacity);
    slot = GYRE_LOAD_ACQUIRE_U32(&cb->slot_size);
    batch = GYRE_LOAD_ACQUIRE_U32(&cb->batch_size);
    if (!gyre_geometry_ok(cap, slot, batch)) {
        return gyre_fault(cb, GYRE_ERR_BAD_GEOMETRY);
    }
    now = GYRE_NOW_NS();
    r->region = region;
    r->mask = (uint64_t)cap - 1u;
    r->request_ring = gyre_request_ring(region);
    r->reply_ring = gyre_reply_ring_of(region, r->mask, slot);
    if (!gyre_ring_aligned(r->request_ring)) {
        return gyre_fault(cb, GYRE_ERR_BAD_GEOMETRY);
    }
    r->reply_release = &cb->k2h_tail;
    r->reply_publish = &cb->k2h_head;
    r->next_cb = 0;
    r->link_next = 0;
    r->pass_status = 0u;
    r->next_type = 0u;
    r->link_flags = 0u;
    r->out = 0u; /* GYRE_OUT_DIRECT */
    r->tail = GYRE_LOAD_ACQUIRE_U64(&cb->h2k_tail);
    r->k2h_tail = GYRE_LOAD_ACQUIRE_U64(&cb->k2h_tail);
    r->checked = (GYRE_LOAD_ACQUIRE_U32(&cb->host_flags) & GYRE_HOST_FLAG_CHECKED) != 0u ? 1u : 0u;
    r->line0 = cb; /* block.h points it at the wave's copy on checked rings */
    r->published = r->tail;
    r->suspect = 0u;
    r->window = 1u;
    /* GYRE_HOST_FLAG_DOORBELL: requests exist only below h2k_head. Without it the cached
     * head is "infinite", so K2 never reads h2k_head on its fast path. */
    r->head = (GYRE_LOAD_ACQUIRE_U32(&cb->host_flags) & GYRE_HOST_FLAG_DOORBELL) != 0u
                  ? r->tail
                  : ~(uint64_t)0;
    r->epoch = now;
    r->epoch_ns = (uint64_t)GYRE_LOAD_ACQUIRE_U32(&cb->epoch_us) * 1000u;
    r->host_hb = GYRE_LOAD_ACQUIRE_U64(&cb->host_heartbeat);
    r->host_hb_changed = now;
    r->host_timeout_ns = (uint64_t)GYRE_LOAD_ACQUIRE_U32(&cb->host_timeout_ms) * 1000000u;
    r->processed = GYRE_LOAD_ACQUIRE_U64(&cb->processed);
    r->last_now = now;
    r->tel_at = now;
    /* The counters continue from the telemetry line (zero at the first launch; a
     * predecessor's final K8 after a handover or a fault: it wrote the line last and has
     * exited, so this kernel is now its single writer). */
    {
        GYRE_GLOBAL gyre_telemetry_buffer *t = gyre_telemetry(region);
        r->messages = GYRE_LOAD_RELAXED_U64(&t->messages_out);
        r->errors = GYRE_LOAD_RELAXED_U64(&t->errors);
        r->busy_polls = GYRE_LOAD_RELAXED_U64(&t->busy_polls);
        r->idle_polls = GYRE_LOAD_RELAXED_U64(&t->idle_polls);
        r->handler_ns_total = GYRE_LOAD_RELAXED_U64(&t->handler_ns_total);
        r->handler_ns_max = GYRE_LOAD_RELAXED_U32(&t->handler_ns_max);
        r->tel_seq = GYRE_LOAD_RELAXED_U32(&t->seq);
    }
    r->export_tel = 0;
    r->slot_size = slot;
    r->payload = slot - GYRE_SLOT_HEADER_SIZE;
    r->batch = batch;
    r->state = GYRE_STATE_ACTIVE;
    r->iter = 0u;
    r->idle_spins = 0u;
    r->telemetry = 1u;
    /* The first poll runs K1: a successor follows the command the host left for it
     * (Pause, Terminate) before it takes anything. */
    r->slow_next = 1u;
    r->last_cmd = GYRE_LOAD_ACQUIRE_U32(&cb->command);
    GYRE_STORE_RELEASE_U32(&cb->state, GYRE_STATE_ACTIVE);
    return GYRE_ERR_NONE;
}

#endif /* GYRE_POLLER_H */
