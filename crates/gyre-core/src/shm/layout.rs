//! The export file's byte layout (320 bytes: header, control line, telemetry line,
//! lifecycle line, loan-pool line) and the sequence locks of the lines the host writes.

use core::sync::atomic::Ordering::Relaxed;
use core::sync::atomic::{AtomicU32, AtomicU64};

use gyre_abi::TelemetryBuffer;

use crate::loan::LoanStats;
use crate::seqlock;

/// The first eight bytes of every export file.
pub const EXPORT_MAGIC: [u8; 8] = *b"GYRETLM1";
/// Version of the export layout; bumped on any change to [`TelemetryExport`].
pub const EXPORT_VERSION: u32 = 2;
/// Size of an export file in bytes.
pub const EXPORT_SIZE: usize = 320;
/// Bytes of a service or kernel name kept in the header (longer names are cut; the
/// path holds the full name).
pub const NAME_BYTES: usize = 16;

/// Bytes 0..64: written once, before the file gets its name; never changed after.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportHeader {
    /// [`EXPORT_MAGIC`].
    pub magic: [u8; 8],
    /// [`EXPORT_VERSION`].
    pub version: u32,
    /// `gyre_abi::ABI_VERSION` of the writer (layout of the telemetry line).
    pub abi_version: u32,
    /// Total file size, [`EXPORT_SIZE`].
    pub size: u32,
    /// Process id of the writer.
    pub pid: u32,
    /// When the file was created, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// Service name, UTF-8, NUL-padded (cut to 16 bytes).
    pub service: [u8; NAME_BYTES],
    /// Kernel name, UTF-8, NUL-padded (cut to 16 bytes).
    pub kernel: [u8; NAME_BYTES],
}

/// Bytes 64..128: the kernel's state and ring indices, copied by the publisher under a
/// sequence lock (`seq` odd while writing; same protocol as the telemetry line).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ExportControl {
    /// Sequence lock word.
    pub seq: AtomicU32,
    /// `gyre_abi::state` value.
    pub state: AtomicU32,
    /// `gyre_abi::error` code.
    pub error_code: AtomicU32,
    /// Ring capacity (slots).
    pub capacity: AtomicU32,
    /// Requests published by the host.
    pub h2k_head: AtomicU64,
    /// Requests consumed by the kernel.
    pub h2k_tail: AtomicU64,
    /// Replies published by the kernel.
    pub k2h_head: AtomicU64,
    /// Replies consumed by the host.
    pub k2h_tail: AtomicU64,
    /// Wall time (Unix ms) at which the publisher last saw the kernel heartbeat change.
    pub heartbeat_unix_ms: AtomicU64,
    /// Wall time (Unix ms) of this copy.
    pub published_unix_ms: AtomicU64,
}

/// A plain copy of an [`ExportControl`] taken by a consistent read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ControlSnapshot {
    /// Sequence value the copy was taken at (even).
    pub seq: u32,
    /// `gyre_abi::state` value.
    pub state: u32,
    /// `gyre_abi::error` code.
    pub error_code: u32,
    /// Ring capacity.
    pub capacity: u32,
    /// Requests published by the host.
    pub h2k_head: u64,
    /// Requests consumed by the kernel.
    pub h2k_tail: u64,
    /// Replies published by the kernel.
    pub k2h_head: u64,
    /// Replies consumed by the host.
    pub k2h_tail: u64,
    /// Wall time (Unix ms) the kernel heartbeat last changed, as seen by the publisher.
    pub heartbeat_unix_ms: u64,
    /// Wall time (Unix ms) of the copy.
    pub published_unix_ms: u64,
}

impl ControlSnapshot {
    /// Requests published but not yet taken by the kernel.
    pub fn requests_queued(&self) -> u64 {
        self.h2k_head.saturating_sub(self.h2k_tail)
    }
    /// Replies published but not yet taken by the host.
    pub fn replies_queued(&self) -> u64 {
        self.k2h_head.saturating_sub(self.k2h_tail)
    }
}

/// Bytes 192..256 (layout version 2): the kernel's relaunches (reloads, epochs,
/// restarts; see `gyre::telemetry::Relaunches`), written by the publisher under a sequence lock.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ExportLifecycle {
    /// Sequence lock word.
    pub seq: AtomicU32,
    /// Launches of the kernel on its rings so far (1 before any relaunch): the
    /// `generation` word of the control block.
    pub generation: AtomicU32,
    /// Handler reloads.
    pub reloads: AtomicU64,
    /// Bounded-epoch handovers.
    pub epochs: AtomicU64,
    /// Restarts after a fault.
    pub restarts: AtomicU64,
    /// Wall time (Unix ms) of the last relaunch of any kind; 0 before the first.
    pub last_relaunch_unix_ms: AtomicU64,
    /// Wall time (Unix ms) of the last restart after a fault; 0 before the first.
    pub last_restart_unix_ms: AtomicU64,
    /// The epoch length the kernel runs under, microseconds (0: no epochs).
    pub epoch_us: AtomicU32,
    /// Zero; room for later fields.
    pub reserved: [u32; 3],
}

