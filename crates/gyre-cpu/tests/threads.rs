//! The CPU backend with real threads and no async runtime: the kernel thread, the
//! completion driver, several producer threads (blocking calls, sends, a batch sender),
//! a receiver, an abandoning caller, pause/resume and shutdown. Its assertions count
//! every message; its main purpose is to give ThreadSanitizer (`scripts/test.sh`) the
//! ring's real concurrency to check: slot payloads, headers and index words shared
//! between the kernel thread and the host threads.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::Duration;

use gyre_abi::command;
use gyre_core::channel::bell::ReplyBell;
use gyre_core::channel::driver::Driver;
use gyre_core::channel::{Channel, Kind, PublishError};
use gyre_core::ring::Geometry;
use gyre_core::{Backend, IdleStrategy, LaunchSpec, SharedRegion};

const N: u64 = 2000;

fn publish(ch: &Channel, kind: Kind, v: u64) -> u64 {
    loop {
        match ch.try_publish(kind, 1, &v.to_le_bytes()) {
            Ok(i) => return i,
            Err(PublishError::Full) => std::thread::yield_now(),
            Err(e) => panic!("publish {v}: {e:?}"),
        }
    }
}

fn value(r: gyre_core::channel::ReplyView<'_>) -> gyre_core::Result<u64> {
    Ok(u64::from_le_bytes(r.payload.try_into().unwrap_or_default()))
}

/// The launch of an echo kernel that rings `reply_bell` after each batch.
fn echo_spec(reply_bell: Option<Arc<ReplyBell>>) -> LaunchSpec {
    LaunchSpec {
        name: "threads".into(),
        handler: Arc::new(gyre_core::kernels::echo),
        builtin: None,
        idle: IdleStrategy::default(),
        telemetry: true,
        cuda_source: None,
        opencl_source: None,
        lane_handler: None,
        export: None,
        doorbell: None,
        reply_bell,
        loans: None,
        link: None,
    }
}

