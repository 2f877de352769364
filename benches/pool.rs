//! Kernel pools: call throughput of one service on 1 and on 2 member kernels (CPU
//! backend), in one run. Two paths: `call_blocking` from 2 host threads, and one host
//! thread keeping 64 async calls in flight (`call` futures polled together). Every kernel
//! and caller uses the default idle strategy (spin, yield, then park), so members that
//! wait give their core back: this machine has 2 cores, and 2 busy-spinning kernels plus
//! their callers would only measure the scheduler. 5 interleaved rounds of 1 s per path;
//! medians. A third path repeats the async one with `async_spin(0)` (a pending call
//! registers with its member's completion driver at once instead of spinning on the
//! caller's thread first), to show what the spinning costs when kernels outnumber the
//! free cores. `cargo bench --bench pool` (results in `docs/benchmarks.md`).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use gyre::{
    pool::{KernelPool, PoolOptions},
    Backend, KernelSpec, Runtime,
};

const RUN: Duration = Duration::from_secs(1);
const ROUNDS: usize = 5;
const IN_FLIGHT: usize = 64;

fn pool(rt: &Runtime, members: usize, spin: bool) -> KernelPool<u64, u64> {
    let spec = KernelSpec::from_fn("inc", |x: u64| x.wrapping_add(1));
    let spec = if spin {
        spec
    } else {
        spec.async_spin(Duration::ZERO)
    };
    rt.launch(gyre::pool::PoolSpec::new(spec, PoolOptions::new(members)))
        .expect("pool")
}

/// Calls per second from `threads` threads calling one by one.
fn blocking(p: &KernelPool<u64, u64>, threads: usize) -> f64 {
    let t0 = Instant::now();
    let n: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while t0.elapsed() < RUN {
                        for i in 0..64 {
                            assert_eq!(p.call_blocking(i).expect("call"), i + 1);
                        }
                        n += 64;
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("caller")).sum()
    });
    n as f64 / t0.elapsed().as_secs_f64()
}

/// Calls per second with `IN_FLIGHT` async calls polled together, in rounds.
fn in_flight(p: &KernelPool<u64, u64>) -> f64 {
    let tokio = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("tokio");
    let t0 = Instant::now();
    let mut n = 0u64;
    tokio.block_on(async {
        while t0.elapsed() < RUN {
            let mut calls: Vec<_> = (0..IN_FLIGHT as u64).map(|i| Some(p.call(i))).collect();
            std::future::poll_fn(|cx| {
                let mut pending = false;
                for c in calls.iter_mut() {
                    if let Some(f) = c {
                        match Pin::new(f).poll(cx) {
                            Poll::Ready(r) => {
                                r.expect("call");
                                *c = None;
                            }
                            Poll::Pending => pending = true,
                        }
                    }
                }
                if pending {
                    Poll::Pending
                } else {
                    Poll::Ready(())
                }
            })
            .await;
            n += IN_FLIGHT as u64;
        }
    });
    n as f64 / t0.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("runtime");
    let pools = [pool(&rt, 1, true), pool(&rt, 2, true)];
    let no_spin = [pool(&rt, 1, false), pool(&rt, 2, false)];
    type Path = (&'static str, fn(&KernelPool<u64, u64>) -> f64, bool);
    let paths: [Path; 3] = [
        ("call_blocking, 2 threads", |p| blocking(p, 2), true),
        ("64 async calls in flight", in_flight, true),
        ("64 async calls in flight, async_spin(0)", in_flight, false),
    ];
    let mut rates = vec![vec![Vec::new(); 2]; paths.len()];
    for _ in 0..ROUNDS {
        for (pi, (_, f, spin)) in paths.iter().enumerate() {
            let ps = if *spin { &pools } else { &no_spin };
            for (mi, p) in ps.iter().enumerate() {
                rates[pi][mi].push(f(p));
            }
        }
    }
    println!(
        "kernel pool call throughput, CPU backend, {ROUNDS} interleaved rounds x {} s, medians",
        RUN.as_secs()
    );
    println!("| path | 1 member | 2 members | 2 / 1 |");
    println!("| --- | ---: | ---: | ---: |");
    for (pi, (name, _, _)) in paths.iter().enumerate() {
        let one = median(rates[pi][0].clone());
        let two = median(rates[pi][1].clone());
        println!(
            "| {name} | {:.0} k/s | {:.0} k/s | {:.2}x |",
            one / 1e3,
            two / 1e3,
            two / one
        );
    }
    for p in pools.into_iter().chain(no_spin) {
        p.shutdown_blocking().expect("shutdown");
    }
}
