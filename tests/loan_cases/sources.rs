//! The device handlers of the loan cases: the same meaning as their Rust closures, as
//! phase functions over `gyre/handler.h` for every device backend. A loan kernel's
//! handler works in place (`c->req == c->reply`, the block): a byte one lane reads and
//! another writes must be separated by a phase.

/// Each byte plus one; a first byte of 0xEF answers `USER_BASE + 1`, 0xED `BAD_LOAN`.
pub const BUMP: &str = r#"
static inline GYRE_DEVICE_FN uint32_t bump(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
                                           GYRE_SHARED gyre_hblock *b) {
    uint32_t i;
    if (phase == 0u) {
        l->u32 = c->req_len > 0u ? (uint32_t)c->req[0] : 0u; /* before any lane writes */
        return 1u;
    }
    if (l->u32 == 0xEFu || l->u32 == 0xEDu) {
        if (c->lane == 0u) {
            b->status = l->u32 == 0xEFu ? GYRE_ERR_USER_BASE + 1u : GYRE_ERR_BAD_LOAN;
            b->reply_len = 0u;
        }
        return GYRE_PHASE_DONE;
    }
    for (i = c->lane; i < c->req_len; i += c->lanes) {
        c->reply[i] = (unsigned char)(c->req[i] + 1u);
    }
    if (c->lane == 0u) { b->status = GYRE_ERR_NONE; b->reply_len = c->req_len; }
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE bump
"#;

/// A reply of `100 * first byte` bytes of 0xAB, up to the block (HANDLER_REJECTED beyond).
pub const RESIZE: &str = r#"
static inline GYRE_DEVICE_FN uint32_t resize(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
                                             GYRE_SHARED gyre_hblock *b) {
    uint32_t i;
    if (phase == 0u) {
        l->u32 = (c->req_len > 0u ? (uint32_t)c->req[0] : 0u) * 100u;
        return 1u;
    }
    if (l->u32 > c->reply_cap) {
        if (c->lane == 0u) { b->status = GYRE_ERR_HANDLER_REJECTED; b->reply_len = 0u; }
        return GYRE_PHASE_DONE;
    }
    for (i = c->lane; i < l->u32; i += c->lanes) {
        c->reply[i] = 0xABu;
    }
    if (c->lane == 0u) { b->status = GYRE_ERR_NONE; b->reply_len = l->u32; }
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE resize
"#;

/// Fills the whole block with `first byte + 100`, then reads it back many times: any
/// other byte is `USER_BASE + 9` (a second writer). Lane 0 does it all.
pub const GUARD: &str = r#"
static inline GYRE_DEVICE_FN uint32_t guard(uint32_t phase, const gyre_hcall *c, gyre_hlane *l,
                                            GYRE_SHARED gyre_hblock *b) {
    uint32_t i;
    uint32_t round;
    uint32_t bad = 0u;
    unsigned char token;
    (void)phase;
    (void)l;
    if (c->lane != 0u) {
        return GYRE_PHASE_DONE;
    }
    token = (unsigned char)(c->req[0] + 100u);
    for (i = 0u; i < c->reply_cap; ++i) {
        c->reply[i] = token;
    }
    for (round = 0u; round < 64u; ++round) {
        for (i = 0u; i < c->reply_cap; ++i) {
            if (((volatile const GYRE_GLOBAL unsigned char *)c->reply)[i] != token) {
                bad = 1u;
            }
        }
    }
    b->status = bad ? GYRE_ERR_USER_BASE + 9u : GYRE_ERR_NONE;
    b->reply_len = bad ? 0u : c->req_len;
    return GYRE_PHASE_DONE;
}
#define GYRE_HANDLER_PHASE guard
"#;
