//! The pipeline cases that every backend runs (`docs/pipelines.md`), written once: the
//! CPU backend's binary (`tests/pipeline.rs`), OpenCL's (`tests/pipeline_opencl.rs`, on
//! PoCL in CI) and CUDA's (`tests/pipeline_cuda.rs`, the GPU kit) call them with their
//! [`Target`], after their own guards (a device present, one case at a time). Each
//! stage is the built-in echo or a portable handler (`#[gyre::handler]`), which runs as
//! Rust on the CPU backend and as generated device code elsewhere. What only one backend
//! has (OpenCL's compute-unit limit, CUDA's inner rings in device memory, the CPU
//! backend's fault table) stays in its own binary. A binary that runs them declares
//! `mod deadline` (`tests/support/deadline.rs`) at its root.

#![allow(dead_code)]

use std::time::Duration;

use gyre::{
    pipeline::{Pipeline, PipelineSpec},
    Backend, Error, KernelSpec, KernelState, RestartPolicy, Runtime,
};

// `support/deadline.rs`, which every binary that runs these cases declares at its root.
use crate::deadline;
#[path = "../support/fragile.rs"]
pub mod fragile;

/// Where a case runs.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The CPU backend.
    Cpu,
    /// An OpenCL device (platform, device).
    OpenCl(usize, usize),
    /// CUDA device 0.
    Cuda,
}

impl Target {
    pub fn backend(self) -> Backend {
        match self {
            Target::Cpu => Backend::Cpu,
            Target::OpenCl(platform, device) => Backend::OpenCl { platform, device },
            Target::Cuda => Backend::Cuda { device: 0 },
        }
    }

    pub fn rt(self) -> Runtime {
        Runtime::builder()
            .backend(self.backend())
            .build()
            .expect("runtime")
    }

    /// Requests streamed through a chain: fewer where a stage is one slow work-item
    /// (PoCL).
    fn stream(self) -> u64 {
        match self {
            Target::OpenCl(..) => 2_000,
            _ => 10_000,
        }
    }
}

/// x -> 10 x + 1: shows which stage ran, in which order.
#[gyre::handler]
pub fn affine(x: u64) -> u64 {
    x * 10 + 1
}

/// x -> 10 x + 2: [`affine`]'s reload.
#[gyre::handler]
pub fn affine2(x: u64) -> u64 {
    x * 10 + 2
}

/// `Runtime::launch_across`, skipping the case when the planned strategy is a copy
/// strategy (CUDA without confirmed system scope): said, not a failure of the chain.
pub fn launch(runtimes: &[Runtime], spec: PipelineSpec<u64, u64>) -> Option<Pipeline<u64, u64>> {
    match Runtime::launch_across(runtimes, spec) {
        Ok(p) => Some(p),
        Err(Error::StrategyUnsupported { reason, .. }) => {
            eprintln!("SKIP: the planned strategy is a copy strategy: {reason}");
            None
        }
        Err(e) => panic!("launch: {e}"),
    }
}

/// `n` requests through `p`, sent from another thread, answered `f(x)` in order, every
/// send and receive with a deadline (a hung chain fails instead of hanging).
pub fn in_order(p: &Pipeline<u64, u64>, n: u64, f: impl Fn(u64) -> u64) {
    for (x, r) in (0..n).zip(deadline::stream(p, n)) {
        assert_eq!(r.expect("recv"), f(x), "reply {x}");
    }
}

/// Shuts `p` down: every stage terminated cleanly.
fn shut_down(p: &Pipeline<u64, u64>) {
    p.shutdown_blocking().expect("shutdown");
    assert!(
        p.stage_states()
            .iter()
            .all(|s| *s == KernelState::Terminated { code: 0 }),
        "{:?}",
        p.stage_states()
    );
}

/// Two stages (echo, then [`affine`]): calls, then a stream larger than the rings, in
/// order; every stage counts every message.
pub fn a_chain_answers_in_order_and_counts_every_message(t: Target) {
    let Some(p) = launch(
        &[t.rt()],
        PipelineSpec::new("two", KernelSpec::<u64, u64>::echo()).then(KernelSpec::portable(affine)),
    ) else {
        return;
    };
    assert_eq!(p.backend(), t.backend());
    for x in 0..100u64 {
        assert_eq!(p.call_blocking(x).expect("call"), 10 * x + 1);
    }
    let n = t.stream();
    in_order(&p, n, |x| 10 * x + 1);
    shut_down(&p);
    let out = p.stage_telemetry().expect("telemetry");
    assert!(out.iter().all(|s| s.messages_out == n + 100), "{out:?}");
}

