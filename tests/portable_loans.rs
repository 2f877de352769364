//! Loan handlers written once in Rust (`#[gyre::handler(loan)]`, `docs/handlers.md` "Over
//! a loan"): the same function answers in place on the CPU backend (natively, under a
//! zero-copy and a copy strategy) and on OpenCL (its generated C, run by the ring
//! kernel's block loop over the block in SVM). Every reply is checked against the Rust
//! function applied to a copy of the request in a block of the same capacity.
//!
//! The OpenCL half prints `SKIP` and passes without a usable device, unless
//! `GYRE_REQUIRE_OPENCL=1` (CI).

#[cfg(feature = "opencl")]
#[path = "support/opencl.rs"]
mod support;
#[cfg(feature = "opencl")]
#[path = "support/runtime.rs"]
mod test_runtime;

use gyre::portable::PortableLoanHandler;
use gyre::{
    codes,
    loan::LoanConfig,
    portable::{Bytes, Lane},
    Error, KernelSpec, Runtime,
};

/// ASCII letters to upper case, in place.
#[gyre::handler(loan)]
fn upper(b: Bytes) -> u32 {
    for i in 0..b.len() {
        let c: u8 = b.get(i);
        if c >= 97 && c <= 122 {
            b.set(i, c - 32);
        }
    }
    b.len()
}

/// The wrapping sum of the bytes and their count, as two little-endian `u32`s.
#[gyre::handler(loan)]
fn checksum(b: Bytes) -> u32 {
    let mut sum: u32 = 0;
    let mut i: u32 = 0;
    while i < b.len() {
        sum += b.get(i) as u32 * (i % 7 + 1);
        i += 1;
    }
    let n: u32 = b.len();
    for k in 0..4u32 {
        b.set(k, (sum >> (8 * k)) as u8);
        b.set(4 + k, (n >> (8 * k)) as u8);
    }
    8
}

/// The request followed by itself reversed: a reply twice as long, which does not fit a
/// block the request fills (answered `HANDLER_REJECTED`).
#[gyre::handler(loan)]
fn mirror(b: Bytes) -> u32 {
    let n: u32 = b.len();
    if 2 * n > b.capacity() {
        return 2 * n;
    }
    let mut i: u32 = 0;
    while i < n {
        b.set(2 * n - 1 - i, b.get(i));
        i += 1;
    }
    2 * n
}

/// [`upper`], lane-parallel: each lane takes every `count()`-th byte from its own.
#[gyre::handler(loan)]
fn upper_lanes(b: Bytes, lane: Lane) -> u32 {
    let mut i: u32 = lane.id();
    while i < b.len() {
        let c: u8 = b.get(i);
        if c >= 97 && c <= 122 {
            b.set(i, c - 32);
        }
        i += lane.count();
    }
    b.len()
}

/// [`mirror`], lane-parallel: lanes read the request's bytes and write only the second
/// half, so no byte one lane writes is another's to read; too long a reply is refused.
#[gyre::handler(loan)]
fn mirror_lanes(b: Bytes, lane: Lane) -> u32 {
    let n: u32 = b.len();
    if 2 * n > b.capacity() {
        return 2 * n;
    }
    let mut i: u32 = lane.id();
    while i < n {
        b.set(2 * n - 1 - i, b.get(i));
        i += lane.count();
    }
    2 * n
}

/// The last lane reads one byte past the block when the request starts with 0xFF: a
/// panic on one lane only fails the request.
#[gyre::handler(loan)]
fn past_the_end_lanes(b: Bytes, lane: Lane) -> u32 {
    if b.len() > 0 && b.get(0) == 255 && lane.id() + 1 == lane.count() {
        return b.get(b.capacity()) as u32;
    }
    b.len()
}

/// Reads one byte past the block when the request starts with 0xFF: a panic.
#[gyre::handler(loan)]
fn past_the_end(b: Bytes) -> u32 {
    if b.len() > 0 && b.get(0) == 255 {
        return b.get(b.capacity()) as u32;
    }
    b.len()
}

/// Panics in two ways that C could get wrong: a first byte of 255 sets byte 1 from a read
/// past the block (the argument panics: nothing may be written), 254 writes one past the
/// block (nothing may be written there).
#[gyre::handler(loan)]
fn wild_set(b: Bytes) -> u32 {
    if b.len() > 0 && b.get(0) == 255 {
        b.set(1, b.get(b.capacity()));
    }
    if b.len() > 0 && b.get(0) == 254 {
        b.set(b.capacity(), 0xAA);
    }
    b.len()
}

/// The pool of every case: blocks of 1 KiB and up.
fn pool() -> LoanConfig {
    LoanConfig::new(1 << 20, 1024)
}

