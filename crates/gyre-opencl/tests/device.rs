//! The OpenCL ring kernel driven directly through `gyre_core` (no runtime, no completion
//! driver): K0 faults, echo, a protocol error under the head, pause / terminate / drain,
//! the host-heartbeat watchdog, and the backend's refusals. On PoCL in CI.
//!
//! Skips (printing why) without a usable OpenCL device, fails instead with
//! `GYRE_REQUIRE_OPENCL=1`. Tests run one at a time under a watchdog, after a compile
//! check in a child process (`tests/support/opencl.rs` at the repository root).

use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre_abi::{command, error, state};
use gyre_core::channel::{Channel, Kind};
use gyre_core::region::{HostMemory, RingId};
use gyre_core::ring::Geometry;
use gyre_core::{Backend as _, IdleStrategy, KernelInstance, LaunchSpec, SharedRegion};
use gyre_opencl::{Handler, OpenClBackend};

#[path = "../../../tests/support/opencl.rs"]
mod support;

const CHILD: &str = "device_compiles_in_child";

fn setup(test: &str) -> Option<(support::Guard, OpenClBackend)> {
    let g = support::guard(test, CHILD, support::TEST_LIMIT);
    let (p, d) = support::device_or_skip(test)?;
    let b = OpenClBackend::new(p, d).unwrap_or_else(|e| panic!("OpenClBackend::new: {e}"));
    Some((g, b))
}

fn spec(builtin: Option<u32>) -> LaunchSpec {
    LaunchSpec {
        name: "device-test".into(),
        handler: Arc::new(gyre_core::kernels::echo),
        builtin,
        idle: IdleStrategy::BusySpin,
        telemetry: true,
        cuda_source: None,
        opencl_source: None,
        lane_handler: None,
        export: None,
        doorbell: None,
        reply_bell: None,
        loans: None,
        link: None,
    }
}

fn region(b: &OpenClBackend, cap: u32, timeout_ms: u32) -> Arc<SharedRegion> {
    let g = Geometry::new(cap, 128, cap.min(4)).unwrap();
    let mem = b.alloc_region(SharedRegion::bytes_for(&g)).unwrap();
    Arc::new(SharedRegion::new(mem, g, timeout_ms).unwrap())
}

fn launch(b: &OpenClBackend, r: &Arc<SharedRegion>) -> Box<dyn KernelInstance> {
    b.launch(r.clone(), &spec(Some(gyre_core::kernels::ids::ECHO)))
        .unwrap_or_else(|e| panic!("launch: {e}"))
}

/// Waits (bounded, for the watchdog's sake too) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn reply(ch: &Channel, i: u64) -> (u32, Vec<u8>) {
    ch.wait_blocking(
        i,
        &IdleStrategy::BusySpin,
        Some(Duration::from_secs(60)),
        |r| Ok((r.meta.status, r.payload.to_vec())),
    )
    .unwrap()
}

/// Terminates the kernel and joins it, checking it stopped cleanly.
fn stop(ch: &Channel, k: &dyn KernelInstance) {
    ch.command(command::TERMINATE);
    eventually("TERMINATED", || ch.kernel_state().0 == state::TERMINATED);
    eventually("the kernel command to finish", || k.is_finished());
    k.join().unwrap();
    assert_eq!(ch.kernel_state(), (state::TERMINATED, error::NONE));
}

/// The child of the compile check (a normal run only runs the check): builds every
/// built-in ring kernel and launches each once (PoCL generates the work-group function
/// at the first launch).
#[test]
fn device_compiles_in_child() {
    if !support::is_child() {
        let _g = support::guard(CHILD, CHILD, support::TEST_LIMIT);
        support::device_or_skip(CHILD);
        return;
    }
    let Some((p, d)) = support::device_or_skip(CHILD) else {
        return;
    };
    let b = OpenClBackend::new(p, d).unwrap_or_else(|e| panic!("{e}"));
    use gyre_core::kernels::ids;
    for id in [ids::ECHO, ids::VEC_SCALE, ids::REDUCE_SUM] {
        let h = Handler::builtin(id).expect("a built-in id");
        b.build(h).unwrap_or_else(|e| panic!("{e}"));
        let r = region(&b, 4, 0);
        let k = b
            .launch(r.clone(), &spec(Some(id)))
            .unwrap_or_else(|e| panic!("{e}"));
        let ch = Channel::new(r, "child");
        eventually("ACTIVE", || ch.kernel_state().0 == state::ACTIVE);
        stop(&ch, k.as_ref());
    }
}

