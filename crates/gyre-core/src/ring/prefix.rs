//! The index algorithms of the multi-producer request ring: claim, and publication of the
//! contiguous written prefix.
//!
//! # Algorithm
//!
//! This is the multi-producer sequencer of the LMAX Disruptor, adapted so that the device
//! side still sees a single, gap-free published head:
//!
//! 1. **Claim.** A producer reserves `n` consecutive indices with one compare-and-swap on
//!    a host-side claim counter, after checking that `claim + n - released <= capacity`
//!    (and `claim + n - published <= capacity` where the head is published eagerly)
//!    ([`try_claim`]): the slot's previous lap must be consumed (and published). The top
//!    bit of the claim word is the *closed* flag: once set, no claim succeeds, so
//!    shutdown knows exactly which indices were accepted.
//! 2. **Write.** The producer fills its slots, then stores each slot's marker (the slot
//!    header's `sequence = index + 1`) with release ordering, last.
//! 3. **Publish.** [`advance_prefix`] moves the published head forward over every index
//!    whose marker is set, starting from the current head. Producers finish out of order,
//!    so whoever completes the oldest missing index publishes everything written after
//!    it too. A SeqCst fence between the marker stores and the scan (the Dekker pattern)
//!    guarantees that of two producers finishing concurrently at least one sees the
//!    other's claim and marker, so no written index is left unpublished. The scan stops
//!    at the claim word (read after the fence) instead of loading the marker of the
//!    first unclaimed index, the slot a polling consumer holds.
//!
//! That is the *eager* head, which a consumer that trusts only the head needs (the copy
//! strategies' bridge, `DOORBELL`). A consumer that polls the markers themselves (K2)
//! needs no head to find work, so there the head is *lazy*: producers only store their
//! markers, and [`sync_published`] moves the head when someone needs it (a command, the
//! drain, a monitor), scanning from where the consumer already is.
//!
//! The same [`advance_prefix`] releases reply slots that host consumers finish out of
//! order: the marker is a per-index "freed" word and the head is `k2h_tail`.
//!
//! Indices are free-running `u64`s; a marker for index `i` holds `i + 1`, a value that
//! is unique per lap, so a stale marker from an earlier lap never matches.

use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};

use crate::sync::IndexAtomic;

/// Top bit of the claim word: the ring accepts no more claims.
pub const CLOSED: u64 = 1 << 63;

/// Why [`try_claim`] reserved nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimError {
    /// Fewer than `n` slots are free.
    Full,
    /// The ring was closed.
    Closed,
}

/// Reserves `n` consecutive indices and returns the first.
///
/// Index `i` may be claimed only when the slot's previous lap is finished: `i - released
/// < capacity` (the reply of `i - capacity` was released). With `published` (an eager
/// head, [`advance_prefix`]) also `i - published < capacity` (the head has passed `i -
/// capacity`): a consumer that polls slot sequences (K2) can answer a request, and its
/// reply can be released, before the head passes it, and overwriting that slot would
/// change the marker a late publisher still has to scan, so the head would stop there
/// for good. A lazy head ([`sync_published`]) needs no such bound: its scan tells a
/// reused slot from an unwritten one. `n` must be in `1..=capacity`.
#[inline]
pub fn try_claim<A: IndexAtomic>(
    claim: &A,
    released: &A,
    published: Option<&A>,
    capacity: u64,
    n: u64,
) -> Result<u64, ClaimError> {
    debug_assert!(n >= 1 && n <= capacity);
    // Acquire: the consumer's reads of the slots we are about to overwrite happen before
    // its release of `released`; the publisher's scan of the old markers happens before
    // its release of `published`.
    let bounds = || {
        let r = released.load(Acquire);
        published.map_or(r, |p| r.min(p.load(Acquire)))
    };
    loop {
        let t = bounds();
        // The claim after the bounds: every index they passed was claimed before the
        // release that let them pass it, so this load sees that claim, and `cur >= t`.
        let cur = claim.load(Relaxed);
        if cur & CLOSED != 0 {
            return Err(ClaimError::Closed);
        }
        // So a bound beyond the claim is corrupt, and reads as Full.
        if t > cur {
            return Err(ClaimError::Full);
        }
        if cur + n - t > capacity {
            // Full by this snapshot, but the bounds were read first: other producers may
            // have claimed, been answered and released in between, moving the bounds on
            // with the claim. Full only against bounds read after the claim (which never
            // goes down, so the ring was full when they were read); else try again.
            let t2 = bounds();
            if t2 <= cur && cur + n - t2 > capacity {
                return Err(ClaimError::Full);
            }
            continue;
        }
        if claim
            .compare_exchange(cur, cur + n, Relaxed, Relaxed)
            .is_ok()
        {
            return Ok(cur);
        }
    }
}

