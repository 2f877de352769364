/*
 * gyre/abi.h -- the shared-memory ABI of gyre, for C, C++ and CUDA (nvcc / NVRTC).
 *
 * This header is a MIRROR of crates/gyre-abi/src/lib.rs, which is the single source of
 * truth. Do not change a layout or a value here without changing it there first (and
 * bumping ABI_VERSION when the layout or protocol changes).
 *
 * Agreement is checked twice:
 *   - at compile time, by the GYRE_STATIC_ASSERTs at the end of this file (sizeof,
 *     alignof and the offsetof of every field), which mirror the const_asserts in
 *     lib.rs;
 *   - by the test crates/gyre-abi/tests/c_probe.rs, which compiles a probe program
 *     against this header with the host C compiler (and the header alone as C++17),
 *     and compares every size, alignment, field offset, field size and constant with
 *     the Rust definitions.
 *
 * Single-writer-per-line rule: gyre_control_block is two 64-byte cache lines.
 * Line 0 (bytes 0..64) is written ONLY by the host, line 1 (bytes 64..128) ONLY by the
 * kernel. No field is written by both sides, so the protocol needs no read-modify-write
 * atomics across PCIe. gyre_telemetry_buffer is written only by the kernel (under a
 * sequence lock). In a slot, the producer writes `sequence` last, with release.
 *
 * Fields that are atomics in Rust (AtomicU32 / AtomicU64) are plain uint32_t /
 * uint64_t here, with the same size and alignment; device code accesses them through
 * cuda::atomic_ref (or volatile / atomic intrinsics) with the orderings documented in
 * lib.rs.
 *
 * Compiles as C11, C++11 and later, CUDA C++ (nvcc) and NVRTC (no host headers: the
 * fixed-width types are defined here from unsigned int / unsigned long long), and OpenCL C
 * 3.0 (uint32_t / uint64_t from OpenCL's uint / ulong, offsetof from the compiler
 * builtin, alignment through __attribute__((aligned))).
 */
#ifndef GYRE_ABI_H
#define GYRE_ABI_H

/* ---- fixed-width types and offsetof ---------------------------------------------- */
#if defined(__OPENCL_C_VERSION__)
/* OpenCL C has no <stdint.h> / <stddef.h>; uint and ulong are exactly 32 and 64 bits. */
#ifndef GYRE_NO_STDINT_TYPEDEFS
typedef uint uint32_t;
typedef ulong uint64_t;
#endif
#define GYRE_OFFSETOF(type, field) __builtin_offsetof(type, field)
#elif defined(__CUDACC_RTC__)
/* NVRTC provides no <stdint.h> / <stddef.h>. Define GYRE_NO_STDINT_TYPEDEFS when the
 * program already has uint32_t / uint64_t in the global namespace. */
#ifndef GYRE_NO_STDINT_TYPEDEFS
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#endif
/* NVRTC's front end (EDG, not in GNU mode) has no __builtin_offsetof; __INTADDR__ is
 * its offsetof primitive and yields an integral constant expression. Overridable. */
#ifndef GYRE_OFFSETOF
#define GYRE_OFFSETOF(type, field) ((unsigned long long)__INTADDR__(&(((type *)0)->field)))
#endif
#else
#include <stddef.h>
#include <stdint.h>
#define GYRE_OFFSETOF(type, field) offsetof(type, field)
#endif

/* ---- alignment and static assertions (C11, C++11, CUDA) -------------------------- */
/* GYRE_ALIGN(n) is placed on the FIRST member of a struct: that raises the struct's
 * alignment to n (C11 _Alignas cannot be applied to a struct type itself). */
