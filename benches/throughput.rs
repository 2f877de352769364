//! One-way message rate of 64-byte messages (`[u8; 64]`) between two threads pinned to two
//! different cores: gyre's request ring (with every reply drained) beside `rtrb`, in the
//! same run.
//!
//! The bench's main thread is pinned to core 0; the other thread (the rtrb consumer or
//! server, gyre's kernel thread) to core 1. gyre's kernel thread pins itself on its first
//! request (see `common::pinned_echo`). Only one implementation's second thread exists at a time.
//!
//! Implementations (messages per second, counted once each, request direction):
//!
//! - `rtrb_single`: main pushes one message at a time, the consumer pops one at a time.
//! - `rtrb_batch64`: main writes chunks of 64 (`write_chunk_uninit` + `fill_from_iter`),
//!   the consumer reads chunks of up to 64 (`read_chunk` + `commit_all`).
//! - `gyre_single`: main keeps the request ring full with `try_send` and drains the echo
//!   replies with `try_recv` on the same thread; the kernel echoes on core 1.
//! - `gyre_batch64`: the same with `try_send_batch` of 64 and `try_recv_batch` of up to 64.
//! - `gyre_single_notel`, `gyre_batch64_notel`: context rows, the same with the kernel's
//!   telemetry off (`KernelSpec::telemetry(false)`): the cost of telemetry on the hot path.
//! - `gyre_opencl_single`, `gyre_opencl_batch64` (where an OpenCL device is present): the
//!   gyre rows with the built-in echo as a persistent work-group on the OpenCL backend (on
//!   PoCL: a CPU thread PoCL places itself). Context, not a speed claim (docs/opencl.md).
//! - `rtrb_echo_single`, `rtrb_echo_batch64`: context rows, the like-for-like peer of the
//!   gyre rows: the same request + reply ring pair and the same main-thread loop as gyre,
//!   over two rtrb rings with an echo thread on core 1.
//! - `rtrb_echo_batch64_128b`: context, `rtrb_echo_batch64` with 128-byte messages: the
//!   cache lines a gyre slot moves (a 64-byte header and a 64-byte payload each way),
//!   for telling the cost of lines between the cores from the cost of everything else.
//!
//! Why gyre's replies are drained on the main thread and not on a third thread: the machine
//! has two cores and the kernel thread busy-spins on one of them, so a third spinning
//! thread would share a core with one of the other two and measure the scheduler. With the
//! producer and the reply consumer on core 0 and the kernel on core 1, gyre uses the same
//! two cores as rtrb; it moves twice the messages (every request has a reply), which is why
//! the `rtrb_echo_*` rows are shown too.
//!
//! `cargo bench --bench throughput` runs criterion; `GYRE_BENCH_SUMMARY=1 cargo bench
//! --bench throughput` runs the quick interleaved summary recorded in docs/benchmarks.md
//! (`GYRE_BENCH_ONLY=name,..` limits it to some implementations).

mod common;

use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{
    batched_echo, launch_gyre, launch_gyre_opencl, launch_gyre_with, msg, spawn_server, warmed,
    Imp, Msg, Session, Summary, BATCH, CAPACITY,
};
use criterion::{Criterion, Throughput};
use crossbeam_utils::CachePadded;
use gyre::{Kernel, Runtime};

/// Messages each session moves per warm-up run (see `common::warmed`).
const WARM_UP_RUN: u64 = 10_000;

// ----------------------------------------------------------------------------------------
// Sessions: `run(n)` moves `n` messages and returns the time until the last one was
// consumed (for gyre: its reply drained).

/// Interleaved order: each gyre measurement sits next to its rtrb peer.
const IMPLS: &[Imp] = &[
    Imp {
        name: "rtrb_single",
        start: || RtrbOneWay::start(false),
    },
    Imp {
        name: "gyre_single",
        start: || Gyre::start(false, true),
    },
    Imp {
        name: "gyre_single_notel",
        start: || Gyre::start(false, false),
    },
    Imp {
        name: "rtrb_batch64",
        start: || RtrbOneWay::start(true),
    },
    Imp {
        name: "gyre_batch64",
        start: || Gyre::start(true, true),
    },
    Imp {
        name: "gyre_batch64_notel",
        start: || Gyre::start(true, false),
    },
    Imp {
        name: "rtrb_echo_single",
        start: || RtrbEcho::start(false, msg()),
    },
    Imp {
        name: "rtrb_echo_batch64",
        start: || RtrbEcho::start(true, msg()),
    },
    Imp {
        name: "rtrb_echo_batch64_128b",
        start: || RtrbEcho::start(true, [7u8; 128]),
    },
];

fn stop_and_join(stop: &AtomicBool, server: &mut Option<JoinHandle<()>>) {
    stop.store(true, Relaxed);
    if let Some(s) = server.take() {
        s.join().unwrap();
    }
}

