//! How gyre's waiters behave (issue 29, "Waiters"), on the CPU backend:
//!
//! 1. **Deadlines.** `call_timeout(1 ms)` on a handler that takes 20 ms: when does the
//!    call return (the overshoot past its deadline, p50 / p99 / max of 40 calls)? Then 200
//!    calls with timeouts of 0.5..3.5 ms on a 2 ms handler: how many timed out, and how
//!    many returned a reply after their deadline.
//! 2. **Async callers under concurrency**, against the tokio idiom a user would write
//!    instead (a worker task behind a bounded `mpsc` channel, each request carrying a
//!    `oneshot` for its reply), in one process, on a 2-worker tokio runtime, with an echo
//!    on each: one caller's RTT (`call().await` against the idiom's round trip), and calls
//!    per second of 64 concurrent tasks. Ratios are within the same run.
//!
//! `cargo bench --bench waiters` prints `key value` lines. It reports; it does not judge
//! (docs/benchmarks.md holds the targets and the figures). To profile gyre's side of the
//! 64 tasks alone, `GYRE_WAITERS_PROFILE=<seconds>` runs only that, for that long (under
//! `perf record`, say), and prints its calls per second.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre::{Backend, Error, KernelSpec, Runtime};

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99), *v.last().unwrap_or(&Duration::ZERO))
}

fn rt() -> Runtime {
    Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("runtime")
}

/// 1. Deadlines of blocking calls.
fn deadlines() {
    let r = rt();
    let slow = r
        .launch(KernelSpec::from_fn("slow20", |x: u64| {
            std::thread::sleep(Duration::from_millis(20));
            x
        }))
        .expect("launch");
    let mut over = Vec::new();
    for i in 0..40u64 {
        let t = Instant::now();
        match slow.call_timeout(i, Duration::from_millis(1)) {
            Err(Error::Timeout { .. }) => {
                over.push(t.elapsed().saturating_sub(Duration::from_millis(1)))
            }
            other => println!("# 20 ms handler, 1 ms timeout: unexpected {other:?}"),
        }
        // Let the kernel finish the abandoned call before the next.
        std::thread::sleep(Duration::from_millis(21));
    }
    let (p50, p99, max) = percentiles(over);
    println!(
        "timeout_1ms_overshoot_p50_us {:.1}",
        p50.as_secs_f64() * 1e6
    );
    println!(
        "timeout_1ms_overshoot_p99_us {:.1}",
        p99.as_secs_f64() * 1e6
    );
    println!(
        "timeout_1ms_overshoot_max_us {:.1}",
        max.as_secs_f64() * 1e6
    );
    slow.shutdown_blocking().expect("shutdown");

    let two = r
        .launch(KernelSpec::from_fn("slow2", |x: u64| {
            std::thread::sleep(Duration::from_millis(2));
            x
        }))
        .expect("launch");
    let (mut timed_out, mut late_ok, mut ok) = (0u32, 0u32, 0u32);
    for i in 0..200u64 {
        let timeout = Duration::from_micros(500 + (i * 15_000 / 1000) % 3000);
        let t = Instant::now();
        match two.call_timeout(i, timeout) {
            Ok(_) if t.elapsed() > timeout => late_ok += 1,
            Ok(_) => ok += 1,
            Err(Error::Timeout { .. }) => {
                timed_out += 1;
                std::thread::sleep(Duration::from_millis(3));
            }
            Err(e) => println!("# 2 ms handler: unexpected {e}"),
        }
    }
    println!("timeouts_0_5_to_3_5ms_on_2ms_handler_timed_out {timed_out}");
    println!("timeouts_0_5_to_3_5ms_on_2ms_handler_ok_in_time {ok}");
    println!("timeouts_0_5_to_3_5ms_on_2ms_handler_ok_after_deadline {late_ok}");
    two.shutdown_blocking().expect("shutdown");
}

/// The tokio idiom: a worker task answering requests from a bounded mpsc channel through
/// each request's oneshot.
type Req = (u64, tokio::sync::oneshot::Sender<u64>);

