//! Round-trip time of one 64-byte request and its reply (`[u8; 64]`, echo server) between
//! two threads pinned to two different cores: gyre's CPU backend beside its peers, in the
//! same run.
//!
//! The bench's main thread (the client) is pinned to core 0 and every server thread to
//! core 1. gyre spawns its kernel thread itself (`gyre-cpu-echo`); the bench kernel's
//! handler pins that thread to core 1 on its first request (see `common::pinned_echo`).
//!
//! Only one implementation's server exists at a time: each busy-spins on core 1, so two of
//! them alive together would share the core. Servers are started before a measurement
//! and stopped right after it.
//!
//! Implementations:
//!
//! - `atomic_pingpong`: the floor, two `CachePadded<AtomicU64>`s written by one side each.
//! - `rtrb`: two `rtrb` SPSC rings (requests, replies), both sides busy-spinning.
//! - `crossbeam`: two bounded `crossbeam-channel`s, both sides busy-spinning on `try_recv`.
//! - `tokio`: `mpsc` + `oneshot`, client and server each on its own current-thread runtime.
//! - `gyre_blocking`: `Kernel::call_blocking`, `IdleStrategy::BusySpin` on both sides.
//! - `gyre_async`: `k.call(msg).await` on a current-thread tokio runtime on core 0.
//! - `gyre_opencl` (where an OpenCL device is present): `call_blocking` on the built-in
//!   echo running as a persistent work-group on the OpenCL backend; on PoCL that is a CPU
//!   thread PoCL places itself. A correctness vehicle, listed for context, not a speed
//!   claim (docs/benchmarks.md, docs/opencl.md).
//!
//! `cargo bench --bench rtt` runs criterion (three interleaved rounds of every
//! implementation); `GYRE_BENCH_SUMMARY=1 cargo bench --bench rtt` runs the quick
//! interleaved summary instead (rounds x implementations, median of per-round medians,
//! rounds with a placement change dropped) and prints the table and ratios recorded in
//! docs/benchmarks.md. `GYRE_BENCH_ONLY=name,..` limits the summary to some
//! implementations (for profiling).

mod common;

use std::hint::black_box;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{
    launch_gyre, launch_gyre_opencl, msg, spawn_server, warmed, BlockingCalls, Imp, Msg, Session,
    Summary, CAPACITY,
};
use criterion::Criterion;
use crossbeam_utils::CachePadded;
use gyre::{Kernel, Runtime};

/// Round trips each session does per warm-up run (see `common::warmed`).
const WARM_UP_RUN: u64 = 100;

// ----------------------------------------------------------------------------------------
// Sessions: one implementation's client and server, alive for one measurement; `run(n)`
// does `n` round trips.

/// Interleaved order: every gyre measurement sits between two peer measurements.
const IMPLS: &[Imp] = &[
    Imp {
        name: "atomic_pingpong",
        start: PingPong::start,
    },
    Imp {
        name: "gyre_blocking",
        start: gyre_blocking,
    },
    Imp {
        name: "rtrb",
        start: Rtrb::start,
    },
    Imp {
        name: "gyre_async",
        start: GyreAsync::start,
    },
    Imp {
        name: "crossbeam",
        start: Crossbeam::start,
    },
    Imp {
        name: "tokio",
        start: Tokio::start,
    },
];

// --- floor: two atomics on separate cache lines ------------------------------------------

struct PingPong {
    ping: Arc<CachePadded<AtomicU64>>,
    pong: Arc<CachePadded<AtomicU64>>,
    seq: u64,
    server: Option<JoinHandle<()>>,
}

impl PingPong {
    const STOP: u64 = u64::MAX;

    fn start() -> Box<dyn Session> {
        warmed(Box::new(Self::spawn()), WARM_UP_RUN)
    }

    fn spawn() -> Self {
        let ping = Arc::new(CachePadded::new(AtomicU64::new(0)));
        let pong = Arc::new(CachePadded::new(AtomicU64::new(0)));
        let (pi, po) = (ping.clone(), pong.clone());
        let server = spawn_server("rtt-pingpong", move || {
            let mut last = 0;
            loop {
                let v = pi.load(Acquire);
                if v == last {
                    core::hint::spin_loop();
                    continue;
                }
                if v == Self::STOP {
                    return;
                }
                po.store(v, Release);
                last = v;
            }
        });
        Self {
            ping,
            pong,
            seq: 0,
            server: Some(server),
        }
    }
}

