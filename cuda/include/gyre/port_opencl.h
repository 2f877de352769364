/*
 * gyre/port_opencl.h -- the OpenCL C 3.0 port of the device-side ring logic (gyre/ring.h),
 * and its OpenCL C 1.2 form for devices without acquire/release atomics at device scope
 * (GYRE_CL_LEGACY_ATOMICS, below: rings in device buffers, the copy strategies only).
 *
 * ring.h is written once, in plain C, over the macros below; port_cuda.h defines them for
 * CUDA, this header for OpenCL C 3.0 (built with -cl-std=CL3.0). Include it BEFORE
 * gyre/ring.h. The host side is crates/gyre-opencl (see docs/opencl.md).
 *
 * The shared region is one fine-grained SVM buffer allocated with CL_MEM_SVM_ATOMICS, so
 * the host's Rust atomics and the kernel's OpenCL C 2.0+ atomics act on the same memory.
 * Every protocol access is an atomic_load_explicit / atomic_store_explicit on a plain ABI
 * field viewed as atomic_uint / atomic_ulong (same size, same alignment):
 *
 *   GYRE_LOAD_ACQUIRE_U32/U64(p)      atomic_load_explicit(p, memory_order_acquire, SCOPE)
 *   GYRE_LOAD_RELAXED_U32/U64(p)      atomic_load_explicit(p, memory_order_relaxed, SCOPE)
 *   GYRE_STORE_RELEASE_U32/U64(p, v)  atomic_store_explicit(p, v, memory_order_release, SCOPE)
 *   GYRE_STORE_RELAXED_U32/U64(p, v)  atomic_store_explicit(p, v, memory_order_relaxed, SCOPE)
 *   GYRE_FENCE_SYSTEM()               atomic_work_item_fence(CLK_GLOBAL_MEM_FENCE,
 *                                                            memory_order_seq_cst, FENCE_SCOPE)
 *   GYRE_CAS_U64(p, e, d)             atomic_compare_exchange_strong_explicit (acq_rel)
 *   GYRE_PAUSE()                      a bounded spin (OpenCL C has no sleep)
 *   GYRE_NOW_NS()                     the device tick counter scaled to ns by the host
 *   GYRE_DEVICE_FN                    __attribute__((always_inline))
 *   GYRE_GLOBAL                       __global
 *
 * SCOPES. The other party is the host CPU, so the right scope for every protocol access is
 * memory_scope_all_svm_devices: the only scope the OpenCL memory model defines as ordering
 * accesses by the host to a fine-grained SVM buffer with atomics. The host
 * (crates/gyre-opencl/src/probe.rs, passed on by program.rs) defines
 *   GYRE_CL_ATOMIC_SCOPE  memory_scope_all_svm_devices when CL_DEVICE_ATOMIC_MEMORY_
 *                         CAPABILITIES include the all-devices scope AND the compiler
 *                         defines __opencl_c_atomic_scope_all_devices; else
 *                         memory_scope_device;
 *   GYRE_CL_FENCE_SCOPE   the same rule with CL_DEVICE_ATOMIC_FENCE_CAPABILITIES.
 * A GPU without the all-devices scope for atomics runs over device buffers and the copy
 * strategies (the host never touches the buffer but through copies); a CPU device shares
 * rings in place with device scope, because there "device"
 * is the host's own cores and coherent caches. PoCL 3.1 is that case: it reports the
 * all-devices scope for atomics (device scope only for fences) but its compiler does not
 * define the feature macro, so on PoCL both scopes are memory_scope_device.
 * docs/opencl.md says what this does and does not prove.
 *
 * CLOCK. OpenCL C has no standard wall clock. GYRE_CL_TICKS() is clock_read_device()
 * where cl_khr_kernel_clock offers it, else the compiler's cycle counter
 * (__builtin_readcyclecounter: rdtsc on x86 CPUs under PoCL, s_memrealtime/s_memtime on
 * AMD GPUs). The host measures its rate with a probe kernel (crates/gyre-opencl/src/
 * clock.rs) and passes ns per tick as GYRE_CL_NS_PER_TICK_INT + GYRE_CL_NS_PER_TICK_FRAC /
 * 2^64, so GYRE_NOW_NS() = ticks * INT + mul_hi(ticks, FRAC): no overflow, no division.
 */
