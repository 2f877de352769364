//! `gyre bench`: how far gyre is from this machine's limit, in one command.
//!
//! One backend and transfer strategy, a 64-byte echo:
//!
//! * the round trip of one blocking caller (p50 / p99 / p99.9 / mean);
//! * throughput against the batch size (host batches of B through `try_send_batch` /
//!   `try_recv_batch`, kernel batch B);
//! * on CUDA, in the same process and before any ring kernel runs: the floor (a word
//!   ping-pong with a persistent kernel through mapped pinned memory,
//!   `gyre_cuda::peer::FloorPeer`), and launch+sync and graph+sync of a 64-byte echo
//!   kernel (`gyre_cuda::peer::LaunchPeer`);
//! * on the CPU backend with `--emulate-remote-ns N`: the cost model of a PCIe GPU
//!   (`RuntimeBuilder::cost_model`), the kernel's read waves and fences per batch, and
//!   the floor of the same emulation (a thread that pays N ns per poll of a word);
//! * the ratios `rtt_over_floor` and `launch_over_rtt`.
//!
//! The summary is `key value` lines (stable keys, times in nanoseconds), or one JSON object
//! with `--json`. A benchmark reports; it does not judge (docs/benchmarks.md records the
//! figures and the targets).

use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre::{Backend, IdleStrategy, Kernel, KernelSpec, Runtime, TransferStrategy};
use hdrhistogram::Histogram;

use crate::args::BenchArgs;
use crate::config::Msg;
use crate::error::{CliError, Result};

/// One row of the summary: a key and a number, or a key and a text.
enum Value {
    Num(f64),
    Text(String),
}

/// The summary, in order.
#[derive(Default)]
struct Summary(Vec<(String, Value)>);

impl Summary {
    fn num(&mut self, k: impl Into<String>, v: f64) {
        self.0.push((k.into(), Value::Num(v)));
    }
    fn text(&mut self, k: impl Into<String>, v: impl Into<String>) {
        self.0.push((k.into(), Value::Text(v.into())));
    }
    fn get(&self, k: &str) -> Option<f64> {
        self.0.iter().find_map(|(key, v)| match v {
            Value::Num(n) if key == k => Some(*n),
            _ => None,
        })
    }
    fn latency(&mut self, prefix: &str, r: &Rtt) {
        self.num(format!("{prefix}_p50_ns"), r.p50 as f64);
        self.num(format!("{prefix}_p99_ns"), r.p99 as f64);
        self.num(format!("{prefix}_p999_ns"), r.p999 as f64);
        self.num(format!("{prefix}_mean_ns"), r.mean);
    }
    fn write(&self, out: &mut dyn Write, json: bool) -> Result<()> {
        if json {
            let body: Vec<String> = self
                .0
                .iter()
                .map(|(k, v)| match v {
                    Value::Num(n) if n.is_finite() => format!("\"{k}\":{}", fmt_num(*n)),
                    Value::Num(_) => format!("\"{k}\":null"),
                    Value::Text(t) => format!("\"{k}\":\"{}\"", escape(t)),
                })
                .collect();
            writeln!(out, "{{{}}}", body.join(","))?;
        } else {
            for (k, v) in &self.0 {
                match v {
                    Value::Num(n) => writeln!(out, "{k} {}", fmt_num(*n))?,
                    Value::Text(t) => writeln!(out, "{k} {t}")?,
                }
            }
        }
        Ok(())
    }
}

fn fmt_num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{n:.0}")
    } else {
        format!("{n:.3}")
    }
}

fn escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect()
}

/// Latency percentiles of one row, in nanoseconds.
#[derive(Debug, Clone, Copy)]
struct Rtt {
    p50: u64,
    p99: u64,
    p999: u64,
    mean: f64,
}

/// A histogram of round trips, in nanoseconds.
struct Hist(Histogram<u64>);

