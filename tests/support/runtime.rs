//! The runtimes gyre's test binaries launch on: the CPU backend, and an OpenCL device that
//! `support/opencl.rs` found usable. One definition, so a change of the test runtime's
//! set-up (a builder option every test needs) is made once.

#![allow(dead_code)]

use gyre::{Backend, Runtime};

/// A runtime on the CPU backend.
pub fn cpu() -> Runtime {
    Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime")
}

/// A runtime on OpenCL device `(platform, device)`, as `support::device_or_skip` returns
/// it: `support::device_or_skip(test).map(runtime::opencl)`.
pub fn opencl((platform, device): (usize, usize)) -> Runtime {
    Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime")
}