/// The capacity of the block a loan of `len` bytes gets from [`pool`].
fn capacity(len: usize) -> usize {
    len.next_power_of_two().max(1024)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

/// What the Rust function answers for `req`: `Some(reply)`, or `None` when its length
/// does not fit the block (`HANDLER_REJECTED`).
fn expected(h: impl PortableLoanHandler, req: &[u8]) -> Option<Vec<u8>> {
    let mut block = vec![0u8; capacity(req.len())];
    block[..req.len()].copy_from_slice(req);
    let n = h.run(Bytes::new(&mut block, req.len())) as usize;
    (n <= block.len()).then(|| block[..n].to_vec())
}

/// Every handler on `rt`, over lengths around the block sizes, compared with the Rust
/// function; then the panics.
fn serve_like_rust(rt: &Runtime) {
    for h in [upper, checksum, mirror] {
        serve_one(rt, h);
    }
    for h in [upper_lanes, mirror_lanes] {
        serve_one(rt, h);
    }
    panic_fails_the_request(rt, past_the_end);
    panic_fails_the_request(rt, past_the_end_lanes);
    panics_write_nothing(rt);
}

/// `h` on `rt` against its Rust function (lane 0 of one), lengths around block sizes.
fn serve_one(rt: &Runtime, h: impl PortableLoanHandler + Send + Sync + 'static) {
    {
        let k = rt
            .launch(KernelSpec::portable_loans(h).loan_pool(pool()))
            .unwrap_or_else(|e| panic!("{}: {e}", h.handler_name()));
        assert_eq!(k.backend(), rt.backend(), "it runs where it was asked to");
        for (i, len) in [0usize, 1, 7, 100, 512, 513, 1024, 1025, 4000, 4096]
            .into_iter()
            .enumerate()
        {
            let mut req = pattern(len, i as u8);
            if i % 2 == 0 {
                req.iter_mut().take(50).for_each(|c| *c = b'a' + *c % 26);
            }
            match (k.call_bytes_blocking(&req), expected(h, &req)) {
                (Ok(reply), Some(want)) => {
                    assert_eq!(&reply[..], &want[..], "{} of {len} bytes", h.handler_name())
                }
                (Err(Error::Handler { status, .. }), None) => {
                    assert_eq!(
                        status,
                        codes::HANDLER_REJECTED,
                        "{} of {len}",
                        h.handler_name()
                    )
                }
                (got, want) => panic!(
                    "{} of {len} bytes: {got:?}, want {want:?}",
                    h.handler_name()
                ),
            }
        }
        assert_eq!(k.loan_stats().in_use_blocks, 0, "{}", h.handler_name());
        k.shutdown_blocking().expect("shutdown");
    }
}

/// A read past the block panics: that request fails with HANDLER_PANIC, the kernel
/// faults, and shutdown returns every block.
fn panic_fails_the_request(rt: &Runtime, h: impl PortableLoanHandler + Send + Sync + 'static) {
    let k = rt
        .launch(KernelSpec::portable_loans(h).loan_pool(pool()))
        .expect("a panicking handler");
    assert_eq!(
        &k.call_bytes_blocking(&[1, 2, 3]).expect("call")[..],
        &[1, 2, 3]
    );
    match k.call_bytes_blocking(&[255, 0]) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    let _ = k.shutdown_blocking();
    assert_eq!(k.loan_stats().in_use_blocks, 0);
}

/// [`wild_set`]'s panics leave the block and its neighbour as they were. A request's
/// block returns to the pool uncleared, so the next loan of its size (the lowest block
/// first) shows what the handler left.
fn panics_write_nothing(rt: &Runtime) {
    let launch = || {
        rt.launch(KernelSpec::portable_loans(wild_set).loan_pool(pool()))
            .expect("wild_set")
    };
    // An argument that panics: `set` is never called.
    let k = launch();
    match k.call_bytes_blocking(&[255, 7, 8]) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    let _ = k.shutdown_blocking();
    let again = k.try_loan(3).expect("the same block again");
    assert_eq!(
        &again[..],
        &[255, 7, 8],
        "written after its argument panicked"
    );
    drop(again);
    // A set one past the block: the next block (a neighbour's loan) is untouched.
    let k = launch();
    let mut req = k.try_loan(3).expect("request");
    req.copy_from_slice(&[254, 0, 0]);
    let mut neighbour = k.try_loan(1024).expect("neighbour");
    neighbour.fill(0x11);
    match k.call_blocking(req) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::HANDLER_PANIC),
        other => panic!("{other:?}"),
    }
    assert!(
        neighbour.iter().all(|&x| x == 0x11),
        "written past the block: {:?}",
        &neighbour[..4]
    );
    drop(neighbour);
    let _ = k.shutdown_blocking();
}

#[test]
fn the_rust_function_is_the_handler() {
    let mut block = *b"abc\0\0\0";
    assert_eq!(upper(Bytes::new(&mut block, 3)), 3);
    assert_eq!(&block[..3], b"ABC");
    assert_eq!(mirror(Bytes::new(&mut block, 3)), 6);
    assert_eq!(&block, b"ABCCBA");
    assert_eq!(
        mirror(Bytes::new(&mut block, 4)),
        8,
        "does not fit: says so"
    );
    let c = checksum.c_source();
    assert!(c.contains("gyre_bytes_get(gyre_b, gyre_b_cap"), "{c}");
    assert!(c.contains("#define GYRE_HANDLER_PHASE gyre_portable_phase"));
}

