//! What a ring kernel pays for on a PCIe GPU, counted: the cost model of checked rings.
//!
//! On a discrete GPU the rings of the zero-copy strategy are host memory the kernel reads
//! over PCIe: every *read wave* (loads issued together, then used) costs one round trip of
//! about a microsecond, and so does every system-scope fence (`docs/protocol.md`,
//! "Checked slots"). The CPU backend can run a kernel's loop as if its rings were remote
//! (`gyre_cpu::CpuBackend::cost_model`): the C11 port of `ring.h` counts those events in a
//! [`CostCounters`] and, when asked, charges an emulated latency for each, so the budget of
//! the fast path is measured and tested without a GPU.
//!
//! # Examples
//!
//! ```
//! use gyre_core::cost::CostCounters;
//! let c = CostCounters::new(std::time::Duration::from_nanos(1000));
//! assert_eq!(c.emulated(), std::time::Duration::from_nanos(1000));
//! let s = c.snapshot();
//! assert_eq!((s.waves, s.fences, s.batches), (0, 0, 0));
//! ```

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The counters a kernel's loop writes (its thread alone, relaxed) and anyone reads.
///
/// Invariant: the layout is the C port's `gyre_c11_cost` (`cuda/include/gyre/port_c11.h`):
/// eight `u64` words in this order; the kernel writes every field but `emulate_ns`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct CostCounters {
    waves: AtomicU64,
    fences: AtomicU64,
    loads: AtomicU64,
    stores: AtomicU64,
    telemetry_writes: AtomicU64,
    batches: AtomicU64,
    empty_polls: AtomicU64,
    emulate_ns: AtomicU64,
}

/// A copy of [`CostCounters`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceCost {
    /// Read waves: loads of remote memory issued together (one round trip each).
    pub waves: u64,
    /// System-scope fences (about one round trip each).
    pub fences: u64,
    /// 16-byte units the waves loaded.
    pub loads: u64,
    /// 16-byte units written to remote memory by the reply store waves.
    pub stores: u64,
    /// Writes of the region's telemetry line.
    pub telemetry_writes: u64,
    /// Batches answered.
    pub batches: u64,
    /// Polls that found nothing.
    pub empty_polls: u64,
}

impl DeviceCost {
    /// Read waves per batch answered (`None` before the first batch).
    pub fn waves_per_batch(&self) -> Option<f64> {
        (self.batches > 0).then(|| self.waves as f64 / self.batches as f64)
    }
    /// Fences per batch answered (`None` before the first batch).
    pub fn fences_per_batch(&self) -> Option<f64> {
        (self.batches > 0).then(|| self.fences as f64 / self.batches as f64)
    }
    /// What happened between `earlier` and this snapshot.
    pub fn since(&self, earlier: &DeviceCost) -> DeviceCost {
        DeviceCost {
            waves: self.waves.saturating_sub(earlier.waves),
            fences: self.fences.saturating_sub(earlier.fences),
            loads: self.loads.saturating_sub(earlier.loads),
            stores: self.stores.saturating_sub(earlier.stores),
            telemetry_writes: self
                .telemetry_writes
                .saturating_sub(earlier.telemetry_writes),
            batches: self.batches.saturating_sub(earlier.batches),
            empty_polls: self.empty_polls.saturating_sub(earlier.empty_polls),
        }
    }
}

impl CostCounters {
    /// Zeroed counters that charge `emulate` per wave and per fence (zero: count only).
    pub fn new(emulate: Duration) -> Self {
        let c = Self::default();
        c.emulate_ns.store(
            u64::try_from(emulate.as_nanos()).unwrap_or(u64::MAX),
            Relaxed,
        );
        c
    }

    /// The latency charged per wave and per fence.
    pub fn emulated(&self) -> Duration {
        Duration::from_nanos(self.emulate_ns.load(Relaxed))
    }

    /// The counts so far.
    pub fn snapshot(&self) -> DeviceCost {
        DeviceCost {
            waves: self.waves.load(Relaxed),
            fences: self.fences.load(Relaxed),
            loads: self.loads.load(Relaxed),
            stores: self.stores.load(Relaxed),
            telemetry_writes: self.telemetry_writes.load(Relaxed),
            batches: self.batches.load(Relaxed),
            empty_polls: self.empty_polls.load(Relaxed),
        }
    }
}

/// The most scratch a checked kernel stages its waves in (requests and replies).
pub const SCRATCH_LIMIT: usize = 4 << 20;
/// Bytes of scratch before the staged slots (the host line's copy, padded).
pub const SCRATCH_STAGES: usize = 128;

/// Slots one wave of a checked kernel stages: its batch, at most what [`SCRATCH_LIMIT`]
/// holds twice (requests and replies), at least one. The C port's
/// `gyre_c11_scratch_slots` is the same rule.
pub fn scratch_slots(batch: u32, slot_size: usize) -> u32 {
    let fit = (SCRATCH_LIMIT - SCRATCH_STAGES) / (2 * slot_size.max(1));
    (batch as usize).min(fit).max(1) as u32
}

/// Scratch bytes for [`scratch_slots`] slots of `slot_size` bytes (`GYRE_SCRATCH_BYTES`).
pub fn scratch_bytes(batch: u32, slot_size: usize) -> usize {
    SCRATCH_STAGES + 2 * scratch_slots(batch, slot_size) as usize * slot_size
}
