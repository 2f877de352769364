/*
 * gyre/loan.h -- the device side of loans (docs/loans.md): a loan kernel's request carries
 * a 16-byte handle { offset, len, generation } naming a block of the kernel's loan pool
 * instead of its bytes. Before its handler runs, the block loop (gyre/block.h) resolves
 * the handle here, against the pool and the block's state word, and the handler then works
 * on the bytes in place.
 *
 * The kernel only *reads* state words. The host binds a block to the request slot that
 * carries it: it writes the word (owner kernel, generation = the low 32 bits of the slot's
 * ring index, GYRE_LOAN_SLOT_TAG) before it publishes that slot, and moves it away only
 * after the slot's reply is published or the kernel has stopped. A handle resolves only in
 * the slot its word names, so no other request (a duplicate, a forged or stale handle)
 * can reach the block, and the host never touches it while this request's handler runs.
 * Nothing here needs an atomic that is atomic with the host's: the protocol holds where
 * the device reads host memory over PCIe (a CUDA GPU without hostNativeAtomicSupported).
 *
 * The host's side of the same protocol is crates/gyre-core/src/loan/arena.rs
 * (LoanArena::resolve is the Rust twin of gyre_loan_resolve, used where the handler is
 * host code: the CPU backend's Rust closures); the word layout and owner values are
 * gyre/abi.h (GYRE_LOAN_*). Both resolvers are checked against each other on arbitrary
 * handles (crates/gyre-cpu/src/loan_probe.rs).
 */
#ifndef GYRE_LOAN_H
#define GYRE_LOAN_H

#ifndef GYRE_LOAD_ACQUIRE_U64
#error "include a gyre port header (it defines GYRE_LOAD_ACQUIRE_U64) before gyre/loan.h"
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

/** The generation a handle carried by request slot `idx` must have: the low 32 bits of the
 *  slot's ring index (the host writes the same into the block's word before publishing it). */
#define GYRE_LOAN_SLOT_TAG(idx) ((uint32_t)(idx))

/** Resolves `h`, read from request slot `idx`: when its offset is a unit start inside the
 *  pool, the block there is kernel-owned and bound to this slot (its generation is
 *  GYRE_LOAN_SLOT_TAG(idx), and so is h->generation), and h->len fits the block, sets *cap
 *  to the block's bytes and returns GYRE_ERR_NONE: the handler may use
 *  [base + offset, base + offset + cap) until this request's reply is published. Otherwise
 *  returns GYRE_ERR_BAD_LOAN. Reads the word only. */
static inline GYRE_DEVICE_FN uint32_t gyre_loan_resolve(const gyre_loan_pool *p,
                                                       const gyre_loan_handle *h, uint64_t idx,
                                                       uint64_t *cap) {
    const uint64_t unit_mask = ((uint64_t)1 << p->min_shift) - 1u;
    uint64_t cur;
    uint64_t bytes;
    uint32_t order;
    if (p->bytes == 0u || h->offset >= p->bytes || (h->offset & unit_mask) != 0u ||
        h->generation != GYRE_LOAN_SLOT_TAG(idx)) {
        return GYRE_ERR_BAD_LOAN;
    }
    /* Acquire: the host's writes to the block before it bound it (the slot's own acquire
     * orders them too; this one makes the word's check self-contained). */
    cur = GYRE_LOAD_ACQUIRE_U64(gyre_loan_word(p, h->offset));
    if (((cur >> GYRE_LOAN_OWNER_SHIFT) & 3u) != GYRE_LOAN_OWNER_KERNEL ||
        (uint32_t)cur != h->generation) {
        return GYRE_ERR_BAD_LOAN; /* not bound to this slot: free, host-owned, another slot */
    }
    order = (uint32_t)((cur >> GYRE_LOAN_ORDER_SHIFT) & 0x3fu);
    bytes = (order < 32u) ? ((uint64_t)1 << order) << p->min_shift : p->bytes + 1u;
    if ((uint64_t)h->len > bytes || h->offset + bytes > p->bytes) {
        return GYRE_ERR_BAD_LOAN;
    }
    *cap = bytes;
    return GYRE_ERR_NONE;
}

#endif /* GYRE_LOAN_H */
