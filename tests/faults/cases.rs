//! Fault cases: handler panic, stuck handler (watchdog), kernel fault through the control
//! block, shutdown with messages in flight. Each takes the backend to run on.

use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use gyre::{Error, KernelSpec, KernelState, TrySendError};
use gyre_abi::error as code;

pub use super::host_killed::host_process_killed;
pub use super::ring_cases::{
    corrupted_message_type, corrupted_slot_headers, dropped_futures_every_await_point,
    producer_dies_mid_claim, stalled_consumer,
};
use super::{
    assert_all_released, counters, drain_replies, eventually, host_handlers, rt, tokio_rt, Target,
};

const POISON: u64 = 0xdead;

/// A handler panics in the middle of a batch of 29 requests (sends, blocking calls, async
/// calls): the requests before it are answered, it gets `HANDLER_PANIC`, every later one
/// `KernelFaulted(HANDLER_PANIC)` — each exactly once.
pub fn handler_panic_mid_batch(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("boom", |x: u64| {
                if x == POISON {
                    panic!("handler panic (injected by the fault suite)");
                }
                x + 1
            })
            .capacity(64)
            .batch_size(64),
        )
        .unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 2);
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    let base = k.raw_channel().claimed();
    let claimed = |n: u64| {
        let k = k.clone();
        eventually("requests accepted", move || {
            k.raw_channel().claimed() == base + n
        })
    };
    // Indices base+0..10: sends 1..=10, one claim.
    let first: Vec<u64> = (1..=10).collect();
    k.try_send_batch(&first).unwrap();
    // base+10..14: blocking calls.
    let blocking = |vals: std::ops::Range<u64>| -> Vec<_> {
        vals.map(|v| {
            let k = k.clone();
            std::thread::spawn(move || (v, k.call_blocking(v)))
        })
        .collect()
    };
    let before = blocking(100..104);
    claimed(14);
    // base+14..16: async calls.
    let trt = tokio_rt();
    let asyncs: Vec<_> = (200..202u64)
        .map(|v| {
            (
                v,
                trt.spawn({
                    let k = k.clone();
                    async move { k.call(v).await }
                }),
            )
        })
        .collect();
    claimed(16);
    // base+16: the poison, then base+17..27: sends 21..=30, then base+27..29: calls.
    k.try_send(POISON).unwrap();
    let last: Vec<u64> = (21..=30).collect();
    k.try_send_batch(&last).unwrap();
    let after = blocking(300..302);
    claimed(29);
    k.resume();

    let panicked = |e: &Error| {
        matches!(
            e,
            Error::Handler {
                status: code::HANDLER_PANIC,
                ..
            }
        )
    };
    let faulted = |e: &Error| {
        matches!(
            e,
            Error::KernelFaulted {
                code: code::HANDLER_PANIC,
                ..
            }
        )
    };
    for t in before {
        let (v, r) = t.join().unwrap();
        assert_eq!(r.unwrap(), v + 1, "call {v} was before the poison");
    }
    for (v, h) in asyncs {
        assert_eq!(trt.block_on(h).unwrap().unwrap(), v + 1);
    }
    for t in after {
        let (v, r) = t.join().unwrap();
        let e = r.unwrap_err();
        assert!(faulted(&e), "call {v} after the poison: {e}");
    }
    let items = drain_replies(&k);
    assert_eq!(items.len(), 21, "one item per accepted send: {items:?}");
    for (i, item) in items.iter().enumerate() {
        match i {
            0..=9 => assert_eq!(item, &Ok(i as u64 + 2)),
            10 => assert!(panicked(item.as_ref().unwrap_err()), "{item:?}"),
            _ => assert!(faulted(item.as_ref().unwrap_err()), "{item:?}"),
        }
    }
    assert_eq!(
        k.state(),
        KernelState::Faulted {
            code: code::HANDLER_PANIC
        }
    );
    // Later requests are refused (never accepted): `Closed`.
    assert!(matches!(k.call_blocking(5), Err(Error::Closed { .. })));
    assert!(matches!(k.try_send(5), Err(TrySendError::Closed(5))));
    assert!(matches!(
        k.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
    assert_all_released(&k);
}

/// A gate a stuck handler waits on; opened at the end so the detached thread can exit.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        while !*open {
            open = self.cv.wait(open).unwrap_or_else(|e| e.into_inner());
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }
}

const STUCK: u64 = 0x57c4;

