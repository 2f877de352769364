//! Reloading one stage of a running chain (`Pipeline::reload_stage`, `docs/pipelines.md`,
//! "Reloading a stage"), on the CPU backend: the stage hands over at a batch boundary and
//! a successor with the new handler continues from the first request the old one did not
//! take, while the other stages run on. Every request is answered exactly once, in
//! order, by the old handler (a prefix) or the new one (the rest).

#[path = "support/deadline.rs"]
mod deadline;

use deadline::{recv, send};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use gyre::{
    codes,
    pipeline::{Pipeline, PipelineSpec},
    Error, IdleStrategy, KernelSpec, KernelState, RestartPolicy, Runtime,
};

#[path = "support/wait.rs"]
mod wait;
use wait::eventually;

#[path = "support/runtime.rs"]
mod runtime;
use runtime::cpu as rt;

/// A stage that adds `tag` to `x * 16` (stage k leaves its tag in bits 4k..4k+4 of the
/// reply, read back by [`tags`]).
fn tagging(k: usize, tag: u64) -> KernelSpec<u64, u64> {
    KernelSpec::from_fn(format!("tag{k}"), move |x: u64| x * 16 + tag)
}

/// A chain of three [`tagging`] stages, each with tag 1, in rings of 64 slots.
fn three(rt: &Runtime) -> Pipeline<u64, u64> {
    rt.launch(
        PipelineSpec::new("three", tagging(0, 1).capacity(64))
            .then(tagging(1, 1).capacity(64))
            .then(tagging(2, 1).capacity(64)),
    )
    .expect("launch")
}

/// The request a reply of [`three`] answers, and each stage's tag, head first.
fn tags(reply: u64) -> (u64, [u64; 3]) {
    (
        reply >> 12,
        [(reply >> 8) & 15, (reply >> 4) & 15, reply & 15],
    )
}

/// Streams `0..n` through `p` (a producer thread sending, this thread receiving) and
/// reloads stage `k` with tag 2 from a third thread once a quarter of the replies came
/// back. Returns stage k's tag of every reply, in order.
fn stream_across_a_reload(p: &Pipeline<u64, u64>, k: usize, n: u64) -> Vec<u64> {
    let received = Arc::new(AtomicU64::new(0));
    let producer = {
        let p = p.kernel().clone();
        std::thread::spawn(move || {
            for x in 0..n {
                send(&p, x).expect("send");
            }
        })
    };
    let reloader = {
        let (p, received) = (p.clone(), received.clone());
        std::thread::spawn(move || {
            eventually("a quarter of the replies", || {
                received.load(Relaxed) >= n / 4
            });
            p.reload_stage_blocking(k, tagging(k, 2).capacity(64))
        })
    };
    let mut seen = Vec::with_capacity(n as usize);
    for x in 0..n {
        let (req, t) = tags(recv(p).expect("recv"));
        assert_eq!(req, x, "reply {x} answers request {req}");
        for (j, tag) in t.iter().enumerate() {
            if j != k {
                assert_eq!(*tag, 1, "reply {x}: stage {j} was not reloaded");
            }
        }
        seen.push(t[k]);
        received.store(x + 1, Relaxed);
    }
    producer.join().expect("producer");
    reloader.join().expect("reloader").expect("reload");
    seen
}

/// Each stage in turn (the head, whose command the host's lifecycle writes, a middle
/// one, the last one, which writes the host's replies): reloaded under load from a
/// producer, nothing lost or answered twice, the old handler answers a prefix and the new
/// one the rest, and a request sent after the reload returned is the new handler's.
#[test]
fn each_stage_reloads_under_load_and_every_request_is_answered_once_in_order() {
    let rt = rt();
    for k in 0..3 {
        let p = three(&rt);
        let seen = stream_across_a_reload(&p, k, 20_000);
        let switch = seen.iter().position(|&t| t == 2).unwrap_or(seen.len());
        assert!(
            seen[..switch].iter().all(|&t| t == 1) && seen[switch..].iter().all(|&t| t == 2),
            "stage {k}: a reply of the old handler after one of the new"
        );
        assert!(
            switch >= 5_000,
            "stage {k}: reloaded at {switch}, before it was asked"
        );
        let (_, t) = tags(p.call_blocking(7).expect("call after the reload"));
        assert_eq!(
            t[k], 2,
            "stage {k}: the reload returned, the old handler answers"
        );
        let r = p.stage_relaunches();
        assert_eq!((r[k].reloads, r[k].generation), (1, 2), "stage {k}: {r:?}");
        for (j, r) in r.iter().enumerate().filter(|(j, _)| *j != k) {
            assert_eq!((r.reloads, r.generation), (0, 1), "stage {j}");
        }
        if k == 0 {
            // The head stage's relaunches are the head kernel's too.
            assert_eq!(p.relaunches().reloads, 1);
        }
        p.shutdown_blocking().expect("shutdown");
        let t = p.stage_telemetry().expect("telemetry");
        assert!(
            t.iter().all(|t| t.messages_out == 20_001),
            "stage {k}: {t:?}"
        );
        assert!(p
            .stage_states()
            .iter()
            .all(|s| *s == KernelState::Terminated { code: 0 }));
    }
}

