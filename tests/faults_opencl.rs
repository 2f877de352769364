//! The fault-injection suite on the OpenCL backend (PoCL in CI), one case at a time under
//! the OpenCL watchdog, after a compile check in a child process (`tests/support/opencl.rs`).
//! Cases built on Rust closure handlers and the host-killed case skip themselves with a
//! printed reason: OpenCL runs device handlers.

#![cfg(feature = "opencl")]

mod faults;
#[path = "support/opencl.rs"]
mod support;

use gyre::{Backend, KernelSpec, Runtime};

/// The child of the compile check: builds and launches the echo ring kernel once. In a
/// normal run it only runs the check.
#[test]
fn opencl_faults_child() {
    if !support::is_child() {
        let _g = support::guard(module_path!(), "opencl_faults_child", support::TEST_LIMIT);
        return;
    }
    let Some((platform, device)) = support::device_or_skip("opencl_faults_child") else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let k = rt.launch(KernelSpec::<u64, u64>::echo()).expect("echo");
    assert_eq!(k.call_blocking(7).expect("echo call"), 7);
    k.shutdown_blocking().expect("echo shutdown");
}

faults_suite!(
    {
        let Some((platform, device)) = support::device_or_skip(module_path!()) else {
            return;
        };
        Backend::OpenCl { platform, device }
    },
    guard = support::guard(module_path!(), "opencl_faults_child", support::TEST_LIMIT)
);
