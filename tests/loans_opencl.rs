//! Loan kernels (`docs/loans.md`) on the OpenCL backend: the pool in fine-grained SVM,
//! each request's handle resolved by the ring kernel itself (`cuda/include/gyre/loan.h`)
//! before its device handler works on the block in place. The cases of
//! `tests/loan_cases/` that need no host-code handler (a panic, a restart after one are
//! the CPU backend's: a device handler cannot panic).
//!
//! Without a usable OpenCL device every case prints `SKIP` and passes, unless
//! `GYRE_REQUIRE_OPENCL=1` (CI), where it fails. The cases run one at a time under a
//! watchdog, after a compile check in a child process (`tests/support/opencl.rs`).

#![cfg(feature = "opencl")]

mod loan_cases;
#[path = "support/opencl.rs"]
mod support;

use gyre::{Backend, KernelSpec, Runtime};
use loan_cases::{sources, Target};

/// The child of the compile check: builds and runs each loan kernel's device handler once.
#[test]
fn opencl_loans_compile_in_child() {
    if !support::is_child() {
        let _g = guard();
        support::device_or_skip("opencl_loans_compile_in_child");
        return;
    }
    let Some((platform, device)) = support::device_or_skip("opencl_loans_compile_in_child") else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    for (name, src) in [
        ("bump.h", sources::BUMP),
        ("resize.h", sources::RESIZE),
        ("guard.h", sources::GUARD),
    ] {
        let k = rt
            .launch(
                KernelSpec::loans(name, |_: &mut gyre::loan::LoanBuf<'_>| Ok(()))
                    .device_handler(name, src),
            )
            .expect(name);
        assert!(k.call_bytes_blocking(&[1; 100]).is_ok(), "{name}");
        k.shutdown_blocking().expect(name);
    }
}

fn guard() -> support::Guard {
    support::guard(
        module_path!(),
        "opencl_loans_compile_in_child",
        support::TEST_LIMIT,
    )
}

support::device_cases!(
    loan_cases,
    Target::OpenCl,
    [
        large_messages_round_trip_in_place,
        replies_may_shrink_or_grow_within_the_block,
        handler_errors_return_the_block_and_the_kernel_serves_on,
        corrupt_handles_are_refused_without_touching_the_pool,
        an_exhausted_pool_refuses_try_loan_and_async_loans_wait,
        dropped_call_futures_return_their_block_only_after_the_reply,
        many_threads_loan_and_call_concurrently,
        bad_specs_are_refused_and_copies_move_loan_bytes,
        batches_of_loans_go_and_come_back_in_order,
        the_export_file_shows_the_pool,
        a_handle_sent_twice_never_gives_its_block_two_writers,
        a_loan_of_another_pool_is_refused_and_returns_to_it,
        a_reloaded_loan_kernel_serves_the_same_pool,
        host_code_resolves_no_handle_of_a_device_kernels_pool,
        a_watched_loan_kernel_reloads_over_the_same_pool,
    ]
);

/// A loan kernel with a Rust closure and no OpenCL C source is refused on OpenCL, naming
/// what would run it; one on the CPU backend is not.
#[test]
fn a_closure_without_device_code_is_refused() {
    let _g = guard();
    let Some((platform, device)) = support::device_or_skip("a_closure_without_device_code") else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    let spec = || KernelSpec::loans("c", |_: &mut gyre::loan::LoanBuf<'_>| Ok(()));
    match rt.launch(spec()) {
        Err(gyre::Error::HandlerUnsupported {
            backend, remedy, ..
        }) => {
            assert_eq!(backend, "opencl");
            assert!(remedy.contains("device_handler"), "{remedy}");
        }
        other => panic!("{other:?}"),
    }
}
