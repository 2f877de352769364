//! The completion driver: one host thread per kernel that wakes async waiters.
//!
//! Async futures first spin for their reply on the task's own thread (a bounded,
//! configurable budget) and register with the driver only when that budget is spent. The
//! driver parks while nobody is registered; otherwise it scans the outstanding reply
//! slots, wakes the waiter of each published reply, discards replies of abandoned calls,
//! wakes futures waiting for free space, `send` replies or the kernel's end, and notices
//! when the kernel stops. Between scans it follows its idle strategy (spin, yield, park
//! with a bounded timeout), so it never blocks a tokio worker and costs nothing when idle.
//! It also writes the host heartbeat and, when configured, runs the watchdog
//! ([`super::watchdog`]) that declares a silent kernel unresponsive.

use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::idle::IdleStrategy;

use super::watchdog::Watchdog;
use super::{Channel, Probe, ST_ABANDONED, ST_WAITING};

/// Handle of a running completion driver; stops and joins it on drop.
#[derive(Debug)]
pub struct Driver {
    ch: Arc<Channel>,
    thread: Option<JoinHandle<()>>,
}

impl Driver {
    /// Starts the driver of `ch`. It writes the host heartbeat every `heartbeat` and uses
    /// `idle` between scans while someone waits.
    pub fn start(ch: Arc<Channel>, idle: IdleStrategy, heartbeat: Duration) -> Result<Self> {
        Self::start_with_watchdog(ch, idle, heartbeat, None)
    }

    /// [`Driver::start`], also running `watchdog` (see [`super::watchdog`]) when given.
    pub fn start_with_watchdog(
        ch: Arc<Channel>,
        idle: IdleStrategy,
        heartbeat: Duration,
        watchdog: Option<Duration>,
    ) -> Result<Self> {
        let c = ch.clone();
        let thread = std::thread::Builder::new()
            .name(format!("gyre-driver-{}", ch.name()))
            .spawn(move || run(&c, idle, heartbeat, watchdog.map(Watchdog::new)))
            .map_err(|e| Error::Launch {
                backend: "host",
                kernel: ch.name().to_owned(),
                source: crate::Cause::context("spawning the completion driver thread", e),
            })?;
        // `set` fails only if already set, which cannot happen: one driver per channel.
        let _ = ch.driver.set(thread.thread().clone());
        Ok(Self {
            ch,
            thread: Some(thread),
        })
    }
}

impl Driver {
    /// The driver's thread (to unpark it when new replies arrive), while it runs.
    pub fn thread(&self) -> Option<std::thread::Thread> {
        self.thread.as_ref().map(|t| t.thread().clone())
    }
}