/// The first stage's command is the host's: a paused chain's head comes back paused
/// after its reload, serves nothing until resumed, then answers with the new handler.
#[test]
fn a_paused_head_stays_paused_across_its_reload() {
    let rt = rt();
    let p = three(&rt);
    assert_eq!(p.call_blocking(1).expect("call"), (1 << 12) | 0x111);
    p.pause();
    eventually("paused", || p.state() == KernelState::Paused);
    send(&p, 5).expect("queued while paused");
    p.reload_stage_blocking(0, tagging(0, 2).capacity(64))
        .expect("reload while paused");
    eventually("paused again", || p.state() == KernelState::Paused);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(p.state(), KernelState::Paused);
    assert_eq!(p.stage_telemetry().expect("telemetry")[0].messages_out, 1);
    p.resume();
    assert_eq!(recv(&p).expect("recv"), (5 << 12) | 0x211);
    p.shutdown_blocking().expect("shutdown");
}

/// What a stage's reload cannot be is refused before anything stops, and the chain
/// serves on with the old handler.
#[test]
fn what_a_stage_reload_cannot_be_is_refused_and_the_chain_serves_on() {
    let rt = rt();
    let p = three(&rt);
    let serves = |p: &Pipeline<u64, u64>| {
        assert_eq!(p.call_blocking(3).expect("call"), (3 << 12) | 0x111);
    };
    match p.reload_stage_blocking(3, tagging(3, 2).capacity(64)) {
        Err(Error::InvalidArgument { name, value, .. }) => {
            assert_eq!((name, value.as_str()), ("pipeline stage", "3"))
        }
        other => panic!("a stage beyond the chain: {other:?}"),
    }
    let mismatch = |r: Result<(), Error>| match r {
        Err(Error::ReloadMismatch { kernel, field, .. }) => (kernel, field),
        other => panic!("expected a mismatch, got {other:?}"),
    };
    let f = |x: u32| x;
    assert_eq!(
        mismatch(p.reload_stage_blocking(1, KernelSpec::from_fn("u32", f).capacity(64))),
        ("three.1".to_owned(), "request type")
    );
    let g = |x: u64| x as u32;
    assert_eq!(
        mismatch(p.reload_stage_blocking(1, KernelSpec::from_fn("narrow", g).capacity(64))),
        ("three.1".to_owned(), "reply type")
    );
    assert_eq!(
        mismatch(p.reload_stage_blocking(2, tagging(2, 2))).1,
        "capacity"
    );
    assert_eq!(
        mismatch(p.reload_stage_blocking(2, tagging(2, 2).capacity(64).batch_size(2))).1,
        "batch_size"
    );
    // The built-in echo's message type is not a closure's: the stage feeding it writes
    // the running one into every request.
    assert_eq!(
        mismatch(p.reload_stage_blocking(1, KernelSpec::<u64, u64>::echo().capacity(64))).1,
        "message type"
    );
    // The first stage's watchdog watches every stage: a reload's idle park must fit it,
    // as at the launch (a 1 s park under a 100 ms watchdog would read as a hang).
    let long_park = |spec: KernelSpec<u64, u64>| {
        spec.idle(IdleStrategy::Backoff {
            spins: 1,
            yields: 1,
            max_park: Duration::from_secs(1),
        })
    };
    let watched = rt
        .launch(
            PipelineSpec::new(
                "watched",
                tagging(0, 1).watchdog(Duration::from_millis(100)),
            )
            .then(tagging(1, 1)),
        )
        .expect("launch");
    match watched.reload_stage_blocking(1, long_park(tagging(1, 2))) {
        Err(Error::InvalidArgument { name, .. }) => assert_eq!(name, "watchdog"),
        other => panic!("a park longer than the watchdog allows: {other:?}"),
    }
    assert_eq!(watched.call_blocking(1).expect("call"), 0x111);
    watched.shutdown_blocking().expect("shutdown");
    let lone = rt
        .launch(tagging(0, 1).watchdog(Duration::from_millis(100)))
        .expect("launch");
    match lone.reload_blocking(long_park(tagging(0, 2))) {
        Err(Error::InvalidArgument { name, .. }) => assert_eq!(name, "watchdog"),
        other => panic!("a lone kernel's reload, the same: {other:?}"),
    }
    lone.shutdown_blocking().expect("shutdown");
    // A chain of several stages is not reloaded as one kernel.
    match p.kernel().reload_blocking(tagging(0, 2).capacity(64)) {
        Err(Error::Pipeline { reason, .. }) => assert!(reason.contains("reload_stage"), "{reason}"),
        other => panic!("a reload of the whole chain: {other:?}"),
    }
    serves(&p);
    assert!(p.stage_relaunches().iter().all(|r| r.reloads == 0));
    p.shutdown_blocking().expect("shutdown");
    // Once the chain stopped, there is nothing to reload.
    assert!(p
        .reload_stage_blocking(1, tagging(1, 2).capacity(64))
        .is_err());
}

