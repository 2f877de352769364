//! Loans against their peers, in one run: echo throughput of 4 KiB and 64 KiB messages
//! through a loan kernel on the CPU backend (the host copies its source bytes into a
//! loan, sends it, and takes the reply loan back: one copy per message, the kernel works
//! in place), against `memcpy` of the same bytes into a reused buffer, and against a
//! `crossbeam-channel` echo thread moving `Vec<u8>` (the host copies its source into a
//! fresh `Vec`, the thread sends it back). Each path keeps `WINDOW` messages in flight.
//! One more loan path runs under the `async` copy strategy, where the bridge moves each
//! loan's bytes to the kernel's (emulated) device memory and back.
//! Prints messages/s, GB/s and the ratios. `cargo bench --bench loans` (results in
//! `docs/benchmarks.md`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use gyre::{Backend, KernelSpec, LoanBuf, LoanConfig, Runtime};

const WINDOW: usize = 32;
const BATCH: usize = 16;
const RUN: Duration = Duration::from_secs(2);
const ROUNDS: usize = 3;

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
        .launch_loans(
            KernelSpec::loans("echo", |_: &mut LoanBuf<'_>| Ok(()))
                .loan_pool(LoanConfig::new(16 << 20, 1024)),
        )
        .expect("launch");
    let src = vec![7u8; len];
    let send = |k: &gyre::LoanKernel| {
        let mut loan = k.loan_blocking(len).expect("loan");
        loan.copy_from_slice(black_box(&src));
        k.send_loan_blocking(loan).expect("send");
    };
    for _ in 0..WINDOW {
        send(&k);
    }
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        for _ in 0..64 {
            let reply = k.recv_loan_blocking().expect("recv");
            assert_eq!(reply.len(), len);
            black_box(reply[len - 1]);
            drop(reply);
            send(&k);
        }
        n += 64;
    }
    let dt = t0.elapsed();
    for _ in 0..WINDOW {
        k.recv_loan_blocking().expect("drain");
    }
    assert_eq!(k.pool_stats().in_use_blocks, 0);
    k.shutdown_blocking().expect("shutdown");
    rate(n, len, dt)
}

/// Loans in batches of `BATCH`: one claim and one head store per batch of sends, one
/// index update per batch of replies (`try_send_loans`, `recv_loans_blocking`).
fn loans_batched(rt: &Runtime, len: usize) -> Rate {
    let k = rt
        .launch_loans(
            KernelSpec::loans("echo", |_: &mut LoanBuf<'_>| Ok(()))
                .loan_pool(LoanConfig::new(16 << 20, 1024)),
        )
        .expect("launch");
    let src = vec![7u8; len];
    let fill = |k: &gyre::LoanKernel, batch: &mut Vec<gyre::Loan>, n: usize| {
        for _ in 0..n {
            let mut loan = k.loan_blocking(len).expect("loan");
            loan.copy_from_slice(black_box(&src));
            batch.push(loan);
        }
        k.send_loans_blocking(batch).expect("send");
    };
    let mut batch = Vec::with_capacity(WINDOW);
    fill(&k, &mut batch, WINDOW);
    let mut out = Vec::with_capacity(WINDOW);
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        let got = k.recv_loans_blocking(&mut out, BATCH).expect("recv");
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
        left -= k.recv_loans_blocking(&mut out, left).expect("drain");
        out.clear();
    }
    assert_eq!(k.pool_stats().in_use_blocks, 0);
    k.shutdown_blocking().expect("shutdown");
    rate(n, len, dt)
}

/// A `crossbeam-channel` echo thread moving `Vec<u8>`.
fn channel(len: usize) -> Rate {
    let (to_tx, to_rx) = crossbeam_channel::bounded::<Vec<u8>>(WINDOW);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<Vec<u8>>(WINDOW);
    let echo = std::thread::spawn(move || {
        for v in to_rx {
            if back_tx.send(v).is_err() {
                break;
            }
        }
    });
    let src = vec![7u8; len];
    for _ in 0..WINDOW {
        to_tx.send(black_box(&src).to_vec()).expect("send");
    }
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < RUN {
        for _ in 0..64 {
            let v = back_rx.recv().expect("recv");
            black_box(v[len - 1]);
            drop(v);
            to_tx.send(black_box(&src).to_vec()).expect("send");
        }
        n += 64;
    }
    let dt = t0.elapsed();
    drop(to_tx);
    for _ in back_rx.iter() {}
    echo.join().expect("echo thread");
    rate(n, len, dt)
}

/// Runs every path once per round, interleaved (so drift in the machine's speed hits all
/// alike), and keeps each path's best round.
fn best_of(paths: &[&dyn Fn() -> Rate]) -> Vec<Rate> {
    let mut best: Vec<Option<Rate>> = paths.iter().map(|_| None).collect();
    for _ in 0..ROUNDS {
        for (b, f) in best.iter_mut().zip(paths) {
            let r = f();
            if b.as_ref().is_none_or(|x| r.msgs_per_s > x.msgs_per_s) {
                *b = Some(r);
            }
        }
    }
    best.into_iter().flatten().collect()
}

fn main() {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("runtime");
    if std::env::var_os("GYRE_BENCH_LOANS_ONLY").is_some() {
        // For profilers: the loan paths alone.
        for len in [4 << 10, 64 << 10] {
            let r = best_of(&[&|| loans(&rt, len), &|| loans_batched(&rt, len)]);
            println!(
                "{:>4} KiB  loans {:>9.0}/s  batched {:>9.0}/s",
                len >> 10,
                r[0].msgs_per_s,
                r[1].msgs_per_s
            );
        }
        return;
    }
    println!(
        "echo throughput, {WINDOW} in flight, best of {ROUNDS} interleaved rounds x {} s, CPU backend",
        RUN.as_secs()
    );
    let cell = |r: &Rate| format!("{:>9.0}/s {:>6.2} GB/s", r.msgs_per_s, r.gb_per_s);
    println!(
        "{:>7}  {:>26}  {:>22}  {:>22}  {:>9}  {:>10}",
        "size", "path", "rate", "memcpy", "/memcpy", "/channel"
    );
    // The copy strategies: the kernel works on emulated device memory and the bridge
    // moves every loan's bytes down and up (two more copies per message).
    let copies = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(gyre::TransferStrategy::Async)
        .build()
        .expect("runtime");
    for len in [4 << 10, 64 << 10] {
        let r = best_of(&[
            &|| loans(&rt, len),
            &|| loans_batched(&rt, len),
            &|| memcpy(len),
            &|| channel(len),
            &|| loans_batched(&copies, len),
        ]);
        let (m, c) = (&r[2], &r[3]);
        for (name, x) in [
            ("loans, one by one", &r[0]),
            ("loans, batches of 16", &r[1]),
            ("loans, batches, async copies", &r[4]),
            ("channel<Vec<u8>>", c),
        ] {
            println!(
                "{:>4} KiB  {:>26}  {}  {}  {:>8.2}x  {:>9.2}x",
                len >> 10,
                name,
                cell(x),
                cell(m),
                x.gb_per_s / m.gb_per_s,
                x.gb_per_s / c.gb_per_s
            );
        }
    }
}
