//! Pipelines on the CUDA backend: each stage one resident block, the rings between
//! stages in mapped pinned memory (zero copy). Runs where a CUDA driver and device are
//! present (the GPU check kit's `pipeline` step); elsewhere every case prints `SKIP` and
//! passes (fails with `GYRE_REQUIRE_CUDA=1`). The kernels themselves compile in CI
//! (`nvrtc_compile`: every ring kernel takes the link).

#![cfg(feature = "cuda")]

#[path = "support/deadline.rs"]
mod deadline;
mod pipeline_cases;
#[path = "support/cuda.rs"]
mod support;

use gyre::{pipeline::PipelineSpec, Backend, Error, KernelSpec, KernelState, Runtime};

fn runtime(test: &str) -> Option<Runtime> {
    if !support::available(test) {
        return None;
    }
    Some(
        Runtime::builder()
            .backend(Backend::Cuda { device: 0 })
            .build()
            .expect("CUDA runtime"),
    )
}

#[test]
fn a_chain_of_three_echo_stages_answers_in_order_on_the_gpu() {
    let _g = support::serial();
    let Some(rt) = runtime("a_chain_of_three_echo_stages_answers_in_order_on_the_gpu") else {
        return;
    };
    let Some(p) = launch_or_skip(
        std::slice::from_ref(&rt),
        PipelineSpec::new("gpu3", KernelSpec::<u64, u64>::echo())
            .then(KernelSpec::<u64, u64>::echo())
            .then(KernelSpec::<u64, u64>::echo()),
    ) else {
        return;
    };
    assert_eq!(p.backend(), Backend::Cuda { device: 0 });
    // The inner rings live in device memory (`cuMemAlloc`), the head's in mapped pinned
    // memory, where the host writes it.
    let rings = p.stage_request_rings();
    assert!(
        rings[0].is_none() && rings[1].is_some() && rings[2].is_some(),
        "{rings:?}"
    );
    for x in 0..100u64 {
        assert_eq!(p.call_blocking(x).expect("call"), x);
    }
    send_and_receive_in_order(&p, 10_000, |x| x);
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
    let t = p.stage_telemetry().expect("telemetry");
    assert!(t.iter().all(|t| t.messages_out == 10_100), "{t:?}");
}

/// Each stage of a GPU chain of three reloaded in turn (`Pipeline::reload_stage`) while
/// a stream runs through it: the stage hands over at a batch boundary and its successor
/// continues on the same rings (the inner ones in device memory); nothing lost, in order.
#[test]
fn each_gpu_stage_is_reloaded_under_a_stream() {
    let _g = support::serial();
    let Some(rt) = runtime("each_gpu_stage_is_reloaded_under_a_stream") else {
        return;
    };
    let echo = || KernelSpec::<u64, u64>::echo();
    let Some(p) = launch_or_skip(
        std::slice::from_ref(&rt),
        PipelineSpec::new("gpureload", echo())
            .then(echo())
            .then(echo()),
    ) else {
        return;
    };
    for k in 0..3 {
        let reload = {
            let p = p.clone();
            std::thread::spawn(move || p.reload_stage_blocking(k, echo()))
        };
        send_and_receive_in_order(&p, 5_000, |x| x);
        reload.join().expect("reload thread").expect("reload");
    }
    let r = p.stage_relaunches();
    assert!(
        r.iter().all(|r| (r.reloads, r.generation) == (1, 2)),
        "{r:?}"
    );
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    assert!(t.iter().all(|t| t.messages_out == 15_000), "{t:?}");
}

/// A keyed fan-out of echo stages into an echo join: the route and join tables in mapped
/// pinned memory, the branches writing the join by id (device compare-and-swap on the
/// join's `h2k_head`, system scope).
#[test]
fn a_keyed_fan_out_into_a_join_answers_in_order_on_the_gpu() {
    let _g = support::serial();
    let Some(rt) = runtime("a_keyed_fan_out_into_a_join_answers_in_order_on_the_gpu") else {
        return;
    };
    let echo = || KernelSpec::<u64, u64>::echo();
    let Some(p) = launch_or_skip(
        std::slice::from_ref(&rt),
        PipelineSpec::new("gpufan", echo())
            .fan_out(
                gyre::pipeline::Route::key_at(0),
                (0..3).map(|_| gyre::pipeline::Branch::new(echo())),
            )
            .then(echo()),
    ) else {
        return;
    };
    // Every inner ring in device memory: the branches' (the fan-out writes them at the
    // addresses its K0 read into the route) and the join's (written by id).
    let rings = p.stage_request_rings();
    assert!(
        rings[0].is_none() && rings[1..].iter().all(Option::is_some),
        "{rings:?}"
    );
    send_and_receive_in_order(&p, 10_000, |x| x);
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    let branches: u64 = t[1..4].iter().map(|t| t.messages_out).sum();
    assert_eq!(
        (t[0].messages_out, branches, t[4].messages_out),
        (10_000, 10_000, 10_000)
    );
    for (b, t) in t[1..4].iter().enumerate() {
        let expect = (0..10_000u64)
            .filter(|&x| gyre::pipeline::Route::branch_of(x, 3) == b)
            .count() as u64;
        assert_eq!(t.messages_out, expect, "branch {b}");
    }
    let rings = p.stage_rings();
    assert_eq!((rings[4].h2k_head, rings[0].k2h_head), (10_000, 10_000));
}