impl Session for PingPong {
    fn run(&mut self, iters: u64) -> Duration {
        let t = Instant::now();
        for _ in 0..iters {
            self.seq += 1;
            self.ping.store(self.seq, Release);
            while self.pong.load(Acquire) != self.seq {
                core::hint::spin_loop();
            }
        }
        t.elapsed()
    }
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.ping.store(Self::STOP, Release);
        if let Some(s) = self.server.take() {
            s.join().unwrap();
        }
    }
}

// --- rtrb: two SPSC rings ------------------------------------------------------------------

struct Rtrb {
    req: rtrb::Producer<Msg>,
    rep: rtrb::Consumer<Msg>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl Rtrb {
    fn start() -> Box<dyn Session> {
        let (req, mut req_rx) = rtrb::RingBuffer::<Msg>::new(CAPACITY);
        let (mut rep_tx, rep) = rtrb::RingBuffer::<Msg>::new(CAPACITY);
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let server = spawn_server("rtt-rtrb", move || loop {
            match req_rx.pop() {
                Ok(m) => {
                    let mut m = m;
                    while let Err(rtrb::PushError::Full(back)) = rep_tx.push(m) {
                        m = back;
                        core::hint::spin_loop();
                    }
                }
                Err(_) => {
                    if st.load(Relaxed) {
                        return;
                    }
                    core::hint::spin_loop();
                }
            }
        });
        warmed(
            Box::new(Self {
                req,
                rep,
                stop,
                server: Some(server),
            }),
            WARM_UP_RUN,
        )
    }
}

impl Session for Rtrb {
    fn run(&mut self, iters: u64) -> Duration {
        let m = msg();
        let t = Instant::now();
        for _ in 0..iters {
            self.req.push(m).expect("request ring full");
            let r = loop {
                match self.rep.pop() {
                    Ok(r) => break r,
                    Err(_) => core::hint::spin_loop(),
                }
            };
            black_box(r);
        }
        t.elapsed()
    }
}

impl Drop for Rtrb {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(s) = self.server.take() {
            s.join().unwrap();
        }
    }
}

// --- crossbeam-channel: two bounded channels -----------------------------------------------

struct Crossbeam {
    req: Option<crossbeam_channel::Sender<Msg>>,
    rep: crossbeam_channel::Receiver<Msg>,
    server: Option<JoinHandle<()>>,
}

impl Crossbeam {
    fn start() -> Box<dyn Session> {
        let (req, req_rx) = crossbeam_channel::bounded::<Msg>(CAPACITY);
        let (rep_tx, rep) = crossbeam_channel::bounded::<Msg>(CAPACITY);
        let server = spawn_server("rtt-crossbeam", move || loop {
            match req_rx.try_recv() {
                Ok(m) => rep_tx.send(m).expect("reply channel closed"),
                Err(crossbeam_channel::TryRecvError::Empty) => core::hint::spin_loop(),
                Err(crossbeam_channel::TryRecvError::Disconnected) => return,
            }
        });
        warmed(
            Box::new(Self {
                req: Some(req),
                rep,
                server: Some(server),
            }),
            WARM_UP_RUN,
        )
    }
}

impl Session for Crossbeam {
    fn run(&mut self, iters: u64) -> Duration {
        let m = msg();
        let req = self.req.as_ref().expect("open");
        let t = Instant::now();
        for _ in 0..iters {
            req.try_send(m).expect("request channel full");
            let r = loop {
                match self.rep.try_recv() {
                    Ok(r) => break r,
                    Err(_) => core::hint::spin_loop(),
                }
            };
            black_box(r);
        }
        t.elapsed()
    }
}

impl Drop for Crossbeam {
    fn drop(&mut self) {
        self.req.take();
        if let Some(s) = self.server.take() {
            s.join().unwrap();
        }
    }
}

// --- tokio: mpsc + oneshot, two current-thread runtimes ------------------------------------

type TokioReq = (Msg, tokio::sync::oneshot::Sender<Msg>);

struct Tokio {
    rt: tokio::runtime::Runtime,
    req: Option<tokio::sync::mpsc::Sender<TokioReq>>,
    server: Option<JoinHandle<()>>,
}

impl Tokio {
    fn start() -> Box<dyn Session> {
        let (req, mut req_rx) = tokio::sync::mpsc::channel::<TokioReq>(CAPACITY);
        let server = spawn_server("rtt-tokio", move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                while let Some((m, reply)) = req_rx.recv().await {
                    let _ = reply.send(m);
                }
            });
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("client runtime");
        warmed(
            Box::new(Self {
                rt,
                req: Some(req),
                server: Some(server),
            }),
            WARM_UP_RUN,
        )
    }
}

