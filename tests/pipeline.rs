//! Pipelines on the CPU backend (`docs/pipelines.md`): replies in order through every
//! stage, error replies passed on, end-to-end back-pressure, a fault in any stage failing
//! exactly what the chain did not answer, shutdown stage by stage, per-stage telemetry,
//! and the refusals; and the cases every backend runs (`tests/pipeline_cases/`).

#[path = "support/deadline.rs"]
mod deadline;
mod pipeline_cases;

use deadline::{recv, send};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gyre::{
    codes,
    pipeline::{Pipeline, PipelineSpec},
    Backend, Error, KernelSpec, KernelState, Runtime, TransferStrategy,
};

#[path = "support/wait.rs"]
mod wait;
use wait::eventually;

#[path = "support/runtime.rs"]
mod runtime;
use runtime::cpu as rt;

/// Three stages of three types: u32 -> u64 -> [u64; 2] -> u64.
fn three(rt: &Runtime, capacity: usize) -> Pipeline<u32, u64> {
    rt.launch(
        PipelineSpec::new(
            "three",
            KernelSpec::from_fn("widen", |x: u32| u64::from(x) * 3).capacity(capacity),
        )
        .then(KernelSpec::from_fn("pair", |x: u64| [x, x + 1]).capacity(capacity))
        .then(KernelSpec::from_fn("sum", |p: [u64; 2]| p[0] + p[1]).capacity(capacity)),
    )
    .expect("launch")
}

fn expect3(x: u32) -> u64 {
    2 * (u64::from(x) * 3) + 1
}