#if defined(__OPENCL_C_VERSION__)
/* OpenCL C is C99-based: no _Alignas / _Alignof keywords in the language. */
#define GYRE_ALIGN(n) __attribute__((aligned(n)))
#define GYRE_ALIGNOF(type) __alignof__(type)
#define GYRE_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#elif defined(__cplusplus)
#define GYRE_ALIGN(n) alignas(n)
#define GYRE_ALIGNOF(type) alignof(type)
#define GYRE_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define GYRE_ALIGN(n) _Alignas(n)
#define GYRE_ALIGNOF(type) _Alignof(type)
#define GYRE_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ---- constants (gyre_abi::*) ------------------------------------------------------ */
/** "GYRE" in little-endian ASCII; the first word of every control block. */
#define GYRE_MAGIC 0x45525947u
/** Version of this ABI; bumped on any layout or protocol change, checked at launch. */
#define GYRE_ABI_VERSION 6u

/** Alignment (and size granularity) of a message slot, in bytes. */
#define GYRE_SLOT_ALIGN 128u
/** sizeof(gyre_slot_header); the payload of a slot starts at this offset. */
#define GYRE_SLOT_HEADER_SIZE 64u
/** Smallest legal slot size (= GYRE_SLOT_ALIGN). */
#define GYRE_MIN_SLOT_SIZE 128u
/** Largest legal slot size (1 MiB). */
#define GYRE_MAX_SLOT_SIZE 0x100000u
/** Smallest legal ring capacity. */
#define GYRE_MIN_CAPACITY 2u
/** Largest legal ring capacity (2^24 slots). */
#define GYRE_MAX_CAPACITY 0x1000000u

/* Host commands (gyre_abi::command), written to gyre_control_block.command. */
#define GYRE_CMD_RUN 1u
#define GYRE_CMD_PAUSE 2u
#define GYRE_CMD_TERMINATE 3u
/** Stop at the next batch boundary for a successor (state HANDED_OVER, then exit). */
#define GYRE_CMD_HANDOVER 4u

/* Kernel states (gyre_abi::state), written to gyre_control_block.state.
 * LAUNCHING -> ACTIVE <-> PAUSED -> DRAINING -> TERMINATED, FAULTED from any state,
 * HANDED_OVER from any non-final state (a successor then writes LAUNCHING again);
 * zeroed memory reads as UNINIT. */
#define GYRE_STATE_UNINIT 0u
#define GYRE_STATE_LAUNCHING 1u
#define GYRE_STATE_ACTIVE 2u
#define GYRE_STATE_PAUSED 3u
#define GYRE_STATE_DRAINING 4u
#define GYRE_STATE_TERMINATED 5u
#define GYRE_STATE_FAULTED 6u
#define GYRE_STATE_HANDED_OVER 7u
/** Whether state `s` is one the kernel never leaves (gyre_abi::state::is_final). */
#define GYRE_STATE_IS_FINAL(s) ((s) == GYRE_STATE_TERMINATED || (s) == GYRE_STATE_FAULTED)
/** Whether the loop has stopped in state `s`: final, or handed over to a successor
 *  (gyre_abi::state::is_stopped). */
#define GYRE_STATE_IS_STOPPED(s) (GYRE_STATE_IS_FINAL(s) || (s) == GYRE_STATE_HANDED_OVER)

/* Error codes (gyre_abi::error): gyre_control_block.error_code and
 * gyre_slot_header.status. */
#define GYRE_ERR_NONE 0u
#define GYRE_ERR_HANDLER_PANIC 1u
#define GYRE_ERR_BAD_SEQUENCE 2u
#define GYRE_ERR_BAD_LENGTH 3u
#define GYRE_ERR_BAD_MAGIC 4u
#define GYRE_ERR_BAD_ABI_VERSION 5u
#define GYRE_ERR_BAD_GEOMETRY 6u
#define GYRE_ERR_HOST_HEARTBEAT_STALE 7u
#define GYRE_ERR_HANDLER_REJECTED 8u
#define GYRE_ERR_UNKNOWN_TYPE 9u
#define GYRE_ERR_KERNEL_GONE 10u
#define GYRE_ERR_TRANSFER_FAILED 11u
#define GYRE_ERR_BAD_LOAN 12u
/** A pipeline stage stopped because the next stage stopped for good. */
#define GYRE_ERR_STAGE_STOPPED 13u
/** First code available to user handlers. */
#define GYRE_ERR_USER_BASE 0x1000u

