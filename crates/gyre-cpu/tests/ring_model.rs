//! Property test: the rings of a kernel (host channel + kernel loop, driven step by step
//! on one thread) against a simple model built on `VecDeque`s, over random sequences of
//! sends, batch sends, calls, oversize messages, kernel steps, receives and call
//! completions.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use gyre_core::channel::{Channel, Kind, PublishError};
use gyre_core::ring::Geometry;
use gyre_core::{IdleStrategy, SharedRegion};
use gyre_cpu::Stepper;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Send(u64),
    SendBatch(Vec<u64>),
    Call(u64),
    Oversize(usize),
    Step,
    Recv,
    RecvBatch(usize),
    TakeCall,
    /// `Channel::sync_head` (the completion driver's, about every millisecond).
    SyncHead,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u64>().prop_map(Op::Send),
        1 => prop::collection::vec(any::<u64>(), 1..6).prop_map(Op::SendBatch),
        2 => any::<u64>().prop_map(Op::Call),
        1 => (65usize..200).prop_map(Op::Oversize),
        4 => Just(Op::Step),
        3 => Just(Op::Recv),
        1 => (1usize..6).prop_map(Op::RecvBatch),
        2 => Just(Op::TakeCall),
        1 => Just(Op::SyncHead),
    ]
}

/// The model: what was accepted, what the kernel answered, what is still unreleased.
#[derive(Default)]
struct Model {
    claimed: u64,
    /// Accepted requests the kernel has not answered: (index, value, kind).
    queued: VecDeque<(u64, u64, Kind)>,
    /// Answered `send` requests not yet received, in order.
    send_replies: VecDeque<(u64, u64)>,
    /// Calls not yet taken: (index, value), answered or not.
    calls: VecDeque<(u64, u64)>,
    answered_calls: BTreeSet<u64>,
    /// Indices whose reply slot is not released.
    unreleased: BTreeSet<u64>,
    /// `h2k_head` as of the last sync.
    synced: u64,
}

impl Model {
    fn free_slots(&self, cap: u64) -> u64 {
        let low = self.unreleased.first().copied().unwrap_or(self.claimed);
        cap - (self.claimed - low)
    }
}