#[test]
fn every_stage_runs_in_order_and_the_host_sees_one_kernel() {
    let rt = rt();
    let p = three(&rt, 64);
    assert_eq!(p.stages(), 3);
    assert_eq!(p.stage_names(), ["widen", "pair", "sum"]);
    assert_eq!(p.name(), "three");
    // The host writes the head's request ring: inline. The inner rings, which only the
    // stages touch, are placed apart (the path a GPU chain's take to device memory).
    let rings = p.stage_request_rings();
    assert!(rings[0].is_none(), "{rings:?}");
    assert!(
        rings[1].is_some() && rings[2].is_some() && rings[1] != rings[2],
        "{rings:?}"
    );
    for x in 0..100u32 {
        assert_eq!(p.call_blocking(x).expect("call"), expect3(x));
    }
    // send / recv in order, more than the capacity through the chain.
    let producer = {
        let p = p.kernel().clone();
        std::thread::spawn(move || {
            for x in 0..1000u32 {
                send(&p, x).expect("send");
            }
        })
    };
    for x in 0..1000u32 {
        assert_eq!(recv(&p).expect("recv"), expect3(x));
    }
    producer.join().expect("producer");
    // Concurrent async calls.
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio");
    let got = tokio.block_on(async {
        let calls: Vec<_> = (0..200u32).map(|x| p.call(x)).collect();
        let mut out = Vec::new();
        for c in calls {
            out.push(c.await.expect("async call"));
        }
        out
    });
    assert_eq!(got, (0..200u32).map(expect3).collect::<Vec<_>>());
    assert_eq!(p.state(), KernelState::Active);
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    assert!(t.iter().all(|t| t.messages_out == 1300), "{t:?}");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

#[test]
fn an_error_reply_is_passed_on_without_running_later_handlers() {
    let rt = rt();
    let later = Arc::new(AtomicU64::new(0));
    let seen = later.clone();
    let p = rt
        .launch(
            PipelineSpec::new(
                "errors",
                KernelSpec::try_from_fn("odd-rejected", |x: u32| {
                    if x % 2 == 1 {
                        Err(codes::USER_BASE + x)
                    } else {
                        Ok(x)
                    }
                }),
            )
            .then(KernelSpec::from_fn("count", move |x: u32| {
                seen.fetch_add(1, Ordering::Relaxed);
                x + 1
            })),
        )
        .expect("launch");
    for x in 0..20u32 {
        match p.call_blocking(x) {
            Ok(v) => assert_eq!((x % 2, v), (0, x + 1)),
            Err(Error::Handler { status, kernel, .. }) => {
                assert_eq!((x % 2, status), (1, codes::USER_BASE + x));
                assert_eq!(kernel, "errors");
            }
            Err(e) => panic!("{x}: {e}"),
        }
    }
    assert_eq!(
        later.load(Ordering::Relaxed),
        10,
        "the later handler ran only on successes"
    );
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    // Errors are counted where they were made, not where they were passed on.
    assert_eq!((t[0].errors, t[1].errors), (10, 0));
    assert_eq!((t[0].messages_out, t[1].messages_out), (20, 20));
}

#[test]
fn a_slow_last_stage_holds_back_the_producers_and_nothing_is_lost() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("slow", KernelSpec::<u64, u64>::echo().capacity(8)).then(
                KernelSpec::from_fn("slow", |x: u64| {
                    std::thread::sleep(Duration::from_micros(200));
                    x
                })
                .capacity(8),
            ),
        )
        .expect("launch");
    let producer = {
        let p = p.kernel().clone();
        std::thread::spawn(move || {
            let mut full = 0u32;
            for x in 0..400u64 {
                loop {
                    match p.try_send(x) {
                        Ok(()) => break,
                        Err(gyre::TrySendError::Full(_)) => {
                            full += 1;
                            std::thread::yield_now();
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
            full
        })
    };
    for x in 0..400u64 {
        assert_eq!(recv(&p).expect("recv"), x);
    }
    let full = producer.join().expect("producer");
    assert!(
        full > 0,
        "a ring of 8 in front of a slow stage must have filled up"
    );
    p.shutdown_blocking().expect("shutdown");
}

#[test]
fn a_fault_in_a_middle_stage_fails_exactly_what_the_chain_did_not_answer() {
    let rt = rt();
    const BAD: u32 = 50;
    let p = rt
        .launch(
            PipelineSpec::new("faulty", KernelSpec::<u32, u32>::echo().capacity(16))
                .then(
                    KernelSpec::from_fn("panics", |x: u32| {
                        assert_ne!(x, BAD, "injected fault");
                        x
                    })
                    .capacity(16),
                )
                .then(KernelSpec::from_fn("inc", |x: u32| x + 1).capacity(16)),
        )
        .expect("launch");
    // Fill the chain: sends, then read everything.
    let mut sent = 0u32;
    let mut refused = None;
    for x in 0..200u32 {
        match send(&p, x) {
            Ok(()) => sent += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        if x < BAD {
            // Keep the chain from filling before BAD is reached.
            assert_eq!(recv(&p).expect("before the fault"), x + 1);
        }
    }
    let mut outcomes = Vec::new();
    loop {
        match recv(&p) {
            Ok(v) => outcomes.push(Ok(v)),
            Err(Error::Closed { .. }) => break,
            Err(e) => {
                let done = !matches!(e, Error::Handler { .. });
                outcomes.push(Err(e));
                if done {
                    break;
                }
            }
        }
    }
    // The panicking request's own reply says so; nothing after it was answered.
    match &outcomes[0] {
        Err(Error::Handler { status, .. }) => assert_eq!(*status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    assert!(
        outcomes[1..].iter().all(|o| match o {
            Err(Error::KernelFaulted { code, kernel, .. }) =>
                *code == codes::HANDLER_PANIC && kernel == "faulty",
            _ => false,
        }),
        "{outcomes:?}"
    );
    if let Some(e) = refused {
        assert!(
            matches!(e, Error::KernelFaulted { .. } | Error::Closed { .. }),
            "{e}"
        );
    }
    assert!(sent > BAD);
    eventually("the chain to stop", || {
        p.stage_states().iter().all(|s| {
            matches!(
                s,
                KernelState::Terminated { .. } | KernelState::Faulted { .. }
            )
        })
    });
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
    assert_eq!(
        p.state(),
        KernelState::Faulted {
            code: codes::HANDLER_PANIC
        }
    );
    // Refused now, as by a single kernel that faulted (nothing is sent).
    assert!(matches!(p.call_blocking(1), Err(Error::Closed { .. })));
    assert!(matches!(
        p.shutdown_blocking(),
        Err(Error::KernelFaulted { .. })
    ));
}

#[test]
fn a_fault_in_the_last_stage_stops_every_stage_before_it() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("last", KernelSpec::<u32, u32>::echo())
                .then(KernelSpec::<u32, u32>::echo())
                .then(KernelSpec::from_fn("panics", |x: u32| -> u32 {
                    panic!("injected fault on {x}")
                })),
        )
        .expect("launch");
    match p.call_blocking(7) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    eventually("every stage to stop", || {
        p.stage_states()
            .iter()
            .all(|s| !matches!(s, KernelState::Active))
    });
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
        p.call_blocking(1),
        Err(Error::KernelFaulted { .. } | Error::Closed { .. })
    ));
}

#[test]
fn shutdown_drains_stage_by_stage() {
    let rt = rt();
    let p = three(&rt, 256);
    for x in 0..200u32 {
        send(&p, x).expect("send");
    }
    p.shutdown_blocking().expect("shutdown");
    for x in 0..200u32 {
        assert_eq!(recv(&p).expect("drained reply"), expect3(x));
    }
    assert!(matches!(
        recv(&p),
        Err(Error::KernelTerminated { .. } | Error::Closed { .. })
    ));
    assert!(matches!(
        p.call_blocking(1),
        Err(Error::KernelTerminated { .. } | Error::Closed { .. })
    ));
}

#[test]
fn dropping_the_last_handle_ends_every_stage() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("d", KernelSpec::<u32, u32>::echo())
                .then(KernelSpec::<u32, u32>::echo())
                .then(KernelSpec::<u32, u32>::echo()),
        )
        .expect("launch");
    assert_eq!(p.call_blocking(1).expect("call"), 1);
    // The stage threads are named gyre-cpu-d.<k>.
    let stage_threads = || -> Option<usize> {
        let out = std::process::Command::new("ps")
            .args(["-T", "-p", &std::process::id().to_string(), "-o", "comm="])
            .output()
            .ok()?;
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        Some(
            s.lines()
                .filter(|l| l.trim().starts_with("gyre-cpu-d."))
                .count(),
        )
    };
    let Some(n) = stage_threads() else {
        eprintln!("skipped: no `ps` to count threads with");
        return;
    };
    assert_eq!(n, 3, "one thread per stage while it runs");
    drop(p);
    eventually("every stage thread to end", || stage_threads() == Some(0));
}

