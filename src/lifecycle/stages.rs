//! [`Stages`]: the launches of a kernel's stages, each relaunched in place on its own
//! region. A lone kernel is a chain of one stage; a pipeline's stages are its head
//! kernel's, stage 0 first. Who relaunches them, and how, is the rest of
//! [`super`](crate::lifecycle).

use core::sync::atomic::AtomicBool;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::Arc;

use gyre_abi::{link, state};
use gyre_core::bridge::CopyEngine;
use gyre_core::{Error, KernelInstance, LaunchSpec, Result, SharedRegion};
use parking_lot::{Mutex, MutexGuard, RwLock};

use super::policy::RestartPolicy;

/// Where a stage's rings are, for its successors.
pub(crate) enum Place {
    /// Shared with the kernel (zero copy).
    Shared(Arc<SharedRegion>),
    /// Device-resident behind a copy engine (the copy strategies; a lone kernel only).
    Resident(Arc<dyn CopyEngine>),
}

/// Relaunches by kind, and their times: one stage's. Times are written before the counts,
/// counts with release ([`RelaunchCounters::count`]), so a reader that loads a count with
/// acquire sees the times that go with it.
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
    /// Wall time (Unix ms) of the last relaunch of any kind; 0 before any.
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

/// What one stage starts with: its first launch and what relaunches it.
pub(crate) struct StageStart {
    /// For logs and errors: the kernel's name, or `pipeline.k`.
    pub(crate) name: String,
    pub(crate) imp: Arc<dyn gyre_core::Backend>,
    pub(crate) place: Place,
    /// The host's view of the stage's control block (under a copy strategy, the mirror).
    pub(crate) region: Arc<SharedRegion>,
    pub(crate) instance: Arc<dyn KernelInstance>,
    /// What `instance` was launched with (export file, doorbell and link included).
    pub(crate) launched: LaunchSpec,
    /// `ControlBlock::epoch_us` of every launch (0: no epochs).
    pub(crate) epoch_us: u32,
    /// Restarts after a fault (`None`, or a policy without restarts: none).
    pub(crate) restart: Option<RestartPolicy>,
    pub(crate) counts: Arc<RelaunchCounters>,
}

/// One stage: its running launch (or the last one) and what its successors need.
pub(crate) struct Stage {
    pub(crate) name: String,
    pub(crate) imp: Arc<dyn gyre_core::Backend>,
    place: Place,
    /// The host's view of the stage's control block.
    pub(crate) region: Arc<SharedRegion>,
    /// The running launch; replaced under its write lock, which a successor's launch
    /// holds throughout ([`Stage::launch`]).
    current: RwLock<Arc<dyn KernelInstance>>,
    /// What `current` was launched with: the successors of epochs and restarts run it; a
    /// reload replaces it.
    launched: Mutex<LaunchSpec>,
    /// Held across each relaunch of the stage: one at a time. A reload waits for it; the
    /// supervisor passes over a stage whose lock is taken.
    handover: Mutex<()>,
    /// Whether a successor follows when the stage hands over: set while a supervisor
    /// watches it (epochs, restarts: from `Supervisor::start` until its thread ends),
    /// during a reload, and while a late watch follows it ([`super::late`]); a stage in
    /// `HANDED_OVER` that is watched is not finished ([`Stages::is_finished`]).
    watched: AtomicBool,
    /// A late watch follows the stage ([`super::late`]): a reload of it gave up at R2's
    /// deadline, and the stage may have read `HANDOVER` before the release. Set and
    /// cleared under the handover lock; the stage stays watched meanwhile.
    pub(super) late: AtomicBool,
    /// Bumped by each reload that gives up: the late watch starts counting heartbeats
    /// again from the release that went with it.
    pub(super) late_round: AtomicU64,
    pub(crate) epoch_us: u32,
    pub(crate) restart: Option<RestartPolicy>,
    /// Launched with [`link::RESTARTS`]: a handler fault hands over with its code in
    /// `error_code` instead of faulting (a chain's stage under a restart policy).
    pub(crate) faults_hand_over: bool,
    pub(crate) counts: Arc<RelaunchCounters>,
}

impl Stage {
    fn new(s: StageStart) -> Self {
        let restart = s.restart.filter(|p| p.max_restarts() > 0);
        let faults_hand_over = s
            .launched
            .link
            .as_ref()
            .is_some_and(|l| l.flags & link::RESTARTS != 0);
        Self {
            watched: AtomicBool::new(false),
            late: AtomicBool::new(false),
            late_round: AtomicU64::new(0),
            name: s.name,
            imp: s.imp,
            place: s.place,
            region: s.region,
            current: RwLock::new(s.instance),
            launched: Mutex::new(s.launched),
            handover: Mutex::new(()),
            epoch_us: s.epoch_us,
            restart,
            faults_hand_over,
            counts: s.counts,
        }
    }

