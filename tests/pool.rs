//! Kernel pools (`docs/pools.md`): calls spread by least outstanding, keyed calls in order,
//! a failed member replaced or removed without losing what the others hold; and the
//! cases every backend runs (`tests/pool_cases/`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use gyre::{
    codes,
    pool::{KernelPool, MemberFailure, PoolOptions},
    Error, KernelSpec, KernelState, Runtime,
};

mod pool_cases;
#[path = "support/wait.rs"]
mod wait;
use wait::eventually;

#[path = "support/runtime.rs"]
mod runtime;
use runtime::cpu as rt;

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio")
}

/// Polls every future in order until all are done (the first poll of each, which sends
/// its request, happens in the vector's order).
async fn join_in_order<F: Future + Unpin>(mut fs: Vec<F>) -> Vec<F::Output> {
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match Pin::new(f).poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("done")).collect()
}

/// Polls each future once, in order (which picks its member and sends its request).
fn send_all<F: Future + Unpin>(tokio: &tokio::runtime::Runtime, fs: &mut [F]) {
    tokio.block_on(std::future::poll_fn(|cx| {
        for f in fs.iter_mut() {
            let _ = Pin::new(f).poll(cx);
        }
        Poll::Ready(())
    }));
}

/// x + 1; u64::MAX panics (the member faults).
fn inc_pool(rt: &Runtime, options: PoolOptions) -> KernelPool<u64, u64> {
    rt.launch(gyre::pool::PoolSpec::new(
        KernelSpec::from_fn("inc", |x: u64| {
            assert!(x != u64::MAX, "injected fault");
            x + 1
        }),
        options,
    ))
    .expect("pool")
}

/// The log of a `log_pool`: (key, seq) in the order the members handled them.
type Log = Arc<Mutex<Vec<(u64, u64)>>>;

/// Answers `[key, seq]` with `seq`, logging it; a `seq` of u64::MAX panics.
fn log_pool(rt: &Runtime, options: PoolOptions) -> (KernelPool<[u64; 2], u64>, Log) {
    let log = Log::default();
    let l = log.clone();
    let pool = rt
        .launch(gyre::pool::PoolSpec::new(
            KernelSpec::from_fn("log", move |[key, seq]: [u64; 2]| {
                assert!(seq != u64::MAX, "injected fault");
                l.lock().unwrap().push((key, seq));
                seq
            }),
            options,
        ))
        .unwrap();
    (pool, log)
}

/// Waits until `k` has faulted.
fn wait_faulted<Req: gyre::Pod, Resp: gyre::Pod>(k: &gyre::Kernel<Req, Resp>) {
    eventually("the fault", || {
        matches!(k.state(), KernelState::Faulted { .. })
    });
}

/// Pauses `k` and waits until it is paused.
fn pause<Req: gyre::Pod, Resp: gyre::Pod>(k: &gyre::Kernel<Req, Resp>) {
    k.pause();
    eventually("the pause", || k.state() == KernelState::Paused);
}

fn key_of<Req: gyre::Pod, Resp: gyre::Pod>(pool: &KernelPool<Req, Resp>, member: usize) -> u64 {
    (0..)
        .find(|&k| pool.member_for_key(k) == Some(member))
        .expect("a key")
}

fn pause_all(pool: &KernelPool<u64, u64>) {
    for k in pool.members() {
        pause(&k);
    }
}

#[test]
fn calls_go_to_the_least_busy_member() {
    let rt = rt();
    let pool = inc_pool(&rt, PoolOptions::new(2));
    pause_all(&pool);
    // One call counted outstanding on whichever member the tie-break picks (at its first
    // poll)...
    let tokio = tokio();
    let mut stuck = [pool.call(1)];
    send_all(&tokio, &mut stuck);
    let [stuck] = stuck;
    let busy = pool
        .outstanding()
        .iter()
        .position(|&n| n == 1)
        .expect("one member holds it");
    let free = 1 - busy;
    let members = pool.members();
    members[free].resume();
    // ...so every blocking call goes to the other one while it is held.
    for i in 0..100 {
        assert_eq!(pool.call_blocking(i).unwrap(), i + 1);
    }
    // Telemetry reaches the host on the kernel's timer, not with each reply.
    eventually("the free member to count its 100 replies", || {
        members[free].telemetry().unwrap().messages_out == 100
    });
    assert_eq!(members[busy].telemetry().unwrap().messages_out, 0);
    assert_eq!(pool.outstanding()[busy], 1);
    members[busy].resume();
    assert_eq!(tokio.block_on(stuck).unwrap(), 2);
    assert_eq!(pool.stats().outstanding, 0);
    eventually("the busy member to count its one reply", || {
        members[busy].telemetry().unwrap().messages_out == 1
    });
    // Unkeyed calls in flight together spread over both. The members are paused while
    // the 64 calls make their first poll, so every one of them is outstanding when the
    // next picks its member: with the kernels running, a call can complete within its
    // first poll, and the next then finds both members idle again (the tie-break's).
    let before: Vec<u64> = members
        .iter()
        .map(|k| k.telemetry().unwrap().messages_out)
        .collect();
    pause_all(&pool);
    let mut calls: Vec<_> = (0..64).map(|i| pool.call(i)).collect();
    send_all(&tokio, &mut calls);
    assert_eq!(pool.outstanding(), vec![32, 32]);
    for k in &members {
        k.resume();
    }
    let replies = tokio.block_on(join_in_order(calls));
    assert!(replies
        .into_iter()
        .enumerate()
        .all(|(i, r)| r.unwrap() == i as u64 + 1));
    for (k, b) in members.iter().zip(before) {
        eventually(&format!("{} to count its 32 replies", k.name()), || {
            k.telemetry().unwrap().messages_out == b + 32
        });
    }
    pool.shutdown_blocking().unwrap();
}

