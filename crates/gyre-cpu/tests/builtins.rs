//! The built-in kernels' device code (`cuda/handlers/*.h`, the source the CUDA and OpenCL
//! kernels are built with), run by the CPU backend over 1, 7, 32 and 256 emulated lanes,
//! in ascending and in descending lane order (a read of a word another lane writes in the
//! same phase, a race where lanes are threads, then differs), against the Rust reference
//! of `gyre_core::kernels`: the same status for any request
//! bytes, the same reply (reduce-sum: within the reference's bound for any summation
//! order, bit for bit with one lane, which sums in index order as the reference does).

use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;

use gyre_abi::{error, state};
use gyre_core::channel::{Channel, Kind};
use gyre_core::kernels::{self, ids, reference};
use gyre_core::ring::Geometry;
use gyre_core::{IdleStrategy, SharedRegion};
use gyre_cpu::{CpuHandler, Stepper};
use proptest::prelude::*;

/// 512-byte slots: a 448-byte payload (112 f32 values), so counts past the payload are
/// reachable with a `u32` count and cheap to generate.
const SLOT: u32 = 512;
const LANES: [u32; 4] = [1, 7, 32, 256];

/// Answers `reqs` (one batch when they fit the ring) with built-in `id` over `lanes`
/// lanes: `(status, reply)` per request.
fn answer(id: u32, lanes: u32, reqs: &[Vec<u8>]) -> Vec<(u32, Vec<u8>)> {
    let up = answer_in_order(id, lanes, reqs, false);
    let down = answer_in_order(id, lanes, reqs, true);
    assert_eq!(
        up, down,
        "kernel {id}, {lanes} lanes: the lane order changed the answers"
    );
    up
}

/// [`answer`] with the lanes emulated in ascending or descending order.
fn answer_in_order(id: u32, lanes: u32, reqs: &[Vec<u8>], descending: bool) -> Vec<(u32, Vec<u8>)> {
    let region = Arc::new(SharedRegion::new_host(Geometry::new(8, SLOT, 8).unwrap(), 0).unwrap());
    let mut k = Stepper::with(&region, CpuHandler::Builtin { id, lanes }).unwrap();
    k.set_lanes_descending(descending);
    let ch = Channel::new(region.clone(), "builtins");
    let mut out = Vec::new();
    for chunk in reqs.chunks(8) {
        let idx: Vec<u64> = chunk
            .iter()
            .map(|r| ch.try_publish(Kind::Call, id, r).unwrap())
            .collect();
        let mut answered = 0;
        while answered < idx.len() as u64 {
            answered += k.step().unwrap();
        }
        for i in idx {
            out.push(
                ch.wait_blocking(i, &IdleStrategy::BusySpin, None, |r| {
                    Ok((r.meta.status, r.payload.to_vec()))
                })
                .unwrap(),
            );
        }
    }
    out
}

