//! The conformance suite on the OpenCL backend, on the first OpenCL device that runs the
//! ring kernel (PoCL's CPU device in CI): zero copy, device buffers, and OpenCL C 1.2
//! atomics over device buffers in a child process.
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
        .launch(KernelSpec::<
            gyre::kernels::VecScale<4>,
            gyre::kernels::VecF32<4>,
        >::vec_scale())
        .expect("vec_scale");
    let out = vs
        .call_blocking(gyre::kernels::VecScale::new(2.0, &[1.0, 2.0]).expect("request"))
        .expect("vec_scale call");
    assert_eq!(out.as_slice(), &[2.0, 4.0]);
    vs.shutdown_blocking().expect("vec_scale shutdown");
    let rs = rt
        .launch(KernelSpec::<gyre::kernels::ReduceSum<4>, gyre::kernels::Sum>::reduce_sum())
        .expect("reduce_sum");
    let s = rs
        .call_blocking(gyre::kernels::ReduceSum::new(&[1.0, 2.0, 3.0]).expect("request"))
        .expect("reduce_sum call");
    assert_eq!((s.sum, s.count), (6.0, 3));
    rs.shutdown_blocking().expect("reduce_sum shutdown");
}

/// The backend of every case: the first usable device, or a skip.
fn backend() -> Option<Backend> {
    let (platform, device) = support::device_or_skip(module_path!())?;
    Some(Backend::OpenCl { platform, device })
}

/// The backend for a suite over device buffers: a CPU device keeps one compute unit free
/// for the copies, so it needs two (a 1-core PoCL machine skips, saying so).
fn backend_for_copies() -> Option<Backend> {
    let b = backend()?;
    let Backend::OpenCl { platform, device } = b else {
        return None;
    };
    let units = support::compute_units(platform, device);
    if units < 2 {
        eprintln!(
            "SKIP {}: {units} compute unit(s); a kernel over device buffers needs one more \
             for the copies",
            module_path!()
        );
        return None;
    }
    Some(b)
}

fn guard() -> support::Guard {
    support::guard(
        module_path!(),
        "opencl_compiles_in_child",
        support::TEST_LIMIT,
    )
}

/// The strategy the runtime plans: zero copy in fine-grained SVM where the device has it
/// (PoCL does), the copy strategies over buffers where it has not.
mod planned {
    use super::{backend, guard};
    crate::conformance_suite!(
        {
            let Some(b) = backend() else {
                return;
            };
            b
        },
        guard = guard()
    );
}

/// `async` over device buffers (`gyre_opencl::ClCopyEngine`) on the same device, its SVM
/// unused: the copy path in the same process as the zero-copy one.
mod async_copy {
    use super::{backend_for_copies, guard};
    use crate::conformance::Target;
    use gyre::TransferStrategy;
    crate::conformance_suite!(
        {
            let Some(b) = backend_for_copies() else {
                return;
            };
            Target::new(b, TransferStrategy::Async)
        },
        guard = guard()
    );
}

/// The path of a device without fine-grained SVM and without OpenCL C 2.0 atomics at device
/// scope (NVIDIA's OpenCL): the ring kernel built with OpenCL C 1.2 atomics
/// (`GYRE_OPENCL_ATOMICS=legacy`), zero copy off (`GYRE_OPENCL_SVM=off`), and the strategy
/// the runtime plans there (`dma-polling`). Both variables are read when the device is
/// opened, once per process, so these cases run in a child process of this binary
/// (`legacy_buffers_in_a_child`); in this process they skip.
mod legacy_buffers {
    use super::{backend_for_copies, guard};
    use crate::conformance::Target;
    crate::conformance_suite!(
        {
            if !super::in_legacy_child() {
                eprintln!("SKIP {}: runs in legacy_buffers_in_a_child", module_path!());
                return;
            }
            let Some(b) = backend_for_copies() else {
                return;
            };
            let rt = gyre::Runtime::builder()
                .backend(b)
                .build()
                .expect("runtime");
            assert!(
                rt.memory_plan().strategy.copies(),
                "GYRE_OPENCL_SVM=off must plan a copy strategy: {:?}",
                rt.memory_plan()
            );
            let gyre::Backend::OpenCl { platform, device } = b else {
                unreachable!("an OpenCL backend")
            };
            let cl = gyre_opencl::OpenClBackend::new(platform, device).expect("device");
            assert!(
                cl.build_options().legacy_atomics,
                "{:?}",
                cl.build_options()
            );
            assert!(cl
                .build_options()
                .to_cl_options()
                .starts_with("-cl-std=CL1.2 "));
            Target::from(b)
        },
        guard = guard()
    );
}

/// The environment of `legacy_buffers_in_a_child`'s child.
const LEGACY_ENV: [(&str, &str); 2] = [
    (gyre_opencl::probe::ENV_SVM, "off"),
    (gyre_opencl::probe::ENV_ATOMICS, "legacy"),
];

fn in_legacy_child() -> bool {
    LEGACY_ENV
        .iter()
        .all(|(k, v)| std::env::var(k).is_ok_and(|x| x == *v))
}

/// Runs `legacy_buffers::*` in a child process with [`LEGACY_ENV`], and fails with the
/// child's output if any case failed.
#[test]
fn legacy_buffers_in_a_child() {
    if in_legacy_child() || backend_for_copies().is_none() {
        return;
    }
    let _g = guard();
    let exe = std::env::current_exe().expect("current_exe");
    let out = std::process::Command::new(&exe)
        .args(["legacy_buffers::", "--test-threads=1"])
        .envs(LEGACY_ENV)
        // The device was usable here: a skip there (the legacy form unusable) must fail.
        .env(support::REQUIRE_ENV, "1")
        .output()
        .expect("run this test binary again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains(" 0 failed") && !text.contains(" 0 passed"),
        "legacy_buffers:: with {LEGACY_ENV:?} failed ({}):\n{text}",
        out.status
    );
}

#[path = "loan_cases/sources.rs"]
#[allow(dead_code)] // one of its handlers is used here
mod loan_sources;

/// What device buffers cannot hold is refused with a typed error before anything runs:
/// a loan kernel (its pool's state words need SVM the kernel reads in place).
#[test]
fn a_loan_kernel_over_device_buffers_is_a_typed_refusal() {
    let Some(b) = backend() else {
        return;
    };
    let _g = guard();
    let rt = Runtime::builder()
        .backend(b)
        .transfer_strategy(gyre::TransferStrategy::Async)
        .build()
        .expect("runtime");
    let e = rt
        .launch(
            KernelSpec::loans("bump", |_: &mut gyre::loan::LoanBuf<'_>| Ok(()))
                .device_handler("bump.h", loan_sources::BUMP),
        )
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(
            e,
            gyre::Error::StrategyUnsupported {
                backend: "opencl",
                ..
            }
        ),
        "{e:?}"
    );
}
