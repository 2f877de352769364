//! Relaunching one stage of a running chain while the other stages run on: at the end of
//! each of its epochs, and after its handler faulted (`docs/pipelines.md`, "Relaunching a
//! stage").
//!
//! A stage in epochs (its region's `epoch_us`) hands over at a batch boundary when one
//! runs out, as any kernel (K1; `error_code` 0); the supervisor relaunches it within its
//! tick (a quarter of the shortest epoch, 50 to 500 µs; R3–R6 below), counted as an
//! epoch, never against a restart policy.
//!
//! A stage whose spec has a restart policy is launched with [`link::RESTARTS`]: on a
//! handler fault it publishes what it answered (the faulting request's reply is
//! `HANDLER_PANIC`, passed on like any error), then hands over (state `HANDED_OVER`, the
//! code in `error_code`) instead of faulting, and tells no stage it writes to terminate
//! (`gyre_ring_fault_batch` in `ring.h`). No stage reads `HANDED_OVER` as final: the
//! stages before it keep filling its request ring (back-pressure holds them when it is
//! full), those after it serve what they hold, and the host's view of the chain is not
//! final, so no caller fails.
//!
//! [`StageSupervisor`] is the host's half: R3–R6 of `docs/protocol.md` §8 for one stage.
//! It waits until the stage handed over **and** its execution ended, joins it, adds one to
//! the region's `generation`, and launches a successor on the same region with the same
//! launch spec (handler, link, doorbell); its K0 continues from `h2k_tail`, so it answers
//! exactly the requests its predecessor had not. The region's command is left as it is:
//! a `TERMINATE` a stage before it wrote meanwhile is obeyed by the successor, which
//! drains and stops. The only request a fault costs is the one that faulted.
//!
//! A stage that a stage it writes to stopped for good while it waited is not restarted
//! (its successor would stop at once, L4): the supervisor writes `TERMINATED` with
//! `STAGE_STOPPED` for it.
//!
//! When the policy has no restart left (or the successor fails to launch), the stage's
//! fault becomes final: the supervisor writes `FAULTED` into its state itself (its
//! execution ended, so the host is the line's only writer) and lets the chain stop as
//! after any fault ([`ChainView::state`] tells the stages it fed to terminate and wakes
//! the ones feeding it).

use core::sync::atomic::AtomicBool;
use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gyre_abi::{link, state};
use gyre_core::chain::ChainView;
use gyre_core::{Error, KernelInstance, LaunchSpec, Result, SharedRegion};
use parking_lot::{Mutex, MutexGuard, RwLock};

pub(crate) use crate::lifecycle::{RelaunchCounters, RelaunchKind};
use crate::RestartPolicy;

/// How often the supervisor looks at the stages it relaunches: a quarter of the shortest
/// epoch among them (the gap between an epoch's end and its successor), between
/// [`MIN_TICK`] and [`MAX_TICK`].
const MAX_TICK: Duration = Duration::from_micros(500);
const MIN_TICK: Duration = Duration::from_micros(50);

/// The supervisor's tick for stages with these epochs (µs; 0: none).
fn tick(epochs_us: impl Iterator<Item = u32>) -> Duration {
    epochs_us
        .filter(|&us| us != 0)
        .map(|us| (Duration::from_micros(u64::from(us)) / 4).clamp(MIN_TICK, MAX_TICK))
        .min()
        .unwrap_or(MAX_TICK)
}

/// Every stage's running launch, head first; a relaunch swaps one.
pub(crate) struct Running {
    stages: Vec<RwLock<Arc<dyn KernelInstance>>>,
    regions: Vec<Arc<SharedRegion>>,
    /// What each stage's running launch was launched with: the successors of its epochs
    /// and restarts run it; a reload ([`super::reload`]) replaces it.
    launches: Vec<Mutex<LaunchSpec>>,
    /// Held across each relaunch of a stage, so one happens at a time: a reload holds
    /// it throughout, and the supervisor passes over a stage whose lock is taken.
    handover: Vec<Mutex<()>>,
    /// Whether a stage that handed over is relaunched: set for the stages a supervisor
    /// watches (and during a reload), cleared when it gives one up or stops.
    relaunched: Vec<AtomicBool>,
}

impl Running {
    /// `stages` running over `regions`, launched with `launches`, none relaunched yet
    /// ([`StageSupervisor::start`] marks the ones it watches).
    pub(crate) fn new(
        stages: Vec<Arc<dyn KernelInstance>>,
        regions: Vec<Arc<SharedRegion>>,
        launches: Vec<LaunchSpec>,
    ) -> Self {
        debug_assert_eq!(stages.len(), launches.len());
        Self {
            relaunched: stages.iter().map(|_| AtomicBool::new(false)).collect(),
            handover: stages.iter().map(|_| Mutex::new(())).collect(),
            stages: stages.into_iter().map(RwLock::new).collect(),
            launches: launches.into_iter().map(Mutex::new).collect(),
            regions,
        }
    }

