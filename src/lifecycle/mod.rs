//! Relaunching a kernel on its own rings: the one mechanism behind
//! [`Kernel::reload`](crate::Kernel::reload) (a new handler), bounded epochs
//! ([`KernelSpec::epoch`](crate::KernelSpec::epoch): display watchdogs) and restarts after
//! a fault ([`KernelSpec::restart`](crate::KernelSpec::restart)).
//!
//! The handover (`docs/protocol.md`, R1..R6): the running kernel stops at a batch
//! boundary (commanded with `HANDOVER`, or by itself when its epoch ran out; a fault is a
//! stop too), writes `HANDED_OVER` (or `FAULTED`) and exits with everything below
//! `h2k_tail` answered and nothing above it touched. The host joins it, writes the command
//! its successor must follow (the user's last: run, pause or terminate) and the next
//! generation into line 0, pushes line 0 to the device (copy strategies), then launches
//! the successor on the same region, whose K0 continues from `h2k_tail`, `k2h_tail` and
//! the telemetry counters. Requests published meanwhile wait in the ring; callers see
//! added latency only.
//!
//! Who does it: a reload on the thread that asked for it; epochs and restarts on the
//! kernel's supervisor thread ([`supervisor`]). One handover at a time (`handover` lock);
//! commands the host writes meanwhile are held back until the successor's command is
//! written ([`CommandGate`]), so nothing overwrites `HANDOVER` before the kernel read it.

mod options;
mod policy;
mod reload;
mod supervisor;
mod watch;

use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use gyre_abi::{command, state};
use gyre_core::bridge::{BridgeAgent, CopyEngine};
use gyre_core::channel::liveness::Liveness;
use gyre_core::command_gate::CommandGate;
use gyre_core::shm::{ExportSource, LifecycleSnapshot};
use gyre_core::{Channel, Error, KernelInstance, LaunchSpec, Result, SharedRegion};
use parking_lot::{Mutex, RwLock};

pub use policy::RestartPolicy;
pub use reload::ReloadFuture;
pub(crate) use supervisor::Supervisor;
pub(crate) use watch::Watcher;

/// The longest a relaunch waits for the kernel to stop at a batch boundary and its
/// execution to end (R2): far past any batch of a healthy kernel.
const HANDOVER_DEADLINE: Duration = Duration::from_secs(30);

/// Where a kernel's rings are, for its successors.
pub(crate) enum Place {
    /// Shared with the kernel (zero copy).
    Shared(Arc<SharedRegion>),
    /// Device-resident behind a copy engine (the copy strategies).
    Resident(Arc<dyn CopyEngine>),
}

/// Why a kernel was relaunched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// [`Kernel::reload`](crate::Kernel::reload): a new handler.
    Reload,
    /// The epoch ran out: the same handler, a fresh launch.
    Epoch,
    /// A fault, under a restart policy.
    Restart,
}

