//! [`Supervisor`]: the thread that relaunches a kernel that stopped by itself — at the end
//! of an epoch (state `HANDED_OVER`) or after a fault under a restart policy — and gives
//! up when the policy says so. Kernels with neither have none.

use core::sync::atomic::AtomicBool;
use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gyre_abi::state;
use gyre_core::{Error, Result};

use super::{Lifecycle, Why};

/// A running supervisor; stopped and joined on drop.
pub(crate) struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Starts supervising `life`, looking at its state every `tick`.
    pub(crate) fn start(life: Weak<Lifecycle>, kernel: &str, tick: Duration) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let name = kernel.to_owned();
        let thread = std::thread::Builder::new()
            .name(format!("gyre-life-{kernel}"))
            .spawn(move || {
                let _span = tracing::debug_span!("gyre_supervisor", kernel = %name).entered();
                run(&life, &s, tick);
            })
            .map_err(|e| Error::Launch {
                backend: "supervisor",
                kernel: kernel.to_owned(),
                source: gyre_core::Cause::context("spawning the supervisor thread", e),
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }

    /// How often a supervisor of a kernel with epoch `epoch` looks: a quarter of the
    /// epoch, between 50 µs and 1 ms (the gap between an epoch's end and its successor).
    pub(crate) fn tick(epoch: Option<Duration>) -> Duration {
        epoch.map_or(Duration::from_millis(1), |e| {
            (e / 4).clamp(Duration::from_micros(50), Duration::from_millis(1))
        })
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// Sleeps `d` unless stopped meanwhile; returns whether to go on.
fn nap(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    while !stop.load(Acquire) {
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::park_timeout(until - now);
    }
    false
}

fn run(life: &Weak<Lifecycle>, stop: &AtomicBool, tick: Duration) {
    while !stop.load(Acquire) {
        let Some(l) = life.upgrade() else {
            return;
        };
        if l.ended.load(Acquire) {
            return;
        }
        let st = l.ch.kernel_state().0;
        let finished = l.current().is_finished();
        if st == state::HANDED_OVER && finished {
            if let Err(e) = l.relaunch_if(Why::Epoch) {
                tracing::warn!(kernel = %l.ch.name(), error = %e, "epoch handover failed");
            }
        } else if st == state::FAULTED && l.ch.restart_armed() && finished {
            match l.next_restart() {
                None => {
                    tracing::error!(kernel = %l.ch.name(), "kernel faulted: no restart left");
                    l.give_up();
                    return;
                }
                Some(backoff) => {
                    drop(l);
                    if !nap(stop, backoff) {
                        return;
                    }
                    let Some(l) = life.upgrade() else {
                        return;
                    };
                    if let Err(e) = l.relaunch_if(Why::Restart) {
                        tracing::warn!(kernel = %l.ch.name(), error = %e, "restart failed");
                    }
                    continue;
                }
            }
        } else if l.ch.check_stopped().is_some() {
            // Terminated, lost, unresponsive, or a fault nothing restarts: nothing left to
            // supervise.
            return;
        }
        drop(l);
        if !nap(stop, tick) {
            return;
        }
    }
}
