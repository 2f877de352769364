//! `cuda/include/gyre/ring.h` is plain C, and its logic follows docs/protocol.md: this
//! test compiles it as C11 with the host C compiler (`-std=c11 -pedantic -Wall -Wextra
//! -Wconversion -Werror`) under a test port (C11 atomics, a fake clock) and runs a
//! single-threaded driver that does what `cuda/ring_kernel.cu` does with one lane. The
//! driver checks K0 faults, batches, flow control, K4 errors, handler statuses, K7, the
//! telemetry seqlock, drain on Terminate, Pause, and the stale-host-heartbeat exit.
//!
//! No GPU or CUDA is involved, so this runs everywhere; a missing C compiler (`$CC`, else
//! `cc`) fails the test, as in crates/gyre-abi/tests/c_probe.rs.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The test port: what port_cuda.h is for CUDA, with C11 atomics and a fake clock that
/// advances 1 us per reading.
const PORT: &str = r#"
#include <stdatomic.h>
#include <stdint.h>
#include "gyre/abi.h"
#define GYRE_GLOBAL
#define GYRE_DEVICE_FN
#define GYRE_A32(p) ((_Atomic uint32_t *)(void *)(p))
#define GYRE_A64(p) ((_Atomic uint64_t *)(void *)(p))
#define GYRE_LOAD_ACQUIRE_U32(p) atomic_load_explicit(GYRE_A32(p), memory_order_acquire)
#define GYRE_LOAD_ACQUIRE_U64(p) atomic_load_explicit(GYRE_A64(p), memory_order_acquire)
#define GYRE_LOAD_RELAXED_U32(p) atomic_load_explicit(GYRE_A32(p), memory_order_relaxed)
#define GYRE_LOAD_RELAXED_U64(p) atomic_load_explicit(GYRE_A64(p), memory_order_relaxed)
#define GYRE_STORE_RELEASE_U32(p, v) atomic_store_explicit(GYRE_A32(p), (v), memory_order_release)
#define GYRE_STORE_RELEASE_U64(p, v) atomic_store_explicit(GYRE_A64(p), (v), memory_order_release)
#define GYRE_STORE_RELAXED_U32(p, v) atomic_store_explicit(GYRE_A32(p), (v), memory_order_relaxed)
#define GYRE_STORE_RELAXED_U64(p, v) atomic_store_explicit(GYRE_A64(p), (v), memory_order_relaxed)
#define GYRE_FENCE_SYSTEM() atomic_thread_fence(memory_order_seq_cst)
static inline uint32_t cas_u64(uint64_t *p, uint64_t e, uint64_t d) {
    return atomic_compare_exchange_strong(GYRE_A64(p), &e, d) ? 1u : 0u;
}
#define GYRE_CAS_U64(p, e, d) cas_u64((p), (e), (d))
static unsigned long pauses;
#define GYRE_PAUSE() (pauses++)
static uint64_t fake_now = 1000000000u;
#define GYRE_NOW_NS() (fake_now += 1000u)
"#;

/// The driver: ring_kernel.cu's block loop with one lane, and a C handler.
const DRIVER: &str = r#"
#include "gyre/ring.h"
#include <stdio.h>
#include <string.h>

#define CAP 8u
#define SLOT 128u
#define PAYLOAD (SLOT - GYRE_SLOT_HEADER_SIZE)
#define BATCH 4u
static _Alignas(128) unsigned char region[GYRE_RINGS_OFFSET + 2u * CAP * SLOT];
static gyre_control_block *const cb = (gyre_control_block *)(void *)region;
static gyre_telemetry_buffer *const tel =
    (gyre_telemetry_buffer *)(void *)(region + GYRE_TELEMETRY_OFFSET);

#define CHECK(c)                                                                           \
    do {                                                                                   \
        if (!(c)) {                                                                        \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);                            \
            return 1;                                                                      \
        }                                                                                  \
    } while (0)

/* A request ring apart from the region (gyre_placement), and where requests go now. */
static _Alignas(128) unsigned char apart[CAP * SLOT];
static unsigned char *req_ring = region + GYRE_RINGS_OFFSET;

