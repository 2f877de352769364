//! Kernel pools on the OpenCL backend: members are work-groups of one device, each
//! holding a compute unit (PoCL in CI: one per core). Without a usable OpenCL device the
//! cases print `SKIP` and pass, unless `GYRE_REQUIRE_OPENCL=1`. The cases every backend
//! runs (`tests/pool_cases/`) run here on the device too; a member's portable handler
//! faults there.

#![cfg(feature = "opencl")]

mod pool_cases;
#[path = "support/opencl.rs"]
mod support;
#[path = "support/wait.rs"]
mod wait;

use gyre::{pool::PoolOptions, Backend, KernelSpec, Runtime};

fn guard() -> support::Guard {
    support::guard(
        module_path!(),
        "opencl_pool_compiles_in_child",
        support::TEST_LIMIT,
    )
}

#[path = "support/runtime.rs"]
mod test_runtime;

fn runtime(test: &str) -> Option<Runtime> {
    support::device_or_skip(test).map(test_runtime::opencl)
}

/// The child of the compile check: one echo member.
#[test]
fn opencl_pool_compiles_in_child() {
    if !support::is_child() {
        let _g = guard();
        support::device_or_skip("opencl_pool_compiles_in_child");
        return;
    }
    let Some(rt) = runtime("opencl_pool_compiles_in_child") else {
        return;
    };
    let pool = rt
        .launch(gyre::pool::PoolSpec::new(
            KernelSpec::<u32, u32>::echo(),
            PoolOptions::new(1),
        ))
        .expect("pool");
    assert_eq!(pool.call_blocking(3).expect("call"), 3);
    pool.shutdown_blocking().expect("shutdown");
}

/// A member that stopped (here: shut down directly) is replaced on a device whose compute
/// units are all taken: the stopped member gives its unit back first.
#[test]
fn a_stopped_member_is_replaced_on_a_full_device() {
    let _g = guard();
    let Some(rt) = runtime("a_stopped_member_is_replaced_on_a_full_device") else {
        return;
    };
    let units = match rt.backend() {
        Backend::OpenCl { platform, device } => support::compute_units(platform, device),
        other => panic!("{other:?}"),
    };
    let pool = rt
        .launch(gyre::pool::PoolSpec::new(
            KernelSpec::<u64, u64>::echo(),
            PoolOptions::new(units),
        ))
        .expect("pool: one member per compute unit");
    let key = (0..)
        .find(|&k| pool.member_for_key(k) == Some(0))
        .expect("a key");
    pool.members()[0]
        .shutdown_blocking()
        .expect("member 0 shut down");
    assert_eq!(
        pool.call_keyed_blocking(key, 5)
            .expect("the replacement answers"),
        5
    );
    let s = pool.stats();
    assert_eq!((s.members, s.replaced, s.removed), (units, 1, 0));
    pool.shutdown_blocking().expect("shutdown");
}

/// A kernel whose last handle was dropped holds its compute unit until its end (drain,
/// Terminate, join, on a thread of its own) is over. A launch right after the drop waits
/// for it instead of failing with `DeviceFull` while it lasts (issue 31).
#[test]
fn a_launch_right_after_a_drop_gets_the_freed_compute_unit() {
    const TEST: &str = "a_launch_right_after_a_drop_gets_the_freed_compute_unit";
    let _g = guard();
    let Some(rt) = runtime(TEST) else {
        return;
    };
    let spec = || KernelSpec::<u32, u32>::echo().capacity(64);
    let mut held = Vec::new();
    let full = loop {
        match rt.launch(spec()) {
            Ok(k) => {
                assert_eq!(k.call_blocking(1).expect("call"), 1);
                held.push(k);
            }
            Err(e) => break e,
        }
        assert!(held.len() <= 64, "no compute-unit limit after 64 kernels");
    };
    assert!(full.to_string().contains("compute unit"), "{full}");
    assert!(!held.is_empty(), "at least one kernel runs");
    drop(held.pop());
    let k = rt
        .launch(spec())
        .expect("the dropped kernel's compute unit, once its end is over");
    assert_eq!(k.call_blocking(2).expect("call"), 2);
    k.shutdown_blocking().expect("shutdown");
    for k in held {
        k.shutdown_blocking().expect("shutdown");
    }
}

// The cases every backend runs (`tests/pool_cases/`), on the OpenCL device, one at a
// time under the watchdog.
support::device_cases!(
    pool_cases,
    pool_cases::Target::OpenCl,
    [
        keyed_calls_reach_every_member,
        a_member_that_faults_is_replaced_and_the_other_loses_nothing,
        a_pool_spans_runtimes_and_replaces_in_place,
    ]
);
