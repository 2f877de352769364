//! Atomics used by the host-side protocol, swappable for loom's under `cfg(gyre_loom)`.
//!
//! The ring algorithms in [`crate::ring::prefix`] are generic over [`IndexAtomic`], so the
//! very code that runs over the shared-memory ABI (plain `core` atomics inside
//! `#[repr(C)]` structs) is also the code the loom models check (loom atomics).

use core::sync::atomic::Ordering;

/// The operations the index algorithms need from a `u64` atomic.
pub trait IndexAtomic: Sync {
    /// `load` with the given ordering.
    fn load(&self, order: Ordering) -> u64;
    /// `store` with the given ordering.
    fn store(&self, value: u64, order: Ordering);
    /// `compare_exchange` (strong).
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
    /// `fetch_or`.
    fn fetch_or(&self, value: u64, order: Ordering) -> u64;
    /// A fence of the same memory-model implementation as this atomic.
    fn fence(order: Ordering);
}

impl IndexAtomic for core::sync::atomic::AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        self.load(order)
    }
    #[inline(always)]
    fn store(&self, value: u64, order: Ordering) {
        self.store(value, order)
    }
    #[inline(always)]
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.compare_exchange(current, new, success, failure)
    }
    #[inline(always)]
    fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
        self.fetch_or(value, order)
    }
    #[inline(always)]
    fn fence(order: Ordering) {
        core::sync::atomic::fence(order)
    }
}

#[cfg(gyre_loom)]
impl IndexAtomic for loom::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        self.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.store(value, order)
    }
    fn compare_exchange(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.compare_exchange(current, new, success, failure)
    }
    fn fetch_or(&self, value: u64, order: Ordering) -> u64 {
        self.fetch_or(value, order)
    }
    fn fence(order: Ordering) {
        loom::sync::atomic::fence(order)
    }
}

// The primitives of the waker sets (`channel::wakers`): std / parking_lot normally, loom's
// under `cfg(gyre_loom)`, so `tests/loom_wake.rs` checks the very registration / wake-up
// code (its SeqCst fences included) for lost wake-ups.
#[cfg(not(gyre_loom))]
pub(crate) use core::sync::atomic::{fence, AtomicUsize};
#[cfg(gyre_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicUsize};

/// A mutex with parking_lot's infallible `lock`, loom's under `cfg(gyre_loom)`.
#[derive(Default)]
pub(crate) struct Mutex<T>(
    #[cfg(not(gyre_loom))] parking_lot::Mutex<T>,
    #[cfg(gyre_loom)] loom::sync::Mutex<T>,
);

#[cfg(not(gyre_loom))]
impl<T> Mutex<T> {
    /// Locks (never poisoned).
    #[inline]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.0.lock()
    }
}

#[cfg(gyre_loom)]
impl<T> Mutex<T> {
    /// Locks; a poisoned lock (a panicking model thread) is taken over.
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> core::fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Mutex { .. }")
    }
}
