//! Relaunching a kernel's stages on their own rings: the one engine behind
//! [`Kernel::reload`](crate::Kernel::reload) and
//! [`Pipeline::reload_stage`](crate::pipeline::Pipeline::reload_stage) (a new handler),
//! bounded epochs ([`KernelSpec::epoch`](crate::KernelSpec::epoch): display watchdogs) and
//! restarts after a fault ([`KernelSpec::restart`](crate::KernelSpec::restart)), for a lone
//! kernel, a loan kernel and each stage of a pipeline alike: a lone kernel is a chain of
//! one stage ([`Stages`]).
//!
//! The handover (`docs/protocol.md` §8, R1..R6; [`handover`]): the running stage stops
//! at a batch boundary (commanded with `HANDOVER`, or by itself when its epoch ran out; a
//! fault is a stop too), writes `HANDED_OVER` (or `FAULTED`) and exits with everything
//! below `h2k_tail` answered and nothing above it touched. The host joins it, writes the
//! command its successor must follow and the next generation into line 0, pushes line 0
//! to the device (copy strategies), then launches the successor on the same region, whose
//! K0 continues from `h2k_tail`, `k2h_tail` and the telemetry counters. Requests published
//! meanwhile wait in the ring (the stages before it keep filling it until back-pressure
//! holds them); callers see added latency only.
//!
//! Who writes a stage's command: the head's is the host's (run, pause, terminate),
//! held back during its handover until the successor's is written ([`CommandGate`]), so
//! nothing overwrites `HANDOVER` before the kernel read it; a later stage's is written
//! only by the stage feeding it and the host's chain view (`TERMINATE`), so a reload
//! moves it from `RUN` to `HANDOVER` and back by compare-and-swap and leaves a
//! `TERMINATE` written meanwhile for the successor, which drains and stops.
//!
//! How a fault stops a stage: a lone kernel's handler fault is `FAULTED`, which the
//! channel does not read as final while a restart follows (`Channel::arm_restart`); a
//! chain's stage under a restart policy is launched with `link::RESTARTS` and hands over
//! with the code in `error_code` instead, so no stage around it reads its fault as final
//! (`docs/pipelines.md`, "Relaunching a stage").
//!
//! Who does it: a reload on the thread that asked for it; epochs and restarts on the
//! kernel's one supervisor thread ([`supervisor`]), for every stage that has them; the
//! resume of an unsupervised stage that read the `HANDOVER` of a reload that gave up, on
//! a thread that follows it ([`late`]). One relaunch of a stage at a time (its
//! `handover` lock).

mod handover;
mod late;
mod options;
mod policy;
mod reload;
mod stages;
mod supervisor;
mod watch;

use core::sync::atomic::AtomicBool;
use core::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::{Arc, Weak};
use std::time::Duration;

use gyre_abi::{command, state};
use gyre_core::bridge::BridgeAgent;
use gyre_core::channel::liveness::Liveness;
use gyre_core::command_gate::CommandGate;
use gyre_core::shm::{ExportSource, LifecycleSnapshot};
use gyre_core::{Channel, KernelInstance, LaunchSpec};

pub use policy::RestartPolicy;
pub use reload::ReloadFuture;
pub(crate) use stages::{Place, RelaunchCounters, Stage, StageStart, Stages};
pub(crate) use supervisor::Supervisor;
pub(crate) use watch::Watcher;

/// The longest a relaunch waits for a stage to stop at a batch boundary and its
/// execution to end (R2): far past any batch of a healthy kernel.
const HANDOVER_DEADLINE: Duration = Duration::from_secs(30);

/// Why a kernel was relaunched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// [`Kernel::reload`](crate::Kernel::reload): a new handler.
    Reload,
    /// The epoch ran out: the same handler, a fresh launch.
    Epoch,
    /// A fault, under a restart policy.
    Restart,
    /// The handler it ran, relaunched after a reload gave up waiting for the stage
    /// (R2's deadline) while the stage was reading its `HANDOVER` ([`late`]).
    Resume,
}

impl Why {
    /// The count it goes to: none for a resume, which only the generation counts (the
    /// reload it completes failed, and nothing was new).
    fn kind(self) -> Option<stages::RelaunchKind> {
        match self {
            Why::Reload => Some(stages::RelaunchKind::Reload),
            Why::Epoch => Some(stages::RelaunchKind::Epoch),
            Why::Restart => Some(stages::RelaunchKind::Restart),
            Why::Resume => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Why::Reload => "reload",
            Why::Epoch => "epoch",
            Why::Restart => "restart",
            Why::Resume => "resume",
        }
    }
}

/// How often a kernel was relaunched on its rings, by reason (see
/// [`Kernel::relaunches`](crate::Kernel::relaunches)); also in the telemetry export file
/// and `gyre top`.
///
/// # Examples
///
/// ```
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// let k = rt.launch(gyre::KernelSpec::from_fn("inc", |x: u32| x + 1))?;
/// k.reload_blocking(gyre::KernelSpec::from_fn("inc", |x: u32| x + 2))?;
/// let r = k.relaunches();
/// assert_eq!((r.generation, r.reloads, r.epochs, r.restarts), (2, 1, 0, 0));
/// # Ok::<(), gyre::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relaunches {
    /// Launches on the kernel's rings so far: 1 + every relaunch.
    pub generation: u32,
    /// Handler reloads.
    pub reloads: u64,
    /// Handovers at the end of an epoch.
    pub epochs: u64,
    /// Restarts after a fault.
    pub restarts: u64,
}