#[test]
fn mixed_handler_kinds_run_on_the_cpu_backend() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("mixed", KernelSpec::<[f32; 4], [f32; 4]>::echo()).then(
                KernelSpec::from_fn("sum", |v: [f32; 4]| v.iter().sum::<f32>()),
            ),
        )
        .expect("launch");
    assert_eq!(p.call_blocking([1.0, 2.0, 3.0, 4.0]).expect("call"), 10.0);
    assert_eq!(p.backend(), Backend::Cpu);
}

#[test]
fn a_single_stage_pipeline_is_a_kernel() {
    let rt = rt();
    let p = rt
        .launch(PipelineSpec::new(
            "one",
            KernelSpec::from_fn("inc", |x: u8| x + 1),
        ))
        .expect("launch");
    assert_eq!(p.call_blocking(1).expect("call"), 2);
    p.shutdown_blocking().expect("shutdown");
}

#[test]
fn what_a_chain_cannot_be_is_refused_before_anything_runs() {
    let rt = rt();
    let refused = |r: gyre::Result<Pipeline<u32, u32>>| match r {
        Err(Error::Pipeline { stage, reason, .. }) => (stage, reason),
        other => panic!("{other:?}"),
    };
    let echo = || KernelSpec::<u32, u32>::echo();
    let (stage, why) = refused(
        rt.launch(
            PipelineSpec::new("p", echo())
                .then(echo())
                .then(echo().slot_size(256)),
        ),
    );
    assert_eq!(stage, 2);
    assert!(why.contains("256") && why.contains("128"), "{why}");
    let mut long = PipelineSpec::new("p", echo());
    for _ in 0..gyre::pipeline::MAX_STAGES {
        long = long.then(echo());
    }
    let (stage, _) = refused(rt.launch(long));
    assert_eq!(stage, gyre::pipeline::MAX_STAGES);
    // A type larger than the payload.
    match rt
        .launch(PipelineSpec::new("p", echo()).then(KernelSpec::from_fn("big", |x: u32| [x; 32])))
    {
        Err(Error::TypeTooLarge { role: "reply", .. }) => {}
        other => panic!("{other:?}"),
    }
    // A copy strategy: the stages could not write each other's rings.
    let copy = Runtime::builder()
        .backend(Backend::Cpu)
        .transfer_strategy(TransferStrategy::Sync)
        .build()
        .expect("runtime");
    match copy.launch(PipelineSpec::new("p", echo()).then(echo())) {
        Err(Error::StrategyUnsupported { .. }) => {}
        other => panic!("{other:?}"),
    }
    // A reload: refused, the chain keeps serving.
    let p = rt
        .launch(PipelineSpec::new("p", echo()).then(echo()))
        .expect("launch");
    assert!(matches!(
        p.reload_blocking(KernelSpec::<u32, u32>::echo()),
        Err(Error::Pipeline { .. })
    ));
    assert_eq!(p.call_blocking(5).expect("still serving"), 5);
}

