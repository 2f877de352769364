//! Bridge tests against a hand-written "kernel" that works on the device region directly.

use core::sync::atomic::Ordering::{Acquire, Release};
use core::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use gyre_abi::{error, state};

use super::*;
use crate::channel::{Channel, Kind};
use crate::ring::slot::SlotMeta;
use crate::telemetry::read_consistent;

struct Rig {
    dev: Arc<HostDeviceMemory>,
    bridge: RingBufferBridge,
    ch: Channel,
}

fn rig(cap: u32) -> Rig {
    rig_batch(cap, 1)
}

fn rig_batch(cap: u32, batch: u32) -> Rig {
    let g = Geometry::new(cap, 128, batch).unwrap();
    let dev = Arc::new(HostDeviceMemory::new(g, 0).unwrap());
    let mirror = Arc::new(SharedRegion::new_host(g, 0).unwrap());
    let bridge = RingBufferBridge::new(mirror.clone(), dev.clone()).unwrap();
    Rig {
        dev,
        bridge,
        ch: Channel::new(mirror, "bridge-test"),
    }
}

/// The fake kernel: answers every request below the device's head, echoing the payload
/// with its bytes incremented, then publishes the replies' head.
fn answer_all(dev: &SharedRegion) -> u64 {
    let cb = dev.control();
    let head = cb.h2k_head.load(Acquire);
    let mut i = cb.k2h_head.load(Acquire);
    while i < head {
        let rq = dev.slot(RingId::Request, i);
        assert_eq!(
            rq.sequence().load(Acquire),
            i + 1,
            "request {i} copied whole"
        );
        // SAFETY: the fake kernel owns request i (below the head) and reply i.
        unsafe {
            let m = rq.read_meta();
            let p: Vec<u8> = rq
                .payload(m.len as usize)
                .iter()
                .map(|b| b.wrapping_add(1))
                .collect();
            let rs = dev.slot(RingId::Reply, i);
            rs.write_meta(&SlotMeta {
                correlation_id: m.correlation_id,
                len: m.len,
                ..SlotMeta::default()
            });
            core::ptr::copy_nonoverlapping(p.as_ptr(), rs.payload_ptr(), p.len());
            rs.sequence().store(i + 1, Release);
        }
        i += 1;
    }
    cb.h2k_tail.store(head, Release);
    cb.k2h_head.store(head, Release);
    head
}

fn slot_copies_down(s: &TransferStats) -> u64 {
    s.h2d_copies - s.pushes
}

fn slot_copies_up(s: &TransferStats) -> u64 {
    s.d2h_copies - s.pulls - 3 * s.telemetry_reads
}

#[test]
fn init_writes_the_control_block_down() {
    let r = rig(8);
    r.dev.region().control().magic.store(0, Release);
    r.bridge.init().unwrap();
    assert_eq!(
        r.dev.region().control().magic.load(Acquire),
        gyre_abi::MAGIC
    );
    // An unchanged line is not copied again.
    let before = r.bridge.stats();
    r.bridge.push().unwrap();
    assert_eq!(r.bridge.stats().h2d_copies, before.h2d_copies);
}

#[test]
fn one_copy_per_range_and_two_at_the_wrap() {
    // A batch of the whole ring: every pull below reads all ready replies in its one
    // speculative window.
    let r = rig_batch(8, 8);
    for k in 0..6u8 {
        r.ch.try_publish(Kind::Send, 1, &[k; 5]).unwrap();
    }
    r.bridge.push().unwrap();
    let s = r.bridge.stats();
    assert_eq!((slot_copies_down(&s), s.slots_down, s.pushes), (1, 6, 1));
    assert_eq!(s.h2d_bytes, 6 * 128 + 64);

    assert_eq!(answer_all(r.dev.region()), 6);
    assert!(r.bridge.pull().unwrap());
    let s = r.bridge.stats();
    assert_eq!((slot_copies_up(&s), s.slots_up), (1, 6));
    for k in 0..6u8 {
        let got = r.ch.try_recv(|v| Ok(v.payload.to_vec())).unwrap();
        assert_eq!(got, Some(vec![k + 1; 5]));
    }

    // Indices 6..11 wrap at 8: two slot copies each way.
    for k in 6..11u8 {
        r.ch.try_publish(Kind::Send, 1, &[k; 3]).unwrap();
    }
    r.bridge.push().unwrap();
    let s = r.bridge.stats();
    assert_eq!((slot_copies_down(&s), s.slots_down), (3, 11));
    answer_all(r.dev.region());
    r.bridge.pull().unwrap();
    let s = r.bridge.stats();
    assert_eq!((slot_copies_up(&s), s.slots_up), (3, 11));
    for k in 6..11u8 {
        let got = r.ch.try_recv(|v| Ok(v.payload.to_vec())).unwrap();
        assert_eq!(got, Some(vec![k + 1; 3]));
    }
    // The host released everything: the next push carries k2h_tail down.
    r.bridge.push().unwrap();
    assert_eq!(r.dev.region().control().k2h_tail.load(Acquire), 11);
}