/// The reference's answer to `req`: `(status, reply)`.
fn reference_answer(id: u32, req: &[u8]) -> (u32, Vec<u8>) {
    let f = kernels::builtin(id).unwrap();
    let mut reply = vec![0u8; (SLOT - 64) as usize];
    match f(id, req, &mut reply) {
        Ok(n) => (error::NONE, reply[..n].to_vec()),
        Err(code) => (code, Vec::new()),
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Whether the device's reply `got` is the reference's `want` for request `req`.
fn same_answer(id: u32, lanes: u32, req: &[u8], got: &(u32, Vec<u8>), want: &(u32, Vec<u8>)) {
    assert_eq!(
        got.0, want.0,
        "status of kernel {id}, {lanes} lanes, {req:?}"
    );
    if got.0 != error::NONE {
        assert!(got.1.is_empty(), "an error reply has no payload");
        return;
    }
    assert_eq!(got.1.len(), want.1.len(), "reply length");
    match id {
        ids::VEC_SCALE => {
            assert_eq!(got.1[..8], want.1[..8], "count, 0");
            for (g, w) in f32s(&got.1[8..]).iter().zip(f32s(&want.1[8..])) {
                // One IEEE multiply: the same bits (any NaN for a NaN).
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{g} {w}"
                );
            }
        }
        ids::REDUCE_SUM => {
            assert_eq!(got.1[4..8], want.1[4..8], "count");
            let sum = f32s(&got.1[..4])[0];
            let count = u32::from_le_bytes([req[0], req[1], req[2], req[3]]) as usize;
            let values = f32s(&req[8..8 + 4 * count]);
            if lanes == 1 {
                assert_eq!(got.1, want.1, "one lane sums in index order");
            } else if values.iter().all(|v| v.is_finite()) {
                assert!(
                    reference::reduce_sum_ok(sum, &values),
                    "{sum} for {values:?}"
                );
            }
        }
        _ => assert_eq!(got.1, want.1),
    }
}

/// Requests for kernel `id`: arbitrary bytes, and well-formed ones whose count may run
/// past the payload.
fn request(id: u32) -> impl Strategy<Value = Vec<u8>> {
    let payload = (SLOT - 64) as usize;
    let raw = proptest::collection::vec(any::<u8>(), 0..=payload);
    let values = proptest::collection::vec(-1.0e6f32..1.0e6, 0..=(payload / 4 - 2));
    let shaped = (any::<f32>(), values, 0u32..8, 0usize..12).prop_map(
        move |(factor, v, extra_count, cut)| {
            let mut b = Vec::new();
            let count = v.len() as u32 + extra_count / 6; // sometimes one past the values
            if id == ids::VEC_SCALE {
                b.extend(factor.to_le_bytes());
            } else {
                b.extend(count.to_le_bytes());
            }
            b.extend(if id == ids::VEC_SCALE { count } else { 0 }.to_le_bytes());
            for x in &v {
                b.extend(x.to_le_bytes());
            }
            b.truncate(b.len().saturating_sub(cut / 10)); // sometimes one byte short
            b
        },
    );
    prop_oneof![raw, shaped]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn builtins_match_the_reference_on_any_lanes(
        id in prop_oneof![Just(ids::ECHO), Just(ids::VEC_SCALE), Just(ids::REDUCE_SUM)],
        reqs in proptest::collection::vec(request(ids::VEC_SCALE), 1..12),
        reqs_sum in proptest::collection::vec(request(ids::REDUCE_SUM), 1..12),
    ) {
        let reqs = if id == ids::REDUCE_SUM { reqs_sum } else { reqs };
        for lanes in LANES {
            let got = answer(id, lanes, &reqs);
            for (req, got) in reqs.iter().zip(&got) {
                same_answer(id, lanes, req, got, &reference_answer(id, req));
            }
        }
    }
}

#[test]
fn every_lane_count_sums_a_full_payload() {
    // 110 values: lane strides that do not divide it, and more lanes than values.
    let values: Vec<f32> = (0..110).map(|i| (i as f32) * 0.37 - 11.0).collect();
    let mut req = Vec::new();
    req.extend(110u32.to_le_bytes());
    req.extend(0u32.to_le_bytes());
    for v in &values {
        req.extend(v.to_le_bytes());
    }
    for lanes in [1, 2, 3, 7, 32, 109, 110, 111, 256] {
        let got = answer(ids::REDUCE_SUM, lanes, std::slice::from_ref(&req));
        same_answer(
            ids::REDUCE_SUM,
            lanes,
            &req,
            &got[0],
            &reference_answer(ids::REDUCE_SUM, &req),
        );
    }
}

#[test]
fn a_built_in_that_does_not_exist_faults_the_kernel_at_start() {
    for h in [
        CpuHandler::Builtin { id: 99, lanes: 1 },
        CpuHandler::Builtin {
            id: ids::ECHO,
            lanes: 0,
        },
        CpuHandler::Builtin {
            id: ids::ECHO,
            lanes: 257,
        },
    ] {
        let region =
            Arc::new(SharedRegion::new_host(Geometry::new(8, SLOT, 8).unwrap(), 0).unwrap());
        assert!(Stepper::with(&region, h).is_none(), "{h:?}");
        assert_eq!(region.control().state.load(Acquire), state::FAULTED);
        assert_eq!(
            region.control().error_code.load(Acquire),
            error::HANDLER_REJECTED
        );
    }
}

#[test]
fn an_empty_sum_is_negative_zero_as_the_reference() {
    // Rust's f32 `sum` starts at -0.0 (the identity of IEEE addition): so must every lane.
    let req = [0u8; 8];
    for lanes in LANES {
        let got = answer(ids::REDUCE_SUM, lanes, &[req.to_vec()]);
        assert_eq!(
            got[0],
            reference_answer(ids::REDUCE_SUM, &req),
            "{lanes} lanes"
        );
        assert_eq!(got[0].1[..4], (-0.0f32).to_le_bytes());
    }
}
