//! The GPU benchmark: a 64-byte echo through the persistent ring kernel on CUDA, against
//! the two ways a CUDA program without one answers a request, in the same process and run
//! (`gyre_cuda::peer`):
//!
//! * **launch+sync**: one kernel launch per request, then `cuStreamSynchronize`;
//! * **graph+sync**: one replay of a captured CUDA graph per request, then
//!   `cuStreamSynchronize`.
//!
//! Rows: RTT (p50, p99, p99.9, mean; one blocking caller, `call_blocking`) for gyre under
//! every transfer strategy and for both peers; then gyre's throughput against the batch
//! size (`try_send_batch` / `try_recv_batch` of B messages, kernel batch B), under the
//! zero-copy strategy. Then the ratios and the targets (H100: RTT p50 <= 2.5 us
//! and >= 3x faster than launch+sync; >= 20 M msg/s at batches of 32 or more), each said
//! met or missed: a benchmark reports, it does not assert (it exits 1 only when a row
//! could not run at all).
//!
//! `cargo bench --bench cuda` (or the bundled binary of `scripts/gpu-kit.sh` with
//! `--bench`). Without a usable GPU it prints why and exits 0; with `GYRE_REQUIRE_CUDA=1`
//! it fails instead. `GYRE_BENCH_CUDA_CALLS` sets the round trips per RTT row (default
//! 20000), `GYRE_BENCH_CUDA_MESSAGES` the messages per throughput row (default 2000000).

mod common;

use std::time::{Duration, Instant};

use common::Msg;
use gyre::{Backend, Kernel, KernelSpec, Runtime, TransferStrategy};
use hdrhistogram::Histogram;

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Latency summary of one row, in nanoseconds.
#[derive(Debug, Clone, Copy)]
struct Rtt {
    p50: u64,
    p99: u64,
    p999: u64,
    mean: f64,
}

fn measure(calls: u64, mut one: impl FnMut(u64)) -> Rtt {
    // Warm-up: a tenth of the calls, at least 1000.
    for i in 0..(calls / 10).max(1000) {
        one(i);
    }
    let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("histogram");
    for i in 0..calls {
        let t = Instant::now();
        one(i);
        let ns = t.elapsed().as_nanos() as u64;
        let _ = h.record(ns.max(1));
    }
    Rtt {
        p50: h.value_at_quantile(0.50),
        p99: h.value_at_quantile(0.99),
        p999: h.value_at_quantile(0.999),
        mean: h.mean(),
    }
}

fn us(ns: f64) -> String {
    format!("{:.2} us", ns / 1000.0)
}

fn req(i: u64) -> Msg {
    let mut m = [0u8; 64];
    m[..8].copy_from_slice(&i.to_le_bytes());
    m[8..16].copy_from_slice(&(!i).to_le_bytes());
    m
}

fn runtime(s: TransferStrategy) -> gyre::Result<Runtime> {
    Runtime::builder()
        .backend(Backend::Cuda { device: 0 })
        .transfer_strategy(s)
        .build()
}

fn gyre_rtt(s: TransferStrategy, calls: u64) -> gyre::Result<Rtt> {
    let rt = runtime(s)?;
    let k: Kernel<Msg, Msg> = rt.launch(KernelSpec::<Msg, Msg>::echo().capacity(1024))?;
    let mut bad = 0u64;
    let r = measure(calls, |i| {
        let m = req(i);
        match k.call_blocking(m) {
            Ok(reply) if reply == m => {}
            _ => bad += 1,
        }
    });
    k.shutdown_blocking()?;
    if bad > 0 {
        eprintln!(
            "WARNING: {bad} gyre {} replies were wrong or errors",
            s.name()
        );
    }
    Ok(r)
}

