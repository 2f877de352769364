//! Handlers written once in Rust (`#[gyre::handler]`), executed, not compared as text:
//! every handler of `tests/portable/handlers.rs` runs on the CPU backend (the Rust
//! function) and on OpenCL (the generated C, built by PoCL in CI) with the same
//! proptest-generated requests, and every reply must equal the Rust function's result:
//! bit for bit, except the transcendental functions (within the bound of
//! `docs/handlers.md`), NaN payloads (any NaN equals any NaN) and the sign of a zero
//! returned by `min`/`max`. The same handlers compile with NVRTC for every architecture
//! this NVRTC supports, with no spills (`tests/portable_nvrtc.rs`).
//!
//! Without an OpenCL device the OpenCL half prints `SKIP` (fails with
//! `GYRE_REQUIRE_OPENCL=1`); without NVRTC and ptxas the CUDA half does the same
//! (`GYRE_REQUIRE_NVRTC=1`).

#![cfg(feature = "opencl")]

#[path = "support/cuda.rs"]
#[cfg(feature = "cuda")]
mod cuda_support;
#[path = "portable/handlers.rs"]
mod handlers;
#[path = "support/opencl.rs"]
mod support;

use gyre::{
    portable::{Portable, PortableLanes},
    Backend, Error, KernelSpec, Runtime,
};
use handlers::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

const CHILD: &str = "portable_handlers_build_in_child";
/// Requests per handler and backend.
const CASES: usize = 200;

/// `n` values of `s`, the same in every run.
fn sample<T: std::fmt::Debug>(s: impl Strategy<Value = T>, n: usize) -> Vec<T> {
    let mut runner = TestRunner::deterministic();
    (0..n)
        .map(|_| s.new_tree(&mut runner).expect("a value").current())
        .collect()
}

/// How replies are compared with the Rust function's result.
#[derive(Clone, Copy)]
enum Eq {
    /// Bit for bit.
    Bits,
    /// Floats: bit for bit, any NaN equals any NaN, and at the `min`/`max` lanes listed
    /// a zero equals a zero of either sign.
    Floats(&'static [usize]),
    /// Floats within `ulp` units in the last place (any NaN equals any NaN; infinities
    /// equal).
    Ulp(u64),
}

/// The distance in units in the last place between two floats of one width (their bit
/// patterns mapped to a monotonic integer line).
fn ulps(a: u64, b: u64, w: usize) -> u64 {
    let sign = 1u64 << (w * 8 - 1);
    let key = |x: u64| -> i128 {
        if x & sign != 0 {
            -i128::from(x & !sign)
        } else {
            i128::from(x)
        }
    };
    key(a).abs_diff(key(b)) as u64
}

/// Compares two byte images of `Resp` whose lanes are `f32` (`w == 4`) or `f64` (8).
fn floats_equal(a: &[u8], b: &[u8], w: usize, eq: Eq) -> bool {
    a.chunks(w).zip(b.chunks(w)).enumerate().all(|(i, (x, y))| {
        let mut bx = [0u8; 8];
        let mut by = [0u8; 8];
        bx[..w].copy_from_slice(x);
        by[..w].copy_from_slice(y);
        let (ux, uy) = (u64::from_le_bytes(bx), u64::from_le_bytes(by));
        let as_f64 = |u: u64| {
            if w == 4 {
                f64::from(f32::from_bits(u as u32))
            } else {
                f64::from_bits(u)
            }
        };
        let (fx, fy) = (as_f64(ux), as_f64(uy));
        if ux == uy || (fx.is_nan() && fy.is_nan()) {
            return true;
        }
        match eq {
            Eq::Floats(zeros) => zeros.contains(&i) && fx == 0.0 && fy == 0.0,
            Eq::Ulp(n) => ulps(ux, uy, w) <= n,
            Eq::Bits => false,
        }
    })
}

/// Runs `h` on `rt` for every input and checks each reply against `h`'s Rust result.
fn check<Req, Resp>(rt: &Runtime, h: Portable<Req, Resp>, inputs: &[Req], eq: Eq, width: usize)
where
    Req: gyre::Pod + gyre::DeviceType + std::fmt::Debug,
    Resp: gyre::Pod + gyre::DeviceType + std::fmt::Debug,
{
    let k = rt
        .launch(KernelSpec::portable(h).capacity(256).slot_size(256))
        .unwrap_or_else(|e| panic!("{}: launch: {e}", h.name()));
    for chunk in inputs.chunks(128) {
        for &r in chunk {
            k.send_blocking(r).expect("send");
        }
        for &r in chunk {
            let got = k
                .recv_blocking()
                .unwrap_or_else(|e| panic!("{} on {:?}: {e}", h.name(), k.backend()));
            let want = h(r);
            let (g, w) = (bytemuck::bytes_of(&got), bytemuck::bytes_of(&want));
            let ok = match eq {
                Eq::Bits => g == w,
                e => floats_equal(g, w, width, e),
            };
            assert!(
                ok,
                "{} on {:?}: request {r:?}\n  device: {got:?}\n  rust:   {want:?}",
                h.name(),
                k.backend()
            );
        }
    }
    k.shutdown_blocking().expect("shutdown");
}

fn finite_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        -1e6f32..1e6,
        -2.0f32..2.0,
        Just(0.0f32),
        Just(-0.0f32),
        Just(0.5f32),
        Just(-2.5f32)
    ]
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![3 => finite_f32(), 1 => proptest::num::f32::ANY]
}

