//! The CPU kernel loop, one step at a time: validation at start, protocol errors in
//! request slots, handler misbehaviour, commands and the host-heartbeat watchdog.

use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::Duration;

use gyre_abi::{command, error, state};
use gyre_core::channel::{Channel, Kind};
use gyre_core::region::RingId;
use gyre_core::ring::Geometry;
use gyre_core::{IdleStrategy, SharedRegion};
use gyre_cpu::Stepper;

fn region(timeout_ms: u32) -> Arc<SharedRegion> {
    Arc::new(SharedRegion::new_host(Geometry::new(4, 128, 4).unwrap(), timeout_ms).unwrap())
}

fn status_of(ch: &Channel, idx: u64) -> (u32, Vec<u8>) {
    ch.wait_blocking(idx, &IdleStrategy::BusySpin, None, |r| {
        Ok((r.meta.status, r.payload.to_vec()))
    })
    .unwrap()
}

/// `n` echo calls of `msg`, each published, answered by one step and taken (released).
fn answer_one_by_one(ch: &Channel, k: &mut Stepper<'_>, n: usize, msg: &[u8]) {
    for _ in 0..n {
        let i = ch.try_publish(Kind::Call, 1, msg).unwrap();
        assert_eq!(k.step(), Some(1));
        assert_eq!(status_of(ch, i).0, error::NONE);
    }
}

#[test]
fn bad_magic_and_abi_version_fault_at_start() {
    let r = region(0);
    r.control().magic.store(0xdead_beef, Release);
    assert!(Stepper::new(&r, &gyre_core::kernels::echo).is_none());
    assert_eq!(r.control().state.load(Acquire), state::FAULTED);
    assert_eq!(r.control().error_code.load(Acquire), error::BAD_MAGIC);

    let r = region(0);
    r.control()
        .abi_version
        .store(gyre_abi::ABI_VERSION + 1, Release);
    assert!(Stepper::new(&r, &gyre_core::kernels::echo).is_none());
    assert_eq!(r.control().error_code.load(Acquire), error::BAD_ABI_VERSION);

    let r = region(0);
    r.control().capacity.store(3, Release);
    assert!(Stepper::new(&r, &gyre_core::kernels::echo).is_none());
    assert_eq!(r.control().error_code.load(Acquire), error::BAD_GEOMETRY);
}

#[test]
fn wrong_sequence_under_head_gets_an_error_reply_and_kernel_keeps_serving() {
    let r = region(0);
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    let i = ch.try_publish(Kind::Call, 1, b"ok?").unwrap();
    // Corrupt the published slot: its sequence no longer matches its index.
    r.slot(RingId::Request, i).sequence().store(42, Release);
    // The head is lazy: it passes the slot once the host syncs it (the completion driver
    // does, about every millisecond), and then the slot contradicts it (K4).
    assert_eq!(ch.sync_head(), 1);
    assert_eq!(k.step(), Some(1));
    assert_eq!(status_of(&ch, i).0, error::BAD_SEQUENCE);
    let j = ch.try_publish(Kind::Call, 1, b"fine").unwrap();
    assert_eq!(k.step(), Some(1));
    assert_eq!(status_of(&ch, j), (error::NONE, b"fine".to_vec()));
    let t = gyre_core::telemetry::read_consistent(r.telemetry(), 8).unwrap();
    assert_eq!((t.messages_in, t.errors), (2, 1));
}

#[test]
fn length_beyond_payload_is_rejected_not_processed() {
    let r = region(0);
    static CALLED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let h = |_: u32, req: &[u8], out: &mut [u8]| -> Result<usize, u32> {
        CALLED.fetch_add(1, Release);
        out[..req.len()].copy_from_slice(req);
        Ok(req.len())
    };
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    let i = ch.try_publish(Kind::Call, 1, b"x").unwrap();
    // Rewrite the length field under the published sequence (a corrupt producer).
    let s = r.slot(RingId::Request, i);
    // SAFETY: single-threaded test; the kernel has not looked at the slot yet.
    let mut m = unsafe { s.read_meta() };
    m.len = 4096;
    // SAFETY: as above.
    unsafe { s.write_meta(&m) };
    assert_eq!(k.step(), Some(1));
    assert_eq!(status_of(&ch, i).0, error::BAD_LENGTH);
    assert_eq!(
        CALLED.load(Acquire),
        0,
        "the handler never saw the corrupt request"
    );
}

