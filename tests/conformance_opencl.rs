//! The conformance suite on the OpenCL backend, on the first OpenCL device with
//! fine-grained SVM and atomics (PoCL's CPU device in CI).
//!
//! Without one, every case prints `SKIP` and passes, unless `GYRE_REQUIRE_OPENCL=1`
//! (CI), where it fails. The cases run one at a time under a watchdog, after a compile
//! check in a child process (see `tests/support/opencl.rs`). Cases whose kernel has a
//! Rust closure handler are skipped by the suite itself: OpenCL runs device handlers.

#![cfg(feature = "opencl")]

mod conformance;
#[path = "support/opencl.rs"]
mod support;

use gyre::{Backend, KernelSpec, Runtime};

/// The child of the compile check: builds and launches every built-in ring kernel once.
/// In a normal run it only runs the check (and so proves it passes).
#[test]
fn opencl_compiles_in_child() {
    if !support::is_child() {
        let _g = support::guard(
            module_path!(),
            "opencl_compiles_in_child",
            support::TEST_LIMIT,
        );
        support::device_or_skip("opencl_compiles_in_child");
        return;
    }
    let Some((platform, device)) = support::device_or_skip("opencl_compiles_in_child") else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let echo = rt.launch(KernelSpec::<u32, u32>::echo()).expect("echo");
    assert_eq!(echo.call_blocking(7).expect("echo call"), 7);
    echo.shutdown_blocking().expect("echo shutdown");
    let vs = rt
        .launch(KernelSpec::<gyre::VecScale<4>, gyre::VecF32<4>>::vec_scale())
        .expect("vec_scale");
    let out = vs
        .call_blocking(gyre::VecScale::new(2.0, &[1.0, 2.0]).expect("request"))
        .expect("vec_scale call");
    assert_eq!(out.as_slice(), &[2.0, 4.0]);
    vs.shutdown_blocking().expect("vec_scale shutdown");
    let rs = rt
        .launch(KernelSpec::<gyre::ReduceSum<4>, gyre::Sum>::reduce_sum())
        .expect("reduce_sum");
    let s = rs
        .call_blocking(gyre::ReduceSum::new(&[1.0, 2.0, 3.0]).expect("request"))
        .expect("reduce_sum call");
    assert_eq!((s.sum, s.count), (6.0, 3));
    rs.shutdown_blocking().expect("reduce_sum shutdown");
}

/// The backend of every case: the first usable device, or a skip.
fn backend() -> Option<Backend> {
    let (platform, device) = support::device_or_skip(module_path!())?;
    Some(Backend::OpenCl { platform, device })
}

fn guard() -> support::Guard {
    support::guard(
        module_path!(),
        "opencl_compiles_in_child",
        support::TEST_LIMIT,
    )
}

conformance_suite!(
    {
        let Some(b) = backend() else {
            return;
        };
        b
    },
    guard = guard()
);
