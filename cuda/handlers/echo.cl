/*
 * cuda/handlers/echo.cl -- built-in kernel "echo" (gyre_core::kernels::echo, id 1), OpenCL C.
 *
 * THE OPENCL HANDLER SIGNATURE (every handler defines exactly this function before
 * cuda/ring_kernel.cl; the CUDA twin is cuda/handlers/echo.cuh):
 *
 *   uint32_t gyre_handler(uint32_t msg_type,
 *                         const __global unsigned char *req, uint32_t req_len,
 *                         __global unsigned char *reply, uint32_t reply_cap,
 *                         uint32_t *reply_len,
 *                         uint32_t lane, uint32_t lanes,
 *                         __local uint32_t *scratch);
 *
 *   msg_type   the request's slot msg_type
 *   req        the request payload, req_len bytes (req_len <= the slot payload, checked);
 *              read-only, 64-byte aligned, in the shared SVM region
 *   reply      the reply payload, reply_cap bytes (= the slot payload); 64-byte aligned;
 *              never overlaps req
 *   reply_len  out (private): the reply length in bytes (<= reply_cap, else BAD_LENGTH)
 *   lane       get_local_id(0), 0 <= lane < lanes
 *   lanes      get_local_size(0) (GYRE_CL_LANES)
 *   scratch    `lanes` words of __local memory for cooperation between lanes (OpenCL C
 *              allows __local variables only at kernel scope, so the loop provides them)
 *   returns    0 (GYRE_ERR_NONE) for a reply, or a status for an error reply:
 *              GYRE_ERR_HANDLER_REJECTED (bad request) or GYRE_ERR_USER_BASE + n
 *
 * Every work-item of the group calls it, for every request, with the same arguments except
 * lane; a handler may use barrier() (reached by every work-item: take the same path
 * everywhere). The result that counts is work-item 0's. It must not write the request or
 * outside reply[0 .. reply_cap), and must return (a persistent kernel is only as live as
 * its handler).
 */
#ifndef GYRE_HANDLER_ECHO_CL
#define GYRE_HANDLER_ECHO_CL

#include "gyre/abi.h"

/** Echo: the reply is the request, byte for byte. HANDLER_REJECTED if it does not fit the
 *  reply (never, in a slot: both have the same payload size). */
uint32_t gyre_handler(uint32_t msg_type, const __global unsigned char *req, uint32_t req_len,
                      __global unsigned char *reply, uint32_t reply_cap, uint32_t *reply_len,
                      uint32_t lane, uint32_t lanes, __local uint32_t *scratch) {
    const uint32_t vecs = req_len / 16u;
    const __global uint4 *src = (const __global uint4 *)req; /* payloads are 64-aligned */
    __global uint4 *dst = (__global uint4 *)reply;
    uint32_t i;
    (void)msg_type;
    (void)scratch;
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

#endif /* GYRE_HANDLER_ECHO_CL */
