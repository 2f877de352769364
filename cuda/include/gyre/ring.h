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

/* ---- K2 poll / K3 take batch ------------------------------------------------------ */

/** K2 + K3: the contiguous run of published requests from r->tail (each slot's sequence
 *  == index + 1, acquire), at most `batch`, bounded by the reply slots the host has
 *  released (k2h_tail, re-read only when the ring looks full). Returns its length.
 *
 *  When it is empty and `check_head` (the slow path): K4's protocol-error check. A head
 *  published beyond r->tail over a slot whose sequence is wrong (re-read after the head,
 *  since the first read may predate the publication) is a batch of one with *bad_seq = 1.
 */
static inline GYRE_DEVICE_FN uint32_t gyre_k2_k3_take(gyre_ring *r, uint32_t check_head,
                                                     uint32_t *bad_seq) {
    GYRE_GLOBAL gyre_control_block *cb = gyre_control(r->region);
    const uint64_t cap = r->mask + 1u;
    /* Reply space (K3): a direct reply needs its reply slot released (checked per
     * request below); a reply written by id has its slot free by the host's claim rule
     * (gyre/link.h); a fan-out needs room in every branch. */
    const uint32_t direct = r->out == GYRE_OUT_DIRECT;
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
        if (direct && idx - r->k2h_tail >= cap) {
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
        /* The error reply needs a free reply slot too (K3's rule: re-read k2h_tail when
         * the ring looks full; without the re-read a stale copy could hide the error
         * forever, since the fast path above re-reads only over ready slots). */
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
 *  capacity), a system fence (the reply payload, written by any thread of the block before
 *  the barrier that precedes this call, and the header), then sequence = idx + 1 last,
 *  with release. */
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