#ifndef GYRE_PORT_OPENCL_H
#define GYRE_PORT_OPENCL_H

#if !defined(__OPENCL_C_VERSION__)
#error "gyre/port_opencl.h is for OpenCL C device code"
#endif
#if __OPENCL_C_VERSION__ < 200 && !defined(GYRE_CL_LEGACY_ATOMICS)
#error "gyre's ring kernel needs OpenCL C 2.0 or newer atomics (build with -cl-std=CL3.0), or GYRE_CL_LEGACY_ATOMICS"
#endif

#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable

#include "abi.h"

#define GYRE_PORT_OPENCL 1

/* Inline assembly (NVIDIA's PTX only, GYRE_CL_NVIDIA): NVIDIA's samples spell it `asm`;
 * clang's OpenCL C knows only `__asm__`. */
#if defined(__clang__)
#define GYRE_CL_ASM __asm__
#else
#define GYRE_CL_ASM asm
#endif
#define GYRE_GLOBAL __global
#define GYRE_DEVICE_FN __attribute__((always_inline))

#ifndef GYRE_CL_ATOMIC_SCOPE
#define GYRE_CL_ATOMIC_SCOPE memory_scope_device
#endif
#ifndef GYRE_CL_FENCE_SCOPE
#define GYRE_CL_FENCE_SCOPE memory_scope_device
#endif

/* ---- atomics on plain ABI fields -------------------------------------------------- */

#if defined(GYRE_CL_LEGACY_ATOMICS)
/* OpenCL C 1.2 (-cl-std=CL1.2): for a device whose OpenCL C has no acquire/release atomics
 * at device scope (NVIDIA's OpenCL 3.0 reports relaxed, work-group-scope atomics only). Only
 * the copy strategies run here: the rings are in a device buffer, which only this kernel
 * and the copy engine touch, never the host's atomics. A protocol load is a volatile load of
 * the naturally aligned word (one access: 4 or 8 bytes), a store a volatile store;
 * a fence (GYRE_CL_FENCE below) orders them where the C11 form says acquire or release
 * (after the load, before the store), and a compare-and-swap is atom_cmpxchg
 * (cl_khr_int64_base_atomics) between two fences. On NVIDIA these are ld.volatile /
 * st.volatile and membar.gl: device scope, which is what the copy engine's reads of device
 * memory need. The host (probe.rs) builds this form only for the copy strategies. */
#define GYRE_CL_V32(p) ((volatile __global uint *)(p))
#define GYRE_CL_V64(p) ((volatile __global ulong *)(p))

/* The fence. OpenCL 1.2 promises mem_fence only within one work-item, and an
 * implementation may make it a work-group fence (libclc's NVPTX: membar.cta); on NVIDIA
 * the host says so (GYRE_CL_NVIDIA) and the fence is membar.gl, device scope, with a
 * compiler barrier ("memory" clobber). */
#if defined(GYRE_CL_NVIDIA)
#define GYRE_CL_FENCE() GYRE_CL_ASM volatile("membar.gl;" ::: "memory")
#else
#define GYRE_CL_FENCE() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif

static inline GYRE_DEVICE_FN uint gyre_cl_acquired32(uint v) {
    GYRE_CL_FENCE();
    return v;
}
static inline GYRE_DEVICE_FN ulong gyre_cl_acquired64(ulong v) {
    GYRE_CL_FENCE();
    return v;
}
/* The argument (the load) is evaluated before the call, so the fence follows the load. */
#define GYRE_LOAD_ACQUIRE_U32(p) gyre_cl_acquired32(*GYRE_CL_V32(p))
#define GYRE_LOAD_ACQUIRE_U64(p) gyre_cl_acquired64(*GYRE_CL_V64(p))
#define GYRE_LOAD_RELAXED_U32(p) (*GYRE_CL_V32(p))
#define GYRE_LOAD_RELAXED_U64(p) (*GYRE_CL_V64(p))
#define GYRE_STORE_RELEASE_U32(p, v)                                                           \
    do {                                                                                       \
        GYRE_CL_FENCE();                                                                       \
        *GYRE_CL_V32(p) = (uint)(v);                                                           \
    } while (0)
