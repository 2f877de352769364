//! When the bridge moves bytes: the three copy strategies.
//!
//! - **Sync**: copies run inline, on the thread that needs them, and are complete when it
//!   goes on: a producer's publish pushes its slots and the doorbell before `send`
//!   returns; a waiter that finds no reply pushes the host line (released reply slots,
//!   commands) and pulls. Each push and pull issues its copies in stream order and waits
//!   once ([`CopyMode::Stream`]), like the others.
//! - **Async**: a copy worker — the emulated copy stream — owns the transfers. A publish
//!   or a waiter only raises a flag (and unparks the worker if it sleeps); the worker
//!   issues the copies in stream order, waits for them once per step, and then
//!   signals completion by unparking the completion driver, which
//!   wakes the futures. No tokio worker ever blocks on a copy.
//! - **DmaPolling**: a poller pushes and pulls every `poll_interval`, whether anyone asked
//!   or not, so the host never touches the device on its hot path; a publish also raises
//!   a flag that gets one extra push between two ticks, so a round trip takes about one
//!   interval (see `poller`). Intervals under 200 us are waited by yielding (timer
//!   sleeps on Linux overshoot by ~50 us of timer slack), longer ones by parking.
//!
//! All three stop their thread, if any, when the agent is dropped.

use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::channel::Transfer;
use crate::error::{Error, Result};
use crate::strategy::TransferStrategy;

use super::{CopyMode, RingBufferBridge, TransferStats};

const PUSH: u32 = 1;
const PULL: u32 = 2;

/// Spins, then yields, before the async worker parks.
const WORKER_SPINS: u32 = 128;
const WORKER_YIELDS: u32 = 32;
/// Longest park of an idle async worker (a safety net; requests unpark it).
const WORKER_PARK: Duration = Duration::from_millis(1);
/// Poll intervals at or above this are waited by parking, shorter ones by yielding.
const PARK_FROM: Duration = Duration::from_micros(200);

#[derive(Debug)]
struct Shared {
    bridge: Arc<RingBufferBridge>,
    flags: AtomicU32,
    parked: AtomicBool,
    stop: AtomicBool,
    /// The thread to unpark when new data arrived (the completion driver).
    notify: OnceLock<Thread>,
}

impl Shared {
    fn notify(&self) {
        if let Some(t) = self.notify.get() {
            t.unpark();
        }
    }
}

/// Runs a [`RingBufferBridge`] under one copy strategy and hooks it into a channel
/// ([`Transfer`]).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use gyre_core::bridge::{BridgeAgent, HostDeviceMemory, RingBufferBridge};
/// use gyre_core::ring::Geometry;
/// use gyre_core::strategy::TransferStrategy;
/// use gyre_core::{Channel, Kind, SharedRegion};
///
/// let g = Geometry::new(8, 128, 4)?;
/// let device = Arc::new(HostDeviceMemory::new(g, 0)?);
/// let mirror = Arc::new(SharedRegion::new_host(g, 0)?);
/// let bridge = Arc::new(RingBufferBridge::new(mirror.clone(), device.clone())?);
/// let agent = BridgeAgent::start(bridge, TransferStrategy::Sync, "doc")?;
/// let ch = Channel::new(mirror, "doc").with_transfer(agent.clone());
/// ch.try_publish(Kind::Send, 1, b"x").unwrap(); // Sync: pushed before this returns
/// assert_eq!(agent.stats().slots_down, 1);
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug)]
pub struct BridgeAgent {
    shared: Arc<Shared>,
    strategy: TransferStrategy,
    worker: Mutex<Option<JoinHandle<()>>>,
    worker_thread: Option<Thread>,
}

