//! gyre's OpenCL backend.
//!
//! The device side is OpenCL C 3.0 in the repository's `cuda/` directory: the entry point
//! `cuda/ring_kernel.cl` over the same language-neutral loop as the CUDA kernel and the
//! CPU backend (`cuda/include/gyre/ring.h` and `block.h`, through the OpenCL port
//! `port_opencl.h`) and the built-in handlers `cuda/handlers/*.h`, one source each for
//! every backend. This crate builds them at run time through the OpenCL
//! driver, which `opencl3` loads dynamically (`libOpenCL.so.1`, the ICD loader): gyre
//! builds, and these tests pass or skip, where no OpenCL is installed; every entry point
//! then returns a typed [`Error`] naming what is missing.
//!
//! Layers, as in gyre-cuda: opencl3's checked calls and RAII handles, wrapped with
//! [`error::Error::Cl`] naming the call, the OpenCL error and the sizes, then gyre's own
//! types: [`probe`](mod@probe) (platforms, devices, SVM and atomic capabilities), [`clock`]
//! (the device clock's rate), [`memory`] ([`SvmRegion`], fine-grained SVM with atomics:
//! zero copy), [`copy`] ([`ClCopyEngine`]: a device buffer for the copy strategies),
//! [`program`] (sources and build options) and [`backend`] (`gyre_core::Backend`).
//!
//! On PoCL (Debian's CPU OpenCL) this runs in CI; what that does and does not prove about
//! a GPU is in `docs/opencl.md`.

pub mod backend;
pub mod clock;
mod clock_cache;
pub mod copy;
pub mod error;
mod kernel;
pub mod memory;
pub mod phase_check;
pub mod probe;
pub mod program;
mod scale;

pub use backend::OpenClBackend;
pub use clock::ClockScale;
pub use copy::ClCopyEngine;
pub use error::{Error, Result};
pub use memory::{SvmAllocator, SvmRegion};
pub use probe::{probe, DeviceInfo, DeviceKind, PlatformInfo, Scope, SvmCaps};
pub use program::Handler;