#define GYRE_STORE_RELEASE_U64(p, v)                                                           \
    do {                                                                                       \
        GYRE_CL_FENCE();                                                                       \
        *GYRE_CL_V64(p) = (ulong)(v);                                                          \
    } while (0)
#define GYRE_STORE_RELAXED_U32(p, v) (*GYRE_CL_V32(p) = (uint)(v))
#define GYRE_STORE_RELAXED_U64(p, v) (*GYRE_CL_V64(p) = (ulong)(v))

/** Compare-and-swap between two fences: 1 when *p was `expected` and is now `desired`. */
static inline GYRE_DEVICE_FN uint32_t gyre_cl_cas_u64(__global uint64_t *p, uint64_t expected,
                                                      uint64_t desired) {
    GYRE_CL_FENCE();
    const ulong old = atom_cmpxchg(GYRE_CL_V64(p), (ulong)expected, (ulong)desired);
    GYRE_CL_FENCE();
    return old == (ulong)expected ? 1u : 0u;
}
#define GYRE_CAS_U64(p, expected, desired) gyre_cl_cas_u64((p), (expected), (desired))
#define GYRE_FENCE_SYSTEM() GYRE_CL_FENCE()

#else /* OpenCL C 2.0+ atomics */

#define GYRE_CL_A32(p) ((volatile __global atomic_uint *)(p))
#define GYRE_CL_A64(p) ((volatile __global atomic_ulong *)(p))