impl BridgeAgent {
    /// Starts `bridge` under `strategy`: initialises the device's control block (first
    /// push) and, for `Async` and `DmaPolling`, starts the copy thread named after
    /// `kernel`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for [`TransferStrategy::Unified`] (zero copy needs no
    /// bridge) or an invalid poll interval; the bridge's error if the first push fails;
    /// [`Error::Launch`] if the thread cannot be spawned.
    pub fn start(
        bridge: Arc<RingBufferBridge>,
        strategy: TransferStrategy,
        kernel: &str,
    ) -> Result<Arc<Self>> {
        strategy.validate()?;
        let mode = match strategy {
            // Every strategy issues a step's copies and waits once: a blocking copy each
            // would wait once per copy (one PCIe round trip each on a GPU).
            TransferStrategy::Sync
            | TransferStrategy::Async
            | TransferStrategy::DmaPolling { .. } => CopyMode::Stream,
            _ => {
                return Err(Error::InvalidArgument {
                    name: "transfer strategy",
                    value: strategy.name().to_owned(),
                    reason: "only the copy strategies (sync, async, dma-polling) use a bridge",
                })
            }
        };
        bridge.set_copy_mode(mode);
        bridge.init()?;
        let shared = Arc::new(Shared {
            bridge,
            flags: AtomicU32::new(0),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            notify: OnceLock::new(),
        });
        let body: Option<Box<dyn FnOnce() + Send>> = match strategy {
            TransferStrategy::Async => {
                let s = shared.clone();
                Some(Box::new(move || async_worker(&s)))
            }
            TransferStrategy::DmaPolling { poll_interval } => {
                let s = shared.clone();
                Some(Box::new(move || poller(&s, poll_interval)))
            }
            _ => None,
        };
        let worker = match body {
            Some(f) => {
                let name = kernel.to_owned();
                let strat = strategy.name();
                let h = std::thread::Builder::new()
                    .name(format!("gyre-copy-{kernel}"))
                    .spawn(move || {
                        let _span =
                            tracing::debug_span!("gyre_bridge", kernel = %name, strategy = strat)
                                .entered();
                        tracing::debug!("copy thread started");
                        f();
                        tracing::debug!("copy thread stopped");
                    })
                    .map_err(|e| Error::Launch {
                        backend: "bridge",
                        kernel: kernel.to_owned(),
                        source: crate::Cause::context("spawning the copy thread", e),
                    })?;
                Some(h)
            }
            None => None,
        };
        let worker_thread = worker.as_ref().map(|h| h.thread().clone());
        Ok(Arc::new(Self {
            shared,
            strategy,
            worker: Mutex::new(worker),
            worker_thread,
        }))
    }

    /// The strategy this agent runs.
    pub fn strategy(&self) -> TransferStrategy {
        self.strategy
    }

    /// The bridge.
    pub fn bridge(&self) -> &Arc<RingBufferBridge> {
        &self.shared.bridge
    }

    /// Copies and bytes so far.
    pub fn stats(&self) -> TransferStats {
        self.shared.bridge.stats()
    }

    /// Lets the bridge wake a parked kernel after each push (see `crate::doorbell`).
    pub fn set_doorbell(&self, d: Arc<crate::doorbell::Doorbell>) {
        self.shared.bridge.set_doorbell(d);
    }

    /// Unparks `t` (the completion driver) whenever the copy thread brought new data.
    pub fn notify(&self, t: Thread) {
        let _ = self.shared.notify.set(t);
    }

    /// Pulls now, telemetry line included, on the calling thread (before a telemetry
    /// read). Errors are recorded by the bridge (the mirror shows a faulted kernel).
    pub fn refresh_telemetry(&self) {
        let b = &self.shared.bridge;
        let _ = b.push();
        let _ = b.pull_telemetry();
    }

    /// A blocking push and pull on the calling thread, for a kernel that stopped: after
    /// it, the mirror holds every reply the kernel published and its final state.
    pub fn drain(&self) {
        self.refresh_telemetry();
    }