impl Hist {
    fn new() -> Result<Self> {
        Histogram::new_with_bounds(1, 60_000_000_000, 3)
            .map(Self)
            .map_err(|e| CliError::Histogram(e.to_string()))
    }
    fn record(&mut self, d: Duration) {
        let _ = self.0.record((d.as_nanos() as u64).max(1));
    }
    fn rtt(&self) -> Rtt {
        Rtt {
            p50: self.0.value_at_quantile(0.50),
            p99: self.0.value_at_quantile(0.99),
            p999: self.0.value_at_quantile(0.999),
            mean: self.0.mean(),
        }
    }
}

/// Runs `one` `calls / 10` (at least 1000) times to warm up, then `calls` times timed.
fn measure(calls: u64, mut one: impl FnMut(u64) -> Result<()>) -> Result<Rtt> {
    for i in 0..(calls / 10).max(1000) {
        one(i)?;
    }
    let mut h = Hist::new()?;
    for i in 0..calls {
        let t = Instant::now();
        one(i)?;
        h.record(t.elapsed());
    }
    Ok(h.rtt())
}

fn request(i: u64) -> Msg {
    let mut m = [0u8; 64];
    m[..8].copy_from_slice(&i.to_le_bytes());
    m[8..16].copy_from_slice(&(!i).to_le_bytes());
    m
}

/// `gyre bench`'s checked arguments.
struct Plan {
    backend: Backend,
    strategy: Option<TransferStrategy>,
    calls: u64,
    messages: u64,
    seconds: Duration,
    batches: Vec<usize>,
    emulate: Option<Duration>,
}

impl Plan {
    fn from_args(a: &BenchArgs) -> Result<Self> {
        let backend = Backend::from_str(&a.backend)?;
        let strategy = match &a.strategy {
            None => None,
            Some(s) => Some(match (TransferStrategy::from_str(s)?, a.poll_interval_us) {
                (TransferStrategy::DmaPolling { .. }, Some(us)) => {
                    TransferStrategy::dma_polling(Duration::from_micros(us))?
                }
                (other, Some(_)) => return Err(CliError::PollIntervalWithout(other.name())),
                (s, None) => s,
            }),
        };
        if a.calls == 0 {
            return Err(CliError::Bench("--calls must be at least 1".into()));
        }
        if a.batches.iter().any(|&b| b == 0 || b > 4096) {
            return Err(CliError::Bench(format!(
                "--batches {:?}: each must be in 1..=4096",
                a.batches
            )));
        }
        if a.emulate_remote_ns.is_some() && backend != Backend::Cpu {
            return Err(CliError::Bench(
                "--emulate-remote-ns applies to --backend cpu (the cost model of a PCIe GPU)"
                    .into(),
            ));
        }
        Ok(Self {
            backend,
            strategy,
            calls: a.calls,
            messages: a.messages.max(1),
            seconds: Duration::from_millis(a.max_ms_per_row.max(1)),
            batches: a.batches.clone(),
            emulate: a.emulate_remote_ns.map(Duration::from_nanos),
        })
    }

    fn runtime(&self) -> Result<Runtime> {
        let mut b = Runtime::builder().backend(self.backend);
        if let Some(s) = self.strategy {
            b = b.transfer_strategy(s);
        }
        if let Some(e) = self.emulate {
            b = b.cost_model(e);
        }
        Ok(b.build()?)
    }
}