#define GYRE_LOAD_ACQUIRE_U32(p)                                                               \
    atomic_load_explicit(GYRE_CL_A32(p), memory_order_acquire, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_LOAD_ACQUIRE_U64(p)                                                               \
    atomic_load_explicit(GYRE_CL_A64(p), memory_order_acquire, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_LOAD_RELAXED_U32(p)                                                               \
    atomic_load_explicit(GYRE_CL_A32(p), memory_order_relaxed, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_LOAD_RELAXED_U64(p)                                                               \
    atomic_load_explicit(GYRE_CL_A64(p), memory_order_relaxed, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_STORE_RELEASE_U32(p, v)                                                           \
    atomic_store_explicit(GYRE_CL_A32(p), (v), memory_order_release, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_STORE_RELEASE_U64(p, v)                                                           \
    atomic_store_explicit(GYRE_CL_A64(p), (v), memory_order_release, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_STORE_RELAXED_U32(p, v)                                                           \
    atomic_store_explicit(GYRE_CL_A32(p), (v), memory_order_relaxed, GYRE_CL_ATOMIC_SCOPE)
#define GYRE_STORE_RELAXED_U64(p, v)                                                           \
    atomic_store_explicit(GYRE_CL_A64(p), (v), memory_order_relaxed, GYRE_CL_ATOMIC_SCOPE)

/** Compare-and-swap (acq_rel on success, acquire on failure): 1 when *p was `expected` and
 *  is now `desired`, else 0 (the loan pool's state words, gyre/loan.h). */
static inline GYRE_DEVICE_FN uint32_t gyre_cl_cas_u64(__global uint64_t *p, uint64_t expected,
                                                      uint64_t desired) {
    ulong e = expected;
    return atomic_compare_exchange_strong_explicit(GYRE_CL_A64(p), &e, desired,
                                                   memory_order_acq_rel, memory_order_acquire,
                                                   GYRE_CL_ATOMIC_SCOPE)
               ? 1u
               : 0u;
}
#define GYRE_CAS_U64(p, expected, desired) gyre_cl_cas_u64((p), (expected), (desired))

#define GYRE_FENCE_SYSTEM()                                                                    \
    atomic_work_item_fence(CLK_GLOBAL_MEM_FENCE, memory_order_seq_cst, GYRE_CL_FENCE_SCOPE)

#endif /* GYRE_CL_LEGACY_ATOMICS */

/* ---- pause, clock ------------------------------------------------------------------ */

/** Iterations of the empty spin GYRE_PAUSE() runs. OpenCL C has no sleep; a short spin on
 *  an atomic load keeps the polling thread off the shared cache lines for a moment.
 *  Overridable with -DGYRE_PAUSE_SPINS=... */
#ifndef GYRE_PAUSE_SPINS
#define GYRE_PAUSE_SPINS 64u
#endif

static inline GYRE_DEVICE_FN void gyre_cl_pause(void) {
    /* A private volatile counter: the compiler may not delete the loop. */
    volatile uint i;
    for (i = 0u; i < GYRE_PAUSE_SPINS; i++) {
    }
}
#define GYRE_PAUSE() gyre_cl_pause()

#if defined(GYRE_CL_NVIDIA)
/* NVIDIA: the GPU's nanosecond timer through inline PTX (the host defines GYRE_CL_NVIDIA for
 * an NVIDIA GPU, whose OpenCL C has neither cl_khr_kernel_clock nor a cycle-counter
 * builtin). Not yet compiled on an NVIDIA OpenCL driver: see docs/opencl.md. */
static inline ulong gyre_cl_nv_globaltimer(void) {
    ulong t;
    GYRE_CL_ASM volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define GYRE_CL_TICKS() gyre_cl_nv_globaltimer()
#elif defined(cl_khr_kernel_clock) && defined(__opencl_c_kernel_clock_scope_device)
#define GYRE_CL_TICKS() clock_read_device()
#elif defined(__has_builtin)
#if __has_builtin(__builtin_readcyclecounter)
#define GYRE_CL_TICKS() __builtin_readcyclecounter()
#endif
#endif
#ifndef GYRE_CL_TICKS
#error "gyre's OpenCL port needs a device clock: cl_khr_kernel_clock or __builtin_readcyclecounter"
#endif

#ifndef GYRE_CL_NS_PER_TICK_INT
#define GYRE_CL_NS_PER_TICK_INT 1ul
#endif
#ifndef GYRE_CL_NS_PER_TICK_FRAC
#define GYRE_CL_NS_PER_TICK_FRAC 0ul
#endif

static inline GYRE_DEVICE_FN uint64_t gyre_cl_now_ns(void) {
    const uint64_t t = (uint64_t)GYRE_CL_TICKS();
    return t * (uint64_t)GYRE_CL_NS_PER_TICK_INT + mul_hi(t, (uint64_t)GYRE_CL_NS_PER_TICK_FRAC);
}
#define GYRE_NOW_NS() gyre_cl_now_ns()

/* ---- the work-group (gyre/handler.h, the block loop of gyre/ring.h) ----------------- */

/** Largest work-group the loop supports (the size of the handler's block words): the
 *  work-group size the program is built for (GYRE_CL_LANES), else 256. */
#ifndef GYRE_MAX_LANES
#ifdef GYRE_CL_LANES
#define GYRE_MAX_LANES GYRE_CL_LANES
#else
#define GYRE_MAX_LANES 256
#endif
#endif
#define GYRE_SHARED __local
#define GYRE_BARRIER() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define GYRE_LANE0_BEGIN if (get_local_id(0) == 0u) {
#define GYRE_LANE0_END }
#define GYRE_EACH_LANE_BEGIN(lane, lanes) {                                                           \
        const uint32_t lane = (uint32_t)get_local_id(0);
#define GYRE_EACH_LANE_END }
#define GYRE_LANE_STATE_DECL gyre_hlane gyre_lane_state_
#define GYRE_LANE_STATE(lane) (&gyre_lane_state_)
#define GYRE_AS_FLOAT(u) as_float(u)
#define GYRE_AS_UINT(f) as_uint(f)
/* One multiply: OpenCL C contracts a * b + c only where it sees both (never here). */
#define GYRE_FMUL(a, b) ((a) * (b))

#endif /* GYRE_PORT_OPENCL_H */