#[test]
fn producers_receiver_driver_and_kernel_threads_count_every_message() {
    let region = Arc::new(SharedRegion::new_host(Geometry::new(16, 128, 8).unwrap(), 0).unwrap());
    let kernel = gyre_cpu::CpuBackend::new()
        .launch(region.clone(), &echo_spec(None))
        .unwrap();
    let ch = Arc::new(Channel::new(region.clone(), "threads"));
    let driver = Driver::start(
        ch.clone(),
        IdleStrategy::default(),
        Duration::from_millis(5),
    )
    .unwrap();
    let idle = IdleStrategy::default();

    let callers: Vec<_> = (0..2u64)
        .map(|p| {
            let ch = ch.clone();
            std::thread::spawn(move || {
                for s in 0..N {
                    let v = (p << 32) | s;
                    let i = publish(&ch, Kind::Call, v);
                    // Every 50th call gives up at once: the driver discards its reply.
                    let timeout = (s % 50 == 0).then_some(Duration::ZERO);
                    match ch.wait_blocking(i, &idle, timeout, value) {
                        Ok(r) => assert_eq!(r, v),
                        Err(gyre_core::Error::Timeout { .. }) => assert!(timeout.is_some()),
                        Err(e) => panic!("call {v}: {e}"),
                    }
                }
            })
        })
        .collect();
    let senders: Vec<_> = (2..4u64)
        .map(|p| {
            let ch = ch.clone();
            std::thread::spawn(move || {
                for s in 0..N {
                    publish(&ch, Kind::Send, (p << 32) | s);
                }
            })
        })
        .collect();
    let receiver = {
        let ch = ch.clone();
        std::thread::spawn(move || {
            let mut next = [0u64; 4];
            let mut got = 0;
            while got < 2 * N {
                if let Some(v) = ch.try_recv(value).unwrap() {
                    let p = (v >> 32) as usize;
                    assert_eq!(v & 0xffff_ffff, next[p], "producer {p}: lost or reordered");
                    next[p] += 1;
                    got += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let pauser = {
        let (ch, stop) = (ch.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Acquire) {
                ch.command(command::PAUSE);
                std::thread::sleep(Duration::from_micros(300));
                ch.command(command::RUN);
                std::thread::sleep(Duration::from_millis(2));
            }
            ch.command(command::RUN);
        })
    };
    for t in callers.into_iter().chain(senders) {
        t.join().unwrap();
    }
    receiver.join().unwrap();
    stop.store(true, Release);
    pauser.join().unwrap();

    // The abandoned calls' replies are discarded by the driver.
    assert_eq!(shut_down_and_settle(&ch, kernel), 4 * N);
    drop(driver);
}

/// Shuts the kernel down as the facade does (close, wait for publication, Terminate,
/// join), checks that every accepted request was answered, and waits until every reply
/// slot is released (the abandoned calls' too). Returns the number accepted.
fn shut_down_and_settle(ch: &Channel, kernel: Box<dyn gyre_core::KernelInstance>) -> u64 {
    let accepted = ch.close();
    while !ch.all_published() {
        std::thread::yield_now();
    }
    ch.command(command::TERMINATE);
    while !kernel.is_finished() {
        std::thread::sleep(Duration::from_micros(200));
    }
    kernel.join().unwrap();
    let cb = ch.region().control();
    assert_eq!(
        cb.k2h_head.load(Acquire),
        accepted,
        "every accepted request answered"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while cb.k2h_tail.load(Acquire) < accepted {
        assert!(std::time::Instant::now() < deadline, "reply slots leaked");
        std::thread::sleep(Duration::from_millis(1));
    }
    accepted
}

/// Waits for the reply of `index` as an async task would, on this thread: polls, and
/// parks until its waker unparks it. `give_up`: drops the wait after the first pending
/// poll, as a dropped future does.
fn wait_async(ch: &Channel, index: u64, give_up: bool) -> Option<u64> {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let (mut registered, mut spun) = (false, false);
    loop {
        match ch.poll_reply(
            index,
            &mut cx,
            &mut registered,
            &mut spun,
            Duration::ZERO,
            value,
        ) {
            std::task::Poll::Ready(r) => return Some(r.unwrap()),
            std::task::Poll::Pending if give_up => {
                ch.abandon(index, registered);
                return None;
            }
            std::task::Poll::Pending => {
                let t = std::time::Instant::now();
                std::thread::park_timeout(Duration::from_secs(10));
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{index}: never woken"
                );
            }
        }
    }
}

/// The reply bell (`gyre_core::channel::bell`) with real threads: async waiters on four
/// threads (some dropping their wait) and a blocking caller, all woken by the kernel's
/// thread after each batch. No completion driver runs, so the bell alone must wake
/// everyone and release the abandoned calls' slots. Every reply reaches its caller and
/// every slot is released. Under ThreadSanitizer (`scripts/test.sh`) this checks the
/// bell's wake-ups between the kernel's thread and the waiters' threads.
#[test]
fn async_waiters_under_a_reply_bell_are_all_woken() {
    let region = Arc::new(SharedRegion::new_host(Geometry::new(16, 128, 8).unwrap(), 0).unwrap());
    let bell = Arc::new(ReplyBell::new());
    let kernel = gyre_cpu::CpuBackend::new()
        .launch(region.clone(), &echo_spec(Some(bell.clone())))
        .unwrap();
    let ch = Arc::new(Channel::new(region.clone(), "bell"));
    bell.attach(&ch);
    let idle = IdleStrategy::default();
    let threads: Vec<_> = (0..5u64)
        .map(|p| {
            let ch = ch.clone();
            std::thread::spawn(move || {
                for s in 0..N / 2 {
                    let v = (p << 32) | s;
                    let i = publish(&ch, Kind::Call, v);
                    if p == 4 {
                        assert_eq!(ch.wait_blocking(i, &idle, None, value).unwrap(), v);
                    } else if let Some(r) = wait_async(&ch, i, s % 40 == 0) {
                        assert_eq!(r, v);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(shut_down_and_settle(&ch, kernel), 5 * (N / 2));
}