/// The lifecycle of one kernel's launches: its [`Stages`] (one for a lone kernel, a
/// pipeline's in order) and the host's side of their handovers. See the
/// [module documentation](self).
pub(crate) struct Lifecycle {
    pub(crate) ch: Arc<Channel>,
    /// Every stage's running launch (or the last one), head first.
    pub(crate) stages: Arc<Stages>,
    /// The head's bridge under a copy strategy (a lone kernel only).
    transfer: Option<Arc<BridgeAgent>>,
    /// The host's commands to the head stage, held back during its handover (R1..R4).
    cmds: CommandGate,
    /// Set when the kernel's end was handled: no more relaunches.
    pub(crate) ended: AtomicBool,
    /// This lifecycle, for the threads it starts (weak: they keep nothing alive).
    me: Weak<Lifecycle>,
    /// The late watches' threads ([`late`]), joined at the kernel's end.
    late: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Lifecycle {
    pub(crate) fn new(
        ch: Arc<Channel>,
        stages: Stages,
        transfer: Option<Arc<BridgeAgent>>,
    ) -> Arc<Self> {
        let head = stages.head();
        if head.restart.is_some() && !head.faults_hand_over {
            // A lone kernel's fault is `FAULTED`, not final while a restart follows.
            ch.arm_restart(true);
        }
        Arc::new_cyclic(|me| Self {
            ch,
            stages: Arc::new(stages),
            transfer,
            cmds: CommandGate::new(command::RUN),
            ended: AtomicBool::new(false),
            me: me.clone(),
            late: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// Every stage's running launch as one: what a shutdown joins.
    pub(crate) fn current(&self) -> Arc<dyn KernelInstance> {
        self.stages.clone()
    }

    /// The launch spec of the head stage's running launch.
    pub(crate) fn launched(&self) -> LaunchSpec {
        self.stages.head().launched()
    }

    /// Whether the export publisher copies the telemetry line: not while the running
    /// launch writes it itself.
    pub(crate) fn copy_telemetry(&self) -> bool {
        !self.stages.writes_export_telemetry()
    }

    /// The head stage's relaunches: the kernel's ([`Relaunches`]).
    pub(crate) fn relaunches(&self) -> Relaunches {
        self.stage_relaunches(self.stages.head())
    }

    /// Stage `s`'s relaunches.
    ///
    /// The counts are loaded first, with acquire: the generation and the times loaded
    /// after them are at least those of the relaunches counted (see
    /// [`Lifecycle::launch_successor`]).
    pub(crate) fn stage_relaunches(&self, s: &Stage) -> Relaunches {
        let c = &s.counts;
        let (reloads, epochs) = (c.reloads.load(Acquire), c.epochs.load(Acquire));
        let restarts = c.restarts.load(Acquire);
        Relaunches {
            generation: s.region.control().generation.load(Acquire),
            reloads,
            epochs,
            restarts,
        }
    }

    /// Writes a host command: at once, or, while a handover of the head waits for it to
    /// read `HANDOVER`, when the successor's command is written.
    pub(crate) fn command(&self, cmd: u32) {
        self.cmds.command(cmd, |c| self.ch.command(c));
    }

    /// No relaunch after this: the kernel's end is being handled. A fault is final from
    /// now on.
    pub(crate) fn end(&self) {
        self.ended.store(true, SeqCst);
        self.stop_late();
        self.ch.arm_restart(false);
        // The export files go with the kernel's end (their writer's last owner is the
        // publisher, or a device kernel that writes it).
        self.stages.end();
    }

    /// Whether the running launches ended without leaving a state anyone relaunches
    /// from: every stage's execution finished, none handed over to a successor, and the
    /// kernel's state is not a fault a restart follows. (A kernel that wrote a final
    /// state is noticed by `Channel::check_stopped`.)
    pub(crate) fn current_gone(&self) -> bool {
        let before = self.stages.generations();
        if !self.stages.is_finished() {
            return false;
        }
        // Under a copy strategy the mirror may not show the state the kernel wrote before
        // it exited yet: bring it up first.
        if let Some(t) = &self.transfer {
            t.drain();
        }
        let st = self.ch.kernel_state().0;
        let relaunches_follow =
            st == state::HANDED_OVER || (st == state::FAULTED && self.ch.restart_armed());
        // A relaunch between the two looks is seen in the generations, or in a launch
        // that has not finished.
        !relaunches_follow && self.stages.is_finished() && self.stages.generations() == before
    }
}

/// The export publisher's view: the running launch decides who writes the telemetry
/// line; the head stage's counters of [`Relaunches`] fill the lifecycle line.
impl ExportSource for Lifecycle {
    fn copy_telemetry(&self) -> bool {
        Lifecycle::copy_telemetry(self)
    }

    fn lifecycle(&self) -> LifecycleSnapshot {
        let r = self.relaunches();
        let head = self.stages.head();
        LifecycleSnapshot {
            seq: 0,
            generation: r.generation,
            reloads: r.reloads,
            epochs: r.epochs,
            restarts: r.restarts,
            last_relaunch_unix_ms: head.counts.last_relaunch_ms.load(Relaxed),
            last_restart_unix_ms: head.counts.last_restart_ms.load(Relaxed),
            epoch_us: head.epoch_us,
        }
    }
}

/// The channel's view of the running launches' execution (a device fault), through the
/// lifecycle, so a successor is watched like its predecessor; weak, so it keeps nothing
/// alive.
pub(crate) struct CurrentLiveness(pub(crate) Weak<Lifecycle>);

impl Liveness for CurrentLiveness {
    fn failure(&self) -> Option<String> {
        let life = self.0.upgrade()?;
        KernelInstance::failure(&*life.stages)
    }
}
