//! The running stages of a pipeline as one [`KernelInstance`], and the feed of a stage's
//! telemetry export.

use std::sync::Arc;

use gyre_core::shm::{ExportSource, LifecycleSnapshot};
use gyre_core::{Error, KernelInstance, Result};

/// Every stage's launch, head first: finished when all are, failed when one is (the
/// first, in stage order), joined stage by stage. The head's lifecycle holds it as its
/// running launch, so a shutdown or the last handle's drop joins the whole chain.
pub(crate) struct ChainInstance {
    pub(crate) stages: Vec<Arc<dyn KernelInstance>>,
}

impl KernelInstance for ChainInstance {
    fn is_finished(&self) -> bool {
        self.stages.iter().all(|s| s.is_finished())
    }

    /// Joins every stage (each after it reached a final state); the first error is
    /// reported, every stage is joined regardless.
    fn join(&self) -> Result<()> {
        let mut first: Option<Error> = None;
        for s in &self.stages {
            if let Err(e) = s.join() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn failure(&self) -> Option<String> {
        self.stages
            .iter()
            .enumerate()
            .find_map(|(k, s)| s.failure().map(|why| format!("stage {k}: {why}")))
    }

    /// The head's: the host publishes requests to the head only.
    fn doorbell(&self) -> Option<Arc<gyre_core::doorbell::Doorbell>> {
        self.stages.first().and_then(|s| s.doorbell())
    }
}

/// What a stage's export publisher reads besides its region: the host copies the
/// telemetry line (stages are launched without an export, so no kernel writes it), and
/// a stage is never relaunched.
pub(crate) struct StageFeed;

impl ExportSource for StageFeed {
    fn copy_telemetry(&self) -> bool {
        true
    }
    fn lifecycle(&self) -> LifecycleSnapshot {
        LifecycleSnapshot {
            generation: 1,
            ..LifecycleSnapshot::default()
        }
    }
}
