//! The running stages of a pipeline as one [`KernelInstance`], and the feed of a stage's
//! telemetry export.

use core::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

use gyre_core::shm::{ExportSource, LifecycleSnapshot};
use gyre_core::{Error, KernelInstance, Result};
use parking_lot::Mutex;

use super::restart::{RelaunchCounters, Running, StageSupervisor};

/// Every stage's launch, head first: finished when all are, failed when one is (the
/// first, in stage order), joined stage by stage. The head's lifecycle holds it as its
/// running launch, so a shutdown or the last handle's drop joins the whole chain. A stage
/// with a restart policy or in epochs is relaunched in place by its supervisor
/// ([`super::restart`]).
pub(crate) struct ChainInstance {
    pub(crate) running: Arc<Running>,
    /// Stopped (and joined) before the stages are: no restart after the chain's join.
    pub(crate) supervisor: Mutex<Option<StageSupervisor>>,
}

impl KernelInstance for ChainInstance {
    fn is_finished(&self) -> bool {
        self.running.is_finished()
    }

    /// Stops the stage supervisor, then joins every stage (each after it reached a final
    /// state); the first error is reported, every stage is joined regardless.
    fn join(&self) -> Result<()> {
        drop(self.supervisor.lock().take());
        let mut first: Option<Error> = None;
        for s in self.running.current() {
            if let Err(e) = s.join() {
                first.get_or_insert(e);
            }
        }
        self.running.end();
        first.map_or(Ok(()), Err)
    }

    fn failure(&self) -> Option<String> {
        self.running
            .current()
            .enumerate()
            .find_map(|(k, s)| s.failure().map(|why| format!("stage {k}: {why}")))
    }

    /// The head's: the host publishes requests to the head only.
    fn doorbell(&self) -> Option<Arc<gyre_core::doorbell::Doorbell>> {
        self.running.current().next().and_then(|s| s.doorbell())
    }

    /// The head stage's: it is the one launched with the chain's export (a CUDA kernel
    /// writes that line itself, and the host must then not copy into it too).
    fn writes_export_telemetry(&self) -> bool {
        self.running
            .current()
            .next()
            .is_some_and(|s| s.writes_export_telemetry())
    }
}

/// What a stage's export publisher reads besides its region: the host copies the
/// telemetry line (stages are launched without an export, so no kernel writes it), and
/// the stage's relaunches ([`super::restart`]) and its epoch length (microseconds).
pub(crate) struct StageFeed(pub(crate) Arc<RelaunchCounters>, pub(crate) u32);

impl ExportSource for StageFeed {
    fn copy_telemetry(&self) -> bool {
        true
    }
    fn lifecycle(&self) -> LifecycleSnapshot {
        let c = &self.0;
        // The counts first, with acquire: the times written before them come with them
        // (`RelaunchCounters::count`).
        let (restarts, epochs) = (c.restarts.load(Acquire), c.epochs.load(Acquire));
        let reloads = c.reloads.load(Acquire);
        LifecycleSnapshot {
            generation: u32::try_from(
                restarts
                    .saturating_add(epochs)
                    .saturating_add(reloads)
                    .saturating_add(1),
            )
            .unwrap_or(u32::MAX),
            reloads,
            restarts,
            epochs,
            last_restart_unix_ms: c.last_restart_ms.load(Relaxed),
            last_relaunch_unix_ms: c.last_relaunch_ms.load(Relaxed),
            epoch_us: self.1,
            ..LifecycleSnapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gyre_core::ring::Geometry;
    use gyre_core::SharedRegion;

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

    fn chain(stages: Vec<Arc<dyn KernelInstance>>) -> ChainInstance {
        let g = Geometry::new(8, 128, 4).expect("geometry");
        let regions = stages
            .iter()
            .map(|_| Arc::new(SharedRegion::new_host(g, 0).expect("region")))
            .collect();
        let launches = stages
            .iter()
            .map(|_| crate::KernelSpec::<u64, u64>::echo().launch_spec())
            .collect();
        ChainInstance {
            running: Arc::new(Running::new(stages, regions, launches)),
            supervisor: Mutex::new(None),
        }
    }

    /// The head stage is launched with the chain's export: whether the host copies the
    /// telemetry line follows it (a CUDA head writes the line itself).
    #[test]
    fn the_export_line_has_the_head_stages_writer() {
        assert!(chain(vec![Arc::new(Done(true)), Arc::new(Done(false))]).writes_export_telemetry());
        assert!(!chain(vec![Arc::new(Done(false)), Arc::new(Done(true))]).writes_export_telemetry());
        assert!(chain(vec![Arc::new(Done(false))]).is_finished());
    }
}