fn any_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => -1e12f64..1e12,
        1 => proptest::num::f64::ANY,
        1 => Just(-0.0f64),
        1 => Just(2.5f64)
    ]
}

/// Every handler of the suite on `rt`.
fn run_all(rt: &Runtime) {
    macro_rules! ints {
        ($($h:ident: $t:ty),*) => {$(
            check(rt, $h, &sample(any::<[$t; 2]>(), CASES), Eq::Bits, 0);
        )*};
    }
    ints!(arith_u8: u8, arith_u16: u16, arith_u32: u32, arith_u64: u64,
          arith_i8: i8, arith_i16: i16, arith_i32: i32, arith_i64: i64);
    check(
        rt,
        signed_ops,
        &sample(any::<[i32; 2]>(), CASES),
        Eq::Bits,
        0,
    );
    check(
        rt,
        arith_f32,
        &sample(prop::array::uniform3(any_f32()), CASES),
        Eq::Floats(&[14]),
        4,
    );
    check(
        rt,
        arith_f64,
        &sample(prop::array::uniform3(any_f64()), CASES),
        Eq::Floats(&[14]),
        8,
    );
    let math = (-20.0f32..20.0, 1e-3f32..1e6);
    check(
        rt,
        math_f32,
        &sample(math.prop_map(|(a, b)| [a, b]), CASES),
        Eq::Ulp(16),
        4,
    );
    let math = (-20.0f64..20.0, 1e-3f64..1e6);
    check(
        rt,
        math_f64,
        &sample(math.prop_map(|(a, b)| [a, b]), CASES),
        Eq::Ulp(16),
        8,
    );
    check(rt, f32_to_ints, &sample(any_f32(), CASES), Eq::Bits, 0);
    check(rt, f64_to_ints, &sample(any_f64(), CASES), Eq::Bits, 0);
    check(rt, i64_to_ints, &sample(any::<i64>(), CASES), Eq::Bits, 0);
    check(
        rt,
        to_floats,
        &sample(any::<[u64; 2]>(), CASES),
        Eq::Bits,
        0,
    );
    check(rt, loops, &sample(any::<[u32; 2]>(), CASES), Eq::Bits, 0);
    let edges = prop_oneof![any::<i32>(), -12i32..12, Just(i32::MIN), Just(i32::MAX)];
    check(rt, classify, &sample(edges, CASES), Eq::Bits, 0);
    let particle = (
        prop::array::uniform3(finite_f32()),
        prop::array::uniform3(finite_f32()),
        finite_f32(),
        any::<u32>(),
    )
        .prop_map(|(pos, vel, mass, steps)| Particle {
            pos,
            vel,
            mass,
            steps,
        });
    check(rt, step, &sample(particle, CASES), Eq::Floats(&[]), 4);
    check(
        rt,
        dot,
        &sample(prop::array::uniform16(finite_f32()), CASES),
        Eq::Floats(&[]),
        4,
    );
    let pair = any::<[u64; 2]>().prop_map(|[a, b]| Pair { a, b });
    check(rt, swap, &sample(pair, CASES), Eq::Bits, 0);
    check(
        rt,
        echo64,
        &sample(
            prop::array::uniform32(any::<u8>()).prop_map(|h| {
                let mut x = [0u8; 64];
                x[..32].copy_from_slice(&h);
                x[32..].copy_from_slice(&h.map(|b| b ^ 0x5a));
                x
            }),
            CASES,
        ),
        Eq::Bits,
        0,
    );
    let scale = (finite_f32(), 0u32..20, prop::array::uniform14(finite_f32()))
        .prop_map(|(scale, count, data)| Scale14 { scale, count, data });
    check(rt, vec_scale14, &sample(scale, CASES), Eq::Floats(&[]), 4);
    let sum = (0u32..20, prop::array::uniform14(finite_f32()))
        .prop_map(|(count, data)| Sum14 { count, data });
    check(rt, reduce_sum14, &sample(sum, CASES), Eq::Floats(&[]), 4);
    check(rt, not_cmp, &sample(0u32..12, 24), Eq::Bits, 0);
    check(rt, cast_literals, &sample(any::<u64>(), CASES), Eq::Bits, 0);
    check(rt, cast_float_literal, &[1.0, 3.0, -7.5], Eq::Bits, 0);
    check(rt, path_calls, &sample(any::<u8>(), 50), Eq::Bits, 0);
    let pair = any::<[u64; 2]>().prop_map(|[a, b]| Pair { a, b });
    check(rt, paren_swap, &sample(pair, 50), Eq::Bits, 0);
    let ints = prop_oneof![any::<i32>(), Just(i32::MIN), Just(-1)];
    check(rt, path_abs, &sample(ints, 50), Eq::Bits, 0);
    check(rt, user_abs, &sample(-1000i32..1000, 50), Eq::Bits, 0);
    check(
        rt,
        shadowed_helper(),
        &sample(any::<u32>(), 50),
        Eq::Bits,
        0,
    );
    let geo =
        (finite_f32(), finite_f32(), any::<u32>(), any::<u32>()).prop_map(|(lat, long, t, int)| {
            Geo {
                lat,
                long,
                r#type: t,
                int,
            }
        });
    check(rt, keywords, &sample(geo, 50), Eq::Floats(&[]), 4);
}