    fn request(&self, want: u32) {
        let s = &self.shared;
        if s.flags.load(Relaxed) & want != want {
            s.flags.fetch_or(want, SeqCst);
            // Dekker pair with the worker's `parked` store and flag re-check.
            if s.parked.load(SeqCst) {
                if let Some(t) = &self.worker_thread {
                    t.unpark();
                }
            }
        }
    }

    /// Stops and joins the copy thread, if any. Idempotent.
    pub fn stop(&self) {
        self.shared.stop.store(true, Release);
        if let Some(t) = &self.worker_thread {
            t.unpark();
        }
        if let Some(h) = self.worker.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for BridgeAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Transfer for BridgeAgent {
    fn flush(&self) {
        match self.strategy {
            TransferStrategy::Sync => {
                let _ = self.shared.bridge.push();
            }
            // Both ask their thread: the publishing thread never copies.
            TransferStrategy::Async | TransferStrategy::DmaPolling { .. } => self.request(PUSH),
            _ => {}
        }
    }

    fn refresh(&self) {
        match self.strategy {
            TransferStrategy::Sync => {
                let b = &self.shared.bridge;
                if b.push().is_ok() {
                    let _ = b.pull();
                }
            }
            TransferStrategy::Async => self.request(PUSH | PULL),
            _ => {}
        }
    }
}

/// The async copy stream: serves raised flags in order, push before pull.
fn async_worker(s: &Shared) {
    let mut idle: u32 = 0;
    while !s.stop.load(Acquire) {
        let f = s.flags.swap(0, AcqRel);
        if f == 0 {
            idle += 1;
            if idle <= WORKER_SPINS {
                core::hint::spin_loop();
            } else if idle <= WORKER_SPINS + WORKER_YIELDS {
                std::thread::yield_now();
            } else {
                s.parked.store(true, SeqCst);
                if s.flags.load(SeqCst) == 0 && !s.stop.load(SeqCst) {
                    std::thread::park_timeout(WORKER_PARK);
                }
                s.parked.store(false, SeqCst);
            }
            continue;
        }
        idle = 0;
        if s.bridge.push().is_err() {
            s.notify();
            return;
        }
        if f & PULL != 0 {
            match s.bridge.pull() {
                Ok(true) => s.notify(),
                Ok(false) => {}
                Err(_) => {
                    s.notify();
                    return;
                }
            }
        }
    }
}

/// The DMA poller: push and pull every `interval` (a tick), plus at most one push between
/// two ticks, at once, when a publish asks for it. So a request waits for the next push
/// only when one already went out since the last tick, and its reply is pulled at the next
/// tick: a round trip takes about one interval, not up to two (the push of the tick that
/// first carries a request comes right before that tick's pull, too early for the kernel
/// to have answered). The device still sees at most two pushes and one pull per interval.
fn poller(s: &Shared, interval: Duration) {
    let mut next = Instant::now();
    let mut pushed_early = false;
    while !s.stop.load(Acquire) {
        let now = Instant::now();
        if now >= next {
            s.flags.swap(0, AcqRel);
            next = now + interval;
            pushed_early = false;
            let step = s.bridge.push().and_then(|()| s.bridge.pull());
            match step {
                Ok(true) => s.notify(),
                Ok(false) => {}
                Err(_) => {
                    s.notify();
                    return;
                }
            }
        } else if !pushed_early && s.flags.swap(0, AcqRel) & PUSH != 0 {
            pushed_early = true;
            if s.bridge.push().is_err() {
                s.notify();
                return;
            }
        }
        // Wait for the next tick, or for a publish while the early push is unused.
        let asked = || !pushed_early && s.flags.load(SeqCst) != 0;
        if interval >= PARK_FROM {
            s.parked.store(true, SeqCst);
            let now = Instant::now();
            if next > now && !asked() && !s.stop.load(SeqCst) {
                std::thread::park_timeout(next - now);
            }
            s.parked.store(false, SeqCst);
        } else {
            while Instant::now() < next && !s.stop.load(Relaxed) && !asked() {
                std::thread::yield_now();
            }
        }
    }
}
