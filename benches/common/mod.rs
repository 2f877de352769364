//! What the two-core benches (`rtt.rs`, `throughput.rs`) share: core pinning, gyre's
//! pinned echo kernel, the `Session` / `Imp` shape of an implementation, and the summary
//! mode (`GYRE_BENCH_SUMMARY=1`).
//!
//! The bench's main thread is pinned to core 0 ([`MAIN_CORE`]) and every second thread
//! (peer server or consumer, gyre's kernel thread) to core 1 ([`SERVER_CORE`]). Only one
//! implementation's second thread exists at a time: each busy-spins on core 1, so two of
//! them alive together would share the core.
//!
//! Summary mode: core placement on these VMs changes every few tens of seconds (the atomic
//! ping-pong between the two vCPUs moves between about 45, 100 and 450-550 ns), and other
//! work may share the two cores. So the summary runs many short rounds, each of every
//! implementation back to back, with a short ping-pong probe before, between and after
//! the implementations. It keeps only the rounds whose probes agree (no placement change
//! inside the round) and that saw no competing runnable work, and groups them by
//! placement band. Ratios are taken within a round, then the median over the kept rounds
//! of a band; figures are the median over them.

#![allow(dead_code)] // shared by the benches; each uses part of it

use std::hint::black_box;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use core_affinity::CoreId;
use criterion::Criterion;
use crossbeam_utils::CachePadded;
use gyre::{IdleStrategy, Kernel, KernelSpec, Runtime};

/// The message: 64 bytes, the payload of one 128-byte gyre slot.
pub type Msg = [u8; 64];

/// Core of the bench's main thread (the client, the producer).
pub const MAIN_CORE: usize = 0;
/// Core of every second thread (server, consumer, gyre's kernel thread).
pub const SERVER_CORE: usize = 1;
/// gyre ring capacity, and the bound of every peer's queues.
pub const CAPACITY: usize = 1024;
/// How long each session runs before it is measured (lines warm, clocks up).
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

/// Reads the core list; exits when the main and server cores are not both available
/// (two spinning threads sharing one core would make every measurement meaningless).
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