/// `Runtime::launch_across`, skipping the case when a copy strategy was planned (no
/// confirmed system scope): said, not a failure of the chain.
fn launch_or_skip(
    runtimes: &[Runtime],
    spec: PipelineSpec<u64, u64>,
) -> Option<gyre::pipeline::Pipeline<u64, u64>> {
    match gyre::Runtime::launch_across(runtimes, spec) {
        Ok(p) => Some(p),
        Err(Error::StrategyUnsupported { reason, .. }) => {
            eprintln!("SKIP: the planned strategy is a copy strategy: {reason}");
            None
        }
        Err(e) => panic!("launch: {e}"),
    }
}

/// `n` requests through `p`, sent from another thread, answered `f(x)` in order. Sends
/// and receives have deadlines: a hung chain fails instead of using up the GPU kit's time.
fn send_and_receive_in_order(
    p: &gyre::pipeline::Pipeline<u64, u64>,
    n: u64,
    f: impl Fn(u64) -> u64,
) {
    for (x, r) in (0..n).zip(deadline::stream(p, n)) {
        assert_eq!(r.expect("recv"), f(x), "reply {x}");
    }
}

/// 2000 requests in order ([`send_and_receive_in_order`]); then shut down, every stage
/// terminated cleanly.
fn serve_in_order(p: &gyre::pipeline::Pipeline<u64, u64>, f: impl Fn(u64) -> u64) {
    send_and_receive_in_order(p, 2000, f);
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// A GPU stage and a CPU stage in one chain, both orders: the CPU stage's region is
/// written by the GPU stage, which cannot address the CPU backend's host memory, so it
/// lives in the CUDA backend's mapped pinned memory (which the CPU stage and the host
/// address too).
#[test]
fn a_cpu_stage_and_a_gpu_stage_chain_across_runtimes() {
    let _g = support::serial();
    let Some(gpu) = runtime("a_cpu_stage_and_a_gpu_stage_chain_across_runtimes") else {
        return;
    };
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime");
    let runtimes = [cpu, gpu];
    let Some(p) = launch_or_skip(
        &runtimes,
        PipelineSpec::new("cpu-gpu", KernelSpec::from_fn("inc", |x: u64| x + 1))
            .then(KernelSpec::<u64, u64>::echo())
            .on(1),
    ) else {
        return;
    };
    serve_in_order(&p, |x| x + 1);
    let Some(p) = launch_or_skip(
        &runtimes,
        PipelineSpec::new("gpu-cpu", KernelSpec::<u64, u64>::echo())
            .on(1)
            .then(KernelSpec::from_fn("triple", |x: u64| x * 3)),
    ) else {
        return;
    };
    assert_eq!(p.backend(), Backend::Cuda { device: 0 });
    // A GPU stage writes the CPU stage's ring: it stays in mapped pinned memory.
    assert_eq!(p.stage_request_rings(), [None, None]);
    serve_in_order(&p, |x| x * 3);
}

/// A chain of echo stages on two GPUs (0, 1, 0): each ring between them in its reader's
/// device memory, written by the other GPU through a peer mapping
/// (`cuCtxEnablePeerAccess`), where the driver allows it; else in portable mapped pinned
/// memory, each GPU writing the other's request ring over its bus. Needs two GPUs: with
/// one it says SKIP.
#[test]
fn a_chain_across_two_gpus_answers_in_order() {
    let _g = support::serial();
    let Some(gpu0) = runtime("a_chain_across_two_gpus_answers_in_order") else {
        return;
    };
    let devices = gyre_cuda::CudaProbe::detect().map_or(0, |i| i.device_count);
    if devices < 2 {
        eprintln!(
            "SKIP a_chain_across_two_gpus_answers_in_order: {devices} CUDA device(s), it \
             needs 2"
        );
        return;
    }
    // What a ring in the other GPU's memory needs: peer access, native atomics, unified
    // addressing and one major compute capability.
    let dev = |i: usize| gyre_cuda::CudaBackend::check_device(i).map(|c| c.device);
    let alike = match (dev(0), dev(1)) {
        (Ok(a), Ok(b)) => {
            a.unified_addressing
                && b.unified_addressing
                && a.compute_capability.0 == b.compute_capability.0
        }
        _ => false,
    };
    let peer = |from: usize, to: usize| match gyre_cuda::p2p::link(from, to) {
        Ok(l) => {
            eprintln!("peer link {from} -> {to}: {l:?}");
            l.can_access_peer && l.access_supported && l.native_atomics && alike
        }
        Err(e) => {
            eprintln!("peer link {from} -> {to}: {e}");
            false
        }
    };
    let (p01, p10) = (peer(0, 1), peer(1, 0));
    let gpu1 = Runtime::builder()
        .backend(Backend::Cuda { device: 1 })
        .build()
        .expect("CUDA runtime on device 1");
    let Some(p) = launch_or_skip(
        &[gpu0, gpu1],
        PipelineSpec::new("two-gpus", KernelSpec::<u64, u64>::echo())
            .then(KernelSpec::<u64, u64>::echo())
            .on(1)
            .then(KernelSpec::<u64, u64>::echo()),
    ) else {
        return;
    };
    // Stage 1's ring (on GPU 1, written by GPU 0) and stage 2's (on GPU 0, written by
    // GPU 1) live in their reader's device memory where the writer's device has peer
    // access to it with native atomics (NVLink), else in portable mapped pinned memory.
    let rings = p.stage_request_rings();
    eprintln!("request rings apart: {rings:?}");
    assert_eq!(
        (rings[0].is_some(), rings[1].is_some(), rings[2].is_some()),
        (false, p01, p10)
    );
    for x in 0..100u64 {
        assert_eq!(p.call_blocking(x).expect("call"), x);
    }
    serve_in_order(&p, |x| x);
}

/// A fan-out across devices (`docs/pipelines.md`, "Across devices"): a GPU stage fans
/// out by key into two GPU branches that write a join on the CPU by id (its region in
/// mapped pinned memory; the producers' compare-and-swaps are one device's). Then the
/// same with one branch on the CPU: its compare-and-swaps and the GPU's meet only where
/// the device reports host-native atomics; over PCIe the launch is refused, said SKIP.
#[test]
fn a_gpu_fan_out_feeds_a_cpu_join() {
    let _g = support::serial();
    let Some(gpu) = runtime("a_gpu_fan_out_feeds_a_cpu_join") else {
        return;
    };
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime");
    let runtimes = [gpu, cpu];
    let echo = || KernelSpec::<u64, u64>::echo();
    let Some(p) = launch_or_skip(
        &runtimes,
        PipelineSpec::new("gpufan-cpujoin", echo())
            .fan_out(
                gyre::pipeline::Route::key_at(0),
                (0..2).map(|_| gyre::pipeline::Branch::new(echo())),
            )
            .then(KernelSpec::from_fn("join", |x: u64| x + 7))
            .on(1),
    ) else {
        return;
    };
    serve_in_order(&p, |x| x + 7);
    let host_native = gyre_cuda::CudaBackend::check_device(0)
        .expect("device 0")
        .device
        .host_native_atomic_supported;
    match gyre::Runtime::launch_across(
        &runtimes,
        PipelineSpec::new("gpufan-mixed", echo())
            .fan_out(
                gyre::pipeline::Route::RoundRobin,
                [
                    gyre::pipeline::Branch::new(echo()),
                    gyre::pipeline::Branch::new(KernelSpec::from_fn("cpu", |x: u64| x)),
                ],
            )
            .on(1) // the CPU branch
            .then(KernelSpec::from_fn("join", |x: u64| x + 7))
            .on(1),
    ) {
        Ok(p) => {
            assert!(host_native, "mixed branches over PCIe must be refused");
            serve_in_order(&p, |x| x + 7);
        }
        Err(Error::Pipeline { stage, reason, .. }) if !host_native => {
            assert_eq!(stage, 1, "the GPU branch: {reason}");
            assert!(reason.contains("compare-and-swap"), "{reason}");
            eprintln!("SKIP running the mixed branches (refused, as it must be): {reason}");
        }
        Err(e) => panic!("mixed branches (host-native atomics: {host_native}): {e}"),
    }
}

/// The cases every backend runs (`tests/pipeline_cases/`), on CUDA device 0, one at a
/// time.
macro_rules! cuda_cases {
    ($($case:ident),* $(,)?) => {
        $(#[test]
        fn $case() {
            let _g = support::serial();
            if !support::available(stringify!($case)) {
                return;
            }
            pipeline_cases::$case(pipeline_cases::Target::Cuda);
        })*
    };
}

cuda_cases!(
    a_chain_answers_in_order_and_counts_every_message,
    each_stage_is_reloaded_under_a_stream,
    a_stage_that_panics_is_restarted_in_place,
    a_stage_chains_with_a_cpu_stage_across_runtimes,
);
