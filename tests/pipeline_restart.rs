//! Restarting one stage of a running chain (`docs/pipelines.md`, "Relaunching a stage"), on
//! the CPU backend: a stage with a restart policy whose handler panics is relaunched in
//! place while the other stages run on, so the request that faulted is the only one that
//! fails; every other request is answered exactly once, in order. When the policy runs
//! out, the chain stops as after any fault.

#[path = "support/deadline.rs"]
mod deadline;

use deadline::{recv, send, stream};
use std::time::{Duration, Instant};

use gyre::{
    codes,
    pipeline::{Branch, Pipeline, PipelineSpec, Route},
    Error, KernelSpec, KernelState, RestartPolicy,
};

#[path = "support/wait.rs"]
mod wait;
use wait::eventually;

#[path = "support/runtime.rs"]
mod runtime;
use runtime::cpu as rt;

/// A policy with `n` restarts and short backoffs.
fn policy(n: u32) -> RestartPolicy {
    RestartPolicy::new(n).backoff(Duration::from_micros(100), Duration::from_millis(2))
}

/// A stage that panics on every value `bad` says, and answers `x * 2` otherwise.
fn fragile(name: &str, bad: fn(u64) -> bool) -> KernelSpec<u64, u64> {
    KernelSpec::from_fn(name, move |x: u64| {
        assert!(!bad(x), "injected fault on {x}");
        x * 2
    })
}

/// Waits until every stage of `p` reached a final state.
fn until_every_stage_stopped(p: &Pipeline<u64, u64>) {
    eventually("the chain to stop", || {
        p.stage_states().iter().all(|s| {
            matches!(
                s,
                KernelState::Terminated { .. } | KernelState::Faulted { .. }
            )
        })
    });
}

fn is_panic(r: &Result<u64, Error>) -> bool {
    matches!(r, Err(Error::Handler { status, .. }) if *status == codes::HANDLER_PANIC)
}

#[test]
fn a_restarted_stage_fails_only_the_request_that_faulted() {
    const N: u64 = 3000;
    let bad = |x: u64| x % 100 == 37;
    let p = rt()
        .launch(
            PipelineSpec::new("restarts", KernelSpec::<u64, u64>::echo())
                .then(fragile("fragile", bad).restart(policy(100)))
                .then(KernelSpec::from_fn("inc", |x: u64| x + 1)),
        )
        .expect("launch");
    let got = stream(&p, N);
    for (x, r) in (0..N).zip(&got) {
        if bad(x) {
            assert!(is_panic(r), "request {x}: {r:?}");
        } else {
            assert_eq!(r.as_ref().ok(), Some(&(x * 2 + 1)), "request {x}");
        }
    }
    let faults = (0..N).filter(|&x| bad(x)).count() as u64;
    // The last fault's restart needs no request to happen.
    eventually("the last restart", || p.stage_restarts()[1] == faults);
    assert_eq!(p.stage_restarts(), [0, faults, 0]);
    assert_eq!(p.state(), KernelState::Active);
    assert_eq!(p.call_blocking(5).expect("after the restarts"), 11);
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
    // Every stage saw every request once: the restarted stage's successors continued
    // where each predecessor stopped (its errors are the faults), and the last stage
    // counts the errors it passed on as messages, not as its own errors.
    let t = p.stage_telemetry().expect("telemetry");
    let out: Vec<u64> = t.iter().map(|t| t.messages_out).collect();
    assert_eq!(out, [N + 1, N + 1, N + 1]);
    assert_eq!(t[1].errors, faults);
    assert_eq!(t[2].errors, 0);
}

