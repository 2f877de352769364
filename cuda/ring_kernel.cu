/*
 * cuda/ring_kernel.cu -- gyre's persistent ring kernel for CUDA: the block loop of
 * gyre/block.h (K0..K9 of docs/protocol.md, gyre_block_run) run by one CUDA block, a thread
 * per lane. Thread 0 polls the control block and the request ring; the whole block answers
 * each request of a batch through the handler. The same loop runs on OpenCL
 * (cuda/ring_kernel.cl) and on the CPU backend (cuda/ring_kernel_c11.c).
 *
 * HANDLER SCHEME. A ring kernel is one translation unit: the CUDA port and the handler
 * interface (gyre/port_cuda.h, gyre/handler.h), the handler's source, then this file. The
 * handler is either
 *   - a phase function (gyre/handler.h) the source names with
 *     `#define GYRE_HANDLER_PHASE name`: the built-ins cuda/handlers/{echo,vec_scale,
 *     reduce_sum}.h, written once for every backend; or
 *   - a user's `__device__ unsigned int gyre_handler(...)` (docs/cuda.md), called by
 *     every thread of the block once per request (gyre_user_phase below adapts it).
 * gyre-cuda (crates/gyre-cuda/src/source.rs, ring_kernel_source) writes
 *   #include "gyre/port_cuda.h" / #include "gyre/handler.h"
 *   #line 1 "<handler>"  <the handler source>
 *   #line 1 "ring_kernel.cu"  <this file>
 * and compiles it with NVRTC at run time (the gyre/ headers in memory). By hand:
 *   nvcc -std=c++17 -arch=sm_80 -I cuda/include -I cuda -include gyre/port_cuda.h
 *     -include handlers/echo.h -ptx cuda/ring_kernel.cu
 * Without a handler this file does not compile ("identifier gyre_handler is undefined").
 *
 * LAUNCH CONTRACT (the host launcher):
 *   grid 1 block (any other block returns at once); block 1-D, blockDim.x = lanes in
 *   1..=GYRE_MAX_LANES (a multiple of 32 is best); no dynamic shared memory; five
 *   arguments: the device address of the shared region (control block at 0, 128-byte
 *   aligned), the device address of a second telemetry line K8 also writes (the telemetry
 *   export file, registered with cuMemHostRegister, so the GPU writes it directly) or 0,
 *   a pipeline stage's link (gyre/ring.h's gyre_link): the device address of the next
 *   stage's region or 0 (not chained), the GYRE_LINK_* flags and the next stage's message
 *   type; and a loan kernel's pool (gyre/loan.h's gyre_loan_pool): the device addresses
 *   of its bytes (mapped pinned memory under zero copy, device memory under a copy
 *   strategy) and of its state words (mapped pinned memory, which the kernel only reads),
 *   its size in bytes (0: not a loan kernel) and log2 of its smallest block; and the
 *   device address and size of the kernel's scratch memory (a checked ring's waves land
 *   there, gyre/wave.h: device memory, or with a null address the dynamic shared memory
 *   the launch reserved, of that size; 0 and 0 on other rings). The kernel returns when
 *   its state is final: TERMINATED (drained after Terminate, or the
 *   host heartbeat went stale) or FAULTED (bad control block at K0); it never traps.
 *
 * Per batch, gyre_block_answer (gyre/block.h): thread 0 takes the batch (on a checked ring
 * every thread loads its share of one read wave, gyre/wave.h); each warp answers every
 * fourth request (K4 on its lane 0, the handler's phases on its 32 lanes with a
 * __syncwarp after each, K6's header); then the batch is published: one system fence and
 * the sequences (fence.sc.sys is cumulative over what the barrier made visible), or on a
 * checked ring one store wave of replies carrying their check words.
 */
#include "gyre/port_cuda.h"
#include "gyre/handler.h"

#ifndef GYRE_HANDLER_PHASE
/** A user's gyre_handler as a phase function: one phase; every thread calls it, thread
 *  0's status and reply length answer the request (docs/cuda.md). */
static __device__ __forceinline__ uint32_t gyre_user_phase(uint32_t phase, const gyre_hcall *c,
                                                           gyre_hlane *l, gyre_hblock *b) {
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

/* __launch_bounds__(GYRE_MAX_LANES, 1): see GYRE_MAX_LANES in gyre/port_cuda.h. */
extern "C" __global__ void __launch_bounds__(GYRE_MAX_LANES, 1)
    gyre_ring_kernel(unsigned char *region, gyre_telemetry_buffer *export_tel,
                     unsigned char *next, unsigned int link_flags, unsigned int next_type,
                     unsigned char *loan_base, unsigned char *loan_words,
                     unsigned long long loan_bytes, unsigned int loan_shift,
                     unsigned char *scratch, unsigned long long scratch_bytes) {
    __shared__ gyre_block_shared sh;
    /* A checked ring's waves (gyre/wave.h) land here when the launch reserved dynamic
     * shared memory for them (a null scratch pointer with a size), else in `scratch`. */
    extern __shared__ __align__(16) unsigned char gyre_stage_shared[];
    gyre_ring r; /* thread 0's */
    gyre_loan_pool pool; /* a loan kernel's (bytes 0: not one) */
    gyre_link link;      /* a pipeline stage's replies go to `next` (0: not chained) */
    if (blockIdx.x != 0u || blockIdx.y != 0u || blockIdx.z != 0u) {
        return; /* one block runs the loop */
    }
    pool.base = loan_base;
    pool.words = loan_words;
    pool.bytes = (uint64_t)loan_bytes;
    pool.min_shift = loan_shift;
    pool.pad = 0u;
    link.next = next;
    link.flags = link_flags;
    link.msg_type = next_type;
    if (scratch == 0 && scratch_bytes != 0u) {
        scratch = gyre_stage_shared;
    }
    gyre_block_run(region, export_tel, 1u, (uint32_t)blockDim.x, &sh, &r, &pool, &link, scratch,
                   (uint64_t)scratch_bytes);
}
