//! The pause a relaunch adds: round-trip times of calls that overlap a reload (or an
//! epoch's handover) against calls that do not, on the CPU backend (and on the first
//! OpenCL device when `GYRE_BENCH_OPENCL=platform:device` names one).
//!
//! A caller thread issues `call_blocking` back to back for the whole run; the main thread
//! reloads the kernel `RELOADS` times, alternating two handlers, with a pause between
//! reloads. A call whose [send, reply] interval overlaps a reload's [start, return]
//! interval counts as "across a reload". Prints p50 / p99 / max of both sets and their
//! ratio. `cargo bench --bench reload` (results in `docs/benchmarks.md`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gyre::{Backend, KernelSpec, Runtime};
use hdrhistogram::Histogram;

const RELOADS: usize = 200;

#[gyre::handler]
fn even(x: u64) -> u64 {
    x << 1
}

#[gyre::handler]
fn odd(x: u64) -> u64 {
    (x << 1) | 1
}

fn run(label: &str, rt: &Runtime, epoch: Option<Duration>) {
    let mut spec = KernelSpec::portable(even);
    if let Some(e) = epoch {
        spec = spec.epoch(e);
    }
    let k = rt.launch(spec).expect("launch");
    let stop = Arc::new(AtomicBool::new(false));
    let calls: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let caller = {
        let (k, stop, calls) = (k.clone(), stop.clone(), calls.clone());
        std::thread::spawn(move || {
            let mut v = Vec::with_capacity(1 << 20);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                let r = k.call_blocking(i).expect("call");
                let t1 = Instant::now();
                assert_eq!(r >> 1, i);
                v.push((t0, t1));
                i += 1;
            }
            *calls.lock().unwrap() = v;
        })
    };
    let mut windows = Vec::new();
    std::thread::sleep(Duration::from_millis(50));
    let n = if epoch.is_some() { 0 } else { RELOADS };
    for r in 0..n {
        let spec = if r % 2 == 0 {
            KernelSpec::portable(odd)
        } else {
            KernelSpec::portable(even)
        };
        let t0 = Instant::now();
        k.reload_blocking(spec).expect("reload");
        windows.push((t0, Instant::now()));
        std::thread::sleep(Duration::from_millis(2));
    }
    if epoch.is_some() {
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    caller.join().expect("caller");
    let relaunches = k.relaunches();
    k.shutdown_blocking().expect("shutdown");
    let calls = calls.lock().unwrap();
    let mut steady = Histogram::<u64>::new(3).expect("histogram");
    let mut across = Histogram::<u64>::new(3).expect("histogram");
    let mut reload_ns = Histogram::<u64>::new(3).expect("histogram");
    for (a, b) in &windows {
        reload_ns.record((*b - *a).as_nanos() as u64).ok();
    }
    let mut w = 0;
    for (t0, t1) in calls.iter() {
        while w < windows.len() && windows[w].1 < *t0 {
            w += 1;
        }
        let overlaps = w < windows.len() && windows[w].0 <= *t1;
        let ns = (*t1 - *t0).as_nanos() as u64;
        if overlaps {
            across.record(ns).ok();
        } else {
            steady.record(ns).ok();
        }
    }
    let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p) as f64 / 1000.0;
    println!("{label}: {} calls, {:?}", calls.len(), relaunches);
    println!(
        "  steady        n={:>8}  p50 {:>8.1} us  p99 {:>8.1} us  max {:>9.1} us",
        steady.len(),
        q(&steady, 0.5),
        q(&steady, 0.99),
        steady.max() as f64 / 1000.0
    );
    if !across.is_empty() {
        println!(
            "  across reload n={:>8}  p50 {:>8.1} us  p99 {:>8.1} us  max {:>9.1} us  (p50 ratio {:.1}x)",
            across.len(),
            q(&across, 0.5),
            q(&across, 0.99),
            across.max() as f64 / 1000.0,
            q(&across, 0.5) / q(&steady, 0.5).max(1e-3)
        );
        println!(
            "  reload call   n={:>8}  p50 {:>8.1} us  p99 {:>8.1} us  max {:>9.1} us",
            reload_ns.len(),
            q(&reload_ns, 0.5),
            q(&reload_ns, 0.99),
            reload_ns.max() as f64 / 1000.0
        );
    }
}

fn main() {
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("cpu");
    run("cpu, 200 reloads", &cpu, None);
    run("cpu, 1 ms epochs", &cpu, Some(Duration::from_millis(1)));
    if let Ok(v) = std::env::var("GYRE_BENCH_OPENCL") {
        let mut it = v.split(':').map(|s| s.parse::<usize>().unwrap_or(0));
        let (platform, device) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
        match Runtime::builder()
            .backend(Backend::OpenCl { platform, device })
            .build()
        {
            Ok(rt) => {
                run("opencl, 200 reloads", &rt, None);
                run("opencl, 1 ms epochs", &rt, Some(Duration::from_millis(1)));
            }
            Err(e) => println!("SKIP opencl: {e}"),
        }
    }
}
