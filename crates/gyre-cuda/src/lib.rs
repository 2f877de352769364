//! gyre's CUDA backend.
//!
//! The device side is CUDA C++ in the repository's `cuda/` directory: the persistent loop
//! `cuda/ring_kernel.cu` over the language-neutral ring logic `cuda/include/gyre/ring.h`
//! (with its CUDA port `port_cuda.h`) and the built-in handlers `cuda/handlers/*.cuh`.
//! This crate compiles them with NVRTC at run time ([`nvrtc`]), loaded dynamically through
//! cudarc, so it builds, and its tests pass, on machines without CUDA: where NVRTC or the
//! driver is missing every entry point returns a typed [`Error`] instead of panicking.
//! [`toolchain`] finds NVRTC and the CCCL headers (a PyPI venv made by
//! `scripts/setup-cuda-venv.sh`, or a CUDA toolkit).
//!
//! Layers, as in cudarc: cudarc's raw FFI (`cudarc::driver::sys`), checked calls
//! ([`error::Error::Driver`] names the call, the CUDA error and the sizes), then the safe
//! types: [`probe`] (is there a driver and a device), [`context`] (the primary context,
//! bound on every calling thread), [`memory`] (RAII buffers), [`cache`] (compiled PTX on
//! disk) and [`backend`] (`gyre_core::Backend`).
//!
//! See `docs/cuda.md`.

pub mod alloc;
pub mod backend;
pub mod cache;
pub mod context;
pub mod copy;
pub mod error;
pub mod export;
mod launch;
pub mod memory;
pub mod nvrtc;
pub mod probe;
pub mod toolchain;
pub mod visibility_probe;

pub use alloc::CudaAllocator;
pub use backend::CudaBackend;
pub use cache::{CacheKey, PtxCache};
pub use context::Context;
pub use copy::CudaCopyEngine;
pub use error::{Error, Result};
pub use memory::{DeviceBuffer, DeviceRepr, Location, PinnedBuffer, UnifiedBuffer};
pub use nvrtc::{CompileOptions, Handler, Nvrtc, Ptx};
pub use probe::{CudaInfo, CudaProbe, DeviceInfo};
pub use toolchain::Toolchain;
