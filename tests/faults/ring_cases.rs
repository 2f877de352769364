//! Fault cases on the rings themselves: a stalled consumer, corrupt slot headers, dropped
//! futures, a producer dying inside its claim.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;
use std::task::Poll;

use gyre::{Error, KernelSpec, KernelState, TrySendError};
use gyre_abi::error as code;
use gyre_core::channel::Kind;
use gyre_core::region::RingId;

use super::{
    assert_all_released, counters, drain_replies, eventually, host_handlers, poll_once, rt, Target,
};

/// The consumer stops taking replies: the reply ring fills, the kernel stops (it never
/// overwrites an unreleased reply), producers see back-pressure (`Full`, a pending
/// `send()`), and once the consumer resumes every reply is exactly its request, per
/// producer in order, none missing, none twice. Repeated stalls.
pub fn stalled_consumer(b: Target) {
    const P: u64 = 3;
    const N: u64 = 300;
    const CAP: u64 = 16;
    let k = rt(b)
        .launch(KernelSpec::<[u64; 2], [u64; 2]>::echo().capacity(CAP as usize))
        .unwrap();
    let fulls = Arc::new([(); P as usize].map(|_| std::sync::atomic::AtomicU64::new(0)));
    let producers: Vec<_> = (0..P)
        .map(|p| {
            let (k, fulls) = (k.clone(), fulls.clone());
            std::thread::spawn(move || {
                for s in 0..N {
                    loop {
                        match k.try_send([p, s]) {
                            Ok(()) => break,
                            Err(TrySendError::Full(m)) => {
                                assert_eq!(m, [p, s], "a refused message comes back");
                                fulls[p as usize].fetch_add(1, Relaxed);
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    let mut next = [0u64; P as usize];
    let mut received = 0u64;
    let mut stalls = 0;
    while received < P * N {
        // Stall until every producer still sending has been refused since the last stall.
        let seen: Vec<u64> = fulls.iter().map(|f| f.load(Relaxed)).collect();
        let busy: Vec<usize> = (0..P as usize).filter(|&p| next[p] < N).collect();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(200);
        while std::time::Instant::now() < deadline
            && !busy.iter().all(|&p| fulls[p].load(Relaxed) > seen[p])
        {
            std::thread::yield_now();
        }
        // Stalled: nothing beyond the ring is in flight, nothing was overwritten. The
        // kernel publishes k2h_head after its replies (on a checked ring, only on its slow
        // tick), while the host takes replies by their sequences and releases them as it
        // goes: k2h_tail may run ahead of k2h_head, so the invariant is head <= tail +
        // capacity (head read first, then tail, which only grows), never a difference.
        let (claimed, _, _, k2h_head, k2h_tail) = counters(&k);
        assert!(claimed <= k2h_tail + CAP, "more than the ring accepted");
        assert!(
            k2h_head <= k2h_tail + CAP,
            "a reply overwrote an unreleased one: k2h_head {k2h_head}, k2h_tail {k2h_tail}"
        );
        if received == 0 {
            // An async send waits (it does not fail, it is not accepted) while full.
            if claimed - k2h_tail == CAP {
                let mut send = k.send([99, 99]);
                assert!(
                    poll_once(&mut send).is_pending(),
                    "send completed on a full ring"
                );
                drop(send);
                assert_eq!(
                    counters(&k).0,
                    claimed,
                    "a dropped pending send sent nothing"
                );
            }
        }
        stalls += 1;
        for _ in 0..CAP * 2 {
            if received == P * N {
                break;
            }
            let [p, s] = k.recv_blocking().unwrap();
            assert_eq!(
                s, next[p as usize],
                "producer {p}: reply lost, repeated or reordered"
            );
            next[p as usize] += 1;
            received += 1;
        }
    }
    for t in producers {
        t.join().unwrap();
    }
    assert_eq!(next, [N; P as usize]);
    assert!(stalls > 1);
    assert!(
        fulls.iter().all(|f| f.load(Relaxed) > 0),
        "back-pressure reached every producer"
    );
    assert!(k.try_recv().unwrap().is_none(), "a duplicate reply");
    k.shutdown_blocking().unwrap();
    assert_all_released(&k);
}

/// Rewrites the header of published, not yet consumed request `idx` (the kernel is paused)
/// as a faulty producer would have written it: on a checked ring its check word is
/// rewritten too, so the kernel sees a whole slot with a bad field (a slot changed after
/// its check was written is another fault: `cost_model.rs` in gyre-cpu).
fn corrupt(
    k: &gyre::Kernel<u64, u64>,
    idx: u64,
    f: impl FnOnce(&mut gyre_core::ring::slot::SlotMeta),
) {
    let ch = k.raw_channel();
    let slot = ch.region().slot(RingId::Request, idx);
    // SAFETY: `idx` is published and the kernel is paused, so nobody reads or writes the
    // slot until the resume command, which orders these writes before the kernel's reads.
    unsafe {
        let mut m = slot.read_meta();
        f(&mut m);
        slot.write_meta(&m);
        if ch.is_checked() {
            slot.write_check(slot.check_with(idx + 1, false));
        }
    }
}

/// Corrupt request headers written into the ring — a length beyond the payload, a wrong
/// sequence, a wrong correlation id — are each answered by one protocol error (counted in
/// the kernel's telemetry errors or the host's protocol errors), never processed as
/// messages, and the kernel keeps serving.
pub fn corrupted_slot_headers(b: Target) {
    let k = rt(b)
        .launch(KernelSpec::<u64, u64>::echo().capacity(32))
        .unwrap();
    assert_eq!(k.call_blocking(7).unwrap(), 7);
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    let base = k.raw_channel().claimed();
    for v in 0..8u64 {
        k.try_send(100 + v).unwrap();
    }
    let payload = k.payload() as u32;
    corrupt(&k, base + 1, |m| m.len = payload + 1);
    corrupt(&k, base + 6, |m| m.correlation_id = 999);
    k.raw_channel()
        .region()
        .slot(RingId::Request, base + 3)
        .sequence()
        .store(12_345, Release);
    k.resume();
    let protocol = |r: &gyre::Result<u64>, ring: &str, what: &str| match r {
        Err(Error::Protocol {
            ring: g, what: w, ..
        }) => *g == ring && *w == what,
        _ => false,
    };
    let items: Vec<_> = (0..8).map(|_| k.recv_blocking()).collect();
    for (i, item) in items.iter().enumerate() {
        let ok = match i {
            1 => protocol(item, "request", code::name(code::BAD_LENGTH)),
            3 => protocol(item, "request", code::name(code::BAD_SEQUENCE)),
            6 => protocol(item, "reply", "reply correlation id"),
            _ => item == &Ok(100 + i as u64),
        };
        assert!(ok, "item {i}: {item:?}");
    }
    assert!(k.try_recv().unwrap().is_none(), "one outcome per request");
    eventually("kernel-side protocol errors counted", || {
        k.telemetry().is_ok_and(|t| t.errors == 2)
    });
    assert_eq!(k.protocol_errors(), 1, "host-side protocol error counted");
    assert_eq!(k.state(), KernelState::Active, "the kernel keeps serving");
    for v in 0..100u64 {
        assert_eq!(k.call_blocking(v).unwrap(), v);
    }
    k.shutdown_blocking().unwrap();
    assert_all_released(&k);
}

/// A request whose message type the kernel does not know is answered with a protocol
/// error and never reaches the typed handler; the kernel keeps serving.
pub fn corrupted_message_type(b: Target) {
    if !host_handlers(b) {
        return;
    }
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let c = calls.clone();
    let k = rt(b)
        .launch(
            KernelSpec::from_fn("count", move |x: u64| {
                c.fetch_add(1, Relaxed);
                x + 1
            })
            .capacity(16),
        )
        .unwrap();
    assert_eq!(k.call_blocking(1).unwrap(), 2);
    k.pause();
    eventually("Paused", || k.state() == KernelState::Paused);
    let base = k.raw_channel().claimed();
    for v in 0..6u64 {
        k.try_send(v).unwrap();
    }
    corrupt(&k, base + 2, |m| m.msg_type = 0x7777);
    corrupt(&k, base + 4, |m| m.msg_type = u32::MAX);
    k.resume();
    for i in 0..6u64 {
        let item = k.recv_blocking();
        if i == 2 || i == 4 {
            assert!(
                matches!(&item, Err(Error::Protocol { ring: "request", what, .. })
                    if *what == code::name(code::UNKNOWN_TYPE)),
                "item {i}: {item:?}"
            );
        } else {
            assert_eq!(item, Ok(i + 1), "item {i}");
        }
    }
    assert!(k.try_recv().unwrap().is_none(), "one outcome per request");
    assert_eq!(
        calls.load(Relaxed),
        5,
        "the handler never saw the corrupt requests"
    );
    eventually("errors counted", || {
        k.telemetry().is_ok_and(|t| t.errors == 2)
    });
    assert_eq!(k.state(), KernelState::Active);
    assert_eq!(k.call_blocking(41).unwrap(), 42);
    k.shutdown_blocking().unwrap();
    assert_all_released(&k);
}

/// `call()` and `send()` futures dropped at every await point — never polled, waiting for
/// space, waiting for the reply (registered with the driver), with the reply published
/// but not taken, after completion — never lose, duplicate or leak a slot: every dropped
/// call's reply is discarded, a dropped pending send sent nothing, and afterwards the
/// counters show every accepted request answered and every reply slot released.
pub fn dropped_futures_every_await_point(b: Target) {
    let k = rt(b)
        .launch(
            KernelSpec::<u64, u64>::echo()
                .capacity(4)
                .async_spin(std::time::Duration::ZERO),
        )
        .unwrap();
    for round in 0..50u64 {
        let v = round * 100;
        // The previous round's dropped calls are discarded by the driver: wait for it, so
        // the ring is empty again.
        assert_all_released(&k);
        // Never polled: nothing is sent.
        let before = counters(&k).0;
        drop(k.call(v));
        drop(k.send(v));
        assert_eq!(counters(&k).0, before);

        // Waiting for space: fill the ring (paused kernel, unreleased replies).
        k.pause();
        eventually("Paused", || k.state() == KernelState::Paused);
        for i in 0..4 {
            k.try_send(v + 1 + i).unwrap();
        }
        let mut call = k.call(v + 10);
        let mut send = k.send(v + 11);
        assert!(poll_once(&mut call).is_pending());
        assert!(poll_once(&mut send).is_pending());
        let full = counters(&k).0;
        drop(call);
        drop(send);
        assert_eq!(
            counters(&k).0,
            full,
            "a future dropped while waiting sent something"
        );
        k.resume();
        for i in 0..4 {
            assert_eq!(k.recv_blocking().unwrap(), v + 1 + i);
        }

        // Accepted, waiting for the reply (kernel paused so it cannot arrive).
        k.pause();
        eventually("Paused", || k.state() == KernelState::Paused);
        let mut call = k.call(v + 20);
        assert!(poll_once(&mut call).is_pending());
        assert!(
            poll_once(&mut call).is_pending(),
            "registered with the driver"
        );
        drop(call);
        // Accepted, reply published but not taken.
        let mut call = k.call(v + 30);
        assert!(poll_once(&mut call).is_pending());
        let claimed = counters(&k).0;
        k.resume();
        eventually("reply published", || counters(&k).3 >= claimed);
        drop(call);
        // Completed: dropping is a no-op.
        let mut call = k.call(v + 40);
        let r = loop {
            if let Poll::Ready(r) = poll_once(&mut call) {
                break r;
            }
            std::thread::yield_now();
        };
        assert_eq!(r.unwrap(), v + 40);
        drop(call);
        // A send that completed is accepted: its reply must come back exactly once.
        let mut send = k.send(v + 50);
        assert!(matches!(poll_once(&mut send), Poll::Ready(Ok(()))));
        drop(send);
        assert_eq!(k.recv_blocking().unwrap(), v + 50);
        assert!(
            k.try_recv().unwrap().is_none(),
            "round {round}: a duplicate reply"
        );
    }
    // The ring of 4 still works: nothing leaked.
    for i in 0..100u64 {
        assert_eq!(k.call_blocking(i).unwrap(), i);
    }
    k.shutdown_blocking().unwrap();
    assert!(drain_replies(&k).is_empty());
    let (claimed, h2k_head, h2k_tail, k2h_head, _) = counters(&k);
    assert_eq!((h2k_head, h2k_tail, k2h_head), (claimed, claimed, claimed));
    assert_all_released(&k);
}

/// A message whose `AsRef` panics, if it is the bomb, the second time it is read (the
/// first read is the size check): the producer unwinds between its claim and its
/// publication.
struct Bomb {
    reads: std::cell::Cell<u32>,
    bytes: [u8; 8],
    bomb: bool,
}

impl Bomb {
    fn new(v: u64, bomb: bool) -> Self {
        Self {
            reads: 0.into(),
            bytes: v.to_le_bytes(),
            bomb,
        }
    }
}

impl AsRef<[u8]> for Bomb {
    fn as_ref(&self) -> &[u8] {
        let n = self.reads.get() + 1;
        self.reads.set(n);
        if self.bomb && n == 2 {
            panic!("producer dies inside its claim (injected by the fault suite)");
        }
        &self.bytes
    }
}

/// A producer thread dies (panics) between its claim and its publication: its claim is
/// published with tombstones the kernel answers with an error, other producers never
/// deadlock, the sends it had written are delivered, the tombstones are never delivered
/// (their replies are discarded), and nothing leaks.
pub fn producer_dies_mid_claim(b: Target) {
    const N: u64 = 2000;
    let k = rt(b)
        .launch(KernelSpec::<u64, u64>::echo().capacity(16))
        .unwrap();
    let start = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (1..=2u64)
        .map(|p| {
            let (k, start) = (k.clone(), start.clone());
            std::thread::spawn(move || {
                while !start.load(Acquire) {
                    std::thread::yield_now();
                }
                for s in 0..N {
                    k.send_blocking((p << 32) | s).unwrap();
                }
            })
        })
        .collect();
    let consumer = {
        let k = k.clone();
        std::thread::spawn(move || {
            let mut got = Vec::new();
            for _ in 0..2 * N + 2 {
                got.push(k.recv_blocking().unwrap());
            }
            got
        })
    };
    start.store(true, Release);
    let dying = {
        let k = k.clone();
        std::thread::spawn(move || {
            loop {
                // Fresh messages per attempt: a `Full` attempt read each one once.
                let msgs = [
                    Bomb::new(0xaaaa, false),
                    Bomb::new(0xbbbb, false),
                    Bomb::new(0xcccc, true),
                    Bomb::new(0xdddd, false),
                ];
                let r =
                    k.raw_channel()
                        .try_publish_batch(Kind::Send, gyre::kernels::ids::ECHO, &msgs);
                assert_eq!(
                    r,
                    Err(gyre_core::PublishError::Full),
                    "claimed without dying"
                );
                std::thread::yield_now();
            }
        })
    };
    assert!(dying.join().is_err(), "the producer died");
    for t in producers {
        t.join().unwrap();
    }
    let got = consumer.join().unwrap();
    let mut seen = HashSet::new();
    let mut next = [0u64; 3];
    for v in &got {
        assert!(seen.insert(*v), "duplicate {v:#x}");
        let p = (v >> 32) as usize;
        if p == 0 {
            assert!(
                [0xaaaa, 0xbbbb].contains(v),
                "a tombstone was delivered: {v:#x}"
            );
        } else {
            assert_eq!(v & 0xffff_ffff, next[p], "producer {p} lost or reordered");
            next[p] += 1;
        }
    }
    assert!(seen.contains(&0xaaaa) && seen.contains(&0xbbbb));
    assert!(k.try_recv().unwrap().is_none());
    eventually("the tombstones answered and counted", || {
        k.telemetry().is_ok_and(|t| t.errors == 2)
    });
    k.shutdown_blocking().unwrap();
    assert_all_released(&k);
}
