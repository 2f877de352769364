//! Loan kernels (`docs/loans.md`) on the CUDA backend: the pool's state words in mapped
//! pinned memory, which the ring kernel only reads; the bytes in mapped pinned memory too
//! under `unified` (zero copy), or in device memory under `sync` (the bridge copies each
//! loan's bytes with its slot). Each request's handle is resolved by the ring kernel
//! itself (`cuda/include/gyre/loan.h`) before its device handler works on the block.
//!
//! Two kinds of check:
//! * `loan_handlers_compile_with_nvrtc`: the loan cases' device handlers compiled as CUDA
//!   ring kernels by NVRTC and assembled by `ptxas`, exactly as the runtime does, without
//!   a GPU (CI). Prints `SKIP` without NVRTC, unless `GYRE_REQUIRE_NVRTC=1`.
//! * every case of `tests/loan_cases/` that needs no host-code handler, under `unified`
//!   and `sync`, where a CUDA driver and device are present (the GPU check kit's `loans`
//!   step); elsewhere each prints `SKIP` and passes (fails with `GYRE_REQUIRE_CUDA=1`).

#![cfg(feature = "cuda")]

mod loan_cases;
#[path = "support/nvrtc.rs"]
mod nvrtc_support;
#[path = "support/cuda.rs"]
mod support;

use gyre::{Backend, KernelSpec, Runtime, TransferStrategy};
use gyre_cuda::nvrtc::Target as Arch;
use gyre_cuda::{CompileOptions, Handler, RING_KERNEL_ENTRY};
use loan_cases::{sources, Target};

/// A handler written once in Rust (`KernelSpec::portable_loans` runs its generated C on
/// CUDA as on OpenCL): compiled below with the hand-written ones.
#[gyre::handler(loan)]
fn upper(b: gyre::portable::Bytes) -> u32 {
    for i in 0..b.len() {
        let c: u8 = b.get(i);
        if c >= 97 && c <= 122 {
            b.set(i, c - 32);
        }
    }
    b.len()
}

/// [`upper`], lane-parallel.
#[gyre::handler(loan)]
fn upper_lanes(b: gyre::portable::Bytes, lane: gyre::portable::Lane) -> u32 {
    let mut i: u32 = lane.id();
    while i < b.len() {
        let c: u8 = b.get(i);
        if c >= 97 && c <= 122 {
            b.set(i, c - 32);
        }
        i += lane.count();
    }
    b.len()
}

#[test]
fn loan_handlers_compile_with_nvrtc() {
    let required = nvrtc_support::required();
    let Some((nvrtc, toolchain, archs)) =
        nvrtc_support::discover_or_skip("loan handlers under NVRTC")
    else {
        return;
    };
    // The oldest and the newest architecture NVRTC offers for ring kernels.
    let picked: Vec<u32> = [archs.first(), archs.last()]
        .into_iter()
        .flatten()
        .copied()
        .collect();
    assert!(!picked.is_empty(), "NVRTC offers no architecture");
    let portable = upper.c_source();
    let lanes = upper_lanes.c_source();
    for (name, src) in [
        ("bump.h", sources::BUMP),
        ("resize.h", sources::RESIZE),
        ("guard.h", sources::GUARD),
        ("upper.rs.h", portable.as_str()),
        ("upper_lanes.rs.h", lanes.as_str()),
    ] {
        for &arch in &picked {
            let handler = Handler::Custom { name, source: src };
            let compiled = nvrtc
                .compile_ring_kernel(&handler, &CompileOptions::new(Arch::Ptx(arch)))
                .unwrap_or_else(|e| panic!("{name} sm_{arch}: {e}"));
            let ptx = compiled.ptx().unwrap_or_default();
            // The kernel takes the loan pool and the scratch memory: eleven parameters
            // (_param_0.._param_10), the pool's four (5..8) before the scratch's two
            // (9, 10: gyre/wave.h). (Counting `_param_` matches would pass with fewer:
            // the entry declares each and loads each at least once.)
            let param = |i: u32| format!("{RING_KERNEL_ENTRY}_param_{i}");
            assert!(
                ptx.contains(&param(10)) && !ptx.contains(&param(11)),
                "{name} sm_{arch}: the ring kernel does not take exactly eleven parameters"
            );
            let Some(ptxas) = toolchain.ptxas.as_ref() else {
                assert!(!required, "GYRE_REQUIRE_NVRTC=1 but no ptxas");
                continue;
            };
            let report = gyre_cuda::ptxas::run(ptxas, ptx, arch, &format!("loan_{name}_{arch}"))
                .unwrap_or_else(|e| panic!("{name} sm_{arch}: ptxas: {e}"));
            let funcs = gyre_cuda::ptxas::parse(&report);
            assert!(
                funcs.iter().any(|f| f.function == RING_KERNEL_ENTRY),
                "{name} sm_{arch}: ptxas reported no {RING_KERNEL_ENTRY}"
            );
            for f in &funcs {
                assert_eq!(
                    (f.spill_stores, f.spill_loads),
                    (0, 0),
                    "{name} sm_{arch}: {} spills",
                    f.function
                );
            }
        }
    }
    eprintln!(
        "loan handlers under NVRTC {}: 5 handlers x sm {picked:?}, no spills",
        nvrtc.version_string()
    );
}

/// Runs `case` on CUDA device 0 under `strategy`, one CUDA case at a time, or prints
/// `SKIP`.
fn run(name: &str, strategy: TransferStrategy, case: fn(Target)) {
    let _g = support::serial();
    if !support::available(name) {
        return;
    }
    case(Target::Cuda(strategy));
}

/// Every case under `unified` (zero copy) and `sync` (the bridge moves loan bytes).
macro_rules! cuda_cases {
    ($($case:ident),* $(,)?) => {
        mod zero_copy {
            $(#[test]
            fn $case() {
                super::run(stringify!($case), gyre::TransferStrategy::Unified, crate::loan_cases::$case)
            })*
        }
        mod copies {
            $(#[test]
            fn $case() {
                super::run(stringify!($case), gyre::TransferStrategy::Sync, crate::loan_cases::$case)
            })*
        }
    };
}

cuda_cases!(
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
);

/// A loan kernel with a Rust closure and no CUDA source is refused on CUDA, naming what
/// would run it; with `Backend::Auto` it runs on the CPU backend instead.
#[test]
fn a_closure_without_device_code_is_refused() {
    let _g = support::serial();
    if !support::available("a_closure_without_device_code_is_refused") {
        return;
    }
    let rt = Runtime::builder()
        .backend(Backend::Cuda { device: 0 })
        .build()
        .expect("CUDA runtime");
    let spec = || KernelSpec::loans("c", |_: &mut gyre::loan::LoanBuf<'_>| Ok(()));
    match rt.launch(spec()) {
        Err(gyre::Error::HandlerUnsupported {
            backend, remedy, ..
        }) => {
            assert_eq!(backend, "cuda");
            assert!(remedy.contains("device_handler"), "{remedy}");
        }
        other => panic!("{other:?}"),
    }
    let auto = Runtime::builder()
        .backend(Backend::Auto)
        .build()
        .expect("Auto runtime");
    let k = auto.launch(spec()).expect("the closure on the CPU backend");
    assert_eq!(k.backend(), Backend::Cpu);
    k.shutdown_blocking().expect("shutdown");
}