impl Session for Tokio {
    fn run(&mut self, iters: u64) -> Duration {
        let m = msg();
        let req = self.req.clone().expect("open");
        self.rt.block_on(async move {
            let t = Instant::now();
            for _ in 0..iters {
                let (tx, rx) = tokio::sync::oneshot::channel();
                req.send((m, tx)).await.expect("server gone");
                black_box(rx.await.expect("no reply"));
            }
            t.elapsed()
        })
    }
}

impl Drop for Tokio {
    fn drop(&mut self) {
        self.req.take();
        if let Some(s) = self.server.take() {
            s.join().unwrap();
        }
    }
}

// --- gyre ------------------------------------------------------------------------------

/// `gyre_blocking`: [`BlockingCalls`] on the CPU backend's pinned echo.
fn gyre_blocking() -> Box<dyn Session> {
    let rt = Runtime::builder().build().expect("gyre runtime");
    warmed(Box::new(BlockingCalls(launch_gyre(&rt))), WARM_UP_RUN)
}

struct GyreAsync {
    rt: tokio::runtime::Runtime,
    k: Kernel<Msg, Msg>,
}

impl GyreAsync {
    fn start() -> Box<dyn Session> {
        let grt = Runtime::builder().build().expect("gyre runtime");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("client runtime");
        warmed(
            Box::new(Self {
                rt,
                k: launch_gyre(&grt),
            }),
            WARM_UP_RUN,
        )
    }
}

impl Session for GyreAsync {
    fn run(&mut self, iters: u64) -> Duration {
        let m = msg();
        let k = &self.k;
        self.rt.block_on(async move {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(k.call(m).await.expect("call"));
            }
            t.elapsed()
        })
    }
}

impl Drop for GyreAsync {
    fn drop(&mut self) {
        self.k.shutdown_blocking().expect("shutdown");
    }
}

/// The OpenCL rows, added by `common::main` when a device is present.
const OPENCL_IMPLS: &[Imp] = &[Imp {
    name: "gyre_opencl",
    start: gyre_opencl,
}];

/// `gyre_opencl`: [`BlockingCalls`] on the OpenCL device's echo.
fn gyre_opencl() -> Box<dyn Session> {
    warmed(Box::new(BlockingCalls(launch_gyre_opencl())), WARM_UP_RUN)
}

// ----------------------------------------------------------------------------------------
// criterion

/// Rounds of the whole group: core-to-core latency on these VMs drifts between minutes, so
/// every implementation is measured in each round, next to the others.
const CRITERION_ROUNDS: usize = 3;

fn criterion_benches(c: &mut Criterion, impls: &[Imp]) {
    for round in 1..=CRITERION_ROUNDS {
        let mut g = c.benchmark_group(format!("rtt_round{round}"));
        for imp in impls {
            let mut s = (imp.start)();
            g.bench_function(imp.name, |b| b.iter_custom(|iters| s.run(iters)));
            drop(s);
        }
        g.finish();
    }
}

// ----------------------------------------------------------------------------------------
// summary mode (GYRE_BENCH_SUMMARY=1; the method is in common/mod.rs)

const SUMMARY: Summary = Summary {
    title: "gyre rtt summary: 64-byte request + echo reply, client on core 0, server on core 1",
    unit: "ns/RTT",
    impls: IMPLS,
    targets: &[
        ("gyre_blocking", "atomic_pingpong", 2.0),
        ("gyre_blocking", "rtrb", 1.1),
        ("gyre_blocking", "crossbeam", 0.8),
        ("gyre_async", "gyre_blocking", 1.5),
        ("gyre_async", "tokio", 0.0),
    ],
    higher_is_better: false,
    run_target: Duration::from_millis(20),
    min_ops: 1000,
    max_ops: 2_000_000,
    // ns per round trip
    figure: |n, d| d.as_nanos() as f64 / n as f64,
    placement_probe,
    own_threads: 0,
};

/// The atomic ping-pong RTT now, in ns (a few ms): the VM's current core placement.
fn placement_probe() -> f64 {
    let mut s = PingPong::spawn();
    let n = 20_000;
    s.run(n);
    s.run(n).as_nanos() as f64 / n as f64
}

fn main() {
    common::main(
        &SUMMARY,
        OPENCL_IMPLS,
        &[("gyre_opencl", "gyre_blocking", 0.0)],
        criterion_benches,
    );
}