#[test]
fn keyed_calls_are_answered_in_order_per_key() {
    let rt = rt();
    let (pool, log) = log_pool(&rt, PoolOptions::new(3));
    let mut calls = Vec::new();
    let mut want = Vec::new();
    for seq in 0..40u64 {
        for key in 0..9u64 {
            calls.push(pool.call_keyed(key, [key, seq]));
            want.push(seq);
        }
    }
    let got: Vec<u64> = tokio()
        .block_on(join_in_order(calls))
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got, want);
    // Each key's requests were handled in the order they were sent, by one member.
    let log = log.lock().unwrap();
    for key in 0..9u64 {
        let seqs: Vec<u64> = log.iter().filter(|e| e.0 == key).map(|e| e.1).collect();
        assert_eq!(seqs, (0..40).collect::<Vec<_>>(), "key {key}");
    }
    // And the keys used every member.
    let used: std::collections::BTreeSet<usize> =
        (0..9).filter_map(|k| pool.member_for_key(k)).collect();
    assert_eq!(used.len(), 3);
    pool.shutdown_blocking().unwrap();
}

#[test]
fn a_failed_member_is_replaced_and_the_others_lose_nothing() {
    let rt = rt();
    let pool = inc_pool(&rt, PoolOptions::new(2));
    let (k0, k1) = (key_of(&pool, 0), key_of(&pool, 1));
    let members = pool.members();
    // Member 1 holds 20 calls (paused) while member 0 faults.
    pause(&members[1]);
    let tokio = tokio();
    let mut held: Vec<_> = (0..20).map(|i| pool.call_keyed(k1, i)).collect();
    send_all(&tokio, &mut held);
    assert_eq!(pool.outstanding()[1], 20);
    assert_eq!(
        members[1].raw_channel().claimed(),
        20,
        "sent, not just picked"
    );
    match pool.call_keyed_blocking(k0, u64::MAX) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    wait_faulted(&members[0]);
    // The next call with k0 finds it stopped: a new member takes slot 0.
    assert_eq!(pool.call_keyed_blocking(k0, 5).unwrap(), 6);
    assert_eq!(pool.stats().replaced, 1);
    assert_eq!(pool.members()[0].name(), "inc.2");
    assert_eq!(pool.len(), 2);
    // Member 1 lost nothing.
    members[1].resume();
    let replies = tokio.block_on(join_in_order(held));
    for (i, r) in replies.into_iter().enumerate() {
        assert_eq!(r.unwrap(), i as u64 + 1);
    }
    pool.shutdown_blocking().unwrap();
}

#[test]
fn under_remove_a_failed_member_leaves_and_an_empty_pool_is_closed() {
    let rt = rt();
    let pool = inc_pool(&rt, PoolOptions::new(2).on_failure(MemberFailure::Remove));
    let k0 = key_of(&pool, 0);
    let dead = pool.members()[0].clone();
    assert!(pool.call_keyed_blocking(k0, u64::MAX).is_err());
    wait_faulted(&dead);
    // Every key now goes to the one member left.
    for key in 0..20 {
        assert_eq!(pool.call_keyed_blocking(key, key).unwrap(), key + 1);
    }
    let s = pool.stats();
    assert_eq!((s.members, s.removed, s.replaced), (1, 1, 0));
    // The last member fails too: the pool is closed.
    let last = pool.members()[0].clone();
    assert!(pool.call_blocking(u64::MAX).is_err());
    wait_faulted(&last);
    assert!(matches!(pool.call_blocking(1), Err(Error::Closed { .. })));
    assert!(matches!(
        tokio().block_on(pool.call(1)),
        Err(Error::Closed { .. })
    ));
    assert!(pool.is_empty());
}