impl Why {
    /// The count it goes to.
    fn kind(self) -> RelaunchKind {
        match self {
            Why::Reload => RelaunchKind::Reload,
            Why::Epoch => RelaunchKind::Epoch,
            Why::Restart => RelaunchKind::Restart,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Why::Reload => "reload",
            Why::Epoch => "epoch",
            Why::Restart => "restart",
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

/// The lifecycle of one kernel's launches. See the [module documentation](self).
pub(crate) struct Lifecycle {
    pub(crate) ch: Arc<Channel>,
    imp: Arc<dyn gyre_core::Backend>,
    place: Place,
    transfer: Option<Arc<BridgeAgent>>,
    /// The running launch (or the last one).
    current: RwLock<Arc<dyn KernelInstance>>,
    /// What `current` was launched with: a successor of an epoch or a restart runs it.
    launched: Mutex<LaunchSpec>,
    /// The host's commands, held back during a handover (R1..R4).
    cmds: CommandGate,
    /// Held for a whole handover: one at a time.
    handover: Mutex<()>,
    /// A handover is between its start and the successor's launch.
    relaunching: AtomicBool,
    /// `ControlBlock::epoch_us` of every launch (0: no epochs).
    epoch_us: u32,
    restart: Option<RestartPolicy>,
    /// Restarts since the policy's window last reset, and when the last launch was.
    restarts_in_window: AtomicU32,
    last_launch: Mutex<Instant>,
    /// Relaunches by kind and their times ([`RelaunchCounters::count`]).
    counts: RelaunchCounters,
    /// Set when the kernel's end was handled: no more relaunches.
    pub(crate) ended: AtomicBool,
    /// Relaunches made elsewhere that count as this kernel's: a pipeline's head stage,
    /// relaunched by the pipeline's stage supervisor (`crate::pipeline`).
    also: OnceLock<(Arc<RelaunchCounters>, u32)>,
}

/// A handover of a pipeline's first stage under way ([`Lifecycle::hold_for_stage`]).
/// Dropping it ends the handover: the host's held-back command goes in (over
/// `HANDOVER`, unless [`HeadHold::hand_to_successor`] wrote it), and waiters look again.
pub(crate) struct HeadHold<'a> {
    life: &'a Lifecycle,
    _one: parking_lot::MutexGuard<'a, ()>,
    handed: bool,
}

impl HeadHold<'_> {
    /// R4: the successor's command (the user's last: run, pause or terminate) and the
    /// next generation, into the stage's control block, before its launch.
    pub(crate) fn hand_to_successor(&mut self) {
        let life = self.life;
        life.cmds.hand_to_successor(|c| {
            life.ch.region().control().generation.fetch_add(1, AcqRel);
            life.write_successor_command(c);
        });
        self.handed = true;
    }
}

impl Drop for HeadHold<'_> {
    fn drop(&mut self) {
        if !self.handed {
            self.life.release_commands();
        }
        self.life.relaunching.store(false, SeqCst);
        self.life.ch.state_waiters().wake_all(&self.life.ch);
    }
}

/// Relaunches by kind, and their times: a [`Lifecycle`]'s own, and each pipeline
/// stage's. Times are written before the counts, counts with release
/// ([`RelaunchCounters::count`]), so a reader that loads a count with acquire sees the
/// times that go with it.
#[derive(Debug, Default)]
pub(crate) struct RelaunchCounters {
    /// Handler reloads (`Kernel::reload`, `Pipeline::reload_stage`), since launch.
    pub(crate) reloads: AtomicU64,
    /// Restarts after a fault, since launch.
    pub(crate) restarts: AtomicU64,
    /// Handovers at the end of an epoch, since launch.
    pub(crate) epochs: AtomicU64,
    /// Wall time (Unix ms) of the last restart; 0 before any.
    pub(crate) last_restart_ms: AtomicU64,
    /// Wall time (Unix ms) of the last relaunch of either kind; 0 before any.
    pub(crate) last_relaunch_ms: AtomicU64,
}

/// Which count of [`RelaunchCounters`] a relaunch goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RelaunchKind {
    Reload,
    Epoch,
    Restart,
}

/// A relaunch counted before its launch ([`RelaunchCounters::count`]), to take back if
/// the launch fails: the last relaunch's and last restart's times before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CountedRelaunch {
    which: RelaunchKind,
    relaunch_ms: u64,
    restart_ms: Option<u64>,
}

impl RelaunchCounters {
    fn counter(&self, which: RelaunchKind) -> &AtomicU64 {
        match which {
            RelaunchKind::Reload => &self.reloads,
            RelaunchKind::Epoch => &self.epochs,
            RelaunchKind::Restart => &self.restarts,
        }
    }

    /// Counts a relaunch before its launch (the successor may answer before the launch
    /// returns): the times first, then the count with release, so a reader that loads
    /// the counts first with acquire sees the times that go with them.
    pub(crate) fn count(&self, which: RelaunchKind) -> CountedRelaunch {
        let now = gyre_core::shm::unix_ms();
        let relaunch_ms = self.last_relaunch_ms.swap(now, Relaxed);
        let restart_ms =
            (which == RelaunchKind::Restart).then(|| self.last_restart_ms.swap(now, Relaxed));
        self.counter(which).fetch_add(1, Release);
        CountedRelaunch {
            which,
            relaunch_ms,
            restart_ms,
        }
    }

    /// Takes back a relaunch whose launch failed.
    pub(crate) fn uncount(&self, c: CountedRelaunch) {
        self.counter(c.which).fetch_sub(1, AcqRel);
        self.last_relaunch_ms.store(c.relaunch_ms, Relaxed);
        if let Some(ms) = c.restart_ms {
            self.last_restart_ms.store(ms, Relaxed);
        }
    }
}