    /// The running launch.
    pub(crate) fn current(&self) -> Arc<dyn KernelInstance> {
        self.current.read().clone()
    }

    /// What the running launch was launched with.
    pub(crate) fn launched(&self) -> LaunchSpec {
        self.launched.lock().clone()
    }

    /// Whether a supervisor relaunches the stage when it stops by itself.
    pub(crate) fn supervised(&self) -> bool {
        self.epoch_us != 0 || self.restart.is_some()
    }

    /// The stage's handover lock, waiting for it (a reload).
    pub(crate) fn hold(&self) -> MutexGuard<'_, ()> {
        self.handover.lock()
    }

    /// The stage's handover lock, unless a relaunch holds it (the supervisor).
    pub(crate) fn try_hold(&self) -> Option<MutexGuard<'_, ()>> {
        self.handover.try_lock()
    }

    pub(crate) fn watched(&self) -> bool {
        self.watched.load(Acquire)
    }

    pub(crate) fn watch(&self, on: bool) {
        self.watched.store(on, Release);
    }

    /// R6: launches a successor on the stage's rings with `spec` and installs it (and
    /// `spec`, for the successors after it) under the running launch's write lock, so
    /// [`Stages::is_finished`] never sees the predecessor's end with the successor's
    /// state. The caller holds the handover lock and joined the predecessor.
    ///
    /// The export file's telemetry line keeps one writer: a successor writes it only if
    /// its predecessor did (the publisher stops copying while one does, and a successor
    /// that cannot falls back to the copy once installed).
    ///
    /// Readers of the running launch (the channel's liveness check, the export
    /// publisher, `Kernel::cost`) wait for the launch meanwhile: on purpose, so none
    /// sees the predecessor, finished, after its successor started. Nothing under the
    /// lock takes it again.
    pub(crate) fn launch(&self, spec: &LaunchSpec) -> Result<()> {
        let mut slot = self.current.write();
        let mut run = spec.clone();
        if !slot.writes_export_telemetry() {
            run.export = None;
        }
        let inst = match &self.place {
            Place::Shared(r) => self.imp.launch(r.clone(), &run),
            Place::Resident(m) => self.imp.launch_resident(m.clone(), &run),
        }?;
        *slot = Arc::from(inst);
        *self.launched.lock() = spec.clone();
        Ok(())
    }

    /// Whether the stage's execution ended for good: a stage that handed over and is
    /// watched has not (its successor follows), even between its end and the launch.
    fn is_finished(&self) -> bool {
        // A successor's launch holds the slot's write lock, and this read guard is held
        // across the state's load: a finished launch seen here is the stage's latest,
        // and the state its own or its successor's K0's.
        let slot = self.current.read();
        slot.is_finished()
            && !(self.watched() && self.region.control().state.load(Acquire) == state::HANDED_OVER)
    }
}

/// Every stage of a kernel, head first: as a [`KernelInstance`], the chain's view
/// (finished when all are, failed when one is, joined stage by stage).
pub(crate) struct Stages(Vec<Stage>);