/// Runs lane-parallel `h` on `rt` and checks each reply against the Rust function run over
/// `lanes` lanes (`PortableLanes::run`), bit for bit (any NaN equals any NaN).
fn check_lanes<Req, Resp>(rt: &Runtime, h: PortableLanes<Req, Resp>, inputs: &[Req], lanes: u32)
where
    Req: gyre::Pod + gyre::DeviceType + std::fmt::Debug,
    Resp: gyre::portable::Reducible + std::fmt::Debug,
{
    let k = rt
        .launch(KernelSpec::portable(h).capacity(256))
        .unwrap_or_else(|e| panic!("{}: launch: {e}", h.name()));
    for &r in inputs {
        let got = k
            .call_blocking(r)
            .unwrap_or_else(|e| panic!("{} on {:?}: {e}", h.name(), k.backend()));
        let want = h.run(r, lanes).expect("1..=256 lanes");
        let (g, w) = (bytemuck::bytes_of(&got), bytemuck::bytes_of(&want));
        assert!(
            g == w || floats_equal(g, w, 4, Eq::Floats(&[])),
            "{} on {:?} with {lanes} lanes: request {r:?}\n  device: {got:?}\n  rust:   {want:?}",
            h.name(),
            k.backend()
        );
    }
    k.shutdown_blocking().expect("shutdown");
}

