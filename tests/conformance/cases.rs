//! The conformance cases. Each takes the backend to run on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre::{Error, KernelSpec, KernelState, TrySendError};

use super::common::{eventually, host_handlers, rt, tokio_rt, Target};

pub fn echo_round_trip(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<[u8; 64], [u8; 64]>::echo())
        .unwrap();
    for i in 0..1000u32 {
        let mut m = [0u8; 64];
        m[..4].copy_from_slice(&i.to_le_bytes());
        m[63] = (i % 251) as u8;
        assert_eq!(k.call_blocking(m).unwrap(), m);
    }
    k.shutdown_blocking().unwrap();
    assert_eq!(k.state(), KernelState::Terminated { code: 0 });
}

/// The built-in kernels answer as their Rust references, both running at once where the
/// device has room for two, else one after the other (a 2-unit OpenCL CPU device runs one
/// kernel over device buffers, its other unit copying: the second launch is refused
/// while the first runs, and must work once it has ended).
pub fn builtin_kernels_match_reference(b: Target) {
    use gyre::kernels::reference;
    use gyre::kernels::{ReduceSum, VecScale};
    let r = rt(b);
    let mut seed = 0x1234_5678u32;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        (seed % 2000) as f32 / 7.0 - 100.0
    };
    let inputs: Vec<(f32, Vec<f32>)> = (0..=14usize)
        .map(|n| {
            let vals: Vec<f32> = (0..n).map(|_| next()).collect();
            (next(), vals)
        })
        .collect();
    let rs_spec = || KernelSpec::<ReduceSum<14>, gyre::kernels::Sum>::reduce_sum();
    let check_rs = |rs: &gyre::Kernel<ReduceSum<14>, gyre::kernels::Sum>, vals: &[f32]| {
        let s = rs.call_blocking(ReduceSum::new(vals).unwrap()).unwrap();
        assert_eq!(s.count as usize, vals.len());
        assert!(
            reference::reduce_sum_ok(s.sum, vals),
            "sum {} of {vals:?}",
            s.sum
        );
    };
    let vs = r
        .launch(KernelSpec::<VecScale<14>, gyre::kernels::VecF32<14>>::vec_scale())
        .unwrap();
    // The second kernel beside the first, where there is room (calls interleaved).
    let rs_beside = match r.launch(rs_spec()) {
        Ok(k) => Some(k),
        Err(Error::Launch { .. }) => None,
        Err(e) => panic!("{e:?}"),
    };
    for (factor, vals) in &inputs {
        let out = vs
            .call_blocking(VecScale::new(*factor, vals).unwrap())
            .unwrap();
        assert_eq!(
            out.as_slice(),
            reference::vec_scale(*factor, vals).as_slice()
        );
        if let Some(rs) = &rs_beside {
            check_rs(rs, vals);
        }
    }
    // A count beyond the payload is a handler error, and the kernel keeps serving.
    let mut bad = VecScale::<14>::new(1.0, &[1.0]).unwrap();
    bad.count = 15;
    assert!(matches!(
        vs.call_blocking(bad),
        Err(Error::Handler {
            status: gyre_abi::error::HANDLER_REJECTED,
            ..
        })
    ));
    assert_eq!(
        vs.call_blocking(VecScale::new(2.0, &[1.5]).unwrap())
            .unwrap()
            .as_slice(),
        &[3.0]
    );
    vs.shutdown_blocking().unwrap();
    let rs = match rs_beside {
        Some(rs) => rs,
        None => {
            // No room beside it: the unit the first kernel held is free again.
            let rs = r.launch(rs_spec()).unwrap();
            for (_, vals) in &inputs {
                check_rs(&rs, vals);
            }
            rs
        }
    };
    rs.shutdown_blocking().unwrap();
}

