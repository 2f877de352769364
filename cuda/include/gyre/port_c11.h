/*
 * gyre/port_c11.h -- the C11 port of the device-side ring logic (gyre/ring.h), for the
 * CPU backend: the loop runs on a host thread (crates/gyre-cpu), built with the `cc`
 * crate. Include it BEFORE gyre/handler.h and gyre/ring.h (cuda/ring_kernel_c11.c does).
 *
 *   GYRE_LOAD_ACQUIRE_U32/U64(p)      atomic_load_explicit(memory_order_acquire)
 *   GYRE_LOAD_RELAXED_U32/U64(p)      atomic_load_explicit(memory_order_relaxed)
 *   GYRE_STORE_RELEASE_U32/U64(p, v)  atomic_store_explicit(memory_order_release)
 *   GYRE_STORE_RELAXED_U32/U64(p, v)  atomic_store_explicit(memory_order_relaxed)
 *   GYRE_FENCE_SYSTEM()               atomic_thread_fence(memory_order_seq_cst), counted (and
 *                                     charged: the cost model of checked rings, below)
 *   GYRE_CAS_U64(p, expected, desired)  atomic_compare_exchange_strong (acq_rel): 1 if done
 *   GYRE_IDLE_PAUSE(r)                the kernel's idle strategy (spin, yield, then park on
 *                                     the host's doorbell, or sleep); GYRE_PAUSE() without r
 *   GYRE_PAUSE_PARKED()               whether that pause parked or slept (slow path next)
 *   GYRE_IDLE_RESET()                 work was found: the back-off starts over
 *   GYRE_NOW_NS()                     CLOCK_MONOTONIC in nanoseconds
 *   GYRE_BATCH_STAMP(), ..._ELAPSED_NS  handler time from the invariant TSC (x86_64), else
 *                                     the clock
 *   GYRE_DEVICE_FN, GYRE_GLOBAL       empty
 *   GYRE_SHARED, GYRE_BARRIER(), ...  the block, emulated: every lane of a phase in turn on
 *                                     this thread (see gyre/handler.h and below)
 *
 * The ABI fields are plain uint32_t / uint64_t (abi.h), shared with the host's Rust
 * atomics; they are accessed here through `_Atomic` views of the same objects (same size,
 * alignment and representation on every platform gyre builds for), so every access of the
 * protocol is a C11 atomic, which ThreadSanitizer sees as such.
 *
 * The idle strategy is per kernel thread (gyre_c11_idle_set, thread-local): one thread
 * runs one kernel loop.
 */
#ifndef GYRE_PORT_C11_H
#define GYRE_PORT_C11_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sched.h>

#include "abi.h"

#define GYRE_PORT_C11 1
#define GYRE_GLOBAL
#define GYRE_DEVICE_FN

#define GYRE_C11_A32(p) ((_Atomic uint32_t *)(void *)(p))
#define GYRE_C11_A64(p) ((_Atomic uint64_t *)(void *)(p))

#define GYRE_LOAD_ACQUIRE_U32(p) atomic_load_explicit(GYRE_C11_A32(p), memory_order_acquire)
#define GYRE_LOAD_ACQUIRE_U64(p) atomic_load_explicit(GYRE_C11_A64(p), memory_order_acquire)
#define GYRE_LOAD_RELAXED_U32(p) atomic_load_explicit(GYRE_C11_A32(p), memory_order_relaxed)
#define GYRE_LOAD_RELAXED_U64(p) atomic_load_explicit(GYRE_C11_A64(p), memory_order_relaxed)
#define GYRE_STORE_RELEASE_U32(p, v)                                                           \
    atomic_store_explicit(GYRE_C11_A32(p), (v), memory_order_release)
#define GYRE_STORE_RELEASE_U64(p, v)                                                           \
    atomic_store_explicit(GYRE_C11_A64(p), (v), memory_order_release)
#define GYRE_STORE_RELAXED_U32(p, v)                                                           \
    atomic_store_explicit(GYRE_C11_A32(p), (v), memory_order_relaxed)
#define GYRE_STORE_RELAXED_U64(p, v)                                                           \
    atomic_store_explicit(GYRE_C11_A64(p), (v), memory_order_relaxed)
#define GYRE_FENCE_SYSTEM() gyre_c11_fence()