/// Every lane-parallel handler on `rt`, whose backend runs `lanes` lanes.
fn run_lanes(rt: &Runtime, lanes: u32) {
    check_lanes(rt, sum_sq_lanes, &sample(any::<[u32; 16]>(), CASES), lanes);
    check_lanes(
        rt,
        dot_lanes,
        &sample(prop::array::uniform16(finite_f32()), CASES),
        lanes,
    );
    check_lanes(rt, max_lanes, &sample(any::<[i32; 16]>(), CASES), lanes);
    check_lanes(
        rt,
        min_lanes,
        &sample(prop::array::uniform16(any_f32()), CASES),
        lanes,
    );
    check_lanes(rt, lane_panics, &[lanes, lanes + 5, 300], lanes);
}

/// The lane-parallel handlers on the CPU backend with 1, 7 and 32 emulated lanes: the
/// replies equal the Rust function run over as many lanes, and the integer reductions do
/// not depend on the lane count.
#[test]
fn lane_parallel_handlers_on_the_cpu_backend() {
    for lanes in [1, 7, 32] {
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .cpu_lanes(lanes)
            .build()
            .expect("cpu");
        run_lanes(&rt, lanes);
    }
    for v in sample(any::<[u32; 16]>(), 50) {
        let one = sum_sq_lanes.run(v, 1).expect("one lane");
        assert_eq!(sum_sq_lanes(v, gyre::portable::Lane::single()), one);
        for lanes in [2, 7, 32, 256] {
            assert_eq!(sum_sq_lanes.run(v, lanes).expect("lanes"), one);
        }
    }
    assert!(sum_sq_lanes.run([0; 16], 0).is_err() && sum_sq_lanes.run([0; 16], 257).is_err());
    for v in sample(any::<[i32; 16]>(), 50) {
        assert_eq!(
            max_lanes.run(v, 7).expect("7 lanes"),
            *v.iter().max().expect("16 values")
        );
    }
}

/// A panic on any lane answers HANDLER_PANIC and faults the kernel.
#[test]
fn a_panic_on_one_lane_faults_the_kernel() {
    let _g = support::guard(
        "a_panic_on_one_lane_faults_the_kernel",
        CHILD,
        support::TEST_LIMIT,
    );
    let mut rts = vec![(
        Runtime::builder()
            .backend(Backend::Cpu)
            .cpu_lanes(32)
            .build()
            .expect("cpu"),
        32,
    )];
    if let Some((platform, device)) = support::device_or_skip(CHILD) {
        let rt = Runtime::builder()
            .backend(Backend::OpenCl { platform, device })
            .build()
            .expect("OpenCL runtime");
        rts.push((rt, 1));
    }
    for (rt, lanes) in rts {
        let b = rt.backend();
        let k = rt
            .launch(KernelSpec::portable(lane_panics))
            .expect("launch");
        assert_eq!(k.call_blocking(lanes).expect("no lane panics"), lanes);
        match k.call_blocking(lanes - 1) {
            Err(Error::Handler { status, .. }) => {
                assert_eq!(status, gyre::codes::HANDLER_PANIC, "{b}")
            }
            other => panic!("{b}: lane {} past the end gave {other:?}", lanes - 1),
        }
        let _ = k.shutdown_blocking();
    }
}

/// Runs the generated C of lane-parallel `h` over one OpenCL work-group of `lanes`
/// work-items (`gyre_opencl::phase_check`: the phases of the block loop without the ring)
/// and checks each reply against the Rust function run over as many lanes.
fn phase_check_lanes<Req, Resp>(
    b: &gyre_opencl::OpenClBackend,
    h: PortableLanes<Req, Resp>,
    inputs: &[Req],
    lanes: u32,
) where
    Req: gyre::Pod + gyre::DeviceType + std::fmt::Debug,
    Resp: gyre::portable::Reducible + std::fmt::Debug,
{
    let src = h.c_source();
    let handler = gyre_opencl::Handler::Custom {
        name: h.name(),
        source: &src,
    };
    let reqs: Vec<Vec<u8>> = inputs
        .iter()
        .map(|r| bytemuck::bytes_of(r).to_vec())
        .collect();
    let answers = gyre_opencl::phase_check::run(b, handler, lanes, 0, &reqs, 64)
        .unwrap_or_else(|e| panic!("{} over {lanes} work-items: {e}", h.name()));
    for (r, a) in inputs.iter().zip(answers) {
        let want = h.run(*r, lanes).expect("1..=256 lanes");
        let w = bytemuck::bytes_of(&want);
        assert!(
            !a.panicked
                && a.status == 0
                && (a.reply == w || floats_equal(&a.reply, w, 4, Eq::Floats(&[]))),
            "{} over {lanes} work-items: request {r:?}: device {a:?}, rust {want:?}",
            h.name()
        );
    }
}