#[test]
fn handler_reply_longer_than_payload_is_bad_length() {
    let r = region(0);
    let h = |_: u32, _: &[u8], _: &mut [u8]| -> Result<usize, u32> { Ok(10_000) };
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    let i = ch.try_publish(Kind::Call, 1, b"x").unwrap();
    k.step();
    assert_eq!(status_of(&ch, i).0, error::BAD_LENGTH);
}

/// The handler's answer crosses into the C loop as one word (`answer_word`): every kind
/// of answer keeps its meaning there.
#[test]
fn handler_answers_keep_their_status_and_length_through_the_kernel_loop() {
    let r = region(0);
    // The request's first byte picks the answer.
    let h = |_: u32, req: &[u8], out: &mut [u8]| -> Result<usize, u32> {
        out[..3].copy_from_slice(b"abc");
        match req[0] {
            0 => Ok(3),
            1 => Ok(0),
            2 => Ok(usize::MAX), // beyond u32 as well as the slot
            // Beyond u32, whose low 32 bits are a short length: clamped, not truncated.
            3 => Ok(usize::try_from((1u64 << 32) + 3).unwrap_or(usize::MAX)),
            4 => Err(0),
            5 => Err(error::HANDLER_PANIC),
            6 => Err(error::UNKNOWN_TYPE),
            7 => Err(error::USER_BASE + 9),
            _ => panic!("the handler panics"),
        }
    };
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    let want: [(u32, &[u8]); 8] = [
        (error::NONE, b"abc"),
        (error::NONE, b""),
        (error::BAD_LENGTH, b""),
        (error::BAD_LENGTH, b""),
        (error::HANDLER_REJECTED, b""),
        (error::HANDLER_REJECTED, b""),
        (error::UNKNOWN_TYPE, b""),
        (error::USER_BASE + 9, b""),
    ];
    for (pick, (status, payload)) in want.iter().enumerate() {
        let i = ch.try_publish(Kind::Call, 1, &[pick as u8]).unwrap();
        assert_eq!(k.step(), Some(1));
        assert_eq!(
            status_of(&ch, i),
            (*status, payload.to_vec()),
            "answer {pick}"
        );
    }
    assert_eq!(r.control().state.load(Acquire), state::ACTIVE);
    // A panic is the one answer that faults the kernel: its request is answered
    // HANDLER_PANIC and the kernel stops with that code.
    let i = ch.try_publish(Kind::Call, 1, &[8]).unwrap();
    assert_eq!(k.step(), None);
    assert_eq!(status_of(&ch, i).0, error::HANDLER_PANIC);
    assert_eq!(r.control().state.load(Acquire), state::FAULTED);
    assert_eq!(r.control().error_code.load(Acquire), error::HANDLER_PANIC);
}

#[test]
fn pause_resume_terminate_drain() {
    let r = region(0);
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    ch.command(command::PAUSE);
    ch.try_publish(Kind::Send, 1, b"a").unwrap();
    assert_eq!(k.step(), Some(0));
    assert_eq!(r.control().state.load(Acquire), state::PAUSED);
    ch.command(command::RUN);
    ch.try_publish(Kind::Send, 1, b"b").unwrap();
    ch.command(command::TERMINATE);
    // Draining answers both, then terminates.
    assert_eq!(k.step(), Some(2));
    assert_eq!(r.control().state.load(Acquire), state::DRAINING);
    assert_eq!(k.step(), None);
    assert_eq!(r.control().state.load(Acquire), state::TERMINATED);
    assert_eq!(r.control().error_code.load(Acquire), error::NONE);
}