impl Lifecycle {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ch: Arc<Channel>,
        imp: Arc<dyn gyre_core::Backend>,
        place: Place,
        transfer: Option<Arc<BridgeAgent>>,
        instance: Arc<dyn KernelInstance>,
        launched: LaunchSpec,
        epoch_us: u32,
        restart: Option<RestartPolicy>,
    ) -> Self {
        if restart.is_some_and(|p| p.max_restarts() > 0) {
            ch.arm_restart(true);
        }
        Self {
            ch,
            imp,
            place,
            transfer,
            current: RwLock::new(instance),
            launched: Mutex::new(launched),
            cmds: CommandGate::new(command::RUN),
            handover: Mutex::new(()),
            relaunching: AtomicBool::new(false),
            epoch_us,
            restart,
            restarts_in_window: AtomicU32::new(0),
            last_launch: Mutex::new(Instant::now()),
            counts: RelaunchCounters::default(),
            ended: AtomicBool::new(false),
            also: OnceLock::new(),
        }
    }

    /// Counts `c`'s relaunches as this kernel's too, whose launches run in epochs of
    /// `epoch_us` (once; later calls are ignored).
    pub(crate) fn count_relaunches_of(&self, c: Arc<RelaunchCounters>, epoch_us: u32) {
        let _ = self.also.set((c, epoch_us));
    }

    /// The running launch.
    pub(crate) fn current(&self) -> Arc<dyn KernelInstance> {
        self.current.read().clone()
    }

    /// The launch spec of the running kernel.
    pub(crate) fn launched(&self) -> LaunchSpec {
        self.launched.lock().clone()
    }

    /// Whether the kernel has epochs or a restart policy (it needs a supervisor).
    pub(crate) fn supervised(&self) -> bool {
        self.epoch_us != 0 || self.restart.is_some()
    }

    /// Whether the export publisher copies the telemetry line: not while the running
    /// launch writes it itself.
    pub(crate) fn copy_telemetry(&self) -> bool {
        !self.current().writes_export_telemetry()
    }

    /// The counters of [`Relaunches`].
    ///
    /// The counts are loaded first, with acquire: the generation and the times loaded
    /// after them are at least those of the relaunches counted (see
    /// [`Lifecycle::launch_successor`]).
    pub(crate) fn relaunches(&self) -> Relaunches {
        let also = |f: fn(&RelaunchCounters) -> &AtomicU64| {
            self.also.get().map_or(0, |(c, _)| f(c).load(Acquire))
        };
        let own = &self.counts;
        let reloads = own.reloads.load(Acquire) + also(|c| &c.reloads);
        let epochs = own.epochs.load(Acquire) + also(|c| &c.epochs);
        let restarts = own.restarts.load(Acquire) + also(|c| &c.restarts);
        Relaunches {
            generation: self.ch.region().control().generation.load(Acquire),
            reloads,
            epochs,
            restarts,
        }
    }

    /// Writes a host command: at once, or, while a handover waits for the kernel to read
    /// `HANDOVER`, when the successor's command is written.
    pub(crate) fn command(&self, cmd: u32) {
        self.cmds.command(cmd, |c| self.ch.command(c));
    }

    /// No relaunch after this: the kernel's end is being handled. A fault is final from
    /// now on.
    pub(crate) fn end(&self) {
        self.ended.store(true, SeqCst);
        self.ch.arm_restart(false);
        // The export file goes with the kernel's end (its writer's last owner is the
        // publisher, or a device kernel that writes it).
        self.launched.lock().export = None;
    }

    /// Whether the running launch ended without leaving a state anyone relaunches from:
    /// its execution finished, no handover is under way, and its state is neither
    /// `HANDED_OVER` nor a fault a restart follows. (A kernel that wrote a final state is
    /// noticed by `Channel::check_stopped`.)
    pub(crate) fn current_gone(&self) -> bool {
        if self.relaunching.load(SeqCst) {
            return false;
        }
        let inst = self.current();
        if !inst.is_finished() {
            return false;
        }
        // Under a copy strategy the mirror may not show the state the kernel wrote before
        // it exited yet: bring it up first.
        if let Some(t) = &self.transfer {
            t.drain();
        }
        let st = self.ch.kernel_state().0;
        let relaunched = self.relaunching.load(SeqCst) || !Arc::ptr_eq(&inst, &self.current());
        let relaunches_follow =
            st == state::HANDED_OVER || (st == state::FAULTED && self.ch.restart_armed());
        !(relaunched || relaunches_follow)
    }

    /// Builds what `spec` needs (a device handler's compile), so that a failure leaves the
    /// running kernel alone.
    pub(crate) fn prepare(&self, spec: &LaunchSpec) -> Result<()> {
        self.imp.prepare(spec)
    }

    /// Replaces the running kernel's handler with `next` (already prepared): the handover
    /// of the [module documentation](self), on this thread.
    pub(crate) fn reload(&self, next: LaunchSpec) -> Result<()> {
        let _one = self.handover.lock();
        if self.ended.load(SeqCst) || self.ch.is_closed() {
            return Err(self.ch.closed_error());
        }
        self.hand_over(Why::Reload, Some(next))
    }

    /// A pipeline's reload of its first stage (`crate::pipeline`), whose command the
    /// host's lifecycle writes: takes the handover lock, marks a handover under way and
    /// writes `HANDOVER`, holding the host's commands back (R1) until
    /// [`HeadHold::hand_to_successor`] writes the last of them, or the hold ends.
    ///
    /// # Errors
    ///
    /// The kernel's end, or [`Error::Closed`], when it ended or a shutdown began.
    pub(crate) fn hold_for_stage(&self) -> Result<HeadHold<'_>> {
        let guard = self.handover.lock();
        if self.ended.load(SeqCst) || self.ch.is_closed() {
            return Err(self.ch.closed_error());
        }
        self.relaunching.store(true, SeqCst);
        self.cmds.hold(|c| self.ch.command(c));
        Ok(HeadHold {
            life: self,
            _one: guard,
            handed: false,
        })
    }

    /// The supervisor's relaunch: `why` is [`Why::Epoch`] (the kernel handed over by
    /// itself) or [`Why::Restart`] (it faulted). Re-checks the state under the handover
    /// lock; returns whether it relaunched.
    pub(crate) fn relaunch_if(&self, why: Why) -> Result<bool> {
        let _one = self.handover.lock();
        if self.ended.load(SeqCst) {
            return Ok(false);
        }
        let st = self.ch.kernel_state().0;
        let due = match why {
            Why::Epoch => st == state::HANDED_OVER,
            Why::Restart => st == state::FAULTED && self.ch.restart_armed(),
            Why::Reload => false,
        };
        if !due || !self.current().is_finished() {
            return Ok(false);
        }
        self.hand_over(why, None).map(|()| true)
    }

    /// Restarts left under the policy (resetting the count after a healthy window), and
    /// the backoff before the next one; `None` when no restart is left.
    pub(crate) fn next_restart(&self) -> Option<Duration> {
        let p = self.restart?;
        let healthy = self.last_launch.lock().elapsed();
        if p.window().is_some_and(|w| healthy >= w) {
            self.restarts_in_window.store(0, SeqCst);
        }
        let done = self.restarts_in_window.load(SeqCst);
        (done < p.max_restarts()).then(|| p.backoff_for(done))
    }

    /// Gives up restarting: the fault is final (its waiters fail now).
    pub(crate) fn give_up(&self) {
        self.ch.arm_restart(false);
        let _ = self.ch.check_stopped();
    }

    /// The handover, with the handover lock held.
    fn hand_over(&self, why: Why, next: Option<LaunchSpec>) -> Result<()> {
        let _span =
            tracing::info_span!("gyre_relaunch", kernel = %self.ch.name(), why = why.name())
                .entered();
        self.relaunching.store(true, SeqCst);
        let r = self.hand_over_locked(why, next);
        self.relaunching.store(false, SeqCst);
        // Shutdowns waiting for the end look again (a successor runs, or it is gone).
        self.ch.state_waiters().wake_all(&self.ch);
        r
    }

    fn hand_over_locked(&self, why: Why, next: Option<LaunchSpec>) -> Result<()> {
        let old = self.current();
        // R1: ask the kernel to stop at a batch boundary (an epoch's or a fault's kernel
        // stopped by itself).
        if why == Why::Reload {
            self.cmds.hold(|c| self.ch.command(c));
        }
        // R2: wait until it stopped and its execution ended.
        let stopped = self.wait_stopped(&*old);
        let code = match stopped {
            Ok(code) => code,
            Err(e) => {
                self.release_commands();
                return Err(e);
            }
        };
        // R3: join it (its resources go; the region stays).
        if let Err(e) = old.join() {
            tracing::warn!(kernel = %self.ch.name(), error = %e, "joining the kernel handed over");
        }
        if why == Why::Restart {
            tracing::warn!(kernel = %self.ch.name(), code, name = gyre_abi::error::name(code), "kernel faulted: restarting it");
        }
        let previous = self.launched();
        let spec = next.unwrap_or_else(|| previous.clone());
        if why == Why::Restart {
            // Counted now; whether a fault of the successor is restarted is decided when
            // it happens (`next_restart`, `give_up`): disarming here, before the
            // successor's K0 replaced the faulted state, would make that state final.
            self.restarts_in_window.fetch_add(1, SeqCst);
        }
        // R4..R6: the successor's command and generation, pushed, then the launch, counted
        // in between (`launch_successor`).
        let inst = match self.launch_successor(&spec, Some(why)) {
            Ok(i) => i,
            Err(e) if why == Why::Reload => {
                tracing::warn!(kernel = %self.ch.name(), error = %e, "the reloaded handler did not launch: relaunching the previous one");
                match self.launch_successor(&previous, None) {
                    Ok(i) => {
                        self.install(i, previous);
                        return Err(e);
                    }
                    Err(e2) => return Err(self.lost(&e2)),
                }
            }
            Err(e) => return Err(self.lost(&e)),
        };
        self.install(inst, spec);
        if why == Why::Restart {
            // The policy's healthy window runs from the last restart: an epoch's
            // handover or a reload is no fault, and must not keep the count from
            // starting over.
            *self.last_launch.lock() = Instant::now();
        }
        tracing::info!(
            generation = self.ch.region().control().generation.load(Acquire),
            "kernel relaunched"
        );
        Ok(())
    }

    /// R2: polls until the kernel's state is stopped (`HANDED_OVER`, or a fault a restart
    /// follows) and its execution ended; returns its error code. A kernel that ended for
    /// good (terminated, faulted without a restart, lost, unresponsive) is the error its
    /// waiters get.
    ///
    /// Waits at most [`HANDOVER_DEADLINE`]: a kernel whose batch never ends (a handler
    /// that never returns, without a watchdog) fails the relaunch with [`Error::Timeout`]
    /// instead of hanging it; the caller puts the user's command back, so the kernel
    /// serves on if it ever comes back.
    fn wait_stopped(&self, old: &dyn KernelInstance) -> Result<u32> {
        let mut pause = Duration::from_micros(1);
        let start = Instant::now();
        loop {
            if let Some(e) = self.ch.check_stopped() {
                return Err(e);
            }
            let (st, code) = self.ch.kernel_state();
            if state::is_stopped(st) && old.is_finished() {
                return Ok(code);
            }
            if start.elapsed() >= HANDOVER_DEADLINE {
                tracing::error!(kernel = %self.ch.name(), state = st, "the kernel did not stop for its relaunch in time");
                return Err(Error::Timeout {
                    op: "a relaunch waiting for the kernel to stop at a batch boundary",
                    after: HANDOVER_DEADLINE,
                });
            }
            if pause < Duration::from_micros(16) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(pause);
            }
            pause = (pause * 2).min(Duration::from_micros(200));
        }
    }

    /// Writes the command held for the kernel, the user's last `c` (R4, or when a
    /// handover ends early): `TERMINATE` instead once the watchdog declared the kernel
    /// unresponsive. The watchdog writes its own `TERMINATE` past the command gate
    /// (`Channel::mark_unresponsive`), so `c` must never land after it: written, a
    /// fence, then the verdict looked for again, while the watchdog fences between its
    /// verdict and its command. Either this sees the verdict, or its command comes last.
    fn write_successor_command(&self, c: u32) {
        if self.ch.unresponsive().is_some() {
            self.ch.command(command::TERMINATE);
            return;
        }
        self.ch.command(c);
        core::sync::atomic::fence(SeqCst);
        if self.ch.unresponsive().is_some() {
            self.ch.command(command::TERMINATE);
        }
    }

    /// Ends the hold on commands of a handover that stops early: the user's command goes
    /// in (over `HANDOVER`, which the kernel may never read).
    fn release_commands(&self) {
        self.cmds.abandon(|c| self.write_successor_command(c));
    }

    /// R4..R6 for one launch: the user's command and the next generation into line 0,
    /// line 0 pushed to the device (copy strategies), then the launch on the region.
    ///
    /// `count`: the relaunch this launch is counted as ([`Relaunches`]), or `None` (a
    /// reload's fallback to the previous handler). It is counted after the generation and
    /// before the launch: the successor may answer before `launch` returns, and whoever
    /// saw its answer must see it counted; the times are written before the count, which
    /// is published with release, so a reader that loads the counts first (with acquire,
    /// [`Lifecycle::relaunches`]) sees the generation and the times that go with them. A
    /// launch that fails takes its count, times and generation back.
    fn launch_successor(
        &self,
        spec: &LaunchSpec,
        count: Option<Why>,
    ) -> Result<Box<dyn KernelInstance>> {
        self.cmds.hand_to_successor(|c| {
            let cb = self.ch.region().control();
            cb.epoch_us.store(self.epoch_us, Release);
            cb.generation.fetch_add(1, AcqRel);
            self.write_successor_command(c);
        });
        // The generation counts launches: one that fails takes its count back.
        let ungenerate = || {
            self.ch.region().control().generation.fetch_sub(1, AcqRel);
        };
        if let Some(t) = &self.transfer {
            // Synchronous: the successor must not read the old command.
            t.bridge().push().inspect_err(|_| ungenerate())?;
        }
        // The export file's telemetry line keeps one writer: a successor writes it only
        // if its predecessor did (the publisher stops copying while one does, and a
        // successor that cannot falls back to the copy once installed).
        let mut spec = spec.clone();
        if !self.current().writes_export_telemetry() {
            spec.export = None;
        }
        let counted = count.map(|why| self.counts.count(why.kind()));
        match &self.place {
            Place::Shared(r) => self.imp.launch(r.clone(), &spec),
            Place::Resident(m) => self.imp.launch_resident(m.clone(), &spec),
        }
        .inspect_err(|_| {
            if let Some(c) = counted {
                self.counts.uncount(c);
            }
            ungenerate();
        })
    }

    fn install(&self, inst: Box<dyn KernelInstance>, spec: LaunchSpec) {
        *self.current.write() = Arc::from(inst);
        *self.launched.lock() = spec;
    }

    /// No successor could be launched: the kernel is gone, its waiters fail.
    fn lost(&self, e: &Error) -> Error {
        self.ch.arm_restart(false);
        self.ch.mark_lost(format!(
            "no successor could be launched after a handover: {e}"
        ))
    }
}