#[test]
fn concurrent_callers_lose_nothing_while_stages_restart() {
    const PER: u64 = 400;
    let p = rt()
        .launch(
            PipelineSpec::new(
                "callers",
                fragile("head", |x| x % 97 == 13).restart(policy(100)),
            )
            .then(fragile("tail", |x| x % 89 == 46).restart(policy(100))),
        )
        .expect("launch");
    let callers: Vec<_> = (0..4u64)
        .map(|t| {
            let k = p.kernel().clone();
            std::thread::spawn(move || {
                (0..PER)
                    .map(|i| {
                        let x = t * PER + i;
                        (x, k.call_blocking(x))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let (mut head_faults, mut tail_faults) = (0u64, 0u64);
    for c in callers {
        for (x, r) in c.join().expect("caller") {
            if x % 97 == 13 {
                head_faults += 1;
                assert!(is_panic(&r), "request {x}: {r:?}");
            } else if (x * 2) % 89 == 46 {
                tail_faults += 1;
                assert!(is_panic(&r), "request {x}: {r:?}");
            } else {
                assert_eq!(r.ok(), Some(x * 4), "request {x}");
            }
        }
    }
    assert!(head_faults > 0 && tail_faults > 0);
    eventually("the last restarts", || {
        p.stage_restarts() == [head_faults, tail_faults]
    });
    // The head stage's restarts are the chain's, as a lone kernel's would be.
    assert_eq!(p.relaunches().restarts, head_faults);
    p.shutdown_blocking().expect("shutdown");
}

#[test]
fn when_restarts_run_out_the_chain_stops_as_after_any_fault() {
    let p = rt()
        .launch(
            PipelineSpec::new("spent", KernelSpec::<u64, u64>::echo())
                .then(fragile("fragile", |x| x >= 1000).restart(policy(2)))
                .then(KernelSpec::<u64, u64>::echo()),
        )
        .expect("launch");
    // Two faults are restarted; the requests around them are answered.
    for x in [1, 1000, 2, 1001, 3] {
        let r = p.call_blocking(x);
        if x >= 1000 {
            assert!(is_panic(&r), "request {x}: {r:?}");
        } else {
            assert_eq!(r.expect("answered"), x * 2);
        }
    }
    eventually("two restarts", || p.stage_restarts() == [0, 2, 0]);
    // The third is final: the chain stops, and requests queued behind it fail.
    for x in [1002, 4, 5] {
        send(&p, x).expect("send");
    }
    assert!(is_panic(&recv(&p)));
    for _ in 0..2 {
        match recv(&p) {
            Err(Error::KernelFaulted { code, .. }) => assert_eq!(code, codes::HANDLER_PANIC),
            other => panic!("{other:?}"),
        }
    }
    until_every_stage_stopped(&p);
    assert_eq!(
        p.stage_states(),
        [
            KernelState::Terminated {
                code: codes::STAGE_STOPPED
            },
            KernelState::Faulted {
                code: codes::HANDLER_PANIC
            },
            KernelState::Terminated { code: 0 },
        ]
    );
    assert_eq!(p.stage_restarts(), [0, 2, 0]);
    assert!(matches!(p.call_blocking(1), Err(Error::Closed { .. })));
    assert!(matches!(
        p.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
}

/// A long backoff: the chain holds its requests (the watchdog does not call it
/// unresponsive), and a shutdown meanwhile waits for the successor, which drains.
#[test]
fn a_shutdown_during_a_backoff_is_drained_by_the_successor() {
    let backoff = Duration::from_millis(300);
    let p = rt()
        .launch(
            PipelineSpec::new(
                "backoff",
                KernelSpec::<u64, u64>::echo().watchdog(Duration::from_millis(100)),
            )
            .then(
                fragile("fragile", |x| x == 0)
                    .restart(RestartPolicy::new(1).backoff(backoff, backoff)),
            ),
        )
        .expect("launch");
    let started = Instant::now();
    for x in 0..10u64 {
        send(&p, x).expect("send");
    }
    let receiver = {
        let k = p.kernel().clone();
        std::thread::spawn(move || (0..10).map(|_| recv(&k)).collect::<Vec<_>>())
    };
    eventually("the fault", || {
        matches!(p.stage_states()[1], KernelState::Relaunching)
    });
    p.shutdown_blocking().expect("shutdown");
    assert!(started.elapsed() >= backoff, "the successor drained it");
    let got = receiver.join().expect("receiver");
    assert!(is_panic(&got[0]), "{:?}", got[0]);
    for (x, r) in (1..10u64).zip(&got[1..]) {
        assert_eq!(r.as_ref().ok(), Some(&(x * 2)), "request {x}");
    }
    assert_eq!(p.stage_restarts(), [0, 1]);
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

#[test]
fn a_branch_of_a_fan_out_restarts_and_the_join_keeps_request_order() {
    const N: u64 = 2000;
    let bad = |x: u64| x % 61 == 7;
    let branch = |b: u64| {
        let s = KernelSpec::from_fn(format!("b{b}"), move |x: u64| {
            assert!(!(b == 1 && bad(x)), "injected fault on {x}");
            x * 2
        });
        Branch::new(if b == 1 { s.restart(policy(100)) } else { s })
    };
    let p = rt()
        .launch(
            PipelineSpec::new("fan", KernelSpec::<u64, u64>::echo())
                .fan_out(Route::RoundRobin, (0..2).map(branch))
                .then(KernelSpec::from_fn("join", |x: u64| x + 1)),
        )
        .expect("launch");
    let got = stream(&p, N);
    let mut faults = 0;
    for (x, r) in (0..N).zip(&got) {
        // Round-robin: request x goes to branch x % 2.
        if x % 2 == 1 && bad(x) {
            faults += 1;
            assert!(is_panic(r), "request {x}: {r:?}");
        } else {
            assert_eq!(r.as_ref().ok(), Some(&(x * 2 + 1)), "request {x}");
        }
    }
    assert!(faults > 0);
    eventually("the last restart", || p.stage_restarts()[2] == faults);
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// A pipeline of one stage is one kernel: its lifecycle restarts it, as any kernel's.
#[test]
fn a_lone_stage_restarts_as_a_kernel() {
    let p = rt()
        .launch(PipelineSpec::new(
            "lone",
            fragile("fragile", |x| x == 3).restart(policy(5)),
        ))
        .expect("launch");
    assert!(is_panic(&p.call_blocking(3)));
    assert_eq!(p.call_blocking(4).expect("restarted"), 8);
    // Counted once the successor is installed, which may be after it answered.
    eventually("the restart", || p.stage_restarts() == [1]);
    p.shutdown_blocking().expect("shutdown");
}

/// Each stage's export line counts its own restarts (what `gyre top` shows); the head
/// stage's are the chain's.
#[test]
fn exported_lines_count_each_stages_restarts() {
    let dir = std::env::temp_dir().join(format!(
        "gyre-pipeline-restart-export-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let p = rt()
        .launch(
            PipelineSpec::new(
                "exported",
                fragile("head", |x| x == 1)
                    .restart(policy(5))
                    .export_telemetry_to(dir.join("exported"))
                    .export_interval(Duration::from_millis(1)),
            )
            .then(fragile("tail", |x| x == 4 || x == 6).restart(policy(5))),
        )
        .expect("launch");
    for x in 1..=3u64 {
        // 1 faults in the head; 2 * 2 and 3 * 2 in the tail.
        assert!(is_panic(&p.call_blocking(x)), "request {x}");
    }
    let read = |f: &str| {
        gyre::telemetry::TelemetryReader::open(&dir.join(f))
            .expect("export file")
            .snapshot()
            .expect("snapshot")
            .lifecycle
    };
    eventually("the exported restarts", || {
        (read("exported").restarts, read("exported.1").restarts) == (1, 2)
    });
    let (head, tail) = (read("exported"), read("exported.1"));
    assert_eq!((head.generation, tail.generation), (2, 3));
    assert!(tail.last_restart_unix_ms > 0 && head.last_restart_unix_ms > 0);
    assert_eq!(p.call_blocking(5).expect("after the restarts"), 20);
    p.shutdown_blocking().expect("shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `x + 1`, as a branch.
fn inc(name: &str) -> Branch<u64, u64> {
    Branch::new(KernelSpec::from_fn(name.to_owned(), |x: u64| x + 1))
}

/// Every outcome of `0..` in `got`: `HANDLER_PANIC` where `bad` says, else `f(x)`.
/// Returns the faults.
fn check(got: &[Result<u64, Error>], bad: fn(u64) -> bool, f: impl Fn(u64) -> u64) -> u64 {
    let mut faults = 0;
    for (x, r) in (0..).zip(got) {
        if bad(x) {
            faults += 1;
            assert!(is_panic(r), "request {x}: {r:?}");
        } else {
            assert_eq!(r.as_ref().ok(), Some(&f(x)), "request {x}");
        }
    }
    faults
}

/// The stage that fans out restarts (its K0 reads the branches' counters again); the
/// join after the branches takes every request in order.
#[test]
fn a_fanning_stage_restarts_and_its_join_keeps_request_order() {
    let bad = |x: u64| x % 53 == 11;
    let p = rt()
        .launch(
            PipelineSpec::new("fanning", KernelSpec::<u64, u64>::echo())
                .then(fragile("fan", bad).restart(policy(1000)))
                .fan_out(Route::RoundRobin, [inc("a"), inc("b"), inc("c")])
                .then(KernelSpec::from_fn("join", |x: u64| x + 1000)),
        )
        .expect("launch");
    let faults = check(&stream(&p, 3000), bad, |x| x * 2 + 1 + 1000);
    eventually("the last restart", || p.stage_restarts()[1] == faults);
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// A head that fans out by key to the host (it answers with its own indices) restarts;
/// so does a join.
#[test]
fn a_fanning_head_and_a_join_restart() {
    let bad = |x: u64| x % 41 == 5;
    let p = rt()
        .launch(
            PipelineSpec::new("head-fan", fragile("fan", bad).restart(policy(1000)))
                .fan_out(Route::key_at(0), [inc("a"), inc("b")]),
        )
        .expect("launch");
    let faults = check(&stream(&p, 3000), bad, |x| x * 2 + 1);
    eventually("the head's restarts", || p.stage_restarts()[0] == faults);
    p.shutdown_blocking().expect("shutdown");

    let bad = |x: u64| x % 67 == 3;
    let echo = || Branch::new(KernelSpec::<u64, u64>::echo());
    let p = rt()
        .launch(
            PipelineSpec::new("join", KernelSpec::<u64, u64>::echo())
                .fan_out(Route::RoundRobin, [echo(), echo()])
                .then(fragile("join", bad).restart(policy(1000))),
        )
        .expect("launch");
    let faults = check(&stream(&p, 3000), bad, |x| x * 2);
    eventually("the join's restarts", || p.stage_restarts()[3] == faults);
    p.shutdown_blocking().expect("shutdown");
}

/// A stage after it faults for good while a stage waits out its backoff: the waiting
/// stage is not restarted (its successor could pass nothing on); the chain stops at
/// once, as after any fault, not after the backoff.
#[test]
fn a_stage_feeding_a_stopped_stage_is_not_restarted() {
    let backoff = Duration::from_secs(5);
    let p = rt()
        .launch(
            PipelineSpec::new("feeds-stopped", KernelSpec::<u64, u64>::echo())
                .then(
                    fragile("up", |x| x == 0)
                        .restart(RestartPolicy::new(1).backoff(backoff, backoff)),
                )
                .then(KernelSpec::from_fn("down", |x: u64| {
                    assert!(x != 2, "injected final fault");
                    x
                })),
        )
        .expect("launch");
    // 1 reaches "down" as 2 and faults it for good; 0 faults "up", which then waits out
    // its backoff (in either order).
    send(&p, 1).expect("send");
    send(&p, 0).expect("send");
    assert!(is_panic(&recv(&p)), "request 1: down's own fault");
    match recv(&p) {
        Err(Error::KernelFaulted { code, .. }) => assert_eq!(code, codes::HANDLER_PANIC),
        other => panic!("request 0: {other:?}"),
    }
    until_every_stage_stopped(&p);
    assert_eq!(p.stage_restarts(), [0, 0, 0]);
    assert_eq!(
        p.stage_states(),
        [
            KernelState::Terminated {
                code: codes::STAGE_STOPPED
            },
            KernelState::Terminated {
                code: codes::STAGE_STOPPED
            },
            KernelState::Faulted {
                code: codes::HANDLER_PANIC
            },
        ]
    );
    assert!(matches!(
        p.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
}

/// Stages in epochs (`KernelSpec::epoch`: what a device with a kernel time limit forces)
/// are relaunched in place at the end of each, under load, while
/// another stage restarts after faults: every request is answered once, in order, by
/// whichever launch took it.
#[test]
fn stages_in_epochs_hand_over_under_load_and_lose_nothing() {
    const N: u64 = 4000;
    let bad = |x: u64| x % 500 == 99;
    let ms = Duration::from_millis(1);
    let p = rt()
        .launch(
            PipelineSpec::new("epochs", KernelSpec::<u64, u64>::echo().epoch(ms))
                .then(fragile("fragile", bad).restart(policy(100)).epoch(ms))
                .then(KernelSpec::from_fn("inc", |x: u64| x + 1).epoch(ms)),
        )
        .expect("launch");
    let got = stream(&p, N);
    let faults = check(&got, bad, |x| x * 2 + 1);
    assert!(faults > 0);
    eventually("the last restart", || p.stage_restarts()[1] == faults);
    p.shutdown_blocking().expect("shutdown");
    // The faulting stage's epochs are few (its faults come sooner than its epoch ends);
    // the others' many. Every launch is an epoch's or a restart's.
    let r = p.stage_relaunches();
    assert!(r[0].epochs > 0 && r[2].epochs > 0, "{r:?}");
    assert_eq!(r[0].restarts + r[2].restarts, 0);
    for s in &r {
        assert_eq!(u64::from(s.generation), 1 + s.epochs + s.restarts, "{r:?}");
    }
    // The head stage's relaunches are the chain's.
    assert_eq!(p.relaunches().epochs, r[0].epochs);
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
    let t = p.stage_telemetry().expect("telemetry");
    assert!(t.iter().all(|t| t.messages_out == N), "{t:?}");
}

/// Epochs are not restarts: a stage with a policy of one restart hands over at the end of
/// many epochs, and its one fault is still restarted (a second one is final).
#[test]
fn epochs_do_not_spend_a_stages_restarts() {
    let p = rt()
        .launch(
            PipelineSpec::new("budget", KernelSpec::<u64, u64>::echo()).then(
                fragile("fragile", |x| x >= 1000)
                    .restart(policy(1))
                    .epoch(Duration::from_millis(1)),
            ),
        )
        .expect("launch");
    eventually("a few epochs", || p.stage_relaunches()[1].epochs >= 5);
    assert!(is_panic(&p.call_blocking(1000)));
    // Answered by the restarted stage: the epochs spent none of its one restart.
    assert_eq!(p.call_blocking(3).expect("restarted"), 6);
    assert_eq!(p.stage_restarts(), [0, 1]);
    assert!(is_panic(&p.call_blocking(1001)));
    until_every_stage_stopped(&p);
    assert_eq!(
        p.stage_states()[1],
        KernelState::Faulted {
            code: codes::HANDLER_PANIC
        }
    );
}

/// `reset_after`: a stage that ran the window since its last restart without a fault
/// has its count start over, epochs or not, alone (a chain of one stage) or in a chain:
/// one supervisor (`src/lifecycle/supervisor.rs`) for both.
#[test]
fn a_healthy_window_starts_the_restart_count_over_through_epochs() {
    let spec = || {
        fragile("fragile", |x| x >= 1000)
            .restart(policy(1).reset_after(Duration::from_millis(20)))
            .epoch(Duration::from_millis(1))
    };
    let alone = rt()
        .launch(PipelineSpec::new("alone", spec()))
        .expect("launch");
    let chained = rt()
        .launch(PipelineSpec::new("chained", KernelSpec::<u64, u64>::echo()).then(spec()))
        .expect("launch");
    for (p, k) in [(&alone, 0), (&chained, 1)] {
        for fault in 0..3u64 {
            assert!(
                is_panic(&p.call_blocking(1000 + fault)),
                "stage {k}, fault {fault}"
            );
            eventually("the restart", || p.stage_restarts()[k] == fault + 1);
            // More than the window, with epochs ending all along.
            std::thread::sleep(Duration::from_millis(60));
            assert_eq!(p.call_blocking(3).expect("restarted"), 6, "stage {k}");
        }
        assert!(p.stage_relaunches()[k].epochs > 0);
        p.shutdown_blocking().expect("shutdown");
    }
}
