//! The loan cases (`docs/loans.md`), shared by every backend's test binary
//! (`tests/loans.rs`: the CPU backend under its four transfer strategies;
//! `tests/loans_opencl.rs`: OpenCL). Every case checks the bytes and that every block
//! returns to the pool exactly when it should: after its reply was consumed, its call
//! dropped, or its kernel ended, never earlier. Each kernel has a Rust closure (the CPU
//! backend's handler) and the same handler as device code (`sources.rs`).

#![allow(dead_code)]

pub mod sources;

use std::time::{Duration, Instant};

use gyre::{
    codes,
    loan::{Loan, LoanBuf, LoanConfig, LoanHandle, LoanKernel},
    Backend, Error, KernelSpec, RestartPolicy, Runtime, TransferStrategy,
};

#[path = "../support/wait.rs"]
mod wait;
use wait::eventually;

/// Where a case runs.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The CPU backend under a transfer strategy.
    Cpu(TransferStrategy),
    /// An OpenCL device (platform, device): zero copy, the pool in fine-grained SVM.
    OpenCl(usize, usize),
    /// CUDA device 0 under a transfer strategy: `unified` (zero copy, the pool in mapped
    /// pinned memory) or a copy strategy (the pool's bytes in device memory).
    Cuda(TransferStrategy),
}

impl Target {
    fn rt(self) -> Runtime {
        match self {
            Target::Cpu(strategy) => Runtime::builder()
                .backend(Backend::Cpu)
                .transfer_strategy(strategy)
                .build()
                .expect("runtime"),
            Target::OpenCl(platform, device) => Runtime::builder()
                .backend(Backend::OpenCl { platform, device })
                .build()
                .expect("runtime"),
            Target::Cuda(strategy) => Runtime::builder()
                .backend(Backend::Cuda { device: 0 })
                .transfer_strategy(strategy)
                .build()
                .expect("runtime"),
        }
    }

    fn copies(self) -> bool {
        matches!(self, Target::Cpu(s) | Target::Cuda(s) if s.copies())
    }

    fn backend(self) -> Backend {
        match self {
            Target::Cpu(_) => Backend::Cpu,
            Target::OpenCl(platform, device) => Backend::OpenCl { platform, device },
            Target::Cuda(_) => Backend::Cuda { device: 0 },
        }
    }
}

fn bump_spec(name: &str) -> KernelSpec<Loan, Loan> {
    KernelSpec::loans(name, bump).device_handler("bump.h", sources::BUMP)
}

/// Each byte plus one, in place; a first byte of 0xEE is a panic, 0xEF an error status.
fn bump(b: &mut LoanBuf<'_>) -> Result<(), u32> {
    match b.first() {
        Some(0xEE) => panic!("injected fault"),
        Some(0xEF) => return Err(codes::USER_BASE + 1),
        Some(0xED) => return Err(codes::BAD_LOAN),
        _ => {}
    }
    for x in b.iter_mut() {
        *x = x.wrapping_add(1);
    }
    Ok(())
}

fn bump_kernel(rt: &Runtime, pool: LoanConfig) -> LoanKernel {
    let k = rt
        .launch(bump_spec("bump").loan_pool(pool))
        .expect("launch");
    assert_eq!(k.backend(), rt.backend(), "it runs where it was asked to");
    k
}

/// Pauses `k` and waits until it says so: what is sent next is queued, not taken (a
/// pause command can land after requests published right behind it).
fn pause(k: &LoanKernel) {
    k.pause();
    eventually("the pause", || k.state() == gyre::KernelState::Paused);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) % 0xE0)
        .collect()
}

