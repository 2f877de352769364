/*
 * cuda/handlers/echo.cuh -- built-in kernel "echo" (gyre_core::kernels::echo, id 1).
 *
 * THE HANDLER SIGNATURE (every handler, built-in or user-supplied, defines exactly this
 * function before cuda/ring_kernel.cu; see that file and docs/cuda.md):
 *
 *   __device__ unsigned int gyre_handler(unsigned int msg_type,
 *                                        const unsigned char *req, unsigned int req_len,
 *                                        unsigned char *reply, unsigned int reply_cap,
 *                                        unsigned int *reply_len,
 *                                        unsigned int lane, unsigned int lanes);
 *
 *   msg_type   the request's slot msg_type
 *   req        the request payload, req_len bytes (req_len <= the slot payload, checked);
 *              read-only, 64-byte aligned, in the shared region (possibly host memory)
 *   reply      the reply payload, reply_cap bytes (= the slot payload); 64-byte aligned;
 *              never overlaps req
 *   reply_len  out: the reply length in bytes (must be <= reply_cap, else BAD_LENGTH)
 *   lane       this thread's index in the block (threadIdx.x), 0 <= lane < lanes
 *   lanes      the number of threads in the block (blockDim.x)
 *   returns    0 (GYRE_ERR_NONE) for a reply, or a status for an error reply:
 *              GYRE_ERR_HANDLER_REJECTED (bad request) or GYRE_ERR_USER_BASE + n
 *
 * Every thread of the block calls it, for every request, with the same arguments except
 * lane, so a handler may use the block cooperatively: stride over lanes, __shared__
 * memory, __syncthreads() (reached by all threads: take the same path everywhere). The
 * result that counts is thread 0's (its return value and *reply_len); the loop
 * synchronises the block before and after each call, so writes by any thread to `reply`
 * are published with the reply, and __shared__ memory may be reused across calls. It must
 * not write the request or outside reply[0 .. reply_cap), and must return (a persistent
 * kernel is only as live as its handler).
 */
#ifndef GYRE_HANDLER_ECHO_CUH
#define GYRE_HANDLER_ECHO_CUH

#include "gyre/abi.h"

/** Echo: the reply is the request, byte for byte. HANDLER_REJECTED if it does not fit the
 *  reply (never, in a slot: both have the same payload size). */
__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    const unsigned int vecs = req_len / 16u;
    const uint4 *src = (const uint4 *)req; /* 16-byte aligned: payloads are 64-aligned */
    uint4 *dst = (uint4 *)reply;
    unsigned int i;
    (void)msg_type;
    if (req_len > reply_cap) {
        return GYRE_ERR_HANDLER_REJECTED;
    }
    for (i = lane; i < vecs; i += lanes) {
        dst[i] = src[i];
    }
    for (i = vecs * 16u + lane; i < req_len; i += lanes) {
        reply[i] = req[i];
    }
    *reply_len = req_len;
    return GYRE_ERR_NONE;
}

#endif /* GYRE_HANDLER_ECHO_CUH */