/// A chain of one stage is its head kernel: its reload is the kernel's.
#[test]
fn a_chain_of_one_stage_reloads_as_its_kernel() {
    let rt = rt();
    let p = rt
        .launch(PipelineSpec::new("one", tagging(0, 1)))
        .expect("launch");
    assert_eq!(p.call_blocking(2).expect("call"), 0x21);
    p.reload_stage_blocking(0, tagging(0, 2)).expect("reload");
    assert_eq!(p.call_blocking(2).expect("call"), 0x22);
    assert_eq!(p.relaunches().reloads, 1);
    p.shutdown_blocking().expect("shutdown");
}

/// A stage in epochs keeps its epochs after a reload, and every successor of a later
/// epoch runs the new handler.
#[test]
fn a_stage_in_epochs_hands_over_to_the_new_handler_from_then_on() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("epochs", tagging(0, 1).capacity(64))
                .then(tagging(1, 1).capacity(64).epoch(Duration::from_millis(1))),
        )
        .expect("launch");
    assert_eq!(p.call_blocking(1).expect("call"), 0x111);
    p.reload_stage_blocking(
        1,
        tagging(1, 2).capacity(64).epoch(Duration::from_millis(1)),
    )
    .expect("reload");
    let epochs = p.stage_relaunches()[1].epochs;
    eventually("more epochs after the reload", || {
        p.stage_relaunches()[1].epochs >= epochs + 3
    });
    for x in 0..200u64 {
        assert_eq!(p.call_blocking(x).expect("call"), (x << 8) | 0x12);
    }
    assert_eq!(p.stage_relaunches()[1].reloads, 1);
    p.shutdown_blocking().expect("shutdown");
}

/// A stage with a restart policy restarts into the handler it was reloaded with: after
/// the reload, a request that makes the new handler panic fails alone, and the stage's
/// successor is the new handler again.
#[test]
fn a_stage_restarts_into_the_handler_it_was_reloaded_with() {
    let rt = rt();
    let policy =
        RestartPolicy::new(5).backoff(Duration::from_micros(100), Duration::from_millis(2));
    let p = rt
        .launch(
            PipelineSpec::new("restarts", tagging(0, 1).capacity(64))
                .then(tagging(1, 1).capacity(64).restart(policy)),
        )
        .expect("launch");
    let fragile = KernelSpec::from_fn("fragile", |x: u64| {
        assert!(x != (13 << 4) | 1, "injected fault on 13");
        x * 16 + 2
    })
    .capacity(64)
    .restart(policy);
    p.reload_stage_blocking(1, fragile).expect("reload");
    match p.call_blocking(13) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("request 13: {other:?}"),
    }
    eventually("the restart", || p.stage_relaunches()[1].restarts == 1);
    assert_eq!(p.call_blocking(14).expect("call"), (14 << 8) | 0x12);
    let r = p.stage_relaunches()[1];
    assert_eq!((r.reloads, r.restarts, r.generation), (1, 1, 3));
    p.shutdown_blocking().expect("shutdown");
}

