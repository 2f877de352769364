/*
 * gyre/loan.h -- the device side of loans (docs/loans.md): a loan kernel's request carries
 * a 16-byte handle { offset, len, generation } naming a block of the kernel's loan pool
 * instead of its bytes. Before its handler runs, the block loop (gyre/block.h) resolves
 * the handle here: checked against the pool and the block's state word, then held busy
 * (kernel -> busy, by compare-and-swap) while the handler works on the bytes in place, and
 * given back (busy -> kernel, release) before the reply is published.
 *
 * The host's side of the same protocol is crates/gyre-core/src/loan/arena.rs
 * (LoanArena::resolve is the Rust twin of gyre_loan_resolve, used where the handler is
 * host code: the CPU backend's Rust closures); the word layout and owner values are
 * gyre/abi.h (GYRE_LOAN_*). Both resolvers are checked against each other on arbitrary
 * handles (crates/gyre-cpu/src/loan_probe.rs).
 *
 * Needs from the port header, besides ring.h's: GYRE_CAS_U64(p, expected, desired), a
 * compare-and-swap with acq_rel order at the scope the host shares (1 when done). Where
 * the host's compare-and-swap on the same word is not atomic with the device's (mapped
 * host memory over PCIe without hostNativeAtomicSupported), the two-owner guarantee does
 * not hold: the runtime only places loan pools where it does (docs/loans.md).
 */
#ifndef GYRE_LOAN_H
#define GYRE_LOAN_H

#ifndef GYRE_CAS_U64
#error "include a gyre port header (it defines GYRE_CAS_U64) before gyre/loan.h"
#endif

#include "abi.h"

/** A loan pool as the kernel sees it (kernel arguments; `bytes` 0: not a loan kernel). */
typedef struct gyre_loan_pool {
    GYRE_GLOBAL unsigned char *base; /* the pool's bytes, where the kernel reads them */
    GYRE_GLOBAL unsigned char *words; /* unit u's state word at u * GYRE_LOAN_WORD_STRIDE */
    uint64_t bytes;                  /* a power of two; 0 = no pool */
    uint32_t min_shift;              /* log2 of the smallest block */
    uint32_t pad;
} gyre_loan_pool;

/** A handle read from a payload. */
typedef struct gyre_loan_handle {
    uint64_t offset;
    uint32_t len;
    uint32_t generation;
} gyre_loan_handle;

/** The state word of the unit at byte `offset` of the pool (offset checked by the caller). */
static inline GYRE_DEVICE_FN GYRE_GLOBAL uint64_t *gyre_loan_word(const gyre_loan_pool *p,
                                                                 uint64_t offset) {
    return (GYRE_GLOBAL uint64_t *)(p->words +
                                    (offset >> p->min_shift) * (uint64_t)GYRE_LOAN_WORD_STRIDE);
}

/** Reads the handle in the first 16 bytes of a payload of `len` bytes (little-endian, as
 *  the host wrote it with plain stores before the slot's release). 0 when it is shorter. */
static inline GYRE_DEVICE_FN uint32_t gyre_loan_read(const GYRE_GLOBAL unsigned char *payload,
                                                    uint32_t len, gyre_loan_handle *h) {
    if (len < GYRE_LOAN_HANDLE_SIZE) {
        return 0u;
    }
    h->offset = *(const GYRE_GLOBAL uint64_t *)payload;
    h->len = *(const GYRE_GLOBAL uint32_t *)(payload + 8);
    h->generation = *(const GYRE_GLOBAL uint32_t *)(payload + 12);
    return 1u;
}

/** Writes handle `h` at the start of a payload (plain stores; published by K6). */
static inline GYRE_DEVICE_FN void gyre_loan_write(GYRE_GLOBAL unsigned char *payload,
                                                 const gyre_loan_handle *h) {
    *(GYRE_GLOBAL uint64_t *)payload = h->offset;
    *(GYRE_GLOBAL uint32_t *)(payload + 8) = h->len;
    *(GYRE_GLOBAL uint32_t *)(payload + 12) = h->generation;
}

/** Resolves `h`: when its offset is a unit start inside the pool, the block there is
 *  kernel-owned under h->generation, and h->len fits the block, moves the block to busy
 *  (compare-and-swap, so a claim or release racing with it loses, or wins and this
 *  fails) and sets *cap to the block's bytes: returns GYRE_ERR_NONE, and the handler may
 *  use [base + offset, base + offset + cap) until gyre_loan_unhold. Otherwise returns
 *  GYRE_ERR_BAD_LOAN and never writes the word. */
static inline GYRE_DEVICE_FN uint32_t gyre_loan_resolve(const gyre_loan_pool *p,
                                                       const gyre_loan_handle *h,
                                                       uint64_t *cap) {
    const uint64_t unit_mask = ((uint64_t)1 << p->min_shift) - 1u;
    GYRE_GLOBAL uint64_t *w;
    uint64_t cur;
    uint64_t busy;
    uint64_t bytes;
    uint32_t order;
    if (p->bytes == 0u || h->offset >= p->bytes || (h->offset & unit_mask) != 0u) {
        return GYRE_ERR_BAD_LOAN;
    }
    w = gyre_loan_word(p, h->offset);
    cur = GYRE_LOAD_ACQUIRE_U64(w);
    if (((cur >> GYRE_LOAN_OWNER_SHIFT) & 3u) != GYRE_LOAN_OWNER_KERNEL ||
        (uint32_t)cur != h->generation) {
        return GYRE_ERR_BAD_LOAN;
    }
    /* Every check on the word the compare-and-swap then confirms: a handle that fails
     * never moves the word, not even for a moment, so it cannot make the request that
     * really holds the block be refused, or its bytes be left uncopied by a bridge. */
    order = (uint32_t)((cur >> GYRE_LOAN_ORDER_SHIFT) & 0x3fu);
    bytes = (order < 32u) ? ((uint64_t)1 << order) << p->min_shift : p->bytes + 1u;
    if ((uint64_t)h->len > bytes || h->offset + bytes > p->bytes) {
        return GYRE_ERR_BAD_LOAN;
    }
    busy = cur | ((uint64_t)GYRE_LOAN_OWNER_BUSY << GYRE_LOAN_OWNER_SHIFT);
    if (!GYRE_CAS_U64(w, cur, busy)) {
        return GYRE_ERR_BAD_LOAN; /* claimed, released or sent again meanwhile */
    }
    *cap = bytes;
    return GYRE_ERR_NONE;
}

/** Gives back a block gyre_loan_resolve held (busy -> kernel, release: the handler's writes
 *  before it, so before the reply's publication and the host's claim). Only the holder
 *  moves a busy word, so a store does what a compare-and-swap would. */
static inline GYRE_DEVICE_FN void gyre_loan_unhold(const gyre_loan_pool *p, uint64_t offset) {
    GYRE_GLOBAL uint64_t *w = gyre_loan_word(p, offset);
    const uint64_t cur = GYRE_LOAD_RELAXED_U64(w);
    GYRE_STORE_RELEASE_U64(w, (cur & ~((uint64_t)3u << GYRE_LOAN_OWNER_SHIFT)) |
                                  ((uint64_t)GYRE_LOAN_OWNER_KERNEL << GYRE_LOAN_OWNER_SHIFT));
}

#endif /* GYRE_LOAN_H */
