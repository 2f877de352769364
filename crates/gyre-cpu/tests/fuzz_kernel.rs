//! Fuzzing the kernel's consumer side (proptest, bounded: runs in CI): arbitrary bytes in
//! request slot headers and payloads, and in the host-written control-block fields the
//! kernel reads (magic, ABI version, command, host timeout, `h2k_head`, `k2h_tail`,
//! host heartbeat). The kernel loop, stepped on this thread, must never panic; every
//! reply it publishes must be the exact answer the protocol prescribes for the slot it
//! read (an error status for every malformed one: `BAD_SEQUENCE`, `BAD_LENGTH`); the
//! handler must only ever see well-formed requests; and the kernel must end in a legal
//! state with a typed error code.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

use gyre_abi::{command, error, state};
use gyre_core::region::RingId;
use gyre_core::ring::slot::SlotMeta;
use gyre_core::ring::Geometry;
use gyre_core::SharedRegion;
use gyre_cpu::Stepper;
use proptest::prelude::*;

/// One request slot as the fuzzer writes it.
#[derive(Debug, Clone)]
struct RawSlot {
    /// `None`: the valid sequence (`index + 1`); `Some`: this value.
    seq: Option<u64>,
    len: u32,
    msg_type: u32,
    flags: u32,
    correlation: u64,
    status: u32,
    payload: Vec<u8>,
}

fn raw_slot() -> impl Strategy<Value = RawSlot> {
    (
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some)],
        prop_oneof![3 => 0u32..=64, 1 => any::<u32>()],
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..=64),
    )
        .prop_map(
            |(seq, len, msg_type, flags, correlation, status, payload)| RawSlot {
                seq,
                len,
                msg_type,
                flags,
                correlation,
                status,
                payload,
            },
        )
}

/// The host-written control-block fields the kernel reads.
#[derive(Debug, Clone)]
struct HostLine {
    /// `None`: the number of slots written.
    h2k_head: Option<u64>,
    k2h_tail: u64,
    command: u32,
    host_timeout_ms: u32,
    host_heartbeat: u64,
    magic_ok: bool,
    abi_ok: bool,
    /// Corrupt the magic after this many steps (K1's run-time check).
    corrupt_magic_at: Option<usize>,
}

fn host_line() -> impl Strategy<Value = HostLine> {
    (
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some)],
        prop_oneof![4 => Just(0u64), 1 => any::<u64>()],
        prop_oneof![
            4 => Just(command::RUN),
            1 => Just(command::PAUSE),
            1 => Just(command::TERMINATE),
            1 => any::<u32>()
        ],
        prop_oneof![4 => Just(0u32), 1 => 0u32..3],
        any::<u64>(),
        prop::bool::weighted(0.95),
        prop::bool::weighted(0.95),
        prop_oneof![4 => Just(None), 1 => (0usize..20).prop_map(Some)],
    )
        .prop_map(
            |(
                h2k_head,
                k2h_tail,
                command,
                host_timeout_ms,
                host_heartbeat,
                magic_ok,
                abi_ok,
                corrupt_magic_at,
            )| HostLine {
                h2k_head,
                k2h_tail,
                command,
                host_timeout_ms,
                host_heartbeat,
                magic_ok,
                abi_ok,
                corrupt_magic_at,
            },
        )
}