/// The lane-parallel handlers' generated C over OpenCL work-groups of 1, 7 and 32
/// work-items: the multi-lane phases (every lane's part, the panic vote, the combine in
/// lane order) on a real OpenCL implementation.
#[test]
fn lane_parallel_c_over_opencl_work_groups() {
    let _g = support::guard(
        "lane_parallel_c_over_opencl_work_groups",
        CHILD,
        support::TEST_LIMIT,
    );
    let Some((platform, device)) = support::device_or_skip(CHILD) else {
        return;
    };
    let b = gyre_opencl::OpenClBackend::new(platform, device).expect("OpenCL backend");
    for lanes in [1, 7, 32] {
        phase_check_lanes(&b, sum_sq_lanes, &sample(any::<[u32; 16]>(), 50), lanes);
        phase_check_lanes(
            &b,
            dot_lanes,
            &sample(prop::array::uniform16(finite_f32()), 50),
            lanes,
        );
        phase_check_lanes(&b, max_lanes, &sample(any::<[i32; 16]>(), 50), lanes);
        phase_check_lanes(
            &b,
            min_lanes,
            &sample(prop::array::uniform16(any_f32()), 50),
            lanes,
        );
        phase_check_lanes(&b, lane_panics, &[lanes, 300], lanes);
        // A panic on the lanes past `limit` only: every lane agrees, the request panics.
        if lanes > 1 {
            let src = lane_panics.c_source();
            let h = gyre_opencl::Handler::Custom {
                name: "lane_panics",
                source: &src,
            };
            let a =
                gyre_opencl::phase_check::run(&b, h, lanes, 0, &[1u32.to_le_bytes().to_vec()], 64)
                    .expect("phase check");
            assert!(a[0].panicked, "{lanes} work-items: {a:?}");
        }
    }
}

/// The re-expressed built-ins agree with `gyre_core::kernels`' references.
#[test]
fn builtins_reexpressed_match_the_references() {
    use gyre::kernels::{ReduceSum, Sum, VecF32, VecScale};
    for (scale, data) in sample(
        (finite_f32(), prop::collection::vec(finite_f32(), 0..=14)),
        100,
    ) {
        let mut d = [0.0f32; 14];
        d[..data.len()].copy_from_slice(&data);
        let n = data.len() as u32;
        let mut out = [0u8; 64];
        let req = VecScale::<14>::new(scale, &data).expect("fits");
        gyre::kernels::vec_scale(0, bytemuck::bytes_of(&req), &mut out).expect("vec_scale");
        let reference: VecF32<14> = bytemuck::pod_read_unaligned(&out);
        let got = vec_scale14(Scale14 {
            scale,
            count: n,
            data: d,
        });
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got[..data.len()]),
            bits(&reference.values[..data.len()])
        );
        let req = ReduceSum::<14>::new(&data).expect("fits");
        gyre::kernels::reduce_sum(0, bytemuck::bytes_of(&req), &mut out).expect("reduce_sum");
        let r: Sum = bytemuck::pod_read_unaligned(&out[..8]);
        let got = reduce_sum14(Sum14 { count: n, data: d });
        assert_eq!(
            (got[0].to_bits(), got[1] as u32),
            (r.sum.to_bits(), r.count)
        );
    }
    let x: [u8; 64] = core::array::from_fn(|i| i as u8);
    let mut out = [0u8; 64];
    gyre::kernels::echo(0, &x, &mut out).expect("echo");
    assert_eq!(echo64(x), out);
}

/// Every handler on the CPU backend, where the kernel runs the Rust function.
#[test]
fn portable_handlers_on_the_cpu_backend() {
    let rt = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("cpu");
    run_all(&rt);
}