/// Per-producer FIFO order, no loss, no duplication: 4 producers x 100 000 sends.
pub fn fifo_and_no_loss_4x100k_send(b: Target) {
    const P: u64 = 4;
    const N: u64 = 100_000;
    let k = rt(b)
        .launch(KernelSpec::<[u64; 2], [u64; 2]>::echo().capacity(1024))
        .unwrap();
    let consumer = {
        let k = k.clone();
        std::thread::spawn(move || {
            let mut next = [0u64; P as usize];
            for _ in 0..P * N {
                let [p, s] = k.recv_blocking().unwrap();
                assert_eq!(s, next[p as usize], "producer {p}: out of order or lost");
                next[p as usize] += 1;
            }
            next
        })
    };
    let producers: Vec<_> = (0..P)
        .map(|p| {
            let k = k.clone();
            std::thread::spawn(move || {
                for s in 0..N {
                    k.send_blocking([p, s]).unwrap();
                }
            })
        })
        .collect();
    for t in producers {
        t.join().unwrap();
    }
    assert_eq!(consumer.join().unwrap(), [N; P as usize]);
    // Nothing left over: no duplicates.
    assert!(k.try_recv().unwrap().is_none());
    let t = k.telemetry().unwrap();
    k.shutdown_blocking().unwrap();
    assert!(t.messages_in <= P * N);
}

pub fn no_loss_4_producers_call(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(KernelSpec::from_fn("inc", |x: u64| x.wrapping_add(1)).capacity(64))
        .unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|p| {
            let k = k.clone();
            std::thread::spawn(move || {
                for s in 0..20_000u64 {
                    let v = (p << 32) | s;
                    assert_eq!(k.call_blocking(v).unwrap(), v + 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    k.shutdown_blocking().unwrap();
}

pub fn many_wraparounds(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u64, u64>::echo().capacity(4).batch_size(2))
        .unwrap();
    for i in 0..50_000u64 {
        assert_eq!(k.call_blocking(i).unwrap(), i);
    }
    // Mixed send/call across wraps.
    for i in 0..10_000u64 {
        k.send_blocking(i).unwrap();
        assert_eq!(k.call_blocking(!i).unwrap(), !i);
        assert_eq!(k.recv_blocking().unwrap(), i);
    }
    k.shutdown_blocking().unwrap();
}

pub fn full_ring_back_pressure(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u32, u32>::echo().capacity(8))
        .unwrap();
    // Without recv, replies hold their slots: exactly `capacity` requests are accepted.
    let mut accepted = 0u32;
    loop {
        match k.try_send(accepted) {
            Ok(()) => accepted += 1,
            Err(TrySendError::Full(m)) => {
                assert_eq!(m, accepted, "the message comes back");
                break;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
        assert!(accepted <= 8);
    }
    assert_eq!(accepted, 8);
    let trt = tokio_rt();
    trt.block_on(async {
        let send = k.send(100);
        tokio::pin!(send);
        // It waits while the ring is full...
        assert!(tokio::time::timeout(Duration::from_millis(50), &mut send)
            .await
            .is_err());
        // ...and completes once a reply is taken.
        assert_eq!(k.recv().await.unwrap(), 0);
        tokio::time::timeout(Duration::from_secs(5), &mut send)
            .await
            .expect("send completes")
            .unwrap();
    });
    for i in 1..8 {
        assert_eq!(k.recv_blocking().unwrap(), i);
    }
    assert_eq!(k.recv_blocking().unwrap(), 100);
    k.shutdown_blocking().unwrap();
}

/// `try_call` sheds load instead of queueing: with every slot held by an unreleased
/// reply it hands the request back as `Full`; an abandoned accepted call frees its slot
/// (the completion driver releases the discarded reply); after shutdown it is `Closed`.
pub fn try_call_sheds_load_when_full(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u32, u32>::echo().capacity(8))
        .unwrap();
    let trt = tokio_rt();
    let _guard = trt.enter();
    // Not polled, the futures leave their replies in the ring: the slots stay held.
    let mut pending: Vec<_> = (0..8u32)
        .map(|i| k.try_call(i).expect("a slot is free"))
        .collect();
    match k.try_call(99) {
        Err(TrySendError::Full(m)) => assert_eq!(m, 99, "the request comes back"),
        Err(e) => panic!("unexpected {e:?}"),
        Ok(_) => panic!("a ninth call was accepted by a ring of 8 held slots"),
    }
    // Dropping an accepted call frees its slot once the kernel has answered it.
    drop(pending.remove(0));
    let mut ninth = None;
    eventually("the abandoned call's slot is released", || {
        match k.try_call(8) {
            Ok(f) => ninth = Some(f),
            Err(TrySendError::Full(_)) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
        ninth.is_some()
    });
    pending.extend(ninth);
    let replies = trt.block_on(async {
        let mut out = Vec::new();
        for f in pending {
            out.push(f.await.unwrap());
        }
        out
    });
    assert_eq!(replies, (1..9).collect::<Vec<u32>>());
    k.shutdown_blocking().unwrap();
    assert!(matches!(k.try_call(7), Err(TrySendError::Closed(7))));
}

pub fn oversize_type_rejected_at_launch(b: Target) {
    let r = rt(b);
    let e = r
        .launch(KernelSpec::<[u8; 65], [u8; 65]>::echo())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::TypeTooLarge {
                size: 65,
                payload: 64,
                ..
            }
        ),
        "{e}"
    );
    // Raising the slot size makes it fit.
    let k = r
        .launch(KernelSpec::<[u8; 65], [u8; 65]>::echo().slot_size(256))
        .unwrap();
    assert_eq!(k.payload(), 192);
    assert_eq!(k.call_blocking([9; 65]).unwrap(), [9; 65]);
    k.shutdown_blocking().unwrap();
}

pub fn bad_geometry_rejected(b: Target) {
    let r = rt(b);
    let spec = || KernelSpec::<u32, u32>::echo();
    for c in [
        0usize,
        1,
        3,
        1000,
        (1 << 24) + 1,
        u32::MAX as usize,
        1 << 40,
    ] {
        let e = r.launch(spec().capacity(c)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidCapacity { capacity, .. } if capacity == c),
            "{e}"
        );
        assert!(e.to_string().contains(&c.to_string()));
    }
    for s in [0usize, 64, 100, 129, 200, (1 << 20) + 128, 1 << 40] {
        let e = r.launch(spec().slot_size(s)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidSlotSize { slot_size, .. } if slot_size == s),
            "{e}"
        );
    }
    for bs in [0usize, 1025, 1 << 40] {
        let e = r.launch(spec().capacity(1024).batch_size(bs)).unwrap_err();
        assert!(
            matches!(e, Error::InvalidBatchSize { batch, .. } if batch == bs),
            "{e}"
        );
    }
    // Beyond what the ring's 32-bit fields hold: the same error, the value never
    // truncated.
    let e = r.launch(spec().capacity(usize::MAX)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidCapacity {
                capacity: usize::MAX,
                ..
            }
        ),
        "{e}"
    );
    let e = r
        .launch(spec().idle(gyre::IdleStrategy::Sleep(Duration::ZERO)))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // The export interval is at least 1 ms.
    let e = r
        .launch(spec().export_interval(Duration::ZERO))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                name: "export_interval",
                ..
            }
        ),
        "{e}"
    );
}

