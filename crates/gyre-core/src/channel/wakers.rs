//! A small set of wakers for futures waiting on a condition the completion driver
//! watches (free space, a `send` reply, the kernel's end).

use core::sync::atomic::Ordering::{AcqRel, Acquire, SeqCst};
use core::task::Waker;

use super::Channel;
// Swapped for loom's under `cfg(gyre_loom)` (model: `tests/loom_wake.rs`).
use crate::sync::{fence, AtomicUsize, Mutex};

/// Wakers keyed by the id of their future; each entry holds one unit of driver interest.
#[derive(Debug, Default)]
pub struct WakerSet {
    entries: Mutex<Vec<(u64, Waker)>>,
    len: AtomicUsize,
}

impl WakerSet {
    /// Registers (or refreshes) the waker of future `id`.
    pub fn register(&self, ch: &Channel, id: u64, waker: &Waker) {
        let mut e = self.entries.lock();
        if let Some(slot) = e.iter_mut().find(|(i, _)| *i == id) {
            if !slot.1.will_wake(waker) {
                slot.1 = waker.clone();
            }
            return;
        }
        e.push((id, waker.clone()));
        self.len.fetch_add(1, AcqRel);
        drop(e);
        ch.add_interest();
        // Dekker with `wake_all`: our registration is ordered before the caller's
        // re-check of the ring, and the driver's ring read before its `is_empty`, so at
        // least one side sees the other (no lost wake-up).
        fence(SeqCst);
    }

    /// Removes future `id` (it completed or was dropped).
    pub fn remove(&self, ch: &Channel, id: u64) {
        if self.len.load(Acquire) == 0 {
            return;
        }
        let mut e = self.entries.lock();
        if let Some(pos) = e.iter().position(|(i, _)| *i == id) {
            e.swap_remove(pos);
            self.len.fetch_sub(1, AcqRel);
            ch.remove_interest(1);
        }
    }

    /// Whether anyone waits.
    pub fn is_empty(&self) -> bool {
        self.len.load(Acquire) == 0
    }

    /// Wakes and removes every waiter.
    pub fn wake_all(&self, ch: &Channel) {
        // See `register`.
        fence(SeqCst);
        if self.is_empty() {
            return;
        }
        let taken = std::mem::take(&mut *self.entries.lock());
        self.len.fetch_sub(taken.len(), AcqRel);
        ch.remove_interest(taken.len());
        for (_, w) in taken {
            w.wake();
        }
    }
}