// --- rtrb, one way -------------------------------------------------------------------------

struct RtrbOneWay {
    tx: rtrb::Producer<Msg>,
    batched: bool,
    /// Messages consumed so far, written by the consumer (its own cache line).
    consumed: Arc<CachePadded<AtomicU64>>,
    sent: u64,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl RtrbOneWay {
    fn start(batched: bool) -> Box<dyn Session> {
        let (tx, mut rx) = rtrb::RingBuffer::<Msg>::new(CAPACITY);
        let consumed = Arc::new(CachePadded::new(AtomicU64::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (consumed.clone(), stop.clone());
        let server = spawn_server("tput-rtrb", move || {
            let mut count = 0u64;
            loop {
                let got = if batched {
                    match rx.read_chunk(rx.slots().min(BATCH)) {
                        Ok(chunk) if !chunk.is_empty() => {
                            let (a, b) = chunk.as_slices();
                            for m in a.iter().chain(b) {
                                black_box(*m);
                            }
                            let k = chunk.len();
                            chunk.commit_all();
                            k as u64
                        }
                        _ => 0,
                    }
                } else {
                    match rx.pop() {
                        Ok(m) => {
                            black_box(m);
                            1
                        }
                        Err(_) => 0,
                    }
                };
                if got > 0 {
                    count += got;
                    c.store(count, Release);
                } else {
                    if st.load(Relaxed) {
                        return;
                    }
                    core::hint::spin_loop();
                }
            }
        });
        warmed(
            Box::new(Self {
                tx,
                batched,
                consumed,
                sent: 0,
                stop,
                server: Some(server),
            }),
            WARM_UP_RUN,
        )
    }
}

impl Session for RtrbOneWay {
    fn run(&mut self, n: u64) -> Duration {
        let m = msg();
        let t = Instant::now();
        let target = self.sent + n;
        if self.batched {
            while self.sent < target {
                let k = ((target - self.sent) as usize).min(BATCH);
                match self.tx.write_chunk_uninit(k) {
                    Ok(chunk) => {
                        chunk.fill_from_iter(core::iter::repeat(m));
                        self.sent += k as u64;
                    }
                    Err(_) => core::hint::spin_loop(),
                }
            }
        } else {
            while self.sent < target {
                if self.tx.push(m).is_ok() {
                    self.sent += 1;
                } else {
                    core::hint::spin_loop();
                }
            }
        }
        while self.consumed.load(Acquire) < target {
            core::hint::spin_loop();
        }
        t.elapsed()
    }
}

impl Drop for RtrbOneWay {
    fn drop(&mut self) {
        stop_and_join(&self.stop, &mut self.server);
    }
}

// --- rtrb, request + reply rings (the shape of gyre's loop) --------------------------------

struct RtrbEcho<T> {
    req: rtrb::Producer<T>,
    rep: rtrb::Consumer<T>,
    /// The message every request carries.
    m: T,
    batched: bool,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl<T: Copy + Send + 'static> RtrbEcho<T> {
    fn start(batched: bool, m: T) -> Box<dyn Session> {
        let (req, mut req_rx) = rtrb::RingBuffer::<T>::new(CAPACITY);
        let (mut rep_tx, rep) = rtrb::RingBuffer::<T>::new(CAPACITY);
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        // The echo server answers up to BATCH requests at a time, like gyre's kernel loop
        // (batch 32 by default); the main loop never has more than CAPACITY in flight, so
        // the reply ring always has room.
        let server = spawn_server("tput-rtrb-echo", move || loop {
            let k = req_rx.slots().min(BATCH).min(rep_tx.slots());
            if k == 0 {
                if st.load(Relaxed) {
                    return;
                }
                core::hint::spin_loop();
                continue;
            }
            let chunk = req_rx.read_chunk(k).expect("k <= slots");
            let (a, b) = chunk.as_slices();
            rep_tx
                .write_chunk_uninit(k)
                .expect("k <= free slots")
                .fill_from_iter(a.iter().chain(b).copied());
            chunk.commit_all();
        });
        warmed(
            Box::new(Self {
                req,
                rep,
                m,
                batched,
                stop,
                server: Some(server),
            }),
            WARM_UP_RUN,
        )
    }
}

impl<T: Copy> Session for RtrbEcho<T> {
    fn run(&mut self, n: u64) -> Duration {
        let m = self.m;
        let cap = CAPACITY as u64;
        let (mut sent, mut recvd) = (0u64, 0u64);
        let t = Instant::now();
        if self.batched {
            while recvd < n {
                let k = ((n - sent).min(cap - (sent - recvd)) as usize).min(BATCH);
                if k > 0 {
                    if let Ok(chunk) = self.req.write_chunk_uninit(k) {
                        chunk.fill_from_iter(core::iter::repeat(m));
                        sent += k as u64;
                    }
                }
                if let Ok(chunk) = self.rep.read_chunk(self.rep.slots().min(BATCH)) {
                    let (a, b) = chunk.as_slices();
                    for r in a.iter().chain(b) {
                        black_box(*r);
                    }
                    recvd += chunk.len() as u64;
                    chunk.commit_all();
                }
            }
        } else {
            while recvd < n {
                while sent < n && sent - recvd < cap && self.req.push(m).is_ok() {
                    sent += 1;
                }
                while let Ok(r) = self.rep.pop() {
                    black_box(r);
                    recvd += 1;
                }
            }
        }
        t.elapsed()
    }
}

impl<T> Drop for RtrbEcho<T> {
    fn drop(&mut self) {
        stop_and_join(&self.stop, &mut self.server);
    }
}

// --- gyre --------------------------------------------------------------------------------

struct Gyre {
    k: Kernel<Msg, Msg>,
    batched: bool,
}

impl Gyre {
    fn start(batched: bool, telemetry: bool) -> Box<dyn Session> {
        let rt = Runtime::builder().build().expect("gyre runtime");
        let k = if telemetry {
            launch_gyre(&rt)
        } else {
            launch_gyre_with(&rt, false)
        };
        warmed(Box::new(Self { k, batched }), WARM_UP_RUN)
    }

    /// The same loop against the built-in echo on the OpenCL backend.
    fn start_opencl(batched: bool) -> Box<dyn Session> {
        let k = launch_gyre_opencl();
        warmed(Box::new(Self { k, batched }), WARM_UP_RUN)
    }
}

/// The OpenCL rows, added by `common::main` when a device is present.
const OPENCL_IMPLS: &[Imp] = &[
    Imp {
        name: "gyre_opencl_single",
        start: || Gyre::start_opencl(false),
    },
    Imp {
        name: "gyre_opencl_batch64",
        start: || Gyre::start_opencl(true),
    },
];

impl Session for Gyre {
    fn run(&mut self, n: u64) -> Duration {
        if self.batched {
            return batched_echo(&self.k, n, false);
        }
        let m = msg();
        let (mut sent, mut recvd) = (0u64, 0u64);
        let t = Instant::now();
        while recvd < n {
            while sent < n && self.k.try_send(m).is_ok() {
                sent += 1;
            }
            while let Some(r) = self.k.try_recv().expect("recv") {
                black_box(r);
                recvd += 1;
            }
        }
        t.elapsed()
    }
}

impl Drop for Gyre {
    fn drop(&mut self) {
        self.k.shutdown_blocking().expect("shutdown");
    }
}

// ----------------------------------------------------------------------------------------
// criterion

/// Rounds of the whole group (interleaving against drift between minutes).
const CRITERION_ROUNDS: usize = 2;

fn criterion_benches(c: &mut Criterion, impls: &[Imp]) {
    for round in 1..=CRITERION_ROUNDS {
        let mut g = c.benchmark_group(format!("throughput_round{round}"));
        g.throughput(Throughput::Elements(1));
        for imp in impls {
            let mut s = (imp.start)();
            g.bench_function(imp.name, |b| b.iter_custom(|n| s.run(n)));
            drop(s);
        }
        g.finish();
    }
}

// ----------------------------------------------------------------------------------------
// summary mode (GYRE_BENCH_SUMMARY=1; the method is in common/mod.rs)

const SUMMARY: Summary = Summary {
    title: "gyre throughput summary: 64-byte messages, main thread on core 0, \
            consumer / kernel on core 1, capacity 1024",
    unit: "M msg/s",
    impls: IMPLS,
    // Issue 29's targets are against the echo rows (the same request + reply ring pair);
    // the one-way rtrb rows are context.
    targets: &[
        ("gyre_single", "rtrb_echo_single", 1.0),
        ("gyre_batch64", "rtrb_echo_batch64", 0.6),
        ("gyre_single", "rtrb_single", 0.0),
        ("gyre_batch64", "rtrb_batch64", 0.0),
        ("gyre_single", "gyre_single_notel", 0.0),
        ("gyre_batch64", "gyre_batch64_notel", 0.0),
        ("gyre_batch64", "rtrb_echo_batch64_128b", 0.0),
        ("rtrb_echo_batch64_128b", "rtrb_echo_batch64", 0.0),
    ],
    higher_is_better: true,
    run_target: Duration::from_millis(40),
    min_ops: 100_000,
    max_ops: 50_000_000,
    // M messages per second
    figure: |n, d| n as f64 / d.as_secs_f64() / 1e6,
    placement_probe: common::pingpong_probe,
    own_threads: 0,
};

fn main() {
    common::main(
        &SUMMARY,
        OPENCL_IMPLS,
        &[
            ("gyre_opencl_single", "gyre_single", 0.0),
            ("gyre_opencl_batch64", "gyre_batch64", 0.0),
        ],
        criterion_benches,
    );
}
