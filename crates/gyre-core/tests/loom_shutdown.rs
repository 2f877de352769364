//! loom model of shutdown with requests in flight (the drain path): producers race the
//! closing of the claim word; the host waits until every accepted claim is published
//! (`h2k_head` covers the claim count), then commands Terminate; the kernel answers
//! everything published and stops. Every accepted request must be answered exactly once,
//! every refused one never, and the kernel must not stop early.
//!
//! Run with (CI does):
//!
//! ```text
//! RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test -p gyre-core --release --test loom_shutdown
//! ```
//!
//! It drives the functions the runtime uses (`try_claim`, `advance_prefix` for an eager
//! head, `sync_published` for a lazy one, `close`, `claimed`) over loom atomics; the
//! kernel side follows K2 (poll the slot sequence), K4's check (a head beyond the tail
//! over a slot whose sequence is not the index's fails the model: the real kernel would
//! answer it `BAD_SEQUENCE`) and the drain condition of `gyre-cpu`'s loop (`Draining` and
//! `h2k_head <= tail`). The
//! kernel polls a bounded number of times concurrently with the producers and the
//! shutdown, then drains after Terminate (a model thread spinning until Terminate would
//! exceed loom's branch bound).
#![cfg(gyre_loom)]

use core::sync::atomic::Ordering::{Acquire, Release};

use gyre_core::ring::prefix::{
    advance_prefix, claimed, close, sync_published, try_claim, ClaimError,
};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU64};
use loom::sync::Arc;
use loom::thread;

const CAP: u64 = 2;

struct Ring {
    claim: AtomicU64,
    head: AtomicU64,
    tail: AtomicU64,
    seq: [AtomicU64; CAP as usize],
    data: [UnsafeCell<u64>; CAP as usize],
    terminate: AtomicBool,
    /// The head is lazy: producers only stamp, shutdown syncs it (`Channel::sync_head`).
    lazy: bool,
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
            terminate: AtomicBool::new(false),
            lazy: false,
        }
    }

    fn with_head(lazy: bool) -> Self {
        Self {
            lazy,
            ..Self::new()
        }
    }

    /// The head a reader sees: a lazy one synced first, from what the kernel answered
    /// and the host released (here one index, `tail`).
    fn head(&self) -> u64 {
        if self.lazy {
            sync_published(&self.head, &self.claim, self.tail.load(Acquire), CAP, |i| {
                &self.seq[(i % CAP) as usize]
            })
        } else {
            self.head.load(Acquire)
        }
    }

    /// P1..P4 for one message; `false` when the ring was closed (or full: a caller that
    /// gives up). Never waits.
    fn try_produce(&self, value: u64) -> bool {
        let head = (!self.lazy).then_some(&self.head);
        let idx = match try_claim(&self.claim, &self.tail, head, CAP, 1) {
            Ok(i) => i,
            Err(ClaimError::Closed | ClaimError::Full) => return false,
        };
        let s = (idx % CAP) as usize;
        // SAFETY: claimed and not yet published, so this producer owns the cell; loom's
        // UnsafeCell flags any concurrent access.
        self.data[s].with_mut(|p| unsafe { *p = value });
        self.seq[s].store(idx + 1, Release);
        if self.lazy {
            return true;
        }
        advance_prefix(&self.head, Some(&self.claim), idx..idx + 1, CAP, |i| {
            &self.seq[(i % CAP) as usize]
        });
        true
    }

    /// The kernel, while the host runs: K2 (poll the sequence) and answer in order, a
    /// bounded number of polls (a spinning model thread would never end).
    fn kernel_polls(&self, tail: &mut u64, out: &mut Vec<u64>, polls: usize) {
        for _ in 0..polls {
            let s = (*tail % CAP) as usize;
            if self.seq[s].load(Acquire) == *tail + 1 {
                // SAFETY: the acquire of the sequence orders the producer's write first;
                // the cell is reused only after `tail` passes it (loom checks both).
                out.push(self.data[s].with(|p| unsafe { *p }));
                *tail += 1;
                self.tail.store(*tail, Release);
            }
        }
    }

    /// The kernel after Terminate (gyre-cpu's Draining): answer everything published,
    /// then stop once `h2k_head <= tail`.
    fn kernel_drain(&self, tail: &mut u64, out: &mut Vec<u64>) {
        assert!(self.terminate.load(Acquire));
        loop {
            let s = (*tail % CAP) as usize;
            if self.seq[s].load(Acquire) == *tail + 1 {
                self.kernel_polls(tail, out, 1);
            } else if self.head.load(Acquire) <= *tail {
                return;
            } else {
                // K4: a head beyond the tail, read after the sequence, over a slot whose
                // sequence (read again after the head) is not the index's: the real
                // kernel answers BAD_SEQUENCE, so a head that passed an unstamped
                // accepted request fails here.
                assert_eq!(
                    self.seq[s].load(Acquire),
                    *tail + 1,
                    "the head passed request {tail} before it was stamped"
                );
            }
        }
    }

    /// The host's shutdown: close, wait for every accepted claim to be published, then
    /// Terminate. Returns how many requests were accepted.
    fn shutdown(&self) -> u64 {
        let accepted = close(&self.claim);
        while self.head() < claimed(&self.claim) {
            thread::yield_now();
        }
        self.terminate.store(true, Release);
        accepted
    }
}

