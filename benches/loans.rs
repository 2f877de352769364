//! Loans against their peers, in one run: echo throughput of 4 KiB and 64 KiB messages
//! through a loan kernel on the CPU backend (the host copies its source bytes into a
//! loan, sends it, and takes the reply loan back: one copy per message, the kernel works
//! in place), against `memcpy` of the same bytes into a reused buffer, and against a
//! `crossbeam-channel` echo thread moving `Vec<u8>` (the host copies its source into a
//! fresh `Vec`, the thread sends it back). Each path keeps `WINDOW` messages in flight;
//! every side busy-spins (gyre's kernel and host with `IdleStrategy::BusySpin`, the
//! channel with `try_recv` / `try_send` loops), as in the other benches.
//! One more loan path runs under the `async` copy strategy, where the bridge moves each
//! loan's bytes to the kernel's (emulated) device memory and back.
//! Prints messages/s, GB/s and the ratios. `cargo bench --bench loans` (results in
//! `docs/benchmarks.md`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use gyre::{
    loan::{LoanBuf, LoanConfig},
    Backend, IdleStrategy, KernelSpec, Runtime,
};

const WINDOW: usize = 32;
const BATCH: usize = 16;
const RUN: Duration = Duration::from_secs(1);
const ROUNDS: usize = 7;

struct Rate {
    msgs_per_s: f64,
    gb_per_s: f64,
}

fn rate(n: u64, len: usize, dt: Duration) -> Rate {
    let s = dt.as_secs_f64();
    Rate {
        msgs_per_s: n as f64 / s,
        gb_per_s: (n as f64 * len as f64) / s / 1e9,
    }
}

/// `memcpy` of `len` bytes from one buffer into another, back to back.
fn memcpy(len: usize) -> Rate {
    let src = vec![7u8; len];
    let mut dst = vec![0u8; len];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        for _ in 0..64 {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        }
        n += 64;
    }
    rate(n, len, t0.elapsed())
}

/// Loans: copy the source into a loan, send it, keep `WINDOW` in flight, drop replies.
fn loans(rt: &Runtime, len: usize) -> Rate {
    let k = rt
        .launch(
            KernelSpec::loans("echo", |_: &mut LoanBuf<'_>| Ok(()))
                .loan_pool(LoanConfig::new(16 << 20, 1024))
                .idle(IdleStrategy::BusySpin)
                .host_idle(IdleStrategy::BusySpin),
        )
        .expect("launch");
    let src = vec![7u8; len];
    let send = |k: &gyre::loan::LoanKernel| {
        let mut loan = k.loan_blocking(len).expect("loan");
        loan.copy_from_slice(black_box(&src));
        k.send_blocking(loan).expect("send");
    };
    for _ in 0..WINDOW {
        send(&k);
    }
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        for _ in 0..64 {
            let reply = k.recv_blocking().expect("recv");
            assert_eq!(reply.len(), len);
            black_box(reply[len - 1]);
            drop(reply);
            send(&k);
        }
        n += 64;
    }
    let dt = t0.elapsed();
    for _ in 0..WINDOW {
        k.recv_blocking().expect("drain");
    }
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().expect("shutdown");
    rate(n, len, dt)
}

/// Loans in batches of `BATCH`: one claim and one head store per batch of sends, one
/// index update per batch of replies (`try_send_batch`, `recv_batch_blocking`).
///
/// `spin`: kernel and host busy-spin. Off under the async copy strategy, whose copy worker
/// is a third thread: three spinning threads on two cores starve each other.
fn loans_batched(rt: &Runtime, len: usize, spin: bool) -> Rate {
    let idle = if spin {
        IdleStrategy::BusySpin
    } else {
        IdleStrategy::default()
    };
    let k = rt
        .launch(
            KernelSpec::loans("echo", |_: &mut LoanBuf<'_>| Ok(()))
                .loan_pool(LoanConfig::new(16 << 20, 1024))
                .idle(idle)
                .host_idle(idle),
        )
        .expect("launch");
    let src = vec![7u8; len];
    let fill = |k: &gyre::loan::LoanKernel, batch: &mut Vec<gyre::loan::Loan>, n: usize| {
        for _ in 0..n {
            let mut loan = k.loan_blocking(len).expect("loan");
            loan.copy_from_slice(black_box(&src));
            batch.push(loan);
        }
        k.send_batch_blocking(batch).expect("send");
    };
    let mut batch = Vec::with_capacity(WINDOW);
    fill(&k, &mut batch, WINDOW);
    let mut out = Vec::with_capacity(WINDOW);
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        let got = k.recv_batch_blocking(&mut out, BATCH).expect("recv");
        for r in out.drain(..) {
            let reply = r.expect("reply");
            assert_eq!(reply.len(), len);
            black_box(reply[len - 1]);
        }
        fill(&k, &mut batch, got);
        n += got as u64;
    }
    let dt = t0.elapsed();
    let mut left = WINDOW;
    while left > 0 {
        left -= k.recv_batch_blocking(&mut out, left).expect("drain");
        out.clear();
    }
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().expect("shutdown");
    rate(n, len, dt)
}

