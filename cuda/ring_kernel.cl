/*
 * cuda/ring_kernel.cl -- gyre's persistent ring kernel for OpenCL C 3.0: the block loop of
 * gyre/block.h (K0..K9 of docs/protocol.md, gyre_block_run) run by one work-group, a
 * work-item per lane. Work-item 0 polls the control block and the request ring; the whole
 * work-group answers each request of a batch through the handler. The same loop runs on
 * CUDA (cuda/ring_kernel.cu) and on the CPU backend (cuda/ring_kernel_c11.c).
 *
 * HANDLER SCHEME. One program is the OpenCL port and the handler interface
 * (gyre/port_opencl.h, gyre/handler.h), the handler, then this file. The handler is either
 *   - a phase function (gyre/handler.h) the source names with
 *     `#define GYRE_HANDLER_PHASE name`: the built-ins cuda/handlers/{echo,vec_scale,
 *     reduce_sum}.h, or a user's (KernelSpec::opencl_handler / device_handler); or
 *   - a user's `unsigned int gyre_handler(...)` (docs/opencl.md), called by every
 *     work-item of the group once per request (gyre_user_phase below adapts it).
 * crates/gyre-opencl/src/program.rs concatenates them (inlining the gyre/ headers itself,
 * so no include path reaches the OpenCL compiler) and builds the result with -cl-std=CL3.0
 * and the -D options below.
 *
 * BUILD OPTIONS (defined by the host):
 *   GYRE_CL_LANES               work-group size, 1..=GYRE_MAX_LANES (default 1)
 *   GYRE_CL_ATOMIC_SCOPE        memory scope of protocol atomics (see port_opencl.h)
 *   GYRE_CL_FENCE_SCOPE         memory scope of fences
 *   GYRE_CL_NS_PER_TICK_INT/FRAC  the device clock's rate (see port_opencl.h)
 *
 * LAUNCH CONTRACT (the host launcher): ONE work-group (global size = local size =
 * GYRE_CL_LANES; any other group returns at once), a 1-D range; eight arguments: the
 * shared region as an SVM pointer (clSetKernelArgSVMPointer) to a fine-grained SVM buffer
 * with atomics (control block at 0, 128-byte aligned), then the loan pool (gyre/loan.h):
 * its bytes and its state words (SVM pointers into fine-grained SVM with atomics), its size
 * and the log2 of its smallest block (a kernel without loans passes the region twice and
 * 0, 0), then a pipeline stage's link (gyre/ring.h's gyre_link): the next stage's region
 * (SVM of the same context), the GYRE_LINK_* flags and the next stage's message type (a
 * kernel that is not chained passes the region itself and 0, 0). The command queue is in order and holds
 * only this kernel; the host calls clFlush right after the enqueue so the kernel starts
 * while the host polls. The kernel returns when its state is final: TERMINATED (drained
 * after Terminate, or the host heartbeat went stale) or FAULTED (bad control block at K0).
 *
 * The barriers (GYRE_BARRIER of port_opencl.h) carry CLK_GLOBAL_MEM_FENCE as well as
 * CLK_LOCAL_MEM_FENCE: the reply payload written by any work-item before the handler's
 * last barrier is ordered (work-group scope) before work-item 0's fence and release of the
 * reply sequence.
 */
#include "gyre/port_opencl.h"
#include "gyre/handler.h"

#ifndef GYRE_HANDLER_PHASE
/** A user's gyre_handler as a phase function: one phase; every work-item calls it, work-item
 *  0's status and reply length answer the request (docs/opencl.md). */
static inline GYRE_DEVICE_FN uint32_t gyre_user_phase(uint32_t phase, const gyre_hcall *c,
                                                      gyre_hlane *l, GYRE_SHARED gyre_hblock *b) {
    unsigned int reply_len = 0u;
    const unsigned int status = gyre_handler(c->msg_type, c->req, c->req_len, c->reply,
                                             c->reply_cap, &reply_len, c->lane, c->lanes);
    (void)phase;
    (void)l;
    if (c->lane == 0u) {
        b->status = status;
        b->reply_len = reply_len;
    }
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE gyre_user_phase
#endif

#include "gyre/block.h"

#ifndef GYRE_CL_LANES
#define GYRE_CL_LANES 1
#endif
#if GYRE_CL_LANES < 1 || GYRE_CL_LANES > GYRE_MAX_LANES
#error "GYRE_CL_LANES must be in 1..=GYRE_MAX_LANES"
#endif

__kernel __attribute__((reqd_work_group_size(GYRE_CL_LANES, 1, 1))) void
gyre_ring_kernel(__global unsigned char *region, __global unsigned char *loan_base,
                 __global unsigned char *loan_words, ulong loan_bytes, uint loan_min_shift,
                 __global unsigned char *next, uint link_flags, uint next_type) {
    __local gyre_block_shared sh;
    gyre_ring r = {0}; /* work-item 0's */
    gyre_loan_pool pool;
    gyre_link link;
    if (get_group_id(0) != 0u) {
        return; /* one work-group runs the loop */
    }
    pool.base = loan_base;
    pool.words = loan_words;
    pool.bytes = loan_bytes;
    pool.min_shift = loan_min_shift;
    pool.pad = 0u;
    link.next = next == region ? 0 : next; /* the region itself: not chained */
    link.flags = link_flags;
    link.msg_type = next_type;
    gyre_block_run(region, 0, 1u, (uint32_t)get_local_size(0), &sh, &r, &pool, &link, 0, 0u);
}
