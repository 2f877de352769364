//! Relaunches on a kernel's own rings (`docs/protocol.md`, handover): reloads under load,
//! bounded epochs, restarts after a fault, a reload racing a shutdown, a reload whose
//! handler does not build. Every accepted request is answered exactly once, and once a
//! reply of a new handler is seen no later request is answered by an older one.
//!
//! Handlers are `#[gyre::handler]` functions (every backend runs them) or, where a case
//! needs a handler per reload, Rust closures (CPU backend).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gyre::{Backend, Error, IdleStrategy, Kernel, KernelSpec, KernelState, RestartPolicy};

use super::common::{eventually, rt, Target};

/// Tag 0: `x << 8`.
#[gyre::handler]
fn tag0(x: u64) -> u64 {
    x << 8
}

/// Tag 1: `x << 8 | 1`.
#[gyre::handler]
fn tag1(x: u64) -> u64 {
    (x << 8) | 1
}

/// Panics (division by zero) when `x % 16 == 0`: HANDLER_PANIC on every backend.
#[gyre::handler]
fn fragile(x: u64) -> u64 {
    (x << 8) / (x % 16)
}

/// Handler version `v` and whether versions are told apart beyond their parity (Rust
/// closures can carry any version; the device backends alternate two built handlers).
fn version(b: Backend, v: u64) -> KernelSpec<u64, u64> {
    if b == Backend::Cpu {
        KernelSpec::from_fn("tag", move |x: u64| (x << 8) | v)
    } else if v % 2 == 0 {
        KernelSpec::portable(tag0)
    } else {
        KernelSpec::portable(tag1)
    }
}

/// How many messages each producer sends while the load runs.
const PER_PRODUCER: u64 = 3_000;

/// Four producers mixing `call` and `send` (every third message a send) while `during`
/// runs on this thread; a consumer takes the sends' replies. Returns every reply,
/// `(producer, i) -> reply`, after checking that each accepted request got exactly one.
fn under_load(k: &Kernel<u64, u64>, during: impl FnOnce()) -> HashMap<(u64, u64), u64> {
    let replies = Arc::new(Mutex::new(HashMap::new()));
    let sent = Arc::new(AtomicU64::new(0));
    let producers_done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (k, replies, sent, done) = (
            k.clone(),
            replies.clone(),
            sent.clone(),
            producers_done.clone(),
        );
        std::thread::spawn(move || {
            let mut got = 0u64;
            loop {
                if done.load(Ordering::Acquire) && got == sent.load(Ordering::Acquire) {
                    return;
                }
                match k.recv_timeout(Duration::from_millis(20)) {
                    Ok(r) => {
                        got += 1;
                        let x = r >> 8;
                        let dup = replies
                            .lock()
                            .unwrap()
                            .insert((x >> 32, x & 0xffff_ffff), r);
                        assert!(dup.is_none(), "a second reply for send {x:#x}");
                    }
                    Err(Error::Timeout { .. }) => {}
                    Err(e) => panic!("recv: {e}"),
                }
            }
        })
    };
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let (k, replies, sent) = (k.clone(), replies.clone(), sent.clone());
            std::thread::spawn(move || {
                for i in 0..PER_PRODUCER {
                    let x = (p << 32) | i;
                    if i % 3 == 0 {
                        k.send_blocking(x).expect("send");
                        sent.fetch_add(1, Ordering::AcqRel);
                    } else {
                        let r = k.call_blocking(x).expect("call");
                        assert_eq!(r >> 8, x, "call {x:#x} answered for another request");
                        let dup = replies.lock().unwrap().insert((p, i), r);
                        assert!(dup.is_none(), "a second reply for call {x:#x}");
                    }
                }
            })
        })
        .collect();
    during();
    for p in producers {
        p.join().expect("producer");
    }
    producers_done.store(true, Ordering::Release);
    consumer.join().expect("consumer");
    let replies = Arc::try_unwrap(replies).unwrap().into_inner().unwrap();
    assert_eq!(
        replies.len() as u64,
        4 * PER_PRODUCER,
        "lost or duplicated replies"
    );
    replies
}

/// Per producer, in request order, the versions that answered never go back.
fn versions_never_go_back(replies: &HashMap<(u64, u64), u64>, distinct: bool) {
    for p in 0..4u64 {
        let mut last = 0u64;
        for i in 0..PER_PRODUCER {
            let v = replies[&(p, i)] & 0xff;
            if distinct {
                assert!(
                    v >= last,
                    "producer {p} request {i} answered by version {v} after version {last}"
                );
            }
            last = v;
        }
    }
}

