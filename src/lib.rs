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

mod features;
mod futures;
mod kernel;
#[cfg(feature = "metrics")]
mod metrics_export;
mod opencl;
mod runtime;
mod spec;

pub use futures::{Call, Recv, Replies, Send, Shutdown};
pub use gyre_abi::TelemetrySnapshot;
pub use gyre_core::bridge::TransferStats;
pub use gyre_core::kernels::{self, ReduceSum, Sum, VecF32, VecScale};
pub use gyre_core::strategy::TransferStrategy;
pub use gyre_core::visibility::{MemoryPlan, MemoryVisibility, Source};
pub use gyre_core::{Error, Handler, IdleStrategy, Result, TrySendError};
pub use kernel::{Kernel, KernelState};
pub use runtime::{backends, Backend, BackendInfo, Runtime, RuntimeBuilder};
pub use spec::KernelSpec;

/// Version of this crate.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Version of the shared-memory ABI this build speaks.
pub const ABI_VERSION: u32 = gyre_abi::ABI_VERSION;

/// Re-exported so users can derive message types: `#[derive(Pod, Zeroable, Clone, Copy)]`.
pub use bytemuck::{self, Pod, Zeroable};

/// The README's example, compiled and run as a doc test so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