pub fn large_messages_round_trip_in_place(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::default());
    for (i, len) in [0usize, 1, 100, 1024, 4096, 5000, 64 << 10, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        let mut loan = k.loan_blocking(len).unwrap();
        loan.copy_from_slice(&data);
        let reply = k.call_blocking(loan).unwrap();
        assert_eq!(reply.len(), len);
        assert!(
            reply.iter().zip(&data).all(|(r, d)| *r == d + 1),
            "len {len}"
        );
    }
    let s = k.loan_stats();
    assert_eq!(s.in_use_blocks, 0, "every reply loan was dropped");
    assert_eq!(s.returns, 8);
    k.shutdown_blocking().unwrap();
}

/// A reply of `100 * first byte` bytes of 0xAB (the closure and [`sources::RESIZE`]).
fn resize_spec() -> KernelSpec<Loan, Loan> {
    KernelSpec::loans("resize", |b: &mut LoanBuf<'_>| {
        let want = usize::from(b[0]) * 100;
        b.set_len(want).map_err(|_| codes::HANDLER_REJECTED)?;
        b.fill(0xAB);
        Ok(())
    })
    .device_handler("resize.h", sources::RESIZE)
}

pub fn replies_may_shrink_or_grow_within_the_block(t: Target) {
    let rt = t.rt();
    let k = rt.launch(resize_spec()).unwrap();
    // 1 byte in a 1 KiB block: up to 1024 bytes back.
    let r = k.call_bytes_blocking(&[10]).unwrap();
    assert_eq!((r.len(), r.capacity()), (1000, 1024));
    assert!(r.iter().all(|&b| b == 0xAB));
    drop(r);
    let r = k.call_bytes_blocking(&[0]).unwrap();
    assert!(r.is_empty());
    // Beyond the block: the handler refuses, the block returns.
    let e = k.call_bytes_blocking(&[11]).unwrap_err();
    assert!(matches!(e, Error::Handler { status, .. } if status == codes::HANDLER_REJECTED));
    drop(r);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
}

pub fn handler_errors_return_the_block_and_the_kernel_serves_on(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::default());
    for _ in 0..10 {
        let e = k.call_bytes_blocking(&[0xEF; 3000]).unwrap_err();
        assert!(
            matches!(e, Error::Handler { status, .. } if status == codes::USER_BASE + 1),
            "{e:?}"
        );
        assert_eq!(&k.call_bytes_blocking(&[1, 2]).unwrap()[..], &[2, 3]);
        // A handler that says BAD_LOAN about a block it held: refused, and the block
        // still returns (BAD_LOAN is the resolver's word, on which the host frees none).
        let e = k.call_bytes_blocking(&[0xED; 100]).unwrap_err();
        assert!(
            matches!(e, Error::Handler { status, .. } if status == codes::HANDLER_REJECTED),
            "{e:?}"
        );
    }
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    assert_eq!(k.loan_stats().returns, 30);
    k.shutdown_blocking().unwrap();
}

