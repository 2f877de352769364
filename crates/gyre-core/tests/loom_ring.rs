//! loom models of the host-side ring protocol: producer claim / publish of the written
//! prefix, consumer read / release (at the tail, without a fence, and behind it),
//! wrap-around, out-of-order release, and a claim a
//! producer abandoned mid-batch (the claim guard's tombstones).
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

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use gyre_core::ring::prefix::{advance_prefix, sync_published, try_claim, ClaimError};
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
    /// The head is lazy (P4 is the stamps alone; [`Ring::sync`] moves the head).
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
            lazy: false,
        }
    }

    fn lazy() -> Self {
        Self {
            lazy: true,
            ..Self::new()
        }
    }

    /// `Channel::sync_head`: moves the lazy head, from where the consumer is.
    fn sync(&self) -> u64 {
        sync_published(&self.head, &self.claim, self.tail.load(Acquire), CAP, |i| {
            &self.seq[(i % CAP) as usize]
        })
    }

    /// P1..P4 for consecutive messages: one claim, write and stamp each, one publish.
    /// Spins (yielding) while full.
    fn produce_batch(&self, values: &[u64]) {
        let n = values.len() as u64;
        let first = loop {
            let head = (!self.lazy).then_some(&self.head);
            match try_claim(&self.claim, &self.tail, head, CAP, n) {
                Ok(i) => break i,
                Err(ClaimError::Full) => thread::yield_now(),
                Err(ClaimError::Closed) => unreachable!(),
            }
        };
        for (k, v) in values.iter().enumerate() {
            let idx = first + k as u64;
            let s = (idx % CAP) as usize;
            // SAFETY: this producer claimed `idx` and has not published it, so it owns the
            // cell; loom's UnsafeCell flags any concurrent access (that is the check).
            self.data[s].with_mut(|p| unsafe { *p = *v });
            self.seq[s].store(idx + 1, Release);
        }
        if self.lazy {
            return;
        }
        advance_prefix(&self.head, Some(&self.claim), first..first + n, CAP, |i| {
            &self.seq[(i % CAP) as usize]
        });
    }

    fn produce(&self, value: u64) {
        self.produce_batch(&[value]);
    }

    /// The head's invariant, as a kernel that reads `h2k_head` relies on it: every index
    /// below a head read with acquire is written and stamped. Called by the one consumer
    /// while it waits for `from` (so no index from `from` on was reused).
    fn check_head(&self, from: u64) {
        let h = self.head.load(Acquire);
        for i in from..h {
            let s = (i % CAP) as usize;
            // Relaxed: the head's acquire is the only edge a consumer has; coherence
            // after it must show the stamp.
            assert_eq!(
                self.seq[s].load(Relaxed),
                i + 1,
                "head {h} published index {i} before its producer stamped it"
            );
            // And the slot's contents through that edge alone: loom reports a race if
            // the head was published before the write.
            // SAFETY: read-only; index `i` is published and not reused before `tail`
            // passes it (loom checks the access).
            self.data[s].with(|p| unsafe { *p });
        }
    }

    /// K2..K7 for one message, as the CPU kernel does it: poll the slot's sequence (not
    /// the head) until it says `idx`, read, release.
    fn consume(&self, idx: u64) -> u64 {
        let s = (idx % CAP) as usize;
        self.check_head(idx);
        while self.seq[s].load(Acquire) != idx + 1 {
            thread::yield_now();
            self.check_head(idx);
        }
        // SAFETY: the acquire of sequence `idx + 1` orders the producer's write before this
        // read, and the cell is not reused before `tail` passes `idx` (loom checks it).
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

/// Three producers claim one index each and publish at once (no consumer: the ring has
/// room for all three). The head must cover all three in every interleaving. With only
/// two, of any pair one sees the other; with three, a producer whose compare-and-swap
/// fails because another moved the head past its own index must still carry on over the
/// markers it sees beyond (an early return there left the head short: this model failed
/// until `advance_prefix` stopped returning as soon as the head had passed `owned`).
#[test]
fn three_producers_publish_prefix() {
    const N: u64 = 3;
    three_thread_model(|| {
        let claim = Arc::new(AtomicU64::new(0));
        let (head, tail) = (Arc::new(AtomicU64::new(0)), AtomicU64::new(0));
        let seq = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
        let ps: Vec<_> = (0..N)
            .map(|_| {
                let (claim, head, seq) = (claim.clone(), head.clone(), seq.clone());
                let first = try_claim(&*claim, &tail, Some(&*head), N, 1).unwrap();
                thread::spawn(move || {
                    seq[first as usize].store(first + 1, Release);
                    advance_prefix(&*head, Some(&*claim), first..first + 1, N, |i| {
                        &seq[(i % N) as usize]
                    });
                })
            })
            .collect();
        for p in ps {
            p.join().unwrap();
        }
        assert_eq!(head.load(Acquire), N);
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

/// A batch publisher stamps index 0, is preempted before it publishes, the consumer
/// answers and releases index 0 (it polls sequences, not the head), and a second
/// producer wants the next lap of slot 0. The claim must wait until the head passes
/// index 0; otherwise the second producer overwrites the marker the first still has to
/// scan and the head never moves again.
#[test]
fn reuse_waits_for_publication_of_previous_lap() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        let r1 = r.clone();
        let batch = thread::spawn(move || r1.produce_batch(&[1, 2]));
        // The consumer answers index 0 as soon as its sequence is stamped, then wants
        // the next lap of slot 0 for a message of its own.
        assert_eq!(r.consume(0), 1);
        r.produce(3);
        assert_eq!(r.consume(1), 2);
        assert_eq!(r.consume(2), 3);
        batch.join().unwrap();
        // Everything consumed was published: the head covers all three.
        assert_eq!(r.head.load(Acquire), 3);
    });
}

/// Releases each of `runs` (consecutive, from 0, ending at 3 at most) from a thread of
/// its own, as consumers do (H3: the freed markers, then `advance_prefix` with no claim
/// word), and returns the tail once every thread is done.
fn release_runs(runs: &[core::ops::Range<u64>]) -> u64 {
    let end = runs.iter().map(|r| r.end).max().unwrap_or(1);
    let tail = Arc::new(AtomicU64::new(0));
    let freed = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let ts: Vec<_> = runs
        .iter()
        .cloned()
        .map(|run| {
            let (tail, freed) = (tail.clone(), freed.clone());
            thread::spawn(move || {
                for i in run.clone() {
                    freed[i as usize].store(i + 1, Release);
                }
                advance_prefix(&*tail, None, run, end, |j| &freed[(j % end) as usize]);
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
    tail.load(Acquire)
}

/// Reply slots released out of order by two consumers: `k2h_tail` must reach the end
/// whichever finishes first.
#[test]
fn out_of_order_release_advances_tail() {
    loom::model(|| assert_eq!(release_runs(&[0..1, 1..2]), 2));
}

/// Three consumers release indices 0, 1 and 2, each from its own thread: whichever
/// finds its run at the tail moves it with one compare-and-swap and no fence
/// (`advance_prefix`'s fast path), the others fence and scan. The tail must reach the
/// end in every interleaving, with the fast path on either side of each pair. loom does
/// not model SeqCst loads and read-modify-writes as SeqCst (tokio-rs/loom#180), so in
/// this build a fence follows the fast path's compare-and-swap: the model checks that
/// stronger program, and the fence-free one rests on the argument on
/// `prefix::advance_from`. It fails when `advance_from` is dropped or the fence is.
#[test]
fn releases_at_the_tail_and_behind_it_advance_it() {
    three_thread_model(|| assert_eq!(release_runs(&[0..1, 1..2, 2..3]), 3));
}

/// A run of two released at the tail (the fast path: one compare-and-swap over both)
/// races a release of the index after it, which fences and scans.
#[test]
fn a_run_at_the_tail_and_the_index_after_it() {
    loom::model(|| assert_eq!(release_runs(&[0..2, 2..3]), 3));
}

/// A claim is refused while the ring is full and succeeds after a release.
#[test]
fn claim_sees_release() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        r.produce(1);
        r.produce(2);
        assert_eq!(
            try_claim(&r.claim, &r.tail, Some(&r.head), CAP, 1),
            Err(ClaimError::Full)
        );
        let r2 = r.clone();
        let c = thread::spawn(move || r2.consume(0));
        r.produce(3);
        assert_eq!(c.join().unwrap(), 1);
        assert_eq!(r.consume(1), 2);
        assert_eq!(r.consume(2), 3);
    });
}

/// The length word a tombstone carries in this model (`TOMBSTONE_LEN` in the runtime).
const TOMBSTONE: u64 = u64::MAX;
/// A cell's word in this model: a send nobody waits for, or an abandoned call.
const SEND: u64 = 0;
const ABANDONED: u64 = 1;

/// A producer claims two indices, writes the first and leaves the window early (a
/// panicking `AsRef`, or one that grew past the size check): `ClaimGuard`'s drop
/// (`channel/claim.rs`) stamps the written index, marks the unwritten one abandoned
/// *before* it writes the tombstone and stamps it, and publishes the whole claim. The
/// consumer, racing it, must read the written message, then a tombstone whose cell
/// already says abandoned (a reader that sees the sequence sees a discarded call, never a
/// send); the head must cover the claim, so the next producer gets through.
#[test]
fn an_abandoned_claim_is_published_with_tombstones() {
    loom::model(|| {
        let r = Arc::new(Ring::new());
        let cells = Arc::new([AtomicU64::new(SEND), AtomicU64::new(SEND)]);
        // The claim comes first (so the indices are known); what follows it races.
        let first = try_claim(&r.claim, &r.tail, Some(&r.head), CAP, 2).expect("an empty ring");
        let (r1, c1) = (r.clone(), cells.clone());
        let abandoning = thread::spawn(move || {
            // Index `first` written (P2), then the window is left: the guard runs.
            // SAFETY: claimed by this producer, unpublished (loom checks the access).
            r1.data[(first % CAP) as usize].with_mut(|p| unsafe { *p = 7 });
            r1.seq[(first % CAP) as usize].store(first + 1, Release);
            let idx = first + 1;
            let s = (idx % CAP) as usize;
            c1[s].store(ABANDONED, Release);
            // SAFETY: index `idx` is claimed by this producer too and not stamped yet, so
            // nobody reads the cell (loom checks the access).
            r1.data[s].with_mut(|p| unsafe { *p = TOMBSTONE });
            r1.seq[s].store(idx + 1, Release);
            advance_prefix(&r1.head, Some(&r1.claim), first..first + 2, CAP, |i| {
                &r1.seq[(i % CAP) as usize]
            });
        });
        assert_eq!(r.consume(0), 7);
        assert_eq!(r.consume(1), TOMBSTONE);
        // Read after `consume` acquired the tombstone's sequence: it must say abandoned.
        assert_eq!(
            cells[1].load(Relaxed),
            ABANDONED,
            "a tombstone was visible before its cell said abandoned"
        );
        abandoning.join().unwrap();
        assert_eq!(
            r.head.load(Acquire),
            2,
            "the abandoned claim was not published"
        );
        // The next producer gets through (reusing a slot during a publication is
        // `reuse_waits_for_publication_of_previous_lap`).
        r.produce(9);
        assert_eq!(r.consume(2), 9);
    });
}

/// A lazy head: two producers only stamp (one of them reusing slot 0, whose marker holds
/// the previous lap's value) while a third thread syncs the head. Every head the
/// consumer reads covers only stamped requests (`check_head`), and a sync after the
/// producers finished covers them all.
#[test]
fn lazy_head_sync_races_publication_and_reuse() {
    lazy_model(|| {
        let r = Arc::new(Ring::lazy());
        r.produce(5);
        assert_eq!(r.consume(0), 5);
        let mut ts: Vec<_> = [10u64, 20]
            .into_iter()
            .map(|v| {
                let r = r.clone();
                thread::spawn(move || r.produce(v))
            })
            .collect();
        let r2 = r.clone();
        ts.push(thread::spawn(move || {
            r2.sync();
        }));
        let mut got = [r.consume(1), r.consume(2)];
        for t in ts {
            t.join().unwrap();
        }
        got.sort();
        assert_eq!(got, [10, 20]);
        assert_eq!(r.sync(), 3);
        assert_eq!(r.head.load(Acquire), 3);
    });
}

/// A lazy head whose sync lags behind a consumer that released a whole lap: the slots
/// hold later laps' markers (a reused slot counts as written, never as unwritten, so
/// the head cannot stick), and a head synced from a stale start never covers the
/// request still unwritten. Two syncs race (the head never goes back).
#[test]
fn lazy_head_sync_behind_a_reused_ring() {
    lazy_model(|| {
        let r = Arc::new(Ring::lazy());
        let r1 = r.clone();
        let p = thread::spawn(move || {
            for v in 1..=3 {
                r1.produce(v);
            }
        });
        let r2 = r.clone();
        let syncer = thread::spawn(move || r2.sync());
        // The consumer syncs too (as a command or a monitor would), racing the syncer.
        let mut got = vec![r.consume(0)];
        let mine = r.sync();
        got.extend((1..3).map(|i| r.consume(i)));
        p.join().unwrap();
        let theirs = syncer.join().unwrap();
        assert_eq!(got, [1, 2, 3]);
        assert!(
            r.head.load(Acquire) >= mine.max(theirs),
            "a sync moved the head back"
        );
        assert_eq!(r.sync(), 3);
    });
}

/// Three racing threads with at most two preemptions: both three-thread models fail
/// within it when the early return they guard against is put back, and take seconds
/// instead of minutes (`LOOM_MAX_PREEMPTIONS=3` explored 88 s for the producers).
fn three_thread_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// The lazy-head models run at 2 preemptions whatever `LOOM_MAX_PREEMPTIONS` says: at 3
/// each takes minutes of CPU (their first versions passed there, 2026-11-29), and at 2
/// they already fail when the sync counts a slot holding the previous lap's sequence as
/// written, loads it or CASes the head relaxed, or stores the head instead of CASing it.
fn lazy_model<F: Fn() + Sync + Send + 'static>(f: F) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}
