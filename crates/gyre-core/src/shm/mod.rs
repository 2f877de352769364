//! Out-of-process telemetry: the [`TelemetryExport`] file a kernel publishes and
//! [`TelemetryReader`]s (such as `gyre top`) map read-only.
//!
//! The rings stay private. The file holds a 64-byte [`ExportHeader`] (magic `GYRETLM1`,
//! layout version, writer pid, names), a 64-byte [`ExportControl`] line (the kernel's
//! state and ring indices, under its own sequence lock), a copy of the kernel's
//! [`TelemetryBuffer`](gyre_abi::TelemetryBuffer) (same seqlock as in the shared region)
//! a 64-byte [`ExportLifecycle`] line (relaunch counters) and a 64-byte [`ExportLoans`]
//! line (the loan pool's counters), each under its own seqlock: 320 bytes in all (layout
//! version 2); see `docs/telemetry.md` for the byte layout and the reader protocol.
//!
//! On the CPU backend (and OpenCL) the telemetry line of the file is a periodic copy made
//! by a host thread (the [`ExportPublisher`], every 50 ms by default), not the kernel's own
//! line: the counters lag the kernel by up to one period. On CUDA the backend registers
//! the mapping with the driver (`cuMemHostRegister`) and the ring kernel's K8 writes the
//! file's telemetry line itself, as its single writer, with no copy loop; the publisher
//! then writes only the control, lifecycle and loan lines (see `LaunchSpec::export` and
//! `KernelInstance::writes_export_telemetry`). That CUDA path has not run on a GPU yet.
//!
//! Files live at `$GYRE_SHM_DIR/<service>/<kernel>` (default `/dev/shm/gyre`), created
//! mode 0600 in directories created 0700, published atomically (written under a temporary
//! name, then hard-linked into place, which fails if the name exists) and removed when the
//! writer is dropped. A leftover file whose writer pid is dead is replaced; one whose
//! writer is alive is an error.

//!
//! # Map
//!
//! * [`TelemetryExport`] — the byte layout and the control line's seqlock (`layout.rs`).
//! * [`ExportError`] — what can go wrong (`error.rs`).
//! * paths — the export directory, names, discovery, writer liveness (`paths.rs`).
//! * the shared file mapping (`mapping.rs`).
//! * [`ExportWriter`] — creates, names and removes a file (`writer.rs`).
//! * [`ExportPublisher`] — the host thread that copies a region into it (`publisher.rs`).
//! * [`TelemetryReader`] — a read-only view, for `gyre top` and other processes (`reader.rs`).

mod error;
mod layout;
mod mapping;
mod paths;
mod publisher;
mod reader;
mod writer;

pub use error::ExportError;
pub use layout::{
    read_control, read_lifecycle, read_loans, write_control, write_lifecycle, write_loans,
    ControlSnapshot, ExportControl, ExportHeader, ExportLifecycle, ExportLoans, LifecycleSnapshot,
    TelemetryExport, EXPORT_MAGIC, EXPORT_SIZE, EXPORT_VERSION, NAME_BYTES,
};
pub use paths::{default_dir, discover, export_path, pid_alive, unix_ms, DEFAULT_DIR, DIR_ENV};
pub use publisher::{ExportPublisher, ExportSource, SingleLaunch, DEFAULT_INTERVAL};
pub use reader::{ExportInfo, ExportSnapshot, TelemetryReader, READ_ATTEMPTS};
pub use writer::ExportWriter;