fn idiom(trt: &tokio::runtime::Runtime) -> tokio::sync::mpsc::Sender<Req> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Req>(1024);
    trt.spawn(async move {
        while let Some((x, reply)) = rx.recv().await {
            let _ = reply.send(x);
        }
    });
    tx
}

async fn idiom_call(tx: &tokio::sync::mpsc::Sender<Req>, x: u64) -> u64 {
    let (otx, orx) = tokio::sync::oneshot::channel();
    tx.send((x, otx)).await.expect("idiom worker");
    orx.await.expect("idiom reply")
}

/// A 2-worker tokio runtime, and an echo kernel on the CPU backend (with its runtime).
fn echo_on_two_workers() -> (tokio::runtime::Runtime, Runtime, gyre::Kernel<u64, u64>) {
    let trt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let r = rt();
    let k = r
        .launch(KernelSpec::<u64, u64>::echo().capacity(1024))
        .expect("launch");
    (trt, r, k)
}

/// 2. Async callers: one caller's RTT and 64 concurrent tasks' calls per second.
fn concurrency() {
    let (trt, _r, k) = echo_on_two_workers();
    let tx = idiom(&trt);
    const ONE: u64 = 20_000;
    for round in 0..3 {
        let g = trt.block_on(async {
            let t = Instant::now();
            for i in 0..ONE {
                assert_eq!(k.call(i).await.expect("call"), i);
            }
            t.elapsed() / ONE as u32
        });
        let d = trt.block_on(async {
            let t = Instant::now();
            for i in 0..ONE {
                assert_eq!(idiom_call(&tx, i).await, i);
            }
            t.elapsed() / ONE as u32
        });
        println!(
            "round{round}_one_caller_rtt_ns gyre {} idiom {} ratio {:.3}",
            g.as_nanos(),
            d.as_nanos(),
            g.as_secs_f64() / d.as_secs_f64()
        );
    }
    const TASKS: u64 = 64;
    let window = Duration::from_millis(300);
    for round in 0..3 {
        let count = |gyre_side: bool| {
            let done = Arc::new(AtomicU64::new(0));
            trt.block_on(async {
                let start = Instant::now();
                let mut hs = Vec::new();
                for t in 0..TASKS {
                    let (k, tx, done) = (k.clone(), tx.clone(), done.clone());
                    hs.push(tokio::spawn(async move {
                        let mut i = t << 32;
                        while start.elapsed() < window {
                            let got = if gyre_side {
                                k.call(i).await.expect("call")
                            } else {
                                idiom_call(&tx, i).await
                            };
                            assert_eq!(got, i);
                            i += 1;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }));
                }
                for h in hs {
                    h.await.expect("task");
                }
                done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
            })
        };
        let g = count(true);
        let d = count(false);
        println!(
            "round{round}_64_tasks_calls_per_s gyre {:.0} idiom {:.0} ratio {:.3}",
            g,
            d,
            g / d
        );
    }
    k.shutdown_blocking().expect("shutdown");
}

/// `GYRE_WAITERS_PROFILE`: gyre's 64 tasks alone, for `secs` seconds.
fn profile(secs: f64) {
    let (trt, _r, k) = echo_on_two_workers();
    let window = Duration::from_secs_f64(secs);
    let done = Arc::new(AtomicU64::new(0));
    let rate = trt.block_on(async {
        let start = Instant::now();
        let mut hs = Vec::new();
        for t in 0..64u64 {
            let (k, done) = (k.clone(), done.clone());
            hs.push(tokio::spawn(async move {
                let mut i = t << 32;
                while start.elapsed() < window {
                    assert_eq!(k.call(i).await.expect("call"), i);
                    i += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        for h in hs {
            h.await.expect("task");
        }
        done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
    });
    println!("profile_64_tasks_calls_per_s gyre {rate:.0}");
    k.shutdown_blocking().expect("shutdown");
}

fn main() {
    if let Some(secs) = std::env::var("GYRE_WAITERS_PROFILE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
    {
        return profile(secs);
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: one quick pass.
    deadlines();
    concurrency();
}
