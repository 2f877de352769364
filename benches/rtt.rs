//! Round-trip time of one 64-byte request and its reply (`[u8; 64]`, echo server) between
//! two threads pinned to two different cores: gyre's CPU backend beside its peers, in the
//! same run.
//!
//! The bench's main thread (the client) is pinned to core 0 and every server thread to
//! core 1. gyre spawns its kernel thread itself (`gyre-cpu-echo`); the bench kernel's
//! handler pins that thread to core 1 on its first request (see [`pinned_echo`]).
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
//!
//! `cargo bench --bench rtt` runs criterion (three interleaved rounds of every
//! implementation); `GYRE_BENCH_SUMMARY=1 cargo bench --bench rtt` runs the quick
//! interleaved summary instead (rounds x implementations, median of per-round medians,
//! rounds with a placement change dropped) and prints the table and ratios recorded in
//! docs/benchmarks.md. `GYRE_BENCH_ONLY=name,..` limits the summary to some
//! implementations (for profiling).

use std::hint::black_box;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use core_affinity::CoreId;
use criterion::Criterion;
use crossbeam_utils::CachePadded;
use gyre::{IdleStrategy, Kernel, KernelSpec, Runtime};

/// The message: 64 bytes, the payload of one 128-byte gyre slot.
type Msg = [u8; 64];

/// Core of the bench's main thread (the client).
const CLIENT_CORE: usize = 0;
/// Core of every server thread (gyre's kernel thread included).
const SERVER_CORE: usize = 1;
/// gyre ring capacity, and the bound of the peers' queues.
const CAPACITY: usize = 1024;
/// Round trips each session does before it is measured (lines warm, clocks up).
const WARM_UP: Duration = Duration::from_millis(50);

// ----------------------------------------------------------------------------------------
// Pinning

/// The cores this process may run on, read once at start-up before any thread is pinned
/// (`core_affinity::get_core_ids` reports the *calling thread's* mask, which a pinned
/// thread's children inherit).
static CORES: std::sync::OnceLock<Vec<CoreId>> = std::sync::OnceLock::new();

fn core_id(i: usize) -> Option<CoreId> {
    CORES.get()?.iter().copied().find(|c| c.id == i)
}

/// Reads the core list; exits when the client and server cores are not both available
/// (two spinning threads sharing one core would make every measurement meaningless).
fn init_cores() {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    for want in [CLIENT_CORE, SERVER_CORE] {
        if !ids.iter().any(|c| c.id == want) {
            eprintln!("error: core {want} is not available to this process (cores: {ids:?})");
            std::process::exit(2);
        }
    }
    let _ = CORES.set(ids);
}

/// Pins the calling thread to core `i`; exits when that fails, for the reason above.
fn pin_current(i: usize) {
    if !core_id(i).is_some_and(core_affinity::set_for_current) {
        eprintln!(
            "error: could not pin thread {:?} to core {i}",
            std::thread::current().name()
        );
        std::process::exit(2);
    }
}

fn spawn_server(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            pin_current(SERVER_CORE);
            f()
        })
        .expect("spawning a server thread")
}

/// gyre's built-in echo handler, pinning the kernel thread that runs it to the server core
/// on its first request. The check afterwards is one relaxed load of a flag the kernel
/// thread alone writes.
fn pinned_echo() -> impl Fn(u32, &[u8], &mut [u8]) -> Result<usize, u32> + Send + Sync + 'static {
    let core = core_id(SERVER_CORE);
    let pinned = AtomicBool::new(false);
    move |ty, req, reply| {
        if !pinned.load(Relaxed) {
            pinned.store(true, Relaxed);
            let name = std::thread::current().name().map(str::to_owned);
            if !name.as_deref().is_some_and(|n| n.starts_with("gyre-cpu-")) {
                eprintln!("warning: echo handler runs on thread {name:?}, not gyre-cpu-*");
            }
            if !core.is_some_and(core_affinity::set_for_current) {
                eprintln!("error: could not pin the gyre kernel thread to core {SERVER_CORE}");
                std::process::exit(2);
            }
        }
        gyre::kernels::echo(ty, req, reply)
    }
}

