/*
 * cuda/ring_kernel.cu -- gyre's persistent ring kernel for CUDA.
 *
 * One block runs the loop of docs/protocol.md (K0..K9) over one shared region: thread 0
 * polls the control block and the request ring with the language-neutral logic of
 * gyre/ring.h; the whole block answers each request of a batch through the handler.
 *
 * HANDLER SCHEME. A ring kernel is one translation unit: the handler's source first, then
 * this file. The handler is the __device__ function `gyre_handler` with the signature
 * documented in cuda/handlers/echo.cuh (and docs/cuda.md); the built-in ones are
 * cuda/handlers/{echo,vec_scale,reduce_sum}.cuh, a user's own has the same signature.
 *   - gyre-cuda (crates/gyre-cuda/src/nvrtc.rs, ring_kernel_source) concatenates
 *     `#line 1 "<handler>"`, the handler source, `#line 1 "ring_kernel.cu"`, this file,
 *     and compiles the result with NVRTC at run time (include path: cuda/include and the
 *     CCCL headers).
 *   - by hand: nvcc -std=c++17 -arch=sm_80 -I cuda/include -I cuda
 *       -include handlers/echo.cuh -ptx cuda/ring_kernel.cu
 *     (NVRTC's equivalent of -include is --pre-include).
 * Without a handler this file does not compile ("identifier gyre_handler is undefined").
 *
 * LAUNCH CONTRACT (the host launcher):
 *   grid 1 block (any other block returns at once); block 1-D, blockDim.x = lanes in
 *   1..=GYRE_MAX_LANES (a multiple of 32 is best); no dynamic shared memory; two arguments:
 *   the device address of the shared region (control block at 0, 128-byte aligned), and
 *   the device address of a second telemetry line K8 also writes (the telemetry export
 *   file, registered with cuMemHostRegister, so the GPU writes it directly) or 0. The
 *   kernel returns when its state is final: TERMINATED (drained after Terminate, or the
 *   host heartbeat went stale) or FAULTED (bad control block at K0); it never traps.
 *
 * PER BATCH:
 *   thread 0: gyre_ring_next (K1, K9, K2, K3) -> n, first index -> shared memory
 *   barrier A
 *   for each request:  thread 0: K4 -> run?, msg_type, len -> shared     barrier B1
 *                      all threads: K5 gyre_handler (if run)               barrier B2
 *                      thread 0: K5 result, K6 header + system fence + sequence (release)
 *   thread 0: gyre_ring_batch_done (handler time, K7 publish, K8 telemetry)
 * Shared variables are written by thread 0 only between the last barrier their readers
 * passed and the next one they will wait at, so no other synchronisation is needed.
 * The reply payload written by any thread before B2 is ordered before thread 0's fence
 * and release (the barrier synchronises the block; PTX release is cumulative).
 */
#include "gyre/port_cuda.h"
#include "gyre/ring.h"

/** Largest block the kernel is compiled for (__launch_bounds__(GYRE_MAX_LANES, 1)): one
 *  resident block per SM is all a persistent ring kernel needs, so ptxas may spend up to
 *  255 registers per thread instead of spilling to reach an occupancy nobody uses (with
 *  the default minimum it spilled 8 bytes on some handler x arch pairs). The backend
 *  launches 128 lanes. Overridable with -DGYRE_MAX_LANES=... */
#ifndef GYRE_MAX_LANES
#define GYRE_MAX_LANES 128
#endif

/** What thread 0 broadcasts to the block. */
typedef struct gyre_block_shared {
    uint64_t first;    /* index of the batch's first request */
    uint64_t mask;     /* capacity - 1 (set at K0, read-only after) */
    uint64_t reply_off; /* reply ring offset (set at K0) */
    uint32_t ok;        /* K0 passed (set at K0) */
    uint32_t slot_size; /* (set at K0) */
    uint32_t n;         /* batch length; 0 = stop */
    uint32_t run;       /* K4 passed: run the handler on this request */
    uint32_t msg_type;
    uint32_t len; /* request length */
} gyre_block_shared;

extern "C" __global__ void __launch_bounds__(GYRE_MAX_LANES, 1)
    gyre_ring_kernel(unsigned char *region, gyre_telemetry_buffer *export_tel) {
    __shared__ gyre_block_shared sh;
    const unsigned int lane = threadIdx.x;
    const unsigned int lanes = blockDim.x;
    gyre_ring r;      /* thread 0 only */
    gyre_slot_meta m; /* thread 0 only */
    uint64_t t0 = 0;  /* thread 0 only */
    uint32_t bad_seq = 0; /* thread 0 only */
    uint64_t mask;
    uint64_t reply_off;
    uint32_t slot_size;
    uint32_t payload;

    if (blockIdx.x != 0u || blockIdx.y != 0u || blockIdx.z != 0u) {
        return; /* one block runs the loop */
    }

    /* K0: validate the control block (thread 0); a bad one faults the kernel, no trap. */
    if (lane == 0u) {
        sh.ok = gyre_k0_validate(&r, region) == GYRE_ERR_NONE;
        if (sh.ok) {
            r.export_tel = export_tel; /* 0, or the registered export file's line */
            sh.mask = r.mask;
            sh.reply_off = r.reply_off;
            sh.slot_size = r.slot_size;
            gyre_k8_telemetry(&r, GYRE_STATE_ACTIVE);
        }
    }
    __syncthreads();
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
        /* K1, K9, K2, K3 on thread 0 until there is a batch, or the kernel stopped. */
        if (lane == 0u) {
            sh.n = gyre_ring_next(&r, &bad_seq);
            sh.first = r.tail;
            t0 = GYRE_NOW_NS();
        }
        __syncthreads(); /* A: the batch */
        n = sh.n;
        first = sh.first;
        if (n == 0u) {
            return; /* TERMINATED: state and telemetry written by thread 0 */
        }
        for (k = 0u; k < n; ++k) {
            const uint64_t idx = first + k;
            uint32_t status = GYRE_ERR_NONE;
            uint32_t reply_len = 0u;
            /* K4: check the slot (thread 0). */
            if (lane == 0u) {
                sh.run = gyre_k4_check(&r, idx, bad_seq, &m); /* bad_seq: n == 1 */
                sh.msg_type = m.msg_type;
                sh.len = m.len;
            }
            __syncthreads(); /* B1: K4's verdict */
            if (sh.run) {
                /* K5: every thread of the block runs the handler on the payload. */
                const unsigned char *req =
                    gyre_slot_at(region, GYRE_RINGS_OFFSET, mask, slot_size, idx) +
                    GYRE_SLOT_HEADER_SIZE;
                unsigned char *reply =
                    gyre_slot_at(region, reply_off, mask, slot_size, idx) + GYRE_SLOT_HEADER_SIZE;
                status = gyre_handler(sh.msg_type, req, sh.len, reply, payload, &reply_len, lane,
                                      lanes);
            }
            __syncthreads(); /* B2: the reply payload is written */
            if (lane == 0u) {
                if (sh.run) {
                    gyre_k5_result(&r, &m, status, reply_len);
                }
                /* K6: header, system fence, sequence last (release). */
                gyre_k6_stamp_reply(&r, idx, &m);
            }
        }
        /* Handler time, K7 publish (h2k_tail, k2h_head, processed), K8 telemetry. */
        if (lane == 0u) {
            gyre_ring_batch_done(&r, n, t0);
        }
    }
}