#[test]
fn replacements_are_bounded() {
    let rt = rt();
    let pool = inc_pool(
        &rt,
        PoolOptions::new(1).on_failure(MemberFailure::Replace { max: 2 }),
    );
    for round in 0..3 {
        let m = pool.members()[0].clone();
        assert!(pool.call_blocking(u64::MAX).is_err(), "round {round}");
        wait_faulted(&m);
        let r = pool.call_blocking(1);
        if round < 2 {
            assert_eq!(r.unwrap(), 2, "replaced in round {round}");
        } else {
            assert!(matches!(r, Err(Error::Closed { .. })), "{r:?}");
        }
    }
    assert_eq!((pool.stats().replaced, pool.stats().removed), (2, 1));
}

#[test]
fn a_pool_shuts_down_every_member_and_names_them() {
    let rt = rt();
    let pool = inc_pool(&rt, PoolOptions::new(3));
    let names: Vec<String> = pool.members().iter().map(|k| k.name().to_owned()).collect();
    assert_eq!(names, ["inc.0", "inc.1", "inc.2"]);
    for i in 0..30 {
        pool.call_blocking(i).unwrap();
    }
    tokio().block_on(pool.shutdown()).unwrap();
    for k in pool.members() {
        assert_eq!(k.state(), KernelState::Terminated { code: 0 });
    }
    // Closed: no call is taken and no member is relaunched in a stopped one's place.
    assert!(matches!(pool.call_blocking(1), Err(Error::Closed { .. })));
    assert_eq!(pool.stats().replaced, 0);
    assert!(rt
        .launch(gyre::pool::PoolSpec::new(
            KernelSpec::<u64, u64>::echo(),
            PoolOptions::new(0)
        ))
        .is_err());
}