#[test]
fn stale_host_heartbeat_terminates_the_kernel() {
    let r = region(5);
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &h).unwrap();
    assert_eq!(k.step(), Some(0));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(k.step(), None);
    assert_eq!(r.control().state.load(Acquire), state::TERMINATED);
    assert_eq!(
        r.control().error_code.load(Acquire),
        error::HOST_HEARTBEAT_STALE
    );
}

#[test]
fn live_host_heartbeat_keeps_the_kernel_running() {
    let r = region(50);
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    for _ in 0..10 {
        ch.heartbeat();
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(k.step(), Some(0));
    }
    assert_eq!(r.control().state.load(Acquire), state::ACTIVE);
}

/// K3 of a plain kernel (not a pipeline stage): a published request's reply slot is free
/// by the host's claim rule, so the kernel does not read `k2h_tail` for it. A claim made
/// under a released lap is answered even when `k2h_tail` reads a lap behind afterwards
/// (here: rewritten, as a corruption would), where a kernel bounding its run by
/// `k2h_tail` would wait on it for good.
#[test]
fn a_plain_kernel_takes_reply_space_from_the_claim_rule() {
    let r = region(0);
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    answer_one_by_one(&ch, &mut k, 4, b"lap");
    assert_eq!(
        r.control().k2h_tail.load(Acquire),
        4,
        "the first lap released"
    );
    let i = ch.try_publish(Kind::Call, 1, b"next").unwrap();
    assert_eq!(i, 4);
    r.control().k2h_tail.store(0, Release);
    assert_eq!(k.step(), Some(1), "the claimed request was not answered");
    r.control().k2h_tail.store(4, Release);
    assert_eq!(status_of(&ch, i), (error::NONE, b"next".to_vec()));
}

/// A corrupt slot arriving when the kernel's cached release index is a full lap behind
/// must still be answered (the kernel re-reads `k2h_tail`), not left unanswered forever.
#[test]
fn bad_sequence_after_a_full_lap_is_still_answered() {
    let r = region(0);
    let h = gyre_core::kernels::echo;
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    answer_one_by_one(&ch, &mut k, 4, b"x");
    let i = ch.try_publish(Kind::Call, 1, b"bad").unwrap();
    r.slot(RingId::Request, i).sequence().store(999, Release);
    assert_eq!(
        ch.sync_head(),
        i + 1,
        "a corrupt sequence counts as written"
    );
    let mut answered = 0;
    for _ in 0..1000 {
        answered += k.step().unwrap();
        if answered > 0 {
            break;
        }
    }
    assert_eq!(answered, 1, "the corrupt request was never answered");
    assert_eq!(status_of(&ch, i).0, error::BAD_SEQUENCE);
}

#[test]
fn handler_time_is_nanoseconds_between_the_handlers_sleep_and_the_wall_clock() {
    // The C11 port times batches with the TSC, converted at a rate measured against
    // CLOCK_MONOTONIC. Bounds that hold on any machine, however loaded: each handler
    // sleeps at least 2 ms, and the handler time cannot exceed the wall time around it.
    let r = Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 4).unwrap(), 0).unwrap());
    let h = |_: u32, req: &[u8], out: &mut [u8]| -> Result<usize, u32> {
        std::thread::sleep(Duration::from_millis(2));
        out[..req.len()].copy_from_slice(req);
        Ok(req.len())
    };
    let mut k = Stepper::new(&r, &h).unwrap();
    let ch = Channel::new(r.clone(), "t");
    let start = std::time::Instant::now();
    for _ in 0..3 {
        let i = ch.try_publish(Kind::Call, 1, b"zz").unwrap();
        assert_eq!(k.step(), Some(1));
        assert_eq!(status_of(&ch, i).0, error::NONE);
    }
    let wall = start.elapsed();
    let t = gyre_core::telemetry::read_consistent(r.telemetry(), 8).unwrap();
    assert!(t.handler_ns_total >= 3 * 2_000_000, "{t:?}");
    assert!(
        u128::from(t.handler_ns_total) <= wall.as_nanos(),
        "{t:?} in {wall:?}"
    );
    assert!(t.handler_ns_max >= 2_000_000, "{t:?}");
}