pub fn corrupt_handles_are_refused_without_touching_the_pool(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(1 << 16, 1024));
    let held = k.loan_blocking(2000).unwrap(); // host-owned: a handle naming it is stale
    let live = LoanHandle {
        offset: 0,
        len: 10,
        generation: 1,
    };
    for (h, why) in [
        (
            LoanHandle {
                offset: 1 << 16,
                ..live
            },
            "outside the pool",
        ),
        (
            LoanHandle {
                offset: u64::MAX,
                ..live
            },
            "outside the pool",
        ),
        (
            LoanHandle {
                offset: 100,
                ..live
            },
            "not at a block start",
        ),
        (
            LoanHandle {
                offset: 4096,
                ..live
            },
            "free block",
        ),
        (live, "a block the host holds"),
        (
            LoanHandle {
                generation: 7,
                ..live
            },
            "stale generation",
        ),
        (
            LoanHandle {
                len: u32::MAX,
                ..live
            },
            "length beyond",
        ),
    ] {
        match k.call_handle_blocking(h) {
            Err(Error::BadLoan { side, offset, .. }) => {
                assert_eq!((side, offset), ("from the host", h.offset), "{why}")
            }
            other => panic!("{why}: {other:?}"),
        }
    }
    // The kernel's own checks, on blocks it does hold, queued while the kernel is paused:
    // a length beyond the block in the block's own slot, then a handle in the slot
    // before its own (a duplicate's view), then the same handle in its own slot.
    pause(&k);
    let bind = |ahead: u64| {
        let mut l = k.loan_blocking(100).unwrap();
        l.fill(3);
        k.bind_loan_for_tests(l, ahead).unwrap()
    };
    let first = bind(0);
    let real = bind(2);
    let too_long = LoanHandle { len: 4096, ..first };
    k.raw_for_tests().send_blocking(too_long).unwrap();
    k.raw_for_tests().send_blocking(real).unwrap();
    k.raw_for_tests().send_blocking(real).unwrap();
    k.resume();
    for (what, want_ok) in [
        ("length beyond", false),
        ("another slot's handle", false),
        ("real", true),
    ] {
        match (k.recv_blocking(), want_ok) {
            (Ok(l), true) => assert!(l.iter().all(|&b| b == 4)),
            (
                Err(Error::BadLoan {
                    side: "from the host",
                    ..
                }),
                false,
            ) => {}
            (other, _) => panic!("{what}: {other:?}"),
        }
    }
    // Nothing leaked: the refused block went back when its slot was released, the held
    // loan is intact and the kernel serves.
    assert_eq!(k.loan_stats().in_use_blocks, 1);
    drop(held);
    assert_eq!(&k.call_bytes_blocking(&[41]).unwrap()[..], &[42]);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    assert_eq!(k.protocol_errors(), 0);
    k.shutdown_blocking().unwrap();
}

