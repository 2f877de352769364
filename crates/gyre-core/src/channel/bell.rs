//! The reply bell: a kernel that runs on a host thread (the CPU backend) serves the
//! waiters of its replies itself, after each batch it publishes, instead of leaving them
//! to the completion driver ([`super::driver`]).
//!
//! Without it, an async or parked waiter is woken by the driver, which scans the reply
//! slots for as long as anyone waits. On a machine with few cores that thread competes
//! with the kernel's and the callers' (on two cores, 64 async callers kept the driver and
//! their workers spinning while the kernel thread, the one doing the work, got 5% of the
//! CPU: `benches/waiters.rs`, docs/benchmarks.md "Waiters"). With the bell the kernel's
//! thread wakes them once their replies are out, and the driver parks.
//!
//! The protocol is a Dekker pair over the channel's `interest` counter, whose two
//! read-modify-writes order the two sides without a fence:
//!
//! ```text
//! kernel thread (after a batch, K7)          waiter (Channel::register)
//!   [replies: each seq, then k2h_head]         cell WAITING, waker stored
//!   n = interest.fetch_add(0, AcqRel)          interest.fetch_add(1, AcqRel)
//!   if n > 0: scan the replies published       probe its reply again
//!     since the last ring, wake their waiters
//! ```
//!
//! A read-modify-write reads the last value of the counter's modification order. If the
//! kernel's comes after the waiter's, it reads a count that includes the waiter (or a
//! later one of the same release sequence), acquires, and its scan sees the cell
//! waiting. If it comes first, the waiter's reads a value of the kernel's release
//! sequence, acquires, and its probe sees the reply. Either way nobody sleeps through
//! their reply (`tests/loom_wake.rs`, `a_bell_never_loses_a_waiter`, models this pair;
//! with plain loads in place of either read-modify-write it finds the lost wake-up).
//! On x86 the kernel's side is one locked add per batch, on a line that stays in its
//! cache while nobody registers. The scan is the
//! driver's (`driver::scan_published`): it also discards the replies of abandoned calls
//! and wakes the futures waiting for space or a `send` reply when the indices moved.
//!
//! The driver stays: under a bell only the first unit of interest (from none) unparks
//! it, and while anyone waits it looks at every outstanding slot at least every
//! [`BACKSTOP`], for what the kernel's thread cannot do: the heartbeat, the watchdog, the
//! kernel's end (a waiter that checked the state just before the kernel ended), the waker
//! sets that wait for the host's own releases (space, `send` replies; while any of those
//! waits the driver scans as it does without a bell). A successor launched on the same
//! rings (reload, epoch, restart) rings the same bell; the kernel's thread gives the
//! driver one look when it ends (a batch that faults the kernel rings no bell: that look
//! serves it).

use core::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use super::{driver, Channel};

/// The longest the driver of a channel with a bell parks while someone waits.
pub const BACKSTOP: Duration = Duration::from_millis(1);

/// The bell of one kernel's rings (shared by its successors), attached to its channel.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use gyre_core::channel::bell::ReplyBell;
///
/// let bell = Arc::new(ReplyBell::new());
/// // The kernel's thread: a ringer, rung after each batch (nothing attached: no-op).
/// let mut ringer = bell.ringer();
/// ringer.ring();
/// ringer.ended();
/// ```
#[derive(Debug, Default)]
pub struct ReplyBell {
    ch: OnceLock<Weak<Channel>>,
}

impl ReplyBell {
    /// A bell attached to nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Attaches the channel of the rings this bell's kernel answers on: from now on its
    /// async and parked waiters register without unparking the driver. Once; a second
    /// channel is ignored.
    pub fn attach(&self, ch: &Arc<Channel>) {
        if self.ch.set(Arc::downgrade(ch)).is_ok() {
            ch.bell_attached.store(true, Release);
        }
    }

    /// What the kernel's thread rings.
    pub fn ringer(&self) -> Ringer<'_> {
        Ringer {
            bell: self,
            ch: None,
            from: u64::MAX,
        }
    }
}

/// A kernel thread's end of a [`ReplyBell`]: it holds the channel from the first ring
/// after the attachment until the thread drops it, and the head its last ring saw.
#[derive(Debug)]
pub struct Ringer<'a> {
    bell: &'a ReplyBell,
    ch: Option<Arc<Channel>>,
    /// The reply head (`k2h_head`) at the last ring (`u64::MAX`: none yet).
    from: u64,
}

impl Ringer<'_> {
    /// After a batch whose replies the kernel published: wakes their waiters.
    pub fn ring(&mut self) {
        if self.ch.is_none() {
            self.ch = self.bell.ch.get().and_then(Weak::upgrade);
        }
        if let Some(ch) = &self.ch {
            ch.serve_published(&mut self.from);
        }
    }

    /// The kernel's execution ended: serves what it published last, and has the driver
    /// look at once (a final state wakes every waiter there).
    pub fn ended(mut self) {
        self.ring();
        if let Some(ch) = &self.ch {
            ch.unpark_driver();
        }
    }
}

impl Channel {
    /// The kernel's side of the bell: after its replies' publication, wakes the waiters
    /// of the replies published since `from` (the head at the last ring, updated),
    /// unless nobody waits. (Futures waiting for space or a `send` reply are the
    /// driver's: it runs its full scan while any waits.)
    pub fn serve_published(&self, from: &mut u64) {
        if self.interest.fetch_add(0, AcqRel) == 0 {
            // Nobody to wake; a waiter that registers later probes its reply itself.
            *from = self.region.control().k2h_head.load(Acquire);
            return;
        }
        driver::scan_published(self, from);
    }

    /// Whether a kernel thread wakes this channel's waiters ([`ReplyBell::attach`]).
    pub fn has_reply_bell(&self) -> bool {
        self.bell_attached.load(Acquire)
    }

    /// A call waiter's unit of interest (a registration, an abandoned call), taken after
    /// its cell says so and before it probes its reply again: the waiter's half of the
    /// bell's pair. The driver is unparked for it unless a bell serves it.
    pub(crate) fn add_call_interest(&self) {
        let before = self.interest.fetch_add(1, AcqRel);
        // Under a bell, only the first unit wakes the driver: from then on it looks at
        // least every BACKSTOP while anyone waits (a kernel that ended between a
        // waiter's state check and its registration is noticed there).
        if before == 0 || !self.has_reply_bell() {
            self.unpark_driver();
        }
    }
}
