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

/* Per batch (docs/protocol.md, "The block"):
 *   lane 0: K1/K9 when due, then K2 + K3: the batch (n requests from `first`)   barrier
 *     ordered rings: lane 0 scans the slots' sequences (acquire), in place
 *     checked rings: every lane loads its share of one read wave (the window's slots and
 *       the host line) into the kernel's scratch memory; one lane per slot checks it
 *   K4..K6 per request, by teams: team t answers requests t, t + teams, ... (a team is a
 *     CUDA warp; one team of every lane elsewhere). The team leader checks the request
 *     (K4), every lane of the team runs the handler's phases with a team barrier after
 *     each (K5), the leader writes the reply's header (K6) without its sequence
 *   barrier, then the batch is published:
 *     ordered rings: lane 0 fences once, then stores every reply's sequence (K6), then K7
 *     checked rings: one lane per reply computes its check word in scratch, then every
 *       lane stores its share of the replies (one store wave, no fence); K7 waits for the
 *       slow tick (gyre_k7_flush)
 *   lane 0: gyre_ring_batch_done (handler time, K7, K8)
 * A stage whose replies go by id or fan out (gyre/link.h) answers its requests one at a
 * time with the whole block instead (gyre_block_answer_linked): K6 of those moves shared
 * scratch words.
 * Block-shared values are written by one lane between the last barrier their readers
 * passed and the next one they wait at, so no other synchronisation is needed. The reply
 * payload written by any lane before a barrier is ordered before lane 0's fence (the
 * barrier synchronises the block; the fence is cumulative). */
#ifndef GYRE_HANDLER_PHASE
#error "no handler: define GYRE_HANDLER_PHASE (a phase function, gyre/handler.h) before gyre/block.h"
#endif

#include "handler.h"