/// A handler that never returns: the watchdog notices the silent kernel, `state()` says
/// `Unresponsive`, every waiter (blocking call, async call, `recv` of a send) fails with
/// `Error::Unresponsive` exactly once, later requests are refused, and shutdown returns
/// that error at once instead of joining the stuck thread. Once the handler is released
/// the detached kernel drains and stops by itself.
pub fn stuck_handler_watchdog(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("stuck", move |x: u64| {
                if x == STUCK {
                    g.wait();
                }
                x + 1
            })
            .capacity(16)
            .watchdog(Duration::from_millis(300)),
        )
        .unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 2);
    let unresponsive = |e: &Error| matches!(e, Error::Unresponsive { .. });
    // Queue everything while paused (a paused kernel keeps its heartbeat), so the
    // watchdog can only fire once the kernel is stuck in the handler.
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    let stuck = {
        let k = k.clone();
        std::thread::spawn(move || k.call_blocking(STUCK))
    };
    eventually("the stuck request accepted", || counters(&k).0 == 2);
    let blocked = {
        let k = k.clone();
        std::thread::spawn(move || k.call_blocking(7))
    };
    eventually("the blocked call accepted", || counters(&k).0 == 3);
    let trt = tokio_rt();
    let async_call = trt.spawn({
        let k = k.clone();
        async move { k.call(8).await }
    });
    eventually("the async call accepted", || counters(&k).0 == 4);
    k.try_send(9).unwrap();
    k.resume();

    let e = stuck.join().unwrap().unwrap_err();
    assert!(unresponsive(&e), "{e}");
    let e = blocked.join().unwrap().unwrap_err();
    assert!(unresponsive(&e), "{e}");
    let e = trt.block_on(async_call).unwrap().unwrap_err();
    assert!(unresponsive(&e), "{e}");
    assert_eq!(k.state(), KernelState::Unresponsive);
    let items = drain_replies(&k);
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(unresponsive(items[0].as_ref().unwrap_err()), "{items:?}");
    // Later requests are refused at once.
    assert!(matches!(k.call_blocking(10), Err(Error::Closed { .. })));
    assert!(matches!(k.try_send(11), Err(TrySendError::Closed(11))));
    // Shutdown returns the verdict instead of joining the stuck thread.
    let e = k.shutdown_blocking().unwrap_err();
    assert!(unresponsive(&e), "{e}");
    let e = trt.block_on(k.shutdown()).unwrap_err();
    assert!(unresponsive(&e), "{e}");
    // Released, the detached kernel sees Terminate, drains and stops.
    gate.open();
    eventually("the released kernel terminates", || {
        matches!(k.state(), KernelState::Terminated { .. })
    });
    assert_all_released(&k);
}

/// The kernel faults on its own (here: it finds the control block's magic corrupted) and
/// reports it through the control block's error code: every waiter — blocking call, async
/// call, the replies of sends — fails exactly once with `KernelFaulted` carrying that
/// code, and `state()` and shutdown report it too.
pub fn kernel_fault_error_code(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u64, u64>::echo().capacity(32))
        .unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 1);
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    for v in 0..5u64 {
        k.try_send(v).unwrap();
    }
    let blocking = {
        let k = k.clone();
        std::thread::spawn(move || k.call_blocking(50))
    };
    eventually("blocking call accepted", || counters(&k).0 == 7);
    let trt = tokio_rt();
    let async_call = trt.spawn({
        let k = k.clone();
        async move { k.call(60).await }
    });
    eventually("async call accepted", || counters(&k).0 == 8);

    // Corrupt the host line: the kernel must stop trusting it.
    let cb = k.raw_channel().region().control();
    cb.magic.store(0xbad0_bad0, Release);
    eventually("Faulted", || {
        matches!(k.state(), KernelState::Faulted { .. })
    });
    assert_eq!(cb.error_code.load(Acquire), code::BAD_MAGIC);
    assert_eq!(
        k.state(),
        KernelState::Faulted {
            code: code::BAD_MAGIC
        }
    );

    let faulted = |e: &Error| {
        matches!(
            e,
            Error::KernelFaulted {
                code: code::BAD_MAGIC,
                ..
            }
        )
    };
    let e = blocking.join().unwrap().unwrap_err();
    assert!(faulted(&e), "{e}");
    let e = trt.block_on(async_call).unwrap().unwrap_err();
    assert!(faulted(&e), "{e}");
    let items = drain_replies(&k);
    assert_eq!(items.len(), 5, "{items:?}");
    assert!(
        items.iter().all(|i| i.as_ref().is_err_and(faulted)),
        "{items:?}"
    );
    // A later request is refused, never accepted: `Closed`, as on every path.
    assert!(matches!(k.call_blocking(2), Err(Error::Closed { .. })));
    assert!(matches!(k.shutdown_blocking(), Err(ref e) if faulted(e)));
    assert_eq!(
        k.telemetry().unwrap().state,
        gyre_abi::state::FAULTED,
        "telemetry carries the final state"
    );
    assert_all_released(&k);
}

