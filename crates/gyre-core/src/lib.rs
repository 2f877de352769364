//! gyre's host side: the ring protocol, shared regions, the completion driver, telemetry
//! readers, the built-in kernels' definitions and the [`Backend`] trait.
//!
//! Most users want the `gyre` facade crate; this crate is what backends are built on.
//!
//! # Map
//!
//! * [`ring`] — index algorithms (claim, publish the written prefix), geometry, raw slots.
//! * [`region`] — the shared region: control block, telemetry line, both rings.
//! * [`channel`] — the host side of one kernel: producers, reply delivery, the driver.
//! * [`seqlock`] — the sequence lock of every seqlocked line.
//! * [`telemetry`] — the telemetry line's writer and consistent reader.
//! * [`shm`] — the telemetry export file: layout, writer, publisher, reader.
//! * [`kernels`] — built-in kernels: layouts, CPU handlers, reference results.
//! * [`backend`] — what a backend implements.
//! * [`cost`] — what a kernel pays for over PCIe (checked rings), counted by the C11 port.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod bridge;
mod cause;
pub mod chain;
pub mod channel;
pub mod clock;
pub mod command_gate;
pub mod copy;
pub mod cost;
pub mod doorbell;
mod error;
pub mod handler;
pub mod idle;
pub mod kernels;
pub mod loan;
pub mod memory;
pub mod plan;
pub mod region;
pub mod ring;
pub mod seqlock;
pub mod shm;
pub mod strategy;
pub mod sync;
pub mod telemetry;
pub mod visibility;

pub use backend::{Backend, DeviceSource, KernelInstance, LaneHandler, LaunchSpec};
pub use cause::Cause;
pub use channel::{Channel, Kind, PublishError};
pub use error::{Error, Result, TrySendError};
pub use handler::Handler;
pub use idle::{IdleStrategy, Idler};
pub use region::SharedRegion;
