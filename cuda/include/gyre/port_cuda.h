/*
 * gyre/port_cuda.h -- the CUDA port of the device-side ring logic (gyre/ring.h).
 *
 * ring.h is written once, in plain C, over the macros below; each device language defines
 * them in its own port header (this one for CUDA C++ under NVRTC or nvcc, port_opencl.h
 * for OpenCL C 3.0). Include the port header BEFORE gyre/ring.h.
 *
 * Every shared-memory access of the protocol is an atomic at SYSTEM scope: the other
 * party is the host CPU, across PCIe or a coherent link, so device or block scope would
 * not order anything for it. The accesses are written as inline PTX (as NCCL does), so
 * this header needs nothing but gyre's own headers: NVRTC compiles the ring kernel with no
 * include path at all (gyre passes abi.h, ring.h and this file in memory), and the CCCL
 * headers (<cuda/atomic>), which moved between CUDA 12 and 13, are not needed.
 *
 *   GYRE_LOAD_ACQUIRE_U32/U64(p)      ld.acquire.sys    (p: GYRE_GLOBAL uint32_t* / uint64_t*)
 *   GYRE_LOAD_RELAXED_U32/U64(p)      ld.relaxed.sys
 *   GYRE_STORE_RELEASE_U32/U64(p, v)  st.release.sys
 *   GYRE_STORE_RELAXED_U32/U64(p, v)  st.relaxed.sys
 *   GYRE_FENCE_SYSTEM()               __threadfence_system()  (fence.sc.sys)
 *   GYRE_CAS_U64(p, e, d)             atom.acq_rel.sys.cas.b64
 *   GYRE_PAUSE()                      __nanosleep(GYRE_PAUSE_NS)  (sm_70+)
 *   GYRE_NOW_NS()                     %globaltimer: ns, device-wide, monotonic, coarse
 *                                     (its update period is 32 ns .. 1 us by GPU)
 *   GYRE_DEVICE_FN                    __device__ __attribute__((always_inline)); ring.h adds
 *                                     `static inline` itself
 *   GYRE_GLOBAL                       address space of shared-region pointers: empty
 *   GYRE_SHARED, GYRE_BARRIER(), ...  the block: see gyre/handler.h (a thread per lane)
 *
 * The pointers are generic addresses (mapped pinned host memory, device memory or
 * registered host memory); the PTX uses generic addressing, which is valid for all three.
 * The "memory" clobber keeps the compiler from moving other accesses across each one.
 */
#ifndef GYRE_PORT_CUDA_H
#define GYRE_PORT_CUDA_H

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#error "gyre/port_cuda.h is for CUDA device code (nvcc or NVRTC)"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "gyre's ring kernel needs sm_70 or newer (acquire/release at system scope, __nanosleep)"
#endif

#include "abi.h"

#define GYRE_PORT_CUDA 1
#define GYRE_GLOBAL
#define GYRE_DEVICE_FN __device__ __attribute__((always_inline))

/* ---- system-scope atomics on plain ABI fields (PTX ISA 6.0, sm_70) ----------------- */
/* The ABI fields are plain uint32_t / uint64_t (abi.h); these give them atomic, ordered
 * access at system scope without changing their type or layout. */