pub fn an_exhausted_pool_refuses_try_loan_and_async_loans_wait(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(1 << 14, 1024));
    let all = k.try_loan(1 << 14).unwrap();
    assert!(matches!(
        k.try_loan(1),
        Err(Error::PoolExhausted {
            len: 1,
            free: 0,
            ..
        })
    ));
    assert!(matches!(
        k.try_loan((1 << 14) + 1),
        Err(Error::LoanTooLarge { .. })
    ));
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    tokio.block_on(async {
        // A task waiting for a block: it must be woken by the return, not re-polled.
        let waiter = {
            let k = k.clone();
            tokio::spawn(async move { k.loan(5000).await.map(|l| l.capacity()) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "nothing is free: it waits");
        // The whole pool goes to the kernel and back; dropping the reply frees it.
        let reply = k.call(all).await.unwrap();
        drop(reply);
        let got = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter was woken")
            .unwrap()
            .unwrap();
        assert_eq!(got, 8192);
    });
    assert!(k.loan_stats().exhausted >= 1);
}

pub fn a_panic_with_loans_in_flight_fails_them_and_shutdown_returns_every_block(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(1 << 20, 1024));
    pause(&k);
    // Queue sends behind a panicking one; the host keeps one loan of its own.
    k.send_bytes_blocking(&[0xEE; 4000]).unwrap();
    for i in 0..20u8 {
        k.send_bytes_blocking(&pattern(3000, i)).unwrap();
    }
    let mut kept = k.loan_blocking(10_000).unwrap();
    kept.fill(5);
    assert_eq!(k.loan_stats().in_use_blocks, 22);
    k.resume();
    match k.recv_blocking() {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    // The others are never answered: the kernel faulted.
    assert!(k.recv_blocking().is_err());
    assert!(matches!(
        k.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
    // Every block the kernel held is back; the host's own loan is untouched.
    assert_eq!(k.loan_stats().in_use_blocks, 1);
    assert!(kept.iter().all(|&b| b == 5));
    drop(kept);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
}

pub fn a_restarted_kernel_answers_the_loans_its_predecessor_left(t: Target) {
    let rt = t.rt();
    let k = rt
        .launch(bump_spec("bump").restart(
            RestartPolicy::new(3).backoff(Duration::from_micros(100), Duration::from_millis(1)),
        ))
        .unwrap();
    pause(&k);
    for i in 0..10u8 {
        let data = if i == 3 {
            vec![0xEE; 2000]
        } else {
            pattern(2000, i)
        };
        k.send_bytes_blocking(&data).unwrap();
    }
    k.resume();
    for i in 0..10u8 {
        match k.recv_blocking() {
            Ok(r) => {
                assert_ne!(i, 3);
                let want: Vec<u8> = pattern(2000, i).iter().map(|b| b + 1).collect();
                assert_eq!(&r[..], &want[..], "send {i}");
            }
            Err(Error::Handler { status, .. }) => {
                assert_eq!((i, status), (3, codes::HANDLER_PANIC))
            }
            Err(e) => panic!("send {i}: {e:?}"),
        }
    }
    eventually("the restart", || k.relaunches().restarts == 1);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().unwrap();
}

pub fn dropped_call_futures_return_their_block_only_after_the_reply(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::default());
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    pause(&k);
    tokio.block_on(async {
        for _ in 0..20 {
            let mut loan = k.loan(8000).await.unwrap();
            loan.fill(1);
            let call = k.call(loan);
            // Sent, then dropped while the kernel (paused) has not answered: the block
            // stays out until the reply slot is released by the completion driver.
            let _ = tokio::time::timeout(Duration::from_micros(200), call).await;
        }
        assert_eq!(
            k.loan_stats().in_use_blocks,
            20,
            "a block returned while the kernel still had its request"
        );
        // Never polled at all: nothing was sent, the loan returns at once.
        let before = k.loan_stats().returns;
        drop(k.call(k.loan(100).await.unwrap()));
        assert_eq!(k.loan_stats().returns, before + 1);
    });
    k.resume();
    eventually("every dropped call's block", || {
        k.loan_stats().in_use_blocks == 0
    });
    assert_eq!(k.protocol_errors(), 0);
    // The blocks are reused at once: had one been freed early, the kernel would refuse
    // a stale handle (an error reply, counted below).
    for _ in 0..20 {
        assert_eq!(
            &k.call_bytes_blocking(&[7; 5000]).unwrap()[..],
            &[8; 5000][..]
        );
    }
    k.shutdown_blocking().unwrap();
    assert_eq!(k.telemetry().unwrap().errors, 0, "no request was refused");
}

pub fn many_threads_loan_and_call_concurrently(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(1 << 22, 512));
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let k = k.clone();
            s.spawn(move || {
                for i in 0..300usize {
                    let len = 1 + (i * 7919 + usize::from(t) * 104_729) % 70_000;
                    let data = pattern(len, t.wrapping_add(i as u8));
                    let reply: Loan = k.call_bytes_blocking(&data).unwrap();
                    assert_eq!(reply.len(), len);
                    assert!(reply.iter().zip(&data).all(|(r, d)| *r == d + 1));
                }
            });
        }
    });
    let s = k.loan_stats();
    assert_eq!(s.in_use_blocks, 0);
    assert_eq!(s.hits + s.misses, 1200);
    assert_eq!(s.returns, 1200);
    k.shutdown_blocking().unwrap();
}

