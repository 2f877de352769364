//! The service's handler, `risk_check`, as generated C: compiled by NVRTC for every
//! architecture (so it builds on any GPU `--backend cuda` may meet), and run on OpenCL
//! (PoCL in CI) against the Rust function on a stream of orders and the edge cases. The
//! same skip / require rules as gyre's own device tests (`GYRE_REQUIRE_NVRTC`,
//! `GYRE_REQUIRE_OPENCL`; the OpenCL build in a child process first).

#[path = "../../../tests/support/nvrtc.rs"]
mod nvrtc_support;
#[path = "../../../tests/support/opencl.rs"]
mod opencl_support;

use gyre::{Backend, KernelSpec, Runtime};
use gyre_cuda::nvrtc::Target;
use gyre_cuda::{CompileOptions, Handler};
use gyre_service::load::Orders;
use gyre_service::risk::{risk_check, Order, TICKS_PER_UNIT};

const CHILD: &str = "risk_check_builds_on_opencl_in_child";

/// 2 000 orders of the load generator's stream, and the cases each check exists for.
fn orders() -> Vec<Order> {
    let r = gyre_service::risk::RefData::default();
    let mut stream = Orders::new(99);
    let mut v: Vec<Order> = (0..2000)
        .filter_map(|_| r.enrich_wire(&stream.next_order().1).ok())
        .collect();
    let base = v[0];
    let p = base.ref_price;
    for (qty, price, ref_price, side) in [
        (0, p, p, 0),
        (-5, p, p, 1),
        (base.max_qty + 1, p, p, 0),
        (1, 0, p, 0),
        (1, -7, p, 1),
        (1, p, 0, 0),
        (1, p + p / 20, p, 0),
        (1, p + p / 20 + 1, p, 0),
        (1, p - p / 20 - 1, p, 1),
        (base.max_qty, 200 * TICKS_PER_UNIT, 200 * TICKS_PER_UNIT, 0),
        (i64::MAX / 3, 7, 7, 0),
    ] {
        v.push(Order {
            qty,
            price,
            ref_price,
            side,
            ..base
        });
    }
    v
}

#[test]
fn risk_check_compiles_with_nvrtc_for_every_arch() {
    let Some((nvrtc, _, archs)) = nvrtc_support::discover_or_skip("risk_check under NVRTC") else {
        return;
    };
    let src = risk_check.c_source();
    let handler = Handler::Custom {
        name: "risk_check.rs.h",
        source: &src,
    };
    for arch in archs {
        if let Err(e) = nvrtc.compile_ring_kernel(&handler, &CompileOptions::new(Target::Ptx(arch)))
        {
            panic!("risk_check for sm_{arch}: {e}");
        }
    }
}

/// The compile check's child, and the differential run: every order decided on the
/// device as the Rust function decides it.
#[test]
fn risk_check_builds_on_opencl_in_child() {
    if !opencl_support::is_child() {
        let _g = opencl_support::guard(CHILD, CHILD, opencl_support::TEST_LIMIT);
        opencl_support::device_or_skip(CHILD);
        return;
    }
    let Some((platform, device)) = opencl_support::device_or_skip(CHILD) else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("an OpenCL runtime");
    let k = rt
        .launch(KernelSpec::portable(risk_check))
        .expect("risk_check builds for OpenCL");
    for o in orders() {
        assert_eq!(
            k.call_blocking(o).expect("a decision"),
            risk_check(o),
            "{o:?}"
        );
    }
    k.shutdown_blocking().expect("shutdown");
}