/// A plain copy of an [`ExportLifecycle`] taken by a consistent read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LifecycleSnapshot {
    /// Sequence value the copy was taken at (even).
    pub seq: u32,
    /// Launches so far (1 before any relaunch).
    pub generation: u32,
    /// Handler reloads.
    pub reloads: u64,
    /// Bounded-epoch handovers.
    pub epochs: u64,
    /// Restarts after a fault.
    pub restarts: u64,
    /// Wall time (Unix ms) of the last relaunch; 0 before the first.
    pub last_relaunch_unix_ms: u64,
    /// Wall time (Unix ms) of the last restart; 0 before the first.
    pub last_restart_unix_ms: u64,
    /// Epoch length, microseconds (0: no epochs).
    pub epoch_us: u32,
}

/// Bytes 256..320 (layout version 2): the kernel's loan pool (`gyre::loan::LoanKernel`), all
/// zero for a kernel without one; written by the publisher under a sequence lock. Byte
/// figures are `u32` (a pool is at most 2 GiB).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ExportLoans {
    /// Sequence lock word.
    pub seq: AtomicU32,
    /// Blocks out (host- or kernel-owned).
    pub in_use_blocks: AtomicU32,
    /// Loans served by a free block of exactly their size.
    pub hits: AtomicU64,
    /// Loans that split a larger block.
    pub misses: AtomicU64,
    /// Blocks returned.
    pub returns: AtomicU64,
    /// `try_loan` attempts that found no block.
    pub exhausted: AtomicU64,
    /// Bytes of the pool (0: the kernel has none).
    pub pool_bytes: AtomicU32,
    /// Bytes out.
    pub in_use_bytes: AtomicU32,
    /// Highest `in_use_bytes` so far.
    pub peak_in_use_bytes: AtomicU32,
    /// Bytes in free blocks.
    pub free_bytes: AtomicU32,
    /// The largest free block.
    pub largest_free_bytes: AtomicU32,
    /// Zero; room for a later field.
    pub reserved: u32,
}

/// The whole export file.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct TelemetryExport {
    /// Bytes 0..64.
    pub header: ExportHeader,
    /// Bytes 64..128.
    pub control: ExportControl,
    /// Bytes 128..192: same layout and seqlock as the shared region's telemetry line.
    pub telemetry: TelemetryBuffer,
    /// Bytes 192..256.
    pub lifecycle: ExportLifecycle,
    /// Bytes 256..320.
    pub loans: ExportLoans,
}

const _: () = assert!(core::mem::size_of::<ExportHeader>() == 64);
const _: () = assert!(core::mem::size_of::<ExportControl>() == 64);
const _: () = assert!(core::mem::offset_of!(ExportControl, published_unix_ms) == 56);
const _: () = assert!(core::mem::size_of::<TelemetryExport>() == EXPORT_SIZE);
const _: () = assert!(core::mem::offset_of!(TelemetryExport, control) == 64);
const _: () = assert!(core::mem::offset_of!(TelemetryExport, telemetry) == 128);
const _: () = assert!(core::mem::offset_of!(ExportHeader, service) == 32);
const _: () = assert!(core::mem::size_of::<ExportLifecycle>() == 64);
const _: () = assert!(core::mem::offset_of!(TelemetryExport, lifecycle) == 192);
const _: () = assert!(core::mem::offset_of!(ExportLifecycle, last_restart_unix_ms) == 40);
const _: () = assert!(core::mem::offset_of!(ExportLifecycle, epoch_us) == 48);
const _: () = assert!(core::mem::size_of::<ExportLoans>() == 64);
const _: () = assert!(core::mem::offset_of!(TelemetryExport, loans) == 256);
const _: () = assert!(core::mem::offset_of!(ExportLoans, pool_bytes) == 40);
const _: () = assert!(core::mem::offset_of!(ExportLoans, largest_free_bytes) == 56);

/// Takes a consistent copy of an [`ExportControl`] (same protocol as
/// [`read_consistent`](crate::telemetry::read_consistent)); `None` after `attempts` torn reads.
pub fn read_control(c: &ExportControl, attempts: u32) -> Option<ControlSnapshot> {
    seqlock::read(&c.seq, attempts, |seq| ControlSnapshot {
        seq,
        state: c.state.load(Relaxed),
        error_code: c.error_code.load(Relaxed),
        capacity: c.capacity.load(Relaxed),
        h2k_head: c.h2k_head.load(Relaxed),
        h2k_tail: c.h2k_tail.load(Relaxed),
        k2h_head: c.k2h_head.load(Relaxed),
        k2h_tail: c.k2h_tail.load(Relaxed),
        heartbeat_unix_ms: c.heartbeat_unix_ms.load(Relaxed),
        published_unix_ms: c.published_unix_ms.load(Relaxed),
    })
}