    /// Stage `k`'s region.
    pub(crate) fn region(&self, k: usize) -> Option<&Arc<SharedRegion>> {
        self.regions.get(k)
    }

    /// What stage `k`'s running launch was launched with.
    pub(crate) fn launched(&self, k: usize) -> Option<LaunchSpec> {
        self.launches.get(k).map(|l| l.lock().clone())
    }

    /// Stage `k`'s handover lock, waiting for it (a reload).
    pub(crate) fn hold(&self, k: usize) -> Option<MutexGuard<'_, ()>> {
        self.handover.get(k).map(Mutex::lock)
    }

    /// Launches a successor of stage `k` on its region with `spec`, and installs it
    /// (and `spec`, for the successors after it) under the stage's slot lock, so
    /// [`Running::is_finished`] never sees the predecessor's end with the successor's
    /// state. The caller holds the stage's handover lock and joined the predecessor.
    ///
    /// The export file's telemetry line keeps one writer, as for a lone kernel
    /// (`Lifecycle::launch_successor`): the successor writes it only if its predecessor
    /// did (a CUDA head stage registers the file; the publisher copies the line while no
    /// launch writes it).
    pub(crate) fn launch_successor(
        &self,
        k: usize,
        imp: &dyn gyre_core::Backend,
        spec: &LaunchSpec,
    ) -> Result<()> {
        let (Some(slot), Some(region), Some(launched)) = (
            self.stages.get(k),
            self.regions.get(k),
            self.launches.get(k),
        ) else {
            return Err(Error::InvalidArgument {
                name: "pipeline stage",
                value: k.to_string(),
                reason: "a stage of the running chain",
            });
        };
        let mut slot = slot.write();
        let mut run = spec.clone();
        if !slot.writes_export_telemetry() {
            run.export = None;
        }
        let inst = imp.launch(region.clone(), &run)?;
        *slot = Arc::from(inst);
        *launched.lock() = spec.clone();
        Ok(())
    }

    /// Drops the launch specs' export files: they go with the chain's end (a launch spec
    /// kept for the next relaunch would keep the head's file after it).
    pub(crate) fn end(&self) {
        for l in &self.launches {
            l.lock().export = None;
        }
    }

    /// Whether stage `k` is marked as relaunched after a handover.
    pub(crate) fn watched(&self, k: usize) -> bool {
        self.relaunched.get(k).is_some_and(|r| r.load(Acquire))
    }

    /// Each stage's running launch, head first.
    pub(crate) fn current(&self) -> impl Iterator<Item = Arc<dyn KernelInstance>> + '_ {
        self.stages.iter().map(|s| s.read().clone())
    }

    /// Whether every stage's execution ended for good: a stage that handed over to a
    /// restart has not (its successor follows), even between its end and the launch.
    pub(crate) fn is_finished(&self) -> bool {
        self.stages.iter().enumerate().all(|(k, s)| {
            // The supervisor holds the slot's lock across a successor's launch, and this
            // read guard is held across the state's load: a finished launch seen here is
            // the stage's latest, and the state its own or its successor's K0's.
            let slot = s.read();
            slot.is_finished()
                && !(self.relaunched.get(k).is_some_and(|r| r.load(Acquire))
                    && self
                        .regions
                        .get(k)
                        .is_some_and(|r| r.control().state.load(Acquire) == state::HANDED_OVER))
        })
    }

    pub(crate) fn get(&self, k: usize) -> Option<Arc<dyn KernelInstance>> {
        self.stages.get(k).map(|s| s.read().clone())
    }

    pub(crate) fn watch(&self, k: usize, on: bool) {
        if let Some(r) = self.relaunched.get(k) {
            r.store(on, Release);
        }
    }
}

/// A stage the supervisor relaunches: one with a restart policy (launched with
/// [`link::RESTARTS`]), or one that runs in epochs (its region's `epoch_us`), or both.
pub(crate) struct Restartable {
    pub(crate) stage: usize,
    pub(crate) name: String,
    pub(crate) imp: Arc<dyn gyre_core::Backend>,
    pub(crate) region: Arc<SharedRegion>,
    pub(crate) launch: LaunchSpec,
    pub(crate) policy: Option<RestartPolicy>,
    /// Its epoch, µs (0: none).
    pub(crate) epoch_us: u32,
    pub(crate) counters: Arc<RelaunchCounters>,
}

