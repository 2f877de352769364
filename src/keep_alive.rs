//! [`KeepAlive`]: what keeps a kernel running. Every [`Kernel`](crate::Kernel) handle and
//! a pool's member call hold one (`call`, `send` and `shutdown` futures borrow their
//! handle's); `recv` futures and `replies` streams do not, so a consumer never keeps a
//! kernel alive after its producers are gone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::inner::Inner;

/// Kernels of this process whose last handle was dropped and whose end (drain,
/// Terminate, join) runs on a thread of its own: they still hold their device's room (a
/// compute unit, a stream) until it is over. `(ending now, ends completed so far)`.
static ENDING: Mutex<(usize, u64)> = Mutex::new((0, 0));
static ENDED: Condvar = Condvar::new();

/// Unattended ends completed so far: a launch notes it before it tries, so
/// [`wait_for_ending`] can tell whether room was freed meanwhile.
pub(crate) fn ends_completed() -> u64 {
    ENDING.lock().1
}

/// Whether a launch that was refused for want of room (having seen `before` ends
/// completed, [`ends_completed`]) may find room now: waits, at most `limit`, until no
/// kernel of this process is ending unattended, and returns whether one was ending or
/// ended since `before`.
pub(crate) fn wait_for_ending(before: u64, limit: Duration) -> bool {
    let mut g = ENDING.lock();
    if g.0 == 0 {
        return g.1 != before;
    }
    let deadline = Instant::now() + limit;
    while g.0 > 0 {
        if ENDED.wait_until(&mut g, deadline).timed_out() {
            break;
        }
    }
    true
}

/// Counts one unattended end, from its start to its end (also when it unwinds).
struct Ending;

impl Ending {
    fn start() -> Self {
        ENDING.lock().0 += 1;
        Ending
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        let mut g = ENDING.lock();
        g.0 = g.0.saturating_sub(1);
        g.1 += 1;
        drop(g);
        ENDED.notify_all();
    }
}

/// Ends the kernel when the last holder drops it, unless a shutdown already did.
pub(crate) struct KeepAlive {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for KeepAlive {
    /// Closes the ring to new requests and removes the telemetry export file at once
    /// (both quick), then hands the rest of the end — wait for the drain, Terminate, join
    /// (bounded to [`crate::inner::UNATTENDED_STOP`]) — to a thread of its own, so dropping
    /// the last handle never blocks the dropping thread (a tokio worker, say) on the
    /// kernel. If no thread can be started, it runs here.
    fn drop(&mut self) {
        if self.inner.ended() {
            return;
        }
        self.inner.ch.close();
        self.inner.unpublish_export();
        let inner = self.inner.clone();
        let ending = Ending::start();
        let spawned = std::thread::Builder::new()
            .name(format!("gyre-end-{}", self.inner.ch.name()))
            .spawn(move || {
                inner.end_unattended();
                drop(ending);
            });
        if let Err(e) = spawned {
            tracing::warn!(kernel = %self.inner.ch.name(), error = %e, "no thread for the kernel's end; ending it on the dropping thread");
            // The closure (and its count) is gone with the failed spawn: count this end.
            let _ending = Ending::start();
            self.inner.end_unattended();
        }
    }
}