/* Pipeline links (gyre_abi::link, docs/pipelines.md): flags of a stage's kernel argument. */
/** The next region is the chain's head: its reply ring, k2h_head and k2h_tail. */
#define GYRE_LINK_TO_HEAD 0x1u
/** Requests come from an earlier stage: a non-zero status is passed on. */
#define GYRE_LINK_FROM_STAGE 0x2u
/** The link is a gyre_join: replies are written at their correlation id's index of the
 *  target's ring (a join stage's requests, or the head's replies with TO_HEAD). */
#define GYRE_LINK_BY_ID 0x4u
/** The link is a gyre_route: each reply goes to one of its branches. */
#define GYRE_LINK_FAN_OUT 0x8u
/** Answer each request with this stage's request index as its correlation id. */
#define GYRE_LINK_OWN_ID 0x10u
/** The stage is in a fan-out's branch (indices not the host's): no protocol-error reply. */
#define GYRE_LINK_BRANCH 0x20u
/** The host relaunches this stage after a handler fault: hand over (HANDED_OVER, the code
 *  in error_code) instead of faulting, and tell no next stage to terminate. */
#define GYRE_LINK_RESTARTS 0x40u
/* Fan-out routes (gyre_abi::route), gyre_route.mode. */
#define GYRE_ROUTE_MAX_BRANCHES 8u
/** Branch i mod count for the stage's i-th reply. */
#define GYRE_ROUTE_ROUND_ROBIN 0u
/** Branch splitmix64(key) mod count; key: the little-endian u64 at key_offset. */
#define GYRE_ROUTE_KEY 1u

/* Loans (gyre_abi::loan, docs/loans.md): a request or reply payload of a loan kernel is a
 * 16-byte handle { offset, len, generation } naming a block of the kernel's loan pool.
 * Each smallest block (unit) has one 64-bit state word, GYRE_LOAN_WORD_STRIDE bytes from
 * the next: generation in bits 0..32, owner (GYRE_LOAN_OWNER_*) in bits 32..34, order
 * (the block is 2^order units) in bits 40..46. Only a block's first unit's word counts. */
#define GYRE_LOAN_HANDLE_SIZE 16u
#define GYRE_LOAN_WORD_STRIDE 64u
#define GYRE_LOAN_OWNER_SHIFT 32u
#define GYRE_LOAN_ORDER_SHIFT 40u
#define GYRE_LOAN_OWNER_FREE 0u
#define GYRE_LOAN_OWNER_HOST 1u
#define GYRE_LOAN_OWNER_KERNEL 2u
#define GYRE_LOAN_OWNER_BUSY 3u /* held by a host-side party; device kernels only read */

/* Slot header flags (gyre_abi::flags), gyre_slot_header.flags. */
/** The request came from `call` (not `send`); the kernel copies it into the reply. */
#define GYRE_FLAG_CALL 1u
/* Control-block host flags (gyre_abi::host_flags), gyre_control_block.host_flags:
 * requests exist only below h2k_head (a copy engine fills the request ring). */
#define GYRE_HOST_FLAG_DOORBELL 1u
/** Checked slots (gyre_abi::host_flags::CHECKED): the kernel reads each slot in one wave
 *  of independent loads and takes it only when its check word is the check of what it
 *  read; replies carry one too, written with no fence per message (docs/protocol.md). */
#define GYRE_HOST_FLAG_CHECKED 2u

/* The check word (gyre_abi::check): the wrapping sum over the slot's 8-byte words j (the
 * header's 8 words but GYRE_CHECK_WORD, then the payload's first len bytes rounded up to
 * whole words) of fmix64(word ^ (j + 1) * GYRE_CHECK_KEY). gyre_check_term in
 * gyre/ring.h is the C twin of gyre_abi::check::term. */