__device__ __forceinline__ uint32_t gyre_cuda_ld_acquire_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint64_t gyre_cuda_ld_acquire_u64(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t gyre_cuda_ld_relaxed_u32(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.relaxed.sys.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint64_t gyre_cuda_ld_relaxed_u64(const uint64_t *p) {
    uint64_t v;
    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void gyre_cuda_st_release_u32(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void gyre_cuda_st_release_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void gyre_cuda_st_relaxed_u32(uint32_t *p, uint32_t v) {
    asm volatile("st.relaxed.sys.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void gyre_cuda_st_relaxed_u64(uint64_t *p, uint64_t v) {
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

#define GYRE_LOAD_ACQUIRE_U32(p) gyre_cuda_ld_acquire_u32(p)
#define GYRE_LOAD_ACQUIRE_U64(p) gyre_cuda_ld_acquire_u64(p)
#define GYRE_LOAD_RELAXED_U32(p) gyre_cuda_ld_relaxed_u32(p)
#define GYRE_LOAD_RELAXED_U64(p) gyre_cuda_ld_relaxed_u64(p)
#define GYRE_STORE_RELEASE_U32(p, v) gyre_cuda_st_release_u32((p), (v))
#define GYRE_STORE_RELEASE_U64(p, v) gyre_cuda_st_release_u64((p), (v))
#define GYRE_STORE_RELAXED_U32(p, v) gyre_cuda_st_relaxed_u32((p), (v))
#define GYRE_STORE_RELAXED_U64(p, v) gyre_cuda_st_relaxed_u64((p), (v))

/** Compare-and-swap at system scope (acq_rel): 1 when *p was `expected` and is now
 *  `desired`, else 0 (the loan pool's state words, gyre/loan.h). Atomic with the host's
 *  own compare-and-swap only where the platform makes system-scope atomics on that memory
 *  atomic for the CPU too (hostNativeAtomicSupported); see docs/loans.md. */
__device__ __forceinline__ uint32_t gyre_cuda_cas_u64(uint64_t *p, uint64_t expected,
                                                      uint64_t desired) {
    uint64_t old;
    asm volatile("atom.acq_rel.sys.cas.b64 %0, [%1], %2, %3;"
                 : "=l"(old)
                 : "l"(p), "l"(expected), "l"(desired)
                 : "memory");
    return old == expected ? 1u : 0u;
}
#define GYRE_CAS_U64(p, expected, desired) gyre_cuda_cas_u64((p), (expected), (desired))

/* ---- fence, pause, clock --------------------------------------------------------- */

#define GYRE_FENCE_SYSTEM() __threadfence_system()

/** Nanoseconds GYRE_PAUSE() sleeps for (approximately: the hardware picks a duration in
 *  [0, 2 * GYRE_PAUSE_NS]). Overridable with -DGYRE_PAUSE_NS=... */
#ifndef GYRE_PAUSE_NS
#define GYRE_PAUSE_NS 256u
#endif
#define GYRE_PAUSE() __nanosleep(GYRE_PAUSE_NS)

__device__ __forceinline__ uint64_t gyre_cuda_now_ns(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define GYRE_NOW_NS() gyre_cuda_now_ns()

/* ---- the block (gyre/handler.h, the block loop of gyre/ring.h) --------------------- */

/** Largest block the kernel is compiled for (__launch_bounds__(GYRE_MAX_LANES, 1)): one
 *  resident block per SM is all a persistent ring kernel needs, so ptxas may spend up to
 *  255 registers per thread instead of spilling to reach an occupancy nobody uses. The
 *  backend launches 128 lanes. Overridable with -DGYRE_MAX_LANES=... */
#ifndef GYRE_MAX_LANES
#define GYRE_MAX_LANES 128
#endif
#define GYRE_SHARED
#define GYRE_BARRIER() __syncthreads()
/* Teams (gyre/block.h): a warp answers one request at a time, its lanes the handler's,
 * with __syncwarp between phases; the block's warps answer a batch's requests in turn. */
#define GYRE_MAX_TEAMS (GYRE_MAX_LANES / 32)
#define GYRE_TEAMS(lanes) (((lanes) + 31u) / 32u)
#define GYRE_TEAM_BEGIN(team, tlanes, lanes)                                                   \
    {                                                                                          \
        const uint32_t team = (uint32_t)threadIdx.x >> 5;                                      \
        const uint32_t tlanes = (lanes) - 32u * team < 32u ? (lanes) - 32u * team : 32u;       \
        const uint32_t gyre_team_mask_ = tlanes >= 32u ? 0xffffffffu : ((1u << tlanes) - 1u);
#define GYRE_TEAM_END }
#define GYRE_TEAM_BARRIER() __syncwarp(gyre_team_mask_)
#define GYRE_TEAM_LEADER_BEGIN if ((threadIdx.x & 31u) == 0u) {
#define GYRE_TEAM_LEADER_END }
#define GYRE_TEAM_EACH_LANE_BEGIN(lane, tlanes) {                                              \
        const uint32_t lane = (uint32_t)threadIdx.x & 31u;
#define GYRE_TEAM_EACH_LANE_END }

/* ---- checked rings (gyre/wave.h) --------------------------------------------------- */
/* One 16-byte volatile access (ld/st.volatile = relaxed at system scope, never cached
 * stale): loads of one wave are all issued before any is used. */
#define GYRE_PORT_CHECKED 1
#ifndef GYRE_WAVE_UNITS
#define GYRE_WAVE_UNITS 8
#endif
#ifndef GYRE_WAVE_PREFIX
#define GYRE_WAVE_PREFIX 256u
#endif
#define GYRE_UNROLL _Pragma("unroll")
#define GYRE_LOAD_REMOTE_UNIT(p, a, b)                                                         \
    asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"                                   \
                 : "=l"(a), "=l"(b)                                                            \
                 : "l"(p)                                                                      \
                 : "memory")
#define GYRE_STORE_REMOTE_UNIT(p, a, b)                                                        \
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory")
#define GYRE_SHARED_MIN_U32(p, v) atomicMin((p), (v))
#define GYRE_WAVE_BEGIN() ((void)0)
#define GYRE_WAVE_END() ((void)0)
/* An empty wave already waited a round trip: poll again at once. */
#define GYRE_WAVE_IDLE(r) ((void)0)
#define GYRE_LANE0_BEGIN if (threadIdx.x == 0u) {
#define GYRE_LANE0_END }
#define GYRE_EACH_LANE_BEGIN(lane, lanes) {                                                           \
        const uint32_t lane = (uint32_t)threadIdx.x;
#define GYRE_EACH_LANE_END }
#define GYRE_LANE_STATE_DECL gyre_hlane gyre_lane_state_
#define GYRE_LANE_STATE(lane) (&gyre_lane_state_)
#define GYRE_AS_FLOAT(u) __uint_as_float(u)
#define GYRE_AS_UINT(f) __float_as_uint(f)
#define GYRE_FMUL(a, b) __fmul_rn((a), (b))

#endif /* GYRE_PORT_CUDA_H */
