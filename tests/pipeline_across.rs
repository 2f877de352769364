//! Pipelines whose stages run on several runtimes (`Runtime::launch_across`,
//! `PipelineSpec::on`; `docs/pipelines.md`, "Across devices"), on the CPU backend: two
//! runtimes stand in for two devices. The placement of each stage's region where every
//! kernel writing into it can address it is exercised with a device backend in
//! `tests/pipeline_opencl.rs` (a CPU stage and an OpenCL stage) and
//! `tests/pipeline_cuda.rs` (two GPUs, or a GPU and the CPU).

#[path = "support/deadline.rs"]
mod deadline;

use deadline::{recv, send};

use gyre::{
    codes,
    pipeline::{Branch, PipelineSpec, Route},
    Backend, Error, KernelSpec, KernelState, Runtime, TransferStrategy,
};

#[path = "support/runtime.rs"]
mod runtime;
use runtime::cpu as rt;

/// x -> (2x + 1) * 3 over three stages on runtimes 0, 1, 0.
fn three_across() -> PipelineSpec<u64, u64> {
    PipelineSpec::new("across", KernelSpec::from_fn("double", |x: u64| x * 2))
        .then(KernelSpec::from_fn("inc", |x: u64| x + 1))
        .on(1)
        .then(KernelSpec::from_fn("triple", |x: u64| x * 3))
        .on(0)
}

#[test]
fn stages_on_two_runtimes_answer_in_request_order() {
    let p = {
        let (a, b) = (rt(), rt());
        // The runtimes go away at once: the chain keeps what its stages need.
        Runtime::launch_across(&[a, b], three_across()).expect("launch")
    };
    assert_eq!(p.stages(), 3);
    // Each inner ring is written by a stage of the other runtime: both stay inline
    // (memory a kernel of one backend keeps to itself is never placed across them).
    assert_eq!(p.stage_request_rings(), [None, None, None]);
    for x in 0..50u64 {
        assert_eq!(p.call_blocking(x).expect("call"), (2 * x + 1) * 3);
    }
    let producer = {
        let k = p.kernel().clone();
        std::thread::spawn(move || {
            for x in 0..3000u64 {
                send(&k, x).expect("send");
            }
        })
    };
    for x in 0..3000u64 {
        assert_eq!(recv(&p).expect("recv"), (2 * x + 1) * 3, "reply {x}");
    }
    producer.join().expect("producer");
    p.shutdown_blocking().expect("shutdown");
    // Every ring between the runtimes moved exactly what was sent: each stage's request
    // ring published and consumed 3050 (read once every stage stopped), and the last
    // stage, on runtime 0, wrote all 3050 replies into the head's reply ring.
    let rings = p.stage_rings();
    for (k, r) in rings.iter().enumerate() {
        assert_eq!((r.h2k_head, r.h2k_tail), (3050, 3050), "stage {k}: {r:?}");
    }
    assert_eq!(rings[0].k2h_head, 3050);
    assert_eq!(
        p.stage_states(),
        vec![KernelState::Terminated { code: 0 }; 3]
    );
}

#[test]
fn a_fault_on_the_other_runtime_reaches_the_callers() {
    let (a, b) = (rt(), rt());
    let p = Runtime::launch_across(
        &[a, b],
        PipelineSpec::new("fault", KernelSpec::<u64, u64>::echo())
            .then(KernelSpec::from_fn("panics-at-13", |x: u64| {
                assert_ne!(x, 13, "stage 1 fails on 13");
                x + 1
            }))
            .on(1),
    )
    .expect("launch");
    for x in 0..13u64 {
        assert_eq!(p.call_blocking(x).expect("call"), x + 1);
    }
    match p.call_blocking(13) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    // The chain stopped: later requests fail instead of hanging.
    assert!(p.call_blocking(14).is_err());
    assert!(matches!(p.stage_states()[1], KernelState::Faulted { .. }));
    let _ = p.shutdown_blocking();
}

#[test]
fn placements_that_cannot_run_are_refused() {
    let (a, b) = (rt(), rt());
    // Beyond the runtimes given.
    match Runtime::launch_across(std::slice::from_ref(&a), three_across()) {
        Err(Error::Pipeline { stage, reason, .. }) => {
            assert_eq!(stage, 1);
            assert!(reason.contains("runtime 1 of 1"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // `Runtime::launch` of a `PipelineSpec` is one runtime: the same refusal.
    assert!(matches!(
        a.launch(three_across()),
        Err(Error::Pipeline { stage: 1, .. })
    ));
    // None at all.
    assert!(matches!(
        Runtime::launch_across(&[], three_across()),
        Err(Error::Pipeline { stage: 0, .. })
    ));
    // A stage placed on a runtime whose transfer strategy copies (a stand-in for a
    // device whose rings sit behind a bridge) is refused, naming that stage: the
    // placement is honoured, not folded onto runtime 0.
    let copying = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(TransferStrategy::Sync)
        .build()
        .expect("copying runtime");
    match Runtime::launch_across(&[a.clone(), copying], three_across()) {
        Err(Error::StrategyUnsupported { reason, .. }) => {
            assert!(
                reason.contains("stage 1 ") && reason.contains("runtime 1"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A fan-out over two runtimes of one device (here the CPU) runs: its compare-and-swap
    // links stay among one device's kernels. Across devices a join's producers need
    // atomics that are the host's (`tests/pipeline_opencl.rs` runs the CPU with OpenCL;
    // the rule is a unit test in `src/pipeline/launch.rs`).
    let p = Runtime::launch_across(
        &[a, b],
        PipelineSpec::new("fan", KernelSpec::<u64, u64>::echo())
            .fan_out(
                Route::RoundRobin,
                [
                    Branch::new(KernelSpec::from_fn("b0", |x: u64| x * 10)),
                    Branch::new(KernelSpec::from_fn("b1", |x: u64| x * 10 + 1)),
                ],
            )
            .on(1),
    )
    .expect("fan-out over two CPU runtimes");
    for x in 0..20u64 {
        assert_eq!(p.call_blocking(x).expect("call"), x * 10 + x % 2);
    }
    p.shutdown_blocking().expect("shutdown");
}