/// Closes the claim word and returns the number of indices ever claimed.
pub fn close<A: IndexAtomic>(claim: &A) -> u64 {
    claim.fetch_or(CLOSED, AcqRel) & !CLOSED
}

/// Number of indices claimed so far (the claim word without the closed bit).
pub fn claimed<A: IndexAtomic>(claim: &A) -> u64 {
    claim.load(Acquire) & !CLOSED
}

/// Advances `head` over the contiguous prefix of indices whose marker equals `index + 1`.
///
/// Call after storing (with release) the markers of every index in `owned`, the indices
/// this thread finished (a producer's claim, a consumer's released run). Returns once
/// a compare-and-swap of this thread moved the head over every marker its scan saw
/// (from wherever the head was, past `owned` or not), or once the prefix stops at an
/// index some other thread has not finished — that thread will then publish ours.
/// `limit` bounds one scan (the ring capacity): a corrupt marker can never make it run
/// away.
///
/// A run that starts at the head and has no claim word (a consumer's release) takes a
/// fast path: one SeqCst compare-and-swap and no fence (the proof is on `advance_from`,
/// below in this file).
///
/// The scan does not load the markers of `owned`: this thread stored them before the
/// fence. A scan from a stale head value may count an owned index that was published
/// and reused meanwhile, but then the head has moved, and the compare-and-swap from that
/// stale value fails: a head value is only ever written by a CAS from the head it
/// replaces, and the head never goes back, so a successful CAS from `h` covers only
/// indices that are still unpublished, and an owned one of those still holds its stamp
/// (its slot is not reused before the head passes it). Loading the stamps back cost a
/// cache miss per slot once the kernel had read the slot's line (the producer of a batch
/// of 64 spent a quarter of its publication there). Indices outside `owned` are loaded
/// as before.
///
/// `claim`, where the indices are a claim word's ([`try_claim`]): the scan stops at the
/// first index not claimed, without loading its marker. That marker is the next slot's
/// sequence, the very word a kernel polls, so loading it took a cache line from the
/// kernel's core on every publication. The claim word is loaded after the fence, so the
/// Dekker argument of the markers covers it: a producer claims before it stamps and
/// fences, so either this load sees its claim (and its marker is loaded as before), or
/// its fence comes after ours and its scan sees our claim and stamps; if that scan stops
/// before them, it stops at an owner whose fence is later still, and so on.
#[inline]
pub fn advance_prefix<'a, A, F>(
    head: &A,
    claim: Option<&A>,
    owned: core::ops::Range<u64>,
    limit: u64,
    marker: F,
) where
    A: IndexAtomic + 'a,
    F: Fn(u64) -> &'a A,
{
    let until = owned.end;
    if claim.is_none() && !owned.is_empty() {
        // A run that starts at the head (the common case: replies taken in order) moves
        // it with one compare-and-swap, without the fence (see `advance_from`).
        if head
            .compare_exchange(owned.start, until, SeqCst, Relaxed)
            .is_ok()
        {
            // loom does not model SeqCst loads and read-modify-writes as SeqCst, only
            // SeqCst fences (tokio-rs/loom#180): its build adds a fence here, so loom
            // checks this stronger program, and the fence-free one rests on the
            // argument on `advance_from`.
            #[cfg(gyre_loom)]
            A::fence(SeqCst);
            advance_from(head, until, limit, marker);
            return;
        }
    }
    // Dekker: our marker stores are ordered before the loads below for every thread
    // doing the same, so two finishing producers never both miss each other.
    A::fence(SeqCst);
    let mut h = head.load(Acquire);
    loop {
        // No return merely because the head has passed `owned`: a thread that moved it
        // there may not have seen a marker beyond that this thread sees, whose owner
        // fenced before us and stopped at one of ours (three finishing at once; loom
        // model `three_producers_publish_prefix`). Carry on from wherever the head is.
        // After the fence, once per scan; without a claim word, no bound.
        let claimed = claim.map_or(u64::MAX, |c| c.load(Acquire) & !CLOSED);
        let mut n = h;
        while n - h < limit
            && (owned.contains(&n) || (n < claimed && marker(n).load(Acquire) == n + 1))
        {
            n += 1;
        }
        if n == h {
            return;
        }
        // Release: everything the markers covered (slot contents, via the acquire loads
        // above, or this thread's own stores) happens before a consumer's acquire load of
        // the head.
        match head.compare_exchange(h, n, AcqRel, Acquire) {
            // Everything this scan saw is published. The index it stopped at belongs to
            // a thread whose fence comes later (a claim loaded after our fence, or a
            // stamp our scan missed), which sees ours and carries on. A scan cut short
            // at `limit` goes on.
            Ok(_) if n - h < limit => return,
            Ok(_) => h = n,
            Err(actual) => h = actual,
        }
    }
}

