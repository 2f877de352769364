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

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{msg, pinned_echo, warmed, Imp, Msg, Session, Summary, CAPACITY};
use criterion::Criterion;
use gyre::{Backend, Kernel, KernelSpec, Runtime, TransferStrategy};

const WARM_UP_RUN: u64 = 100;
const BATCH: usize = 64;

fn launch(strategy: TransferStrategy) -> Kernel<Msg, Msg> {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(strategy)
        .build()
        .expect("gyre runtime");
    let spec = KernelSpec::<Msg, Msg>::raw("echo", pinned_echo()).capacity(CAPACITY as u32);
    let k = rt.launch(spec).expect("launching the echo kernel");
    let probe: Msg = core::array::from_fn(|i| i as u8);
    assert_eq!(k.call_blocking(probe).expect("first call"), probe);
    k
}

fn dma(us: u64) -> TransferStrategy {
    TransferStrategy::dma_polling(Duration::from_micros(us)).expect("interval")
}

struct Rtt(Kernel<Msg, Msg>);

impl Session for Rtt {
    fn run(&mut self, n: u64) -> Duration {
        let m = msg();
        let t = Instant::now();
        for _ in 0..n {
            black_box(self.0.call_blocking(m).expect("call"));
        }
        t.elapsed()
    }
}

struct Tput(Kernel<Msg, Msg>);

impl Session for Tput {
    fn run(&mut self, n: u64) -> Duration {
        let batch = [msg(); BATCH];
        let mut out: Vec<gyre::Result<Msg>> = Vec::with_capacity(BATCH);
        let (mut sent, mut recvd) = (0u64, 0u64);
        let t = Instant::now();
        while recvd < n {
            let k = ((n - sent) as usize).min(BATCH);
            if k > 0 && self.0.try_send_batch(&batch[..k]).is_ok() {
                sent += k as u64;
            }
            out.clear();
            let got = self.0.try_recv_batch(&mut out, BATCH).expect("recv") as u64;
            recvd += got;
            black_box(&out);
            if got == 0 {
                // Give a copy thread sharing this core a turn (two cores here).
                std::thread::yield_now();
            }
        }
        t.elapsed()
    }
}

impl Drop for Rtt {
    fn drop(&mut self) {
        self.0.shutdown_blocking().expect("shutdown");
    }
}

impl Drop for Tput {
    fn drop(&mut self) {
        self.0.shutdown_blocking().expect("shutdown");
    }
}

macro_rules! imps {
    ($session:ident) => {
        &[
            Imp {
                name: "unified",
                start: || {
                    warmed(
                        Box::new($session(launch(TransferStrategy::Unified))),
                        WARM_UP_RUN,
                    )
                },
            },
            Imp {
                name: "sync",
                start: || {
                    warmed(
                        Box::new($session(launch(TransferStrategy::Sync))),
                        WARM_UP_RUN,
                    )
                },
            },
            Imp {
                name: "async",
                start: || {
                    warmed(
                        Box::new($session(launch(TransferStrategy::Async))),
                        WARM_UP_RUN,
                    )
                },
            },
            Imp {
                name: "dma_polling_10us",
                start: || warmed(Box::new($session(launch(dma(10)))), WARM_UP_RUN),
            },
            Imp {
                name: "dma_polling_100us",
                start: || warmed(Box::new($session(launch(dma(100)))), WARM_UP_RUN),
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
    impls: imps!(Rtt),
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
    impls: imps!(Tput),
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