/// Two producers race the shutdown: whatever was accepted is answered exactly once and
/// in index order, whatever was refused never is, and the kernel drains before stopping.
#[test]
fn shutdown_drains_exactly_the_accepted_requests() {
    loom::model(|| drains_exactly_the_accepted(false));
}

/// The same with a lazy head: shutdown's sync, not the producers, moves the head.
#[test]
fn shutdown_drains_exactly_the_accepted_requests_with_a_lazy_head() {
    lazy_model(|| drains_exactly_the_accepted(true));
}

fn drains_exactly_the_accepted(lazy: bool) {
    let r = Arc::new(Ring::with_head(lazy));
    let producers: Vec<_> = [10u64, 20]
        .into_iter()
        .map(|v| {
            let r = r.clone();
            thread::spawn(move || r.try_produce(v).then_some(v))
        })
        .collect();
    let (accepted, mut answered) = shutdown_beside_the_kernel(&r, 2);
    let mut sent: Vec<u64> = producers
        .into_iter()
        .filter_map(|p| p.join().unwrap())
        .collect();
    assert_eq!(accepted, sent.len() as u64, "claims counted by close");
    answered.sort_unstable();
    sent.sort_unstable();
    assert_eq!(answered, sent, "accepted == answered, each once");
    assert_eq!(r.head.load(Acquire), accepted);
}

/// A producer stamped its slot but has not published when shutdown closes the ring: the
/// host must wait for its publication (not Terminate early), or the kernel could stop
/// with an accepted request unanswered.
#[test]
fn shutdown_waits_for_a_claim_being_written() {
    loom::model(|| waits_for_a_claim_being_written(false));
}

/// The same with a lazy head: the sync stops at the unstamped claim.
#[test]
fn shutdown_waits_for_a_claim_being_written_with_a_lazy_head() {
    lazy_model(|| waits_for_a_claim_being_written(true));
}

fn waits_for_a_claim_being_written(lazy: bool) {
    let r = Arc::new(Ring::with_head(lazy));
    let r1 = r.clone();
    let p = thread::spawn(move || r1.try_produce(7));
    let (accepted, answered) = shutdown_beside_the_kernel(&r, 1);
    let ok = p.join().unwrap();
    assert_eq!(accepted, u64::from(ok));
    assert_eq!(answered, if ok { vec![7] } else { vec![] });
}

/// The host's shutdown while a kernel thread polls `polls` times, then the kernel's drain
/// once the host has commanded it: returns what shutdown accepted and what the kernel
/// answered, in order.
fn shutdown_beside_the_kernel(r: &Arc<Ring>, polls: usize) -> (u64, Vec<u64>) {
    let rk = r.clone();
    let kernel = thread::spawn(move || {
        let (mut tail, mut out) = (0, Vec::new());
        rk.kernel_polls(&mut tail, &mut out, polls);
        (tail, out)
    });
    let accepted = r.shutdown();
    let (mut tail, mut answered) = kernel.join().unwrap();
    r.kernel_drain(&mut tail, &mut answered);
    (accepted, answered)
}

/// As in `loom_ring.rs`: the lazy-head models run at 2 preemptions.
fn lazy_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}
