/*
 * cuda/ring_kernel.cl -- gyre's persistent ring kernel for OpenCL C 3.0.
 *
 * The OpenCL twin of cuda/ring_kernel.cu: one work-group runs the loop of
 * docs/protocol.md (K0..K9) over one shared region. Work-item 0 polls the control block
 * and the request ring with the language-neutral logic of gyre/ring.h (through
 * gyre/port_opencl.h); the whole work-group answers each request of a batch through the
 * handler.
 *
 * HANDLER SCHEME. One program is the handler's source first, then this file. The handler
 * is the function `gyre_handler` with the signature documented in cuda/handlers/echo.cl;
 * the built-in ones are cuda/handlers/{echo,vec_scale,reduce_sum}.cl.
 * crates/gyre-opencl/src/program.rs concatenates them (inlining the gyre/ headers
 * itself, so no include path reaches the OpenCL compiler) and builds the result with
 * -cl-std=CL3.0 and the -D options below.
 *
 * BUILD OPTIONS (defined by the host):
 *   GYRE_CL_LANES               work-group size, 1..=GYRE_CL_MAX_LANES (default 1)
 *   GYRE_CL_ATOMIC_SCOPE        memory scope of protocol atomics (see port_opencl.h)
 *   GYRE_CL_FENCE_SCOPE         memory scope of fences
 *   GYRE_CL_NS_PER_TICK_INT/FRAC  the device clock's rate (see port_opencl.h)
 *
 * LAUNCH CONTRACT (the host launcher): ONE work-group (global size = local size =
 * GYRE_CL_LANES; any other group returns at once), a 1-D range; one argument, the shared
 * region as an SVM pointer (clSetKernelArgSVMPointer) to a fine-grained SVM buffer with
 * atomics (control block at 0, 128-byte aligned). The command queue is in order and holds
 * only this kernel; the host calls clFlush right after the enqueue so the kernel starts
 * while the host polls. The kernel returns when its state is final: TERMINATED (drained
 * after Terminate, or the host heartbeat went stale) or FAULTED (bad control block at K0).
 *
 * PER BATCH (as ring_kernel.cu, barriers in the same places):
 *   work-item 0: gyre_ring_next (K1, K9, K2, K3) -> n, first index -> __local
 *   barrier A
 *   for each request:  work-item 0: K4 -> run?, msg_type, len -> __local      barrier B1
 *                      all work-items: K5 gyre_handler (if run)                 barrier B2
 *                      work-item 0: K5 result, K6 header + fence + sequence (release)
 *   work-item 0: gyre_ring_batch_done (handler time, K7 publish, K8 telemetry)
 * The barriers carry CLK_GLOBAL_MEM_FENCE as well as CLK_LOCAL_MEM_FENCE: the reply
 * payload written by any work-item before B2 is ordered (work-group scope) before
 * work-item 0's fence and release of the reply sequence.
 */
#include "gyre/port_opencl.h"
#include "gyre/ring.h"

/** Largest work-group the loop supports (size of the handler scratch). */
#ifndef GYRE_CL_MAX_LANES
#define GYRE_CL_MAX_LANES 256
#endif
#ifndef GYRE_CL_LANES
#define GYRE_CL_LANES 1
#endif
#if GYRE_CL_LANES < 1 || GYRE_CL_LANES > GYRE_CL_MAX_LANES
#error "GYRE_CL_LANES must be in 1..=GYRE_CL_MAX_LANES"
#endif

/** What work-item 0 broadcasts to the group. */
typedef struct gyre_group_shared {
    uint64_t first;     /* index of the batch's first request */
    uint64_t mask;      /* capacity - 1 (set at K0, read-only after) */
    uint64_t reply_off; /* reply ring offset (set at K0) */
    uint32_t ok;        /* K0 passed (set at K0) */
    uint32_t slot_size; /* (set at K0) */
    uint32_t n;         /* batch length; 0 = stop */
    uint32_t run;       /* K4 passed: run the handler on this request */
    uint32_t msg_type;
    uint32_t len; /* request length */
} gyre_group_shared;