/// The kernel every gyre measurement uses: echo, busy-spinning on both sides.
fn launch_gyre(rt: &Runtime) -> Kernel<Msg, Msg> {
    let spec = KernelSpec::<Msg, Msg>::raw("echo", pinned_echo())
        .capacity(CAPACITY as u32)
        .idle(IdleStrategy::BusySpin)
        .host_idle(IdleStrategy::BusySpin);
    let k = rt.launch(spec).expect("launching the gyre echo kernel");
    // The first call pins the kernel thread (see `pinned_echo`) and checks the echo.
    let probe: Msg = core::array::from_fn(|i| i as u8);
    assert_eq!(k.call_blocking(probe).expect("first call"), probe);
    k
}

fn msg() -> Msg {
    black_box([0x5a; 64])
}

// ----------------------------------------------------------------------------------------
// Sessions: one implementation's client and server, alive for one measurement.

/// A client with its server running; `run(n)` does `n` round trips and returns the time.
/// Dropping it stops the server.
trait Session {
    fn run(&mut self, iters: u64) -> Duration;
}

struct Imp {
    name: &'static str,
    start: fn() -> Box<dyn Session>,
}

/// Interleaved order: every gyre measurement sits between two peer measurements.
const IMPLS: &[Imp] = &[
    Imp {
        name: "atomic_pingpong",
        start: PingPong::start,
    },
    Imp {
        name: "gyre_blocking",
        start: GyreBlocking::start,
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

fn warmed(mut s: Box<dyn Session>) -> Box<dyn Session> {
    let t = Instant::now();
    while t.elapsed() < WARM_UP {
        s.run(100);
    }
    s
}

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
        warmed(Box::new(Self::spawn()))
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
        warmed(Box::new(Self {
            req,
            rep,
            stop,
            server: Some(server),
        }))
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
        warmed(Box::new(Self {
            req: Some(req),
            rep,
            server: Some(server),
        }))
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
        warmed(Box::new(Self {
            rt,
            req: Some(req),
            server: Some(server),
        }))
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

struct GyreBlocking {
    k: Kernel<Msg, Msg>,
}

impl GyreBlocking {
    fn start() -> Box<dyn Session> {
        let rt = Runtime::builder().build().expect("gyre runtime");
        warmed(Box::new(Self {
            k: launch_gyre(&rt),
        }))
    }
}

impl Session for GyreBlocking {
    fn run(&mut self, iters: u64) -> Duration {
        let m = msg();
        let t = Instant::now();
        for _ in 0..iters {
            black_box(self.k.call_blocking(m).expect("call"));
        }
        t.elapsed()
    }
}

impl Drop for GyreBlocking {
    fn drop(&mut self) {
        self.k.shutdown_blocking().expect("shutdown");
    }
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
        warmed(Box::new(Self {
            rt,
            k: launch_gyre(&grt),
        }))
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

// ----------------------------------------------------------------------------------------
// criterion

/// Rounds of the whole group: core-to-core latency on these VMs drifts between minutes, so
/// every implementation is measured in each round, next to the others.
const CRITERION_ROUNDS: usize = 3;

fn criterion_benches(c: &mut Criterion) {
    for round in 1..=CRITERION_ROUNDS {
        let mut g = c.benchmark_group(format!("rtt_round{round}"));
        for imp in IMPLS {
            let mut s = (imp.start)();
            g.bench_function(imp.name, |b| b.iter_custom(|iters| s.run(iters)));
            drop(s);
        }
        g.finish();
    }
}

// ----------------------------------------------------------------------------------------
// summary mode (GYRE_BENCH_SUMMARY=1)
//
// Core placement on these VMs changes every few tens of seconds (the atomic ping-pong
// between the two vCPUs moves between about 45, 100 and 450-550 ns), and other work may
// share the two cores. So the summary runs many short rounds, each of every
// implementation back to back, with a short ping-pong probe before, between and after
// the implementations. It keeps only the rounds whose probes agree (no placement change
// inside the round) and that saw no competing runnable work, and groups them by
// placement band. Ratios are taken within a round, then the median over the kept rounds
// of a band; figures are the median over them.

const SUMMARY_ROUNDS: usize = 15;
const RUNS_PER_ROUND: usize = 3;
/// Target length of one measured run.
const RUN_TARGET: Duration = Duration::from_millis(20);
/// A round is kept when all its placement probes are within this factor of each other.
const STABLE_WITHIN: f64 = 1.25;
/// Placement bands of the ping-pong probe, ns: below NEAR_BELOW the two vCPUs share a
/// core's caches, above FAR_ABOVE they sit far apart; the normal band is the ~100 ns the
/// targets assume.
const NEAR_BELOW: f64 = 75.0;
const FAR_ABOVE: f64 = 200.0;

/// One round: the placement probes before, between and after its implementations, and
/// each implementation's median.
struct Round {
    probes: Vec<f64>,
    runs: u32,
    contended: u32,
    values: Vec<f64>,
}

impl Round {
    fn probe_range(&self) -> (f64, f64) {
        let lo = self.probes.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.probes.iter().copied().fold(0.0, f64::max);
        (lo, hi)
    }

    fn band(&self) -> &'static str {
        let p = median(&mut self.probes.clone());
        if p < NEAR_BELOW {
            "near"
        } else if p > FAR_ABOVE {
            "far"
        } else {
            "normal"
        }
    }

    fn kept(&self) -> bool {
        let (lo, hi) = self.probe_range();
        hi / lo <= STABLE_WITHIN && self.contended * 4 <= self.runs
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into())
}

/// Runnable threads system-wide right now (`procs_running` in /proc/stat). Sampled right
/// after a measured run, while the other thread still spins: more than 2 (the bench's two
/// threads) means something else wanted a CPU during the measurement.
fn procs_running() -> u32 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("procs_running "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Whether a larger figure is better (throughput) or a smaller one (latency).
const HIGHER_IS_BETTER: bool = false;
/// (numerator, denominator, target; a target of 0 marks a context ratio)
const TARGETS: &[(&str, &str, f64)] = &[
    ("gyre_blocking", "atomic_pingpong", 2.0),
    ("gyre_blocking", "rtrb", 1.0),
    ("gyre_blocking", "crossbeam", 0.8),
    ("gyre_async", "gyre_blocking", 1.5),
    ("gyre_async", "tokio", 0.0),
];
const TITLE: &str =
    "gyre rtt summary: 64-byte request + echo reply, client on core 0, server on core 1";
const UNIT: &str = "ns/RTT";

/// The atomic ping-pong RTT now, in ns (a few ms): the VM's current core placement.
fn placement_probe() -> f64 {
    let mut s = PingPong::spawn();
    let n = 20_000;
    s.run(n);
    s.run(n).as_nanos() as f64 / n as f64
}

/// One measured run of about RUN_TARGET, in ns per round trip; `calibrate` first sizes it.
fn measure(s: &mut dyn Session, calibrate: bool) -> f64 {
    thread_local!(static N: std::cell::Cell<u64> = const { std::cell::Cell::new(1000) });
    if calibrate {
        let probe = s.run(1000).as_nanos() as f64 / 1000.0;
        let n = (RUN_TARGET.as_nanos() as f64 / probe) as u64;
        N.with(|c| c.set(n.clamp(1000, 2_000_000)));
    }
    let n = N.with(|c| c.get());
    s.run(n).as_nanos() as f64 / n as f64
}

fn summary() {
    let load_start = loadavg();
    // GYRE_BENCH_ONLY=name[,name..]: measure only these (for profiling one implementation).
    let only = std::env::var("GYRE_BENCH_ONLY").unwrap_or_default();
    let selected = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);
    let mut rounds: Vec<Round> = Vec::new();
    for _ in 0..SUMMARY_ROUNDS {
        let mut probes = vec![placement_probe()];
        let (mut runs, mut contended) = (0u32, 0u32);
        let mut values = vec![f64::NAN; IMPLS.len()];
        for (i, imp) in IMPLS.iter().enumerate() {
            if !selected(imp.name) {
                continue;
            }
            let mut s = (imp.start)();
            let mut per_run: Vec<f64> = (0..RUNS_PER_ROUND)
                .map(|k| {
                    let v = measure(&mut *s, k == 0);
                    runs += 1;
                    contended += u32::from(procs_running() > 2);
                    v
                })
                .collect();
            values[i] = median(&mut per_run);
            drop(s);
            probes.push(placement_probe());
        }
        rounds.push(Round {
            probes,
            runs,
            contended,
            values,
        });
    }
    let load_end = loadavg();
    let idx = |name: &str| IMPLS.iter().position(|i| i.name == name).unwrap();

    println!("{TITLE}");
    println!(
        "{} rounds x {} implementations back to back, {} runs of ~{} ms each; \
         figure = median over the kept rounds of a band of the per-round median",
        SUMMARY_ROUNDS,
        IMPLS.len(),
        RUNS_PER_ROUND,
        RUN_TARGET.as_millis()
    );
    println!(
        "cpu: {} x {}; load average at start {load_start}, at end {load_end}",
        CORES.get().map_or(0, Vec::len),
        cpu_model()
    );
    println!(
        "placement bands by the ping-pong probe: near < {NEAR_BELOW:.0} ns, normal, far > \
         {FAR_ABOVE:.0} ns; a probe runs before, between and after the implementations of a round, and the round is kept when they all agree within {STABLE_WITHIN}x \
         and at most a quarter of its runs saw competing runnable work; targets are judged \
         on the normal band (ping-pong about 100 ns)"
    );
    println!();
    print!("| round | probes min..max (ns) | band | competing work |");
    for imp in IMPLS {
        print!(" {} |", imp.name);
    }
    println!(" kept |");
    print!("| ---: | --- | --- | --- |");
    for _ in IMPLS {
        print!(" ---: |");
    }
    println!(" --- |");
    for (k, r) in rounds.iter().enumerate() {
        let (lo, hi) = r.probe_range();
        print!(
            "| {} | {lo:.0}..{hi:.0} | {} | {} of {} runs |",
            k + 1,
            r.band(),
            r.contended,
            r.runs
        );
        for v in &r.values {
            print!(" {v:.1} |");
        }
        println!(" {} |", if r.kept() { "yes" } else { "no" });
    }
    for band in ["normal", "near", "far"] {
        let used: Vec<&Round> = rounds
            .iter()
            .filter(|r| r.kept() && r.band() == band)
            .collect();
        if used.is_empty() {
            println!();
            println!("{band} band: no kept round");
            continue;
        }
        println!();
        println!("{band} band: {} kept round(s)", used.len());
        println!();
        println!("| implementation | {UNIT} (median) |");
        println!("| --- | ---: |");
        for (i, imp) in IMPLS.iter().enumerate() {
            let mut v: Vec<f64> = used.iter().map(|r| r.values[i]).collect();
            println!("| {} | {:.1} |", imp.name, median(&mut v));
        }
        println!();
        println!("| ratio ({band} band) | median of per-round ratios | range | target | met |");
        println!("| --- | ---: | --- | ---: | --- |");
        for &(a, b, target) in TARGETS {
            let (ia, ib) = (idx(a), idx(b));
            let mut per: Vec<f64> = used.iter().map(|r| r.values[ia] / r.values[ib]).collect();
            let r = median(&mut per);
            let (lo, hi) = (per[0], per[per.len() - 1]);
            let (sign, met) = if HIGHER_IS_BETTER {
                (">=", r >= target)
            } else {
                ("<=", r <= target)
            };
            let (target, met) = if target > 0.0 {
                (
                    format!("{sign} {target:.1}"),
                    if met { "yes" } else { "NO" },
                )
            } else {
                ("-".to_owned(), "(context)")
            };
            println!("| {a} / {b} | {r:.2} | {lo:.2}..{hi:.2} | {target} | {met} |");
        }
    }
}

// ----------------------------------------------------------------------------------------

fn main() {
    init_cores();
    pin_current(CLIENT_CORE);
    if std::env::var("GYRE_BENCH_SUMMARY").is_ok_and(|v| v == "1") {
        summary();
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
}
