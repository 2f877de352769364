//! Unit tests of the host channel against a hand-written "kernel" that writes reply
//! slots directly, including malformed ones.

use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use gyre_abi::{error, state};

use super::*;
use crate::idle::IdleStrategy;
use crate::ring::Geometry;

fn channel(cap: u32) -> Channel {
    let g = Geometry::new(cap, 128, 1).unwrap();
    Channel::new(Arc::new(SharedRegion::new_host(g, 0).unwrap()), "test")
}

/// Answers request `idx` as the kernel would, with `corr`, `len` and `status`.
fn reply(ch: &Channel, idx: u64, corr: u64, payload: &[u8], len: u32, status: u32) {
    let s = ch.region().slot(RingId::Reply, idx);
    // SAFETY: single-threaded test; nobody else touches the slot.
    unsafe {
        s.write_meta(&SlotMeta {
            correlation_id: corr,
            len,
            status,
            ..SlotMeta::default()
        });
        core::ptr::copy_nonoverlapping(payload.as_ptr(), s.payload_ptr(), payload.len());
    }
    s.sequence().store(idx + 1, Release);
    ch.region().control().k2h_head.store(idx + 1, Release);
}

fn bytes(r: ReplyView<'_>) -> crate::Result<Vec<u8>> {
    Ok(r.payload.to_vec())
}

#[test]
fn oversize_and_closed_write_nothing() {
    let ch = channel(4);
    assert_eq!(
        ch.try_publish(Kind::Send, 0, &[0u8; 65]),
        Err(PublishError::TooLarge {
            len: 65,
            payload: 64
        })
    );
    assert_eq!(ch.claimed(), 0);
    assert_eq!(ch.region().control().h2k_head.load(Acquire), 0);
    assert_eq!(ch.close(), 0);
    assert_eq!(
        ch.try_publish(Kind::Send, 0, b"x"),
        Err(PublishError::Closed)
    );
}

#[test]
fn publish_writes_header_then_sequence() {
    let ch = channel(4);
    assert_eq!(ch.try_publish(Kind::Call, 7, b"abc"), Ok(0));
    let s = ch.region().slot(RingId::Request, 0);
    assert_eq!(s.sequence().load(Acquire), 1);
    // SAFETY: single-threaded test.
    let m = unsafe { s.read_meta() };
    assert_eq!(
        (m.correlation_id, m.msg_type, m.len, m.flags),
        (0, 7, 3, flags::CALL)
    );
    assert_eq!(unsafe { s.payload(3) }, b"abc");
    // The head is lazy: the sequence published the request, the head moves on a sync.
    assert_eq!(ch.region().control().h2k_head.load(Acquire), 0);
    assert!(ch.all_published());
    assert_eq!(ch.region().control().h2k_head.load(Acquire), 1);
}

#[test]
fn a_lazy_head_waits_for_a_producer_mid_write_and_covers_the_rest() {
    let ch = channel(4);
    ch.try_publish(Kind::Send, 0, b"a").unwrap();
    // Index 1 claimed but not written (a producer between P1 and P3), 2 written.
    assert_eq!(
        prefix::try_claim(&*ch.claim, &ch.region().control().k2h_tail, None, 4, 1),
        Ok(1)
    );
    ch.try_publish(Kind::Send, 0, b"c").unwrap();
    assert!(!ch.all_published());
    assert_eq!(ch.sync_head(), 1, "stops at the unwritten index");
    ch.region()
        .slot(RingId::Request, 1)
        .sequence()
        .store(2, Release);
    assert!(ch.all_published());
    assert_eq!(ch.sync_head(), 3);
}

#[test]
fn a_released_but_unanswered_request_does_not_start_the_sync_past_its_producer() {
    // After a final stop, `recv` releases a send the kernel never answered (k2h_tail
    // passes it) while its producer may still be writing it: no reply was published
    // (k2h_head 0), so the sync must still wait for the stamp.
    let ch = channel(4);
    assert_eq!(
        prefix::try_claim(&*ch.claim, &ch.region().control().k2h_tail, None, 4, 1),
        Ok(0)
    );
    ch.region().control().k2h_tail.store(1, Release);
    assert_eq!(ch.sync_head(), 0);
    assert!(!ch.all_published());
    ch.region()
        .slot(RingId::Request, 0)
        .sequence()
        .store(1, Release);
    assert_eq!(ch.sync_head(), 1);
}

