/*
 * cuda/ring_kernel.cl -- gyre's persistent ring kernel for OpenCL C 3.0: the block loop of
 * gyre/block.h (K0..K9 of docs/protocol.md, gyre_block_run) run by one work-group, a
 * work-item per lane. Work-item 0 polls the control block and the request ring; the whole
 * work-group answers each request of a batch through the handler. The same loop runs on
 * CUDA (cuda/ring_kernel.cu) and on the CPU backend (cuda/ring_kernel_c11.c).
 *
 * HANDLER SCHEME. One program is the OpenCL port and the handler interface
 * (gyre/port_opencl.h, gyre/handler.h), a built-in handler (cuda/handlers/{echo,vec_scale,
 * reduce_sum}.h, which names its phase function with GYRE_HANDLER_PHASE), then this file.
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
 * GYRE_CL_LANES; any other group returns at once), a 1-D range; one argument, the shared
 * region as an SVM pointer (clSetKernelArgSVMPointer) to a fine-grained SVM buffer with
 * atomics (control block at 0, 128-byte aligned). The command queue is in order and holds
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
#error "no handler: the program must hold a built-in handler (cuda/handlers) before ring_kernel.cl"
#endif

#include "gyre/block.h"

#ifndef GYRE_CL_LANES
#define GYRE_CL_LANES 1
#endif
#if GYRE_CL_LANES < 1 || GYRE_CL_LANES > GYRE_MAX_LANES
#error "GYRE_CL_LANES must be in 1..=GYRE_MAX_LANES"
#endif

__kernel __attribute__((reqd_work_group_size(GYRE_CL_LANES, 1, 1))) void
gyre_ring_kernel(__global unsigned char *region) {
    __local gyre_block_shared sh;
    gyre_ring r = {0}; /* work-item 0's */
    if (get_group_id(0) != 0u) {
        return; /* one work-group runs the loop */
    }
    gyre_block_run(region, 0, 1u, (uint32_t)get_local_size(0), &sh, &r);
}