pub fn pause_resume(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u32, u32>::echo().capacity(16))
        .unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 1);
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    let before = k.telemetry().unwrap().messages_in;
    for i in 0..10 {
        k.try_send(i).unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    assert!(k.try_recv().unwrap().is_none(), "a paused kernel answered");
    assert_eq!(k.telemetry().unwrap().messages_in, before);
    k.resume();
    for i in 0..10 {
        assert_eq!(k.recv_timeout(Duration::from_secs(5)).unwrap(), i);
    }
    assert_eq!(k.state(), KernelState::Active);
    k.shutdown_blocking().unwrap();
}

/// Shutdown with requests in flight: every accepted request gets exactly one reply or one
/// error.
pub fn terminate_with_messages_in_flight(b: Target) {
    for round in 0..20u64 {
        let k = rt(b)
            .launch(KernelSpec::<u64, u64>::echo().capacity(64))
            .unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let (k, accepted) = (k.clone(), accepted.clone());
                std::thread::spawn(move || {
                    let mut calls = (0u64, 0u64);
                    for s in 0.. {
                        let v = (p << 40) | s;
                        if s % 2 == 0 {
                            match k.call_blocking(v) {
                                Ok(r) => {
                                    assert_eq!(r, v);
                                    calls.0 += 1;
                                }
                                Err(Error::Closed { .. }) => break,
                                Err(Error::KernelTerminated { .. }) => calls.1 += 1,
                                Err(e) => panic!("call: {e}"),
                            }
                        } else {
                            match k.try_send(v) {
                                Ok(()) => {
                                    accepted.fetch_add(1, Ordering::SeqCst);
                                }
                                Err(TrySendError::Full(_)) => std::thread::yield_now(),
                                Err(TrySendError::Closed(_)) => break,
                            }
                        }
                    }
                    calls
                })
            })
            .collect();
        std::thread::sleep(Duration::from_micros(200 + round * 150));
        k.shutdown_blocking().unwrap();
        for t in producers {
            t.join().unwrap();
        }
        let mut answered = 0;
        loop {
            match k.try_recv() {
                Ok(Some(_)) => answered += 1,
                Ok(None) => panic!("recv pending after shutdown"),
                Err(Error::KernelTerminated { .. }) if k.try_recv().is_err() => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert_eq!(answered, accepted.load(Ordering::SeqCst), "round {round}");
    }
}