pub fn bad_specs_are_refused_and_copies_move_loan_bytes(t: Target) {
    // A spec that is not a loan kernel's does not compile here (tests/ui/loan_spec_types.rs).
    let e = t
        .rt()
        .launch(
            KernelSpec::loans("x", |_: &mut LoanBuf<'_>| Ok(()))
                .device_handler("bump.h", sources::BUMP)
                .loan_pool(LoanConfig::new(1000, 64)),
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // Under a copy strategy the bridge moves each loan's bytes, one copy per run of
    // adjacent blocks, and counts them.
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(1 << 20, 1024));
    pause(&k);
    for i in 0..8u8 {
        k.send_bytes_blocking(&pattern(4096, i)).unwrap();
    }
    k.resume();
    for i in 0..8u8 {
        let r = k.recv_blocking().unwrap();
        assert_eq!(
            r[..],
            pattern(4096, i).iter().map(|b| b + 1).collect::<Vec<_>>()[..]
        );
    }
    match k.transfer_stats() {
        None => assert!(!t.copies()),
        Some(s) => {
            assert!(t.copies());
            assert_eq!((s.loans_down, s.loans_up), (8, 8));
            assert!(s.h2d_bytes >= 8 * 4096 && s.d2h_bytes >= 8 * 4096, "{s:?}");
        }
    }
    k.shutdown_blocking().unwrap();
}

pub fn batches_of_loans_go_and_come_back_in_order(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(2 << 20, 1024));
    let mut sent = 0u8;
    let mut got = Vec::new();
    for _ in 0..20 {
        let mut batch: Vec<Loan> = (0..8)
            .map(|_| {
                let mut l = k.loan_blocking(5000).unwrap();
                l.copy_from_slice(&pattern(5000, sent));
                sent = sent.wrapping_add(1);
                l
            })
            .collect();
        k.send_batch_blocking(&mut batch).unwrap();
        assert!(batch.is_empty());
        while got.len() % 8 != 0 || got.len() < usize::from(sent) {
            let mut out = Vec::new();
            k.recv_batch_blocking(&mut out, 8).unwrap();
            got.extend(out.into_iter().map(|r| r.unwrap()[0]));
        }
    }
    let want: Vec<u8> = (0..sent).map(|s| pattern(1, s)[0] + 1).collect();
    assert_eq!(got, want, "in order, each its own block");
    // A batch longer than the ring is refused and handed back whole.
    let mut big: Vec<Loan> = (0..1025).map(|_| k.loan_blocking(1).unwrap()).collect();
    assert!(k.try_send_batch(&mut big).is_err());
    assert_eq!(big.len(), 1025);
    drop(big);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().unwrap();
}

pub fn the_export_file_shows_the_pool(t: Target) {
    let dir = std::env::temp_dir().join(format!(
        "gyre-loans-export-{}-{}",
        std::process::id(),
        gyre_core::shm::unix_ms()
    ));
    let path = dir.join("svc").join("bump");
    let rt = t.rt();
    let k = rt
        .launch(
            bump_spec("bump")
                .loan_pool(LoanConfig::new(1 << 20, 1024))
                .export_telemetry_to(&path)
                .export_interval(Duration::from_millis(1)),
        )
        .unwrap();
    let held = k.loan_blocking(3000).unwrap();
    for _ in 0..5 {
        k.call_bytes_blocking(&[1; 2000]).unwrap();
    }
    let r = gyre::telemetry::TelemetryReader::open(&path).unwrap();
    eventually("the pool in the export", || {
        let p = r.snapshot().unwrap().loans;
        p.returns == 5 && p.in_use_blocks == 1
    });
    let p = r.snapshot().unwrap().loans;
    assert_eq!(p.pool_bytes, 1 << 20);
    assert_eq!(p.in_use_bytes, 4096);
    assert_eq!(p, k.loan_stats());
    drop(held);
    k.shutdown_blocking().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

pub fn a_handle_sent_twice_never_gives_its_block_two_writers(t: Target) {
    // The handler fills the whole block with a token, waits, and checks nobody else wrote
    // it meanwhile (under a copy strategy: not the bridge copying a duplicate down). A
    // handle resolves only in the slot it was sent in, so the copy in the next slot is
    // refused whatever the timing: exactly one answer, one refusal.
    let rt = t.rt();
    let k = rt
        .launch(
            KernelSpec::loans("guard", |b: &mut LoanBuf<'_>| {
                let token = b[0].wrapping_add(100);
                b.fill(token);
                std::thread::sleep(Duration::from_micros(300));
                if b.iter().any(|&x| x != token) {
                    return Err(codes::USER_BASE + 9);
                }
                Ok(())
            })
            .device_handler("guard.h", sources::GUARD)
            .loan_pool(LoanConfig::new(1 << 16, 4096)),
        )
        .unwrap();
    for round in 0..30u8 {
        let mut l = k.loan_blocking(4096).unwrap();
        l.fill(round);
        let h = k.bind_loan_for_tests(l, 0).unwrap();
        // The same handle twice, through the raw kernel (one thread publishes, so the
        // first lands in the slot it is bound to).
        k.raw_for_tests().send_blocking(h).unwrap();
        k.raw_for_tests().send_blocking(h).unwrap();
        for want_ok in [true, false] {
            match (k.recv_blocking(), want_ok) {
                (Ok(l), true) => assert!(l.iter().all(|&b| b == round.wrapping_add(100))),
                (Err(Error::BadLoan { .. }), false) => {}
                (Err(Error::Handler { status, .. }), _) if status == codes::USER_BASE + 9 => {
                    panic!("round {round}: a block had two writers")
                }
                (other, _) => panic!("round {round}, first {want_ok}: {other:?}"),
            }
        }
    }
    k.shutdown_blocking().unwrap();
    assert_eq!(k.loan_stats().in_use_blocks, 0);
}