impl Restartable {
    /// Whether `launch` was given the flag a restart policy relies on.
    fn flagged(&self) -> bool {
        self.launch
            .link
            .as_ref()
            .is_some_and(|l| l.flags & link::RESTARTS != 0)
    }
}

/// Why a stage handed over.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Its epoch ran out (`error_code` 0): relaunched within the tick, not counted
    /// against any policy.
    Epoch,
    /// Its handler faulted with this code: relaunched after the policy's backoff.
    Fault(u32),
}

/// One watched stage and where its restart policy stands.
struct Watched {
    r: Restartable,
    /// Restarts since the policy's window last reset.
    in_window: u32,
    last_launch: Instant,
    /// When the pending restart is due (after its backoff); `None` while it runs.
    due: Option<Instant>,
    /// Its fault became final: no longer watched.
    done: bool,
}

/// The thread relaunching a chain's stages; stopped and joined on drop.
pub(crate) struct StageSupervisor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StageSupervisor {
    /// Starts watching `stages` of the chain `chain`, whose running launches are
    /// `running` (the tick follows the shortest epoch among them). `None` when there is
    /// none to watch.
    ///
    /// # Errors
    ///
    /// [`Error::Launch`] when the thread cannot be spawned; [`Error::InvalidArgument`]
    /// for a stage with a restart policy launched without [`link::RESTARTS`] or the
    /// reverse (a bug: its fault would be final, or nothing would restart it).
    pub(crate) fn start(
        pipeline: &str,
        running: Arc<Running>,
        chain: Arc<ChainView>,
        stages: Vec<Restartable>,
    ) -> Result<Option<Self>> {
        if stages.is_empty() {
            return Ok(None);
        }
        if let Some(r) = stages.iter().find(|r| r.policy.is_some() != r.flagged()) {
            return Err(Error::InvalidArgument {
                name: "pipeline stage link",
                value: r.name.clone(),
                reason: "a stage is launched with link::RESTARTS exactly when it has a \
                         restart policy",
            });
        }
        let every = tick(stages.iter().map(|r| r.epoch_us));
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let name = pipeline.to_owned();
        let now = Instant::now();
        let mut watched: Vec<Watched> = stages
            .into_iter()
            .map(|r| Watched {
                r,
                in_window: 0,
                last_launch: now,
                due: None,
                done: false,
            })
            .collect();
        for w in &watched {
            running.watch(w.r.stage, true);
        }
        let thread = std::thread::Builder::new()
            .name(format!("gyre-stages-{pipeline}"))
            .spawn(move || {
                let _span =
                    tracing::debug_span!("gyre_stage_supervisor", pipeline = %name).entered();
                while !s.load(Acquire) && watched.iter().any(|w| !w.done) {
                    for w in watched.iter_mut().filter(|w| !w.done) {
                        step(w, &running, &chain);
                    }
                    std::thread::park_timeout(every);
                }
                // No restart after this: a stage that handed over stays stopped.
                for w in &watched {
                    running.watch(w.r.stage, false);
                }
            })
            .map_err(|e| Error::Launch {
                backend: "supervisor",
                kernel: pipeline.to_owned(),
                source: gyre_core::Cause::context("spawning the stage supervisor thread", e),
            })?;
        Ok(Some(Self {
            stop,
            thread: Some(thread),
        }))
    }
}