/// The export publisher's view: the running launch decides who writes the telemetry
/// line; the counters of [`Relaunches`] fill the lifecycle line.
impl ExportSource for Lifecycle {
    fn copy_telemetry(&self) -> bool {
        Lifecycle::copy_telemetry(self)
    }

    fn lifecycle(&self) -> LifecycleSnapshot {
        let r = self.relaunches();
        let (also_restart, also_relaunch, also_epoch_us) =
            self.also.get().map_or((0, 0, 0), |(c, epoch_us)| {
                (
                    c.last_restart_ms.load(Relaxed),
                    c.last_relaunch_ms.load(Relaxed),
                    *epoch_us,
                )
            });
        LifecycleSnapshot {
            seq: 0,
            generation: r.generation,
            reloads: r.reloads,
            epochs: r.epochs,
            restarts: r.restarts,
            last_relaunch_unix_ms: self
                .counts
                .last_relaunch_ms
                .load(Relaxed)
                .max(also_relaunch),
            last_restart_unix_ms: self.counts.last_restart_ms.load(Relaxed).max(also_restart),
            epoch_us: self.epoch_us.max(also_epoch_us),
        }
    }
}

/// The channel's view of the running launch's execution (a device fault), through the
/// lifecycle, so a successor is watched like its predecessor; weak, so it keeps nothing
/// alive.
pub(crate) struct CurrentLiveness(pub(crate) Weak<Lifecycle>);

impl Liveness for CurrentLiveness {
    fn failure(&self) -> Option<String> {
        let life = self.0.upgrade()?;
        let inst = life.current();
        inst.failure()
    }
}
