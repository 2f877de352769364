//! gyre's CUDA backend.
//!
//! The device side is CUDA C++ in the repository's `cuda/` directory: the persistent loop
//! `cuda/ring_kernel.cu` over the language-neutral ring logic `cuda/include/gyre/ring.h`
//! (with its CUDA port `port_cuda.h`) and the built-in handlers `cuda/handlers/*.cuh`.
//! This crate compiles them with NVRTC at run time ([`nvrtc`]), loaded dynamically through
//! cudarc, so it builds, and its tests pass, on machines without CUDA: where NVRTC is
//! missing every entry point returns [`Error::NvrtcNotFound`] instead of panicking.
//! [`toolchain`] finds NVRTC and the CCCL headers (a PyPI venv made by
//! `scripts/setup-cuda-venv.sh`, or a CUDA toolkit). The host-side launcher comes later.
//!
//! See `docs/cuda.md`.

pub mod error;
pub mod nvrtc;
pub mod toolchain;

pub use error::{Error, Result};
pub use nvrtc::{CompileOptions, Handler, Nvrtc, Ptx};
pub use toolchain::Toolchain;