/// 100 reloads under load from 4 producers mixing call and send: nothing lost or
/// duplicated, versions only move forward, and a request sent after a reload returned is
/// answered by the new handler.
pub fn hundred_reloads_under_load(b: Target) {
    let rt = rt(b);
    let be = rt.backend_for(&version(rt.backend(), 0)).expect("backend");
    let k = rt.launch(version(be, 0)).expect("launch");
    let replies = under_load(&k, || {
        for v in 1..=100u64 {
            k.reload_blocking(version(be, v)).expect("reload");
            // A request after the reload returned: the new handler answers it.
            let r = k.call_blocking(0xfff_0000_0000 + v).expect("probe call");
            let want = if be == Backend::Cpu { v } else { v % 2 };
            assert_eq!(r & 0xff, want, "reload {v}: answered by an older handler");
        }
    });
    versions_never_go_back(&replies, be == Backend::Cpu);
    let r = k.relaunches();
    assert_eq!((r.reloads, r.generation), (100, 101));
    // The counters continue across launches: every request of every launch counts (the
    // line is written at least every millisecond, not per batch on a checked ring).
    eventually("every request counted in the telemetry", || {
        k.telemetry().expect("telemetry").messages_out == 4 * PER_PRODUCER + 100
    });
    k.shutdown_blocking().expect("shutdown");
}

/// A 1 ms epoch under the same load: the kernel hands over to fresh launches of itself
/// all along, and nothing is lost or duplicated.
pub fn one_ms_epochs_under_load(b: Target) {
    let rt = rt(b);
    let spec = KernelSpec::portable(tag1).epoch(Duration::from_millis(1));
    let k = rt.launch(spec).expect("launch");
    let replies = under_load(&k, || std::thread::sleep(Duration::from_millis(50)));
    assert!(replies.values().all(|r| r & 0xff == 1));
    eventually("an epoch's handover", || k.relaunches().epochs >= 5);
    let r = k.relaunches();
    assert_eq!(r.reloads + r.restarts, 0);
    k.shutdown_blocking().expect("shutdown");
    assert_eq!(k.state(), KernelState::Terminated { code: 0 });
}

