/*
 * cuda/ring_kernel_c11.c -- gyre's ring kernel for the CPU backend: the block loop of
 * gyre/block.h (K0..K9 of docs/protocol.md, gyre/ring.h) over the C11 port (gyre/port_c11.h), run by one
 * host thread. Built by crates/gyre-cpu/build.rs with the `cc` crate; called from Rust
 * (crates/gyre-cpu/src/ffi.rs).
 *
 * The same loop as cuda/ring_kernel.cu and cuda/ring_kernel.cl (gyre_block_run and its
 * parts), with the block's lanes emulated: each barrier-delimited phase of a handler runs
 * for lane 0, 1, ... lanes - 1 in turn, on this thread (gyre/port_c11.h).
 *
 * The handler is one of (gyre_c11_start's `kind`):
 *   0          the host's: a function pointer and a context (the Rust trampoline of
 *              crates/gyre-cpu/src/ffi.rs, which calls a Rust handler and catches its
 *              panics, so nothing unwinds through this file), called once per request, on
 *              lane 0. A handler that panicked reports it through `*panicked`: its request
 *              is answered HANDLER_PANIC and the kernel faults (gyre_ring_fault_batch), as
 *              the fault table of docs/reliability.md says.
 *   1, 2, 3    the built-in kernel of that id (gyre_core::kernels::ids): the device code of
 *              cuda/handlers/{echo,vec_scale,reduce_sum}.h, the very source the CUDA and
 *              OpenCL kernels are built with, over `lanes` emulated lanes.
 * Every status goes through K5's rule (gyre_k5_result).
 */
/* POSIX (clock_gettime, nanosleep, sched_yield) under -std=c11. */
#define _POSIX_C_SOURCE 200809L

#include <stddef.h>
#include <stdlib.h>

#include "gyre/port_c11.h"
#include "gyre/handler.h"

/* Every built-in is compiled in; the block loop calls gyre_c11_phase, which picks one. */
static uint32_t gyre_c11_phase(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
                               gyre_hblock *b);
#define GYRE_HANDLER_PHASE gyre_c11_phase

#include "handlers/echo.h"
#include "handlers/reduce_sum.h"
#include "handlers/vec_scale.h"

#include "gyre/block.h"

/** The host's handler: answers request `req` (req_len bytes) of type msg_type, from the
 *  slot whose tag is `tag` (gyre_hcall.seq: the low 32 bits of its ring index), into
 *  `reply` (reply_cap bytes), sets *reply_len and returns a status (GYRE_ERR_NONE or an
 *  error status); sets *panicked when the handler panicked instead. */
typedef uint32_t (*gyre_c11_handler_fn)(void *ctx, uint32_t tag, uint32_t msg_type,
                                        const unsigned char *req,
                                        uint32_t req_len, unsigned char *reply,
                                        uint32_t reply_cap, uint32_t *reply_len,
                                        uint32_t *panicked);

/** gyre_c11_start's `kind` of the host's handler; 1..=3 are the built-in kernel ids. */
#define GYRE_C11_HOST 0u
#define GYRE_C11_ECHO 1u
#define GYRE_C11_VEC_SCALE 2u
#define GYRE_C11_REDUCE_SUM 3u

/** One kernel: the block's shared memory, the poller's state and the handler. */
typedef struct gyre_c11_kernel {
    gyre_block_shared sh; /* the block's; gyre_c11_phase finds the kernel from sh.h */
    gyre_ring r;          /* lane 0's */
    gyre_c11_handler_fn handler;
    void *ctx;
    uint32_t kind;
    uint32_t lanes;
    uint32_t descending; /* emulate the lanes in descending order (tests) */
    /* The loan pool: always empty here (bytes 0). The CPU backend's loan kernels run Rust
     * closures, which resolve their handles in Rust (LoanArena::resolve, the twin of
     * gyre_loan_resolve: crates/gyre-cpu/src/loan_probe.rs checks they agree). */
    gyre_loan_pool pool;
    /* Where a pipeline stage's replies go (next 0: not chained). */
    gyre_link link;
    /* A checked ring's waves land here (gyre/wave.h); NULL on other rings. */
    unsigned char *scratch;
    uint64_t scratch_bytes;
    /* The cost model's counters (gyre/port_c11.h; the host's, or NULL: none). */
    gyre_c11_cost *cost;
} gyre_c11_kernel;

/** The kernel whose block-shared handler memory is `b` (b == &k->sh.team[0].h: one team
 *  here). */
static inline gyre_c11_kernel *gyre_c11_kernel_of(gyre_hblock *b) {
    return (gyre_c11_kernel *)(void *)((unsigned char *)b - offsetof(gyre_c11_kernel, sh) -
                                       offsetof(gyre_block_shared, team) -
                                       offsetof(gyre_team, h));
}

