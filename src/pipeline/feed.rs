//! The feed of a stage's telemetry export: what its publisher reads besides its region.

use core::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

use gyre_core::shm::{ExportSource, LifecycleSnapshot};

use crate::lifecycle::RelaunchCounters;

/// What a stage's export publisher reads besides its region: the host copies the
/// telemetry line (stages are launched without an export, so no kernel writes it), and
/// the stage's relaunches (`crate::lifecycle`) and its epoch length (microseconds).
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