#define GYRE_CHECK_WORD 5u
#define GYRE_CHECK_HEADER_WORDS 8u
#define GYRE_CHECK_KEY 0x9e3779b97f4a7c15ull

/* ---- structures ------------------------------------------------------------------- */

/** The 128-byte control block of one ring kernel (gyre_abi::ControlBlock). */
typedef struct gyre_control_block {
    /* ---- line 0 (bytes 0..64): host-written ---- */
    GYRE_ALIGN(128) uint32_t magic; /* GYRE_MAGIC */
    uint32_t abi_version;           /* GYRE_ABI_VERSION */
    uint32_t command;               /* GYRE_CMD_* */
    uint32_t capacity;              /* power of two, MIN..=MAX_CAPACITY */
    uint32_t slot_size;             /* multiple of SLOT_ALIGN, MIN..=MAX_SLOT_SIZE */
    uint32_t batch_size;            /* >= 1 */
    uint32_t host_timeout_ms;       /* 0 = never */
    uint32_t host_flags;            /* GYRE_HOST_FLAG_* */
    uint64_t h2k_head;       /* requests published */
    uint64_t k2h_tail;       /* replies consumed */
    uint64_t host_heartbeat; /* changes while the host is alive (host ns) */
    uint32_t epoch_us;       /* hand over after this many us (0 = never) */
    uint32_t generation;     /* launches on this region so far */
    /* ---- line 1 (bytes 64..128): kernel-written ---- */
    uint32_t state;            /* GYRE_STATE_* */
    uint32_t error_code;       /* GYRE_ERR_* */
    uint64_t h2k_tail;         /* requests consumed */
    uint64_t k2h_head;         /* replies published */
    uint64_t kernel_heartbeat; /* changes while the kernel loop runs (kernel ns) */
    uint64_t processed;        /* requests processed */
    uint64_t _reserved2[3];
} gyre_control_block;

/** The header at the start of every slot (gyre_abi::SlotHeader); the payload follows at
 *  GYRE_SLOT_HEADER_SIZE. `sequence` (= index + 1) is written last, with release. */
typedef struct gyre_slot_header {
    GYRE_ALIGN(64) uint64_t sequence;
    uint64_t correlation_id;
    uint64_t enqueue_ns;
    uint32_t msg_type;
    uint32_t len; /* <= slot_size - GYRE_SLOT_HEADER_SIZE */
    uint32_t flags; /* GYRE_FLAG_* */
    uint32_t status; /* GYRE_ERR_*; zero in requests */
    uint64_t check;  /* GYRE_HOST_FLAG_CHECKED rings: the check word; written before sequence */
    uint64_t _reserved[2];
} gyre_slot_header;

/** The 64-byte telemetry line (gyre_abi::TelemetryBuffer), kernel-written under a
 *  sequence lock: seq odd while a write is in progress. */
typedef struct gyre_telemetry_buffer {
    GYRE_ALIGN(64) uint32_t seq;
    uint32_t state;
    uint64_t messages_in;
    uint64_t messages_out;
    uint64_t errors;
    uint64_t busy_polls;
    uint64_t idle_polls;
    uint64_t handler_ns_total;
    uint32_t handler_ns_max;
    uint32_t heartbeat_ms;
} gyre_telemetry_buffer;

/** Where a region's request ring lives (gyre_abi::RingPlacement), at
 *  GYRE_PLACEMENT_OFFSET: host-written before the first launch, never after. 0 = inline
 *  (offset 256); else the ring's device address, apart from the region (a pipeline's
 *  inner ring in memory only kernels touch: device memory on CUDA). */
#define GYRE_PLACEMENT_OFFSET 192u
typedef struct gyre_placement {
    GYRE_ALIGN(64) uint64_t request_ring;
    uint64_t _reserved[7];
} gyre_placement;