/* ---- teams (a port may define them; default: one team of every lane) ---------------- */
#ifndef GYRE_MAX_TEAMS
#define GYRE_MAX_TEAMS 1
#define GYRE_TEAMS(lanes) 1u
#define GYRE_TEAM_BEGIN(team, tlanes, lanes)                                                  \
    {                                                                                          \
        const uint32_t team = 0u;                                                              \
        const uint32_t tlanes = (lanes);
#define GYRE_TEAM_END }
#define GYRE_TEAM_BARRIER() GYRE_BARRIER()
#define GYRE_TEAM_LEADER_BEGIN GYRE_LANE0_BEGIN
#define GYRE_TEAM_LEADER_END GYRE_LANE0_END
#define GYRE_TEAM_EACH_LANE_BEGIN(lane, tlanes) GYRE_EACH_LANE_BEGIN(lane, tlanes)
#define GYRE_TEAM_EACH_LANE_END GYRE_EACH_LANE_END
#endif

/** One team's state for the request it answers (written by its leader). */
typedef struct gyre_team {
    uint64_t loan_off; /* the request's loan block: its offset in the pool */
    uint64_t loan_cap; /* and its bytes */
    uint32_t run;      /* K4 passed: run the handler */
    uint32_t msg_type;
    uint32_t len;      /* request length */
    uint32_t loan;     /* the request's loan was resolved */
    uint32_t errors;   /* error replies of this batch (not passed on) */
    uint32_t pad;
    gyre_hblock h;     /* the handler's block-shared memory */
} gyre_team;

/** What lane 0 broadcasts to the block, and the teams' memory. */
typedef struct gyre_block_shared {
    uint64_t first;     /* index of the batch's first request */
    uint64_t mask;      /* capacity - 1 (set at K0, read-only after) */
    GYRE_GLOBAL unsigned char *request_ring; /* the request ring's first slot (set at K0) */
    GYRE_GLOBAL unsigned char *reply_ring;   /* the replies' ring (a pipeline: the next's) */
    GYRE_GLOBAL unsigned char *region;       /* the region (its host line: the wave) */
    GYRE_GLOBAL unsigned char *scratch;      /* checked rings: line 0's copy, the stages */
    uint64_t t0;        /* GYRE_BATCH_STAMP() when the batch was found */
    uint64_t reply_idx; /* the linked path: the request's reply index (gyre_reply_index) */
    uint32_t ok;        /* K0 passed */
    uint32_t slot_size;
    uint32_t payload;   /* slot_size - GYRE_SLOT_HEADER_SIZE */
    uint32_t n;         /* batch length; 0 = none, GYRE_POLL_STOPPED = stopped */
    uint32_t bad_seq;   /* K4's protocol-error batch of one */
    uint32_t stopped;   /* the kernel faulted inside a batch (a CPU handler panicked) */
    uint32_t answered;  /* requests answered before a fault (n without one) */
    uint32_t lanes;     /* the block's lanes (set at K0) */
    uint32_t teams;     /* request teams (GYRE_TEAMS(lanes)) */
    uint32_t direct;    /* replies go to index idx of reply_ring (out == GYRE_OUT_DIRECT) */
    uint32_t checked;   /* GYRE_HOST_FLAG_CHECKED: staged waves, check words */
    uint32_t link_flags;  /* the poller's, for team leaders (K4) */
    uint32_t pass_status; /* the poller's, for team leaders (K4) */
    uint32_t next_type;   /* K6's message type towards a next stage (has_next) */
    uint32_t has_next;
    uint32_t window_max;  /* checked: most slots one wave reads (scratch, lanes, batch) */
    uint32_t wave_slots;  /* checked: slots this wave reads */
    uint32_t prefix;      /* checked: bytes of each slot the first wave reads */
    uint32_t first_bad;   /* checked: the first slot of the wave not ready */
    uint32_t extra;       /* checked: slot 0's units past the prefix (a second wave) */
    gyre_team team[GYRE_MAX_TEAMS];
} gyre_block_shared;

/** Where the scratch memory of a checked ring keeps the host line's copy, and where the
 *  staged requests and replies start (each `window_max` slots of slot_size bytes). */
#define GYRE_SCRATCH_LINE0 0u
#define GYRE_SCRATCH_STAGES 128u
/** Scratch bytes a checked kernel needs for `slots` slots a wave (gyre-core's
 *  `scratch_bytes`). */
#define GYRE_SCRATCH_BYTES(slots, slot_size)                                                   \
    (GYRE_SCRATCH_STAGES + 2u * (uint64_t)(slots) * (uint64_t)(slot_size))

/** Request k of the batch: its slot (ordered) or staged copy (checked). */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_block_req(GYRE_SHARED const gyre_block_shared *sh, uint32_t k) {
    if (sh->checked) {
        return sh->scratch + GYRE_SCRATCH_STAGES + (uint64_t)k * sh->slot_size;
    }
    return gyre_slot_at(sh->request_ring, sh->mask, sh->slot_size, sh->first + k);
}

/** Reply k of a direct batch: its slot (ordered) or staged copy (checked). */
static inline GYRE_DEVICE_FN GYRE_GLOBAL unsigned char *
gyre_block_rep(GYRE_SHARED const gyre_block_shared *sh, uint32_t k) {
    if (sh->checked) {
        return sh->scratch + GYRE_SCRATCH_STAGES +
               ((uint64_t)sh->window_max + k) * sh->slot_size;
    }
    return gyre_slot_at(sh->reply_ring, sh->mask, sh->slot_size, sh->first + k);
}

#if defined(GYRE_PORT_CHECKED)
/** The fields of the host line (control block line 0) a checked ring's slow tick reads,
 *  from `cb` into the scratch copy `c0` (acquire loads: the host writes them with release;
 *  the copy is the kernel's own memory). */
static inline GYRE_DEVICE_FN void gyre_copy_host_line(GYRE_GLOBAL gyre_control_block *c0,
                                                     GYRE_GLOBAL gyre_control_block *cb) {
    c0->magic = GYRE_LOAD_ACQUIRE_U32(&cb->magic);
    c0->abi_version = GYRE_LOAD_ACQUIRE_U32(&cb->abi_version);
    c0->command = GYRE_LOAD_ACQUIRE_U32(&cb->command);
    c0->h2k_head = GYRE_LOAD_ACQUIRE_U64(&cb->h2k_head);
    c0->k2h_tail = GYRE_LOAD_ACQUIRE_U64(&cb->k2h_tail);
    c0->host_heartbeat = GYRE_LOAD_ACQUIRE_U64(&cb->host_heartbeat);
}
#endif

/** K0 on lane 0 (r: lane 0's poller state, `export_tel` the export line or 0,
 *  `telemetry` 0 for state-change-only K8, `lanes` the block's size, 1..=GYRE_MAX_LANES,
 *  `link` where a pipeline stage's replies go: gyre_k0_link, `scratch` / `scratch_bytes`
 *  the memory a checked ring stages its waves in), broadcast to the block. Returns whether
 *  the kernel may run (every lane gets the same answer). A pipeline stage that fails here
 *  still tells the next stage to terminate. */
static inline GYRE_DEVICE_FN uint32_t gyre_block_start(GYRE_GLOBAL unsigned char *region,
                                                      GYRE_GLOBAL gyre_telemetry_buffer *export_tel,
                                                      uint32_t telemetry, uint32_t lanes,
                                                      const gyre_link *link,
                                                      GYRE_GLOBAL unsigned char *scratch,
                                                      uint64_t scratch_bytes,
                                                      GYRE_SHARED gyre_block_shared *sh,
                                                      gyre_ring *r) {
    GYRE_LANE0_BEGIN
    sh->ok = gyre_k0_validate(r, region) == GYRE_ERR_NONE &&
             gyre_k0_link(r, link) == GYRE_ERR_NONE;
    if (sh->ok && r->checked) {
        /* Checked rings are a lone kernel's (the host sets the flag only there), and
         * they need scratch for at least one slot. */
        if (link->next != 0 || scratch == 0 ||
            scratch_bytes < GYRE_SCRATCH_BYTES(1u, r->slot_size)) {
            sh->ok = 0u;
            gyre_fault(gyre_control(region), GYRE_ERR_BAD_GEOMETRY);
        }
    }
    if (!sh->ok && link->next != 0) {
        gyre_link_tell(link->next, link->flags);
        GYRE_NOTIFY_NEXT(r);
    }
    sh->stopped = 0u;
    sh->lanes = lanes;
    sh->teams = GYRE_TEAMS(lanes);
    if (sh->ok) {
        r->export_tel = export_tel;
        r->telemetry = telemetry != 0u ? 1u : 0u;
        sh->mask = r->mask;
        sh->request_ring = r->request_ring;
        sh->reply_ring = r->reply_ring;
        sh->region = region;
        sh->scratch = scratch;
        sh->slot_size = r->slot_size;
        sh->payload = r->payload;
        sh->direct = r->out == GYRE_OUT_DIRECT;
        sh->checked = r->checked;
        sh->link_flags = r->link_flags;
        sh->pass_status = r->pass_status;
        sh->next_type = r->next_type;
        sh->has_next = r->next_cb != 0;
        sh->window_max = 0u;
        sh->prefix = 0u;
#if defined(GYRE_PORT_CHECKED)
        if (r->checked) {
            /* Each slot's first wave reads its first `prefix` bytes; one wave holds at
             * most GYRE_WAVE_UNITS 16-byte units per lane (the host line's 4 among them),
             * and the scratch memory holds the window's requests and replies. */
            const uint64_t stages = (scratch_bytes - GYRE_SCRATCH_STAGES) / 2u / r->slot_size;
            const uint32_t units = (uint32_t)GYRE_WAVE_UNITS * lanes;
            uint64_t w;
            sh->prefix = r->slot_size < GYRE_WAVE_PREFIX ? r->slot_size : GYRE_WAVE_PREFIX;
            w = units > 4u ? (units - 4u) / (sh->prefix / 16u) : 0u;
            w = w < stages ? w : stages;
            w = w < r->batch ? w : r->batch;
            sh->window_max = w > 0u ? (uint32_t)w : 1u;
            /* The first tick reads the host line from the copy: start it from the line. */
            r->line0 = (GYRE_GLOBAL gyre_control_block *)(scratch + GYRE_SCRATCH_LINE0);
            gyre_copy_host_line(r->line0, gyre_control(region));
        }
#endif
        gyre_k8_telemetry(r, GYRE_STATE_ACTIVE);
    }
    GYRE_LANE0_END
    GYRE_BARRIER();
    return sh->ok;
}

/** A loan kernel's K4 on a team leader, after gyre_k4_check_at passed: resolves the
 *  handle in the request payload `req` of ring index `idx` (gyre/loan.h) into the team's
 *  loan_off / loan_cap and m->len (the loan's length), or answers BAD_LOAN (m->status, no
 *  handler run). Returns whether to run. */
static inline GYRE_DEVICE_FN uint32_t gyre_block_loan_in(const gyre_loan_pool *pool,
                                                        const GYRE_GLOBAL unsigned char *req,
                                                        GYRE_SHARED gyre_team *t,
                                                        gyre_slot_meta *m,
                                                        gyre_loan_handle *lh, uint64_t idx) {
    uint64_t cap = 0u;
    if (!gyre_loan_read(req, m->len, lh) ||
        gyre_loan_resolve(pool, lh, idx, &cap) != GYRE_ERR_NONE) {
        m->status = GYRE_ERR_BAD_LOAN;
        m->len = 0u;
        return 0u;
    }
    t->loan = 1u;
    t->loan_off = lh->offset;
    t->loan_cap = cap;
    m->len = lh->len;
    return 1u;
}

/** A loan kernel's K5 on a team leader: the handler's answer over the block (status, reply
 *  length up to the block's bytes, else BAD_LENGTH) becomes a reply carrying the handle of
 *  the same block with the reply's length, in `reply` (a payload of `payload` bytes). The
 *  host takes the block back once the reply is published. */
static inline GYRE_DEVICE_FN void gyre_block_loan_out(uint32_t payload,
                                                     GYRE_GLOBAL unsigned char *reply,
                                                     GYRE_SHARED gyre_team *t,
                                                     gyre_slot_meta *m,
                                                     gyre_loan_handle *lh) {
    /* BAD_LOAN is the resolver's answer alone: it tells the host the request held no
     * block, so the host frees none. A handler that held the block and says BAD_LOAN is
     * HANDLER_REJECTED, or its block would never return. */
    const uint32_t status =
        t->h.status == GYRE_ERR_BAD_LOAN ? GYRE_ERR_HANDLER_REJECTED : t->h.status;
    if (status == GYRE_ERR_NONE && (uint64_t)t->h.reply_len > t->loan_cap) {
        m->status = GYRE_ERR_BAD_LENGTH;
        m->len = 0u;
    } else {
        gyre_k5_result_at(payload, m, status, status == GYRE_ERR_NONE ? GYRE_LOAN_HANDLE_SIZE : 0u);
        if (m->status == GYRE_ERR_NONE) {
            lh->len = t->h.reply_len;
            gyre_loan_write(reply, lh);
        }
    }
}

/** K4 on a team leader for request `idx` whose header is at `req`: the verdict and what
 *  the team's lanes need into `t`, a loan resolved with `pool` (bytes 0: none). */
static inline GYRE_DEVICE_FN void gyre_team_k4(GYRE_SHARED const gyre_block_shared *sh,
                                              GYRE_SHARED gyre_team *t,
                                              const gyre_loan_pool *pool,
                                              GYRE_GLOBAL unsigned char *req, uint64_t idx,
                                              gyre_slot_meta *m, gyre_loan_handle *lh) {
    t->run = gyre_k4_check_at((const GYRE_GLOBAL gyre_slot_header *)req, idx, sh->bad_seq,
                              sh->payload, sh->link_flags, sh->pass_status, m);
    t->loan = 0u;
    if (t->run && pool->bytes != 0u) {
        t->run = gyre_block_loan_in(pool, req + GYRE_SLOT_HEADER_SIZE, t, m, lh, idx);
    }
    t->msg_type = m->msg_type;
    t->len = m->len;
    t->h.status = GYRE_ERR_NONE;
    t->h.reply_len = 0u;
    t->h.panicked = 0u;
}

/** K5: the handler's phases over request `req` / reply `rep` (payload pointers; a loan
 *  kernel's block instead, from team state `t`) on every lane of EACH_BEGIN / EACH_END
 *  (`tlanes` lanes), with BAR() after each phase. */
#define GYRE_RUN_PHASES(EACH_BEGIN, EACH_END, BAR, T_, TLANES_, REQ_, REP_, PAYLOAD_, POOL_, IDX_)   \
    {                                                                                          \
        uint32_t phase = 0u;                                                                   \
        while (phase != GYRE_PHASE_DONE) {                                                     \
            uint32_t next = GYRE_PHASE_DONE;                                                   \
            EACH_BEGIN(lane, TLANES_)                                                           \
            gyre_hcall c;                                                                      \
            c.req = (REQ_);                                                                     \
            c.reply = (REP_);                                                                   \
            c.msg_type = (T_)->msg_type;                                                        \
            c.req_len = (T_)->len;                                                              \
            c.reply_cap = (PAYLOAD_);                                                           \
            if ((T_)->loan) {                                                                   \
                c.req = (POOL_)->base + (T_)->loan_off;                                          \
                c.reply = (POOL_)->base + (T_)->loan_off;                                        \
                c.reply_cap = (uint32_t)(T_)->loan_cap;                                         \
            }                                                                                  \
            c.lane = lane;                                                                     \
            c.lanes = (TLANES_);                                                                \
            c.seq = (uint32_t)(IDX_);                                                           \
            next = GYRE_HANDLER_PHASE(phase, &c, GYRE_LANE_STATE(lane), &(T_)->h);              \
            EACH_END                                                                           \
            BAR(); /* the phase's writes, to every lane that runs it */                        \
            phase = next;                                                                      \
        }                                                                                      \
    }
/** K5 by one team (a team barrier after each phase). */
#define GYRE_TEAM_RUN_HANDLER(T_, TLANES_, REQ_, REP_, PAYLOAD_, POOL_, IDX_)                  \
    GYRE_RUN_PHASES(GYRE_TEAM_EACH_LANE_BEGIN, GYRE_TEAM_EACH_LANE_END, GYRE_TEAM_BARRIER, T_, \
                    TLANES_, REQ_, REP_, PAYLOAD_, POOL_, IDX_)
/** K5 by the whole block (a block barrier after each phase). */
#define GYRE_TEAM_RUN_HANDLER_ALL(T_, LANES_, REQ_, REP_, PAYLOAD_, POOL_, IDX_)               \
    GYRE_RUN_PHASES(GYRE_EACH_LANE_BEGIN, GYRE_EACH_LANE_END, GYRE_BARRIER, T_, LANES_, REQ_,  \
                    REP_, PAYLOAD_, POOL_, IDX_)

/** K4..K6 of a direct batch (replies at index idx of reply_ring) of sh->n requests, by
 *  teams (see the top of this file); the replies' headers written, not their sequences.
 *  A CPU backend's host handler that panics ends its team's requests there: the request
 *  is answered HANDLER_PANIC and sh->answered counts up to it (teams are 1 there). */
static inline GYRE_DEVICE_FN void gyre_block_answer_direct(GYRE_SHARED gyre_block_shared *sh,
                                                          const gyre_loan_pool *pool) {
    const uint32_t n = sh->n;
    const uint32_t teams = sh->teams;
    const uint32_t payload = sh->payload;
    GYRE_LANE_STATE_DECL;
    GYRE_TEAM_BEGIN(team, tlanes, sh->lanes)
    GYRE_SHARED gyre_team *t = &sh->team[team];
    gyre_slot_meta m;    /* the leader's */
    gyre_loan_handle lh; /* the leader's: the request's loan */
    uint32_t k;
    lh.offset = 0u; /* only a resolved loan's is used; set so no compiler sees it unset */
    lh.len = 0u;
    lh.generation = 0u;
    GYRE_TEAM_LEADER_BEGIN
    t->errors = 0u;
    GYRE_TEAM_LEADER_END
    for (k = team; k < n && sh->stopped == 0u; k += teams) {
        const uint64_t idx = sh->first + k;
        GYRE_GLOBAL unsigned char *req = gyre_block_req(sh, k);
        GYRE_GLOBAL unsigned char *rep = gyre_block_rep(sh, k);
        GYRE_TEAM_LEADER_BEGIN
        gyre_team_k4(sh, t, pool, req, idx, &m, &lh);
        GYRE_TEAM_LEADER_END
        GYRE_TEAM_BARRIER(); /* K4's verdict */
        if (t->run) {
            GYRE_TEAM_RUN_HANDLER(t, tlanes, req + GYRE_SLOT_HEADER_SIZE,
                                  rep + GYRE_SLOT_HEADER_SIZE, payload, pool, idx)
        }
        GYRE_TEAM_LEADER_BEGIN
        if (t->run && t->h.panicked != 0u) {
            m.status = GYRE_ERR_HANDLER_PANIC;
            m.len = 0u;
            sh->stopped = 1u;
            sh->answered = k + 1u;
        } else if (t->run && t->loan) {
            gyre_block_loan_out(payload, rep + GYRE_SLOT_HEADER_SIZE, t, &m, &lh);
        } else if (t->run) {
            gyre_k5_result_at(payload, &m, t->h.status, t->h.reply_len);
        }
        if (m.status != GYRE_ERR_NONE && !m.passed) {
            t->errors++;
        }
        /* K6: the header; the sequence comes with the batch's publication, or at once
         * where a release store is free and the host may take it meanwhile
         * (GYRE_PUBLISH_EACH_REPLY: the C11 port; ordered rings only). */
        gyre_k6_header((GYRE_GLOBAL gyre_slot_header *)rep, &m,
                       sh->has_next ? sh->next_type : m.msg_type);
#if defined(GYRE_PUBLISH_EACH_REPLY)
        if (!sh->checked) {
            GYRE_STORE_RELEASE_U64(&((GYRE_GLOBAL gyre_slot_header *)rep)->sequence, idx + 1u);
        }
#endif
        GYRE_TEAM_LEADER_END
        GYRE_TEAM_BARRIER(); /* the team's next K4 after this K6 (sh->stopped) */
    }
    GYRE_TEAM_END
}

/** K4..K8 for the batch of sh->n requests from sh->first of a stage whose replies go by id
 *  or fan out, one request at a time with the whole block (K6 moves the link's scratch).
 *  Returns 0, or 1 when the kernel faulted in it (a CPU backend's host handler panicked:
 *  its request is answered HANDLER_PANIC, the ones before it published, the rest left to
 *  the host). */
static inline GYRE_DEVICE_FN uint32_t gyre_block_answer_linked(GYRE_SHARED gyre_block_shared *sh,
                                                              gyre_ring *r,
                                                              const gyre_loan_pool *pool) {
    const uint32_t n = sh->n;
    const uint64_t first = sh->first;
    const uint64_t mask = sh->mask;
    const uint32_t slot_size = sh->slot_size;
    const uint32_t payload = sh->payload;
    const uint32_t lanes = sh->lanes;
    GYRE_SHARED gyre_team *t = &sh->team[0];
    gyre_slot_meta m;    /* lane 0's */
    gyre_loan_handle lh; /* lane 0's: the request's loan */
    uint32_t k;
    GYRE_LANE_STATE_DECL;
    lh.offset = 0u;
    lh.len = 0u;
    lh.generation = 0u;
    for (k = 0u; k < n; ++k) {
        const uint64_t idx = first + k;
        GYRE_GLOBAL unsigned char *req = gyre_slot_at(sh->request_ring, mask, slot_size, idx);
        GYRE_LANE0_BEGIN
        gyre_team_k4(sh, t, pool, req, idx, &m, &lh);
        sh->reply_idx = gyre_reply_index(r, idx, &m);
        GYRE_LANE0_END
        GYRE_BARRIER(); /* K4's verdict */
        if (t->run) {
            GYRE_GLOBAL unsigned char *rep =
                gyre_slot_at(sh->reply_ring, mask, slot_size, sh->reply_idx);
            GYRE_TEAM_RUN_HANDLER_ALL(t, lanes, req + GYRE_SLOT_HEADER_SIZE,
                                      rep + GYRE_SLOT_HEADER_SIZE, payload, pool, idx)
        }
        GYRE_LANE0_BEGIN
        if (t->run && t->h.panicked != 0u) {
            m.status = GYRE_ERR_HANDLER_PANIC;
            m.len = 0u;
            gyre_k6_stamp_reply(r, idx, &m);
            gyre_ring_fault_batch(r, k + 1u, GYRE_ERR_HANDLER_PANIC);
            sh->stopped = 1u;
        } else {
            if (t->run && t->loan) {
                gyre_block_loan_out(payload,
                                    gyre_slot_at(sh->reply_ring, mask, slot_size, sh->reply_idx) +
                                        GYRE_SLOT_HEADER_SIZE,
                                    t, &m, &lh);
            } else if (t->run) {
                gyre_k5_result(r, &m, t->h.status, t->h.reply_len);
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

/* What a checked ring does between empty waves (a wave is paced by its own round trip;
 * default: the idle step of ordered rings), and what the cost model counts per wave. */
#ifndef GYRE_WAVE_IDLE
#define GYRE_WAVE_IDLE(r) gyre_idle(r)
#endif
#ifndef GYRE_WAVE_LOADS
#define GYRE_WAVE_LOADS(units) ((void)0)
#endif
#ifndef GYRE_WAVE_STORES
#define GYRE_WAVE_STORES(units) ((void)0)
#endif

#include "wave.h"

/** K4..K8 for the batch of sh->n requests from sh->first, on every lane. `pool` is the
 *  kernel's loan pool (bytes 0: not a loan kernel). Returns 0, or 1 when the kernel
 *  faulted in it (a CPU backend's host handler panicked: its request is answered
 *  HANDLER_PANIC, the ones before it published, the rest left to the host). */
static inline GYRE_DEVICE_FN uint32_t gyre_block_answer(GYRE_SHARED gyre_block_shared *sh,
                                                       gyre_ring *r,
                                                       const gyre_loan_pool *pool) {
    uint32_t k;
    if (!sh->direct) {
        return gyre_block_answer_linked(sh, r, pool);
    }
    GYRE_LANE0_BEGIN
    sh->answered = sh->n;
    GYRE_LANE0_END
    if (sh->checked && pool->bytes != 0u) {
        /* A loan kernel's handlers read the pool the host wrote before it published the
         * slots, which a checked wave read without ordering: a fence on every lane (in
         * parallel: one round trip), as an acquire. */
        GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
        (void)lane;
        GYRE_FENCE_SYSTEM();
        GYRE_EACH_LANE_END
    }
    GYRE_BARRIER();
    gyre_block_answer_direct(sh, pool);
    GYRE_BARRIER(); /* every team's replies and headers */
#if defined(GYRE_PORT_CHECKED)
    if (sh->checked) {
        if (pool->bytes != 0u) {
            /* ... and the pool bytes its handlers wrote must reach the host before the
             * replies that hand them back: a release fence on every lane that wrote. */
            GYRE_EACH_LANE_BEGIN(lane, sh->lanes)
            (void)lane;
            GYRE_FENCE_SYSTEM();
            GYRE_EACH_LANE_END
            GYRE_BARRIER();
        }
        gyre_wave_publish(sh, sh->answered);
    }
#endif
    GYRE_LANE0_BEGIN
    for (k = 0u; k < sh->teams; ++k) {
        r->errors += sh->team[k].errors;
    }
#if !defined(GYRE_PUBLISH_EACH_REPLY)
    if (!sh->checked && sh->answered > 0u) {
        /* K6's sequences, one fence for the batch: every reply's payload and header (the
         * block's writes, synchronised by the barrier) before any of its sequences. */
        GYRE_FENCE_SYSTEM();
        for (k = 0u; k < sh->answered; ++k) {
            GYRE_STORE_RELAXED_U64(
                &((GYRE_GLOBAL gyre_slot_header *)gyre_block_rep(sh, k))->sequence,
                sh->first + k + 1u);
        }
    }
#endif
    if (sh->stopped) {
        gyre_ring_fault_batch(r, sh->answered, GYRE_ERR_HANDLER_PANIC);
    } else {
        gyre_ring_batch_done(r, sh->n, sh->t0);
    }
    GYRE_LANE0_END
    return sh->stopped;
}

/** Lane 0 polls once (gyre_ring_poll) and broadcasts: returns the batch length (0: none,
 *  GYRE_POLL_STOPPED: the kernel stopped), the same on every lane. `wait`: idle until
 *  there is a batch (or the kernel stops) instead of returning 0. */
static inline GYRE_DEVICE_FN uint32_t gyre_block_poll(GYRE_SHARED gyre_block_shared *sh,
                                                     gyre_ring *r, uint32_t wait) {
#if defined(GYRE_PORT_CHECKED)
    if (sh->checked) {
        for (;;) {
            const uint32_t n = gyre_wave_poll(sh, r);
            if (n != 0u || !wait) {
                return n;
            }
            GYRE_LANE0_BEGIN
            GYRE_WAVE_IDLE(r);
            GYRE_LANE0_END
        }
    }
#endif
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
 *  pipeline stage's replies go (next 0: not chained), `scratch` the memory of a checked
 *  ring's waves (0 elsewhere). */
static inline GYRE_DEVICE_FN void gyre_block_run(GYRE_GLOBAL unsigned char *region,
                                                GYRE_GLOBAL gyre_telemetry_buffer *export_tel,
                                                uint32_t telemetry, uint32_t lanes,
                                                GYRE_SHARED gyre_block_shared *sh, gyre_ring *r,
                                                const gyre_loan_pool *pool,
                                                const gyre_link *link,
                                                GYRE_GLOBAL unsigned char *scratch,
                                                uint64_t scratch_bytes) {
    if (!gyre_block_start(region, export_tel, telemetry, lanes, link, scratch, scratch_bytes,
                          sh, r)) {
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