/// After a compare-and-swap (SeqCst) that moved `head` to `h`: moves it on over the
/// markers already stored beyond `h`, loaded with SeqCst.
///
/// This is the other half of the Dekker pair of [`advance_prefix`] without a fence on
/// this side. A finisher `C` beyond `h` stored its marker `mC`, then fenced (SeqCst,
/// `F`), then loaded the head, and returned when its scan stopped at an index not yet
/// released, leaving its run to whoever moves the head there. Take this thread's CAS of
/// the head (`X`) and its SeqCst load of `mC` (`L`): `X` is sequenced before `L`, so it
/// precedes `L` in C++20's single order S of SeqCst operations and fences
/// ([atomics.order]/4, its first rule). If `C`'s load of the head read a value
/// older than `X`'s, then `F` precedes `X` in S (4.3: a fence that happens before a read
/// coherence-ordered before a SeqCst write precedes it), so `F` precedes `L`; and `L`
/// cannot read a value older than `mC`, since then `L` would precede `F` in S (4.2: a
/// SeqCst read coherence-ordered before a write that happens before a fence precedes the
/// fence). So either `C` read `X`'s head or a later one (and scans on from there
/// itself), or `L` sees `mC` (and this scan moves the head over it). With more threads
/// the pair argument runs along a chain: a released index the head never passed has an
/// owner that stopped at an unreleased one, whose owner's fence or fast CAS comes later
/// in S (rules 4.1-4.4 for the four pairings of fast and fenced releasers); the chain
/// cannot go on forever. On x86 the CAS is the `lock cmpxchg` the head needs anyway and
/// the loads are plain: the fence it saves took 10% of a single-message consumer's time
/// (docs/benchmarks.md).
fn advance_from<'a, A, F>(head: &A, mut h: u64, limit: u64, marker: F)
where
    A: IndexAtomic + 'a,
    F: Fn(u64) -> &'a A,
{
    loop {
        let mut n = h;
        while n - h < limit && marker(n).load(SeqCst) == n + 1 {
            n += 1;
        }
        if n == h {
            return;
        }
        match head.compare_exchange(h, n, SeqCst, Acquire) {
            // As in `advance_prefix`: the owner of the index this scan stopped at comes
            // later in S and finds the head at least here.
            Ok(_) if n - h < limit => return,
            Ok(_) => h = n,
            Err(actual) => h = actual,
        }
    }
}

/// The marker a slot holds before index `i` is written: the previous lap's (`i + 1 -
/// capacity`), or zero (fresh memory) in the first lap.
#[inline]
pub fn previous_marker(i: u64, capacity: u64) -> u64 {
    if i >= capacity {
        i + 1 - capacity
    } else {
        0
    }
}

