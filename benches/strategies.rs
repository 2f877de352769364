//! The four transfer strategies side by side on the CPU backend, in the same run: the
//! round-trip time of one 64-byte echo (`call_blocking`) and the throughput of batched
//! sends and receives (`try_send_batch` / `try_recv_batch` of 64).
//!
//! - `unified`: zero copy, host and kernel share the rings (the default on the CPU).
//! - `sync`: device-resident rings; the caller's thread copies (publish pushes, a waiter
//!   pulls).
//! - `async`: the same copies on a copy worker thread, signalled by the caller.
//! - `dma_polling_10us` / `dma_polling_100us`: a poller copies both ways every interval.
//!
//! Unlike `rtt` and `throughput`, both sides use the spec's default **backoff** idle
//! strategy (spin, yield, park), not busy-spin: the copy strategies add a thread
//! (`async`, `dma-polling`) that needs a core, and this machine has two, one of which the
//! kernel thread is pinned to. The figures compare the strategies with each other, not
//! with the busy-spin figures of the other benches.
//!
//! `GYRE_BENCH_SUMMARY=1 cargo bench --bench strategies` prints both tables and the
//! ratios to `unified` recorded in docs/benchmarks.md; `cargo bench --bench strategies`
//! runs criterion on the RTT.

mod common;

use std::time::Duration;

use common::{
    batched_echo, pinned_echo, warmed, BlockingCalls, Imp, Msg, Session, Summary, CAPACITY,
};
use criterion::Criterion;
use gyre::{Backend, Kernel, KernelSpec, Runtime, TransferStrategy};

const WARM_UP_RUN: u64 = 100;

fn launch(strategy: TransferStrategy) -> Kernel<Msg, Msg> {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(strategy)
        .build()
        .expect("gyre runtime");
    let spec = KernelSpec::<Msg, Msg>::raw("echo", pinned_echo()).capacity(CAPACITY);
    let k = rt.launch(spec).expect("launching the echo kernel");
    let probe: Msg = core::array::from_fn(|i| i as u8);
    assert_eq!(k.call_blocking(probe).expect("first call"), probe);
    k
}

fn dma(us: u64) -> TransferStrategy {
    TransferStrategy::dma_polling(Duration::from_micros(us)).expect("interval")
}

/// Batched sends and receives (`common::batched_echo`, yielding when idle) on a kernel
/// owned through [`BlockingCalls`] (which shuts it down on drop).
struct Tput(BlockingCalls);

impl Session for Tput {
    fn run(&mut self, n: u64) -> Duration {
        // Yield when a poll brought nothing: a copy thread may share this core (two here).
        batched_echo(&self.0 .0, n, true)
    }
}

/// A warmed session on a fresh kernel under `strategy`: RTT (blocking calls) or batched
/// throughput.
fn start(strategy: TransferStrategy, batched: bool) -> Box<dyn Session> {
    let k = BlockingCalls(launch(strategy));
    let s: Box<dyn Session> = if batched {
        Box::new(Tput(k))
    } else {
        Box::new(k)
    };
    warmed(s, WARM_UP_RUN)
}

macro_rules! imps {
    ($batched:expr) => {
        &[
            Imp {
                name: "unified",
                start: || start(TransferStrategy::Unified, $batched),
            },
            Imp {
                name: "sync",
                start: || start(TransferStrategy::Sync, $batched),
            },
            Imp {
                name: "async",
                start: || start(TransferStrategy::Async, $batched),
            },
            Imp {
                name: "dma_polling_10us",
                start: || start(dma(10), $batched),
            },
            Imp {
                name: "dma_polling_100us",
                start: || start(dma(100), $batched),
            },
        ]
    };
}

const TARGETS: &[(&str, &str, f64)] = &[
    ("sync", "unified", 0.0),
    ("async", "unified", 0.0),
    ("dma_polling_10us", "unified", 0.0),
    ("dma_polling_100us", "unified", 0.0),
];

const RTT: Summary = Summary {
    title: "gyre strategies: RTT of a 64-byte echo, CPU backend, backoff idle",
    unit: "ns/RTT",
    impls: imps!(false),
    targets: TARGETS,
    higher_is_better: false,
    run_target: Duration::from_millis(20),
    min_ops: 100,
    max_ops: 2_000_000,
    figure: |n, d| d.as_nanos() as f64 / n as f64,
    placement_probe: common::pingpong_probe,
    // async and dma-polling run a copy thread
    own_threads: 1,
};

const TPUT: Summary = Summary {
    title: "gyre strategies: throughput, batches of 64 x 64 B, CPU backend, backoff idle",
    unit: "Mmsg/s",
    impls: imps!(true),
    targets: TARGETS,
    higher_is_better: true,
    run_target: Duration::from_millis(20),
    min_ops: 1000,
    max_ops: 20_000_000,
    figure: |n, d| n as f64 / d.as_secs_f64() / 1e6,
    placement_probe: common::pingpong_probe,
    // async and dma-polling run a copy thread
    own_threads: 1,
};

fn criterion_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("strategies_rtt");
    for imp in RTT.impls {
        let mut s = (imp.start)();
        g.bench_function(imp.name, |b| b.iter_custom(|iters| s.run(iters)));
        drop(s);
    }
    g.finish();
}

fn main() {
    common::main_many(&[&RTT, &TPUT], criterion_benches);
}