impl Drop for StageSupervisor {
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

/// One look at a watched stage: relaunch it when it handed over and its execution ended
/// (after an epoch at once, after a fault once its backoff passed); make its fault final
/// when the policy says so, or stop it when a stage it feeds stopped for good.
fn step(w: &mut Watched, running: &Running, chain: &ChainView) {
    // A reload of the stage is under way: it relaunches the stage itself.
    let Some(Some(_one)) = running.handover.get(w.r.stage).map(Mutex::try_lock) else {
        return;
    };
    let cb = w.r.region.control();
    let st = cb.state.load(Acquire);
    if state::is_final(st) {
        // It stopped for good by itself (drained, a stale host, a K0 fault): nothing to
        // restart any more.
        w.done = true;
        return;
    }
    if st != state::HANDED_OVER {
        // Running (again): a restart this was waiting for, if any, was made by someone
        // else (a reload relaunches a stage whatever made it hand over), and the next
        // fault starts its own backoff and is checked against the policy.
        w.due = None;
        return;
    }
    let Some(old) = running.get(w.r.stage) else {
        w.done = true;
        return;
    };
    if !old.is_finished() {
        return;
    }
    if chain.feeds_a_final_stage(w.r.stage) {
        // A stage it writes to stopped for good: a successor would stop at once (L4),
        // so none is launched; the stage stops as its predecessor would have.
        stop_behind_final(w, running, &*old, chain);
        return;
    }
    let code = cb.error_code.load(Acquire);
    let why = if code == gyre_abi::error::NONE {
        Why::Epoch
    } else {
        Why::Fault(code)
    };
    if why != Why::Epoch {
        let Some(policy) = w.r.policy else {
            // Only a stage with a policy hands over on a fault (`link::RESTARTS`).
            give_up(w, running, &*old, chain, "no restart policy");
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
                    give_up(w, running, &*old, chain, "no restart left");
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
    relaunch(w, running, chain, &*old, why);
}

/// R3–R6 for one stage: join its ended launch, then launch a successor on its region.
fn relaunch(
    w: &mut Watched,
    running: &Running,
    chain: &ChainView,
    old: &dyn KernelInstance,
    why: Why,
) {
    let cb = w.r.region.control();
    // R3: its execution ended; join it (its resources go, the region stays).
    if let Err(e) = old.join() {
        tracing::warn!(stage = %w.r.name, error = %e, "joining the stage that handed over");
    }
    let which = match why {
        // Epochs end every few milliseconds: no warning each (the backend's launch logs
        // at info).
        Why::Epoch => RelaunchKind::Epoch,
        Why::Fault(code) => {
            tracing::warn!(
                stage = %w.r.name,
                code,
                name = gyre_abi::error::name(code),
                "pipeline stage faulted: restarting it"
            );
            RelaunchKind::Restart
        }
    };
    // The stage's launch spec (a reload's, if one replaced the handler).
    let Some(launch) = running.launched(w.r.stage) else {
        return;
    };
    // R4: the successor's generation (its command is whatever the chain left there).
    cb.generation.fetch_add(1, Release);
    // R6: the successor, on the same region, continuing from h2k_tail; counted before
    // the launch (the successor may answer before `launch` returns), after the
    // generation.
    let counted = w.r.counters.count(which);
    match running.launch_successor(w.r.stage, &*w.r.imp, &launch) {
        Ok(()) => {
            if why != Why::Epoch {
                w.in_window += 1;
                w.last_launch = Instant::now();
            }
        }
        Err(e) => {
            w.r.counters.uncount(counted);
            cb.generation.fetch_sub(1, Release);
            tracing::error!(stage = %w.r.name, error = %e, "the stage's successor did not launch");
            give_up(w, running, old, chain, "its successor did not launch");
        }
    }
}

/// A stage it writes to stopped for good while it waited for its restart: it stops as
/// L4 would have stopped it (`TERMINATED`, `STAGE_STOPPED`, written by the host: its
/// execution ended), and the chain's view tells the rest.
fn stop_behind_final(
    w: &mut Watched,
    running: &Running,
    old: &dyn KernelInstance,
    chain: &ChainView,
) {
    tracing::info!(stage = %w.r.name, "a stage it feeds stopped for good: not restarting it");
    let _ = old.join();
    let cb = w.r.region.control();
    cb.error_code.store(gyre_abi::error::STAGE_STOPPED, Release);
    cb.state.store(state::TERMINATED, Release);
    running.watch(w.r.stage, false);
    w.done = true;
    let _ = chain.state();
}

/// The stage's fault is final: `FAULTED` with its code (the host writes it: the stage's
/// execution ended; `KERNEL_GONE` when it handed over at an epoch's end and no successor
/// launched), then the chain stops as after any fault.
fn give_up(
    w: &mut Watched,
    running: &Running,
    old: &dyn KernelInstance,
    chain: &ChainView,
    why: &str,
) {
    tracing::error!(stage = %w.r.name, why, "pipeline stage faulted: not restarting it");
    // Joining a joined launch is a no-op.
    let _ = old.join();
    let cb = w.r.region.control();
    if cb.error_code.load(Acquire) == gyre_abi::error::NONE {
        cb.error_code.store(gyre_abi::error::KERNEL_GONE, Release);
    }
    cb.state.store(state::FAULTED, Release);
    running.watch(w.r.stage, false);
    w.done = true;
    // Tells the stages it fed to terminate and wakes the ones feeding it (L3, L4).
    let _ = chain.state();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_follows_the_shortest_epoch() {
        let us = Duration::from_micros;
        assert_eq!(
            tick([0, 0].into_iter()),
            MAX_TICK,
            "no epochs: restarts only"
        );
        assert_eq!(tick([1000, 0, 4000].into_iter()), us(250));
        assert_eq!(tick([100].into_iter()), MIN_TICK);
        assert_eq!(tick([1_000_000].into_iter()), MAX_TICK);
    }
}