/// Moves a lazy head over the claimed indices whose producers finished, and returns it.
///
/// With a lazy head, producers only store their markers (P3); the head is moved here
/// when something needs it: a command (Terminate's drain ends at the head), shutdown's
/// wait for every claim, a monitor's snapshot. The scan starts at `consumed` where that
/// is beyond the head (indices the consumer took, which were written, loaded with
/// acquire after the consumer's own acquire of their markers: the scan is bounded by
/// what is in flight, never by how far the head lags) and stops at the claim word or at
/// the first index whose slot still holds the previous lap's marker
/// ([`previous_marker`]).
///
/// Any other marker counts as written: the index's own (`i + 1`), a later lap's (the slot
/// was consumed, released and reused, so `i` was written long ago), or a corrupt value,
/// which a consumer that checks the head against the slot (K4) then reports instead of
/// waiting on it forever. A marker older than the previous lap's cannot be read: either
/// this scan loaded index `i - capacity` itself (and read-read coherence forbids an
/// older value after it), or `i - capacity` is below the start, which came from an
/// acquire load of a value written by a thread that had seen that lap's marker (the
/// sync that moved the head there, or the consumer).
///
/// `consumed` is clamped to the claim word (a corrupt value moves nothing beyond the
/// claims). Concurrent calls are safe: each moves the head by compare-and-swap from the
/// value it scanned from, and the head never goes back.
pub fn sync_published<'a, A, F>(head: &A, claim: &A, consumed: u64, capacity: u64, marker: F) -> u64
where
    A: IndexAtomic + 'a,
    F: Fn(u64) -> &'a A,
{
    let mut h = head.load(Acquire);
    loop {
        let claimed = claim.load(Acquire) & !CLOSED;
        if h >= claimed {
            return h;
        }
        let mut n = h.max(consumed.min(claimed));
        while n < claimed && marker(n).load(Acquire) != previous_marker(n, capacity) {
            n += 1;
        }
        if n == h {
            return h;
        }
        // Release: what the markers covered happens before a consumer's acquire of the
        // head.
        match head.compare_exchange(h, n, AcqRel, Acquire) {
            Ok(_) => return n,
            Err(actual) => h = actual,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU64;
    use core::sync::atomic::Ordering::Release;

    #[test]
    fn claim_respects_capacity_and_close() {
        let (claim, tail) = (AtomicU64::new(0), AtomicU64::new(0));
        let head = AtomicU64::new(u64::MAX);
        assert_eq!(try_claim(&claim, &tail, Some(&head), 4, 3), Ok(0));
        assert_eq!(
            try_claim(&claim, &tail, Some(&head), 4, 2),
            Err(ClaimError::Full)
        );
        assert_eq!(try_claim(&claim, &tail, Some(&head), 4, 1), Ok(3));
        assert_eq!(
            try_claim(&claim, &tail, Some(&head), 4, 1),
            Err(ClaimError::Full)
        );
        tail.store(2, Release);
        assert_eq!(try_claim(&claim, &tail, Some(&head), 4, 2), Ok(4));
        assert_eq!(close(&claim), 6);
        assert_eq!(claimed(&claim), 6);
        tail.store(6, Release);
        assert_eq!(
            try_claim(&claim, &tail, Some(&head), 4, 1),
            Err(ClaimError::Closed)
        );
    }

    #[test]
    fn claim_waits_for_the_previous_lap_to_be_published() {
        // Indices 0..4 claimed; 0 answered and released, but the head is still 0.
        let (claim, tail, head) = (AtomicU64::new(4), AtomicU64::new(1), AtomicU64::new(0));
        assert_eq!(
            try_claim(&claim, &tail, Some(&head), 4, 1),
            Err(ClaimError::Full)
        );
        head.store(1, Release);
        assert_eq!(try_claim(&claim, &tail, Some(&head), 4, 1), Ok(4));
    }

    /// A `u64` atomic whose next load first runs `meddle`: other threads acting between
    /// two loads of `try_claim`.
    type Meddle = Box<dyn FnOnce(&AtomicU64) + Send>;

    struct Meddling {
        value: std::sync::Arc<AtomicU64>,
        meddle: std::sync::Mutex<Option<Meddle>>,
    }

    impl Meddling {
        fn plain(v: u64) -> Self {
            Self {
                value: std::sync::Arc::new(AtomicU64::new(v)),
                meddle: std::sync::Mutex::new(None),
            }
        }

        /// Starting at `v`; its first load runs `f` on it first.
        fn meddled(v: u64, f: impl FnOnce(&AtomicU64) + Send + 'static) -> Self {
            Self {
                meddle: std::sync::Mutex::new(Some(Box::new(f))),
                ..Self::plain(v)
            }
        }
    }

    impl IndexAtomic for Meddling {
        fn load(&self, order: core::sync::atomic::Ordering) -> u64 {
            let f = self.meddle.lock().ok().and_then(|mut m| m.take());
            if let Some(f) = f {
                f(&self.value);
            }
            self.value.load(order)
        }
        fn store(&self, value: u64, order: core::sync::atomic::Ordering) {
            self.value.store(value, order)
        }
        fn compare_exchange(
            &self,
            current: u64,
            new: u64,
            success: core::sync::atomic::Ordering,
            failure: core::sync::atomic::Ordering,
        ) -> Result<u64, u64> {
            self.value.compare_exchange(current, new, success, failure)
        }
        fn fetch_or(&self, value: u64, order: core::sync::atomic::Ordering) -> u64 {
            self.value.fetch_or(value, order)
        }
        fn fence(order: core::sync::atomic::Ordering) {
            core::sync::atomic::fence(order)
        }
    }

    #[test]
    fn claims_and_releases_by_others_meanwhile_are_not_full() {
        // Found by gyre-service under load: `try_call` answered Full with one request in
        // the ring. While this producer reads the bounds, two others claim 0 and 1, and
        // both are answered and released: the ring is empty again.
        let claim = Meddling::plain(0);
        let others = claim.value.clone();
        let released = Meddling::meddled(0, move |released| {
            others.fetch_add(2, Relaxed);
            released.store(2, Release);
        });
        let head = Meddling::plain(u64::MAX);
        assert_eq!(try_claim(&claim, &released, Some(&head), 4, 1), Ok(2));
        assert_eq!(claimed(&claim), 3);
    }

    #[test]
    fn a_ring_emptied_and_refilled_meanwhile_is_not_full() {
        // Between this producer's read of the bounds (0) and of the claim, others claim a
        // whole ring's worth (4) and every one is answered and released: the claim reads
        // 4 against a stale bound of 0, yet the ring is empty.
        let released = Meddling::plain(0);
        let rel = released.value.clone();
        let claim = Meddling::meddled(0, move |claim| {
            claim.fetch_add(4, Relaxed);
            rel.store(4, Release);
        });
        let head = Meddling::plain(u64::MAX);
        assert_eq!(try_claim(&claim, &released, Some(&head), 4, 1), Ok(4));
    }

    #[test]
    fn a_bound_just_past_the_claim_is_corrupt() {
        let (claim, tail, head) = (AtomicU64::new(1), AtomicU64::new(2), AtomicU64::new(2));
        assert_eq!(
            try_claim(&claim, &tail, Some(&head), 4, 2),
            Err(ClaimError::Full)
        );
    }

    #[test]
    fn corrupt_tail_beyond_claim_reads_full() {
        let (claim, tail) = (AtomicU64::new(1), AtomicU64::new(100));
        let head = AtomicU64::new(100);
        assert_eq!(
            try_claim(&claim, &tail, Some(&head), 4, 1),
            Err(ClaimError::Full)
        );
    }

    #[test]
    fn prefix_stops_at_gap_and_resumes() {
        let head = AtomicU64::new(0);
        let markers: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let m = |i: u64| &markers[(i % 4) as usize];
        markers[1].store(2, Release);
        markers[2].store(3, Release);
        advance_prefix(&head, None, 1..3, 4, m);
        assert_eq!(
            head.load(Acquire),
            0,
            "index 0 is not written: nothing is published"
        );
        markers[0].store(1, Release);
        advance_prefix(&head, None, 0..1, 4, m);
        assert_eq!(
            head.load(Acquire),
            3,
            "completing the gap publishes what follows it"
        );
    }

    #[test]
    fn stale_marker_of_previous_lap_is_not_published() {
        let head = AtomicU64::new(4);
        // Slot 0 still holds index 0's marker (1); index 4 expects 5.
        let markers: Vec<AtomicU64> = (1..=4).map(AtomicU64::new).collect();
        advance_prefix(&head, None, 5..5, 4, |i| &markers[(i % 4) as usize]);
        assert_eq!(head.load(Acquire), 4);
    }

    #[test]
    fn owned_indices_are_not_loaded_and_the_scan_goes_past_them() {
        let head = AtomicU64::new(4);
        // Slots 4 and 5 are this thread's (markers stored, but left stale here to show
        // they are not read back); 6 is another producer's, finished and waiting on us;
        // 7 is not written.
        let markers: Vec<AtomicU64> = (0..8)
            .map(|i| AtomicU64::new(if i == 6 { 7 } else { 0 }))
            .collect();
        advance_prefix(&head, None, 4..6, 8, |i| &markers[i as usize]);
        assert_eq!(head.load(Acquire), 7);
        // Owned indices below the head are not republished.
        advance_prefix(&head, None, 2..4, 8, |i| &markers[i as usize]);
        assert_eq!(head.load(Acquire), 7);
    }

    #[test]
    fn the_scan_stops_at_the_claim_without_loading_beyond() {
        // Index 2 is the next slot: its marker reads "set" here (a stale value the scan
        // must not trust), but the claim word says nobody claimed it.
        let head = AtomicU64::new(0);
        let claim = AtomicU64::new(2 | CLOSED);
        let markers: Vec<AtomicU64> = (0..4).map(|i| AtomicU64::new(i + 1)).collect();
        advance_prefix(&head, Some(&claim), 0..2, 4, |i| &markers[i as usize]);
        assert_eq!(
            head.load(Acquire),
            2,
            "stops at the claim (closed bit ignored)"
        );
        claim.store(3, Release);
        advance_prefix(&head, Some(&claim), 3..3, 4, |i| &markers[i as usize]);
        assert_eq!(
            head.load(Acquire),
            3,
            "a claimed, stamped index is published"
        );
    }

    #[test]
    fn a_lazy_head_claims_without_the_head_bound() {
        // Index 0 answered and released, the lazy head still 0: the slot may be reused.
        let (claim, tail) = (AtomicU64::new(4), AtomicU64::new(1));
        assert_eq!(try_claim(&claim, &tail, None, 4, 1), Ok(4));
        assert_eq!(try_claim(&claim, &tail, None, 4, 1), Err(ClaimError::Full));
    }

    #[test]
    fn sync_moves_a_lazy_head_over_written_and_reused_slots() {
        // Capacity 4, claims 0..7. Slot markers: index 4 reused slot 0 (marker 5), index
        // 1 and 2 are written (2, 3), index 3 is not (still 0: its first lap), slots of
        // 5 and 6 hold index 1's and 2's markers (their previous lap): unwritten.
        let (head, claim) = (AtomicU64::new(0), AtomicU64::new(7));
        let markers: Vec<AtomicU64> = [5, 2, 3, 0].into_iter().map(AtomicU64::new).collect();
        let m = |i: u64| &markers[(i % 4) as usize];
        assert_eq!(
            sync_published(&head, &claim, 0, 4, m),
            3,
            "stops at index 3"
        );
        assert_eq!(head.load(Acquire), 3);
        markers[3].store(4, Release);
        // Index 4's marker is its own (5): 3 and 4 are written, 5 is not.
        assert_eq!(sync_published(&head, &claim, 0, 4, m), 5);
        markers[1].store(6, Release);
        markers[2].store(7, Release);
        assert_eq!(sync_published(&head, &claim, 0, 4, m), 7, "up to the claim");
        assert_eq!(sync_published(&head, &claim, 0, 4, m), 7, "and no further");
    }

    #[test]
    fn sync_starts_where_the_consumer_is_and_trusts_no_corrupt_bound() {
        // The head lags far behind (0); the consumer took 0..9, claims are 0..10, and
        // index 9's slot (1 of 8) holds its previous lap's marker: unwritten.
        let (head, claim) = (AtomicU64::new(0), AtomicU64::new(10 | CLOSED));
        let markers: Vec<AtomicU64> = (0..8).map(|i| AtomicU64::new(i + 1)).collect();
        let m = |i: u64| &markers[(i % 8) as usize];
        assert_eq!(sync_published(&head, &claim, 9, 8, m), 9);
        // A corrupt consumed count beyond the claims moves the head to the claims only.
        let head = AtomicU64::new(0);
        assert_eq!(sync_published(&head, &claim, 1_000, 8, m), 10);
    }

    #[test]
    fn a_corrupt_marker_counts_as_written() {
        // Neither the previous lap's marker nor the index's own: the head moves over it,
        // so a consumer checking the slot against the head reports it (K4).
        let (head, claim) = (AtomicU64::new(0), AtomicU64::new(2));
        let markers = [AtomicU64::new(42), AtomicU64::new(0)];
        assert_eq!(
            sync_published(&head, &claim, 0, 2, |i| &markers[i as usize]),
            1
        );
    }

    #[test]
    fn scan_is_bounded_by_limit() {
        let head = AtomicU64::new(0);
        let markers: Vec<AtomicU64> = (0..16)
            .map(|i| AtomicU64::new(if i < 8 { i + 1 } else { 0 }))
            .collect();
        advance_prefix(&head, None, 8..8, 3, |i| &markers[i as usize]);
        assert_eq!(
            head.load(Acquire),
            8,
            "several bounded scans still reach the end"
        );
    }

    /// Four threads release (or publish) runs of 1 to 4 consecutive indices, each run
    /// given to one thread round-robin, all at once on however many cores there are: the
    /// head must end at the last index. Runs at the head take the fast path (consumers)
    /// and the rest fence and scan, in whatever mix the scheduler makes; loom checks the
    /// same with three threads and runs of one. On a 2-vCPU x86 VM the consumers' case
    /// failed 2 runs of 3 with the fast path's `advance_from` dropped; the early return of
    /// the fallback loop (loom's three-thread models) it did not catch in 15 runs.
    fn four_threads_cover_every_index(with_claim: bool) {
        const TOTAL: u64 = 200_000;
        const THREADS: usize = 4;
        // The markers have no second lap; the extra one stays unset, where scans stop.
        let markers: Vec<AtomicU64> = (0..=TOTAL).map(|_| AtomicU64::new(0)).collect();
        let (head, claim) = (AtomicU64::new(0), AtomicU64::new(TOTAL));
        let mut runs: Vec<Vec<core::ops::Range<u64>>> = vec![Vec::new(); THREADS];
        let (mut i, mut lcg, mut k) = (0u64, 0x9E37_79B9_7F4A_7C15u64, 0usize);
        while i < TOTAL {
            lcg = lcg.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let end = (i + 1 + (lcg >> 62)).min(TOTAL);
            runs[k % THREADS].push(i..end);
            (i, k) = (end, k + 1);
        }
        std::thread::scope(|s| {
            for mine in &runs {
                let (markers, head, claim) = (&markers, &head, &claim);
                s.spawn(move || {
                    for run in mine {
                        for j in run.clone() {
                            markers[j as usize].store(j + 1, Release);
                        }
                        let claim = with_claim.then_some(claim);
                        advance_prefix(head, claim, run.clone(), TOTAL + 1, |j| {
                            &markers[j as usize]
                        });
                    }
                });
            }
        });
        assert_eq!(head.load(Acquire), TOTAL);
    }

    #[test]
    fn releases_from_four_threads_cover_every_index() {
        four_threads_cover_every_index(false);
    }

    #[test]
    fn publications_from_four_threads_cover_every_index() {
        four_threads_cover_every_index(true);
    }
}