/** A fan-out stage's branches (gyre_abi::RouteTable): host-written before launch; rr,
 *  head and released are the fan-out stage's scratch afterwards. */
typedef struct gyre_route {
    GYRE_ALIGN(64) uint32_t mode; /* GYRE_ROUTE_* */
    uint32_t count;               /* branches, 2..=GYRE_ROUTE_MAX_BRANCHES */
    uint32_t key_offset;          /* GYRE_ROUTE_KEY: the key's byte offset in the payload */
    uint32_t rr;                  /* scratch: replies routed round-robin so far */
    uint32_t msg_type[8];         /* each branch's first stage's message type */
    uint64_t _reserved[2];
    uint64_t target[8];   /* device address of each branch's first stage's region */
    uint64_t head[8];     /* scratch: requests written into each branch */
    uint64_t released[8]; /* scratch: each branch's h2k_tail as last read */
    uint64_t ring[8];     /* scratch: each branch's request ring (gyre_request_ring), at K0 */
} gyre_route;

/** The stages writing one target by correlation id (gyre_abi::JoinTable). */
typedef struct gyre_join {
    GYRE_ALIGN(64) uint64_t target; /* device address of the target region */
    uint32_t producers;             /* stages writing it */
    uint32_t _reserved0;
    uint64_t stopped; /* producers stopped for good (compare-and-swap) */
    uint64_t _reserved[5];
} gyre_join;

/* ---- compile-time layout checks (mirror the const_asserts in lib.rs) ------------- */
GYRE_STATIC_ASSERT(sizeof(uint32_t) == 4 && GYRE_ALIGNOF(uint32_t) == 4, "uint32_t");
GYRE_STATIC_ASSERT(sizeof(uint64_t) == 8 && GYRE_ALIGNOF(uint64_t) == 8, "uint64_t");
GYRE_STATIC_ASSERT(GYRE_MAGIC == ((uint32_t)'G' | ((uint32_t)'Y' << 8) | ((uint32_t)'R' << 16) |
                                  ((uint32_t)'E' << 24)),
                   "GYRE_MAGIC is \"GYRE\" little-endian");
GYRE_STATIC_ASSERT(GYRE_MIN_SLOT_SIZE == GYRE_SLOT_ALIGN, "GYRE_MIN_SLOT_SIZE");
GYRE_STATIC_ASSERT(GYRE_SLOT_HEADER_SIZE < GYRE_MIN_SLOT_SIZE, "GYRE_SLOT_HEADER_SIZE");
GYRE_STATIC_ASSERT(GYRE_MAX_SLOT_SIZE % GYRE_SLOT_ALIGN == 0, "GYRE_MAX_SLOT_SIZE");
GYRE_STATIC_ASSERT((GYRE_MAX_CAPACITY & (GYRE_MAX_CAPACITY - 1)) == 0, "GYRE_MAX_CAPACITY");

GYRE_STATIC_ASSERT(sizeof(gyre_control_block) == 128, "sizeof(gyre_control_block)");
GYRE_STATIC_ASSERT(GYRE_ALIGNOF(gyre_control_block) == 128, "alignof(gyre_control_block)");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, magic) == 0, "gyre_control_block.magic");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, abi_version) == 4,
                   "gyre_control_block.abi_version");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, command) == 8,
                   "gyre_control_block.command");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, capacity) == 12,
                   "gyre_control_block.capacity");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, slot_size) == 16,
                   "gyre_control_block.slot_size");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, batch_size) == 20,
                   "gyre_control_block.batch_size");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, host_timeout_ms) == 24,
                   "gyre_control_block.host_timeout_ms");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, host_flags) == 28,
                   "gyre_control_block.host_flags");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, h2k_head) == 32,
                   "gyre_control_block.h2k_head");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, k2h_tail) == 40,
                   "gyre_control_block.k2h_tail");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, host_heartbeat) == 48,
                   "gyre_control_block.host_heartbeat");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, epoch_us) == 56,
                   "gyre_control_block.epoch_us");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, generation) == 60,
                   "gyre_control_block.generation");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, state) == 64,
                   "gyre_control_block.state: line 1 starts at byte 64");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, error_code) == 68,
                   "gyre_control_block.error_code");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, h2k_tail) == 72,
                   "gyre_control_block.h2k_tail");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, k2h_head) == 80,
                   "gyre_control_block.k2h_head");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, kernel_heartbeat) == 88,
                   "gyre_control_block.kernel_heartbeat");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, processed) == 96,
                   "gyre_control_block.processed");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_control_block, _reserved2) == 104,
                   "gyre_control_block._reserved2");

