//! One-way message rate of 64-byte messages (`[u8; 64]`) between two threads pinned to two
//! different cores: gyre's request ring (with every reply drained) beside `rtrb`, in the
//! same run.
//!
//! The bench's main thread is pinned to core 0; the other thread (the rtrb consumer or
//! server, gyre's kernel thread) to core 1. gyre's kernel thread pins itself on its first
//! request (see [`pinned_echo`]). Only one implementation's second thread exists at a time.
//!
//! Implementations (messages per second, counted once each, request direction):
//!
//! - `rtrb_single`: main pushes one message at a time, the consumer pops one at a time.
//! - `rtrb_batch64`: main writes chunks of 64 (`write_chunk_uninit` + `fill_from_iter`),
//!   the consumer reads chunks of up to 64 (`read_chunk` + `commit_all`).
//! - `gyre_single`: main keeps the request ring full with `try_send` and drains the echo
//!   replies with `try_recv` on the same thread; the kernel echoes on core 1.
//! - `gyre_batch64`: the same with `try_send_batch` of 64 and `try_recv_batch` of up to 64.
//! - `rtrb_echo_single`, `rtrb_echo_batch64`: context rows, the like-for-like peer of the
//!   gyre rows: the same request + reply ring pair and the same main-thread loop as gyre,
//!   over two rtrb rings with an echo thread on core 1.
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

use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use core_affinity::CoreId;
use criterion::{Criterion, Throughput};
use crossbeam_utils::CachePadded;
use gyre::{IdleStrategy, Kernel, KernelSpec, Runtime};

/// The message: 64 bytes, the payload of one 128-byte gyre slot.
type Msg = [u8; 64];

/// Core of the bench's main thread.
const MAIN_CORE: usize = 0;
/// Core of the second thread (consumer, echo server, gyre kernel).
const SERVER_CORE: usize = 1;
/// Ring capacity of every implementation.
const CAPACITY: usize = 1024;
/// Messages per batch in the batched variants.
const BATCH: usize = 64;
/// Time each session runs before it is measured.
const WARM_UP: Duration = Duration::from_millis(50);

// ----------------------------------------------------------------------------------------
// Pinning (as in rtt.rs)

/// The cores this process may run on, read once at start-up before any thread is pinned.
static CORES: std::sync::OnceLock<Vec<CoreId>> = std::sync::OnceLock::new();

fn core_id(i: usize) -> Option<CoreId> {
    CORES.get()?.iter().copied().find(|c| c.id == i)
}

fn init_cores() {
    let ids = core_affinity::get_core_ids().unwrap_or_default();
    for want in [MAIN_CORE, SERVER_CORE] {
        if !ids.iter().any(|c| c.id == want) {
            eprintln!("error: core {want} is not available to this process (cores: {ids:?})");
            std::process::exit(2);
        }
    }
    let _ = CORES.set(ids);
}

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

/// gyre's built-in echo handler, pinning the kernel thread to the server core on its first
/// request.
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

fn msg() -> Msg {
    black_box([0x5a; 64])
}

// ----------------------------------------------------------------------------------------
// Sessions

/// A running pair of threads; `run(n)` moves `n` messages and returns the time until the
/// last one was consumed (for gyre: its reply drained). Dropping it stops the other thread.
trait Session {
    fn run(&mut self, n: u64) -> Duration;
}

struct Imp {
    name: &'static str,
    start: fn() -> Box<dyn Session>,
}

/// Interleaved order: each gyre measurement sits next to its rtrb peer.
const IMPLS: &[Imp] = &[
    Imp {
        name: "rtrb_single",
        start: || RtrbOneWay::start(false),
    },
    Imp {
        name: "gyre_single",
        start: || Gyre::start(false),
    },
    Imp {
        name: "rtrb_batch64",
        start: || RtrbOneWay::start(true),
    },
    Imp {
        name: "gyre_batch64",
        start: || Gyre::start(true),
    },
    Imp {
        name: "rtrb_echo_single",
        start: || RtrbEcho::start(false),
    },
    Imp {
        name: "rtrb_echo_batch64",
        start: || RtrbEcho::start(true),
    },
];

fn warmed(mut s: Box<dyn Session>) -> Box<dyn Session> {
    let t = Instant::now();
    while t.elapsed() < WARM_UP {
        s.run(10_000);
    }
    s
}

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
        warmed(Box::new(Self {
            tx,
            batched,
            consumed,
            sent: 0,
            stop,
            server: Some(server),
        }))
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