#[test]
fn every_stage_exports_its_telemetry_and_the_files_go_with_the_chain() {
    let dir = std::env::temp_dir().join(format!("gyre-pipeline-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new(
                "exported",
                KernelSpec::<u32, u32>::echo().export_telemetry_to(dir.join("exported")),
            )
            .then(KernelSpec::<u32, u32>::echo()),
        )
        .expect("launch");
    assert_eq!(p.call_blocking(3).expect("call"), 3);
    for f in ["exported", "exported.1"] {
        assert!(dir.join(f).exists(), "{f} while it runs");
    }
    p.shutdown_blocking().expect("shutdown");
    for f in ["exported", "exported.1"] {
        assert!(!dir.join(f).exists(), "{f} after the shutdown");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn many_producers_through_three_stages_lose_and_duplicate_nothing() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new(
                "many",
                KernelSpec::from_fn("a", |x: u64| x ^ 0x5555).capacity(32),
            )
            .then(KernelSpec::from_fn("b", |x: u64| x.rotate_left(7)).capacity(32))
            .then(KernelSpec::from_fn("c", |x: u64| x.rotate_right(7) ^ 0x5555).capacity(32)),
        )
        .expect("launch");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let k = p.kernel().clone();
            std::thread::spawn(move || {
                for i in 0..2000u64 {
                    let x = (t << 32) | i;
                    assert_eq!(k.call_blocking(x).expect("call"), x);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("producer");
    }
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    assert!(
        t.iter().all(|t| t.messages_out == 8000 && t.errors == 0),
        "{t:?}"
    );
}

/// Every stage times the host out as the first stage's spec says: a later stage's own
/// (shorter) host timeout would stop it between the host's heartbeats.
#[test]
fn every_stage_uses_the_first_stage_s_host_timeout() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("hb", KernelSpec::<u32, u32>::echo())
                .then(KernelSpec::<u32, u32>::echo().host_timeout(Duration::from_millis(1))),
        )
        .expect("launch");
    // The first stage's 10 s timeout: heartbeats every 2.5 s, far beyond 1 ms.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(p.call_blocking(4).expect("the chain still runs"), 4);
    assert!(p.stage_states().iter().all(|s| *s == KernelState::Active));
    p.shutdown_blocking().expect("shutdown");
}

