//! The doorbell of a kernel that parks: the host wakes a parked kernel thread when it
//! publishes a request or a command, so an idle kernel can sleep long (costing nothing)
//! and still answer the first request at once.
//!
//! The protocol is a Dekker pair plus the park token of the kernel's thread:
//!
//! ```text
//! kernel (nothing to do, wants to park)      host (after publishing)
//!   parked = true                              [publication: a slot's sequence, h2k_head,
//!   fence(SeqCst)                               a command]
//!   if work(): parked = false, return          fence(SeqCst)
//!   park_timeout(t)                            if parked: unpark(kernel thread)
//!   parked = false
//! ```
//!
//! With both fences, either the kernel's re-check of `work()` sees the publication, or the
//! host's load sees `parked` and unparks the kernel; an unpark that lands before the park
//! leaves a token, so the park then returns at once. No wake-up is lost
//! (`tests/loom_doorbell.rs` checks this very code under loom, with a park that has no
//! timeout to rescue it). The timeout only bounds how stale the kernel's heartbeat and
//! command handling get while nothing happens.
//!
//! **A kernel that never parks** (idle strategy `BusySpin` or `Sleep`) needs no ring: its
//! thread says so once, when it starts ([`Doorbell::enter`]), and [`Doorbell::ring`] then
//! costs a load instead of a SeqCst fence (a locked instruction on x86, which waits for
//! the publication's stores to drain: single-message throughput +8% and batch64 +5% on
//! the CPU backend without it, docs/benchmarks.md). The flag, `parks`, is the asymmetric
//! half of a second Dekker pair, whose rare side is the change from "never parks" to
//! "parks" (a reload onto a doorbell whose earlier kernel did not park):
//!
//! ```text
//! kernel thread, before its loop             host ring
//!   parks = true                               [publication]
//!   membarrier(PRIVATE_EXPEDITED)              compiler fence
//!   ... later: park as above                   if !parks: return (no fence)
//!                                              else as above
//! ```
//!
//! The system call makes every running thread of the process pass a full barrier: a host
//! that read `parks == false` read it before that barrier, so its publication, stored
//! before the read, is visible to the kernel's re-check after the call; a host that reads
//! it after the barrier sees `true` and fences. The process registers for the call when a
//! kernel that never parks enters; where that is refused (another OS, a sandbox, loom),
//! such a kernel leaves `parks` true and rings keep fencing, so a successor that parks
//! never needs the call. The other way (parks to never parks) needs nothing: a host that
//! still fences does no harm, and the kernel that parked has ended before its successor
//! enters.
//!
//! The CPU backend's kernel parks through [`Doorbell::park`]; the channel rings
//! ([`Doorbell::ring`] after its producers' stamps with a lazy head; with an eager head
//! [`Doorbell::ring_fenced`], since `prefix::advance_prefix` already has the SeqCst
//! fence; [`Doorbell::ring`] after a command), and so does the bridge after a push (copy
//! strategies).
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
//! use std::time::Duration;
//! use gyre_core::doorbell::Doorbell;
//!
//! let bell = Arc::new(Doorbell::new());
//! let work = Arc::new(AtomicBool::new(false));
//! let (b, w) = (bell.clone(), work.clone());
//! let kernel = std::thread::spawn(move || {
//!     b.register_current_thread();
//!     // Parks until rung (the timeout is only a backstop).
//!     while !w.load(SeqCst) {
//!         b.park(Duration::from_secs(10), || w.load(SeqCst));
//!     }
//! });
//! work.store(true, SeqCst);
//! bell.ring();
//! kernel.join().unwrap();
//! ```

use core::sync::atomic::compiler_fence;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::time::Duration;

#[cfg(gyre_loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(gyre_loom))]
use std::sync::{Mutex, MutexGuard};

/// Locks the registered thread; a poisoned lock (a panic while holding it: none of the
/// code under it panics) still holds a valid value.
fn lock(m: &Mutex<Option<Thread>>) -> MutexGuard<'_, Option<Thread>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(not(gyre_loom))]
use core::sync::atomic::{fence, AtomicBool, AtomicU64};
#[cfg(gyre_loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicU64};