impl Channel {
    /// Wakes the completion driver, if one runs.
    pub(crate) fn unpark_driver(&self) {
        if let Some(t) = self.driver.get() {
            t.unpark();
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.ch.driver_stop.store(true, Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// How often the driver moves a lazy `h2k_head` while it runs (parked, at each wake-up).
const HEAD_SYNC: Duration = Duration::from_millis(1);

fn run(ch: &Channel, idle: IdleStrategy, heartbeat: Duration, mut watchdog: Option<Watchdog>) {
    let _span = tracing::debug_span!("gyre_driver", kernel = %ch.name()).entered();
    let mut idler = idle.idler();
    let mut last_hb = Instant::now();
    let mut last_wd = last_hb;
    let mut last_sync = last_hb;
    let mut last = (u64::MAX, u64::MAX);
    // Parked, the driver still wakes in time for the heartbeat and the watchdog.
    let park = watchdog
        .as_ref()
        .map_or(heartbeat, |w| w.period().min(heartbeat));
    ch.heartbeat();
    if let Some(w) = watchdog.as_mut() {
        w.check(ch, last_wd);
    }
    while !ch.driver_stop.load(Acquire) {
        let now = Instant::now();
        if now.saturating_duration_since(last_hb) >= heartbeat {
            ch.heartbeat();
            last_hb = now;
            // Also while nobody waits: a kernel the device killed is noticed (see
            // `liveness`) and its ring closed, so the next request fails at once.
            let _ = ch.check_stopped();
        }
        if now.saturating_duration_since(last_sync) >= HEAD_SYNC {
            // A lazy head (`Channel::sync_head`) moves for the kernel's check of a slot
            // against it and for monitors; publications do not move it.
            ch.sync_head();
            last_sync = now;
        }
        if let Some(w) = watchdog.as_mut() {
            if now.saturating_duration_since(last_wd) >= w.period() {
                last_wd = now;
                w.check(ch, now);
            }
        }
        if ch.interest.load(Acquire) == 0 {
            std::thread::park_timeout(park);
            idler.reset();
            continue;
        }
        let worked = service(ch, &mut last);
        if bell_serves(ch) {
            // The kernel's thread wakes the call waiters (`super::bell`): one look per
            // backstop (or per unpark) for the rest.
            std::thread::park_timeout(park.min(super::bell::BACKSTOP));
            idler.reset();
        } else {
            idler.idle(worked);
        }
    }
    tracing::debug!("completion driver stopped");
}

/// Whether the reply bell serves every waiter there is: the call waiters, and no future
/// waits for something only the host moves (space freed by a release, a `send` reply
/// taken by another `recv`, the kernel's end).
fn bell_serves(ch: &Channel) -> bool {
    ch.has_reply_bell()
        && ch.space_waiters.is_empty()
        && ch.recv_waiters.is_empty()
        && ch.state_waiters.is_empty()
}

/// One look: the scan, then the kernel's end. Returns whether anything happened.
fn service(ch: &Channel, last: &mut (u64, u64)) -> bool {
    let worked = scan(ch, last);
    let cb = ch.region.control();
    if ch.check_stopped().is_some() {
        // Nothing more will be answered: finish abandoned calls, wake everyone.
        let tail = cb.k2h_tail.load(Acquire);
        let claimed = ch.claimed();
        for j in tail..claimed.min(tail + ch.capacity) {
            let (owned, st) = ch.cell_state(j);
            if owned && st == ST_ABANDONED {
                ch.try_finalize(j);
            } else if owned && st == ST_WAITING {
                let _ = ch.wake_index(j);
            }
        }
        ch.wake_all();
    }
    worked
}

/// The scan of the outstanding reply slots: wakes the waiter of each published reply,
/// discards the replies of abandoned calls, and wakes the futures waiting for space or a
/// `send` reply when the indices moved since `last` (the caller's own). Any thread may
/// scan (the driver, a kernel's reply bell): each waker and each reply is taken once.
/// Returns whether anything happened.
pub(super) fn scan(ch: &Channel, last: &mut (u64, u64)) -> bool {
    let cb = ch.region.control();
    let tail = cb.k2h_tail.load(Acquire);
    let head = cb.k2h_head.load(Acquire);
    let claimed = ch.claimed();
    let worked = serve(ch, tail, claimed, head);
    wake_sets(ch, (head, tail), last) || worked
}

/// A reply bell's scan: the replies published since its last ring, `from..k2h_head`
/// (`from` below `k2h_tail`, or `u64::MAX` at the first ring, starts at `k2h_tail`).
/// Every published reply is covered by the ring that follows its publication; a waiter
/// that registers later finds its reply itself (`super::bell`). Checked rings publish
/// `k2h_head` on the slow tick only: there every outstanding slot is served. The waker
/// sets are left to the driver (see [`bell_serves`]).
pub(super) fn scan_published(ch: &Channel, from: &mut u64) -> bool {
    let cb = ch.region.control();
    if ch.checked {
        let tail = cb.k2h_tail.load(Acquire);
        return serve(ch, tail, ch.claimed(), cb.k2h_head.load(Acquire));
    }
    let tail = cb.k2h_tail.load(Acquire);
    let head = cb.k2h_head.load(Acquire);
    let start = if *from == u64::MAX || *from < tail {
        tail
    } else {
        *from
    };
    let worked = serve(ch, start, head.min(tail.saturating_add(ch.capacity)), head);
    *from = head.max(start);
    worked
}

/// Wakes the futures waiting for space or a `send` reply when the indices moved since
/// `last`.
fn wake_sets(ch: &Channel, now: (u64, u64), last: &mut (u64, u64)) -> bool {
    if now == *last {
        return false;
    }
    *last = now;
    ch.space_waiters.wake_all(ch);
    ch.recv_waiters.wake_all(ch);
    true
}

/// Serves indices `from..to` in order (`head`: the published head): wakes each published
/// reply's waiter, finalizes each abandoned call's; stops at the first reply not yet
/// published.
fn serve(ch: &Channel, from: u64, to: u64, head: u64) -> bool {
    let mut worked = false;
    let mut i = from;
    while i < to && i - from < ch.capacity {
        let p = ch.probe(i);
        if p == Probe::Pending && i >= head {
            break;
        }
        // A corrupt slot (published, yet not Ready) is served like a ready one: its
        // waiter is woken to report the protocol error, an abandoned one released.
        match p {
            Probe::Pending | Probe::Gone if ch.reply_corrupt(i).is_none() => {
                if p == Probe::Pending {
                    break;
                }
            }
            _ => {
                let (owned, st) = ch.cell_state(i);
                if owned && st == ST_WAITING {
                    // Work only if a waker was still registered: a woken task that has
                    // not run yet must not keep the driver spinning (it would starve
                    // that task when both share a core).
                    worked |= ch.wake_index(i);
                } else if owned && st == ST_ABANDONED {
                    worked |= ch.try_finalize(i);
                }
            }
        }
        i += 1;
    }
    worked
}
