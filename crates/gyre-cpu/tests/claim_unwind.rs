//! The claim -> publish window left early (`gyre_core::channel` claim guard): by a panic
//! in a message's `AsRef`, or by an `AsRef` that grew after the size check. The claim is
//! published anyway, with tombstones the kernel answers `BAD_LENGTH` without running the
//! handler; sends written before the fault are delivered, the tombstones never are.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;

use gyre_abi::error;
use gyre_core::channel::{Channel, Kind, PublishError, TOMBSTONE_LEN};
use gyre_core::region::RingId;
use gyre_core::ring::Geometry;
use gyre_core::SharedRegion;
use gyre_cpu::Stepper;

/// A message whose second read misbehaves (the first is the size check).
struct Faulty {
    reads: Cell<u32>,
    bytes: &'static [u8],
    second: Option<&'static [u8]>,
}

impl Faulty {
    fn plain(bytes: &'static [u8]) -> Self {
        Self {
            reads: Cell::new(0),
            bytes,
            second: None,
        }
    }
}

impl AsRef<[u8]> for Faulty {
    fn as_ref(&self) -> &[u8] {
        self.reads.set(self.reads.get() + 1);
        match (self.reads.get(), self.second) {
            (2, Some([])) => panic!("producer dies inside its claim (test)"),
            (2, Some(b)) => b,
            _ => self.bytes,
        }
    }
}

static BIG: [u8; 200] = [7; 200];

fn check(ch: &Channel, region: &SharedRegion, k: &mut Stepper<'_>) {
    // The head is lazy: every index of the claim is stamped (tombstones included), so a
    // sync moves it over all three.
    assert_eq!(ch.sync_head(), 3, "the claim was published");
    assert_eq!(region.control().h2k_head.load(Acquire), 3);
    assert_eq!(k.step(), Some(3), "the kernel took all three");
    assert_eq!(
        ch.try_recv(|r| Ok(r.payload.to_vec())).unwrap(),
        Some(b"a".to_vec()),
        "the send written before the fault is delivered"
    );
    assert_eq!(
        ch.try_recv(|r| Ok(r.payload.to_vec())).unwrap(),
        None,
        "tombstones are never delivered"
    );
    for i in 1..3 {
        let rq = region.slot(RingId::Request, i);
        let rs = region.slot(RingId::Reply, i);
        // SAFETY: single-threaded; the kernel is stepped on this thread.
        let (req, rep) = unsafe { (rq.read_meta(), rs.read_meta()) };
        assert_eq!((req.len, req.correlation_id), (TOMBSTONE_LEN, i));
        assert_eq!((rep.status, rep.len), (error::BAD_LENGTH, 0));
    }
    let t = gyre_core::telemetry::read_consistent(region.telemetry(), 8).unwrap();
    assert_eq!(t.errors, 2);
}

#[test]
fn panic_inside_the_claim_publishes_tombstones() {
    let region = Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 8).unwrap(), 0).unwrap());
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&region, &h).unwrap();
    let ch = Channel::new(region.clone(), "t");
    let msgs = [
        Faulty::plain(b"a"),
        Faulty {
            reads: Cell::new(0),
            bytes: b"b",
            second: Some(b""),
        },
        Faulty::plain(b"c"),
    ];
    let r = catch_unwind(AssertUnwindSafe(|| {
        ch.try_publish_batch(Kind::Send, 1, &msgs)
    }));
    assert!(r.is_err(), "the producer panicked");
    check(&ch, &region, &mut k);
}

#[test]
fn message_growing_after_the_size_check_is_too_large_and_never_copied() {
    let region = Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 8).unwrap(), 0).unwrap());
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&region, &h).unwrap();
    let ch = Channel::new(region.clone(), "t");
    let msgs = [
        Faulty::plain(b"a"),
        Faulty {
            reads: Cell::new(0),
            bytes: b"b",
            second: Some(&BIG),
        },
        Faulty::plain(b"c"),
    ];
    assert_eq!(
        ch.try_publish_batch(Kind::Send, 1, &msgs),
        Err(PublishError::TooLarge {
            len: 200,
            payload: 64
        })
    );
    check(&ch, &region, &mut k);
}

/// A message whose bytes change on its third read: the batch reads each message once
/// after the size check, so what is published is one read's bytes at that read's length
/// (never a length from one read over the bytes of another, with stale slot bytes past
/// a shorter one, nor a longer one cut to fit).
struct Drifting {
    reads: Cell<u32>,
    early: &'static [u8],
    late: &'static [u8],
}

impl AsRef<[u8]> for Drifting {
    fn as_ref(&self) -> &[u8] {
        self.reads.set(self.reads.get() + 1);
        if self.reads.get() >= 3 {
            self.late
        } else {
            self.early
        }
    }
}

#[test]
fn a_message_is_published_from_one_read_at_its_own_length() {
    for late in [&b"xy"[..], &BIG[..60]] {
        let region =
            Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 8).unwrap(), 0).unwrap());
        let h = gyre_core::kernels::echo;
        let mut k = Stepper::new(&region, &h).unwrap();
        let ch = Channel::new(region.clone(), "t");
        let msgs = [Drifting {
            reads: Cell::new(0),
            early: b"abcdefgh",
            late,
        }];
        assert_eq!(ch.try_publish_batch(Kind::Send, 1, &msgs), Ok(0));
        assert_eq!(k.step(), Some(1));
        let got = ch.try_recv(|r| Ok(r.payload.to_vec())).unwrap().unwrap();
        assert!(
            got == b"abcdefgh" || got == late,
            "published {got:?}: neither read of the message"
        );
    }
}
