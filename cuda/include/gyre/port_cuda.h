/*
 * gyre/port_cuda.h -- the CUDA port of the device-side ring logic (gyre/ring.h).
 *
 * ring.h is written once, in plain C, over the macros below; each device language defines
 * them in its own port header (this one for CUDA C++ under NVRTC or nvcc, port_opencl.h
 * for OpenCL C 3.0). Include the port header BEFORE gyre/ring.h.
 *
 * Every shared-memory access of the protocol is an atomic at SYSTEM scope
 * (cuda::atomic_ref<T, cuda::thread_scope_system>): the other party is the host CPU, across
 * PCIe or a coherent link, so device or block scope would not order anything for it.
 *
 *   GYRE_LOAD_ACQUIRE_U32/U64(p)      ld.acquire.sys    (p: GYRE_GLOBAL uint32_t* / uint64_t*)
 *   GYRE_LOAD_RELAXED_U32/U64(p)      ld.relaxed.sys
 *   GYRE_STORE_RELEASE_U32/U64(p, v)  st.release.sys
 *   GYRE_STORE_RELAXED_U32/U64(p, v)  st.relaxed.sys
 *   GYRE_FENCE_SYSTEM()               __threadfence_system()  (fence.sc.sys)
 *   GYRE_PAUSE()                      __nanosleep(GYRE_PAUSE_NS)  (sm_70+)
 *   GYRE_NOW_NS()                     %globaltimer: ns, device-wide, monotonic, coarse
 *                                     (its update period is 32 ns .. 1 us by GPU)
 *   GYRE_DEVICE_FN                    __device__ __attribute__((always_inline)); ring.h adds
 *                                     `static inline` itself
 *   GYRE_GLOBAL                       address space of shared-region pointers: empty
 *
 * Requires the CCCL headers (<cuda/atomic>) on the include path; NVRTC has them from the
 * CUDA toolkit's include/ or the PyPI wheel nvidia-cuda-cccl-cu12 (see docs/cuda.md).
 */
#ifndef GYRE_PORT_CUDA_H
#define GYRE_PORT_CUDA_H

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#error "gyre/port_cuda.h is for CUDA device code (nvcc or NVRTC)"
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "gyre's ring kernel needs sm_70 or newer (acquire/release at system scope, __nanosleep)"
#endif

#include <cuda/atomic>

#include "abi.h"

#define GYRE_PORT_CUDA 1
#define GYRE_GLOBAL
#define GYRE_DEVICE_FN __device__ __attribute__((always_inline))

/* ---- system-scope atomics on plain ABI fields ------------------------------------ */
/* The ABI fields are plain uint32_t / uint64_t (abi.h); cuda::atomic_ref gives them
 * atomic, ordered access without changing their type or layout. */

__device__ __forceinline__ uint32_t gyre_cuda_load_u32(uint32_t *p, cuda::memory_order mo) {
    return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).load(mo);
}
__device__ __forceinline__ uint64_t gyre_cuda_load_u64(uint64_t *p, cuda::memory_order mo) {
    return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).load(mo);
}
__device__ __forceinline__ void gyre_cuda_store_u32(uint32_t *p, uint32_t v,
                                                    cuda::memory_order mo) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, mo);
}
__device__ __forceinline__ void gyre_cuda_store_u64(uint64_t *p, uint64_t v,
                                                    cuda::memory_order mo) {
    cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).store(v, mo);
}

#define GYRE_LOAD_ACQUIRE_U32(p) gyre_cuda_load_u32((p), cuda::memory_order_acquire)
#define GYRE_LOAD_ACQUIRE_U64(p) gyre_cuda_load_u64((p), cuda::memory_order_acquire)
#define GYRE_LOAD_RELAXED_U32(p) gyre_cuda_load_u32((p), cuda::memory_order_relaxed)
#define GYRE_LOAD_RELAXED_U64(p) gyre_cuda_load_u64((p), cuda::memory_order_relaxed)
#define GYRE_STORE_RELEASE_U32(p, v) gyre_cuda_store_u32((p), (v), cuda::memory_order_release)
#define GYRE_STORE_RELEASE_U64(p, v) gyre_cuda_store_u64((p), (v), cuda::memory_order_release)
#define GYRE_STORE_RELAXED_U32(p, v) gyre_cuda_store_u32((p), (v), cuda::memory_order_relaxed)
#define GYRE_STORE_RELAXED_U64(p, v) gyre_cuda_store_u64((p), (v), cuda::memory_order_relaxed)

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

#endif /* GYRE_PORT_CUDA_H */
