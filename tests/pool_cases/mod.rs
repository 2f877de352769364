//! The kernel-pool cases that every backend runs (`docs/pools.md`), written once: the
//! CPU backend's binary (`tests/pool.rs`) and OpenCL's (`tests/pool_opencl.rs`, on PoCL
//! in CI) call them with their [`Target`], after their own guards. Members run the echo
//! built-in or a portable handler (`#[gyre::handler]`), so one spec runs everywhere.
//! What only one backend has (the CPU backend's least-outstanding picks and fault table,
//! OpenCL's compute-unit limit) stays in its own binary. A binary that runs them
//! declares `mod wait` (`tests/support/wait.rs`) at its root.

#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use gyre::{
    codes,
    pool::{KernelPool, PoolOptions, PoolSpec},
    Backend, Error, KernelSpec, KernelState, Runtime,
};

// `support/wait.rs`, which every binary that runs these cases declares at its root.
use crate::wait::eventually;

/// Where a case runs.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The CPU backend.
    Cpu,
    /// An OpenCL device (platform, device).
    OpenCl(usize, usize),
}

impl Target {
    pub fn backend(self) -> Backend {
        match self {
            Target::Cpu => Backend::Cpu,
            Target::OpenCl(platform, device) => Backend::OpenCl { platform, device },
        }
    }

    pub fn rt(self) -> Runtime {
        Runtime::builder()
            .backend(self.backend())
            .build()
            .expect("runtime")
    }
}

/// x -> (x << 8) / (x % 16): a division by zero (a panic, `HANDLER_PANIC`, the member
/// faults) for every multiple of 16.
#[gyre::handler]
pub fn fragile(x: u64) -> u64 {
    (x << 8) / (x % 16)
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("tokio")
}

/// A key that `pool` sends to member `member`.
fn key_of<Req: gyre::Pod, Resp: gyre::Pod>(pool: &KernelPool<Req, Resp>, member: usize) -> u64 {
    (0..)
        .find(|&k| pool.member_for_key(k) == Some(member))
        .expect("a key")
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

/// Keyed calls, each to its key's member, reach both members of a pool of two and are
/// answered; then plain calls.
pub fn keyed_calls_reach_every_member(t: Target) {
    let pool = t
        .rt()
        .launch(PoolSpec::new(
            KernelSpec::<u64, u64>::echo(),
            PoolOptions::new(2),
        ))
        .expect("pool");
    for k in pool.members() {
        assert_eq!(k.backend(), t.backend());
    }
    let keys: Vec<u64> = (0..64).collect();
    let replies = tokio().block_on(async {
        let calls: Vec<_> = keys.iter().map(|&k| pool.call_keyed(k, k * 10)).collect();
        let mut out = Vec::new();
        for c in calls {
            out.push(c.await);
        }
        out
    });
    for (k, r) in keys.iter().zip(replies) {
        assert_eq!(r.expect("reply"), k * 10);
    }
    // Telemetry reaches the host on the kernel's timer, not with each reply.
    for k in pool.members() {
        eventually(&format!("{} to count a reply", k.name()), || {
            k.telemetry().expect("telemetry").messages_out > 0
        });
    }
    for i in 0..100 {
        assert_eq!(pool.call_blocking(i).expect("call"), i);
    }
    pool.shutdown_blocking().expect("shutdown");
}

/// A member whose handler panics faults; the next call with its key finds it stopped
/// and a new member takes its slot, on the same backend, while the other member, paused
/// with 20 calls sent to it, loses none of them.
pub fn a_member_that_faults_is_replaced_and_the_other_loses_nothing(t: Target) {
    let pool = t
        .rt()
        .launch(PoolSpec::new(
            KernelSpec::portable(fragile),
            PoolOptions::new(2),
        ))
        .expect("pool");
    let (k0, k1) = (key_of(&pool, 0), key_of(&pool, 1));
    let members = pool.members();
    members[1].pause();
    eventually("the pause", || members[1].state() == KernelState::Paused);
    let tokio = tokio();
    // 16 i + 1 never divides by zero: its answer is itself << 8.
    let held_x = |i: u64| 16 * i + 1;
    let mut held: Vec<_> = (0..20).map(|i| pool.call_keyed(k1, held_x(i))).collect();
    send_all(&tokio, &mut held);
    assert_eq!(pool.outstanding()[1], 20);
    match pool.call_keyed_blocking(k0, 0) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    eventually("the fault", || {
        matches!(members[0].state(), KernelState::Faulted { .. })
    });
    assert_eq!(pool.call_keyed_blocking(k0, 5).expect("replacement"), 256);
    assert_eq!(pool.stats().replaced, 1);
    assert_eq!(pool.members()[0].backend(), t.backend());
    members[1].resume();
    let replies = tokio.block_on(async {
        let mut out = Vec::new();
        for c in held {
            out.push(c.await);
        }
        out
    });
    for (i, r) in (0..20u64).zip(replies) {
        assert_eq!(r.expect("held call"), held_x(i) << 8, "{i}");
    }
    pool.shutdown_blocking().expect("shutdown");
}

/// A pool over two runtimes, the CPU backend's and `t`'s: slot 0 on the CPU, slot 1 on
/// `t`; keyed calls reach both, and a member that stopped is replaced on its slot's
/// runtime.
pub fn a_pool_spans_runtimes_and_replaces_in_place(t: Target) {
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime");
    let pool = Runtime::launch_across(
        &[cpu, t.rt()],
        PoolSpec::new(KernelSpec::<u64, u64>::echo(), PoolOptions::new(2)),
    )
    .expect("pool");
    let backends: Vec<Backend> = pool.members().iter().map(|k| k.backend()).collect();
    assert_eq!(backends, [Backend::Cpu, t.backend()]);
    for i in 0..200 {
        assert_eq!(pool.call_keyed_blocking(i, i).expect("call"), i);
    }
    // Telemetry reaches the host on the kernel's timer, not with each reply.
    for k in pool.members() {
        eventually(&format!("{} to count a reply", k.name()), || {
            k.telemetry().expect("telemetry").messages_out > 0
        });
    }
    let key = key_of(&pool, 1);
    pool.members()[1].shutdown_blocking().expect("shutdown");
    assert_eq!(pool.call_keyed_blocking(key, 3).expect("replacement"), 3);
    assert_eq!(
        pool.members()[1].backend(),
        t.backend(),
        "replaced on its slot's runtime"
    );
    assert_eq!(pool.stats().replaced, 1);
    pool.shutdown_blocking().expect("shutdown");
}