static gyre_slot_header *req_slot(uint64_t i) {
    return (gyre_slot_header *)(void *)(req_ring + (i & (CAP - 1u)) * SLOT);
}
static gyre_slot_header *rep_slot(uint64_t i) {
    return (gyre_slot_header *)(void *)(region + GYRE_RINGS_OFFSET + CAP * SLOT +
                                        (i & (CAP - 1u)) * SLOT);
}

static void init(uint32_t magic, uint32_t version, uint32_t cap, uint32_t batch,
                 uint32_t timeout_ms) {
    memset(region, 0, sizeof region);
    memset(apart, 0, sizeof apart);
    req_ring = region + GYRE_RINGS_OFFSET;
    cb->abi_version = version;
    cb->command = GYRE_CMD_RUN;
    cb->capacity = cap;
    cb->slot_size = SLOT;
    cb->batch_size = batch;
    cb->host_timeout_ms = timeout_ms;
    cb->magic = magic;
}

/* P2..P4 of one producer: header, payload, sequence, head. */
static void publish(uint64_t i, uint32_t type, const char *payload, uint32_t len) {
    gyre_slot_header *h = req_slot(i);
    h->correlation_id = i;
    h->enqueue_ns = 100u + i;
    h->msg_type = type;
    h->len = len;
    h->flags = GYRE_FLAG_CALL;
    if (payload) {
        memcpy((unsigned char *)h + GYRE_SLOT_HEADER_SIZE, payload, len);
    }
    h->sequence = i + 1u;
    cb->h2k_head = i + 1u;
}

/* The handler: echo for type 1; type 98 claims a reply too long; type 97 returns a
 * protocol code (BAD_SEQUENCE), which K5 must answer HANDLER_REJECTED; others rejected
 * with a user code. */
static uint32_t handler(uint32_t type, const unsigned char *req, uint32_t len,
                        unsigned char *reply, uint32_t cap, uint32_t *reply_len) {
    if (type == 98u) {
        *reply_len = cap + 1u;
        return GYRE_ERR_NONE;
    }
    if (type == 97u) {
        return GYRE_ERR_BAD_SEQUENCE;
    }
    if (type != 1u) {
        return GYRE_ERR_USER_BASE + 1u;
    }
    memcpy(reply, req, len);
    *reply_len = len;
    return GYRE_ERR_NONE;
}

/* One iteration of ring_kernel.cu's loop with one lane: the batch, or -1 once stopped. */
static int step(gyre_ring *r) {
    uint32_t bad = 0, k, n = gyre_ring_next(r, &bad);
    uint64_t first = r->tail, t0 = GYRE_NOW_NS();
    if (n == 0u) {
        return -1;
    }
    for (k = 0; k < n; k++) {
        gyre_slot_meta m;
        uint64_t idx = first + k;
        if (gyre_k4_check(r, idx, bad, &m)) {
            uint32_t rl = 0;
            uint32_t st = handler(m.msg_type, (unsigned char *)req_slot(idx) + 64,
                                  m.len, (unsigned char *)rep_slot(idx) + 64, PAYLOAD, &rl);
            gyre_k5_result(r, &m, st, rl);
        }
        gyre_k6_stamp_reply(r, idx, &m);
    }
    gyre_ring_batch_done(r, n, t0);
    return (int)n;
}

static int reply_ok(uint64_t i, uint32_t status, uint32_t len) {
    gyre_slot_header *h = rep_slot(i);
    return h->sequence == i + 1u && h->correlation_id == i && h->status == status &&
           h->len == len && h->flags == GYRE_FLAG_CALL && h->enqueue_ns == 100u + i;
}