/// A small deterministic generator (xorshift), for random timing that a failure can replay.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Shutdown while producers (blocking calls, `try_send`, async `call` and `send`) are
/// busy, 100 rounds with random timing and alternating blocking / async shutdown. A clean
/// shutdown drains: every accepted send is delivered with its real reply exactly once,
/// every accepted call returns its reply, and the counters show that nothing else was
/// accepted and every reply slot was released.
pub fn shutdown_in_flight_random_timing(b: Target) {
    const ROUNDS: u64 = 100;
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for round in 0..ROUNDS {
        let k = rt(b)
            .launch(KernelSpec::<u64, u64>::echo().capacity(32))
            .unwrap();
        let trt = tokio_rt();
        let call_thread = {
            let k = k.clone();
            std::thread::spawn(move || {
                let mut ok = 0u64;
                for s in 0.. {
                    let v = (1 << 40) | s;
                    match k.call_blocking(v) {
                        Ok(r) => {
                            assert_eq!(r, v);
                            ok += 1;
                        }
                        // Refused: the ring closed, or it was full when the kernel stopped.
                        Err(Error::Closed { .. } | Error::KernelTerminated { .. }) => break,
                        Err(e) => panic!("call {v}: {e}"),
                    }
                }
                ok
            })
        };
        let send_thread = {
            let k = k.clone();
            std::thread::spawn(move || {
                let mut sent = Vec::new();
                for s in 0.. {
                    let v = (2 << 40) | s;
                    match k.try_send(v) {
                        Ok(()) => sent.push(v),
                        Err(TrySendError::Full(_)) => std::thread::yield_now(),
                        Err(TrySendError::Closed(_)) => break,
                    }
                }
                sent
            })
        };
        let async_task = {
            let k = k.clone();
            trt.spawn(async move {
                let (mut ok, mut sent) = (0u64, Vec::new());
                for s in 0.. {
                    let v = (3 << 40) | s;
                    if s % 2 == 0 {
                        match k.call(v).await {
                            Ok(r) => {
                                assert_eq!(r, v);
                                ok += 1;
                            }
                            Err(Error::Closed { .. } | Error::KernelTerminated { .. }) => break,
                            Err(e) => panic!("async call {v}: {e}"),
                        }
                    } else {
                        match k.send(v).await {
                            Ok(()) => sent.push(v),
                            Err(Error::Closed { .. } | Error::KernelTerminated { .. }) => break,
                            Err(e) => panic!("async send {v}: {e}"),
                        }
                    }
                }
                (ok, sent)
            })
        };
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        if round % 2 == 0 {
            k.shutdown_blocking().unwrap();
        } else {
            trt.block_on(k.shutdown()).unwrap();
        }
        let mut ok_calls = call_thread.join().unwrap();
        let mut sent = send_thread.join().unwrap();
        let (async_ok, async_sent) = trt.block_on(async_task).unwrap();
        ok_calls += async_ok;
        sent.extend(async_sent);

        let items = drain_replies(&k);
        let mut got: Vec<u64> = items
            .into_iter()
            .map(|i| i.unwrap_or_else(|e| panic!("round {round}: drained send failed: {e}")))
            .collect();
        got.sort_unstable();
        sent.sort_unstable();
        assert_eq!(got, sent, "round {round}: sends lost or duplicated");
        let (claimed, h2k_head, h2k_tail, k2h_head, _) = counters(&k);
        assert_eq!(
            claimed,
            ok_calls + sent.len() as u64,
            "round {round}: a request was accepted but neither answered nor delivered"
        );
        assert_eq!((h2k_head, h2k_tail, k2h_head), (claimed, claimed, claimed));
        assert_all_released(&k);
    }
}
