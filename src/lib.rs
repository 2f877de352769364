//! gyre — a ring-kernel messaging runtime.
//!
//! A *ring kernel* is a persistent kernel, launched once, that polls its control block
//! for work instead of being launched per request. The host exchanges fixed-size,
//! 128-byte-aligned message slots with it through two lock-free rings. This crate is the
//! public API: a [`Runtime`] launches [`KernelSpec`]s on a [`Backend`] and hands back
//! typed [`Kernel`] handles with blocking and async (tokio) methods.
//!
//! # Examples
//!
//! ```
//! # fn main() -> Result<(), gyre::Error> {
//! let rt = gyre::Runtime::builder().backend(gyre::Backend::Auto).build()?;
//! let k = rt.launch(gyre::KernelSpec::<[u8; 64], [u8; 64]>::echo().capacity(1024))?;
//! let reply = k.call_blocking([7u8; 64])?;
//! assert_eq!(reply, [7u8; 64]);
//! k.shutdown_blocking()?;
//! # Ok(()) }
//! ```
//!
//! The same with tokio:
//!
//! ```
//! # async fn run() -> Result<(), gyre::Error> {
//! let rt = gyre::Runtime::builder().build()?;
//! let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
//! assert_eq!(k.call(42).await?, 42);
//! k.send(1).await?;
//! assert_eq!(k.recv().await?, 1);
//! k.shutdown().await?;
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(run()).unwrap();
//! ```

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod backend;
mod blocking;
mod cuda;
mod decode;
mod features;
pub mod future;
mod inner;
mod keep_alive;
mod kernel;
mod launch;
mod lifecycle;
pub mod loan;
#[cfg(feature = "metrics")]
mod metrics_export;
mod opencl;
pub mod pipeline;
pub mod pool;
pub mod portable;
mod runtime;
mod spec;
mod state;

pub use backend::{backends, prepare_cuda_environment, Backend, BackendInfo};
pub use gyre_core::kernels;
pub use gyre_core::strategy::TransferStrategy;
pub use gyre_core::{Cause, Error, Handler, IdleStrategy, Result, TrySendError};
/// Handlers written once in Rust and run on every backend (`docs/handlers.md`).
pub use gyre_macros::{handler, handler_fn, DeviceType};
pub use kernel::Kernel;
pub use launch::Launch;
pub use lifecycle::RestartPolicy;
pub use portable::DeviceType;
pub use runtime::{Runtime, RuntimeBuilder};
pub use spec::KernelSpec;
pub use state::KernelState;

/// What a kernel reports about itself: its telemetry (`docs/telemetry.md`), the bridge's
/// transfer counts, its relaunches, and the reader of a telemetry export file that a
/// monitor in another process uses.
///
/// # Examples
///
/// ```
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
/// k.call_blocking(1)?;
/// let r: gyre::telemetry::Relaunches = k.relaunches();
/// assert_eq!(r.generation, 1);
/// k.shutdown_blocking()?;
/// let t: gyre::telemetry::TelemetrySnapshot = k.telemetry()?;
/// assert_eq!(t.messages_out, 1);
/// # Ok::<(), gyre::Error>(())
/// ```
pub mod telemetry {
    pub use crate::lifecycle::Relaunches;
    pub use gyre_abi::TelemetrySnapshot;
    pub use gyre_core::bridge::TransferStats;
    pub use gyre_core::cost::DeviceCost;
    pub use gyre_core::shm::{
        ControlSnapshot, ExportError, ExportInfo, ExportSnapshot, TelemetryReader,
    };
    pub use gyre_core::telemetry::{rates, Rates};
}

/// Where a kernel's rings live and how slots cross to the device: the memory plan a
/// runtime made for its backend, where its choice came from, and the memory visibility it
/// detected (`docs/memory-visibility.md`).
///
/// # Examples
///
/// ```
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// let plan: &gyre::memory::MemoryPlan = rt.memory_plan();
/// assert_eq!(plan.strategy, gyre::TransferStrategy::Unified);
/// # Ok::<(), gyre::Error>(())
/// ```
pub mod memory {
    pub use gyre_core::plan::{MemoryPlan, Source};
    pub use gyre_core::visibility::MemoryVisibility;
}

/// Error codes (in a faulted kernel's [`KernelState::Faulted`] and
/// [`Error::KernelFaulted`]) and reply statuses (in [`Error::Handler`]): the protocol's
/// codes below [`codes::USER_BASE`], and a handler's own from `USER_BASE` up (see
/// [`KernelSpec::try_from_fn`]). The same table as `GYRE_ERR_*` in
/// `cuda/include/gyre/abi.h`.
///
/// # Examples
///
/// ```
/// assert_eq!(gyre::codes::name(gyre::codes::HANDLER_PANIC), "handler panic");
/// assert_eq!(gyre::codes::name(gyre::codes::USER_BASE + 3), "user error");
/// ```
pub use gyre_abi::error as codes;

/// Version of this crate.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Version of the shared-memory ABI this build speaks (also the `abi_version` of a
/// telemetry export file, see `docs/telemetry.md`).
pub const ABI_VERSION: u32 = gyre_abi::ABI_VERSION;

/// Re-exported so users can derive message types without depending on `bytemuck`
/// themselves: derive through gyre and name the crate with
/// `#[bytemuck(crate = "gyre::bytemuck")]` (the derive macros otherwise refer to a
/// `bytemuck` crate of your own).
///
/// # Examples
///
/// ```
/// #[derive(Clone, Copy, gyre::Pod, gyre::Zeroable)]
/// #[bytemuck(crate = "gyre::bytemuck")]
/// #[repr(C)]
/// struct Order {
///     id: u64,
///     price: f64,
/// }
///
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// let k = rt.launch(gyre::KernelSpec::from_fn("fill", |o: Order| Order { price: 1.5, ..o }))?;
/// assert_eq!(k.call_blocking(Order { id: 7, price: 0.0 })?.price, 1.5);
/// # Ok::<(), gyre::Error>(())
/// ```
///
/// `crates/gyre-derive-check`, a crate of the workspace with no `bytemuck` dependency,
/// compiles and runs the same derive in every test run.
pub use bytemuck::{self, Pod, Zeroable};

/// The README's example, compiled and run as a doc test so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The example of `docs/handlers.md`, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../docs/handlers.md")]
pub struct HandlersDoctests;