impl Stages {
    pub(crate) fn new(stages: Vec<StageStart>) -> Self {
        debug_assert!(!stages.is_empty(), "a kernel has at least one stage");
        let stages: Vec<Stage> = stages.into_iter().map(Stage::new).collect();
        // A chain's stage with restarts is launched with `link::RESTARTS` (its fault
        // hands over instead of stopping the chain), and only such a stage: else its
        // fault would be final, or nothing would relaunch it.
        debug_assert!(
            stages.len() == 1
                || stages
                    .iter()
                    .all(|s| s.restart.is_some() == s.faults_hand_over),
            "a chain's stage is launched with link::RESTARTS exactly when it has restarts"
        );
        Self(stages)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn get(&self, k: usize) -> Result<&Stage> {
        self.0.get(k).ok_or_else(|| Error::InvalidArgument {
            name: "pipeline stage",
            value: k.to_string(),
            reason: "below Pipeline::stages()",
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Stage> {
        self.0.iter()
    }

    /// The first stage: the one the host writes requests and commands to.
    pub(crate) fn head(&self) -> &Stage {
        // The constructor's invariant: at least one stage.
        debug_assert!(!self.0.is_empty());
        &self.0[0]
    }

    /// The sum of the stages' generations: it moves with every relaunch of any stage.
    pub(crate) fn generations(&self) -> u64 {
        self.0
            .iter()
            .map(|s| u64::from(s.region.control().generation.load(Acquire)))
            .sum()
    }

    /// Drops the launch specs' export files: they go with the kernel's end (a launch
    /// spec kept for the next relaunch would keep the file after it).
    pub(crate) fn end(&self) {
        for s in &self.0 {
            s.launched.lock().export = None;
        }
    }
}

impl KernelInstance for Stages {
    fn is_finished(&self) -> bool {
        self.0.iter().all(Stage::is_finished)
    }

    /// Joins every stage (each after it reached a final state); the first error is
    /// reported, every stage is joined regardless. The caller stopped the supervisor.
    fn join(&self) -> Result<()> {
        let mut first: Option<Error> = None;
        for s in &self.0 {
            if let Err(e) = s.current().join() {
                first.get_or_insert(e);
            }
        }
        self.end();
        first.map_or(Ok(()), Err)
    }

    fn failure(&self) -> Option<String> {
        let lone = self.0.len() == 1;
        self.0.iter().enumerate().find_map(|(k, s)| {
            let why = s.current().failure()?;
            Some(if lone {
                why
            } else {
                format!("stage {k}: {why}")
            })
        })
    }

    /// The head's: the host publishes requests to the head only.
    fn doorbell(&self) -> Option<Arc<gyre_core::doorbell::Doorbell>> {
        self.head().current().doorbell()
    }

    /// The head's: its replies are the host's.
    fn reply_bell(&self) -> Option<Arc<gyre_core::channel::bell::ReplyBell>> {
        self.head().current().reply_bell()
    }

    /// The head stage's: it is the one launched with the kernel's export (a CUDA kernel
    /// writes that line itself, and the host must then not copy into it too).
    fn writes_export_telemetry(&self) -> bool {
        self.head().current().writes_export_telemetry()
    }

    fn cost(&self) -> Option<gyre_core::cost::DeviceCost> {
        self.head().current().cost()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gyre_core::ring::Geometry;

    /// A finished launch that writes its export line itself, or not.
    struct Done(bool);

    impl KernelInstance for Done {
        fn is_finished(&self) -> bool {
            true
        }
        fn join(&self) -> Result<()> {
            Ok(())
        }
        fn writes_export_telemetry(&self) -> bool {
            self.0
        }
    }

    fn stages(instances: Vec<Arc<dyn KernelInstance>>, epoch_us: u32) -> Stages {
        let g = Geometry::new(8, 128, 4).expect("geometry");
        let imp: Arc<dyn gyre_core::Backend> = Arc::new(gyre_cpu::CpuBackend::new());
        Stages::new(
            instances
                .into_iter()
                .enumerate()
                .map(|(k, instance)| {
                    let region = Arc::new(SharedRegion::new_host(g, 0).expect("region"));
                    StageStart {
                        name: format!("s.{k}"),
                        imp: imp.clone(),
                        place: Place::Shared(region.clone()),
                        region,
                        instance,
                        launched: crate::KernelSpec::<u64, u64>::echo().launch_spec(),
                        epoch_us,
                        restart: None,
                        counts: Arc::default(),
                    }
                })
                .collect(),
        )
    }

    /// The head stage is launched with the chain's export: whether the host copies the
    /// telemetry line follows it (a CUDA head writes the line itself).
    #[test]
    fn the_export_line_has_the_head_stages_writer() {
        assert!(
            stages(vec![Arc::new(Done(true)), Arc::new(Done(false))], 0).writes_export_telemetry()
        );
        assert!(
            !stages(vec![Arc::new(Done(false)), Arc::new(Done(true))], 0).writes_export_telemetry()
        );
        assert!(stages(vec![Arc::new(Done(false))], 0).is_finished());
    }

    /// A watched stage that handed over is not finished: its successor follows.
    #[test]
    fn a_watched_stage_that_handed_over_is_not_finished() {
        let s = stages(vec![Arc::new(Done(false)), Arc::new(Done(false))], 1000);
        assert!(s.is_finished(), "nothing watches it yet");
        s.get(1).expect("stage").watch(true);
        s.get(1)
            .expect("stage")
            .region
            .control()
            .state
            .store(state::HANDED_OVER, Release);
        assert!(!s.is_finished());
        s.get(1).expect("stage").watch(false);
        assert!(s.is_finished());
    }
}
