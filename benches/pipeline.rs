//! Pipelines: a chain of 2 and of 3 echo stages (the kernels pass each message on
//! themselves, `docs/pipelines.md`) against the same stages hopped through the host (a
//! host thread receives each reply from one kernel and sends it to the next), in one run,
//! CPU backend.
//!
//! - throughput: one producer thread `send_blocking`s, one consumer thread
//!   `recv_blocking`s (and, for the hop, one host thread per link in between), for 1 s;
//! - round trip: one caller, one message at a time (`call_blocking` on the chain; one
//!   `call_blocking` per stage in turn for the hop), per-call latency, median and p99.
//!
//! In the same rounds, a fan-out graph: a head, a round-robin fan-out of 2 echo branches
//! and an echo join (4 stages), against the chain of 3 (the same path length): what the
//! fan-out's copy, the writes by id and the extra thread cost on echo stages that have no
//! work to spread.
//!
//! Every kernel and host wait uses the default idle strategy (spin, yield, then park):
//! this machine has 2 cores, and a chain of 3 with its producer and consumer is 5 busy
//! threads. 5 interleaved rounds of 1 s per configuration; medians over rounds.
//! `cargo bench --bench pipeline` (results in `docs/benchmarks.md`).

use std::time::{Duration, Instant};

use gyre::{
    pipeline::{Branch, Pipeline, PipelineSpec, Route},
    Backend, Kernel, KernelSpec, Runtime,
};

const RUN: Duration = Duration::from_secs(1);
const ROUNDS: usize = 5;
const CAPACITY: usize = 256;

type K = Kernel<u64, u64>;

fn stage() -> KernelSpec<u64, u64> {
    KernelSpec::<u64, u64>::echo().capacity(CAPACITY)
}

fn chain(rt: &Runtime, n: usize) -> Pipeline<u64, u64> {
    let mut spec = PipelineSpec::new(format!("chain{n}"), stage());
    for _ in 1..n {
        spec = spec.then(stage());
    }
    rt.launch(spec).expect("pipeline")
}

fn graph(rt: &Runtime) -> Pipeline<u64, u64> {
    let spec = PipelineSpec::new("fan2", stage())
        .fan_out(
            Route::RoundRobin,
            [Branch::new(stage()), Branch::new(stage())],
        )
        .then(stage());
    rt.launch(spec).expect("graph")
}

fn kernels(rt: &Runtime, n: usize) -> Vec<K> {
    (0..n)
        .map(|k| {
            rt.launch(stage().named(format!("hop{n}.{k}")))
                .expect("kernel")
        })
        .collect()
}

/// Messages per second through `first` .. `last`, with `links` moving replies between.
fn throughput(first: &K, last: &K, links: &[(K, K)]) -> f64 {
    let t0 = Instant::now();
    let sent = std::thread::scope(|s| {
        let producer = s.spawn(|| {
            let mut n = 0u64;
            while t0.elapsed() < RUN {
                for _ in 0..64 {
                    first.send_blocking(n).expect("send");
                    n += 1;
                }
            }
            n
        });
        let hops: Vec<_> = links
            .iter()
            .map(|(from, to)| {
                s.spawn(move || {
                    // Moves replies until the producer is done and everything passed.
                    while let Ok(v) = from.recv_timeout(Duration::from_millis(200)) {
                        to.send_blocking(v).expect("hop send");
                    }
                })
            })
            .collect();
        let consumer = s.spawn(|| {
            let mut expect = 0u64;
            while let Ok(v) = last.recv_timeout(Duration::from_millis(500)) {
                assert_eq!(v, expect, "in order");
                expect += 1;
            }
            expect
        });
        let sent = producer.join().expect("producer");
        for h in hops {
            h.join().expect("hop");
        }
        let got = consumer.join().expect("consumer");
        assert_eq!(got, sent, "every message came through");
        sent
    });
    sent as f64 / RUN.as_secs_f64()
}

/// Per-call round-trip times (ns) of `call` for `RUN`.
fn rtt(mut call: impl FnMut(u64) -> u64) -> Vec<u64> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    let mut i = 0u64;
    while t0.elapsed() < RUN {
        let t = Instant::now();
        assert_eq!(call(i), i);
        out.push(t.elapsed().as_nanos() as u64);
        i += 1;
    }
    out
}