int main(void) {
    gyre_ring r;
    uint32_t bad;
    uint64_t i;
    uint32_t seq0;

    /* K0: faults, no trap. */
    init(0x1234u, GYRE_ABI_VERSION, CAP, BATCH, 0);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_BAD_MAGIC);
    CHECK(cb->state == GYRE_STATE_FAULTED && cb->error_code == GYRE_ERR_BAD_MAGIC);
    init(GYRE_MAGIC, 99u, CAP, BATCH, 0);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_BAD_ABI_VERSION);
    CHECK(cb->state == GYRE_STATE_FAULTED);
    init(GYRE_MAGIC, GYRE_ABI_VERSION, 6u, BATCH, 0);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_BAD_GEOMETRY);
    init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, 0u, 0);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_BAD_GEOMETRY);
    init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, CAP + 1u, 0);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_BAD_GEOMETRY);
    CHECK(gyre_geometry_ok(2u, 128u, 2u) && !gyre_geometry_ok(1u, 128u, 1u) &&
          !gyre_geometry_ok(0x2000000u, 128u, 1u) && !gyre_geometry_ok(8u, 192u, 1u) &&
          !gyre_geometry_ok(8u, 0x200000u, 1u) && gyre_geometry_ok(8u, 0x100000u, 8u));

    /* K0 ok, then batches bounded by batch_size; replies, K7, K8. */
    init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, BATCH, 0);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_NONE && cb->state == GYRE_STATE_ACTIVE);
    CHECK(r.payload == PAYLOAD && r.request_ring == region + GYRE_RINGS_OFFSET &&
          r.reply_ring == region + GYRE_RINGS_OFFSET + CAP * SLOT);
    for (i = 0; i < 6u; i++) {
        publish(i, 1u, "hello, ring", 11u);
    }
    CHECK(step(&r) == 4);
    CHECK(cb->h2k_tail == 4u && cb->k2h_head == 4u && cb->processed == 4u);
    CHECK(step(&r) == 2);
    for (i = 0; i < 6u; i++) {
        CHECK(reply_ok(i, GYRE_ERR_NONE, 11u));
        CHECK(memcmp((unsigned char *)rep_slot(i) + 64, "hello, ring", 11u) == 0);
    }
    CHECK(cb->h2k_tail == 6u && cb->k2h_head == 6u && cb->processed == 6u);
    CHECK(tel->seq % 2u == 0u && tel->seq >= 4u && tel->messages_in == 6u &&
          tel->messages_out == 6u && tel->busy_polls == 2u && tel->errors == 0u &&
          tel->state == GYRE_STATE_ACTIVE && tel->handler_ns_total > 0u);

    /* K3 flow control. Replies 0..5 are unreleased (k2h_tail 0). A pipeline stage
     * (link_next set: its reply ring is the next stage's request ring) bounds its run by
     * the released slots: only 2 more fit, then 4 once 0..3 are released. A plain kernel
     * reads no k2h_tail: the host's claim rule (P1) made the host release 0..5 before it
     * could publish 6..9, and the kernel takes all four. */
    for (i = 6; i < 10u; i++) {
        publish(i, 1u, "x", 1u);
    }
    r.link_next = region; /* as a stage, for gyre_k2_k3_take alone */
    CHECK(gyre_k2_k3_take(&r, 0u, &bad) == 2u && bad == 0u);
    cb->k2h_tail = 4u; /* the host released replies 0..3 */
    CHECK(gyre_k2_k3_take(&r, 0u, &bad) == 4u && bad == 0u && r.k2h_tail == 4u);
    r.link_next = 0;
    cb->k2h_tail = 6u; /* P1: 0..5 released before 6..9 were claimed */
    CHECK(step(&r) == 4 && cb->k2h_head == 10u);
    CHECK(r.k2h_tail == 4u); /* the fast path did not read it */
    cb->k2h_tail = 10u;

    /* K4 and K5 errors: each answered with a status, the kernel keeps serving. */
    publish(10, 1u, NULL, PAYLOAD + 1u);  /* len > payload */
    publish(11, 7u, "z", 1u);             /* handler error status */
    publish(12, 98u, "z", 1u);            /* reply longer than the payload */
    publish(13, 1u, "ok", 2u);
    CHECK(step(&r) == 4);
    CHECK(reply_ok(10, GYRE_ERR_BAD_LENGTH, 0u));
    CHECK(reply_ok(11, GYRE_ERR_USER_BASE + 1u, 0u));
    CHECK(reply_ok(12, GYRE_ERR_BAD_LENGTH, 0u));
    CHECK(reply_ok(13, GYRE_ERR_NONE, 2u));
    CHECK(tel->errors == 3u);
    cb->k2h_tail = 14u;

    /* Four more, released at once: the kernel's copy of k2h_tail (4, read by the stage
     * case above; a plain kernel's fast path never reads it) is stale by more than a
     * ring. */
    publish(14, 97u, "y", 1u); /* a handler status below USER_BASE */
    for (i = 15; i < 18u; i++) {
        publish(i, 1u, "y", 1u);
    }
    CHECK(step(&r) == 4);
    CHECK(reply_ok(14, GYRE_ERR_HANDLER_REJECTED, 0u));
    cb->k2h_tail = 18u;
    CHECK(r.k2h_tail == 4u && r.tail == 18u);

    /* K4 slow path: a published head over a wrong sequence -> BAD_SEQUENCE, corr = idx.
     * With the stale copy (18 - 4 >= capacity) the slow path must re-read k2h_tail
     * rather than wait forever. */
    publish(18, 1u, "s", 1u);
    req_slot(18)->sequence = 99u;
    req_slot(18)->correlation_id = 7777u;
    r.iter = GYRE_SLOW_EVERY - 1u; /* the next iteration takes the slow path */
    CHECK(step(&r) == 1);
    CHECK(rep_slot(18)->sequence == 19u && rep_slot(18)->correlation_id == 18u &&
          rep_slot(18)->status == GYRE_ERR_BAD_SEQUENCE && rep_slot(18)->len == 0u);
    CHECK(cb->h2k_tail == 19u && tel->errors == 5u);
    cb->k2h_tail = 19u;

    /* K9: the kernel heartbeat is written on the slow path; nonzero. */
    CHECK(cb->kernel_heartbeat != 0u);

    /* K1 Terminate: what was published is answered, then TERMINATED. */
    publish(19, 1u, "a", 1u);
    publish(20, 1u, "b", 1u);
    cb->command = GYRE_CMD_TERMINATE;
    CHECK(step(&r) == 2); /* not yet on the slow path: still served as Active */
    CHECK(cb->state == GYRE_STATE_ACTIVE);
    publish(21, 1u, "c", 1u);
    r.iter = GYRE_SLOW_EVERY - 1u;
    CHECK(step(&r) == 1 && cb->state == GYRE_STATE_DRAINING); /* answered while draining */
    CHECK(reply_ok(21, GYRE_ERR_NONE, 1u));
    CHECK(step(&r) == -1); /* nothing left under the head */
    CHECK(cb->state == GYRE_STATE_TERMINATED && tel->state == GYRE_STATE_TERMINATED);
    CHECK(cb->error_code == GYRE_ERR_NONE && cb->processed == 22u && tel->seq % 2u == 0u);
    CHECK(cb->h2k_tail == 22u && cb->k2h_head == 22u && tel->messages_in == 22u);

    /* K1 Pause consumes nothing; a stale host heartbeat (1 ms on the fake clock)
     * terminates the kernel with HOST_HEARTBEAT_STALE. */
    init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, BATCH, 1u);
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_NONE);
    cb->command = GYRE_CMD_PAUSE;
    r.iter = GYRE_SLOW_EVERY - 1u;
    publish(0, 1u, "p", 1u);
    seq0 = tel->seq;
    CHECK(step(&r) == -1);
    CHECK(cb->h2k_tail == 0u && rep_slot(0)->sequence == 0u && pauses > 0u);
    /* About a thousand paused slow ticks over 1 ms of fake clock: the telemetry line is
     * written on the state changes and at most once a millisecond, not on every tick. */
    CHECK(pauses > 500u && (tel->seq - seq0) / 2u <= 4u);
    CHECK(cb->state == GYRE_STATE_TERMINATED &&
          cb->error_code == GYRE_ERR_HOST_HEARTBEAT_STALE);

    /* Doorbell mode (GYRE_HOST_FLAG_DOORBELL, the copy strategies): a slot whose sequence
     * landed before the head covering it is not taken; once the head covers it, it is. */
    init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, BATCH, 0);
    cb->host_flags = GYRE_HOST_FLAG_DOORBELL;
    CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_NONE);
    publish(0, 1u, "a", 1u);
    publish(1, 1u, "b", 1u);
    cb->h2k_head = 1u; /* slot 1's copy has not completed: no doorbell for it yet */
    CHECK(step(&r) == 1 && cb->h2k_tail == 1u); /* two sequences, one covered slot */
    cb->h2k_head = 2u;
    CHECK(step(&r) == 1 && cb->h2k_tail == 2u && reply_ok(1, GYRE_ERR_NONE, 1u));

    /* K8 also writes the export line when there is one (same values, same seq). */
    {
        static gyre_telemetry_buffer export_line;
        init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, BATCH, 0);
        CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_NONE && r.export_tel == 0);
        r.export_tel = &export_line;
        publish(0, 1u, "e", 1u);
        CHECK(step(&r) == 1);
        CHECK(export_line.seq == tel->seq && export_line.seq % 2u == 0u &&
              export_line.messages_in == 1u && export_line.state == GYRE_STATE_ACTIVE);
    }

    /* A request ring placed apart (a pipeline's inner ring): K0 takes its address from
     * the placement line; requests there are answered; the inline ring stays untouched. */
    {
        static const unsigned char zero[CAP * SLOT];
        init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, BATCH, 0);
        ((gyre_placement *)(void *)(region + GYRE_PLACEMENT_OFFSET))->request_ring =
            (uint64_t)(uintptr_t)apart;
        req_ring = apart;
        CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_NONE && r.request_ring == apart &&
              r.reply_ring == region + GYRE_RINGS_OFFSET + CAP * SLOT);
        for (i = 0; i < 3u; i++) {
            publish(i, 1u, "apart", 5u);
        }
        CHECK(step(&r) == 3);
        for (i = 0; i < 3u; i++) {
            CHECK(reply_ok(i, GYRE_ERR_NONE, 5u) &&
                  memcmp((unsigned char *)rep_slot(i) + 64, "apart", 5u) == 0);
        }
        CHECK(memcmp(region + GYRE_RINGS_OFFSET, zero, sizeof zero) == 0);
        /* A placement that is not 128-aligned is corrupt: the kernel faults at K0. */
        init(GYRE_MAGIC, GYRE_ABI_VERSION, CAP, BATCH, 0);
        ((gyre_placement *)(void *)(region + GYRE_PLACEMENT_OFFSET))->request_ring =
            (uint64_t)(uintptr_t)apart + 64u;
        CHECK(gyre_k0_validate(&r, region) == GYRE_ERR_BAD_GEOMETRY &&
              cb->state == GYRE_STATE_FAULTED && cb->error_code == GYRE_ERR_BAD_GEOMETRY);
    }

    /* K1 transitions (gyre-cpu slow_tick). */
    CHECK(gyre_k1_next_state(GYRE_CMD_PAUSE, GYRE_STATE_ACTIVE) == GYRE_STATE_PAUSED);
    CHECK(gyre_k1_next_state(GYRE_CMD_RUN, GYRE_STATE_PAUSED) == GYRE_STATE_ACTIVE);
    CHECK(gyre_k1_next_state(GYRE_CMD_TERMINATE, GYRE_STATE_PAUSED) == GYRE_STATE_DRAINING);
    CHECK(gyre_k1_next_state(GYRE_CMD_PAUSE, GYRE_STATE_DRAINING) == GYRE_STATE_DRAINING);
    CHECK(gyre_k1_next_state(GYRE_CMD_RUN, GYRE_STATE_ACTIVE) == GYRE_STATE_ACTIVE);

    printf("ring.h: all checks passed\n");
    return 0;
}
"#;

#[test]
fn ring_h_is_plain_c_and_follows_the_protocol() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gyre-cuda-ring-h");
    std::fs::create_dir_all(&dir).expect("create the test directory");
    let src = dir.join("ring_h_driver.c");
    let exe = dir.join("ring_h_driver");
    std::fs::write(&src, format!("{PORT}\n{DRIVER}")).expect("write the driver");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../cuda/include");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(&cc)
        .args([
            "-std=c11",
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Wconversion",
            "-Werror",
            "-O1",
        ])
        .arg("-I")
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("no C compiler ({cc}): {e}"));
    assert!(
        out.status.success(),
        "ring.h does not compile as C11:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A protocol bug can make the poller wait forever: bound the run.
    let mut child = Command::new(&exe)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the driver");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        match child.try_wait().expect("wait for the driver") {
            Some(status) => break Some(status),
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut text);
    }
    let status =
        status.unwrap_or_else(|| panic!("ring.h driver hung (killed after 60 s):\n{text}"));
    assert!(status.success(), "ring.h driver failed ({status}):\n{text}");
    assert!(text.contains("all checks passed"), "{text}");
}
