//! The sequence lock every seqlocked line uses (the telemetry line, the export file's
//! control line): one writer, any number of readers that retry on a torn read.
//!
//! Writer: `seq` to odd (relaxed), release fence, the fields (relaxed), `seq` to even
//! (release). Reader: `seq` (acquire); odd means retry; the fields (relaxed); acquire
//! fence; `seq` again (relaxed); a change means retry. All fields are atomics, so a torn
//! read is detected, never undefined behaviour. `docs/protocol.md` §5 and
//! `docs/telemetry.md` describe the same steps for other languages.

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{fence, AtomicU32};

/// Attempts of [`read`] that spin before it starts yielding between attempts.
const SPIN_ATTEMPTS: u32 = 64;

/// Writes a line under its sequence lock: `seq` to odd, then `store` (the field stores,
/// relaxed), then `seq` to the next even value, which is returned. Single writer only.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
/// use gyre_core::seqlock;
/// let (seq, value) = (AtomicU32::new(0), AtomicU64::new(0));
/// assert_eq!(seqlock::write(&seq, || value.store(7, Relaxed)), 2);
/// assert_eq!(seqlock::read(&seq, 4, |_| value.load(Relaxed)), Some(7));
/// ```
#[inline]
pub fn write(seq: &AtomicU32, store: impl FnOnce()) -> u32 {
    let odd = seq.load(Relaxed).wrapping_add(1) | 1;
    seq.store(odd, Relaxed);
    // Orders the odd sequence before the field stores for readers.
    fence(Release);
    store();
    let even = odd.wrapping_add(1);
    seq.store(even, Release);
    even
}

/// Reads a line under its sequence lock: load `seq` (acquire), retry while it is odd,
/// `load` the fields (relaxed; it gets the sequence value), acquire fence, retry if `seq`
/// changed. Spins for the first 64 attempts, then yields before each further one (the
/// writer may be descheduled mid-write). `None` after `attempts` torn reads.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::AtomicU32;
/// let seq = AtomicU32::new(3); // a writer stopped mid-write
/// assert_eq!(gyre_core::seqlock::read(&seq, 8, |s| s), None);
/// ```
pub fn read<T>(seq: &AtomicU32, attempts: u32, load: impl Fn(u32) -> T) -> Option<T> {
    for attempt in 0..attempts.max(1) {
        if attempt >= SPIN_ATTEMPTS {
            std::thread::yield_now();
        }
        let s1 = seq.load(Acquire);
        if s1 & 1 == 1 {
            core::hint::spin_loop();
            continue;
        }
        let snap = load(s1);
        // Orders the field loads before the re-check of the sequence.
        fence(Acquire);
        if seq.load(Relaxed) == s1 {
            return Some(snap);
        }
    }
    None
}