struct RtrbEcho {
    req: rtrb::Producer<Msg>,
    rep: rtrb::Consumer<Msg>,
    batched: bool,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl RtrbEcho {
    fn start(batched: bool) -> Box<dyn Session> {
        let (req, mut req_rx) = rtrb::RingBuffer::<Msg>::new(CAPACITY);
        let (mut rep_tx, rep) = rtrb::RingBuffer::<Msg>::new(CAPACITY);
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
        warmed(Box::new(Self {
            req,
            rep,
            batched,
            stop,
            server: Some(server),
        }))
    }
}

impl Session for RtrbEcho {
    fn run(&mut self, n: u64) -> Duration {
        let m = msg();
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

impl Drop for RtrbEcho {
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
    fn start(batched: bool) -> Box<dyn Session> {
        let rt = Runtime::builder().build().expect("gyre runtime");
        let spec = KernelSpec::<Msg, Msg>::raw("echo", pinned_echo())
            .capacity(CAPACITY as u32)
            .idle(IdleStrategy::BusySpin)
            .host_idle(IdleStrategy::BusySpin);
        let k = rt.launch(spec).expect("launching the gyre echo kernel");
        // The first call pins the kernel thread and checks the echo.
        let probe: Msg = core::array::from_fn(|i| i as u8);
        assert_eq!(k.call_blocking(probe).expect("first call"), probe);
        warmed(Box::new(Self { k, batched }))
    }
}

impl Session for Gyre {
    fn run(&mut self, n: u64) -> Duration {
        let m = msg();
        let batch = [m; BATCH];
        let (mut sent, mut recvd) = (0u64, 0u64);
        let mut out: Vec<gyre::Result<Msg>> = Vec::with_capacity(BATCH);
        let t = Instant::now();
        if self.batched {
            while recvd < n {
                let k = ((n - sent) as usize).min(BATCH);
                if k > 0 && self.k.try_send_batch(&batch[..k]).is_ok() {
                    sent += k as u64;
                }
                out.clear();
                recvd += self.k.try_recv_batch(&mut out, BATCH).expect("recv") as u64;
                black_box(&out);
            }
        } else {
            while recvd < n {
                while sent < n && self.k.try_send(m).is_ok() {
                    sent += 1;
                }
                while let Some(r) = self.k.try_recv().expect("recv") {
                    black_box(r);
                    recvd += 1;
                }
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

fn criterion_benches(c: &mut Criterion) {
    for round in 1..=CRITERION_ROUNDS {
        let mut g = c.benchmark_group(format!("throughput_round{round}"));
        g.throughput(Throughput::Elements(1));
        for imp in IMPLS {
            let mut s = (imp.start)();
            g.bench_function(imp.name, |b| b.iter_custom(|n| s.run(n)));
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
const RUN_TARGET: Duration = Duration::from_millis(40);
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
const HIGHER_IS_BETTER: bool = true;
/// (numerator, denominator, target; a target of 0 marks a context ratio)
const TARGETS: &[(&str, &str, f64)] = &[
    ("gyre_single", "rtrb_single", 1.0),
    ("gyre_batch64", "rtrb_batch64", 1.0),
    ("gyre_single", "rtrb_echo_single", 0.0),
    ("gyre_batch64", "rtrb_echo_batch64", 0.0),
];
const TITLE: &str = "gyre throughput summary: 64-byte messages, main thread on core 0, \
                     consumer / kernel on core 1, capacity 1024";
const UNIT: &str = "M msg/s";

/// Round-trip time of two atomics on separate cache lines between the two cores, in ns
/// (a few ms):
/// a probe of the VM's current core placement (about 100 ns between two physical cores
/// here; it changes between minutes on these VMs), printed beside each round.
fn placement_probe() -> f64 {
    let lines = Arc::new([
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ]);
    let l = lines.clone();
    let server = spawn_server("tput-pingpong", move || {
        let mut last = 0;
        loop {
            let v = l[0].load(Acquire);
            if v == last {
                core::hint::spin_loop();
                continue;
            }
            if v == u64::MAX {
                return;
            }
            l[1].store(v, Release);
            last = v;
        }
    });
    let n = 20_000u64;
    let mut t = Instant::now();
    for i in 1..=2 * n {
        if i == n + 1 {
            t = Instant::now();
        }
        lines[0].store(i, Release);
        while lines[1].load(Acquire) != i {
            core::hint::spin_loop();
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    lines[0].store(u64::MAX, Release);
    server.join().unwrap();
    ns
}

/// One measured run of about RUN_TARGET, in M messages per second; `calibrate` first
/// sizes it.
fn measure(s: &mut dyn Session, calibrate: bool) -> f64 {
    thread_local!(static N: std::cell::Cell<u64> = const { std::cell::Cell::new(100_000) });
    if calibrate {
        let probe = s.run(100_000).as_secs_f64();
        let n = (RUN_TARGET.as_secs_f64() / probe * 100_000.0) as u64;
        N.with(|c| c.set(n.clamp(100_000, 50_000_000)));
    }
    let n = N.with(|c| c.get());
    n as f64 / s.run(n).as_secs_f64() / 1e6
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
    pin_current(MAIN_CORE);
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