/// Each stage reloaded in turn (`Pipeline::reload_stage`) while a stream runs through
/// the chain: the stage hands over at a batch boundary, its successor continues on the
/// same rings; the last stage's new handler answers from one reply on, once; nothing
/// lost, in order.
pub fn each_stage_is_reloaded_under_a_stream(t: Target) {
    let Some(p) = launch(
        &[t.rt()],
        PipelineSpec::new("reload", KernelSpec::<u64, u64>::echo())
            .then(KernelSpec::portable(affine)),
    ) else {
        return;
    };
    let n = t.stream() / 2;
    // The head: the same handler again, under the stream.
    let reload = {
        let p = p.clone();
        std::thread::spawn(move || p.reload_stage_blocking(0, KernelSpec::<u64, u64>::echo()))
    };
    in_order(&p, n, |x| 10 * x + 1);
    reload.join().expect("reload thread").expect("reload 0");
    // The last stage: a new handler; one switch from the old answers to the new.
    let reload = {
        let p = p.clone();
        std::thread::spawn(move || p.reload_stage_blocking(1, KernelSpec::portable(affine2)))
    };
    let mut switched = false;
    for (x, r) in (0..n).zip(deadline::stream(&p, n)) {
        let v = r.expect("recv");
        switched |= v == 10 * x + 2;
        assert!(v == 10 * x + 1 && !switched || v == 10 * x + 2, "{x}: {v}");
    }
    reload.join().expect("reload thread").expect("reload 1");
    assert_eq!(p.call_blocking(4).expect("call"), 42);
    let r = p.stage_relaunches();
    assert!(
        r.iter().all(|r| (r.reloads, r.generation) == (1, 2)),
        "{r:?}"
    );
    shut_down(&p);
    let out = p.stage_telemetry().expect("telemetry");
    assert!(out.iter().all(|s| s.messages_out == 2 * n + 1), "{out:?}");
}

/// A stage whose handler panics (a division by zero, [`fragile::fragile`]) is restarted
/// in place under its policy while the stage before it keeps running: the requests that
/// faulted are the only ones that fail, the others are answered in order.
pub fn a_stage_that_panics_is_restarted_in_place(t: Target) {
    const N: u64 = 200;
    let Some(p) = launch(
        &[t.rt()],
        PipelineSpec::new("restart", KernelSpec::<u64, u64>::echo().capacity(16)).then(
            KernelSpec::portable(fragile::fragile).capacity(16).restart(
                RestartPolicy::new(100)
                    .backoff(Duration::from_micros(100), Duration::from_millis(2)),
            ),
        ),
    ) else {
        return;
    };
    let faults = fragile::check(&deadline::stream(&p, N));
    assert_eq!(faults, N.div_ceil(16));
    fragile::until_restarts(&p, 1, faults);
    shut_down(&p);
    assert_eq!(p.stage_restarts(), [0, faults]);
}

/// A stage on `t` and a CPU stage in one chain, both orders, over two runtimes
/// (`Runtime::launch_across`): a region a device stage writes is the device backend's
/// memory, which the CPU stage and the host address too.
pub fn a_stage_chains_with_a_cpu_stage_across_runtimes(t: Target) {
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime");
    let runtimes = [cpu, t.rt()];
    let Some(p) = launch(
        &runtimes,
        PipelineSpec::new("cpu-then", KernelSpec::from_fn("inc", |x: u64| x + 1))
            .then(KernelSpec::portable(affine))
            .on(1),
    ) else {
        return;
    };
    assert_eq!(p.backend(), Backend::Cpu, "the host's side is the head's");
    in_order(&p, 2_000, |x| 10 * (x + 1) + 1);
    shut_down(&p);
    let Some(p) = launch(
        &runtimes,
        PipelineSpec::new("then-cpu", KernelSpec::portable(affine))
            .on(1)
            .then(KernelSpec::from_fn("triple", |x: u64| x * 3)),
    ) else {
        return;
    };
    assert_eq!(p.backend(), t.backend());
    in_order(&p, 2_000, |x| 3 * (10 * x + 1));
    shut_down(&p);
}