/// The child of the compile check: builds every handler's program once on OpenCL.
#[test]
fn portable_handlers_build_in_child() {
    if !support::is_child() {
        let _g = support::guard(CHILD, CHILD, support::TEST_LIMIT);
        support::device_or_skip(CHILD);
        return;
    }
    let Some((platform, device)) = support::device_or_skip(CHILD) else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    // One request each: builds (and caches in this process) every program.
    run_one_each(&rt);
}

fn run_one_each(rt: &Runtime) {
    macro_rules! ints { ($($h:ident: $t:ty),*) => {$( check(rt, $h, &[[3 as $t, 5 as $t]], Eq::Bits, 0); )*}; }
    ints!(arith_u8: u8, arith_u16: u16, arith_u32: u32, arith_u64: u64,
          arith_i8: i8, arith_i16: i16, arith_i32: i32, arith_i64: i64);
    check(rt, signed_ops, &[[1, 2]], Eq::Bits, 0);
    check(rt, arith_f32, &[[1.0, 2.0, 3.0]], Eq::Bits, 0);
    check(rt, arith_f64, &[[1.0, 2.0, 3.0]], Eq::Bits, 0);
    check(rt, math_f32, &[[1.0, 2.0]], Eq::Ulp(16), 4);
    check(rt, math_f64, &[[1.0, 2.0]], Eq::Ulp(16), 8);
    check(rt, f32_to_ints, &[1.5], Eq::Bits, 0);
    check(rt, f64_to_ints, &[-1.5], Eq::Bits, 0);
    check(rt, i64_to_ints, &[-300], Eq::Bits, 0);
    check(rt, to_floats, &[[7, 9]], Eq::Bits, 0);
    check(rt, loops, &[[10, 3]], Eq::Bits, 0);
    check(rt, classify, &[-5], Eq::Bits, 0);
    check(
        rt,
        step,
        &[Particle {
            pos: [0.0; 3],
            vel: [1.0; 3],
            mass: 0.5,
            steps: 0,
        }],
        Eq::Floats(&[]),
        4,
    );
    check(rt, dot, &[[1.0; 16]], Eq::Bits, 0);
    check(rt, swap, &[Pair { a: 1, b: 2 }], Eq::Bits, 0);
    check(rt, echo64, &[[7u8; 64]], Eq::Bits, 0);
    check(
        rt,
        vec_scale14,
        &[Scale14 {
            scale: 2.0,
            count: 3,
            data: [1.0; 14],
        }],
        Eq::Bits,
        0,
    );
    check(
        rt,
        reduce_sum14,
        &[Sum14 {
            count: 3,
            data: [1.0; 14],
        }],
        Eq::Bits,
        0,
    );
    check(rt, divide, &[[7, 2]], Eq::Bits, 0);
    check(rt, lookup, &[2], Eq::Bits, 0);
    check(rt, not_cmp, &[3], Eq::Bits, 0);
    check(rt, cast_literals, &[1], Eq::Bits, 0);
    check(rt, cast_float_literal, &[1.0], Eq::Bits, 0);
    check(rt, path_calls, &[3], Eq::Bits, 0);
    check(rt, paren_swap, &[Pair { a: 1, b: 2 }], Eq::Bits, 0);
    check(rt, path_abs, &[-3], Eq::Bits, 0);
    check(rt, user_abs, &[-5], Eq::Bits, 0);
    check(rt, panic_before_helper, &[4], Eq::Bits, 0);
    check(rt, shadowed_helper(), &[5], Eq::Bits, 0);
    let g = Geo {
        lat: 1.0,
        long: 2.0,
        r#type: 3,
        int: 4,
    };
    check(rt, keywords, &[g], Eq::Bits, 0);
    check_lanes(rt, sum_sq_lanes, &[[1; 16]], 1);
    check_lanes(rt, dot_lanes, &[[1.0; 16]], 1);
    check_lanes(rt, max_lanes, &[[3; 16]], 1);
    check_lanes(rt, min_lanes, &[[3.0; 16]], 1);
    check_lanes(rt, lane_panics, &[1], 1);
    let (platform, device) = match rt.backend() {
        Backend::OpenCl { platform, device } => (platform, device),
        _ => return,
    };
    let b = gyre_opencl::OpenClBackend::new(platform, device).expect("OpenCL backend");
    for lanes in [1, 7, 32] {
        phase_check_lanes(&b, sum_sq_lanes, &[[1; 16]], lanes);
        phase_check_lanes(&b, dot_lanes, &[[1.0; 16]], lanes);
        phase_check_lanes(&b, max_lanes, &[[3; 16]], lanes);
        phase_check_lanes(&b, min_lanes, &[[3.0; 16]], lanes);
        phase_check_lanes(&b, lane_panics, &[300], lanes);
    }
}

