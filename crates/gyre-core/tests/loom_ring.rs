//! loom models of the host-side ring protocol: producer claim / publish of the written
//! prefix, consumer read / release, wrap-around, and out-of-order release.
//!
//! Run with (CI does):
//!
//! ```text
//! RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p gyre-core --release --test loom_ring
//! ```
//!
//! The models drive the very functions the runtime uses ([`try_claim`],
//! [`advance_prefix`]), instantiated with loom's atomics; slot payloads are loom
//! `UnsafeCell`s, so a missing happens-before edge between a producer's write and the
//! consumer's read is reported as a data race.
#![cfg(gyre_loom)]

use core::sync::atomic::Ordering::{Acquire, Release};

use gyre_core::ring::prefix::{advance_prefix, try_claim, ClaimError};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

const CAP: u64 = 2;

/// A ring of `CAP` slots with the control-block indices the protocol uses.
struct Ring {
    claim: AtomicU64,
    head: AtomicU64,
    tail: AtomicU64,
    seq: [AtomicU64; CAP as usize],
    data: [UnsafeCell<u64>; CAP as usize],
}

// SAFETY (model): slot data is only accessed under the protocol; loom checks exactly that.
unsafe impl Sync for Ring {}

impl Ring {
    fn new() -> Self {
        Self {
            claim: AtomicU64::new(0),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            seq: [AtomicU64::new(0), AtomicU64::new(0)],
            data: [UnsafeCell::new(0), UnsafeCell::new(0)],
        }
    }

    /// P1..P4: claim, write, stamp, publish. Spins (yielding) while full.
    fn produce(&self, value: u64) {
        let idx = loop {
            match try_claim(&self.claim, &self.tail, CAP, 1) {
                Ok(i) => break i,
                Err(ClaimError::Full) => thread::yield_now(),
                Err(ClaimError::Closed) => unreachable!(),
            }
        };
        let s = (idx % CAP) as usize;
        self.data[s].with_mut(|p| unsafe { *p = value });
        self.seq[s].store(idx + 1, Release);
        advance_prefix(&self.head, idx + 1, CAP, |i| &self.seq[(i % CAP) as usize]);
    }

    /// K2..K7 for one message: wait for the published head, check the sequence, read,
    /// release.
    fn consume(&self, idx: u64) -> u64 {
        while self.head.load(Acquire) <= idx {
            thread::yield_now();
        }
        let s = (idx % CAP) as usize;
        assert_eq!(
            self.seq[s].load(Acquire),
            idx + 1,
            "sequence under the published head"
        );
        let v = self.data[s].with(|p| unsafe { *p });
        self.tail.store(idx + 1, Release);
        v
    }
}

/// Two producers race to publish; the consumer must see both, each exactly once, and
/// the head must cover both (no lost publication).
#[test]
fn two_producers_publish_prefix() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        let ps: Vec<_> = [10u64, 20]
            .into_iter()
            .map(|v| {
                let r = r.clone();
                thread::spawn(move || r.produce(v))
            })
            .collect();
        let mut got = [r.consume(0), r.consume(1)];
        for p in ps {
            p.join().unwrap();
        }
        got.sort();
        assert_eq!(got, [10, 20]);
        assert_eq!(r.head.load(Acquire), 2);
    });
}

/// Wrap-around under the publication race: after one message went through, two
/// producers claim indices 1 and 2 — index 2 reuses slot 0, whose marker still holds the
/// previous lap's value — and publish concurrently. The consumer must read both, in
/// index order, never the stale slot.
#[test]
fn wraparound_publication_race() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        r.produce(5);
        assert_eq!(r.consume(0), 5);
        let ps: Vec<_> = [10u64, 20]
            .into_iter()
            .map(|v| {
                let r = r.clone();
                thread::spawn(move || r.produce(v))
            })
            .collect();
        let mut got = [r.consume(1), r.consume(2)];
        for p in ps {
            p.join().unwrap();
        }
        got.sort();
        assert_eq!(got, [10, 20]);
        assert_eq!(r.head.load(Acquire), 3);
    });
}

/// One producer sending three messages through a ring of two: the third waits for the
/// consumer's release and overwrites slot 0 only after it was read (no data race), and
/// order is kept.
#[test]
fn wraparound_with_back_pressure() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        let r1 = r.clone();
        let p = thread::spawn(move || {
            for v in 1..=3 {
                r1.produce(v);
            }
        });
        let got: Vec<u64> = (0..3).map(|i| r.consume(i)).collect();
        p.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
    });
}

/// Reply slots released out of order by two consumers: `k2h_tail` must reach the end
/// whichever finishes first.
#[test]
fn out_of_order_release_advances_tail() {
    loom::model(|| {
        let tail = Arc::new(AtomicU64::new(0));
        let freed = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let ts: Vec<_> = (0..2u64)
            .map(|i| {
                let (tail, freed) = (tail.clone(), freed.clone());
                thread::spawn(move || {
                    freed[i as usize].store(i + 1, Release);
                    advance_prefix(&*tail, i + 1, CAP, |j| &freed[(j % CAP) as usize]);
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(tail.load(Acquire), 2);
    });
}

/// A claim is refused while the ring is full and succeeds after a release.
#[test]
fn claim_sees_release() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        r.produce(1);
        r.produce(2);
        assert_eq!(try_claim(&r.claim, &r.tail, CAP, 1), Err(ClaimError::Full));
        let r2 = r.clone();
        let c = thread::spawn(move || r2.consume(0));
        r.produce(3);
        assert_eq!(c.join().unwrap(), 1);
        assert_eq!(r.consume(1), 2);
        assert_eq!(r.consume(2), 3);
    });
}