#[test]
fn k0_faults_on_a_bad_control_block() {
    let Some((_g, b)) = setup("k0_faults_on_a_bad_control_block") else {
        return;
    };
    type Corrupt = fn(&SharedRegion);
    let cases: [(&str, Corrupt, u32); 3] = [
        (
            "magic",
            |r| r.control().magic.store(0xdead_beef, Release),
            error::BAD_MAGIC,
        ),
        (
            "abi_version",
            |r| {
                r.control()
                    .abi_version
                    .store(gyre_abi::ABI_VERSION + 1, Release)
            },
            error::BAD_ABI_VERSION,
        ),
        (
            "capacity",
            |r| r.control().capacity.store(3, Release),
            error::BAD_GEOMETRY,
        ),
    ];
    for (what, corrupt, code) in cases {
        let r = region(&b, 4, 0);
        corrupt(&r);
        let k = launch(&b, &r);
        eventually(what, || k.is_finished());
        k.join().unwrap();
        assert_eq!(r.control().state.load(Acquire), state::FAULTED, "{what}");
        assert_eq!(r.control().error_code.load(Acquire), code, "{what}");
    }
}

#[test]
fn echo_and_telemetry_through_the_device_loop() {
    let Some((_g, b)) = setup("echo_and_telemetry_through_the_device_loop") else {
        return;
    };
    let r = region(&b, 8, 0);
    let k = launch(&b, &r);
    let ch = Channel::new(r.clone(), "t");
    for n in 0..100u32 {
        let msg: Vec<u8> = (0..(n % 64)).map(|i| (i ^ n) as u8).collect();
        let i = ch.try_publish(Kind::Call, 1, &msg).unwrap();
        assert_eq!(reply(&ch, i), (error::NONE, msg));
    }
    eventually("telemetry of 100 messages", || {
        gyre_core::telemetry::read_consistent(r.telemetry(), 64)
            .map(|t| t.messages_out == 100)
            .unwrap_or(false)
    });
    let t = gyre_core::telemetry::read_consistent(r.telemetry(), 64).unwrap();
    assert_eq!((t.messages_in, t.errors, t.state), (100, 0, state::ACTIVE));
    assert!(r.control().kernel_heartbeat.load(Acquire) > 0);
    stop(&ch, k.as_ref());
}

#[test]
fn wrong_sequence_under_the_head_is_answered_bad_sequence() {
    let Some((_g, b)) = setup("wrong_sequence_under_the_head_is_answered_bad_sequence") else {
        return;
    };
    let r = region(&b, 4, 0);
    let k = launch(&b, &r);
    let ch = Channel::new(r.clone(), "t");
    ch.command(command::PAUSE);
    eventually("PAUSED", || ch.kernel_state().0 == state::PAUSED);
    let i = ch.try_publish(Kind::Call, 1, b"ok?").unwrap();
    // Corrupt the published slot while the kernel is paused: its sequence no longer
    // names its index.
    r.slot(RingId::Request, i).sequence().store(42, Release);
    ch.command(command::RUN);
    assert_eq!(reply(&ch, i).0, error::BAD_SEQUENCE);
    let j = ch.try_publish(Kind::Call, 1, b"fine").unwrap();
    assert_eq!(reply(&ch, j), (error::NONE, b"fine".to_vec()));
    stop(&ch, k.as_ref());
}

#[test]
fn terminate_drains_what_was_published_while_paused() {
    let Some((_g, b)) = setup("terminate_drains_what_was_published_while_paused") else {
        return;
    };
    let r = region(&b, 8, 0);
    let k = launch(&b, &r);
    let ch = Channel::new(r.clone(), "t");
    ch.command(command::PAUSE);
    eventually("PAUSED", || ch.kernel_state().0 == state::PAUSED);
    let first = ch.try_publish(Kind::Send, 1, b"a").unwrap();
    ch.try_publish(Kind::Send, 1, b"b").unwrap();
    ch.try_publish(Kind::Send, 1, b"c").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        r.control().k2h_head.load(Acquire),
        first,
        "a paused kernel answered"
    );
    stop(&ch, k.as_ref());
    assert_eq!(r.control().k2h_head.load(Acquire), first + 3);
    assert_eq!(r.control().processed.load(Acquire), first + 3);
}