/// Every handler on OpenCL: the generated C against the Rust function.
#[test]
fn portable_handlers_on_opencl_match_rust() {
    let _g = support::guard(
        "portable_handlers_on_opencl_match_rust",
        CHILD,
        support::TEST_LIMIT,
    );
    let Some((platform, device)) = support::device_or_skip(CHILD) else {
        return;
    };
    let rt = Runtime::builder()
        .backend(Backend::OpenCl { platform, device })
        .build()
        .expect("OpenCL runtime");
    run_all(&rt);
    // PoCL runs one work-item per group (docs/opencl.md); a GPU runs its group size.
    run_lanes(&rt, 1);
}

/// Every handler on CUDA, where a GPU is present: the generated C through NVRTC against
/// the Rust function, the lane-parallel ones over the ring kernel's block of
/// `gyre_cuda::backend::LANES` threads. Skips without a usable GPU (fails with
/// `GYRE_REQUIRE_CUDA=1`). Runs in the GPU check kit (`scripts/gpu-kit.sh`).
#[cfg(feature = "cuda")]
#[test]
fn portable_handlers_on_cuda_match_rust() {
    let _g = cuda_support::serial();
    if !cuda_support::available("portable_handlers_on_cuda_match_rust") {
        return;
    }
    let rt = Runtime::builder()
        .backend(Backend::Cuda { device: 0 })
        .build()
        .expect("CUDA runtime");
    run_all(&rt);
    run_lanes(&rt, gyre_cuda::backend::LANES);
}

/// A runtime panic (a zero divisor, an index past the end) is answered HANDLER_PANIC and
/// faults the kernel, on every backend, as a Rust handler's panic does.
#[test]
fn runtime_panics_fault_the_kernel_on_every_backend() {
    let _g = support::guard(
        "runtime_panics_fault_the_kernel_on_every_backend",
        CHILD,
        support::TEST_LIMIT,
    );
    let mut backends = vec![Backend::Cpu];
    if let Some((platform, device)) = support::device_or_skip(CHILD) {
        backends.push(Backend::OpenCl { platform, device });
    }
    fn panics<
        Req: gyre::Pod + gyre::DeviceType,
        Resp: gyre::Pod + gyre::DeviceType + std::fmt::Debug,
    >(
        rt: &Runtime,
        h: Portable<Req, Resp>,
        fine: Req,
        bad: Req,
    ) {
        let b = rt.backend();
        let k = rt.launch(KernelSpec::portable(h)).expect("launch");
        k.call_blocking(fine).unwrap_or_else(|e| panic!("{b}: {e}"));
        match k.call_blocking(bad) {
            Err(Error::Handler { status, .. }) => {
                assert_eq!(status, gyre::codes::HANDLER_PANIC, "{b}")
            }
            other => panic!("{b}: {} gave {other:?}", h.name()),
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while k.state()
            != (gyre::KernelState::Faulted {
                code: gyre::codes::HANDLER_PANIC,
            })
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{b}: state {:?}",
                k.state()
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let after = k.call_blocking(fine);
        assert!(
            matches!(
                after,
                Err(Error::Closed { .. })
                    | Err(Error::KernelFaulted {
                        code: gyre::codes::HANDLER_PANIC,
                        ..
                    })
            ),
            "{b}: {after:?}"
        );
    }
    for b in backends {
        let rt = Runtime::builder().backend(b).build().expect("runtime");
        panics(&rt, divide, [9, 3], [1, 0]);
        panics(&rt, lookup, 3, 4);
        panics(&rt, panic_before_helper, 4, 0);
    }
}