GYRE_STATIC_ASSERT(sizeof(gyre_slot_header) == GYRE_SLOT_HEADER_SIZE, "sizeof(gyre_slot_header)");
GYRE_STATIC_ASSERT(GYRE_ALIGNOF(gyre_slot_header) == 64, "alignof(gyre_slot_header)");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, sequence) == 0, "gyre_slot_header.sequence");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, correlation_id) == 8,
                   "gyre_slot_header.correlation_id");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, enqueue_ns) == 16,
                   "gyre_slot_header.enqueue_ns");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, msg_type) == 24, "gyre_slot_header.msg_type");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, len) == 28, "gyre_slot_header.len");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, flags) == 32, "gyre_slot_header.flags");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, status) == 36, "gyre_slot_header.status");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, check) == 40,
                   "gyre_slot_header.check");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, check) == GYRE_CHECK_WORD * 8u,
                   "gyre_slot_header.check is word GYRE_CHECK_WORD");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_slot_header, _reserved) == 48,
                   "gyre_slot_header._reserved");

GYRE_STATIC_ASSERT(sizeof(gyre_telemetry_buffer) == 64, "sizeof(gyre_telemetry_buffer)");
GYRE_STATIC_ASSERT(GYRE_ALIGNOF(gyre_telemetry_buffer) == 64, "alignof(gyre_telemetry_buffer)");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, seq) == 0, "gyre_telemetry_buffer.seq");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, state) == 4,
                   "gyre_telemetry_buffer.state");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, messages_in) == 8,
                   "gyre_telemetry_buffer.messages_in");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, messages_out) == 16,
                   "gyre_telemetry_buffer.messages_out");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, errors) == 24,
                   "gyre_telemetry_buffer.errors");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, busy_polls) == 32,
                   "gyre_telemetry_buffer.busy_polls");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, idle_polls) == 40,
                   "gyre_telemetry_buffer.idle_polls");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, handler_ns_total) == 48,
                   "gyre_telemetry_buffer.handler_ns_total");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, handler_ns_max) == 56,
                   "gyre_telemetry_buffer.handler_ns_max");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_telemetry_buffer, heartbeat_ms) == 60,
                   "gyre_telemetry_buffer.heartbeat_ms");

GYRE_STATIC_ASSERT(sizeof(gyre_placement) == 64 && GYRE_ALIGNOF(gyre_placement) == 64,
                   "gyre_placement");
GYRE_STATIC_ASSERT(sizeof(gyre_route) == 320 && GYRE_ALIGNOF(gyre_route) == 64, "gyre_route");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_route, msg_type) == 16, "gyre_route.msg_type");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_route, target) == 64, "gyre_route.target");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_route, head) == 128, "gyre_route.head");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_route, released) == 192, "gyre_route.released");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_route, ring) == 256, "gyre_route.ring");
GYRE_STATIC_ASSERT(sizeof(gyre_join) == 64 && GYRE_ALIGNOF(gyre_join) == 64, "gyre_join");
GYRE_STATIC_ASSERT(GYRE_OFFSETOF(gyre_join, stopped) == 16, "gyre_join.stopped");

#endif /* GYRE_ABI_H */