#[test]
fn cpu_zero_copy_answers_like_rust() {
    serve_like_rust(
        &Runtime::builder()
            .backend(gyre::Backend::Cpu)
            .transfer_strategy(gyre::TransferStrategy::Unified)
            .build()
            .expect("runtime"),
    );
}

#[test]
fn cpu_copy_strategy_answers_like_rust() {
    serve_like_rust(
        &Runtime::builder()
            .backend(gyre::Backend::Cpu)
            .transfer_strategy(gyre::TransferStrategy::Sync)
            .build()
            .expect("runtime"),
    );
}

#[cfg(feature = "opencl")]
mod opencl {
    use super::support;
    use gyre::Runtime;

    fn guard() -> support::Guard {
        support::guard(
            module_path!(),
            "opencl::portable_loans_compile_in_child",
            support::TEST_LIMIT,
        )
    }

    fn runtime(test: &str) -> Option<Runtime> {
        support::device_or_skip(test).map(super::test_runtime::opencl)
    }

    /// The child of the compile check: builds each handler's generated C once.
    #[test]
    fn portable_loans_compile_in_child() {
        if !support::is_child() {
            let _g = guard();
            support::device_or_skip("portable_loans_compile_in_child");
            return;
        }
        let Some(rt) = runtime("portable_loans_compile_in_child") else {
            return;
        };
        let once = |spec: gyre::KernelSpec<gyre::loan::Loan, gyre::loan::Loan>| {
            let name = spec.name().to_owned();
            let k = rt
                .launch(spec.loan_pool(super::pool()))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(k.call_bytes_blocking(&[1; 10]).is_ok(), "{name}");
            k.shutdown_blocking()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        };
        for h in [
            super::upper,
            super::checksum,
            super::mirror,
            super::past_the_end,
            super::wild_set,
        ] {
            once(gyre::KernelSpec::portable_loans(h));
        }
        for h in [
            super::upper_lanes,
            super::mirror_lanes,
            super::past_the_end_lanes,
        ] {
            once(gyre::KernelSpec::portable_loans(h));
        }
    }

    /// The lane-parallel loan handlers' generated C over OpenCL work-groups of 1, 7 and
    /// 32 work-items, in place as the block loop passes a loan
    /// (`gyre_opencl::phase_check::run_loans`): every lane's part, the panic vote, lane
    /// 0's length. PoCL runs the ring kernel itself with one work-item, so this is where
    /// the multi-lane path runs in CI.
    #[test]
    fn lane_parallel_loans_over_opencl_work_groups() {
        use gyre::portable::PortableLoanHandler;
        let _g = guard();
        let Some((platform, device)) =
            support::device_or_skip("lane_parallel_loans_over_opencl_work_groups")
        else {
            return;
        };
        let b = gyre_opencl::OpenClBackend::new(platform, device).expect("OpenCL backend");
        fn check(
            b: &gyre_opencl::OpenClBackend,
            h: impl PortableLoanHandler + std::panic::RefUnwindSafe,
            lanes: u32,
        ) {
            let src = h.device_source();
            let handler = gyre_opencl::Handler::Custom {
                name: h.handler_name(),
                source: &src,
            };
            for len in [1usize, 100, 600] {
                let reqs: Vec<Vec<u8>> = (0..4u8)
                    .map(|seed| {
                        let mut r = super::pattern(len, seed);
                        r.iter_mut().take(40).for_each(|c| *c = b'a' + *c % 26);
                        if seed == 3 {
                            r[0] = 255;
                        }
                        r
                    })
                    .collect();
                let answers = gyre_opencl::phase_check::run_loans(b, handler, lanes, &reqs, 1024)
                    .unwrap_or_else(|e| panic!("{} over {lanes}: {e}", h.handler_name()));
                for (r, a) in reqs.iter().zip(answers) {
                    let rust = std::panic::catch_unwind(|| super::expected(h, r));
                    match rust {
                        Err(_) => assert!(a.panicked, "{}: {a:?}", h.handler_name()),
                        Ok(Some(want)) => assert!(
                            !a.panicked && a.status == 0 && a.reply == want,
                            "{} over {lanes}, {len} bytes: device {a:?}, rust {want:?}",
                            h.handler_name()
                        ),
                        Ok(None) => assert!(
                            !a.panicked && a.status == gyre::codes::HANDLER_REJECTED,
                            "{} over {lanes}, {len} bytes: {a:?}",
                            h.handler_name()
                        ),
                    }
                }
            }
        }
        for lanes in [1, 7, 32] {
            check(&b, super::upper_lanes, lanes);
            check(&b, super::mirror_lanes, lanes);
            check(&b, super::past_the_end_lanes, lanes);
        }
    }

    #[test]
    fn opencl_answers_like_rust() {
        let _g = guard();
        let Some(rt) = runtime("opencl_answers_like_rust") else {
            return;
        };
        super::serve_like_rust(&rt);
    }
}