#[test]
fn stale_host_heartbeat_terminates_the_kernel() {
    let Some((_g, b)) = setup("stale_host_heartbeat_terminates_the_kernel") else {
        return;
    };
    // Nobody writes the host heartbeat: after 50 ms on the device clock the kernel stops.
    let r = region(&b, 4, 50);
    let k = launch(&b, &r);
    eventually("the kernel to notice the stale heartbeat", || {
        k.is_finished()
    });
    k.join().unwrap();
    assert_eq!(r.control().state.load(Acquire), state::TERMINATED);
    assert_eq!(
        r.control().error_code.load(Acquire),
        error::HOST_HEARTBEAT_STALE
    );
    let t = gyre_core::telemetry::read_consistent(r.telemetry(), 64).unwrap();
    assert_eq!(t.state, state::TERMINATED);
}

#[test]
fn live_host_heartbeat_keeps_the_kernel_running() {
    let Some((_g, b)) = setup("live_host_heartbeat_keeps_the_kernel_running") else {
        return;
    };
    let r = region(&b, 4, 200);
    let k = launch(&b, &r);
    let ch = Channel::new(r.clone(), "t");
    eventually("ACTIVE", || ch.kernel_state().0 == state::ACTIVE);
    // 600 ms of heartbeats every 10 ms: three timeouts' worth, never stale.
    for _ in 0..60 {
        ch.heartbeat();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(ch.kernel_state(), (state::ACTIVE, error::NONE));
    stop(&ch, k.as_ref());
}

#[test]
fn refusals_are_typed_errors() {
    let Some((_g, b)) = setup("refusals_are_typed_errors") else {
        return;
    };
    // A closure handler.
    let r = region(&b, 4, 0);
    let e = b
        .launch(r, &spec(None))
        .err()
        .expect("closure handler refused");
    assert!(e.to_string().contains("device handler"), "{e}");
    // A region that is not SVM of this context.
    let g = Geometry::new(4, 128, 4).unwrap();
    let host = HostMemory::zeroed(SharedRegion::bytes_for(&g)).unwrap();
    let r = Arc::new(SharedRegion::new(Box::new(host), g, 0).unwrap());
    let e = b
        .launch(r, &spec(Some(gyre_core::kernels::ids::ECHO)))
        .err()
        .expect("host region refused");
    assert!(e.to_string().contains("not SVM"), "{e}");
    // One ring kernel per compute unit; one more is refused instead of never starting.
    let cus = b.device().compute_units as usize;
    let running: Vec<_> = (0..cus)
        .map(|_| {
            let r = region(&b, 4, 0);
            (launch(&b, &r), Channel::new(r, "t"))
        })
        .collect();
    let r = region(&b, 4, 0);
    let e = b
        .launch(r, &spec(Some(gyre_core::kernels::ids::ECHO)))
        .err()
        .expect("device full");
    assert!(e.to_string().contains("compute unit"), "{e}");
    for (k, ch) in &running {
        stop(ch, k.as_ref());
    }
    // Bad indices name what is missing.
    let e = OpenClBackend::new(usize::MAX, 0).unwrap_err();
    assert!(matches!(e, gyre_opencl::Error::PlatformIndex { .. }), "{e}");
}

/// A loan pool is launched only where the kernel may read and write all of it: its bytes
/// and its state words SVM allocations of this context at least the pool's size (an
/// arena's kernel-side address is any `u64` `LoanArena::new_split_device` is given).
#[test]
fn a_loan_pool_must_be_svm_of_this_context_and_large_enough() {
    use gyre_core::loan::{LoanArena, LoanConfig};
    let Some((_g, b)) = setup("a_loan_pool_must_be_svm_of_this_context_and_large_enough") else {
        return;
    };
    let config = LoanConfig::new(1 << 16, 1024);
    let with = |a: &Arc<LoanArena>| LaunchSpec {
        loans: Some(a.clone()),
        ..spec(Some(gyre_core::kernels::ids::ECHO))
    };
    // Host memory: not SVM.
    let host = LoanArena::new(gyre_core::memory::HostAllocator, config).unwrap();
    let e = b
        .launch(region(&b, 4, 0), &with(&host))
        .err()
        .expect("a host pool refused");
    assert!(e.to_string().contains("not SVM"), "{e}");
    // The pool's kernel side at the base of a 128-byte SVM block: SVM of this context,
    // but the kernel would work 64 KiB past it.
    let alloc = b.loan_allocator().unwrap();
    let small = alloc.alloc(128, 128).unwrap();
    let engine = Arc::new(gyre_core::copy::HostDeviceArena::new(1 << 16).unwrap());
    let short = LoanArena::new_split_device(
        b.loan_allocator().unwrap(),
        config,
        engine,
        small.device_addr(),
    )
    .unwrap();
    let r = region(&b, 4, 0);
    let got = b.launch(r.clone(), &with(&short));
    if let Ok(k) = &got {
        stop(&Channel::new(r, "t"), k.as_ref());
    }
    let e = got.err().expect("a pool beyond its SVM block refused");
    assert!(e.to_string().contains("not SVM"), "{e}");
    // SAFETY: from `alloc`, once; no kernel was launched on it.
    unsafe { alloc.free(small) };
    // This backend's loan_allocator: launched.
    let ok = LoanArena::new(b.loan_allocator().unwrap(), config).unwrap();
    let r = region(&b, 4, 0);
    let k = b
        .launch(r.clone(), &with(&ok))
        .expect("an SVM pool launches");
    stop(&Channel::new(r, "t"), k.as_ref());
}

/// The copy engine's bytes land where asked, out of bounds is refused, and a wait by one
/// thread covers its own copies while another thread copies and waits beside it (a
/// bridge pushes on one thread while it pulls on another: a wait that consumed the other
/// thread's event let that thread read staging its copy had not written yet).
#[test]
fn copy_engine_round_trips_and_each_thread_waits_for_its_own_copies() {
    let Some((_g, b)) = setup("copy_engine_round_trips_and_each_thread_waits_for_its_own_copies")
    else {
        return;
    };
    let g = Geometry::new(64, 128, 8).unwrap();
    let engine = b.alloc_resident(&g, 0).unwrap();
    let len = engine.len();
    assert_eq!(len, SharedRegion::bytes_for(&g));
    let mut zero = vec![0xffu8; len];
    // SAFETY: `zero` outlives the blocking copy.
    unsafe { engine.copy_d2h(zero.as_mut_ptr(), 0, len) }.unwrap();
    assert!(zero.iter().all(|&x| x == 0), "zeroed at allocation");
    let mut one = [0u8; 8];
    // SAFETY: as above; refused before anything is issued.
    let e = unsafe { engine.copy_d2h(one.as_mut_ptr(), len - 4, 8) }.unwrap_err();
    assert!(
        matches!(
            e,
            gyre_core::Error::Transfer {
                engine: "opencl",
                ..
            }
        ),
        "{e}"
    );
    // Two threads, each with its own 1 KiB window: write a pattern (async), read it
    // back (async), wait once, and check the host buffer right away.
    let threads: Vec<_> = (0..2u8)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let at = 4096 + usize::from(t) * 1024;
                for round in 0..300u32 {
                    let pattern: Vec<u8> = (0..1024u32)
                        .map(|i| (i ^ round ^ (u32::from(t) << 7)) as u8)
                        .collect();
                    let mut back = vec![0u8; 1024];
                    // SAFETY: both buffers outlive the wait below, and nothing else
                    // touches them until then.
                    unsafe {
                        engine.copy_h2d_async(at, pattern.as_ptr(), 1024).unwrap();
                        engine.copy_d2h_async(back.as_mut_ptr(), at, 1024).unwrap();
                    }
                    engine.synchronize().unwrap();
                    assert!(back == pattern, "thread {t} round {round}: read back early");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