#[test]
fn replies_appear_only_when_pulled() {
    let r = rig(4);
    let i = r.ch.try_publish(Kind::Call, 1, b"ab").unwrap();
    r.bridge.push().unwrap();
    answer_all(r.dev.region());
    assert_eq!(r.ch.probe(i), crate::channel::Probe::Pending);
    assert_eq!(r.ch.region().control().k2h_head.load(Acquire), 0);
    r.bridge.pull().unwrap();
    assert_eq!(r.ch.probe(i), crate::channel::Probe::Ready);
    assert_eq!(r.ch.region().control().k2h_head.load(Acquire), 1);
}

#[test]
fn telemetry_is_read_consistently_and_republished() {
    let r = rig(4);
    let mut w = TelemetryWriter::default();
    w.acc.messages_in = 42;
    w.acc.errors = 3;
    w.acc.state = state::ACTIVE;
    w.publish(r.dev.region().telemetry());
    r.bridge.pull_telemetry().unwrap();
    let snap = read_consistent(r.ch.region().telemetry(), 16).unwrap();
    assert_eq!(
        (snap.messages_in, snap.errors, snap.state),
        (42, 3, state::ACTIVE)
    );
    assert_eq!(r.bridge.stats().telemetry_reads, 1);
}

#[test]
fn a_telemetry_line_being_written_is_not_taken() {
    let r = rig(4);
    let mut w = TelemetryWriter::default();
    w.acc.messages_in = 7;
    w.publish(r.dev.region().telemetry());
    r.bridge.pull_telemetry().unwrap();
    // A writer is mid-update: the sequence is odd and the counters half written.
    let dev = r.dev.region().telemetry();
    let odd = dev.seq.load(Acquire) + 1;
    dev.seq.store(odd, Release);
    dev.messages_in.store(8, Release);
    r.bridge.pull_telemetry().unwrap();
    let snap = read_consistent(r.ch.region().telemetry(), 16).unwrap();
    assert_eq!(snap.messages_in, 7, "a torn line was republished");
    // The write completes: the next read takes it.
    dev.seq.store(odd + 1, Release);
    r.bridge.pull_telemetry().unwrap();
    let snap = read_consistent(r.ch.region().telemetry(), 16).unwrap();
    assert_eq!(snap.messages_in, 8);
    assert_eq!(r.bridge.stats().telemetry_reads, 3);
}

#[test]
fn a_head_beyond_capacity_is_a_protocol_error_and_faults_the_mirror() {
    let r = rig(4);
    r.dev.region().control().k2h_head.store(99, Release);
    let e = r.bridge.pull().unwrap_err();
    assert!(matches!(e, Error::Protocol { found: 99, .. }), "{e}");
    let cb = r.ch.region().control();
    assert_eq!(cb.state.load(Acquire), state::FAULTED);
    assert_eq!(cb.error_code.load(Acquire), error::TRANSFER_FAILED);
    // Sticky: later calls fail with the same error.
    assert_eq!(r.bridge.push().unwrap_err(), e);
    assert!(matches!(
        r.ch.check_stopped(),
        Some(Error::KernelFaulted {
            code: error::TRANSFER_FAILED,
            ..
        })
    ));
}

/// An engine that fails every copy after the first `ok` ones.
struct Failing {
    inner: HostDeviceMemory,
    ok: AtomicUsize,
}