/** The host's handler, on lane 0 only (a host function is not a lane program). */
static uint32_t gyre_c11_host_phase(const gyre_c11_kernel *k, const gyre_hcall *c,
                                    gyre_hblock *b) {
    if (c->lane == 0u) {
        uint32_t reply_len = 0u;
        uint32_t panicked = 0u;
        b->status = k->handler(k->ctx, c->seq, c->msg_type, c->req, c->req_len, c->reply, c->reply_cap,
                               &reply_len, &panicked);
        b->reply_len = reply_len;
        b->panicked = panicked;
    }
    return GYRE_PHASE_DONE;
}

static uint32_t gyre_c11_phase(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
                               gyre_hblock *b) {
    const gyre_c11_kernel *k = gyre_c11_kernel_of(b);
    switch (k->kind) {
    case GYRE_C11_ECHO:
        return gyre_echo_phase(phase, c, l, b);
    case GYRE_C11_VEC_SCALE:
        return gyre_vec_scale_phase(phase, c, l, b);
    case GYRE_C11_REDUCE_SUM:
        return gyre_reduce_sum_phase(phase, c, l, b);
    default:
        return gyre_c11_host_phase(k, c, b);
    }
}

/** A kernel, or NULL when out of memory. Free it with gyre_c11_kernel_free. */
gyre_c11_kernel *gyre_c11_kernel_new(void) {
    return (gyre_c11_kernel *)calloc(1u, sizeof(gyre_c11_kernel));
}

void gyre_c11_kernel_free(gyre_c11_kernel *k) {
    if (k != NULL) {
        free(k->scratch);
    }
    free(k);
}

/** Slots one wave of a checked ring may stage: the batch, at most what
 *  GYRE_SCRATCH_LIMIT bytes hold (requests and replies), at least one (gyre-core's
 *  checked::scratch_slots is the same rule). */
#define GYRE_SCRATCH_LIMIT (4u << 20)
uint32_t gyre_c11_scratch_slots(uint32_t batch, uint32_t slot_size) {
    const uint64_t fit = (GYRE_SCRATCH_LIMIT - GYRE_SCRATCH_STAGES) / (2u * (uint64_t)slot_size);
    const uint64_t n = (uint64_t)batch < fit ? batch : fit;
    return n > 0u ? (uint32_t)n : 1u;
}

/** K0 over `region`, then the first K8 (state ACTIVE). `kind` picks the handler (0: the
 *  host's `handler` with `ctx`; 1..=3: a built-in, `handler` unused), run by `lanes`
 *  emulated lanes (1..=GYRE_MAX_LANES; the host's handler runs on lane 0). `telemetry` 0:
 *  K8 only on state changes (counters written as 0). Returns GYRE_ERR_NONE, or the code
 *  the kernel faulted with (error_code and state FAULTED written): HANDLER_REJECTED when
 *  `kind` or `lanes` is out of range (the Rust side checks them first). The idle strategy
 *  applies to the calling thread; `park` (may be NULL: sleep instead) is the host's
 *  doorbell park, called with `park_ctx` once the back-off reaches its parking phase.
 *  `next` / `link_flags` / `next_type`: a pipeline stage's link (gyre/ring.h's gyre_link;
 *  next NULL: not chained); `notify` (may be NULL) is called with `notify_ctx` after the stage
 *  published to or commanded the next stage. */
uint32_t gyre_c11_start(gyre_c11_kernel *k, unsigned char *region, uint32_t kind,
                        gyre_c11_handler_fn handler, void *ctx, uint32_t lanes,
                        const gyre_c11_idle_cfg *idle, gyre_c11_park_fn park, void *park_ctx,
                        uint32_t telemetry, unsigned char *next, uint32_t link_flags,
                        uint32_t next_type, gyre_c11_notify_fn notify, void *notify_ctx,
                        gyre_c11_cost *cost) {
    gyre_control_block *cb = gyre_control(region);
    k->link.next = next;
    k->link.flags = link_flags;
    k->link.msg_type = next_type;
    gyre_c11_notify_set(notify, notify_ctx);
    if (kind > GYRE_C11_REDUCE_SUM || (kind == GYRE_C11_HOST && handler == NULL) ||
        lanes == 0u || lanes > GYRE_MAX_LANES) {
        /* A pipeline's next stage is told by the host's chain view (ChainView::state). */
        return gyre_fault(gyre_control(region), GYRE_ERR_HANDLER_REJECTED);
    }
    k->handler = handler;
    k->ctx = ctx;
    k->kind = kind;
    k->lanes = lanes;
    gyre_c11_idle_set(idle, park, park_ctx);
    gyre_c11_tsc_init();
    k->cost = cost;
    gyre_c11_cost_now = cost;
    /* A checked ring (the cost model) stages its waves: scratch for its window. */
    if ((GYRE_LOAD_ACQUIRE_U32(&cb->host_flags) & GYRE_HOST_FLAG_CHECKED) != 0u &&
        k->scratch == NULL) {
        const uint32_t slot = GYRE_LOAD_ACQUIRE_U32(&cb->slot_size);
        const uint32_t batch = GYRE_LOAD_ACQUIRE_U32(&cb->batch_size);
        if (gyre_geometry_ok(GYRE_LOAD_ACQUIRE_U32(&cb->capacity), slot, batch)) {
            k->scratch_bytes = GYRE_SCRATCH_BYTES(gyre_c11_scratch_slots(batch, slot), slot);
            k->scratch = (unsigned char *)aligned_alloc(128u, (size_t)k->scratch_bytes);
            if (k->scratch == NULL) {
                k->scratch_bytes = 0u; /* K0 faults the kernel: BAD_GEOMETRY */
            }
        }
    }
    if (!gyre_block_start(region, 0, telemetry, lanes, &k->link, k->scratch, k->scratch_bytes,
                          &k->sh, &k->r)) {
        return GYRE_LOAD_ACQUIRE_U32(&gyre_control(region)->error_code);
    }
    return GYRE_ERR_NONE;
}