#[test]
fn an_eager_head_moves_with_every_publication() {
    let g = Geometry::new(4, 128, 1).unwrap();
    let region = Arc::new(SharedRegion::new_host(g, 0).unwrap());
    region
        .control()
        .host_flags
        .fetch_or(gyre_abi::host_flags::DOORBELL, Release);
    let ch = Channel::new(region, "eager");
    ch.try_publish(Kind::Send, 0, b"a").unwrap();
    assert_eq!(ch.region().control().h2k_head.load(Acquire), 1);
}

#[test]
fn wrong_correlation_is_a_protocol_error_and_releases() {
    let ch = channel(2);
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    reply(&ch, i, 99, b"a", 1, 0);
    let e = ch
        .wait_blocking(i, &IdleStrategy::BusySpin, None, bytes)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Protocol {
                what: "reply correlation id",
                found: 99,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(ch.protocol_errors(), 1);
    assert_eq!(
        ch.region().control().k2h_tail.load(Acquire),
        1,
        "slot released"
    );
}

#[test]
fn reply_length_beyond_payload_is_a_protocol_error() {
    let ch = channel(2);
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    reply(&ch, i, i, b"", 1000, 0);
    let e = ch
        .wait_blocking(i, &IdleStrategy::BusySpin, None, bytes)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Protocol {
                what: "reply length",
                found: 1000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn wrong_sequence_under_published_head_is_detected() {
    let ch = channel(2);
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    // The kernel claims to have published reply 0, but the slot's sequence is wrong.
    ch.region()
        .slot(RingId::Reply, i)
        .sequence()
        .store(77, Release);
    ch.region().control().k2h_head.store(1, Release);
    // 77 > index + 1 reads as a later lap; the waiter's slow check reports it.
    let e = ch
        .wait_blocking(i, &IdleStrategy::BusySpin, None, bytes)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Protocol {
                what: "reply sequence",
                found: 77,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn faulted_kernel_fails_waiters_and_closes() {
    let ch = channel(4);
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    let cb = ch.region().control();
    cb.error_code.store(error::HANDLER_PANIC, Release);
    cb.state.store(state::FAULTED, Release);
    let e = ch
        .wait_blocking(i, &IdleStrategy::BusySpin, None, bytes)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::KernelFaulted {
                code: error::HANDLER_PANIC,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        ch.try_publish(Kind::Send, 0, b"b"),
        Err(PublishError::Closed)
    );
}

#[test]
fn recv_skips_call_replies_and_keeps_order() {
    let ch = channel(8);
    let c = ch.try_publish(Kind::Call, 0, b"call").unwrap();
    let s1 = ch.try_publish(Kind::Send, 0, b"s1").unwrap();
    let s2 = ch.try_publish(Kind::Send, 0, b"s2").unwrap();
    assert_eq!(ch.try_recv(bytes), Ok(None));
    reply(&ch, c, c, b"call", 4, 0);
    reply(&ch, s1, s1, b"s1", 2, 0);
    assert_eq!(ch.try_recv(bytes), Ok(Some(b"s1".to_vec())));
    assert_eq!(ch.try_recv(bytes), Ok(None));
    reply(&ch, s2, s2, b"s2", 2, 0);
    assert_eq!(ch.try_recv(bytes), Ok(Some(b"s2".to_vec())));
    // The call's reply is still there for its owner; the tail waits for it.
    assert_eq!(ch.region().control().k2h_tail.load(Acquire), 0);
    let r = ch
        .wait_blocking(c, &IdleStrategy::BusySpin, None, bytes)
        .unwrap();
    assert_eq!(r, b"call");
    assert_eq!(ch.region().control().k2h_tail.load(Acquire), 3);
}

#[test]
fn abandoned_call_is_released_when_its_reply_arrives() {
    let ch = channel(2);
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    ch.abandon(i, false);
    assert_eq!(
        ch.interest.load(Acquire),
        1,
        "the abandoned cell needs the driver"
    );
    assert_eq!(ch.region().control().k2h_tail.load(Acquire), 0);
    reply(&ch, i, i, b"a", 1, 0);
    assert!(ch.try_finalize(i));
    assert!(!ch.try_finalize(i), "finalised exactly once");
    assert_eq!(ch.region().control().k2h_tail.load(Acquire), 1);
    assert_eq!(ch.interest.load(Acquire), 0);
}

#[test]
fn back_pressure_counts_unreleased_replies() {
    let ch = channel(2);
    let a = ch.try_publish(Kind::Send, 0, b"a").unwrap();
    let b = ch.try_publish(Kind::Send, 0, b"b").unwrap();
    assert_eq!(ch.try_publish(Kind::Send, 0, b"c"), Err(PublishError::Full));
    reply(&ch, a, a, b"a", 1, 0);
    reply(&ch, b, b, b"b", 1, 0);
    // Answered but not received: still full.
    assert_eq!(ch.try_publish(Kind::Send, 0, b"c"), Err(PublishError::Full));
    assert_eq!(ch.try_recv(bytes), Ok(Some(b"a".to_vec())));
    assert_eq!(ch.try_publish(Kind::Send, 0, b"c"), Ok(2));
}

/// A waker that counts its wake-ups.
struct Count(AtomicU64);

impl std::task::Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Release);
    }
}

/// Polls the reply of `index` once from a task whose waker counts.
fn poll_once(ch: &Channel, index: u64, count: &Arc<Count>, registered: &mut bool) -> bool {
    let waker = core::task::Waker::from(count.clone());
    let mut cx = core::task::Context::from_waker(&waker);
    let mut spun = true;
    let r = ch.poll_reply(
        index,
        &mut cx,
        registered,
        &mut spun,
        std::time::Duration::ZERO,
        bytes,
    );
    r.is_ready()
}

/// The reply bell wakes the waiter of each reply published since its last ring, once,
/// and a reply published while nobody waited is found by its waiter's own probe.
#[test]
fn the_reply_bell_wakes_the_waiters_of_what_it_published() {
    let ch = Arc::new(channel(4));
    let bell = bell::ReplyBell::new();
    bell.attach(&ch);
    assert!(ch.has_reply_bell());
    let mut ringer = bell.ringer();
    let (a, b) = (
        Arc::new(Count(AtomicU64::new(0))),
        Arc::new(Count(AtomicU64::new(0))),
    );
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    let j = ch.try_publish(Kind::Call, 0, b"b").unwrap();
    let (mut ri, mut rj) = (false, false);
    assert!(!poll_once(&ch, i, &a, &mut ri) && !poll_once(&ch, j, &b, &mut rj));
    assert_eq!(ch.interest.load(Acquire), 2);
    reply(&ch, i, i, b"a", 1, 0);
    ringer.ring();
    assert_eq!((a.0.load(Acquire), b.0.load(Acquire)), (1, 0));
    reply(&ch, j, j, b"b", 1, 0);
    ringer.ring();
    assert_eq!(
        (a.0.load(Acquire), b.0.load(Acquire)),
        (1, 1),
        "reply i is not served twice"
    );
    assert!(poll_once(&ch, i, &a, &mut ri) && poll_once(&ch, j, &b, &mut rj));
    assert_eq!(ch.interest.load(Acquire), 0);
    // Nobody waits: the ring moves on without looking; the waiter finds its reply.
    let k = ch.try_publish(Kind::Call, 0, b"c").unwrap();
    reply(&ch, k, k, b"c", 1, 0);
    ringer.ring();
    let mut rk = false;
    assert!(poll_once(&ch, k, &a, &mut rk));
    assert_eq!(a.0.load(Acquire), 1, "its own probe, no wake-up");
}

/// An abandoned call's reply is released by the ring that follows it under a bell (no
/// driver runs here).
#[test]
fn the_reply_bell_releases_abandoned_replies() {
    let ch = Arc::new(channel(2));
    let bell = bell::ReplyBell::new();
    bell.attach(&ch);
    let mut ringer = bell.ringer();
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    ch.abandon(i, false);
    reply(&ch, i, i, b"a", 1, 0);
    ringer.ring();
    assert_eq!(ch.region().control().k2h_tail.load(Acquire), 1);
    assert_eq!(ch.interest.load(Acquire), 0);
}

/// Under a bell the first waiter (from none) still wakes the driver, which then looks
/// every backstop while anyone waits: a kernel that ends after a waiter registered, with
/// no batch to ring the bell, is noticed there (the driver's heartbeat here is 60 s).
#[test]
fn under_a_bell_the_first_waiter_wakes_the_driver() {
    let ch = Arc::new(channel(4));
    let bell = bell::ReplyBell::new();
    bell.attach(&ch);
    let driver = driver::Driver::start(
        ch.clone(),
        IdleStrategy::default(),
        std::time::Duration::from_secs(60),
    )
    .unwrap();
    // The driver parks for its heartbeat: nobody waits yet.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let count = Arc::new(Count(AtomicU64::new(0)));
    let i = ch.try_publish(Kind::Call, 0, b"a").unwrap();
    let mut registered = false;
    assert!(!poll_once(&ch, i, &count, &mut registered));
    // The kernel ends without another batch.
    ch.region()
        .control()
        .state
        .store(state::TERMINATED, Release);
    let start = std::time::Instant::now();
    while count.0.load(Acquire) == 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "nobody woke the waiter"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(ch.check_stopped().is_some());
    drop(driver);
}