// SAFETY: forwards to HostDeviceMemory or fails without touching memory.
unsafe impl CopyEngine for Failing {
    fn name(&self) -> &'static str {
        "failing"
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        if self.ok.fetch_sub(1, Relaxed) == 0 {
            self.ok.store(0, Relaxed);
            return Err(Error::Transfer {
                engine: "failing",
                op: "copy host to device",
                offset: dst,
                len,
                source: crate::Cause::msg("CUDA_ERROR_ILLEGAL_ADDRESS (700)"),
            });
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.copy_h2d(dst, src, len) }
    }
    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.copy_d2h(dst, src, len) }
    }
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

#[test]
fn a_failed_copy_fails_waiters_instead_of_hanging_them() {
    let g = Geometry::new(4, 128, 1).unwrap();
    let eng = Arc::new(Failing {
        inner: HostDeviceMemory::new(g, 0).unwrap(),
        ok: AtomicUsize::new(1),
    });
    let mirror = Arc::new(SharedRegion::new_host(g, 0).unwrap());
    let bridge = Arc::new(RingBufferBridge::new(mirror.clone(), eng).unwrap());
    let agent = BridgeAgent::start(bridge, TransferStrategy::Sync, "t").unwrap();
    let ch = Channel::new(mirror, "t").with_transfer(agent.clone());
    let i = ch.try_publish(Kind::Call, 1, b"x").unwrap();
    let e = ch
        .wait_blocking(i, &crate::IdleStrategy::BusySpin, None, |v| {
            Ok(v.payload.to_vec())
        })
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::KernelFaulted {
                code: error::TRANSFER_FAILED,
                ..
            }
        ),
        "{e}"
    );
    let f = agent.bridge().failure().unwrap().to_string();
    assert!(f.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{f}");
}

/// Many producers and a fake kernel polling the device concurrently: the kernel never
/// sees a head before the slots it covers, under every copy strategy.
#[test]
fn doorbell_never_precedes_its_slots() {
    for strategy in [
        TransferStrategy::Sync,
        TransferStrategy::Async,
        TransferStrategy::dma_polling(Duration::from_micros(20)).unwrap(),
    ] {
        let g = Geometry::new(16, 128, 1).unwrap();
        let dev = Arc::new(HostDeviceMemory::new(g, 0).unwrap());
        let mirror = Arc::new(SharedRegion::new_host(g, 0).unwrap());
        let bridge = Arc::new(RingBufferBridge::new(mirror.clone(), dev.clone()).unwrap());
        let agent = BridgeAgent::start(bridge, strategy, "stress").unwrap();
        let ch = Arc::new(Channel::new(mirror, "stress").with_transfer(agent.clone()));
        const PER: u64 = 2_000;
        const PRODUCERS: u64 = 3;
        let done = Arc::new(AtomicBool::new(false));
        let kernel = {
            let dev = dev.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut answered = 0;
                while answered < PER * PRODUCERS && !done.load(Acquire) {
                    answered = answer_all(dev.region());
                    std::thread::yield_now();
                }
                answered
            })
        };
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let ch = ch.clone();
                std::thread::spawn(move || {
                    for k in 0..PER {
                        let msg = [(p * 7 + k) as u8; 9];
                        let i = loop {
                            match ch.try_publish(Kind::Call, 1, &msg) {
                                Ok(i) => break i,
                                Err(crate::PublishError::Full) => std::thread::yield_now(),
                                Err(e) => panic!("{e:?}"),
                            }
                        };
                        let got = ch
                            .wait_blocking(i, &crate::IdleStrategy::default(), None, |v| {
                                Ok(v.payload.to_vec())
                            })
                            .unwrap();
                        assert_eq!(
                            got,
                            msg.iter().map(|b| b.wrapping_add(1)).collect::<Vec<_>>()
                        );
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        done.store(true, Release);
        assert_eq!(kernel.join().unwrap(), PER * PRODUCERS, "{strategy:?}");
        let s = agent.stats();
        assert_eq!(
            (s.slots_down, s.slots_up),
            (PER * PRODUCERS, PER * PRODUCERS)
        );
        agent.stop();
    }
}

/// The host engine as a DMA engine would behave: reading ahead (sound here, where the
/// fake kernel runs on the test's own thread between the bridge's steps).
struct ReadAhead(Arc<HostDeviceMemory>);

// SAFETY: every copy is the host engine's.
unsafe impl CopyEngine for ReadAhead {
    fn name(&self) -> &'static str {
        "read-ahead"
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.copy_h2d(dst, src, len) }
    }
    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.0.copy_d2h(dst, src, len) }
    }
    fn reads_ahead(&self) -> bool {
        true
    }
    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

