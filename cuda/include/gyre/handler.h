/*
 * gyre/handler.h -- the interface between the block loop of gyre/block.h and a handler
 * written once for every backend (the built-ins: cuda/handlers/{echo,vec_scale,
 * reduce_sum}.h). A handler is a *phase function*, run by every lane of the block.
 *
 *   uint32_t name(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
 *                 GYRE_SHARED gyre_hblock *b);
 *
 * The loop calls it with phase 0 on every lane, then synchronises the block (a barrier),
 * then calls it again with the phase the lanes returned, and so on until they return
 * GYRE_PHASE_DONE. Every lane returns the same next phase (it may depend only on the
 * request and on block-shared values, never on the lane): lanes that disagree would wait
 * at different barriers, a hang where lanes are threads (the CPU emulation cannot see it:
 * it continues with the last lane's answer). Before returning GYRE_PHASE_DONE
 * lane 0 sets b->status (GYRE_ERR_NONE, or an error status: HANDLER_REJECTED,
 * UNKNOWN_TYPE, USER_BASE + n; other codes below USER_BASE are answered HANDLER_REJECTED)
 * and b->reply_len (<= c->reply_cap, else BAD_LENGTH).
 *
 * Between two phases every lane's writes to b (block-shared memory) and to the reply are
 * visible to every lane. Values a lane keeps from one phase to the next live in *l (its
 * own gyre_hlane); locals do not survive a phase. So the same source runs where lanes are
 * threads (CUDA: a block; OpenCL: a work-group) and where they are emulated (the C11 port
 * of the CPU backend runs each phase for lane 0, 1, ... in turn, as CPU OpenCL
 * implementations do), and every multi-lane line executes on the CPU backend too.
 *
 * The port header defines, besides the atomics of ring.h:
 *
 *   GYRE_SHARED                 address space of block-shared memory (OpenCL: __local)
 *   GYRE_MAX_LANES              the most lanes a block may have (b->words has one each)
 *   GYRE_AS_FLOAT(u)/AS_UINT(f) reinterpret the bits of a 32-bit word
 *   GYRE_FMUL(a, b)             one IEEE f32 multiply, rounded to nearest, never fused
 *
 * and, for the block loop: GYRE_BARRIER(), GYRE_LANE0_BEGIN / _END (code lane 0 runs),
 * GYRE_EACH_LANE_BEGIN(lane, lanes) / _END (code every lane runs, `lane` its index),
 * GYRE_LANE_STATE_DECL / GYRE_LANE_STATE(lane) (the lanes' gyre_hlane).
 */
#ifndef GYRE_HANDLER_H
#define GYRE_HANDLER_H

#if !defined(GYRE_SHARED) || !defined(GYRE_MAX_LANES) || !defined(GYRE_AS_FLOAT) ||           \
    !defined(GYRE_FMUL) || !defined(GYRE_BARRIER)
#error "include a gyre port header (gyre/port_cuda.h, port_opencl.h, port_c11.h) before gyre/handler.h"
#endif

#include "abi.h"

/** What a handler's phase returns once the handler is done. */
#define GYRE_PHASE_DONE 0xffffffffu

/** One request, as one lane sees it. */
typedef struct gyre_hcall {
    const GYRE_GLOBAL unsigned char *req; /* the request payload, req_len bytes, read-only */
    GYRE_GLOBAL unsigned char *reply;     /* the reply payload, reply_cap bytes */
    uint32_t msg_type;
    uint32_t req_len;   /* <= the slot payload (checked by K4) */
    uint32_t reply_cap; /* the slot payload */
    uint32_t lane;      /* 0 <= lane < lanes */
    uint32_t lanes;
    uint32_t seq; /* the low 32 bits of the request's ring index (a loan's slot tag) */
} gyre_hcall;

/** A lane's own values, kept from one phase to the next. */
typedef struct gyre_hlane {
    uint64_t u64;
    uint32_t u32;
    float f32;
} gyre_hlane;

/** The block's: the handler's answer (lane 0 writes it), and one word per lane for
 *  cooperation between lanes. */
typedef struct gyre_hblock {
    uint32_t status;
    uint32_t reply_len;
    uint32_t panicked; /* the CPU backend's host handler panicked (set by its adapter) */
    uint32_t pad;
    uint32_t words[GYRE_MAX_LANES];
} gyre_hblock;

#endif /* GYRE_HANDLER_H */