fn run(
    cap_log: u32,
    batch: u32,
    slots: Vec<RawSlot>,
    host: HostLine,
    steps: usize,
) -> Result<(), TestCaseError> {
    let cap = 1u32 << cap_log;
    let g = Geometry::new(cap, 128, batch.min(cap)).unwrap();
    let payload = g.payload();
    let region = Arc::new(SharedRegion::new_host(g, host.host_timeout_ms).unwrap());
    let n = slots.len().min(cap as usize);
    for (i, s) in slots.iter().take(n).enumerate() {
        let slot = region.slot(RingId::Request, i as u64);
        // SAFETY: single-threaded; the kernel has not started.
        unsafe {
            slot.write_meta(&SlotMeta {
                correlation_id: s.correlation,
                enqueue_ns: 0,
                msg_type: s.msg_type,
                len: s.len,
                flags: s.flags,
                status: s.status,
            });
            core::ptr::copy_nonoverlapping(s.payload.as_ptr(), slot.payload_ptr(), s.payload.len());
        }
        slot.sequence()
            .store(s.seq.unwrap_or(i as u64 + 1), Release);
    }
    let cb = region.control();
    cb.h2k_head
        .store(host.h2k_head.unwrap_or(n as u64), Release);
    cb.k2h_tail.store(host.k2h_tail, Release);
    cb.command.store(host.command, Release);
    cb.host_heartbeat.store(host.host_heartbeat, Release);
    if !host.magic_ok {
        cb.magic.store(0x0bad_0bad, Release);
    }
    if !host.abi_ok {
        cb.abi_version.store(gyre_abi::ABI_VERSION + 7, Release);
    }

    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let handler = move |_: u32, req: &[u8], out: &mut [u8]| -> Result<usize, u32> {
        c.fetch_add(1, Relaxed);
        assert!(
            req.len() <= payload,
            "the handler saw a length beyond the payload"
        );
        out[..req.len()].copy_from_slice(req);
        Ok(req.len())
    };
    let Some(mut kernel) = Stepper::new(&region, &handler) else {
        prop_assert_eq!(cb.state.load(Acquire), state::FAULTED);
        let code = cb.error_code.load(Acquire);
        prop_assert!([
            error::BAD_MAGIC,
            error::BAD_ABI_VERSION,
            error::BAD_GEOMETRY
        ]
        .contains(&code));
        prop_assert!(!host.magic_ok || !host.abi_ok);
        return Ok(());
    };
    for step in 0..steps {
        if host.corrupt_magic_at == Some(step) {
            cb.magic.store(0xdead, Release);
        }
        if kernel.step().is_none() {
            break;
        }
    }

    // Every published reply is the prescribed answer to the request slot the kernel read.
    let published = cb.k2h_head.load(Acquire);
    prop_assert_eq!(
        published,
        cb.h2k_tail.load(Acquire),
        "one reply per consumed request"
    );
    let mut handled = 0u64;
    for i in published.saturating_sub(u64::from(cap))..published {
        let rs = region.slot(RingId::Reply, i);
        prop_assert_eq!(
            rs.sequence().load(Acquire),
            i + 1,
            "reply {} not stamped",
            i
        );
        let rq = region.slot(RingId::Request, i);
        // SAFETY: single-threaded now; the kernel is gone.
        let (req, rep) = unsafe { (rq.read_meta(), rs.read_meta()) };
        if rq.sequence().load(Acquire) != i + 1 {
            prop_assert_eq!(rep.status, error::BAD_SEQUENCE);
            prop_assert_eq!(rep.correlation_id, i);
            prop_assert_eq!(rep.len, 0);
        } else if req.len as usize > payload {
            prop_assert_eq!(rep.status, error::BAD_LENGTH);
            prop_assert_eq!(rep.len, 0);
        } else {
            handled += 1;
            prop_assert_eq!(rep.status, error::NONE);
            prop_assert_eq!(rep.len, req.len);
            prop_assert_eq!(rep.correlation_id, req.correlation_id);
            // SAFETY: as above; lengths checked.
            let (a, b) = unsafe { (rq.payload(req.len as usize), rs.payload(rep.len as usize)) };
            prop_assert_eq!(a, b);
        }
    }
    if published <= u64::from(cap) {
        prop_assert_eq!(
            calls.load(Relaxed),
            handled,
            "the handler ran for a malformed slot"
        );
    }
    let st = cb.state.load(Acquire);
    prop_assert!(
        (state::ACTIVE..=state::FAULTED).contains(&st),
        "state {}",
        st
    );
    let code = cb.error_code.load(Acquire);
    match st {
        state::FAULTED => prop_assert_eq!(code, error::BAD_MAGIC),
        state::TERMINATED => {
            prop_assert!([error::NONE, error::HOST_HEARTBEAT_STALE].contains(&code))
        }
        _ => prop_assert_eq!(code, error::NONE),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn kernel_answers_arbitrary_slots_and_control_fields_with_typed_errors(
        cap_log in 1u32..5,
        batch in 1u32..6,
        slots in prop::collection::vec(raw_slot(), 0..20),
        host in host_line(),
        steps in 1usize..60,
    ) {
        run(cap_log, batch, slots, host, steps)?;
    }
}