#[cfg(not(gyre_loom))]
type Thread = std::thread::Thread;
#[cfg(gyre_loom)]
type Thread = loom::thread::Thread;

/// See the [module documentation](self).
#[derive(Debug)]
pub struct Doorbell {
    /// The kernel announced a park (and may be parked).
    parked: AtomicBool,
    /// The kernel thread may park on this doorbell. False only while the running kernel
    /// (and every kernel since it last turned false) never parks; it turns true again only
    /// through [`Doorbell::enter`]'s barrier. While false, [`Doorbell::ring`] does nothing.
    parks: AtomicBool,
    /// The kernel's thread, once it registered (replaced when a successor's thread
    /// registers: a relaunch on the same region keeps its doorbell).
    thread: Mutex<Option<Thread>>,
    /// Times the host found the kernel parked and unparked it.
    wakes: AtomicU64,
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A doorbell no thread has registered with yet (rings fence, then find nobody to
    /// wake, until one does).
    pub fn new() -> Self {
        Self {
            parked: AtomicBool::new(false),
            parks: AtomicBool::new(true),
            thread: Mutex::new(None),
            wakes: AtomicU64::new(0),
        }
    }

    /// Kernel side, on the kernel's thread before its loop: registers the thread
    /// ([`register_current_thread`](Self::register_current_thread)) and says whether its
    /// idle strategy parks (`parks`). A kernel that never parks turns the rings into a
    /// load only where the process-wide barrier that turns them back is available
    /// (Linux's `membarrier(2)`, registered then; see the [module documentation](self));
    /// elsewhere rings keep fencing. Returns whether the thread may park on this
    /// doorbell: true for a kernel that parks (false only if that barrier fails after its
    /// registration, which `membarrier(2)` rules out; the kernel must then back off
    /// without parking on it). Never call it while another thread parks on this
    /// doorbell.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::doorbell::Doorbell;
    ///
    /// let bell = Doorbell::new();
    /// // A busy-spinning kernel: rings become a load (where membarrier(2) is available).
    /// assert!(!bell.enter(false));
    /// // Its successor parks, and rings fence again.
    /// assert!(bell.enter(true));
    /// assert!(bell.parks());
    /// ```
    pub fn enter(&self, parks: bool) -> bool {
        self.register_current_thread();
        if !parks {
            // Rings stop fencing only where a successor that parks can turn them back
            // on (the barrier is registered here, off that successor's start).
            if membarrier::ready() {
                self.parks.store(false, SeqCst);
            }
            return false;
        }
        if self.parks.load(SeqCst) {
            return true;
        }
        self.parks.store(true, SeqCst);
        if membarrier::heavy() {
            tracing::debug!("doorbell: the kernel parks again (process-wide barrier)");
            return true;
        }
        // Failed after a registration (membarrier(2) says it does not): no host is bound
        // to fence, so this kernel must not park on it.
        self.parks.store(false, SeqCst);
        tracing::warn!("doorbell: membarrier failed; the kernel backs off by sleeping");
        false
    }

    /// Whether the doorbell's kernel may park ([`enter`](Self::enter)): rings fence and
    /// look for a parked kernel only then.
    pub fn parks(&self) -> bool {
        self.parks.load(Relaxed)
    }

    /// Registers the calling thread as the one that parks, replacing any earlier one (a
    /// kernel relaunched on the same region runs on a thread of its own; the previous
    /// one has exited by then).
    pub fn register_current_thread(&self) {
        #[cfg(not(gyre_loom))]
        let t = std::thread::current();
        #[cfg(gyre_loom)]
        let t = loom::thread::current();
        *lock(&self.thread) = Some(t);
    }

    /// Kernel side, on the registered thread: parks for at most `timeout` unless
    /// `work()` (checked after announcing the park) says there is something to do.
    /// Returns whether it parked. A ring (or a spurious wake-up) ends the park early.
    /// Only for a kernel that may park: not after [`enter`](Self::enter)`(false)` or an
    /// `enter(true)` that returned false, whose rings do not wake it.
    pub fn park(&self, timeout: Duration, work: impl FnOnce() -> bool) -> bool {
        debug_assert!(
            self.parks.load(Relaxed),
            "a park on a doorbell whose kernel entered as never parking: no ring wakes it"
        );
        // Release: a host that reads `parked` (acquire) also sees the registration.
        self.parked.store(true, Release);
        // Dekker with `ring`: the announcement before the re-check of the work.
        fence(SeqCst);
        if work() {
            self.parked.store(false, Relaxed);
            return false;
        }
        #[cfg(not(gyre_loom))]
        std::thread::park_timeout(timeout);
        #[cfg(gyre_loom)]
        {
            let _ = timeout;
            loom::thread::park();
        }
        self.parked.store(false, Relaxed);
        true
    }

    /// Host side, after a publication that a SeqCst fence already follows (the channel's
    /// producers: `prefix::advance_prefix` fences after their sequence stores): unparks
    /// the kernel if it announced a park.
    #[inline]
    pub fn ring_fenced(&self) {
        if self.parked.load(Acquire) {
            self.wake();
        }
    }

    /// Host side, after any publication (a command, a bridge push, a lazy head's
    /// stamps): fences, then [`ring_fenced`](Self::ring_fenced); nothing (a load) while
    /// the kernel never parks ([`enter`](Self::enter)).
    #[inline]
    pub fn ring(&self) {
        // The publication before the load of `parks`: against the compiler here, against
        // the processor by `enter`'s barrier (see the module documentation).
        compiler_fence(SeqCst);
        if !self.parks.load(Relaxed) {
            return;
        }
        fence(SeqCst);
        self.ring_fenced();
    }

    #[cold]
    fn wake(&self) {
        if let Some(t) = lock(&self.thread).as_ref() {
            self.wakes.fetch_add(1, Relaxed);
            t.unpark();
        }
    }

    /// Times a ring found the kernel parked and woke it.
    pub fn wakes(&self) -> u64 {
        self.wakes.load(Relaxed)
    }
}

/// The process-wide barrier of [`Doorbell::enter`]: `membarrier(2)`'s private expedited
/// command, which makes every running thread of the process execute a full memory
/// barrier before it returns (microseconds). `ready` registers the process for it once
/// (up to about 11 ms, an RCU grace period); false where that was refused.
#[cfg(all(target_os = "linux", not(gyre_loom)))]
mod membarrier {
    use std::sync::OnceLock;