/** Compare-and-swap (acq_rel on success, acquire on failure): 1 when *p was `expected` and
 *  is now `desired`, else 0 (the loan pool's state words, gyre/loan.h). */
static inline uint32_t gyre_c11_cas_u64(uint64_t *p, uint64_t expected, uint64_t desired) {
    uint64_t e = expected;
    return atomic_compare_exchange_strong_explicit(GYRE_C11_A64(p), &e, desired,
                                                   memory_order_acq_rel, memory_order_acquire)
               ? 1u
               : 0u;
}
#define GYRE_CAS_U64(p, expected, desired) gyre_c11_cas_u64((p), (expected), (desired))

/* ---- clock -------------------------------------------------------------------------- */

static inline uint64_t gyre_c11_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#define GYRE_NOW_NS() gyre_c11_now_ns()

/* ---- the cost model (checked rings, gyre/wave.h) ----------------------------------- */
/* The C11 port runs a checked ring's loop over host memory as if the rings were remote:
 * it counts what a PCIe GPU pays for (read waves, system fences, 16-byte units loaded and
 * stored, telemetry writes) and, with emulate_ns set, charges that many nanoseconds per
 * wave and per fence (a busy wait: a wave's loads are one round trip, a fence about one).
 * The counters (gyre_cpu's CostCounters, same layout) are the host's, given at
 * gyre_c11_start; the kernel's thread alone writes them, as relaxed atomics, so the host
 * may read them while it runs. */
typedef struct gyre_c11_cost {
    _Atomic uint64_t waves;            /* read waves (loads issued together, then used) */
    _Atomic uint64_t fences;           /* system-scope fences */
    _Atomic uint64_t loads;            /* 16-byte units the waves loaded */
    _Atomic uint64_t stores;           /* 16-byte units the store waves wrote */
    _Atomic uint64_t telemetry_writes; /* K8 writes of the region's telemetry line */
    _Atomic uint64_t batches;          /* batches answered */
    _Atomic uint64_t empty_polls;      /* polls that found nothing */
    _Atomic uint64_t emulate_ns;       /* charged per wave and per fence; 0: count only */
} gyre_c11_cost;

static _Thread_local gyre_c11_cost *gyre_c11_cost_now;

static inline void gyre_c11_cost_add(_Atomic uint64_t *c, uint64_t n) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/** Spins for the emulated latency of one remote round trip. */
static inline void gyre_c11_charge(const gyre_c11_cost *c) {
    const uint64_t ns = atomic_load_explicit(&c->emulate_ns, memory_order_relaxed);
    if (ns != 0u) {
        const uint64_t until = gyre_c11_now_ns() + ns;
        while (gyre_c11_now_ns() < until) {
        }
    }
}

static inline void gyre_c11_fence(void) {
    atomic_thread_fence(memory_order_seq_cst);
    if (gyre_c11_cost_now != 0) {
        gyre_c11_cost_add(&gyre_c11_cost_now->fences, 1u);
        gyre_c11_charge(gyre_c11_cost_now);
    }
}

static inline void gyre_c11_wave_end(void) {
    if (gyre_c11_cost_now != 0) {
        gyre_c11_cost_add(&gyre_c11_cost_now->waves, 1u);
        gyre_c11_charge(gyre_c11_cost_now);
    }
}

/* An ordered ring's reply is published as soon as it is written (a release store is a
 * plain store here, and the host takes it while the batch goes on), not after the batch
 * with one fence as on a GPU. */
#define GYRE_PUBLISH_EACH_REPLY 1

#define GYRE_PORT_CHECKED 1
/* One lane reads a wave slot by slot, a slot only after its sequence (acquire): the host
 * and this thread share one memory model, so nothing may race (gyre/wave.h). */
#define GYRE_WAVE_PER_SLOT 1
/* Units per lane and round: only the window bound uses it here (a wave is one round). */
#define GYRE_WAVE_UNITS 4096
#define GYRE_WAVE_PREFIX 256u
#define GYRE_UNROLL
#define GYRE_SHARED_MIN_U32(p, v)                                                              \
    do {                                                                                       \
        const uint32_t gyre_min_v_ = (v);                                                      \
        if (gyre_min_v_ < *(p)) {                                                              \
            *(p) = gyre_min_v_;                                                                \
        }                                                                                      \
    } while (0)
