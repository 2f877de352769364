//! The host-side watchdog: notices a kernel that stopped showing signs of life (a handler
//! that never returns, a hung device) and fails its waiters instead of hanging them.
//!
//! The kernel shows life in two fields of its control-block line: `kernel_heartbeat`
//! (written on its slow path: every 128 loop iterations, and on every idle iteration
//! once its idle strategy parks or sleeps) and `h2k_tail` (written after every batch).
//! The completion driver runs [`Watchdog::check`]. When neither field nor the kernel's
//! state changed for longer than the bound, and the kernel is not stopped (in a final
//! state, or handed over to a relaunch), the channel is marked unresponsive
//! ([`Channel::mark_unresponsive`]): closed to new requests, the kernel told to
//! terminate, and every waiter woken to fail with [`Error::Unresponsive`]. The verdict
//! is final; a kernel that recovers later drains and stops (its late replies are
//! discarded).
//!
//! The bound must exceed the longest batch (batch size x the slowest handler) plus one
//! idle park, or a busy but healthy kernel is declared unresponsive.
//!
//! The head of a pipeline ([`crate::chain`]) is watched stage by stage: the chain is
//! unresponsive when any stage that has not stopped showed no sign of life for longer
//! than the bound (a later stage's hung handler holds the whole chain).

use core::sync::atomic::Ordering::{AcqRel, Acquire, SeqCst};
use std::time::{Duration, Instant};

use gyre_abi::{command, state};

use super::Channel;
use crate::error::Error;

/// The value of `Channel::stopped` once the watchdog fired: not a kernel state (those are
/// all below 0x100), a host-side verdict.
pub(crate) const UNRESPONSIVE: u32 = 0x100;

/// The watchdog of one kernel, run by its completion driver.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::{Duration, Instant};
/// use gyre_core::channel::watchdog::Watchdog;
/// use gyre_core::{Channel, SharedRegion};
/// use gyre_core::ring::Geometry;
///
/// let region = Arc::new(SharedRegion::new_host(Geometry::new(4, 128, 1)?, 0)?);
/// let ch = Channel::new(region, "silent");
/// // No kernel runs over this region, so nothing ever changes.
/// let mut w = Watchdog::new(Duration::from_millis(10));
/// let start = Instant::now();
/// assert!(!w.check(&ch, start));
/// assert!(w.check(&ch, start + Duration::from_millis(11)));
/// assert!(matches!(ch.unresponsive(), Some(gyre_core::Error::Unresponsive { .. })));
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Watchdog {
    bound: Duration,
    /// Per stage (one for a lone kernel): (kernel heartbeat, h2k_tail, state) as last
    /// seen, and when that changed.
    last: Vec<((u64, u64, u32), Instant)>,
    fired: bool,
}

impl Watchdog {
    /// A watchdog firing after `bound` without a sign of life.
    pub fn new(bound: Duration) -> Self {
        Self {
            bound,
            last: Vec::new(),
            fired: false,
        }
    }

    /// The bound.
    pub fn bound(&self) -> Duration {
        self.bound
    }

    /// How often the driver should call [`Watchdog::check`]: an eighth of the bound, at
    /// least every 100 µs apart.
    pub fn period(&self) -> Duration {
        (self.bound / 8).max(Duration::from_micros(100))
    }

    /// Looks at the kernel's line (each stage's, for a pipeline's head) once, at time
    /// `now`. Returns `true` when this call declared the kernel unresponsive. The first
    /// call only records what it sees.
    pub fn check(&mut self, ch: &Channel, now: Instant) -> bool {
        if self.fired {
            return false;
        }
        let lone = [&ch.region];
        let regions: Vec<&std::sync::Arc<crate::SharedRegion>> = match ch.chain() {
            Some(c) => c.regions().collect(),
            None => lone.to_vec(),
        };
        if self.last.len() != regions.len() {
            self.last = Vec::with_capacity(regions.len());
        }
        let mut silent = Duration::ZERO;
        for (i, r) in regions.iter().enumerate() {
            let cb = r.control();
            let seen = (
                cb.kernel_heartbeat.load(Acquire),
                cb.h2k_tail.load(Acquire),
                cb.state.load(Acquire),
            );
            if i == self.last.len() {
                self.last.push((seen, now));
                continue;
            }
            let (last, changed) = &mut self.last[i];
            if *last != seen {
                *last = seen;
                *changed = now;
            } else if !state::is_stopped(seen.2) {
                // A stopped stage is not silent: `check_stopped` reports its end, and a
                // stage that handed over waits for the host's relaunch (an epoch's end, a
                // pipeline stage restarted after a fault, whose backoff may outlast the
                // bound).
                silent = silent.max(now.saturating_duration_since(*changed));
            }
        }
        if silent <= self.bound {
            return false;
        }
        self.fired = true;
        ch.mark_unresponsive(silent, self.bound);
        true
    }
}

impl Channel {
    /// Declares the kernel unresponsive (see the [module documentation](self)): closes
    /// the request ring, commands Terminate (a kernel that recovers drains and stops) and
    /// wakes every waiter, which then fails with [`Error::Unresponsive`]. Idempotent.
    pub fn mark_unresponsive(&self, silent_for: Duration, bound: Duration) {
        if self.unresponsive.set((silent_for, bound)).is_err() {
            return;
        }
        tracing::warn!(
            kernel = %self.name,
            ?silent_for,
            ?bound,
            "watchdog: kernel unresponsive; failing its waiters and detaching it"
        );
        // A final state the kernel reached meanwhile takes precedence.
        let _ = self
            .stopped
            .compare_exchange(0, UNRESPONSIVE, AcqRel, Acquire);
        self.close();
        // Between the verdict (above) and the command: a handover that writes its
        // successor's command, then looks for the verdict, either sees it or is followed
        // by this TERMINATE (`Lifecycle::write_successor_command` has the other fence).
        core::sync::atomic::fence(SeqCst);
        self.command(command::TERMINATE);
        self.wake_all();
    }

    /// The watchdog's verdict, if it fired: the error waiters get.
    pub fn unresponsive(&self) -> Option<Error> {
        self.unresponsive
            .get()
            .map(|&(silent_for, bound)| Error::Unresponsive {
                kernel: self.name.clone(),
                silent_for,
                bound,
            })
    }
}