/// Writes `v` to `c` under its sequence lock. Single writer only.
pub fn write_control(c: &ExportControl, v: &ControlSnapshot) {
    seqlock::write(&c.seq, || {
        c.state.store(v.state, Relaxed);
        c.error_code.store(v.error_code, Relaxed);
        c.capacity.store(v.capacity, Relaxed);
        c.h2k_head.store(v.h2k_head, Relaxed);
        c.h2k_tail.store(v.h2k_tail, Relaxed);
        c.k2h_head.store(v.k2h_head, Relaxed);
        c.k2h_tail.store(v.k2h_tail, Relaxed);
        c.heartbeat_unix_ms.store(v.heartbeat_unix_ms, Relaxed);
        c.published_unix_ms.store(v.published_unix_ms, Relaxed);
    });
}

/// Takes a consistent copy of an [`ExportLifecycle`]; `None` after `attempts` torn reads.
pub fn read_lifecycle(l: &ExportLifecycle, attempts: u32) -> Option<LifecycleSnapshot> {
    seqlock::read(&l.seq, attempts, |seq| LifecycleSnapshot {
        seq,
        generation: l.generation.load(Relaxed),
        reloads: l.reloads.load(Relaxed),
        epochs: l.epochs.load(Relaxed),
        restarts: l.restarts.load(Relaxed),
        last_relaunch_unix_ms: l.last_relaunch_unix_ms.load(Relaxed),
        last_restart_unix_ms: l.last_restart_unix_ms.load(Relaxed),
        epoch_us: l.epoch_us.load(Relaxed),
    })
}

/// Writes `v` to `l` under its sequence lock. Single writer only.
pub fn write_lifecycle(l: &ExportLifecycle, v: &LifecycleSnapshot) {
    seqlock::write(&l.seq, || {
        l.generation.store(v.generation, Relaxed);
        l.reloads.store(v.reloads, Relaxed);
        l.epochs.store(v.epochs, Relaxed);
        l.restarts.store(v.restarts, Relaxed);
        l.last_relaunch_unix_ms
            .store(v.last_relaunch_unix_ms, Relaxed);
        l.last_restart_unix_ms
            .store(v.last_restart_unix_ms, Relaxed);
        l.epoch_us.store(v.epoch_us, Relaxed);
    });
}

/// Takes a consistent copy of an [`ExportLoans`] line as a [`LoanStats`]; `None` after
/// `attempts` torn reads.
pub fn read_loans(l: &ExportLoans, attempts: u32) -> Option<LoanStats> {
    seqlock::read(&l.seq, attempts, |_| LoanStats {
        pool_bytes: u64::from(l.pool_bytes.load(Relaxed)),
        hits: l.hits.load(Relaxed),
        misses: l.misses.load(Relaxed),
        exhausted: l.exhausted.load(Relaxed),
        returns: l.returns.load(Relaxed),
        in_use_blocks: u64::from(l.in_use_blocks.load(Relaxed)),
        in_use_bytes: u64::from(l.in_use_bytes.load(Relaxed)),
        peak_in_use_bytes: u64::from(l.peak_in_use_bytes.load(Relaxed)),
        free_bytes: u64::from(l.free_bytes.load(Relaxed)),
        largest_free_bytes: u64::from(l.largest_free_bytes.load(Relaxed)),
    })
}

/// Writes `v` to `l` under its sequence lock (byte figures saturate at `u32::MAX`).
/// Single writer only.
pub fn write_loans(l: &ExportLoans, v: &LoanStats) {
    let b = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    seqlock::write(&l.seq, || {
        l.in_use_blocks.store(b(v.in_use_blocks), Relaxed);
        l.hits.store(v.hits, Relaxed);
        l.misses.store(v.misses, Relaxed);
        l.returns.store(v.returns, Relaxed);
        l.exhausted.store(v.exhausted, Relaxed);
        l.pool_bytes.store(b(v.pool_bytes), Relaxed);
        l.in_use_bytes.store(b(v.in_use_bytes), Relaxed);
        l.peak_in_use_bytes.store(b(v.peak_in_use_bytes), Relaxed);
        l.free_bytes.store(b(v.free_bytes), Relaxed);
        l.largest_free_bytes.store(b(v.largest_free_bytes), Relaxed);
    });
}