/// Runs `gyre bench`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    let plan = Plan::from_args(args)?;
    let mut s = Summary::default();
    // The CUDA baselines first: their modules load while no ring kernel runs.
    if matches!(plan.backend, Backend::Cuda { .. }) {
        cuda_baselines(&plan, &mut s)?;
    }
    let rt = plan.runtime()?;
    s.text("backend", rt.backend_name());
    s.text("strategy", rt.memory_plan().strategy.name());
    if let Some(e) = plan.emulate {
        s.num("emulate_remote_ns", e.as_nanos() as f64);
        let floor = emulated_floor(e, plan.calls)?;
        s.latency("floor", &floor);
    }
    s.num("message_bytes", 64.0);
    s.num("calls", plan.calls as f64);

    // Round trip: one blocking caller, spinning, as the floor does.
    let k: Kernel<Msg, Msg> = rt.launch(
        KernelSpec::<Msg, Msg>::echo()
            .capacity(1024)
            .idle(IdleStrategy::BusySpin)
            .host_idle(IdleStrategy::BusySpin),
    )?;
    let before = k.device_cost();
    let rtt = measure(plan.calls, |i| {
        let m = request(i);
        let r = k.call_blocking(m)?;
        if r != m {
            return Err(CliError::Bench(format!("echo {i}: wrong reply")));
        }
        Ok(())
    })?;
    s.latency("rtt", &rtt);
    if let (Some(a), Some(b)) = (before, k.device_cost()) {
        cost_rows(&mut s, "rtt", &b.since(&a));
    }
    k.shutdown_blocking()?;

    // Throughput against the batch size.
    for &b in &plan.batches {
        let (rate, cost) = throughput(&rt, b, plan.messages, plan.seconds)?;
        s.num(format!("throughput_b{b}_msgs_per_s"), rate.round());
        if let Some(c) = cost {
            cost_rows(&mut s, &format!("b{b}"), &c);
        }
    }

    // Ratios.
    if let Some(f) = s.get("floor_p50_ns") {
        s.num("rtt_over_floor", rtt.p50 as f64 / f.max(1.0));
    }
    if let Some(l) = s.get("launch_sync_p50_ns") {
        s.num("launch_over_rtt", l / (rtt.p50 as f64).max(1.0));
    }
    if let Some(g) = s.get("graph_sync_p50_ns") {
        s.num("graph_over_rtt", g / (rtt.p50 as f64).max(1.0));
    }
    if let (Some(b1), Some(b32)) = (
        s.get("throughput_b1_msgs_per_s"),
        s.get("throughput_b32_msgs_per_s"),
    ) {
        s.num("b32_over_b1", b32 / b1.max(1.0));
    }
    s.write(out, args.json)
}

/// The cost model's rows of one measurement: read waves and fences per batch (waves of
/// polls that found a batch; empty polls apart), telemetry writes.
fn cost_rows(s: &mut Summary, prefix: &str, c: &gyre::telemetry::DeviceCost) {
    let batches = c.batches.max(1) as f64;
    s.num(
        format!("{prefix}_read_waves_per_batch"),
        c.waves.saturating_sub(c.empty_polls) as f64 / batches,
    );
    s.num(
        format!("{prefix}_fences_per_batch"),
        c.fences as f64 / batches,
    );
    s.num(format!("{prefix}_batches"), c.batches as f64);
    s.num(format!("{prefix}_empty_polls"), c.empty_polls as f64);
    s.num(
        format!("{prefix}_telemetry_writes"),
        c.telemetry_writes as f64,
    );
}

/// Messages per second through an echo kernel with host and kernel batches of `batch`
/// (for at most `max` messages or `within`), and what the kernel paid (cost model).
fn throughput(
    rt: &Runtime,
    batch: usize,
    max: u64,
    within: Duration,
) -> Result<(f64, Option<gyre::telemetry::DeviceCost>)> {
    let cap = 4096usize.max((batch * 4).next_power_of_two());
    let k: Kernel<Msg, Msg> = rt.launch(
        KernelSpec::<Msg, Msg>::echo()
            .capacity(cap)
            .batch_size(batch.min(cap))
            .idle(IdleStrategy::BusySpin)
            .host_idle(IdleStrategy::BusySpin),
    )?;
    let reqs: Vec<Msg> = (0..batch as u64).map(request).collect();
    let mut got: Vec<gyre::Result<Msg>> = Vec::with_capacity(batch);
    let run = |limit: u64,
               until: Duration,
               got: &mut Vec<gyre::Result<Msg>>|
     -> Result<(u64, Duration)> {
        let (mut sent, mut recvd) = (0u64, 0u64);
        let t = Instant::now();
        let mut open = true;
        while recvd < sent || (open && recvd < limit) {
            // Past the time limit, stop sending and drain what is in flight.
            open = open && t.elapsed() < until;
            let want = if open {
                ((limit - sent) as usize).min(batch)
            } else {
                0
            };
            if want > 0 && k.try_send_batch(&reqs[..want]).is_ok() {
                sent += want as u64;
            }
            got.clear();
            recvd += k.try_recv_batch(got, batch)? as u64;
            if let Some(Err(e)) = got.iter().find(|r| r.is_err()) {
                return Err(CliError::Bench(format!("throughput B={batch}: {e}")));
            }
        }
        Ok((recvd, t.elapsed()))
    };
    run((max / 10).max(batch as u64), within / 10, &mut got)?;
    let before = k.device_cost();
    let (n, d) = run(max, within, &mut got)?;
    let cost = match (before, k.device_cost()) {
        (Some(a), Some(b)) => Some(b.since(&a)),
        _ => None,
    };
    k.shutdown_blocking()?;
    Ok((n as f64 / d.as_secs_f64().max(1e-9), cost))
}