#define GYRE_WAVE_BEGIN() ((void)0)
#define GYRE_WAVE_END() gyre_c11_wave_end()
#define GYRE_WAVE_LOADS(units)                                                                 \
    do {                                                                                       \
        if (gyre_c11_cost_now != 0) {                                                          \
            gyre_c11_cost_add(&gyre_c11_cost_now->loads, (units));                             \
        }                                                                                      \
    } while (0)
#define GYRE_WAVE_STORES(units)                                                                \
    do {                                                                                       \
        if (gyre_c11_cost_now != 0) {                                                          \
            gyre_c11_cost_add(&gyre_c11_cost_now->stores, (units));                            \
        }                                                                                      \
    } while (0)
#define GYRE_COST_TELEMETRY()                                                                  \
    do {                                                                                       \
        if (gyre_c11_cost_now != 0) {                                                          \
            gyre_c11_cost_add(&gyre_c11_cost_now->telemetry_writes, 1u);                       \
        }                                                                                      \
    } while (0)
#define GYRE_COST_POLL(n)                                                                      \
    do {                                                                                       \
        if (gyre_c11_cost_now != 0) {                                                          \
            gyre_c11_cost_add((n) != 0u ? &gyre_c11_cost_now->batches                          \
                                        : &gyre_c11_cost_now->empty_polls,                     \
                              1u);                                                             \
        }                                                                                      \
    } while (0)

/* Handler time (GYRE_BATCH_STAMP, gyre/ring.h) from the TSC where it is invariant: a plain
 * RDTSC does not wait for earlier loads, so the request's payload load can overlap the
 * sequence load before it; clock_gettime's ordered read made it wait (39 ns more per round
 * trip, docs/benchmarks.md). Ticks become nanoseconds at the rate measured against
 * CLOCK_MONOTONIC since the kernel started (a 50 us calibration at start, then the whole
 * lifetime, so the rate only gets better). Per kernel thread, like the idle state. */
#if defined(__x86_64__) && !defined(GYRE_C11_NO_TSC)
#include <cpuid.h>
#include <x86intrin.h>

typedef struct gyre_c11_tsc {
    uint64_t tsc0;      /* TSC at start */
    uint64_t ns0;       /* CLOCK_MONOTONIC at start */
    double ns_per_tick; /* the rate, refined at every batch */
    uint32_t ok;        /* invariant TSC: use it */
} gyre_c11_tsc;

static _Thread_local gyre_c11_tsc gyre_c11_tsc_state;

/** Checks for an invariant TSC (CPUID 8000_0007h EDX bit 8) and measures its rate over
 *  about 50 us. */
static inline void gyre_c11_tsc_init(void) {
    gyre_c11_tsc *t = &gyre_c11_tsc_state;
    unsigned int a = 0u, b = 0u, c = 0u, d = 0u;
    uint64_t ns;
    t->ok = 0u;
    if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0 || (d & (1u << 8)) == 0u) {
        return;
    }
    t->tsc0 = __rdtsc();
    t->ns0 = gyre_c11_now_ns();
    do {
        ns = gyre_c11_now_ns();
    } while (ns - t->ns0 < 50000u);
    {
        const uint64_t tsc1 = __rdtsc();
        if (tsc1 <= t->tsc0) {
            return;
        }
        t->ns_per_tick = (double)(ns - t->ns0) / (double)(tsc1 - t->tsc0);
    }
    t->ok = 1u;
}

static inline uint64_t gyre_c11_batch_stamp(void) {
    return gyre_c11_tsc_state.ok ? __rdtsc() : gyre_c11_now_ns();
}

/** Nanoseconds from `stamp` to `now` (CLOCK_MONOTONIC, read just before). */
static inline uint64_t gyre_c11_batch_elapsed_ns(uint64_t stamp, uint64_t now) {
    gyre_c11_tsc *t = &gyre_c11_tsc_state;
    uint64_t tsc;
    if (!t->ok) {
        return now - stamp;
    }
    tsc = __rdtsc();
    if (tsc <= stamp) {
        return 0u;
    }
    if (now - t->ns0 >= 1000000u && tsc > t->tsc0) {
        /* A millisecond or more of history: the rate since start. */
        t->ns_per_tick = (double)(now - t->ns0) / (double)(tsc - t->tsc0);
    }
    return (uint64_t)((double)(tsc - stamp) * t->ns_per_tick);
}