fn quantile(v: &mut [u64], q: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Row {
    tput: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

fn main() {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("runtime");
    let lens = [2usize, 3];
    let chains: Vec<_> = lens.iter().map(|&n| chain(&rt, n)).collect();
    let hops: Vec<_> = lens.iter().map(|&n| kernels(&rt, n)).collect();
    let fan = graph(&rt);
    // rows[i * 2]: chain of lens[i]; rows[i * 2 + 1]: the hop; the last: the graph.
    let mut rows: Vec<Row> = (0..lens.len() * 2 + 1)
        .map(|_| Row {
            tput: Vec::new(),
            p50: Vec::new(),
            p99: Vec::new(),
        })
        .collect();
    for _ in 0..ROUNDS {
        for (i, (c, h)) in chains.iter().zip(&hops).enumerate() {
            let links: Vec<_> = h.windows(2).map(|w| (w[0].clone(), w[1].clone())).collect();
            rows[i * 2].tput.push(throughput(c, c, &[]));
            rows[i * 2 + 1]
                .tput
                .push(throughput(&h[0], &h[h.len() - 1], &links));
            let mut a = rtt(|x| c.call_blocking(x).expect("call"));
            let mut b = rtt(|x| h.iter().fold(x, |v, k| k.call_blocking(v).expect("call")));
            for (r, v) in [(i * 2, &mut a), (i * 2 + 1, &mut b)] {
                rows[r].p50.push(quantile(v, 0.5) as f64);
                rows[r].p99.push(quantile(v, 0.99) as f64);
            }
        }
        let g = rows.len() - 1;
        rows[g].tput.push(throughput(&fan, &fan, &[]));
        let mut v = rtt(|x| fan.call_blocking(x).expect("call"));
        rows[g].p50.push(quantile(&mut v, 0.5) as f64);
        rows[g].p99.push(quantile(&mut v, 0.99) as f64);
    }
    println!(
        "pipelines vs host hops, CPU backend, echo stages, capacity {CAPACITY}, {ROUNDS} \
         interleaved rounds x {} s, medians",
        RUN.as_secs()
    );
    println!(
        "| stages | path | throughput | chain / hop | RTT p50 | RTT p99 | hop p50 / chain p50 |"
    );
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for (i, n) in lens.iter().enumerate() {
        let (c, h) = (&rows[i * 2], &rows[i * 2 + 1]);
        let (ct, ht) = (median(c.tput.clone()), median(h.tput.clone()));
        let (c50, h50) = (median(c.p50.clone()), median(h.p50.clone()));
        println!(
            "| {n} | pipeline | {:.0} k/s | {:.2}x | {:.1} us | {:.1} us | {:.2}x |",
            ct / 1e3,
            ct / ht,
            c50 / 1e3,
            median(c.p99.clone()) / 1e3,
            h50 / c50
        );
        println!(
            "| {n} | host hop | {:.0} k/s | | {:.1} us | {:.1} us | |",
            ht / 1e3,
            h50 / 1e3,
            median(h.p99.clone()) / 1e3
        );
    }
    let (g, c3) = (&rows[rows.len() - 1], &rows[(lens.len() - 1) * 2]);
    let (gt, ct) = (median(g.tput.clone()), median(c3.tput.clone()));
    let (g50, c50) = (median(g.p50.clone()), median(c3.p50.clone()));
    println!();
    println!(
        "| graph | throughput | graph / chain of 3 | RTT p50 | RTT p99 | p50 graph / chain of 3 |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| head, fan-out of 2, join | {:.0} k/s | {:.2}x | {:.1} us | {:.1} us | {:.2}x |",
        gt / 1e3,
        gt / ct,
        g50 / 1e3,
        median(g.p99.clone()) / 1e3,
        g50 / c50
    );
    fan.shutdown_blocking().expect("shutdown");
    for c in chains {
        c.shutdown_blocking().expect("shutdown");
    }
    for h in hops.into_iter().flatten() {
        h.shutdown_blocking().expect("shutdown");
    }
}
