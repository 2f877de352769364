//! Fuzzing the host's reply consumer (proptest, bounded: runs in CI): arbitrary bytes in
//! reply slot headers and payloads and in the kernel-written control-block fields the host
//! reads (`k2h_head`, state, error code). Taking a reply — a blocking call's wait, `recv`
//! — must never panic and must return either the exact reply or a typed error: a
//! malformed slot is `Error::Protocol` (counted in `Channel::protocol_errors`), a stopped
//! kernel `KernelFaulted` / `KernelTerminated`, a missing reply a `Timeout`.

use std::sync::atomic::Ordering::Release;
use std::sync::Arc;
use std::time::Duration;

use gyre_abi::state;
use gyre_core::channel::{Channel, Kind};
use gyre_core::region::RingId;
use gyre_core::ring::slot::SlotMeta;
use gyre_core::ring::Geometry;
use gyre_core::{Error, IdleStrategy, SharedRegion};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct RawReply {
    /// `None`: the valid sequence (`index + 1`).
    seq: Option<u64>,
    /// `None`: the valid correlation (`index`).
    correlation: Option<u64>,
    len: u32,
    status: u32,
    payload: Vec<u8>,
}

fn raw_reply() -> impl Strategy<Value = RawReply> {
    (
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some)],
        prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some)],
        prop_oneof![3 => 0u32..=64, 1 => any::<u32>()],
        prop_oneof![3 => Just(0u32), 1 => any::<u32>()],
        prop::collection::vec(any::<u8>(), 0..=64),
    )
        .prop_map(|(seq, correlation, len, status, payload)| RawReply {
            seq,
            correlation,
            len,
            status,
            payload,
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Reply,
    Protocol,
    Stopped,
    Timeout,
}

fn classify(r: &Result<(u32, Vec<u8>), Error>) -> Outcome {
    match r {
        Ok(_) => Outcome::Reply,
        Err(Error::Protocol { .. }) => Outcome::Protocol,
        Err(Error::KernelFaulted { .. } | Error::KernelTerminated { .. }) => Outcome::Stopped,
        Err(Error::Timeout { .. }) => Outcome::Timeout,
        Err(e) => panic!("untyped outcome: {e}"),
    }
}

fn run(
    kinds: Vec<bool>,
    replies: Vec<RawReply>,
    head: Option<u64>,
    st: u32,
    code: u32,
) -> Result<(), TestCaseError> {
    let g = Geometry::new(8, 128, 1).unwrap();
    let payload = g.payload();
    let ch = Channel::new(Arc::new(SharedRegion::new_host(g, 0).unwrap()), "fuzz");
    let n = kinds.len().min(replies.len());
    for &is_call in &kinds[..n] {
        let kind = if is_call { Kind::Call } else { Kind::Send };
        ch.try_publish(kind, 1, b"req").unwrap();
    }
    // The "kernel": arbitrary reply slots and kernel-line fields.
    for (i, r) in replies[..n].iter().enumerate() {
        let i = i as u64;
        let slot = ch.region().slot(RingId::Reply, i);
        // SAFETY: single-threaded; nobody else touches the slot.
        unsafe {
            slot.write_meta(&SlotMeta {
                correlation_id: r.correlation.unwrap_or(i),
                enqueue_ns: 0,
                msg_type: 1,
                len: r.len,
                flags: 0,
                status: r.status,
            });
            core::ptr::copy_nonoverlapping(r.payload.as_ptr(), slot.payload_ptr(), r.payload.len());
        }
        slot.sequence().store(r.seq.unwrap_or(i + 1), Release);
    }
    let cb = ch.region().control();
    cb.k2h_head.store(head.unwrap_or(n as u64), Release);
    cb.error_code.store(code, Release);
    cb.state.store(st, Release);

    let take = |v: gyre_core::channel::ReplyView<'_>| Ok((v.meta.status, v.payload.to_vec()));
    let mut protocol = 0;
    for (i, r) in replies[..n].iter().enumerate() {
        let idx = i as u64;
        let valid = r.seq.is_none_or(|s| s == idx + 1);
        let well_formed =
            valid && r.correlation.is_none_or(|c| c == idx) && r.len as usize <= payload;
        let out = if kinds[i] {
            ch.wait_blocking(
                idx,
                &IdleStrategy::BusySpin,
                Some(Duration::from_millis(1)),
                take,
            )
        } else {
            match ch.try_recv(take) {
                Ok(Some(v)) => Ok(v),
                Ok(None) => continue,
                Err(e) => Err(e),
            }
        };
        let got = classify(&out);
        if got == Outcome::Protocol {
            protocol += 1;
        }
        // A call that timed out (a loaded machine: the deadline is 1 ms) is abandoned, and
        // abandoning discards a reply the kernel published corrupt, counting it as the
        // protocol error it is, though the caller saw the timeout.
        if got == Outcome::Timeout && !valid && head.unwrap_or(n as u64) > idx {
            protocol += 1;
        }
        if valid {
            // A published reply is taken (whatever the kernel state): exact or protocol.
            let want = if well_formed {
                Outcome::Reply
            } else {
                Outcome::Protocol
            };
            prop_assert_eq!(got, want, "index {} {:?}", idx, r);
        } else {
            prop_assert!(
                got != Outcome::Reply,
                "index {}: a corrupt slot was taken as a reply",
                idx
            );
        }
        if let Ok((status, bytes)) = out {
            prop_assert_eq!(status, r.status);
            prop_assert_eq!(bytes.len(), r.len as usize);
            let cut = (r.len as usize).min(r.payload.len());
            prop_assert_eq!(&bytes[..cut], &r.payload[..cut]);
        }
    }
    prop_assert_eq!(ch.protocol_errors(), protocol, "protocol errors counted");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn host_takes_arbitrary_replies_as_exact_replies_or_typed_errors(
        kinds in prop::collection::vec(any::<bool>(), 1..8),
        replies in prop::collection::vec(raw_reply(), 1..8),
        head in prop_oneof![3 => Just(None), 1 => any::<u64>().prop_map(Some)],
        st in prop_oneof![
            3 => Just(state::ACTIVE),
            1 => Just(state::FAULTED),
            1 => Just(state::TERMINATED),
            1 => any::<u32>()
        ],
        code in any::<u32>(),
    ) {
        run(kinds, replies, head, st, code)?;
    }
}