/** gyre_check_slot of ring.h over `words` (a slot image, header first) of a slot with
 *  `payload` payload bytes: the C twin of gyre_abi::check::slot, for the test that they
 *  agree. */
uint64_t gyre_c11_check_slot(const uint64_t *words, uint32_t payload) {
    return gyre_check_slot(words, payload);
}

/** The most lanes a kernel emulates (GYRE_MAX_LANES). */
uint32_t gyre_c11_max_lanes(void) {
    return GYRE_MAX_LANES;
}

/** Emulates the lanes in descending order (`descending` != 0) or ascending (the default):
 *  the results must not differ (see gyre/port_c11.h). */
void gyre_c11_set_lane_order(gyre_c11_kernel *k, uint32_t descending) {
    k->descending = descending != 0u ? 1u : 0u;
}

/** Sets (f non-NULL) or clears the calling thread's GYRE_REPLIES_PUBLISHED hook: `f` is
 *  called with `ctx` after each batch whose replies the thread's kernel published. */
void gyre_c11_replies_set(gyre_c11_replies_fn f, void *ctx) {
    gyre_c11_replies_fn_ = f;
    gyre_c11_replies_ctx_ = ctx;
}

/** Runs the loop until the kernel stops (terminated, faulted). */
void gyre_c11_run(gyre_c11_kernel *k) {
    gyre_c11_lanes_descending = k->descending;
    gyre_c11_cost_now = k->cost;
    for (;;) {
        if (gyre_block_poll(&k->sh, &k->r, 1u) == GYRE_POLL_STOPPED) {
            return;
        }
        if (gyre_block_answer(&k->sh, &k->r, &k->pool) != 0u) {
            return;
        }
    }
}

/** One iteration, for single-step tests: the slow path (K1, K9, K4's head check) forced,
 *  then at most one batch. Returns the requests answered (0: none, or paused), or -1 once
 *  the kernel has stopped. Never idles. */
int64_t gyre_c11_step(gyre_c11_kernel *k) {
    uint32_t n;
    if (GYRE_STATE_IS_STOPPED(k->r.state)) {
        return -1;
    }
    gyre_c11_lanes_descending = k->descending;
    gyre_c11_cost_now = k->cost;
    k->r.slow_next = 1u;
    n = gyre_block_poll(&k->sh, &k->r, 0u);
    if (n == GYRE_POLL_STOPPED) {
        return -1;
    }
    if (n == 0u) {
        return 0;
    }
    if (gyre_block_answer(&k->sh, &k->r, &k->pool) != 0u) {
        return -1;
    }
    return (int64_t)n;
}

/** The state the kernel last wrote (GYRE_STATE_*). */
uint32_t gyre_c11_state(const gyre_c11_kernel *k) {
    return k->r.state;
}

/* ---- the loan resolver, for crates/gyre-cpu/src/loan_probe.rs --------------------- */

/** gyre_loan_resolve of gyre/loan.h over a pool at `base` / `words` of `bytes`
 *  (min block 2^min_shift) for the handle { offset, len, generation } read from request
 *  slot `idx`: GYRE_ERR_NONE with *cap set, or GYRE_ERR_BAD_LOAN. Reads the word only. */
uint32_t gyre_c11_loan_resolve(unsigned char *base, unsigned char *words, uint64_t bytes,
                               uint32_t min_shift, uint64_t offset, uint32_t len,
                               uint32_t generation, uint64_t idx, uint64_t *cap) {
    gyre_loan_pool p;
    gyre_loan_handle h;
    p.base = base;
    p.words = words;
    p.bytes = bytes;
    p.min_shift = min_shift;
    p.pad = 0u;
    h.offset = offset;
    h.len = len;
    h.generation = generation;
    return gyre_loan_resolve(&p, &h, idx, cap);
}