#define GYRE_BATCH_STAMP() gyre_c11_batch_stamp()
#define GYRE_BATCH_ELAPSED_NS(stamp, now) gyre_c11_batch_elapsed_ns((stamp), (now))
#else
static inline void gyre_c11_tsc_init(void) {}
#endif

/* ---- idle --------------------------------------------------------------------------- */

/** The kernel's idle strategy (gyre_core::IdleStrategy): what to do after an empty poll. */
typedef struct gyre_c11_idle_cfg {
    uint32_t kind;        /* 0 busy spin, 1 back-off, 2 sleep */
    uint32_t spins;       /* back-off: empty polls with a spin hint */
    uint32_t yields;      /* back-off: then empty polls with sched_yield */
    uint32_t pad;
    uint64_t max_park_ns; /* back-off: then sleeps doubling from 1 us up to this */
    uint64_t sleep_ns;    /* sleep: after every empty poll */
} gyre_c11_idle_cfg;

#define GYRE_C11_IDLE_SPIN 0u
#define GYRE_C11_IDLE_BACKOFF 1u
#define GYRE_C11_IDLE_SLEEP 2u

/** The host's park (the doorbell of crates/gyre-core/src/doorbell.rs): announces the park,
 *  re-checks for work (a request at `tail`, a head beyond it, a command other than
 *  `last_cmd`), and parks for at most `timeout_ns` unless there is some; the host wakes it
 *  when it publishes. Returns whether it parked. */
typedef uint32_t (*gyre_c11_park_fn)(void *ctx, uint64_t tail, uint32_t last_cmd,
                                     uint64_t timeout_ns);

typedef struct gyre_c11_idler {
    gyre_c11_idle_cfg cfg;
    uint32_t n;       /* empty polls since work was last found */
    uint32_t parked;  /* the last pause slept */
    uint64_t park_ns; /* the next back-off sleep (without a doorbell) */
    gyre_c11_park_fn park;
    void *park_ctx;
} gyre_c11_idler;

static _Thread_local gyre_c11_idler gyre_c11_idle_state;

static inline void gyre_c11_idle_set(const gyre_c11_idle_cfg *cfg, gyre_c11_park_fn park,
                                     void *park_ctx) {
    gyre_c11_idle_state.cfg = *cfg;
    gyre_c11_idle_state.n = 0u;
    gyre_c11_idle_state.parked = 0u;
    gyre_c11_idle_state.park_ns = 1000u;
    gyre_c11_idle_state.park = park;
    gyre_c11_idle_state.park_ctx = park_ctx;
}

static inline void gyre_c11_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline void gyre_c11_sleep_ns(uint64_t ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / 1000000000u);
    ts.tv_nsec = (long)(ns % 1000000000u);
    nanosleep(&ts, 0);
}

static inline void gyre_c11_pause(uint64_t tail, uint32_t last_cmd) {
    gyre_c11_idler *s = &gyre_c11_idle_state;
    s->parked = 0u;
    switch (s->cfg.kind) {
    case GYRE_C11_IDLE_SLEEP:
        gyre_c11_sleep_ns(s->cfg.sleep_ns);
        s->parked = 1u;
        return;
    case GYRE_C11_IDLE_BACKOFF:
        if (s->n < s->cfg.spins) {
            s->n++;
            gyre_c11_relax();
        } else if (s->n - s->cfg.spins < s->cfg.yields) {
            s->n++;
            sched_yield();
        } else if (s->park != 0) {
            /* Parks until the host rings (a publish, a command) or max_park passes. */
            s->parked = s->park(s->park_ctx, tail, last_cmd, s->cfg.max_park_ns) != 0u;
        } else {
            gyre_c11_sleep_ns(s->park_ns);
            s->parked = 1u;
            if (s->park_ns < s->cfg.max_park_ns) {
                s->park_ns *= 2u;
                if (s->park_ns > s->cfg.max_park_ns) {
                    s->park_ns = s->cfg.max_park_ns;
                }
            }
        }
        return;
    default:
        gyre_c11_relax();
        return;
    }
}

static inline void gyre_c11_idle_reset(void) {
    gyre_c11_idle_state.n = 0u;
    gyre_c11_idle_state.park_ns = 1000u;
}