pub fn handler_panic_faults_kernel(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("boom", |x: u32| {
                if x == 13 {
                    panic!("handler panic (expected by the test)");
                }
                x
            })
            .capacity(16),
        )
        .unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 1);
    // Queue some sends behind the poisoned request.
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    k.try_send(2).unwrap();
    k.try_send(13).unwrap();
    k.try_send(3).unwrap();
    k.resume();
    assert_eq!(k.recv_timeout(Duration::from_secs(5)).unwrap(), 2);
    let e = k.recv_timeout(Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Handler {
                status: gyre_abi::error::HANDLER_PANIC,
                ..
            }
        ),
        "{e}"
    );
    let e = k.recv_timeout(Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::KernelFaulted {
                code: gyre_abi::error::HANDLER_PANIC,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        k.state(),
        KernelState::Faulted {
            code: gyre_abi::error::HANDLER_PANIC
        }
    );
    // Later requests are refused at once instead of hanging: never accepted, `Closed`.
    assert!(matches!(k.call_blocking(4), Err(Error::Closed { .. })));
    assert!(matches!(k.try_send(5), Err(TrySendError::Closed(5))));
    assert!(matches!(
        k.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
}

pub fn handler_error_keeps_serving(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(KernelSpec::try_from_fn("odd", |x: u32| {
            if x % 2 == 1 {
                Err(gyre_abi::error::USER_BASE + 1)
            } else {
                Ok(x / 2)
            }
        }))
        .unwrap();
    for x in 0..100u32 {
        match k.call_blocking(x) {
            Ok(v) => assert_eq!(v, x / 2),
            Err(Error::Handler { status, .. }) => {
                assert_eq!(x % 2, 1);
                assert_eq!(status, gyre_abi::error::USER_BASE + 1);
            }
            Err(e) => panic!("{e}"),
        }
    }
    eventually("50 errors in telemetry", || {
        k.telemetry().unwrap().errors == 50
    });
    k.shutdown_blocking().unwrap();
}

pub fn telemetry_counts(b: Target) {
    let k = rt(b).launch(KernelSpec::<u32, u32>::echo()).unwrap();
    for i in 0..500 {
        k.call_blocking(i).unwrap();
    }
    // Telemetry is published after the batch's replies: it may lag them briefly.
    eventually("telemetry of 500 messages", || {
        k.telemetry().unwrap().messages_out == 500
    });
    let t = k.telemetry().unwrap();
    assert_eq!(t.messages_in, 500);
    assert_eq!(t.messages_out, 500);
    assert_eq!(t.errors, 0);
    assert!(t.busy_polls >= 1 && t.busy_polls <= 500);
    assert_eq!(t.state, gyre_abi::state::ACTIVE);
    assert_eq!(t.seq % 2, 0);
    k.shutdown_blocking().unwrap();
}

pub fn batch_send_and_recv_order(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u32, u32>::echo().capacity(64).batch_size(64))
        .unwrap();
    let batch: Vec<u32> = (0..64).collect();
    for round in 0..100u32 {
        let msgs: Vec<u32> = batch.iter().map(|x| x + round * 64).collect();
        k.try_send_batch(&msgs).unwrap();
        for m in &msgs {
            assert_eq!(k.recv_blocking().unwrap(), *m);
        }
    }
    // Batch receive: one index update for a run of replies, order kept.
    let mut out = Vec::new();
    for round in 0..50u32 {
        let msgs: Vec<u32> = (0..64).map(|x| x + round * 1000).collect();
        k.try_send_batch(&msgs).unwrap();
        out.clear();
        let deadline = Instant::now() + Duration::from_secs(10);
        while out.len() < 64 {
            let want = 64 - out.len();
            k.try_recv_batch(&mut out, want).unwrap();
            assert!(Instant::now() < deadline, "batch replies did not arrive");
        }
        let got: Vec<u32> = out.drain(..).map(|r| r.unwrap()).collect();
        assert_eq!(got, msgs);
    }
    let too_big: Vec<u32> = (0..65).collect();
    assert!(matches!(
        k.try_send_batch(&too_big),
        Err(TrySendError::Full(_))
    ));
    k.shutdown_blocking().unwrap();
}

pub fn call_timeout_abandons(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("sleepy", |x: u64| {
                if x == 0 {
                    // Far longer than the timeout below, so the outcome does not depend on
                    // scheduling even on a loaded machine.
                    std::thread::sleep(Duration::from_millis(1000));
                }
                x
            })
            .capacity(4),
        )
        .unwrap();
    let e = k.call_timeout(0, Duration::from_millis(5)).unwrap_err();
    assert!(matches!(e, Error::Timeout { op: "call", .. }), "{e}");
    // The abandoned slot is released once its late reply arrives.
    for i in 1..50u64 {
        assert_eq!(k.call_timeout(i, Duration::from_secs(5)).unwrap(), i);
    }
    k.shutdown_blocking().unwrap();
}

