//! Pipelines on the OpenCL backend: each stage a work-group of one device, writing the
//! next stage's request ring in fine-grained SVM (PoCL in CI: one compute unit per core,
//! so at most that many stages). Without a usable OpenCL device the cases print `SKIP`
//! and pass, unless `GYRE_REQUIRE_OPENCL=1`. The fault table is the CPU backend's
//! (`tests/pipeline.rs`, `tests/pipeline_restart.rs`); the cases every backend runs
//! (`tests/pipeline_cases/`: in order, reloads, a portable handler's panic restarted in
//! place, a chain across the CPU) run here on the device too.

#![cfg(feature = "opencl")]

#[path = "support/deadline.rs"]
mod deadline;
mod pipeline_cases;
#[path = "support/opencl.rs"]
mod support;

use gyre::{
    codes,
    pipeline::{Pipeline, PipelineSpec},
    Backend, Error, KernelSpec, KernelState, Runtime,
};

fn guard() -> support::Guard {
    support::guard(
        module_path!(),
        "opencl_pipeline_compiles_in_child",
        support::TEST_LIMIT,
    )
}

#[path = "support/runtime.rs"]
mod test_runtime;

fn runtime(test: &str) -> Option<Runtime> {
    support::device_or_skip(test).map(test_runtime::opencl)
}

fn compute_units(rt: &Runtime) -> usize {
    match rt.backend() {
        Backend::OpenCl { platform, device } => support::compute_units(platform, device),
        other => panic!("{other:?}"),
    }
}

/// Odd requests answered with status USER_BASE + x, even ones passed on (u32).
const REJECT_ODD: &str = r#"
unsigned int gyre_handler(unsigned int t, const __global unsigned char *req,
                          unsigned int len, __global unsigned char *reply, unsigned int cap,
                          unsigned int *out, unsigned int lane, unsigned int lanes) {
    const unsigned int x = *(const __global unsigned int *)req;
    *out = 0u;
    if (len != 4u || cap < 4u) { return GYRE_ERR_HANDLER_REJECTED; }
    if (x % 2u == 1u) { return GYRE_ERR_USER_BASE + x; }
    if (lane == 0u) { *(__global unsigned int *)reply = x; }
    *out = 4u;
    return GYRE_ERR_NONE;
}
"#;

/// x -> x * 10 + 1 (u32).
const TIMES_TEN: &str = r#"
unsigned int gyre_handler(unsigned int t, const __global unsigned char *req,
                          unsigned int len, __global unsigned char *reply, unsigned int cap,
                          unsigned int *out, unsigned int lane, unsigned int lanes) {
    const unsigned int x = *(const __global unsigned int *)req;
    *out = 0u;
    if (len != 4u || cap < 4u) { return GYRE_ERR_HANDLER_REJECTED; }
    if (lane == 0u) { *(__global unsigned int *)reply = x * 10u + 1u; }
    *out = 4u;
    return GYRE_ERR_NONE;
}
"#;

fn reject_odd() -> KernelSpec<u32, u32> {
    // The Rust closure answers recognisably wrong: it must never run here.
    KernelSpec::from_fn("reject-odd", |_: u32| 999_999u32)
        .opencl_handler("reject_odd.cl", REJECT_ODD)
}

fn times_ten() -> KernelSpec<u32, u32> {
    KernelSpec::from_fn("times-ten", |_: u32| 888_888u32).opencl_handler("times_ten.cl", TIMES_TEN)
}

/// What a pipeline of `reject_odd` then `times_ten` stages answers: 40 calls (the odd ones
/// rejected by the first stage, passed on by the rest), then 300 sends, more than the
/// capacity, in order; shut down, then every stage's telemetry.
fn serve_reject_then_times_ten(p: &Pipeline<u32, u32>) -> Vec<gyre_abi::TelemetrySnapshot> {
    for x in 0..40u32 {
        match p.call_blocking(x) {
            Ok(v) => assert_eq!((x % 2, v), (0, x * 10 + 1)),
            Err(Error::Handler { status, .. }) => {
                assert_eq!((x % 2, status), (1, codes::USER_BASE + x))
            }
            Err(e) => panic!("{x}: {e}"),
        }
    }
    let producer = {
        let k = p.kernel().clone();
        std::thread::spawn(move || {
            for x in 0..300u32 {
                k.send_blocking(2 * x).expect("send");
            }
        })
    };
    for x in 0..300u32 {
        assert_eq!(p.recv_blocking().expect("recv"), 20 * x + 1);
    }
    producer.join().expect("producer");
    p.shutdown_blocking().expect("shutdown");
    p.stage_telemetry().expect("telemetry")
}