pub fn a_loan_of_another_pool_is_refused_and_returns_to_it(t: Target) {
    let rt = t.rt();
    let (a, b) = (
        bump_kernel(&rt, LoanConfig::new(1 << 14, 1024)),
        bump_kernel(&rt, LoanConfig::new(1 << 14, 1024)),
    );
    let from_b = || b.loan_blocking(100).unwrap();
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut batch = vec![from_b()];
    for r in [
        a.call_blocking(from_b()).map(drop),
        a.send_blocking(from_b()),
        tokio.block_on(a.call(from_b())).map(drop),
        tokio.block_on(a.send(from_b())),
        a.try_send_batch(&mut batch).map(drop),
    ] {
        assert!(
            matches!(r, Err(Error::InvalidArgument { name: "loan", .. })),
            "{r:?}"
        );
    }
    assert_eq!(batch.len(), 1, "a refused batch keeps its loans");
    drop(batch);
    // Nothing was bound to a's ring: b's blocks are all back, and both kernels serve.
    assert_eq!(b.loan_stats().in_use_blocks, 0);
    assert_eq!(&a.call_bytes_blocking(&[1]).unwrap()[..], &[2]);
    assert_eq!(&b.call_bytes_blocking(&[2]).unwrap()[..], &[3]);
    a.shutdown_blocking().unwrap();
    b.shutdown_blocking().unwrap();
}

/// Host code resolves a pool's handles only where a host-side kernel holds each block busy
/// while it works (the CPU backend); a device kernel holds nothing, so once one serves the
/// pool, `LoanArena::resolve` refuses every handle, even one bound to its slot.
pub fn host_code_resolves_no_handle_of_a_device_kernels_pool(t: Target) {
    let rt = t.rt();
    let k = bump_kernel(&rt, LoanConfig::new(1 << 14, 1024));
    let mut l = k.loan_blocking(3).unwrap();
    l.copy_from_slice(&[1, 2, 3]);
    let arena = k.pool_for_tests().clone();
    let index = k.raw_channel().claimed();
    let h = k.bind_loan_for_tests(l, 0).unwrap();
    let r = arena.resolve(&h, index).map(|b| b.len());
    match t {
        Target::Cpu(_) => assert_eq!(r, Ok(1024), "the CPU backend's pool resolves"),
        _ => assert!(
            r.is_err(),
            "host code resolved a device kernel's handle: {r:?}"
        ),
    }
    // The bound block goes in its slot and comes back answered.
    assert_eq!(&k.call_handle_blocking(h).unwrap()[..], &[2, 3, 4]);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().unwrap();
}