/// Spawns a thread named `name`, pinned to [`SERVER_CORE`], running `f`.
pub fn spawn_server(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
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
pub fn pinned_echo() -> impl Fn(u32, &[u8], &mut [u8]) -> Result<usize, u32> + Send + Sync + 'static
{
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

/// The kernel every gyre measurement uses: echo ([`pinned_echo`]), capacity [`CAPACITY`],
/// busy-spinning on both sides, telemetry on.
pub fn launch_gyre(rt: &Runtime) -> Kernel<Msg, Msg> {
    launch_gyre_with(rt, true)
}

/// [`launch_gyre`] with telemetry on or off (`KernelSpec::telemetry`).
pub fn launch_gyre_with(rt: &Runtime, telemetry: bool) -> Kernel<Msg, Msg> {
    let spec = KernelSpec::<Msg, Msg>::raw("echo", pinned_echo())
        .capacity(CAPACITY)
        .idle(IdleStrategy::BusySpin)
        .host_idle(IdleStrategy::BusySpin)
        .telemetry(telemetry);
    let k = rt.launch(spec).expect("launching the gyre echo kernel");
    // The first call pins the kernel thread (see `pinned_echo`) and checks the echo.
    let probe: Msg = core::array::from_fn(|i| i as u8);
    assert_eq!(k.call_blocking(probe).expect("first call"), probe);
    k
}

/// The first OpenCL device with fine-grained SVM and atomics (PoCL's CPU device on the
/// machines of docs/benchmarks.md), when the `opencl` feature is on and one is present.
pub fn opencl_backend() -> Option<gyre::Backend> {
    #[cfg(feature = "opencl")]
    {
        let platforms = gyre_opencl::probe().ok()?;
        for p in &platforms {
            for d in &p.devices {
                if d.unusable().is_none() {
                    return Some(gyre::Backend::OpenCl {
                        platform: p.index,
                        device: d.index,
                    });
                }
            }
        }
    }
    None
}

/// The gyre kernel of the OpenCL rows: the built-in echo (`cuda/handlers/echo.h` built as OpenCL C)
/// on [`opencl_backend`], capacity [`CAPACITY`], the host busy-spinning. Its persistent
/// work-group runs on a PoCL worker thread, which the bench cannot pin (PoCL places it).
pub fn launch_gyre_opencl() -> Kernel<Msg, Msg> {
    let b = opencl_backend().expect("an OpenCL device (checked before listing the OpenCL rows)");
    let rt = Runtime::builder()
        .backend(b)
        .build()
        .expect("gyre runtime on OpenCL");
    let spec = KernelSpec::<Msg, Msg>::echo()
        .capacity(CAPACITY)
        .idle(IdleStrategy::BusySpin)
        .host_idle(IdleStrategy::BusySpin);
    let k = rt.launch(spec).expect("launching the OpenCL echo kernel");
    let probe: Msg = core::array::from_fn(|i| i as u8);
    assert_eq!(k.call_blocking(probe).expect("first call"), probe);
    k
}

pub fn msg() -> Msg {
    black_box([0x5a; 64])
}

// ----------------------------------------------------------------------------------------
// Sessions: one implementation's two threads, alive for one measurement.

/// A running implementation; `run(n)` does `n` operations (round trips, messages) and
/// returns the time. Dropping it stops its second thread.
pub trait Session {
    fn run(&mut self, n: u64) -> Duration;
}

#[derive(Clone, Copy)]
pub struct Imp {
    pub name: &'static str,
    pub start: fn() -> Box<dyn Session>,
}

/// `n` blocking echo calls per run on a gyre kernel (the gyre rows of the RTT benches);
/// the kernel is shut down when the session drops.
pub struct BlockingCalls(pub Kernel<Msg, Msg>);

impl Session for BlockingCalls {
    fn run(&mut self, n: u64) -> Duration {
        let m = msg();
        let t = Instant::now();
        for _ in 0..n {
            black_box(self.0.call_blocking(m).expect("call"));
        }
        t.elapsed()
    }
}

impl Drop for BlockingCalls {
    fn drop(&mut self) {
        self.0.shutdown_blocking().expect("shutdown");
    }
}

/// Messages per batch of the batched throughput loops.
pub const BATCH: usize = 64;

/// Sends `n` echo messages in batches of [`BATCH`] (`try_send_batch`) while receiving
/// their replies (`try_recv_batch`), and returns the time. With `yield_when_idle` the
/// loop yields whenever a receive brought nothing, so a copy thread sharing the core gets
/// a turn.
pub fn batched_echo(k: &Kernel<Msg, Msg>, n: u64, yield_when_idle: bool) -> Duration {
    batched_echo_of(k, n, &[msg(); BATCH], yield_when_idle).expect("recv")
}

/// [`batched_echo`] with batches of `batch.len()` messages (the slice is sent as is).
pub fn batched_echo_of(
    k: &Kernel<Msg, Msg>,
    n: u64,
    batch: &[Msg],
    yield_when_idle: bool,
) -> gyre::Result<Duration> {
    let size = batch.len();
    let mut out: Vec<gyre::Result<Msg>> = Vec::with_capacity(size);
    let (mut sent, mut recvd) = (0u64, 0u64);
    let t = Instant::now();
    while recvd < n {
        let want = ((n - sent) as usize).min(size);
        if want > 0 && k.try_send_batch(&batch[..want]).is_ok() {
            sent += want as u64;
        }
        out.clear();
        let got = k.try_recv_batch(&mut out, size)? as u64;
        recvd += got;
        black_box(&out);
        if got == 0 && yield_when_idle {
            std::thread::yield_now();
        }
    }
    Ok(t.elapsed())
}

/// Runs `s` in runs of `per_run` operations for [`WARM_UP`], then returns it.
pub fn warmed(mut s: Box<dyn Session>, per_run: u64) -> Box<dyn Session> {
    let t = Instant::now();
    while t.elapsed() < WARM_UP {
        s.run(per_run);
    }
    s
}

// ----------------------------------------------------------------------------------------
// main

/// The whole bench: pins the main thread, then runs `summary` when `GYRE_BENCH_SUMMARY=1`,
/// else criterion with `criterion_benches` over the summary's implementations. When an
/// OpenCL device is present (see [`opencl_backend`]), the `opencl` implementations and
/// their context ratios are added to the summary's (PoCL is a correctness vehicle: its
/// figures are context, never targets).
pub fn main(
    summary: &Summary,
    opencl: &[Imp],
    opencl_targets: &[(&'static str, &'static str, f64)],
    criterion_benches: fn(&mut Criterion, &[Imp]),
) {
    init_cores();
    // Open the OpenCL device before pinning: PoCL starts its worker threads (which run the
    // persistent work-group) when the device is first used, and they inherit the affinity
    // of the thread that does it. Opened after the pin, they would share core 0 with the
    // spinning client.
    let opencl_present = opencl_backend().is_some_and(|b| {
        Runtime::builder()
            .backend(b)
            .build()
            .map_err(|e| eprintln!("note: OpenCL device present but unusable: {e}"))
            .is_ok()
    });
    pin_current(MAIN_CORE);
    let with_opencl;
    let summary = if opencl_present {
        let impls: Vec<Imp> = summary.impls.iter().chain(opencl).copied().collect();
        let targets: Vec<_> = summary
            .targets
            .iter()
            .chain(opencl_targets)
            .copied()
            .collect();
        with_opencl = Summary {
            impls: Box::leak(impls.into_boxed_slice()),
            targets: Box::leak(targets.into_boxed_slice()),
            ..*summary
        };
        &with_opencl
    } else {
        eprintln!("note: no OpenCL device (or the `opencl` feature is off): no OpenCL rows");
        summary
    };
    if summary_mode() {
        summary.run();
        return;
    }
    let mut c = criterion();
    criterion_benches(&mut c, summary.impls);
    c.final_summary();
}

/// The criterion settings every bench uses (1 s warm-up, 3 s, 20 samples; command-line
/// arguments still apply).
fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args()
}

/// Whether `GYRE_BENCH_SUMMARY=1` asks for summary mode.
fn summary_mode() -> bool {
    std::env::var("GYRE_BENCH_SUMMARY").is_ok_and(|v| v == "1")
}

/// A bench of CPU-backend variants only (no OpenCL rows) with several summaries, run one
/// after the other in summary mode; criterion runs `criterion_benches` otherwise.
pub fn main_many(summaries: &[&Summary], criterion_benches: fn(&mut Criterion)) {
    init_cores();
    pin_current(MAIN_CORE);
    if summary_mode() {
        for s in summaries {
            s.run();
        }
        return;
    }
    let mut c = criterion();
    criterion_benches(&mut c);
    c.final_summary();
}

// ----------------------------------------------------------------------------------------
// summary mode (GYRE_BENCH_SUMMARY=1), see the module docs

const SUMMARY_ROUNDS: usize = 15;
const RUNS_PER_ROUND: usize = 3;
/// A round is kept when all its placement probes are within this factor of each other.
const STABLE_WITHIN: f64 = 1.25;
/// Placement bands of the ping-pong probe, ns: below NEAR_BELOW the two vCPUs share a
/// core's caches, above FAR_ABOVE they sit far apart; the normal band is the ~100 ns the
/// targets assume.
const NEAR_BELOW: f64 = 75.0;
const FAR_ABOVE: f64 = 200.0;

/// What one bench's summary measures and prints.
pub struct Summary {
    /// First line of the output.
    pub title: &'static str,
    /// Unit of a figure, for the per-band table header.
    pub unit: &'static str,
    /// The implementations, in interleaved order.
    pub impls: &'static [Imp],
    /// (numerator, denominator, target; a target of 0 marks a context ratio)
    pub targets: &'static [(&'static str, &'static str, f64)],
    /// Whether a larger figure is better (throughput) or a smaller one (latency).
    pub higher_is_better: bool,
    /// Target length of one measured run.
    pub run_target: Duration,
    /// Operations of the calibration run, and the least and most of a measured run.
    pub min_ops: u64,
    pub max_ops: u64,
    /// The figure of a measured run of `n` operations that took `d`.
    pub figure: fn(n: u64, d: Duration) -> f64,
    /// The core-to-core ping-pong RTT now, in ns (a few ms): the VM's current placement.
    pub placement_probe: fn() -> f64,
    /// Runnable threads an implementation itself adds beyond the client and the server
    /// (a copy thread): a run counts as contended above `2 + own_threads`.
    pub own_threads: u32,
}

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

impl Summary {
    /// Operations in one measured run of about `run_target`, sized by a first run of
    /// `min_ops`.
    fn calibrate(&self, s: &mut dyn Session) -> u64 {
        let probe = s.run(self.min_ops).as_secs_f64();
        let n = (self.run_target.as_secs_f64() / probe * self.min_ops as f64) as u64;
        n.clamp(self.min_ops, self.max_ops)
    }

    /// One measured run of `n` operations: its figure.
    fn measure(&self, s: &mut dyn Session, n: u64) -> f64 {
        (self.figure)(n, s.run(n))
    }

    fn run(&self) {
        let impls = self.impls;
        let load_start = loadavg();
        // GYRE_BENCH_ONLY=name[,name..]: measure only these (for profiling one
        // implementation).
        let only = std::env::var("GYRE_BENCH_ONLY").unwrap_or_default();
        let selected = |name: &str| only.is_empty() || only.split(',').any(|o| o == name);
        let mut rounds: Vec<Round> = Vec::new();
        for _ in 0..SUMMARY_ROUNDS {
            let mut probes = vec![(self.placement_probe)()];
            let (mut runs, mut contended) = (0u32, 0u32);
            let mut values = vec![f64::NAN; impls.len()];
            for (i, imp) in impls.iter().enumerate() {
                if !selected(imp.name) {
                    continue;
                }
                let mut s = (imp.start)();
                let n = self.calibrate(&mut *s);
                let mut per_run: Vec<f64> = (0..RUNS_PER_ROUND)
                    .map(|_| {
                        let v = self.measure(&mut *s, n);
                        runs += 1;
                        contended += u32::from(procs_running() > 2 + self.own_threads);
                        v
                    })
                    .collect();
                values[i] = median(&mut per_run);
                drop(s);
                probes.push((self.placement_probe)());
            }
            rounds.push(Round {
                probes,
                runs,
                contended,
                values,
            });
        }
        let load_end = loadavg();
        self.print(&rounds, &load_start, &load_end);
    }

    fn print(&self, rounds: &[Round], load_start: &str, load_end: &str) {
        let impls = self.impls;
        let idx = |name: &str| impls.iter().position(|i| i.name == name).unwrap();

        println!("{}", self.title);
        println!(
            "{} rounds x {} implementations back to back, {} runs of ~{} ms each; \
             figure = median over the kept rounds of a band of the per-round median",
            SUMMARY_ROUNDS,
            impls.len(),
            RUNS_PER_ROUND,
            self.run_target.as_millis()
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
        for imp in impls {
            print!(" {} |", imp.name);
        }
        println!(" kept |");
        print!("| ---: | --- | --- | --- |");
        for _ in impls {
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
            println!("| implementation | {} (median) |", self.unit);
            println!("| --- | ---: |");
            for (i, imp) in impls.iter().enumerate() {
                let mut v: Vec<f64> = used.iter().map(|r| r.values[i]).collect();
                println!("| {} | {:.1} |", imp.name, median(&mut v));
            }
            println!();
            println!("| ratio ({band} band) | median of per-round ratios | range | target | met |");
            println!("| --- | ---: | --- | ---: | --- |");
            for &(a, b, target) in self.targets {
                let (ia, ib) = (idx(a), idx(b));
                let mut per: Vec<f64> = used.iter().map(|r| r.values[ia] / r.values[ib]).collect();
                let r = median(&mut per);
                let (lo, hi) = (per[0], per[per.len() - 1]);
                let (sign, met) = if self.higher_is_better {
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
}

/// Round-trip time of two atomics on separate cache lines between the two cores, in ns
/// (a few ms):
/// a probe of the VM's current core placement (about 100 ns between two physical cores
/// here; it changes between minutes on these VMs), printed beside each round.
pub fn pingpong_probe() -> f64 {
    let lines = Arc::new([
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ]);
    let l = lines.clone();
    let server = spawn_server("probe-pingpong", move || {
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