/// A fault behind a paused first stage still ends the chain (L4 runs while paused): the
/// request it holds fails instead of waiting for a resume.
#[test]
fn a_fault_behind_a_paused_head_ends_the_chain() {
    let rt = rt();
    let go = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = go.clone();
    let p = rt
        .launch(
            PipelineSpec::new(
                "paused",
                KernelSpec::<u32, u32>::echo().idle(gyre::IdleStrategy::Backoff {
                    spins: 0,
                    yields: 0,
                    max_park: Duration::from_secs(1),
                }),
            )
            .then(KernelSpec::from_fn("panics", move |x: u32| {
                // Request 1 waits for the test, then panics.
                while x == 1 && !gate.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                assert_ne!(x, 1, "injected fault");
                x
            })),
        )
        .expect("launch");
    send(&p, 1).expect("send");
    send(&p, 2).expect("send");
    eventually("both requests to pass the first stage", || {
        p.stage_telemetry().expect("telemetry")[0].messages_out == 2
    });
    p.pause();
    eventually("the first stage to pause", || {
        p.stage_states()[0] == KernelState::Paused
    });
    go.store(true, Ordering::Release);
    match p.recv_timeout(Duration::from_secs(20)) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    match p.recv_timeout(Duration::from_secs(20)) {
        Err(Error::KernelFaulted { code, .. }) => assert_eq!(code, codes::HANDLER_PANIC),
        other => panic!("request 2 behind the paused head: {other:?}"),
    }
    assert_eq!(
        p.stage_states(),
        [
            KernelState::Terminated {
                code: codes::STAGE_STOPPED
            },
            KernelState::Faulted {
                code: codes::HANDLER_PANIC
            },
        ]
    );
}

/// The first stage's watchdog watches every stage: a later stage whose handler never
/// returns makes the chain unresponsive instead of hanging its callers.
#[test]
fn the_watchdog_notices_a_hung_later_stage() {
    let rt = rt();
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = release.clone();
    let p = rt
        .launch(
            PipelineSpec::new(
                "hung",
                KernelSpec::<u32, u32>::echo().watchdog(Duration::from_millis(200)),
            )
            .then(KernelSpec::from_fn("hangs", move |x: u32| {
                while x == 1 && !gate.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                x
            })),
        )
        .expect("launch");
    assert_eq!(p.call_blocking(0).expect("call"), 0);
    match p.call_timeout(1, Duration::from_secs(20)) {
        Err(Error::Unresponsive { kernel, bound, .. }) => {
            assert_eq!(
                (kernel.as_str(), bound),
                ("hung", Duration::from_millis(200))
            );
        }
        other => panic!("{other:?}"),
    }
    // Let the handler return so the detached stage can drain and stop.
    release.store(true, Ordering::Release);
    assert!(matches!(
        p.shutdown_blocking(),
        Err(Error::Unresponsive { .. })
    ));
}

/// The cases every backend runs (`tests/pipeline_cases/`), on the CPU backend.
mod every_backend {
    use super::pipeline_cases::{self as cases, Target};

    #[test]
    fn a_chain_answers_in_order_and_counts_every_message() {
        cases::a_chain_answers_in_order_and_counts_every_message(Target::Cpu);
    }

    #[test]
    fn each_stage_is_reloaded_under_a_stream() {
        cases::each_stage_is_reloaded_under_a_stream(Target::Cpu);
    }

    #[test]
    fn a_stage_that_panics_is_restarted_in_place() {
        cases::a_stage_that_panics_is_restarted_in_place(Target::Cpu);
    }

    #[test]
    fn a_stage_chains_with_a_cpu_stage_across_runtimes() {
        cases::a_stage_chains_with_a_cpu_stage_across_runtimes(Target::Cpu);
    }
}