/// A reload racing a shutdown: both return (the reload done, or refused because the
/// chain is stopping), every stage stops, and every request sent is answered.
#[test]
fn a_reload_racing_a_shutdown_ends_cleanly() {
    let rt = rt();
    for round in 0..20u64 {
        let p = three(&rt);
        for x in 0..32u64 {
            send(&p, x).expect("send");
        }
        let k = (round % 3) as usize;
        let reload = {
            let p = p.clone();
            std::thread::spawn(move || p.reload_stage_blocking(k, tagging(k, 2).capacity(64)))
        };
        if round % 2 == 0 {
            std::thread::yield_now();
        }
        p.shutdown_blocking().expect("shutdown");
        match reload.join().expect("reload thread") {
            Ok(()) => {}
            Err(Error::Closed { .. } | Error::KernelTerminated { .. } | Error::Pipeline { .. }) => {
            }
            Err(e) => panic!("round {round}: {e}"),
        }
        for x in 0..32u64 {
            let (req, _) = tags(recv(&p).expect("an accepted request is answered"));
            assert_eq!(req, x);
        }
        assert!(
            p.stage_states()
                .iter()
                .all(|s| matches!(s, KernelState::Terminated { .. })),
            "round {round}: {:?}",
            p.stage_states()
        );
    }
}

/// Lets a handler block until the test opens it.
#[derive(Default)]
struct Gate {
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().expect("gate");
        while !*open {
            open = self.cv.wait(open).expect("gate");
        }
    }
    fn open(&self) {
        *self.open.lock().expect("gate") = true;
        self.cv.notify_all();
    }
}

/// A handler that blocks on `gate` for request 99 and answers `x + 1` otherwise.
fn stuck_on_99(gate: &Arc<Gate>) -> KernelSpec<u64, u64> {
    let g = gate.clone();
    KernelSpec::from_fn("stuck", move |x: u64| {
        if x == 99 {
            g.wait();
        }
        x + 1
    })
    .capacity(16)
    .watchdog(Duration::from_millis(200))
}

/// The watchdog fires while a reload waits for a stuck handler to reach its batch
/// boundary (R2): the reload fails with the verdict, and the `TERMINATE` the watchdog
/// wrote stays (the command the reload held back must not overwrite it), so the
/// detached kernel stops once its handler returns. For a lone kernel and for the first
/// stage of a chain.
#[test]
fn a_reload_that_meets_the_watchdog_leaves_its_terminate() {
    let rt = rt();
    let terminate = gyre_abi::command::TERMINATE;
    // A lone kernel.
    let gate = Arc::new(Gate::default());
    let k = rt.launch(stuck_on_99(&gate)).expect("launch");
    assert_eq!(k.call_blocking(1).expect("call"), 2);
    let stuck = {
        let k = k.clone();
        std::thread::spawn(move || k.call_blocking(99))
    };
    std::thread::sleep(Duration::from_millis(50));
    let r = k.reload_blocking(stuck_on_99(&gate));
    assert!(matches!(r, Err(Error::Unresponsive { .. })), "{r:?}");
    let cmd = k.raw_channel().region().control().command.load(Relaxed);
    assert_eq!(cmd, terminate, "the watchdog's TERMINATE was overwritten");
    gate.open();
    let _ = stuck.join().expect("caller"); // failed by the verdict, or answered at last
    eventually("the released kernel to stop", || {
        matches!(k.state(), KernelState::Terminated { .. })
    });
    // The first stage of a chain (its command held by the head's lifecycle).
    let gate = Arc::new(Gate::default());
    let p = rt
        .launch(
            PipelineSpec::new("p", stuck_on_99(&gate))
                .then(KernelSpec::<u64, u64>::echo().capacity(16)),
        )
        .expect("launch");
    assert_eq!(p.call_blocking(1).expect("call"), 2);
    let stuck = {
        let p = p.clone();
        std::thread::spawn(move || p.call_blocking(99))
    };
    std::thread::sleep(Duration::from_millis(50));
    let r = p.reload_stage_blocking(0, stuck_on_99(&gate));
    assert!(matches!(r, Err(Error::Unresponsive { .. })), "{r:?}");
    let cmd = p
        .kernel()
        .raw_channel()
        .region()
        .control()
        .command
        .load(Relaxed);
    assert_eq!(cmd, terminate, "the watchdog's TERMINATE was overwritten");
    gate.open();
    let _ = stuck.join().expect("caller"); // failed by the verdict, or answered at last
}
