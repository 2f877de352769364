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
#[derive(Debug, Default)]
pub struct Doorbell {
    /// The kernel announced a park (and may be parked).
    parked: AtomicBool,
    /// The kernel's thread, once it registered (replaced when a successor's thread
    /// registers: a relaunch on the same region keeps its doorbell).
    thread: Mutex<Option<Thread>>,
    /// Times the host found the kernel parked and unparked it.
    wakes: AtomicU64,
}

impl Doorbell {
    /// A doorbell no thread has registered with yet (rings do nothing until one does).
    pub fn new() -> Self {
        Self::default()
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
    pub fn park(&self, timeout: Duration, work: impl FnOnce() -> bool) -> bool {
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

    /// Host side, after any publication (a command, a bridge push): fences, then
    /// [`ring_fenced`](Self::ring_fenced).
    #[inline]
    pub fn ring(&self) {
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