#[test]
fn a_pull_of_the_host_engine_waits_for_the_line_then_for_the_slots() {
    let r = rig_batch(16, 4);
    r.bridge.set_copy_mode(CopyMode::Stream);
    r.bridge.init().unwrap();
    r.ch.try_publish(Kind::Send, 1, &[7; 4]).unwrap();
    r.bridge.push().unwrap();
    answer_all(r.dev.region());
    let before = r.bridge.stats();
    assert!(r.bridge.pull().unwrap());
    let s = r.bridge.stats();
    assert_eq!(s.syncs - before.syncs, 2, "no reading ahead of the kernel");
    assert_eq!(s.slots_up, 1);
}

#[test]
fn a_push_and_a_pull_wait_once_for_up_to_a_batch() {
    let g = Geometry::new(16, 128, 4).unwrap();
    let dev = Arc::new(HostDeviceMemory::new(g, 0).unwrap());
    let mirror = Arc::new(SharedRegion::new_host(g, 0).unwrap());
    let engine = Arc::new(ReadAhead(dev.clone()));
    let r = Rig {
        dev,
        bridge: RingBufferBridge::new(mirror.clone(), engine).unwrap(),
        ch: Channel::new(mirror, "bridge-test"),
    };
    r.bridge.set_copy_mode(CopyMode::Stream);
    r.bridge.init().unwrap();
    let base = r.bridge.stats();
    // Nothing in flight: a pull copies the kernel's line (and telemetry when due), and
    // waits once.
    r.bridge.pull().unwrap();
    let s = r.bridge.stats();
    assert_eq!(s.syncs - base.syncs, 1);
    assert_eq!(
        slot_copies_up(&s),
        0,
        "no reply slot is copied with none in flight"
    );
    // Three requests: one push, one wait; the kernel answers; one pull, one wait, and
    // one slot copy (the line and the replies are issued together).
    for k in 0..3u8 {
        r.ch.try_publish(Kind::Send, 1, &[k; 4]).unwrap();
    }
    let before = r.bridge.stats();
    r.bridge.push().unwrap();
    let s = r.bridge.stats();
    assert_eq!(s.syncs - before.syncs, 1, "one wait per push");
    assert_eq!(
        s.h2d_copies - before.h2d_copies,
        2,
        "the slots, then the doorbell"
    );
    answer_all(r.dev.region());
    let before = r.bridge.stats();
    assert!(r.bridge.pull().unwrap());
    let s = r.bridge.stats();
    assert_eq!(s.syncs - before.syncs, 1, "one wait per pull");
    assert_eq!(slot_copies_up(&s) - slot_copies_up(&before), 1);
    assert_eq!(s.slots_up, 3);
    // Requests in flight but not answered yet: the speculative copy is ignored.
    for k in 3..9u8 {
        r.ch.try_publish(Kind::Send, 1, &[k; 4]).unwrap();
    }
    r.bridge.push().unwrap();
    r.bridge.pull().unwrap();
    assert_eq!(
        r.bridge.stats().slots_up,
        3,
        "nothing published above k2h_head"
    );
    // Six answered, more than a batch: a second wait for the rest, and all six arrive.
    answer_all(r.dev.region());
    let before = r.bridge.stats();
    assert!(r.bridge.pull().unwrap());
    let s = r.bridge.stats();
    assert_eq!(s.syncs - before.syncs, 2);
    assert_eq!(s.slots_up, 9);
    let mut got = Vec::new();
    while let Some(v) = r.ch.try_recv(|v| Ok(v.payload[0])).unwrap() {
        got.push(v);
    }
    assert_eq!(
        got,
        (1..10u8).collect::<Vec<_>>(),
        "every reply once, in order"
    );
}