/** Told after this kernel, a pipeline stage, published to or commanded the next stage
 *  (ring.h's GYRE_NOTIFY_NEXT): the host rings the next stage's doorbell (a fence, then an
 *  unpark if it announced a park: crates/gyre-core/src/doorbell.rs). */
typedef void (*gyre_c11_notify_fn)(void *ctx);

static _Thread_local gyre_c11_notify_fn gyre_c11_notify_fn_;
static _Thread_local void *gyre_c11_notify_ctx_;

static inline void gyre_c11_notify_set(gyre_c11_notify_fn f, void *ctx) {
    gyre_c11_notify_fn_ = f;
    gyre_c11_notify_ctx_ = ctx;
}

static inline void gyre_c11_notify_next(void) {
    if (gyre_c11_notify_fn_ != 0) {
        gyre_c11_notify_fn_(gyre_c11_notify_ctx_);
    }
}

#define GYRE_NOTIFY_NEXT(r) gyre_c11_notify_next()

/** Told after each batch whose replies K7 published (ring.h's GYRE_REPLIES_PUBLISHED), when
 *  the host set it for this thread (gyre_c11_replies_set): it serves the waiters of those
 *  replies (crates/gyre-core/src/channel/bell.rs). */
typedef void (*gyre_c11_replies_fn)(void *ctx);

static _Thread_local gyre_c11_replies_fn gyre_c11_replies_fn_;
static _Thread_local void *gyre_c11_replies_ctx_;

static inline void gyre_c11_replies_published(void) {
    if (gyre_c11_replies_fn_ != 0) {
        gyre_c11_replies_fn_(gyre_c11_replies_ctx_);
    }
}

#define GYRE_REPLIES_PUBLISHED(r) gyre_c11_replies_published()

/* Every empty poll goes to the idle strategy (no extra spins in ring.h). */
#define GYRE_IDLE_SPINS 0u
#define GYRE_PAUSE() gyre_c11_pause(0u, 0u)
#define GYRE_IDLE_PAUSE(r) gyre_c11_pause((r)->tail, (r)->last_cmd)
#define GYRE_PAUSE_PARKED() gyre_c11_idle_state.parked
#define GYRE_IDLE_RESET() gyre_c11_idle_reset()

/* ---- the block, emulated (gyre/handler.h, the block loop of gyre/block.h) ---------- */
/* One host thread runs every lane: each barrier-delimited phase runs for lane 0, 1, ... in
 * turn (as CPU OpenCL implementations do), so a barrier is nothing and block-shared
 * variables are ordinary memory. The order can be reversed (lanes - 1 down to 0,
 * gyre_c11_lanes_descending, per thread): a handler that reads, in one phase, a word
 * another lane writes in the same phase (a missing barrier, a race on a GPU) then sees
 * the other value, so the tests, which run both orders, catch it. */

#ifndef GYRE_MAX_LANES
#define GYRE_MAX_LANES 256
#endif

static _Thread_local uint32_t gyre_c11_lanes_descending = 0u;

#define GYRE_SHARED
#define GYRE_BARRIER() ((void)0)
#define GYRE_LANE0_BEGIN {
#define GYRE_LANE0_END }
#define GYRE_EACH_LANE_BEGIN(lane, lanes)                                                      \
    {                                                                                          \
        uint32_t gyre_it_;                                                                     \
        for (gyre_it_ = 0u; gyre_it_ < (lanes); ++gyre_it_) {                                  \
            const uint32_t lane = gyre_c11_lanes_descending ? (lanes) - 1u - gyre_it_ : gyre_it_;
#define GYRE_EACH_LANE_END                                                                     \
    }                                                                                          \
    }
#define GYRE_LANE_STATE_DECL gyre_hlane gyre_lane_states_[GYRE_MAX_LANES]
#define GYRE_LANE_STATE(lane) (&gyre_lane_states_[(lane)])

static inline float gyre_c11_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline uint32_t gyre_c11_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
#define GYRE_AS_FLOAT(u) gyre_c11_as_float(u)
#define GYRE_AS_UINT(f) gyre_c11_as_uint(f)
/* One multiply (ISO C mode, -std=c11: GCC and Clang do not contract across statements or
 * here, a lone product). */
#define GYRE_FMUL(a, b) ((a) * (b))

#endif /* GYRE_PORT_C11_H */