/// The child of the compile check: a two-stage chain of both sources.
#[test]
fn opencl_pipeline_compiles_in_child() {
    if !support::is_child() {
        let _g = guard();
        support::device_or_skip("opencl_pipeline_compiles_in_child");
        return;
    }
    let Some(rt) = runtime("opencl_pipeline_compiles_in_child") else {
        return;
    };
    let p = rt
        .launch(PipelineSpec::new("c", reject_odd()).then(times_ten()))
        .expect("pipeline");
    assert_eq!(p.call_blocking(2).expect("call"), 21);
    p.shutdown_blocking().expect("shutdown");
}

#[test]
fn two_device_stages_answer_in_order_and_pass_errors_on() {
    let _g = guard();
    let Some(rt) = runtime("two_device_stages_answer_in_order_and_pass_errors_on") else {
        return;
    };
    let p = rt
        .launch(PipelineSpec::new("cl", reject_odd().capacity(16)).then(times_ten().capacity(16)))
        .expect("pipeline");
    assert!(matches!(p.backend(), Backend::OpenCl { .. }));
    let t = serve_reject_then_times_ten(&p);
    assert_eq!((t[0].messages_out, t[1].messages_out), (340, 340));
    assert_eq!((t[0].errors, t[1].errors), (20, 0));
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// Each device stage reloaded in turn while the other serves (`Pipeline::reload_stage`):
/// the new source is built while both run, the stage hands over at a batch boundary, and
/// its successor (on the compute unit it freed) answers from then on; no request is lost.
#[test]
fn each_device_stage_is_reloaded_while_the_other_serves() {
    let _g = guard();
    let Some(rt) = runtime("each_device_stage_is_reloaded_while_the_other_serves") else {
        return;
    };
    let p = rt
        .launch(
            PipelineSpec::new("cl-reload", reject_odd().capacity(16))
                .then(times_ten().capacity(16)),
        )
        .expect("pipeline");
    assert_eq!(p.call_blocking(4).expect("call"), 41);
    let plus_two = KernelSpec::from_fn("times-ten-plus-two", |_: u32| 777_777u32)
        .opencl_handler(
            "times_ten_plus_two.cl",
            TIMES_TEN.replace("10u + 1u", "10u + 2u"),
        )
        .capacity(16);
    // Requests queued before the reload are answered by one handler or the other, in
    // order.
    for x in 0..8u32 {
        p.send_blocking(2 * x).expect("send");
    }
    p.reload_stage_blocking(1, plus_two)
        .expect("reload stage 1");
    let mut switched = false;
    for x in 0..8u32 {
        let v = p.recv_blocking().expect("recv");
        switched |= v == 20 * x + 2;
        assert!(v == 20 * x + 1 && !switched || v == 20 * x + 2, "{x}: {v}");
    }
    assert_eq!(p.call_blocking(4).expect("call"), 42);
    // The head: reloaded with the same source, whose odd rejections keep coming.
    p.reload_stage_blocking(0, reject_odd().capacity(16))
        .expect("reload stage 0");
    match p.call_blocking(3) {
        Err(Error::Handler { status, .. }) => assert_eq!(status, codes::USER_BASE + 3),
        other => panic!("3: {other:?}"),
    }
    assert_eq!(p.call_blocking(6).expect("call"), 62);
    let r = p.stage_relaunches();
    assert_eq!((r[0].reloads, r[1].reloads), (1, 1));
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// A chain longer than the device's compute units cannot run at once: refused, and the
/// stages already started give their units back (a chain that fits launches after it).
#[test]
fn a_chain_longer_than_the_device_runs_is_refused_and_leaves_nothing_running() {
    let _g = guard();
    let Some(rt) =
        runtime("a_chain_longer_than_the_device_runs_is_refused_and_leaves_nothing_running")
    else {
        return;
    };
    let units = compute_units(&rt);
    let mut long = PipelineSpec::new("long", KernelSpec::<u32, u32>::echo());
    for _ in 0..units {
        long = long.then(KernelSpec::<u32, u32>::echo());
    }
    match rt.launch(long) {
        Err(Error::Launch {
            backend: "opencl", ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let mut fits = PipelineSpec::new("fits", KernelSpec::<u32, u32>::echo());
    for _ in 1..units {
        fits = fits.then(KernelSpec::<u32, u32>::echo());
    }
    let p = rt.launch(fits).expect("a chain of one stage per unit");
    assert_eq!(p.call_blocking(7).expect("call"), 7);
    p.shutdown_blocking().expect("shutdown");
}

/// A round-robin fan-out of device stages, answering the host by id: three work-groups
/// (head and two branches) at once, so it needs three compute units. PoCL on a 2-core
/// machine has two: there the case checks only that the launch gets as far as the unit
/// count (every stage's link, link table entries included, passes the launch's checks),
/// and says SKIP for the rest.
#[test]
fn a_device_fan_out_answers_the_host_in_request_order() {
    let _g = guard();
    let Some(rt) = runtime("a_device_fan_out_answers_the_host_in_request_order") else {
        return;
    };
    let spec = || {
        PipelineSpec::new("fan", reject_odd()).fan_out(
            gyre::pipeline::Route::RoundRobin,
            [
                gyre::pipeline::Branch::new(times_ten()),
                gyre::pipeline::Branch::new(times_ten()),
            ],
        )
    };
    let units = compute_units(&rt);
    if units < 3 {
        match rt.launch(spec()) {
            Err(e @ Error::Launch { .. }) => {
                let why = format!("{e}: {:?}", std::error::Error::source(&e));
                assert!(
                    why.contains("compute unit"),
                    "refused for another reason: {why}"
                );
            }
            other => panic!("{other:?}"),
        }
        eprintln!(
            "SKIP a_device_fan_out_answers_the_host_in_request_order: the device has {units} \
             compute units, a fan-out of two needs 3 (checked: the launch is refused for \
             that, after the branches' links passed)"
        );
        return;
    }
    let p = rt.launch(spec()).expect("pipeline");
    let t = serve_reject_then_times_ten(&p);
    assert_eq!(t[0].messages_out, 340);
    assert_eq!((t[1].messages_out, t[2].messages_out), (170, 170));
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// Stages on two backends (`Runtime::launch_across`): a CPU stage and an OpenCL stage,
/// in both orders. The CPU stage's region is written by the device stage (its replies,
/// or its requests), which cannot address the CPU backend's host memory: the launch
/// places that region in the OpenCL backend's SVM instead, which the CPU stage and the
/// host address too.
#[test]
fn a_cpu_stage_and_a_device_stage_chain_across_runtimes() {
    let _g = guard();
    let Some(cl) = runtime("a_cpu_stage_and_a_device_stage_chain_across_runtimes") else {
        return;
    };
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime");
    let runtimes = [cpu, cl];
    // CPU first: x -> 2x on the CPU, then times ten plus one on the device.
    let p = Runtime::launch_across(
        &runtimes,
        PipelineSpec::new("cpu-then-cl", KernelSpec::from_fn("double", |x: u32| x * 2))
            .then(times_ten())
            .on(1),
    )
    .expect("CPU then OpenCL");
    assert_eq!(p.backend(), Backend::Cpu, "the host's side is the head's");
    for x in 0..300u32 {
        p.send_blocking(x).expect("send");
        assert_eq!(p.recv_blocking().expect("recv"), 20 * x + 1);
    }
    p.shutdown_blocking().expect("shutdown");
    let t = p.stage_telemetry().expect("telemetry");
    assert_eq!((t[0].messages_out, t[1].messages_out), (300, 300));
    // Device first: the errors the device stage answers pass through the CPU stage.
    let p = Runtime::launch_across(
        &runtimes,
        PipelineSpec::new("cl-then-cpu", reject_odd())
            .on(1)
            .then(KernelSpec::from_fn("inc", |x: u32| x + 1)),
    )
    .expect("OpenCL then CPU");
    assert!(matches!(p.backend(), Backend::OpenCl { .. }));
    for x in 0..40u32 {
        match p.call_blocking(x) {
            Ok(v) => assert_eq!((x % 2, v), (0, x + 1)),
            Err(Error::Handler { status, .. }) => {
                assert_eq!((x % 2, status), (1, codes::USER_BASE + x))
            }
            Err(e) => panic!("{x}: {e}"),
        }
    }
    p.shutdown_blocking().expect("shutdown");
    assert!(p
        .stage_states()
        .iter()
        .all(|s| *s == KernelState::Terminated { code: 0 }));
}

/// A fan-out across backends (`docs/pipelines.md`, "Across devices"): a CPU stage fans
/// out round-robin into a CPU branch and an OpenCL branch, which write the host's
/// replies (or a CPU join) by id, advancing one ring by compare-and-swap from a CPU
/// thread and an OpenCL kernel (fine-grained SVM atomics are the host's). The join's
/// region and the link table are the OpenCL backend's SVM, which every user addresses.
#[test]
fn a_fan_out_across_the_cpu_and_a_device_answers_in_request_order() {
    let _g = guard();
    let Some(cl) = runtime("a_fan_out_across_the_cpu_and_a_device_answers_in_request_order") else {
        return;
    };
    let cpu = Runtime::builder()
        .backend(Backend::Cpu)
        .build()
        .expect("CPU runtime");
    let runtimes = [cpu, cl];
    let fan = || {
        PipelineSpec::new("fan", KernelSpec::from_fn("double", |x: u32| x * 2))
            .fan_out(
                gyre::pipeline::Route::RoundRobin,
                [
                    gyre::pipeline::Branch::new(KernelSpec::from_fn("inc", |x: u32| x + 1)),
                    gyre::pipeline::Branch::new(times_ten()),
                ],
            )
            .on(1)
    };
    // Request i goes to branch i % 2: the CPU's inc, or the device's times ten plus one.
    let want = |x: u32| if x % 2 == 0 { 2 * x + 1 } else { 20 * x + 1 };
    let serve = |p: &Pipeline<u32, u32>, then: &dyn Fn(u32) -> u32| {
        let producer = {
            let k = p.kernel().clone();
            std::thread::spawn(move || {
                for x in 0..400u32 {
                    k.send_blocking(x).expect("send");
                }
            })
        };
        for x in 0..400u32 {
            assert_eq!(p.recv_blocking().expect("recv"), then(want(x)), "reply {x}");
        }
        producer.join().expect("producer");
        p.shutdown_blocking().expect("shutdown");
        assert!(p
            .stage_states()
            .iter()
            .all(|s| *s == KernelState::Terminated { code: 0 }));
        p.stage_telemetry().expect("telemetry")
    };
    // To the host: both branches write the head's reply ring by id.
    let p = Runtime::launch_across(&runtimes, fan()).expect("fan-out to the host");
    let t = serve(&p, &|y| y);
    assert_eq!((t[1].messages_out, t[2].messages_out), (200, 200));
    // Into a join on the CPU.
    let p = Runtime::launch_across(
        &runtimes,
        fan().then(KernelSpec::from_fn("join", |x: u32| x + 1000)),
    )
    .expect("fan-out into a CPU join");
    let t = serve(&p, &|y| y + 1000);
    assert_eq!(t[3].messages_out, 400);
}

// The cases every backend runs (`tests/pipeline_cases/`), on the OpenCL device, one at
// a time under the watchdog.
support::device_cases!(
    pipeline_cases,
    pipeline_cases::Target::OpenCl,
    [
        a_chain_answers_in_order_and_counts_every_message,
        each_stage_is_reloaded_under_a_stream,
        a_stage_that_panics_is_restarted_in_place,
        a_stage_chains_with_a_cpu_stage_across_runtimes,
    ]
);