/// The floor of the cost model: a word ping-pong with a thread that pays `emulate` per
/// poll of the word (one read wave) and answers with a plain store (posted).
fn emulated_floor(emulate: Duration, calls: u64) -> Result<Rtt> {
    let h2k = Arc::new(AtomicU64::new(0));
    let k2h = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (a, b, c) = (h2k.clone(), k2h.clone(), stop.clone());
    let poller = std::thread::Builder::new()
        .name("gyre-bench-floor".into())
        .spawn(move || {
            let mut last = 0u64;
            while !c.load(Ordering::Relaxed) {
                let until = Instant::now() + emulate;
                let w = a.load(Ordering::Acquire);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                if w != last {
                    last = w;
                    b.store(w, Ordering::Release);
                }
            }
        })
        .map_err(|e| CliError::Bench(format!("the emulated floor's thread: {e}")))?;
    let r = measure(calls, |i| {
        let w = i + 1;
        h2k.store(w, Ordering::Release);
        while k2h.load(Ordering::Acquire) != w {
            std::hint::spin_loop();
        }
        Ok(())
    });
    stop.store(true, Ordering::Relaxed);
    let _ = poller.join();
    r
}

/// The CUDA baselines of the same process: the floor, launch+sync, graph+sync.
fn cuda_baselines(plan: &Plan, s: &mut Summary) -> Result<()> {
    let device = match plan.backend {
        Backend::Cuda { device } => device,
        _ => 0,
    };
    let cuda = |e: gyre_cuda::Error| CliError::Bench(format!("CUDA baseline: {e}"));
    let backend = gyre_cuda::CudaBackend::on_device(device).map_err(cuda)?;
    let info = backend.info();
    s.text("device", info.device.name.clone());
    s.text("driver", info.driver_version_string());
    s.text("nvrtc", backend.nvrtc().version_string());
    let mut floor = gyre_cuda::peer::FloorPeer::new(&backend).map_err(cuda)?;
    let mut h = Hist::new()?;
    let warm = (plan.calls / 10).max(1000);
    let mut n = 0u64;
    floor
        .ping_pong(warm + plan.calls, Duration::from_secs(60), |d| {
            n += 1;
            if n > warm {
                h.record(d);
            }
        })
        .map_err(cuda)?;
    s.latency("floor", &h.rtt());
    drop(floor);
    let mut peer = gyre_cuda::peer::LaunchPeer::new(&backend).map_err(cuda)?;
    let launch = measure(plan.calls, |i| {
        let m = request(i);
        match peer.launch_echo(&m) {
            Ok(r) if r == m => Ok(()),
            Ok(_) => Err(CliError::Bench("launch+sync echo: wrong reply".into())),
            Err(e) => Err(cuda(e)),
        }
    })?;
    s.latency("launch_sync", &launch);
    let graph = measure(plan.calls, |i| {
        let m = request(i);
        match peer.graph_echo(&m) {
            Ok(r) if r == m => Ok(()),
            Ok(_) => Err(CliError::Bench("graph+sync echo: wrong reply".into())),
            Err(e) => Err(cuda(e)),
        }
    })?;
    s.latency("graph_sync", &graph);
    Ok(())
}