/// Four threads call a pool of three while members fault now and then (a request of
/// `u64::MAX` panics its member): every call ends, with its own reply or an error, and
/// every reply matches its request: 0 lost, 0 duplicated. Failures are the faulting
/// calls and calls that went to a member as it faulted (`Closed` for one refused before
/// it was accepted).
#[test]
fn under_faults_a_pool_loses_and_duplicates_nothing() {
    let rt = rt();
    let pool = inc_pool(
        &rt,
        PoolOptions::new(3).on_failure(MemberFailure::Replace { max: 100 }),
    );
    let (ok, failed) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let pool = pool.clone();
                s.spawn(move || {
                    let (mut ok, mut failed) = (0u64, 0u64);
                    for i in 0..2_000u64 {
                        let fault = t == 0 && i % 250 == 249;
                        let x = if fault { u64::MAX } else { t << 32 | i };
                        let r = if i % 2 == 0 {
                            pool.call_blocking(x)
                        } else {
                            pool.call_keyed_blocking(i % 7, x)
                        };
                        match r {
                            Ok(y) => {
                                assert!(!fault, "a faulting call was answered");
                                assert_eq!(y, x + 1, "thread {t} call {i}: another's reply");
                                ok += 1;
                            }
                            Err(
                                Error::Handler { .. }
                                | Error::KernelFaulted { .. }
                                | Error::Closed { .. },
                            ) => failed += 1,
                            Err(e) => panic!("thread {t} call {i}: {e:?}"),
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("caller"))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    assert_eq!(ok + failed, 8_000, "every call ended");
    assert!(failed >= 8, "each injected fault failed its call");
    // Each fault fails its call and at most a few of each thread's calls that went to
    // the member as it stopped.
    assert!(failed <= 8 * 16, "only calls near a fault failed: {failed}");
    assert!(pool.stats().replaced >= 1);
    assert_eq!(pool.len(), 3);
    assert_eq!(pool.stats().outstanding, 0);
    eprintln!(
        "ok {ok}, failed {failed}, replaced {}",
        pool.stats().replaced
    );
    pool.shutdown_blocking().ok();
}

/// Under `Remove`, a removed member's slot stays empty: keys of the other members do not
/// move, so their calls in flight keep their order.
#[test]
fn removing_a_member_moves_no_other_key() {
    let rt = rt();
    let (pool, log) = log_pool(&rt, PoolOptions::new(3).on_failure(MemberFailure::Remove));
    let slot_of_key: Vec<Option<usize>> = (0..30).map(|k| pool.member_for_key(k)).collect();
    let (victim, keep) = (key_of(&pool, 0), key_of(&pool, 2));
    let members = pool.members();
    let tokio = tokio();
    // `keep`'s member holds its first call (paused) while member 0 is removed.
    pause(&members[2]);
    let mut first = [pool.call_keyed(keep, [keep, 1])];
    send_all(&tokio, &mut first);
    assert!(pool
        .call_keyed_blocking(victim, [victim, u64::MAX])
        .is_err());
    wait_faulted(&members[0]);
    // The next call of the victim's key removes member 0; then `keep`'s second call.
    assert_eq!(pool.call_keyed_blocking(victim, [victim, 7]).unwrap(), 7);
    assert_eq!(pool.stats().removed, 1);
    let mut second = [pool.call_keyed(keep, [keep, 2])];
    send_all(&tokio, &mut second);
    members[2].resume();
    let [first] = first;
    let [second] = second;
    assert_eq!(tokio.block_on(first).unwrap(), 1);
    assert_eq!(tokio.block_on(second).unwrap(), 2);
    let seqs: Vec<u64> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.0 == keep)
        .map(|e| e.1)
        .collect();
    assert_eq!(seqs, [1, 2], "keep's calls in order");
    // Keys of live members kept their member (indices shift down past the empty slot).
    for (k, was) in slot_of_key.iter().enumerate() {
        let now = pool.member_for_key(k as u64);
        match was {
            Some(0) => assert!(now.is_some()),
            Some(s) => assert_eq!(now, Some(s - 1), "key {k}"),
            None => unreachable!(),
        }
    }
    pool.shutdown_blocking().ok();
}

/// A call picks its member when first polled: one made before its member faulted, and
/// polled after, goes to a live member.
#[test]
fn a_call_picks_its_member_when_first_polled() {
    let rt = rt();
    let pool = inc_pool(&rt, PoolOptions::new(2).on_failure(MemberFailure::Remove));
    let k0 = key_of(&pool, 0);
    let early = pool.call_keyed(k0, 41); // not polled yet
    let m0 = pool.members()[0].clone();
    assert!(pool.call_keyed_blocking(k0, u64::MAX).is_err());
    wait_faulted(&m0);
    assert_eq!(tokio().block_on(early).unwrap(), 42);
    assert_eq!(pool.len(), 1);
}

/// A completed call stops counting at once, even while its future lives on.
#[test]
fn a_completed_call_is_no_longer_outstanding() {
    let rt = rt();
    let pool = inc_pool(&rt, PoolOptions::new(2));
    let mut f = pool.call(1);
    assert_eq!(tokio().block_on(&mut f).unwrap(), 2);
    assert_eq!(pool.stats().outstanding, 0);
    drop(f);
    assert!(matches!(
        rt.launch(gyre::pool::PoolSpec::new(
            KernelSpec::<u64, u64>::echo(),
            PoolOptions::new(usize::MAX)
        )),
        Err(Error::InvalidArgument { .. })
    ));
}

/// A device pool lends each runtime to one holder at a time; waiting threads and tasks
/// get one as soon as it is returned.
#[test]
fn a_device_pool_lends_each_device_once() {
    let devices = gyre::pool::DevicePool::new(vec![rt(), rt()]).unwrap();
    let a = devices.try_acquire().unwrap();
    let b = devices.try_acquire().unwrap();
    assert_ne!(a.index(), b.index());
    assert!(devices.try_acquire().is_none());
    assert!(matches!(
        devices.acquire_until(Instant::now() + Duration::from_millis(5)),
        Err(Error::Timeout { .. })
    ));
    // A blocked thread gets the device returned next...
    let index_a = a.index();
    let held = std::thread::scope(|s| {
        let waiter = s.spawn(|| devices.acquire_blocking());
        std::thread::sleep(Duration::from_millis(10));
        drop(a);
        waiter.join().unwrap()
    });
    assert_eq!(held.index(), index_a);
    // ...and so does a waiting task (woken by the return, not polled again by chance).
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let got = tokio.block_on(async {
        let waiting = tokio::spawn({
            let devices = devices.clone();
            async move { devices.acquire().await.index() }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished());
        let index_b = b.index();
        drop(b);
        (
            tokio::time::timeout(Duration::from_secs(20), waiting)
                .await
                .expect("woken")
                .unwrap(),
            index_b,
        )
    });
    assert_eq!(got.0, got.1);
    drop(held);
    // A guard is its runtime: kernels launch on it.
    let g = devices.try_acquire().unwrap();
    let k = g.launch(KernelSpec::from_fn("inc", |x: u8| x + 1)).unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 2);
    k.shutdown_blocking().unwrap();
    assert_eq!(devices.available(), 1);
}

/// The cases every backend runs (`tests/pool_cases/`), on the CPU backend.
mod every_backend {
    use super::pool_cases::{self as cases, Target};

    #[test]
    fn keyed_calls_reach_every_member() {
        cases::keyed_calls_reach_every_member(Target::Cpu);
    }

    #[test]
    fn a_member_that_faults_is_replaced_and_the_other_loses_nothing() {
        cases::a_member_that_faults_is_replaced_and_the_other_loses_nothing(Target::Cpu);
    }

    #[test]
    fn a_pool_spans_runtimes_and_replaces_in_place() {
        cases::a_pool_spans_runtimes_and_replaces_in_place(Target::Cpu);
    }
}