pub fn a_reloaded_loan_kernel_serves_the_same_pool(t: Target) {
    let rt = t.rt();
    let pool = LoanConfig::new(1 << 16, 1024);
    let k = bump_kernel(&rt, pool);
    assert_eq!(&k.call_bytes_blocking(&[1, 2, 3]).unwrap()[..], &[2, 3, 4]);
    // A loan the host holds across the reload, and requests queued behind a pause.
    let mut held = k.loan_blocking(1).unwrap();
    held[0] = 3;
    pause(&k);
    for i in 0..4u8 {
        k.send_bytes_blocking(&[i]).unwrap();
    }
    // Refused before anything is stopped: another pool's shape, or not a loan spec.
    let e = k
        .reload_blocking(resize_spec().loan_pool(LoanConfig::new(1 << 17, 1024)))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ReloadMismatch {
                field: "loan pool",
                ..
            }
        ),
        "{e:?}"
    );
    let e = k
        .raw_for_tests()
        .reload_blocking(KernelSpec::<LoanHandle, LoanHandle>::echo())
        .unwrap_err();
    assert!(
        matches!(e, Error::ReloadMismatch { field: "loans", .. }),
        "{e:?}"
    );
    // The new handler over the same pool: the queued requests and the held loan are its.
    k.reload_blocking(resize_spec().loan_pool(pool)).unwrap();
    k.resume();
    for i in 0..4u8 {
        let r = k.recv_blocking().unwrap();
        assert_eq!(r.len(), usize::from(i) * 100, "queued request {i}");
        assert!(r.iter().all(|&b| b == 0xAB));
    }
    let r = k.call_blocking(held).unwrap();
    assert_eq!((r.len(), r[0]), (300, 0xAB));
    drop(r);
    assert_eq!(k.relaunches().reloads, 1);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().unwrap();
    assert_eq!(k.loan_stats().in_use_blocks, 0);
}

/// `KernelSpec::watch` on a device loan kernel: a change of its handler's file reloads
/// it over the same pool (the watcher reloads from the launch's own spec, whose pool
/// the launch set), with a loan held across the reload. The CPU backend runs the
/// Rust closure, which has no file: refused there.
pub fn a_watched_loan_kernel_reloads_over_the_same_pool(t: Target) {
    let rt = t.rt();
    let dir = std::env::temp_dir().join(format!(
        "gyre-watch-loans-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bump.h");
    std::fs::write(&file, sources::BUMP).unwrap();
    let spec = bump_spec("watched").loan_pool(LoanConfig::new(1 << 16, 1024));
    let k = match (t, rt.launch(spec.watch(&file))) {
        (Target::Cpu(_), Err(e)) => {
            assert!(
                matches!(e, Error::InvalidArgument { name: "watch", .. }),
                "{e:?}"
            );
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        (Target::Cpu(_), Ok(_)) => panic!("a watched Rust closure launched"),
        (_, r) => r.expect("launch"),
    };
    assert_eq!(&k.call_bytes_blocking(&[1, 2, 3]).unwrap()[..], &[2, 3, 4]);
    let mut held = k.loan_blocking(1).unwrap();
    held[0] = 3;
    // Replace the file (as an editor does): the resize handler answers from now on.
    let tmp = dir.join("bump.h.tmp");
    std::fs::write(&tmp, sources::RESIZE).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while k.relaunches().reloads < 1 {
        assert!(Instant::now() < deadline, "no reload after the change");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = k.call_blocking(held).unwrap();
    assert_eq!((r.len(), r[0]), (300, 0xAB), "the reloaded handler answers");
    drop(r);
    assert_eq!(&k.call_bytes_blocking(&[2]).unwrap()[..], &[0xAB; 200][..]);
    assert_eq!(k.loan_stats().in_use_blocks, 0);
    k.shutdown_blocking().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
