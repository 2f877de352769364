//! Fan-out and fan-in on the CPU backend (`docs/pipelines.md`, "Shapes"): a stage feeding
//! several branches round-robin or by key, branches meeting in a join stage or at the
//! host, replies in request order, per-key order in the branches, errors and faults
//! through the graph, shutdown draining every branch, and the shapes that are refused.

#[path = "support/deadline.rs"]
mod deadline;

use deadline::{recv, send};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gyre::{
    codes,
    pipeline::{Branch, Pipeline, PipelineSpec, Route},
    Error, KernelSpec, KernelState,
};

#[path = "support/wait.rs"]
mod wait;
use wait::eventually;

#[path = "support/runtime.rs"]
mod runtime;
use runtime::cpu as rt;

/// Branch `b` of `n`: tags each value with its branch (`x * 10 + b`).
fn tagging(b: u64) -> Branch<u64, u64> {
    Branch::new(KernelSpec::from_fn(format!("branch-{b}"), move |x: u64| {
        x * 10 + b
    }))
}

#[test]
fn a_round_robin_fan_out_answers_the_host_in_request_order() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("rr", KernelSpec::<u64, u64>::echo())
                .fan_out(Route::RoundRobin, (0..3).map(tagging)),
        )
        .expect("launch");
    assert_eq!(p.stages(), 4);
    // The branches' rings lie apart from their regions: the fan-out writes them at the
    // addresses its K0 read into the route (`gyre_route.ring`).
    let rings = p.stage_request_rings();
    assert!(
        rings[0].is_none() && rings[1..].iter().all(Option::is_some),
        "{rings:?}"
    );
    // The i-th request the head passes on goes to branch i mod 3, and the host gets the
    // replies in request order although three kernels answer them.
    let producer = {
        let k = p.kernel().clone();
        std::thread::spawn(move || {
            for x in 0..3000u64 {
                send(&k, x).expect("send");
            }
        })
    };
    for x in 0..3000u64 {
        assert_eq!(recv(&p).expect("recv"), x * 10 + x % 3, "reply {x}");
    }
    producer.join().expect("producer");
    assert_eq!(p.call_blocking(5).expect("call"), 50); // request 3000: branch 0
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    let out: Vec<u64> = t.iter().map(|t| t.messages_out).collect();
    assert_eq!(out, [3001, 1001, 1000, 1000]);
    let rings = p.stage_rings();
    assert_eq!((rings[0].k2h_head, rings[0].k2h_tail), (3001, 3001));
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// `[key, seq]` through a keyed fan-out of 3 branches into a join: each branch records
/// what it saw, the join records the order it saw.
#[test]
fn a_keyed_fan_out_keeps_per_key_order_and_the_join_sees_request_order() {
    type Seen = Arc<Mutex<Vec<(usize, u64, u64)>>>;
    let seen: Seen = Arc::default();
    let joined: Arc<Mutex<Vec<u64>>> = Arc::default();
    let branch = |b: usize| {
        let seen = seen.clone();
        Branch::new(
            KernelSpec::from_fn(format!("b{b}"), move |m: [u64; 2]| {
                seen.lock().expect("seen").push((b, m[0], m[1]));
                m
            })
            .capacity(32),
        )
    };
    let join = {
        let joined = joined.clone();
        KernelSpec::from_fn("join", move |m: [u64; 2]| {
            joined.lock().expect("joined").push(m[1]);
            m[1] * 2
        })
        .capacity(32)
    };
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new(
                "keyed",
                KernelSpec::<[u64; 2], [u64; 2]>::echo().capacity(32),
            )
            .fan_out(Route::key_at(0), (0..3).map(branch))
            .then(join),
        )
        .expect("launch");
    const N: u64 = 2000;
    let producer = {
        let k = p.kernel().clone();
        std::thread::spawn(move || {
            for seq in 0..N {
                send(&k, [seq % 11, seq]).expect("send");
            }
        })
    };
    for seq in 0..N {
        assert_eq!(recv(&p).expect("recv"), seq * 2);
    }
    producer.join().expect("producer");
    p.shutdown_blocking().expect("shutdown");
    // The join took every request exactly once, in request order.
    assert_eq!(*joined.lock().expect("joined"), (0..N).collect::<Vec<_>>());
    // Every key took one branch, the one Route::branch_of names, in order.
    let seen = seen.lock().expect("seen");
    assert_eq!(seen.len() as u64, N);
    let mut last: HashMap<u64, (usize, u64)> = HashMap::new();
    for &(b, key, seq) in seen.iter() {
        assert_eq!(b, Route::branch_of(key, 3), "key {key}");
        if let Some(&(_, prev)) = last.get(&key) {
            assert!(seq > prev, "key {key}: {seq} after {prev}");
        }
        last.insert(key, (b, seq));
    }
    assert_eq!(last.len(), 11);
}