/// Messages per second through gyre with host and kernel batches of `batch`.
fn gyre_throughput(batch: usize, messages: u64) -> gyre::Result<f64> {
    let rt = runtime(TransferStrategy::Unified)?;
    let cap = 4096usize.max((batch * 4).next_power_of_two());
    let k: Kernel<Msg, Msg> = rt.launch(
        KernelSpec::<Msg, Msg>::echo()
            .capacity(cap)
            .batch_size(batch.min(cap)),
    )?;
    let reqs: Vec<Msg> = (0..batch as u64).map(req).collect();
    common::batched_echo_of(&k, messages / 10, &reqs, false)?;
    let d = common::batched_echo_of(&k, messages, &reqs, false)?;
    k.shutdown_blocking()?;
    Ok(messages as f64 / d.as_secs_f64())
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or other flags are ignored.
    let require = std::env::var("GYRE_REQUIRE_CUDA").is_ok_and(|v| v == "1");
    let backend = match gyre_cuda::CudaBackend::new() {
        Ok(b) => b,
        Err(e) if require => {
            eprintln!("error: GYRE_REQUIRE_CUDA=1 but CUDA is unusable: {e}");
            std::process::exit(1);
        }
        Err(e) => {
            println!("SKIP cuda bench: {e}");
            return;
        }
    };
    let calls = env_u64("GYRE_BENCH_CUDA_CALLS", 20_000);
    let messages = env_u64("GYRE_BENCH_CUDA_MESSAGES", 2_000_000);
    let info = backend.info();
    println!(
        "device: {} (sm_{}), driver {}, NVRTC {}; {calls} calls per RTT row, {messages} \
         messages per throughput row",
        info.device.name,
        info.device.arch(),
        info.driver_version_string(),
        backend.nvrtc().version_string()
    );

    let mut rows: Vec<(String, Rtt)> = Vec::new();
    let mut failed = 0u32;
    let strategies = [
        TransferStrategy::Unified,
        TransferStrategy::Sync,
        TransferStrategy::Async,
        TransferStrategy::DmaPolling {
            poll_interval: Duration::from_micros(1),
        },
    ];
    for s in strategies {
        match gyre_rtt(s, calls) {
            Ok(r) => rows.push((format!("gyre {}", s.name()), r)),
            Err(e) => {
                failed += 1;
                println!("gyre {}: FAILED: {e}", s.name());
            }
        }
    }
    let peers = gyre_cuda::peer::LaunchPeer::new(&backend).map(|mut p| {
        let launch = measure(calls, |i| {
            let m = req(i);
            assert_eq!(p.launch_echo(&m).expect("launch echo"), m);
        });
        let graph = measure(calls, |i| {
            let m = req(i);
            assert_eq!(p.graph_echo(&m).expect("graph echo"), m);
        });
        (launch, graph)
    });
    match peers {
        Ok((l, g)) => {
            rows.push(("launch+sync".into(), l));
            rows.push(("graph+sync".into(), g));
        }
        Err(e) => {
            failed += 1;
            println!("peers: FAILED: {e}");
        }
    }

    println!("\n64-byte echo RTT");
    println!(
        "{:<20} {:>10} {:>10} {:>10} {:>10}",
        "", "p50", "p99", "p99.9", "mean"
    );
    for (name, r) in &rows {
        println!(
            "{:<20} {:>10} {:>10} {:>10} {:>10}",
            name,
            us(r.p50 as f64),
            us(r.p99 as f64),
            us(r.p999 as f64),
            us(r.mean)
        );
    }

    println!("\nthroughput (unified, host and kernel batch B)");
    let mut best_32_plus: f64 = 0.0;
    for batch in [1usize, 8, 32, 64, 128, 256] {
        match gyre_throughput(batch, messages) {
            Ok(mps) => {
                println!("  B = {batch:>3}: {:>7.2} M msg/s", mps / 1e6);
                if batch >= 32 {
                    best_32_plus = best_32_plus.max(mps);
                }
            }
            Err(e) => {
                failed += 1;
                println!("  B = {batch:>3}: FAILED: {e}");
            }
        }
    }

    let p50 = |n: &str| rows.iter().find(|(r, _)| r == n).map(|(_, r)| r.p50 as f64);
    println!("\nratios and targets (H100 targets from issue 11)");
    if let (Some(g), Some(l)) = (p50("gyre unified"), p50("launch+sync")) {
        let x = l / g;
        println!(
            "  launch+sync p50 / gyre unified p50 = {x:.2}x (target >= 3x: {})",
            if x >= 3.0 { "met" } else { "MISSED" }
        );
        println!(
            "  gyre unified p50 = {} (target <= 2.5 us: {})",
            us(g),
            if g <= 2500.0 { "met" } else { "MISSED" }
        );
    }
    if let (Some(g), Some(gr)) = (p50("gyre unified"), p50("graph+sync")) {
        println!("  graph+sync p50 / gyre unified p50 = {:.2}x", gr / g);
    }
    println!(
        "  best throughput at B >= 32 = {:.2} M msg/s (target >= 20: {})",
        best_32_plus / 1e6,
        if best_32_plus >= 20e6 {
            "met"
        } else {
            "MISSED"
        }
    );
    if failed > 0 {
        eprintln!("error: {failed} benchmark row(s) failed");
        std::process::exit(1);
    }
}