#define GYRE_CL_BARRIER() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)

__kernel __attribute__((reqd_work_group_size(GYRE_CL_LANES, 1, 1))) void
gyre_ring_kernel(__global unsigned char *region) {
    __local gyre_group_shared sh;
    __local uint32_t scratch[GYRE_CL_LANES]; /* the handler's, one word per lane */
    const uint32_t lane = (uint32_t)get_local_id(0);
    const uint32_t lanes = (uint32_t)get_local_size(0);
    gyre_ring r = {0};      /* work-item 0 only */
    gyre_slot_meta m = {0}; /* work-item 0 only */
    uint64_t t0 = 0u; /* work-item 0 only */
    uint32_t bad_seq = 0u; /* work-item 0 only */
    uint64_t mask;
    uint64_t reply_off;
    uint32_t slot_size;
    uint32_t payload;

    if (get_group_id(0) != 0u) {
        return; /* one work-group runs the loop */
    }

    /* K0: validate the control block (work-item 0); a bad one faults the kernel. */
    if (lane == 0u) {
        sh.ok = gyre_k0_validate(&r, region) == GYRE_ERR_NONE;
        if (sh.ok) {
            sh.mask = r.mask;
            sh.reply_off = r.reply_off;
            sh.slot_size = r.slot_size;
            gyre_k8_telemetry(&r, GYRE_STATE_ACTIVE);
        }
    }
    GYRE_CL_BARRIER();
    if (!sh.ok) {
        return;
    }
    mask = sh.mask;
    reply_off = sh.reply_off;
    slot_size = sh.slot_size;
    payload = slot_size - GYRE_SLOT_HEADER_SIZE;

    for (;;) {
        uint32_t n;
        uint64_t first;
        uint32_t k;
        /* K1, K9, K2, K3 on work-item 0 until there is a batch, or the kernel stopped. */
        if (lane == 0u) {
            sh.n = gyre_ring_next(&r, &bad_seq);
            sh.first = r.tail;
            t0 = GYRE_NOW_NS();
        }
        GYRE_CL_BARRIER(); /* A: the batch */
        n = sh.n;
        first = sh.first;
        if (n == 0u) {
            return; /* TERMINATED: state and telemetry written by work-item 0 */
        }
        for (k = 0u; k < n; ++k) {
            const uint64_t idx = first + k;
            uint32_t status = GYRE_ERR_NONE;
            uint32_t reply_len = 0u;
            uint32_t run;
            /* K4: check the slot (work-item 0). */
            if (lane == 0u) {
                sh.run = gyre_k4_check(&r, idx, bad_seq, &m); /* bad_seq: n == 1 */
                sh.msg_type = m.msg_type;
                sh.len = m.len;
            }
            GYRE_CL_BARRIER(); /* B1: K4's verdict */
            run = sh.run;
            if (run) {
                /* K5: every work-item of the group runs the handler on the payload. */
                const __global unsigned char *req =
                    gyre_slot_at(region, GYRE_RINGS_OFFSET, mask, slot_size, idx) +
                    GYRE_SLOT_HEADER_SIZE;
                __global unsigned char *reply =
                    gyre_slot_at(region, reply_off, mask, slot_size, idx) + GYRE_SLOT_HEADER_SIZE;
                status = gyre_handler(sh.msg_type, req, sh.len, reply, payload, &reply_len, lane,
                                      lanes, scratch);
            }
            GYRE_CL_BARRIER(); /* B2: the reply payload is written */
            if (lane == 0u) {
                if (run) {
                    gyre_k5_result(&r, &m, status, reply_len);
                }
                /* K6: header, fence, sequence last (release). */
                gyre_k6_stamp_reply(&r, idx, &m);
            }
        }
        /* Handler time, K7 publish (h2k_tail, k2h_head, processed), K8 telemetry. */
        if (lane == 0u) {
            gyre_ring_batch_done(&r, n, t0);
        }
    }
}