/// A `crossbeam-channel` echo thread moving `Vec<u8>`; both sides busy-spin
/// (`try_recv` / `try_send` in a loop), as gyre's kernel and host do here.
fn channel(len: usize) -> Rate {
    let (to_tx, to_rx) = crossbeam_channel::bounded::<Vec<u8>>(WINDOW);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Vec<u8>>(WINDOW);
    let echo = std::thread::spawn(move || loop {
        match to_rx.try_recv() {
            Ok(mut v) => loop {
                match back_tx.try_send(v) {
                    Ok(()) => break,
                    Err(crossbeam_channel::TrySendError::Full(back)) => {
                        v = back;
                        std::hint::spin_loop();
                    }
                    Err(crossbeam_channel::TrySendError::Disconnected(_)) => return,
                }
            },
            Err(crossbeam_channel::TryRecvError::Empty) => std::hint::spin_loop(),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return,
        }
    });
    let recv = || loop {
        match back_rx.try_recv() {
            Ok(v) => return v,
            Err(_) => std::hint::spin_loop(),
        }
    };
    let src = vec![7u8; len];
    for _ in 0..WINDOW {
        to_tx.send(black_box(&src).to_vec()).expect("send");
    }
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        for _ in 0..64 {
            let v = recv();
            black_box(v[len - 1]);
            drop(v);
            to_tx.send(black_box(&src).to_vec()).expect("send");
        }
        n += 64;
    }
    let dt = t0.elapsed();
    for _ in 0..WINDOW {
        drop(recv());
    }
    drop(to_tx);
    echo.join().expect("echo thread");
    rate(n, len, dt)
}

/// Runs every path once per round, interleaved (so drift in the machine's speed hits all
/// alike); returns each round's rates, `[round][path]`.
fn rounds(paths: &[&dyn Fn() -> Rate]) -> Vec<Vec<Rate>> {
    (0..ROUNDS)
        .map(|_| paths.iter().map(|f| f()).collect())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median and range of `f(round)` over the rounds.
fn stat(r: &[Vec<Rate>], f: impl Fn(&[Rate]) -> f64) -> (f64, f64, f64) {
    let v: Vec<f64> = r.iter().map(|x| f(x)).collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (median(v), lo, hi)
}

fn main() {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("runtime");
    if let Some(only) = std::env::var_os("GYRE_BENCH_LOANS_ONLY") {
        // For profilers: the loan paths alone (`4` or `64`: that size in KiB only).
        let sizes: Vec<usize> = match only.to_str() {
            Some("4") => vec![4 << 10],
            Some("64") => vec![64 << 10],
            _ => vec![4 << 10, 64 << 10],
        };
        for len in sizes {
            let r = rounds(&[&|| loans(&rt, len), &|| loans_batched(&rt, len, true)]);
            println!(
                "{:>4} KiB  loans {:>9.0}/s  batched {:>9.0}/s (medians)",
                len >> 10,
                stat(&r, |x| x[0].msgs_per_s).0,
                stat(&r, |x| x[1].msgs_per_s).0
            );
        }
        return;
    }
    println!(
        "echo throughput, {WINDOW} in flight, {ROUNDS} interleaved rounds x {} s per path, CPU backend",
        RUN.as_secs()
    );
    println!("medians of the rounds; ratios are medians of per-round ratios [min..max]");
    println!(
        "{:>7}  {:>28}  {:>12}  {:>8}  {:>20}  {:>20}",
        "size", "path", "msg/s", "GB/s", "/ memcpy", "/ channel"
    );
    // The copy strategies: the kernel works on emulated device memory and the bridge
    // moves every loan's bytes down and up (two more copies per message).
    let copies = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(gyre::TransferStrategy::Async)
        .build()
        .expect("runtime");
    const NAMES: [&str; 5] = [
        "loans, one by one",
        "loans, batches of 16",
        "memcpy",
        "channel<Vec<u8>>",
        "loans, batches, async copies",
    ];
    for len in [4 << 10, 64 << 10] {
        let r = rounds(&[
            &|| loans(&rt, len),
            &|| loans_batched(&rt, len, true),
            &|| memcpy(len),
            &|| channel(len),
            &|| loans_batched(&copies, len, false),
        ]);
        for (p, name) in NAMES.iter().enumerate() {
            let (msgs, _, _) = stat(&r, |x| x[p].msgs_per_s);
            let (gb, _, _) = stat(&r, |x| x[p].gb_per_s);
            let ratio = |to: usize| {
                let (m, lo, hi) = stat(&r, |x| x[p].gb_per_s / x[to].gb_per_s);
                format!("{m:.2}x [{lo:.2}..{hi:.2}]")
            };
            println!(
                "{:>4} KiB  {:>28}  {:>12.0}  {:>8.2}  {:>20}  {:>20}",
                len >> 10,
                name,
                msgs,
                gb,
                ratio(2),
                ratio(3)
            );
        }
    }
}