/// Injected panics under a restart policy: each panicking request gets its own error,
/// every other request its answer from whichever launch took it; the kernel comes back
/// after each fault, and the restarts are counted.
pub fn restarts_after_injected_panics(b: Target) {
    let rt = rt(b);
    let panics = 5u64;
    let k = rt
        .launch(
            KernelSpec::portable(fragile).restart(
                RestartPolicy::new(panics as u32)
                    .backoff(Duration::from_micros(100), Duration::from_millis(2)),
            ),
        )
        .expect("launch");
    // Sends queue behind each panicking call: the restarted kernel answers them.
    for x in 1..=(16 * panics) {
        if x % 16 == 0 {
            match k.call_blocking(x) {
                Err(Error::Handler { status, .. }) if status == gyre::codes::HANDLER_PANIC => {}
                other => panic!("request {x}: {other:?}"),
            }
        } else if x % 2 == 0 {
            k.send_blocking(x).expect("send");
        } else {
            assert_eq!(k.call_blocking(x).expect("call"), (x << 8) / (x % 16));
        }
    }
    for x in (1..=(16 * panics)).filter(|x| x % 16 != 0 && x % 2 == 0) {
        assert_eq!(
            k.recv_blocking().expect("recv"),
            (x << 8) / (x % 16),
            "send {x}"
        );
    }
    // The last fault's restart needs no request to happen.
    eventually("the last restart", || k.relaunches().restarts == panics);
    // The budget is spent: the next fault is final and fails what the kernel had not
    // answered.
    let last = k.call_blocking(16 * 99);
    assert!(
        matches!(
            last,
            Err(Error::Handler { status, .. }) if status == gyre::codes::HANDLER_PANIC
        ),
        "the final fault's own request: {last:?}"
    );
    eventually("the final fault", || {
        matches!(k.state(), KernelState::Faulted { .. })
    });
    assert!(matches!(
        k.call_blocking(1),
        Err(Error::KernelFaulted { .. } | Error::Closed { .. })
    ));
    assert!(matches!(
        k.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
}

/// A reload racing a shutdown: the reload completes (the new launch drains) or is
/// refused because the shutdown came first; the shutdown succeeds; every accepted
/// request is answered exactly once.
pub fn reload_racing_shutdown(b: Target) {
    let rt = rt(b);
    let be = rt.backend_for(&version(rt.backend(), 0)).expect("backend");
    for round in 0..10u64 {
        let k = rt.launch(version(be, 0)).expect("launch");
        let accepted = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let producer = {
            let (k, accepted, answered) = (k.clone(), accepted.clone(), answered.clone());
            std::thread::spawn(move || {
                for i in 0.. {
                    match k.call_blocking(i) {
                        Ok(r) => {
                            assert_eq!(r >> 8, i);
                            accepted.fetch_add(1, Ordering::AcqRel);
                            answered.fetch_add(1, Ordering::AcqRel);
                        }
                        Err(Error::Closed { .. }) => return,
                        Err(e) => panic!("call {i}: {e}"),
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_micros(200 * round));
        let reloader = {
            let k = k.clone();
            std::thread::spawn(move || k.reload_blocking(version(be, 1)))
        };
        k.shutdown_blocking().expect("shutdown");
        match reloader.join().expect("reloader") {
            Ok(()) => {}
            Err(Error::Closed { .. } | Error::KernelTerminated { .. }) => {}
            Err(e) => panic!("round {round}: reload: {e}"),
        }
        producer.join().expect("producer");
        assert_eq!(
            accepted.load(Ordering::Acquire),
            answered.load(Ordering::Acquire)
        );
        assert_eq!(k.state(), KernelState::Terminated { code: 0 });
    }
}

/// A reload whose handler does not build: a typed error with the compiler's log, and the
/// old handler keeps serving. (The CPU backend builds nothing: the case needs a device.)
pub fn reload_with_failing_build(b: Target) {
    let rt = rt(b);
    if rt.backend() == Backend::Cpu {
        eprintln!("SKIP: the CPU backend runs Rust handlers and builds nothing");
        return;
    }
    let k = rt.launch(KernelSpec::portable(tag0)).expect("launch");
    assert_eq!(k.call_blocking(3).expect("call"), 3 << 8);
    let broken = KernelSpec::<u64, u64>::from_fn("tag", |x| x)
        .device_handler("broken.h", "this is not a handler {");
    let e = k.reload_blocking(broken).expect_err("a broken build");
    let mut chain = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        chain.push_str(&format!(": {s}"));
        src = s.source();
    }
    assert!(matches!(e, Error::Launch { .. }), "{e:?}");
    assert!(
        chain.contains("broken.h") || chain.contains("error"),
        "{chain}"
    );
    assert_eq!(k.call_blocking(4).expect("the old handler"), 4 << 8);
    assert_eq!(k.relaunches().reloads, 0);
    k.shutdown_blocking().expect("shutdown");
}

/// A reload keeps a paused kernel paused, refuses other rings, and works from async code.
pub fn reload_keeps_pause_and_checks_rings(b: Target) {
    let rt = rt(b);
    let be = rt.backend_for(&version(rt.backend(), 0)).expect("backend");
    let k = rt.launch(version(be, 0)).expect("launch");
    let e = k.reload_blocking(version(be, 1).capacity(64));
    assert!(
        matches!(
            e,
            Err(Error::ReloadMismatch {
                field: "capacity",
                ..
            })
        ),
        "{e:?}"
    );
    k.pause();
    eventually("paused", || k.state() == KernelState::Paused);
    k.send_blocking(5).expect("queued while paused");
    k.reload_blocking(version(be, 1))
        .expect("reload while paused");
    // The successor follows the command its predecessor had: it comes up paused (a
    // copy strategy's mirror shows it once the bridge pulled).
    eventually("paused again", || k.state() == KernelState::Paused);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(k.state(), KernelState::Paused);
    assert_eq!(k.telemetry().expect("telemetry").messages_out, 0);
    k.resume();
    assert_eq!(k.recv_blocking().expect("recv"), (5 << 8) | 1);
    let tokio = super::common::tokio_rt();
    tokio
        .block_on(k.reload(version(be, 2)))
        .expect("async reload");
    let want = if be == Backend::Cpu { 2 } else { 0 };
    assert_eq!(k.call_blocking(6).expect("call"), (6 << 8) | want);
    k.shutdown_blocking().expect("shutdown");
}

/// A kernel that never parks (`BusySpin`: on the CPU backend its doorbell's rings stop
/// fencing), reloaded into one that parks for up to 1 s at a time: the idle successor is
/// still woken by every publication (`gyre_core::doorbell`, `Doorbell::enter`), so a call
/// after 30 ms of idling answers well within 600 ms (microseconds, unloaded), where a lost
/// wake-up would wait out the park (about 970 ms). And back: a busy-spinning successor of
/// a parking kernel. The device backends' loops do not park on the host (their idle strategy is the
/// device's spin): there the case checks the reloads and calls only, with a bound that
/// leaves room for a device relaunch (PoCL's first call after a reload under the copy
/// strategies took over 250 ms in CI).
pub fn a_reload_into_a_parking_kernel_still_wakes(b: Target) {
    let rt = rt(b);
    let be = rt.backend_for(&version(rt.backend(), 0)).expect("backend");
    let parking = IdleStrategy::Backoff {
        spins: 16,
        yields: 16,
        max_park: IdleStrategy::MAX_PARK,
    };
    let k = rt
        .launch(version(be, 0).idle(IdleStrategy::BusySpin))
        .expect("launch");
    assert_eq!(k.call_blocking(1).expect("busy-spinning"), 1 << 8);
    let bound = if be == Backend::Cpu {
        Duration::from_millis(600)
    } else {
        Duration::from_secs(20)
    };
    for v in 1..=4u64 {
        let idle = if v % 2 == 1 {
            parking
        } else {
            IdleStrategy::BusySpin
        };
        k.reload_blocking(version(be, v).idle(idle))
            .expect("reload");
        for x in 0..3u64 {
            std::thread::sleep(Duration::from_millis(30));
            let want = if be == Backend::Cpu { v } else { v % 2 };
            assert_eq!(
                k.call_timeout(x, bound)
                    .unwrap_or_else(|e| panic!("version {v}, call {x} after idling: {e}")),
                (x << 8) | want
            );
        }
    }
    k.shutdown_blocking().expect("shutdown");
}
