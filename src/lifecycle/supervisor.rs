//! [`Supervisor`]: the one thread per kernel that relaunches its stages that stopped by
//! themselves — at the end of an epoch (state `HANDED_OVER`, `error_code` 0), at once,
//! counted as an epoch and never against a restart policy; after a handler fault under a
//! restart policy, once the policy's backoff passed — and gives a stage up when the
//! policy says so. A kernel none of whose stages has epochs or a restart policy has none.
//!
//! A chain's stage that a stage it writes to stopped for good while it waited is not
//! relaunched (its successor would stop at once, L4): it stops as L4 would have stopped
//! it.

use core::sync::atomic::AtomicBool;
use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gyre_core::{Error, Result};

use super::handover::Stop;
use super::{Lifecycle, Why};

/// How often the supervisor looks at the stages it relaunches: a quarter of the shortest
/// epoch among them (the gap between an epoch's end and its successor), between
/// [`MIN_TICK`] and [`MAX_TICK`]; [`RESTARTS_TICK`] without epochs (restarts only, whose
/// backoffs are longer).
const MAX_TICK: Duration = Duration::from_micros(500);
const MIN_TICK: Duration = Duration::from_micros(50);
const RESTARTS_TICK: Duration = Duration::from_millis(1);

/// The supervisor's tick for stages with these epochs (µs; 0: none).
fn tick(epochs_us: impl Iterator<Item = u32>) -> Duration {
    epochs_us
        .filter(|&us| us != 0)
        .map(|us| (Duration::from_micros(u64::from(us)) / 4).clamp(MIN_TICK, MAX_TICK))
        .min()
        .unwrap_or(RESTARTS_TICK)
}

/// A running supervisor; stopped and joined on drop.
pub(crate) struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// One supervised stage and where its restart policy stands.
struct Watched {
    k: usize,
    /// Restarts since the policy's window last reset.
    in_window: u32,
    /// When the stage was last restarted (or launched): the policy's healthy window
    /// runs from it.
    last_launch: Instant,
    /// When the pending restart is due (after its backoff); `None` while it runs.
    due: Option<Instant>,
    /// Its end is final: no longer watched.
    done: bool,
}