    // membarrier(2)'s commands (linux/membarrier.h).
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> libc::c_long {
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

    /// Whether the process is registered for the barrier (registering at the first call).
    pub(super) fn ready() -> bool {
        static READY: OnceLock<bool> = OnceLock::new();
        *READY.get_or_init(|| {
            let both = CMD_PRIVATE_EXPEDITED | CMD_REGISTER_PRIVATE_EXPEDITED;
            let supported = call(CMD_QUERY);
            let ok = supported >= 0
                && supported & both == both
                && call(CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
            tracing::debug!(ok, "doorbell: membarrier(PRIVATE_EXPEDITED) registration");
            ok
        })
    }

    /// The barrier; false where it failed (never after a registration, by membarrier(2)).
    pub(super) fn heavy() -> bool {
        ready() && call(CMD_PRIVATE_EXPEDITED) == 0
    }
}

/// Elsewhere (and under loom, which cannot model it) there is none: a kernel that never
/// parks leaves its doorbell's rings fencing.
#[cfg(not(all(target_os = "linux", not(gyre_loom))))]
mod membarrier {
    pub(super) fn ready() -> bool {
        false
    }

    pub(super) fn heavy() -> bool {
        false
    }
}

#[cfg(all(test, not(gyre_loom)))]
mod tests {
    use super::*;

    /// A kernel that never parks quiets the rings exactly where the barrier back is
    /// registered; its successor that parks always may, and the rings fence again.
    #[test]
    fn enter_quiets_rings_only_where_the_way_back_exists() {
        let bell = Doorbell::new();
        assert!(bell.parks(), "a new doorbell's rings fence");
        assert!(!bell.enter(false));
        assert_eq!(bell.parks(), !membarrier::ready());
        assert!(bell.enter(true));
        assert!(bell.parks());
        // A second parking kernel needs no barrier.
        assert!(bell.enter(true));
        assert!(bell.parks());
    }
}
