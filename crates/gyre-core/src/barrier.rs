//! An asymmetric memory barrier: the two fences of a Dekker pair whose one side runs
//! often and whose other side runs rarely, with the whole cost moved to the rare side.
//!
//! The pair is the doorbell's ([`crate::doorbell`]): the host, after every publication,
//! stores a sequence and loads `parked` ([`light`] between them); a kernel thread about
//! to park stores `parked` and loads the sequence ([`heavy`] between them). Either the
//! host's load sees `parked` or the kernel's load sees the sequence, as with a SeqCst
//! fence on each side.
//!
//! Where the process can use Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`
//! (Linux 4.14 and later, registered once per process), [`light`] is only a compiler
//! fence and [`heavy`] is that system call, which makes every running thread of the
//! process execute a full memory barrier before it returns (threads not running passed
//! one when they were switched out). That is the pattern of folly's
//! `asymmetricLightBarrier` / `asymmetricHeavyBarrier` and of userspace RCU. A host's
//! publication then pays no fence at all (a `lock`ed instruction on x86, which waits for
//! the store buffer to drain: about 9% of the calls of `benches/waiters.rs`'s 64 tasks,
//! docs/benchmarks.md), and a kernel thread pays a system call each time it parks,
//! which it does only after idling.
//!
//! Elsewhere (another OS, an older kernel, a seccomp filter that refuses the call) and
//! under loom, both are `fence(SeqCst)`. The choice is made once per process, at the
//! first call of [`expedited`] (or of either barrier), and never changes, so the two
//! sides always pair. Registering took 11 ms on the machine of docs/benchmarks.md (the
//! kernel waits for an RCU grace period), so [`crate::doorbell::Doorbell::new`], at a
//! kernel's launch, makes that first call: no publication waits for it.
//!
//! # Examples
//!
//! ```
//! use std::sync::atomic::{AtomicBool, Ordering::{Acquire, Release}};
//! use gyre_core::barrier;
//!
//! let (published, parked) = (AtomicBool::new(false), AtomicBool::new(false));
//! // The frequent side:
//! published.store(true, Release);
//! barrier::light();
//! let wake = parked.load(Acquire);
//! // The rare side (another thread, in real use):
//! parked.store(true, Release);
//! barrier::heavy();
//! let work = published.load(Acquire);
//! assert!(wake || work);
//! ```

#[cfg(gyre_loom)]
use loom::sync::atomic::fence;

#[cfg(not(gyre_loom))]
use core::sync::atomic::fence;
use core::sync::atomic::Ordering::SeqCst;

/// The frequent side's barrier: orders this thread's earlier stores before its later
/// loads against a [`heavy`] barrier on another thread.
#[inline]
pub fn light() {
    if expedited() {
        core::sync::atomic::compiler_fence(SeqCst);
    } else {
        fence(SeqCst);
    }
}

/// The rare side's barrier: orders this thread's earlier stores before its later loads
/// against every [`light`] barrier of the process. A system call where [`light`] is a
/// compiler fence (microseconds), else `fence(SeqCst)`.
pub fn heavy() {
    if expedited() {
        // A registered process's PRIVATE_EXPEDITED command does not fail (membarrier(2):
        // its errors are an unknown command, flags, or a process not registered).
        imp::membarrier_private_expedited();
    } else {
        fence(SeqCst);
    }
}

/// Whether [`light`] is a compiler fence (the process registered for
/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`), decided at the first call of either
/// barrier.
///
/// # Examples
///
/// ```
/// // The same answer every time: the two barriers always pair.
/// assert_eq!(gyre_core::barrier::expedited(), gyre_core::barrier::expedited());
/// ```
#[inline]
pub fn expedited() -> bool {
    imp::expedited()
}

#[cfg(all(target_os = "linux", not(gyre_loom)))]
mod imp {
    use std::sync::OnceLock;

    // membarrier(2)'s commands (linux/membarrier.h).
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    static EXPEDITED: OnceLock<bool> = OnceLock::new();

    #[inline]
    pub(super) fn expedited() -> bool {
        *EXPEDITED.get_or_init(register)
    }

    fn membarrier(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier(cmd, flags, cpu_id) takes integers only and touches no
        // memory of this process's.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            )
        }
    }

    /// Queries the kernel's commands and registers the process for the private
    /// expedited one; false (fences on both sides) when either is refused.
    fn register() -> bool {
        let both = CMD_PRIVATE_EXPEDITED | CMD_REGISTER_PRIVATE_EXPEDITED;
        let supported = membarrier(CMD_QUERY);
        let ok = supported >= 0
            && supported & both == both
            && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
        tracing::debug!(
            expedited = ok,
            "asymmetric barrier: membarrier(PRIVATE_EXPEDITED)"
        );
        ok
    }

    pub(super) fn membarrier_private_expedited() {
        let r = membarrier(CMD_PRIVATE_EXPEDITED);
        debug_assert_eq!(
            r, 0,
            "membarrier(PRIVATE_EXPEDITED) failed after registration"
        );
    }
}

#[cfg(not(all(target_os = "linux", not(gyre_loom))))]
mod imp {
    #[inline]
    pub(super) fn expedited() -> bool {
        false
    }

    pub(super) fn membarrier_private_expedited() {
        unreachable!("not expedited: heavy() fences instead")
    }
}

#[cfg(all(test, not(gyre_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::{Arc, Barrier};

    /// On Linux (this project's CI) the expedited barrier is available unless a sandbox
    /// refuses the call; the decision never changes.
    #[test]
    fn the_choice_is_made_once() {
        let first = expedited();
        for _ in 0..100 {
            assert_eq!(expedited(), first);
        }
        light();
        heavy();
        assert_eq!(expedited(), first);
    }

    /// The Dekker pair over many rounds on two threads: in no round do both sides miss
    /// each other's store (store buffering, the reordering the barriers exist to stop).
    #[test]
    fn a_light_and_a_heavy_side_never_both_miss() {
        const ROUNDS: u64 = 2_000;
        let a = Arc::new(AtomicU64::new(0));
        let b = Arc::new(AtomicU64::new(0));
        let seen_by_light = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(2));
        let missed = Arc::new(AtomicBool::new(false));
        let light_side = {
            let (a, b, seen, start) = (a.clone(), b.clone(), seen_by_light.clone(), start.clone());
            std::thread::spawn(move || {
                for r in 1..=ROUNDS {
                    start.wait();
                    a.store(r, Relaxed);
                    light();
                    seen.store(b.load(Relaxed), Relaxed);
                    start.wait();
                }
            })
        };
        for r in 1..=ROUNDS {
            start.wait();
            b.store(r, Relaxed);
            heavy();
            let heavy_saw = a.load(Relaxed) == r;
            start.wait();
            let light_saw = seen_by_light.load(Relaxed) == r;
            if !heavy_saw && !light_saw {
                missed.store(true, Relaxed);
            }
        }
        light_side.join().expect("light side");
        assert!(
            !missed.load(Relaxed),
            "both sides missed each other's store"
        );
    }
}
