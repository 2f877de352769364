//! gyre's CUDA backend.
//!
//! The device side is CUDA C++ in the repository's `cuda/` directory: the persistent loop
//! `cuda/ring_kernel.cu` over the language-neutral ring logic `cuda/include/gyre/ring.h`
//! (with its CUDA port `port_cuda.h`) and the built-in handlers `cuda/handlers/*.h`,
//! all embedded in this crate ([`source`]). This crate compiles them with NVRTC at run time
//! ([`nvrtc`]), so it builds, and its tests pass, on machines without CUDA: where NVRTC or
//! the driver is missing every entry point returns a typed [`Error`] instead of panicking.
//! [`toolchain`] finds NVRTC (CUDA 12 or 13, a toolkit or the PyPI wheels) from the
//! environment of the machine it runs on.
//!
//! Layers, as in cudarc: the raw FFI ([`sys`]: the driver functions, resolved from the
//! library cudarc loads, with integer results; NVRTC's in [`nvrtc`]), the checked layer
//! ([`result`]: one function per call, errors naming the call, the CUDA error and its raw
//! code), then the safe types, which make no raw call: [`probe`] (is there a driver and a
//! device; the driver environment), [`context`] (the device's primary context, bound on
//! every calling thread, frees deferred while ring kernels run, reset after a sticky
//! error under the rules of `recovery`), `stream` (a fixed set of streams), `module` (modules loaded once),
//! [`memory`] (RAII buffers), [`cache`] (compiled kernels on disk), [`copy`] (the copy
//! strategies' engine), [`alloc`] (a memory pool's allocator), [`export`] (the telemetry
//! export file registered with the device), [`visibility_probe`], [`peer`] (the
//! benchmark's launch-per-request peers) and [`backend`] (`gyre_core::Backend`).
//!
//! See `docs/cuda.md`.

pub mod alloc;
pub mod backend;
pub mod cache;
pub mod context;
pub mod copy;
pub mod error;
pub mod export;
mod kernel;
pub mod memory;
mod module;
pub mod nvrtc;
pub mod p2p;
pub mod peer;
pub mod probe;
pub mod ptxas;
mod recovery;
mod registry;
pub mod result;
pub mod source;
mod stream;
pub mod sys;
#[doc(hidden)]
pub mod testing;
pub mod toolchain;
pub mod visibility_probe;

pub use alloc::CudaAllocator;
pub use backend::CudaBackend;
pub use cache::{CacheKey, KernelCache};
pub use context::Context;
pub use copy::CudaCopyEngine;
pub use error::{Error, Result};
pub use memory::{DeviceBuffer, DeviceRepr, Location, PinnedBuffer, UnifiedBuffer};
pub use nvrtc::{CompileOptions, Compiled, Nvrtc, Target};
pub use probe::{CudaInfo, CudaProbe, DeviceInfo, DriverEnv};
pub use source::{Handler, RING_KERNEL_ENTRY};
pub use toolchain::Toolchain;

/// The display watchdog assumed for a device that reports a kernel execution timeout
/// (`CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT`): Windows' default TDR delay, 2 s (WSL2
/// inherits it). The driver does not report the value itself.
pub const DISPLAY_WATCHDOG: std::time::Duration = std::time::Duration::from_secs(2);