/// A blocking caller under `IdleStrategy::Sleep(1 s)` (the longest allowed) parks
/// between polls, yet returns when its 50 ms reply lands (the completion driver or the
/// kernel's thread unparks it) and at a 20 ms deadline, not after the sleep: each is
/// asserted under the 1 s a sleeping caller would take, a margin of over 900 ms.
pub fn a_sleeping_caller_is_woken_and_keeps_its_deadline(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("slow", |x: u64| {
                std::thread::sleep(Duration::from_millis(if x == 0 { 2000 } else { 50 }));
                x
            })
            .capacity(4)
            .host_idle(gyre::IdleStrategy::Sleep(Duration::from_secs(1))),
        )
        .unwrap();
    let t = std::time::Instant::now();
    assert_eq!(k.call_blocking(7).unwrap(), 7);
    let woken = t.elapsed();
    assert!(woken < Duration::from_secs(1), "woken after {woken:?}");
    let t = std::time::Instant::now();
    let e = k.call_timeout(0, Duration::from_millis(20)).unwrap_err();
    let gave_up = t.elapsed();
    assert!(matches!(e, Error::Timeout { op: "call", .. }), "{e}");
    assert!(
        gave_up < Duration::from_secs(1),
        "timed out after {gave_up:?}"
    );
    k.shutdown_blocking().unwrap();
}

/// `call_timeout` gives up while still waiting for a free slot, sending nothing.
pub fn call_timeout_while_ring_full(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u32, u32>::echo().capacity(4))
        .unwrap();
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    for i in 0..4 {
        k.try_send(i).unwrap();
    }
    let e = k.call_timeout(9, Duration::from_millis(20)).unwrap_err();
    assert!(matches!(e, Error::Timeout { op: "call", .. }), "{e}");
    k.resume();
    for i in 0..4 {
        assert_eq!(k.recv_timeout(Duration::from_secs(5)).unwrap(), i);
    }
    // Nothing was sent by the timed-out call.
    assert!(k.try_recv().unwrap().is_none());
    k.shutdown_blocking().unwrap();
}

/// Liveness under a batch sender, a single sender and a receiver racing: shutdown always
/// completes. (Slot reuse must wait for the previous lap's publication or the published
/// head can stick; the loom model `reuse_waits_for_publication_of_previous_lap` checks
/// that interleaving deterministically, this stress only rarely hits it.)
pub fn mixed_batch_and_single_senders_always_shut_down(b: Target) {
    for _ in 0..10 {
        let k = rt(b)
            .launch(
                KernelSpec::<[u8; 8000], [u8; 8000]>::echo()
                    .capacity(32)
                    .slot_size(8192),
            )
            .unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spawn_sender = |batch: bool| {
            let (k, stop) = (k.clone(), stop.clone());
            std::thread::spawn(move || {
                let msgs = vec![[7u8; 8000]; 32];
                while !stop.load(Ordering::Relaxed) {
                    let r = if batch {
                        k.try_send_batch(&msgs).map_err(|_| ())
                    } else {
                        k.try_send([1; 8000]).map_err(|_| ())
                    };
                    if r.is_err() {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let senders = [spawn_sender(true), spawn_sender(false)];
        let receiver = {
            let (k, stop) = (k.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    out.clear();
                    let _ = k.try_recv_batch(&mut out, 64);
                }
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        stop.store(true, Ordering::Relaxed);
        for t in senders {
            t.join().unwrap();
        }
        receiver.join().unwrap();
        k.shutdown_timeout(Duration::from_secs(10))
            .expect("shutdown must not hang");
    }
}