/// 2 branches, one slow, into a join, with 4 producers and a small capacity: nothing is
/// lost or duplicated, and every stage counts what it saw.
#[test]
fn many_producers_through_a_fan_out_and_a_join_lose_and_duplicate_nothing() {
    let slow = Branch::new(
        KernelSpec::from_fn("slow", |x: u64| {
            std::thread::sleep(Duration::from_micros(50));
            x.rotate_left(9)
        })
        .capacity(16),
    );
    let fast = Branch::new(KernelSpec::from_fn("fast", |x: u64| x.rotate_left(9)).capacity(16));
    let rt = rt();
    let p: Pipeline<u64, u64> = rt
        .launch(
            PipelineSpec::new(
                "many",
                KernelSpec::from_fn("xor", |x: u64| x ^ 0xa5).capacity(16),
            )
            .fan_out(Route::RoundRobin, [slow, fast])
            .then(KernelSpec::from_fn("undo", |x: u64| x.rotate_right(9) ^ 0xa5).capacity(16)),
        )
        .expect("launch");
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let k = p.kernel().clone();
            std::thread::spawn(move || {
                for i in 0..500u64 {
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
    let out: Vec<u64> = p
        .stage_telemetry()
        .expect("telemetry")
        .iter()
        .map(|t| t.messages_out)
        .collect();
    assert_eq!(out, [2000, 1000, 1000, 2000]);
    // Every ring's published head covers what was written into it (the branches publish
    // the join's head, and the join's replies the host's, over out-of-order writes).
    let rings = p.stage_rings();
    for (k, r) in rings.iter().enumerate() {
        assert_eq!(
            (r.h2k_head, r.h2k_tail),
            (out[k], out[k]),
            "stage {k}: {r:?}"
        );
    }
    assert_eq!((rings[0].k2h_head, rings[0].k2h_tail), (2000, 2000));
}

#[test]
fn errors_pass_through_the_branches_and_the_join() {
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new(
                "errors",
                KernelSpec::try_from_fn("odd-rejected", |x: u64| {
                    if x % 2 == 1 {
                        Err(codes::USER_BASE + x as u32)
                    } else {
                        Ok(x)
                    }
                }),
            )
            .fan_out(
                Route::key_at(0),
                [
                    Branch::new(KernelSpec::from_fn("a", |x: u64| x + 1)),
                    Branch::new(KernelSpec::from_fn("b", |x: u64| x + 1)),
                ],
            )
            .then(KernelSpec::from_fn("join", |x: u64| x * 2)),
        )
        .expect("launch");
    for x in 0..40u64 {
        match p.call_blocking(x) {
            Ok(v) => assert_eq!((x % 2, v), (0, (x + 1) * 2)),
            Err(Error::Handler { status, .. }) => {
                assert_eq!((x % 2, status), (1, codes::USER_BASE + x as u32))
            }
            Err(e) => panic!("{x}: {e}"),
        }
    }
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    // Made at the head, passed on by a branch and the join; an error reply has no
    // payload, so it takes key 0's branch.
    let errors: Vec<u64> = t.iter().map(|t| t.errors).collect();
    assert_eq!(errors, [20, 0, 0, 0]);
    let key0 = 1 + Route::branch_of(0, 2);
    assert!(t[key0].messages_out >= 20, "{t:?}");
    assert_eq!(t[1].messages_out + t[2].messages_out, 40);
}

/// Branch 1 of 2 panics on request 51: that request is answered HANDLER_PANIC; the join
/// answers every request up to the first one the faulted branch never answered, and every
/// later one fails with the fault (0 lost, 0 duplicated); the graph stops: the faulted
/// branch Faulted, everything else Terminated.
#[test]
fn a_fault_in_one_branch_ends_the_graph_and_fails_only_what_it_did_not_answer() {
    const BAD: u64 = 51;
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("fault", KernelSpec::<u64, u64>::echo().capacity(16))
                .fan_out(
                    Route::RoundRobin,
                    [
                        Branch::new(KernelSpec::from_fn("even", |x: u64| x + 1).capacity(16)),
                        Branch::new(
                            KernelSpec::from_fn("odd", |x: u64| {
                                assert_ne!(x, BAD, "injected fault");
                                x + 1
                            })
                            .capacity(16),
                        ),
                    ],
                )
                .then(KernelSpec::<u64, u64>::echo().named("join").capacity(16)),
        )
        .expect("launch");
    let mut sent = 0u64;
    let mut outcomes = Vec::new();
    for x in 0..200u64 {
        if send(&p, x).is_err() {
            break;
        }
        sent += 1;
        if x < BAD {
            outcomes.push(recv(&p)); // keep the graph from filling first
        }
    }
    loop {
        match recv(&p) {
            Err(Error::Closed { .. }) => break,
            r => outcomes.push(r),
        }
        if outcomes.len() as u64 == sent {
            break;
        }
    }
    assert_eq!(
        outcomes.len() as u64,
        sent,
        "one outcome per accepted request"
    );
    let mut panicked = 0;
    let mut failed_from = None;
    for (x, o) in outcomes.iter().enumerate() {
        if matches!(o, Err(Error::KernelFaulted { .. })) {
            failed_from.get_or_insert(x);
        }
        match o {
            Ok(v) => {
                assert_eq!(*v, x as u64 + 1);
                // The join takes requests in request order: nothing after the first
                // request the faulted branch never answered gets through.
                assert!(
                    failed_from.is_none(),
                    "{x} answered after {failed_from:?} failed"
                );
            }
            Err(Error::Handler { status, .. }) => {
                assert_eq!((x as u64, *status), (BAD, codes::HANDLER_PANIC));
                panicked += 1;
            }
            Err(Error::KernelFaulted { code, .. }) => {
                assert!(x as u64 > BAD);
                assert_eq!(*code, codes::HANDLER_PANIC);
            }
            Err(e) => panic!("{x}: {e}"),
        }
    }
    assert_eq!(panicked, 1);
    eventually("the graph to stop", || {
        p.stage_states().iter().all(|s| {
            matches!(
                s,
                KernelState::Terminated { .. } | KernelState::Faulted { .. }
            )
        })
    });
    let states = p.stage_states();
    assert_eq!(
        states[2],
        KernelState::Faulted {
            code: codes::HANDLER_PANIC
        }
    );
    assert_eq!(
        states[0],
        KernelState::Terminated {
            code: codes::STAGE_STOPPED
        }
    );
    assert_eq!(
        p.state(),
        KernelState::Faulted {
            code: codes::HANDLER_PANIC
        }
    );
}

/// Shutdown drains every branch and then the join: the join stops only once every
/// branch has (a slow branch still holds requests after the fast one stopped).
#[test]
fn shutdown_drains_every_branch_before_the_join() {
    let rt = rt();
    let slow = Branch::new(KernelSpec::from_fn("slow", |x: u32| {
        std::thread::sleep(Duration::from_micros(300));
        x + 1
    }));
    let fast = Branch::new(KernelSpec::from_fn("fast", |x: u32| x + 1));
    let p = rt
        .launch(
            PipelineSpec::new("drain", KernelSpec::<u32, u32>::echo())
                .fan_out(Route::RoundRobin, [slow, fast])
                .then(KernelSpec::from_fn("join", |x: u32| x * 2)),
        )
        .expect("launch");
    for x in 0..300u32 {
        send(&p, x).expect("send");
    }
    p.shutdown_blocking().expect("shutdown");
    for x in 0..300u32 {
        assert_eq!(recv(&p).expect("drained"), (x + 1) * 2);
    }
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

#[test]
fn shapes_a_pipeline_cannot_have_are_refused() {
    let rt = rt();
    let echo = || KernelSpec::<u64, u64>::echo();
    let refused = |r: Result<Pipeline<u64, u64>, Error>, stage: usize, what: &str| match r {
        Err(Error::Pipeline {
            stage: s, reason, ..
        }) => {
            assert_eq!(s, stage, "{reason}");
            assert!(reason.contains(what), "{reason}");
        }
        other => panic!("{other:?}"),
    };
    refused(
        rt.launch(
            PipelineSpec::new("one", echo()).fan_out(Route::RoundRobin, [Branch::new(echo())]),
        ),
        1,
        "2 to 8",
    );
    refused(
        rt.launch(
            PipelineSpec::new("nine", echo())
                .fan_out(Route::RoundRobin, (0..9).map(|_| Branch::new(echo()))),
        ),
        1,
        "2 to 8",
    );
    refused(
        rt.launch(
            PipelineSpec::new("twice", echo())
                .fan_out(
                    Route::RoundRobin,
                    [Branch::new(echo()), Branch::new(echo())],
                )
                .fan_out(
                    Route::RoundRobin,
                    [Branch::new(echo()), Branch::new(echo())],
                ),
        ),
        1,
        "join",
    );
    refused(
        rt.launch(
            PipelineSpec::new("key", echo())
                .fan_out(Route::key_at(4), [Branch::new(echo()), Branch::new(echo())]),
        ),
        0,
        "byte 4",
    );
    // The refusals come from the launch's checks, before any stage runs; a good graph
    // launches on the same runtime and answers.
    let p = rt
        .launch(
            PipelineSpec::new("fine", echo())
                .fan_out(Route::key_at(0), [Branch::new(echo()), Branch::new(echo())]),
        )
        .expect("launch");
    assert_eq!(p.call_blocking(9).expect("call"), 9);
}

/// The published heads of rings written by id keep up, with or without a join, when the
/// consumers recycle slots before a producer's scan reaches them (a small capacity,
/// branches of uneven pace): the scan must step over a slot holding a later lap.
#[test]
fn published_heads_keep_up_when_slots_are_recycled_before_the_scan() {
    let rt = rt();
    let jittery = |b: u64| {
        Branch::new(
            KernelSpec::from_fn(format!("j{b}"), move |x: u64| {
                if (x + b) % 17 == 0 {
                    std::thread::sleep(Duration::from_micros(20));
                }
                x + 1
            })
            .capacity(8),
        )
    };
    for join in [false, true] {
        let spec = PipelineSpec::new("recycle", KernelSpec::<u64, u64>::echo().capacity(8))
            .fan_out(Route::RoundRobin, (0..3).map(jittery));
        let p = if join {
            rt.launch(spec.then(KernelSpec::<u64, u64>::echo().capacity(8)))
        } else {
            rt.launch(spec)
        }
        .expect("launch");
        const N: u64 = 20_000;
        let producer = {
            let k = p.kernel().clone();
            std::thread::spawn(move || {
                for x in 0..N {
                    send(&k, x).expect("send");
                }
            })
        };
        for x in 0..N {
            assert_eq!(recv(&p).expect("recv"), x + 1);
        }
        producer.join().expect("producer");
        p.shutdown_blocking().expect("shutdown");
        let rings = p.stage_rings();
        assert_eq!(
            (rings[0].k2h_head, rings[0].k2h_tail),
            (N, N),
            "join {join}: {rings:?}"
        );
        if join {
            assert_eq!((rings[4].h2k_head, rings[4].h2k_tail), (N, N), "{rings:?}");
        }
    }
}

/// The same fault with the branches answering the host: the other branch's replies
/// written before the end are delivered; what fails is only what the faulted branch held
/// or the head had not passed on (never an answered request), and nothing twice.
#[test]
fn a_fault_in_a_branch_answering_the_host_fails_only_what_was_not_answered() {
    const BAD: u64 = 51;
    let rt = rt();
    let p = rt
        .launch(
            PipelineSpec::new("fault-host", KernelSpec::<u64, u64>::echo().capacity(16)).fan_out(
                Route::RoundRobin,
                [
                    Branch::new(KernelSpec::from_fn("even", |x: u64| x + 1).capacity(16)),
                    Branch::new(
                        KernelSpec::from_fn("odd", |x: u64| {
                            assert_ne!(x, BAD, "injected fault");
                            x + 1
                        })
                        .capacity(16),
                    ),
                ],
            ),
        )
        .expect("launch");
    let producer = {
        let k = p.kernel().clone();
        std::thread::spawn(move || (0..BAD + 12).take_while(|&x| send(&k, x).is_ok()).count())
    };
    let mut outcomes = Vec::new();
    loop {
        match recv(&p) {
            Err(Error::Closed { .. }) => break,
            r => outcomes.push(r),
        }
        if outcomes.len() as u64 == BAD + 12 {
            break;
        }
    }
    let sent = producer.join().expect("producer") as u64;
    assert_eq!(
        outcomes.len() as u64,
        sent,
        "one outcome per accepted request"
    );
    for (x, o) in outcomes.iter().enumerate() {
        let x = x as u64;
        match o {
            Ok(v) => assert_eq!(*v, x + 1),
            Err(Error::Handler { status, .. }) => {
                assert_eq!((x, *status), (BAD, codes::HANDLER_PANIC))
            }
            // The odd branch stopped at BAD: odd requests after it were never answered.
            Err(Error::KernelFaulted { .. }) => assert!(x > BAD, "{x}"),
            Err(e) => panic!("{x}: {e}"),
        }
        if x > BAD && x % 2 == 1 {
            assert!(
                o.is_err(),
                "{x} was answered by the branch that faulted before it"
            );
        }
    }
    assert_eq!(
        p.state(),
        KernelState::Faulted {
            code: codes::HANDLER_PANIC
        }
    );
}