impl Supervisor {
    /// Starts supervising `life`'s stages that have epochs or a restart policy; `None`
    /// when none has.
    ///
    /// # Errors
    ///
    /// [`Error::Launch`] when the thread cannot be spawned.
    pub(crate) fn start(life: &Arc<Lifecycle>, kernel: &str) -> Result<Option<Self>> {
        let now = Instant::now();
        let mut watched: Vec<Watched> = life
            .stages
            .iter()
            .enumerate()
            .filter(|(_, s)| s.supervised())
            .map(|(k, _)| Watched {
                k,
                in_window: 0,
                last_launch: now,
                due: None,
                done: false,
            })
            .collect();
        if watched.is_empty() {
            return Ok(None);
        }
        // From now on a stage that hands over counts as running on (its successor
        // follows); the thread clears it when it stops.
        for w in &watched {
            if let Ok(stage) = life.stages.get(w.k) {
                stage.watch(true);
            }
        }
        let every = tick(
            life.stages
                .iter()
                .filter(|s| s.supervised())
                .map(|s| s.epoch_us),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let name = kernel.to_owned();
        let weak: Weak<Lifecycle> = Arc::downgrade(life);
        let thread = std::thread::Builder::new()
            .name(format!("gyre-life-{kernel}"))
            .spawn(move || {
                let _span = tracing::debug_span!("gyre_supervisor", kernel = %name).entered();
                while !s.load(Acquire) && watched.iter().any(|w| !w.done) {
                    let Some(life) = weak.upgrade() else {
                        return;
                    };
                    if life.ended.load(Acquire) {
                        break;
                    }
                    for w in watched.iter_mut().filter(|w| !w.done) {
                        step(&life, w);
                    }
                    drop(life);
                    std::thread::park_timeout(every);
                }
                // No relaunch after this: a stage that hands over stays stopped.
                if let Some(life) = weak.upgrade() {
                    for w in &watched {
                        if let Ok(stage) = life.stages.get(w.k) {
                            stage.watch(false);
                        }
                    }
                }
            })
            .map_err(|e| Error::Launch {
                backend: "supervisor",
                kernel: kernel.to_owned(),
                source: gyre_core::Cause::context("spawning the supervisor thread", e),
            })?;
        Ok(Some(Self {
            stop,
            thread: Some(thread),
        }))
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

/// One look at a supervised stage: relaunch it when it stopped by itself and its
/// execution ended (after an epoch at once, after a fault once its backoff passed); make
/// its fault final when the policy says so, or stop it when a stage it feeds stopped for
/// good.
fn step(life: &Lifecycle, w: &mut Watched) {
    let Ok(stage) = life.stages.get(w.k) else {
        w.done = true;
        return;
    };
    // A reload of the stage is under way: it relaunches the stage itself.
    let Some(_one) = stage.try_hold() else {
        return;
    };
    if life.ended.load(Acquire) {
        return;
    }
    if life.ch.check_stopped().is_some() {
        // The kernel ended for good (terminated, faulted for good, lost, unresponsive):
        // its waiters failed, nothing is relaunched any more.
        w.done = true;
        return;
    }
    let (st, code) = life.stage_state(w.k, stage);
    let why = match life.classify(w.k, st, code) {
        Stop::Final => {
            // It stopped for good by itself (terminated, drained, a K0 fault): nothing
            // to relaunch any more.
            w.done = true;
            return;
        }
        Stop::Running => {
            // Running (again): a restart this was waiting for, if any, was made by
            // someone else (a reload relaunches a stage whatever made it stop), and the
            // next fault starts its own backoff.
            w.due = None;
            return;
        }
        Stop::HandedOver => Why::Epoch,
        Stop::Fault => Why::Restart,
    };
    if !stage.current().is_finished() {
        return;
    }
    if life.ch.chain().is_some_and(|c| c.feeds_a_final_stage(w.k)) {
        life.stop_behind_final(stage);
        w.done = true;
        return;
    }
    if why == Why::Restart {
        let Some(policy) = stage.restart else {
            // Only a stage with restarts left stops on a fault without its end being
            // final (`link::RESTARTS`, `Channel::arm_restart`).
            give_up(life, w, "no restart policy");
            return;
        };
        let now = Instant::now();
        let due = match w.due {
            Some(d) => d,
            None => {
                if policy
                    .window()
                    .is_some_and(|win| now - w.last_launch >= win)
                {
                    w.in_window = 0;
                }
                if w.in_window >= policy.max_restarts() {
                    give_up(life, w, "no restart left");
                    return;
                }
                let d = now + policy.backoff_for(w.in_window);
                w.due = Some(d);
                d
            }
        };
        if now < due {
            return;
        }
        w.due = None;
    }
    match life.hand_over(w.k, stage, why, None) {
        Ok(()) if why == Why::Restart => {
            // The policy's healthy window runs from the last restart: an epoch's
            // handover or a reload is no fault, and must not keep the count from
            // starting over.
            w.in_window += 1;
            w.last_launch = Instant::now();
        }
        Ok(()) => {}
        Err(e) => {
            // The handover made the stage's end final (lost, or stopped behind a final
            // stage), or the kernel ended meanwhile.
            tracing::warn!(kernel = %stage.name, error = %e, why = why.name(), "relaunch failed");
            w.done = true;
        }
    }
}

/// The stage's fault is final.
fn give_up(life: &Lifecycle, w: &mut Watched, why: &str) {
    if let Ok(stage) = life.stages.get(w.k) {
        tracing::error!(kernel = %stage.name, why, "kernel faulted: not restarting it");
        // Joining a joined launch is a no-op.
        let _ = stage.current().join();
        life.fault_for_good(w.k, stage);
    }
    w.done = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_follows_the_shortest_epoch() {
        let us = Duration::from_micros;
        assert_eq!(
            tick([0, 0].into_iter()),
            RESTARTS_TICK,
            "no epochs: restarts only"
        );
        assert_eq!(tick([1000, 0, 4000].into_iter()), us(250));
        assert_eq!(tick([100].into_iter()), MIN_TICK);
        assert_eq!(tick([1_000_000].into_iter()), MAX_TICK);
    }
}