fn run(cap: u32, batch: u32, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let g = Geometry::new(cap, 128, batch).unwrap();
    let region = Arc::new(SharedRegion::new_host(g, 0).unwrap());
    let handler = gyre_core::kernels::echo;
    let mut kernel = Stepper::new(&region, &handler).expect("kernel starts");
    let ch = Channel::new(region.clone(), "model");
    let mut m = Model::default();
    let cap = u64::from(cap);
    let idle = IdleStrategy::BusySpin;
    for op in ops {
        match op {
            Op::Send(v) => {
                let r = ch.try_publish(Kind::Send, 1, &v.to_le_bytes());
                if m.free_slots(cap) >= 1 {
                    prop_assert_eq!(r, Ok(m.claimed));
                    m.queued.push_back((m.claimed, v, Kind::Send));
                    m.unreleased.insert(m.claimed);
                    m.claimed += 1;
                } else {
                    prop_assert_eq!(r, Err(PublishError::Full));
                }
            }
            Op::SendBatch(vs) => {
                let bytes: Vec<[u8; 8]> = vs.iter().map(|v| v.to_le_bytes()).collect();
                let r = ch.try_publish_batch(Kind::Send, 1, &bytes);
                if m.free_slots(cap) >= vs.len() as u64 {
                    prop_assert_eq!(r, Ok(m.claimed));
                    for v in vs {
                        m.queued.push_back((m.claimed, v, Kind::Send));
                        m.unreleased.insert(m.claimed);
                        m.claimed += 1;
                    }
                } else if vs.len() as u64 > cap {
                    let too_large = matches!(r, Err(PublishError::BatchTooLarge { .. }));
                    prop_assert!(too_large, "expected BatchTooLarge, got {:?}", r);
                } else {
                    prop_assert_eq!(r, Err(PublishError::Full));
                }
            }
            Op::Call(v) => {
                let r = ch.try_publish(Kind::Call, 1, &v.to_le_bytes());
                if m.free_slots(cap) >= 1 {
                    prop_assert_eq!(r, Ok(m.claimed));
                    m.queued.push_back((m.claimed, v, Kind::Call));
                    m.calls.push_back((m.claimed, v));
                    m.unreleased.insert(m.claimed);
                    m.claimed += 1;
                } else {
                    prop_assert_eq!(r, Err(PublishError::Full));
                }
            }
            Op::Oversize(len) => {
                let big = vec![7u8; len];
                let r = ch.try_publish(Kind::Send, 1, &big);
                prop_assert_eq!(r, Err(PublishError::TooLarge { len, payload: 64 }));
            }
            Op::Step => {
                let n = kernel.step().expect("kernel running");
                let expect = (batch as usize).min(m.queued.len()) as u64;
                prop_assert_eq!(n, expect);
                for _ in 0..n {
                    let (idx, v, kind) = m.queued.pop_front().unwrap();
                    match kind {
                        Kind::Send => m.send_replies.push_back((idx, v)),
                        Kind::Call => {
                            m.answered_calls.insert(idx);
                        }
                    }
                }
            }
            Op::Recv => {
                let r = ch.try_recv(|v| Ok(u64::from_le_bytes(v.payload.try_into().unwrap())));
                match m.send_replies.pop_front() {
                    Some((idx, v)) => {
                        prop_assert_eq!(r, Ok(Some(v)));
                        m.unreleased.remove(&idx);
                    }
                    None => prop_assert_eq!(r, Ok(None)),
                }
            }
            Op::RecvBatch(max) => {
                let mut out = Vec::new();
                let n = ch
                    .try_recv_batch(max, &mut out, |v| {
                        Ok(u64::from_le_bytes(v.payload.try_into().unwrap()))
                    })
                    .unwrap();
                prop_assert_eq!(n, out.len());
                // A batch stops at the first reply that is not a ready send reply; it
                // takes at least one when one is ready.
                prop_assert!(n <= max);
                if !m.send_replies.is_empty() {
                    prop_assert!(n >= 1);
                }
                for got in out {
                    let (idx, v) = m.send_replies.pop_front().unwrap();
                    prop_assert_eq!(got, Ok(v));
                    m.unreleased.remove(&idx);
                }
            }
            Op::SyncHead => {
                // Every claim of this one thread is stamped: the head covers them all.
                prop_assert_eq!(ch.sync_head(), m.claimed);
                m.synced = m.claimed;
            }
            Op::TakeCall => {
                // Take the oldest answered call.
                if let Some(pos) = m
                    .calls
                    .iter()
                    .position(|(i, _)| m.answered_calls.contains(i))
                {
                    let (idx, v) = m.calls.remove(pos).unwrap();
                    let got = ch.wait_blocking(idx, &idle, None, |r| {
                        Ok(u64::from_le_bytes(r.payload.try_into().unwrap()))
                    });
                    prop_assert_eq!(got, Ok(v));
                    m.answered_calls.remove(&idx);
                    m.unreleased.remove(&idx);
                }
            }
        }
        // Invariants after every step.
        let cb = region.control();
        let low = m.unreleased.first().copied().unwrap_or(m.claimed);
        prop_assert_eq!(cb.k2h_tail.load(std::sync::atomic::Ordering::Acquire), low);
        // The head is lazy: publications do not move it, a sync does.
        prop_assert_eq!(
            cb.h2k_head.load(std::sync::atomic::Ordering::Acquire),
            m.synced
        );
        prop_assert_eq!(ch.claimed(), m.claimed);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn ring_matches_model(
        cap_log in 1u32..5,
        batch_sel in 0u32..4,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let cap = 1 << cap_log;
        let batch = 1 + batch_sel % cap;
        run(cap, batch, ops)?;
    }
}
