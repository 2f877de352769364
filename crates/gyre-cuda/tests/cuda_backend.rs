//! The CUDA backend on a device: typed errors without a driver (here), and, where a
//! driver, a device and NVRTC are present, the behaviours a persistent kernel puts at risk:
//! round trips, a second kernel and a module load next to a running one, frees deferred
//! while kernels run, the stream and kernel limits, a kernel killed by a device fault
//! (noticed, reported with the CUDA error, context reset, relaunch works).
//!
//! Without a GPU each test prints `SKIP` and passes, unless `GYRE_REQUIRE_CUDA=1`. The
//! tests take [`gyre_cuda::testing::serial`]: they share the process's primary context.
//! Each device test runs under a hang guard, so a hang fails instead of stalling.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gyre_abi::error::KERNEL_GONE;
use gyre_core::ring::Geometry;
use gyre_core::{
    Backend, Channel, DeviceSource, IdleStrategy, KernelInstance, Kind, LaunchSpec, SharedRegion,
};
use gyre_cuda::testing::{require_cuda, serial};
use gyre_cuda::{CudaBackend, CudaProbe, Error};

/// Longest a device test may take before it counts as hung (a guard, not a timing
/// assertion).
const HANG_GUARD: Duration = Duration::from_secs(120);

#[test]
fn probe_is_a_typed_result_never_a_panic() {
    match CudaProbe::detect() {
        Ok(info) => eprintln!("CUDA here: {info:?}"),
        Err(Error::LibraryMissing { searched }) => {
            assert!(!CudaProbe::library_present());
            assert!(!searched.is_empty());
        }
        Err(e) => eprintln!("CUDA library present but unusable: {e}"),
    }
    match CudaBackend::new() {
        Ok(b) => assert_eq!(b.name(), "cuda"),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// Runs `f` with the backend under the hang guard, or skips (fails with
/// `GYRE_REQUIRE_CUDA=1`) without a usable backend.
fn on_device(test: &'static str, f: impl FnOnce(Arc<CudaBackend>) + Send + 'static) {
    let _one = serial();
    let Some(backend) = require_cuda(test, CudaBackend::new()) else {
        return;
    };
    let backend = Arc::new(backend);
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(backend)));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(Ok(())) => {
            let _ = t.join();
        }
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{test}: hung for {HANG_GUARD:?}"),
    }
}

fn spec(name: &str, builtin: Option<u32>, source: Option<&str>) -> LaunchSpec {
    LaunchSpec {
        name: name.into(),
        handler: Arc::new(gyre_core::kernels::echo),
        builtin,
        idle: IdleStrategy::default(),
        telemetry: true,
        cuda_source: source.map(|s| {
            Arc::new(DeviceSource {
                name: format!("{name}.cu"),
                source: s.into(),
            })
        }),
        opencl_source: None,
        lane_handler: None,
        export: None,
        doorbell: None,
        reply_bell: None,
        loans: None,
        link: None,
    }
}

fn echo_spec(name: &str) -> LaunchSpec {
    spec(name, Some(gyre_core::kernels::ids::ECHO), None)
}

/// A running kernel with its channel, which watches the kernel's liveness as the
/// facade's does.
struct Running {
    ch: Arc<Channel>,
    kernel: Arc<dyn KernelInstance>,
}

fn launch(backend: &CudaBackend, spec: &LaunchSpec) -> Result<Running, gyre_core::Error> {
    let g = Geometry::new(8, 128, 4)?;
    let mem = backend.alloc_region(SharedRegion::bytes_for(&g))?;
    let region = Arc::new(SharedRegion::new(mem, g, 0)?);
    let kernel: Arc<dyn KernelInstance> = Arc::from(backend.launch(region.clone(), spec)?);
    let ch = Arc::new(Channel::new(region, spec.name.clone()));
    let watched: std::sync::Weak<dyn KernelInstance> = Arc::downgrade(&kernel);
    ch.watch_liveness(Arc::new(watched));
    Ok(Running { ch, kernel })
}

/// `n` round trips; each reply must be its request.
fn round_trips(r: &Running, n: u32) -> Result<(), gyre_core::Error> {
    for i in 0..n {
        let msg = (i ^ 0x5a5a_0000).to_le_bytes();
        let idx =
            r.ch.try_publish(Kind::Call, 1, &msg)
                .map_err(|_| gyre_core::Error::Closed {
                    kernel: "publish".into(),
                })?;
        let reply =
            r.ch.wait_blocking(idx, &IdleStrategy::default(), None, |v| {
                Ok(v.payload.to_vec())
            })?;
        assert_eq!(reply, msg);
    }
    Ok(())
}

/// Terminates the kernel and joins it.
fn stop(r: Running) -> Result<(), gyre_core::Error> {
    r.ch.close();
    r.ch.command(gyre_abi::command::TERMINATE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !r.kernel.is_finished() {
        assert!(Instant::now() < deadline, "kernel did not stop");
        std::thread::sleep(Duration::from_micros(100));
    }
    r.kernel.join()
}

#[test]
fn echo_round_trip_and_resources_come_back() {
    on_device("echo_round_trip_and_resources_come_back", |b| {
        let ctx = b.context().unwrap();
        let held_before = ctx.streams_held().0;
        let r = launch(&b, &echo_spec("echo")).unwrap();
        assert_eq!(ctx.running_kernels(), 1);
        assert_eq!(ctx.streams_held().0, held_before + 1);
        round_trips(&r, 1000).unwrap();
        stop(r).unwrap();
        assert_eq!(ctx.running_kernels(), 0);
        assert_eq!(ctx.streams_held().0, held_before);
        assert_eq!(ctx.deferred_releases(), 0);
    });
}

/// The user handler of the second kernel: each byte inverted (a module never loaded
/// before, so its load happens while the first kernel runs).
const NEGATE: &str = r#"
#include "gyre/abi.h"
__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    (void)msg_type;
    if (req_len > reply_cap) return GYRE_ERR_HANDLER_REJECTED;
    for (unsigned int i = lane; i < req_len; i += lanes) reply[i] = (unsigned char)~req[i];
    *reply_len = req_len;
    return GYRE_ERR_NONE;
}
"#;

#[test]
fn a_second_kernel_a_module_load_and_the_probe_next_to_a_running_kernel() {
    on_device("a_second_kernel_...", |b| {
        let first = launch(&b, &echo_spec("first")).unwrap();
        round_trips(&first, 10).unwrap();
        // A new module next to the running kernel: refused, typed, never a hang (a load
        // can wait for the running kernel to finish).
        let negate = spec("negate", None, Some(NEGATE));
        let refused = launch(&b, &negate)
            .err()
            .expect("a load next to a running kernel");
        assert!(
            refused.to_string().contains("cuModuleLoadDataEx"),
            "{refused}"
        );
        // Prepared, it compiles now and loads once no ring kernel runs.
        gyre_core::Backend::prepare(&*b, &negate).unwrap();
        assert!(launch(&b, &negate).is_err(), "still refused while one runs");
        stop(first).unwrap();
        gyre_core::Backend::prepare(&*b, &negate).unwrap();
        let first = launch(&b, &echo_spec("first-again")).unwrap();
        // Loaded before: launches next to the running one.
        let second = launch(&b, &negate).unwrap();
        let idx = second.ch.try_publish(Kind::Call, 1, &[1, 2, 3, 4]).unwrap();
        let reply = second
            .ch
            .wait_blocking(idx, &IdleStrategy::default(), None, |v| {
                Ok(v.payload.to_vec())
            })
            .unwrap();
        assert_eq!(reply, [!1u8, !2, !3, !4]);
        // The visibility probe (preloaded), a short kernel next to two persistent ones.
        let rtt = b
            .confirm_system_scope(Duration::from_secs(2))
            .unwrap()
            .unwrap();
        eprintln!("visibility probe next to two ring kernels: {rtt:?}");
        round_trips(&first, 10).unwrap();
        stop(second).unwrap();
        stop(first).unwrap();
    });
}

#[test]
fn frees_wait_for_the_last_running_kernel() {
    on_device("frees_wait_for_the_last_running_kernel", |b| {
        let ctx = b.context().unwrap();
        let r = launch(&b, &echo_spec("holder")).unwrap();
        let buf = gyre_cuda::DeviceBuffer::<u8>::zeroed(&ctx, 1 << 20).unwrap();
        drop(buf);
        assert_eq!(
            ctx.deferred_releases(),
            1,
            "a free next to a running kernel"
        );
        // Reused, not allocated anew.
        let again = gyre_cuda::DeviceBuffer::<u8>::zeroed(&ctx, 1 << 20).unwrap();
        assert_eq!(ctx.deferred_releases(), 0);
        drop(again);
        round_trips(&r, 10).unwrap();
        stop(r).unwrap();
        assert_eq!(ctx.deferred_releases(), 0, "freed when the kernel finished");
    });
}

#[test]
fn kernels_beyond_the_limit_are_a_typed_error() {
    on_device("kernels_beyond_the_limit_are_a_typed_error", |b| {
        let ctx = b.context().unwrap();
        let mut running = Vec::new();
        let refusal = loop {
            match launch(&b, &echo_spec(&format!("k{}", running.len()))) {
                Ok(r) => running.push(r),
                Err(e) => break e,
            }
            assert!(running.len() <= 64, "no limit after 64 ring kernels");
        };
        let msg = refusal.to_string();
        assert!(
            msg.contains("no CUDA stream left")
                || msg.contains("cannot launch another ring kernel"),
            "{msg}"
        );
        eprintln!(
            "{} ring kernels ran at once ({:?} streams); the next: {msg}",
            running.len(),
            ctx.streams_held()
        );
        // Every one of them still answers.
        for r in &running {
            round_trips(r, 3).unwrap();
        }
        for r in running {
            stop(r).unwrap();
        }
        assert_eq!(ctx.running_kernels(), 0);
    });
}

/// A handler that writes through a null pointer: the device kills the kernel with
/// CUDA_ERROR_ILLEGAL_ADDRESS, a sticky error.
const FAULTS: &str = r#"
#include "gyre/abi.h"
__device__ unsigned int gyre_handler(unsigned int msg_type, const unsigned char *req,
                                     unsigned int req_len, unsigned char *reply,
                                     unsigned int reply_cap, unsigned int *reply_len,
                                     unsigned int lane, unsigned int lanes) {
    (void)msg_type; (void)req; (void)req_len; (void)reply; (void)reply_cap; (void)lanes;
    if (lane == 0u) {
        *(volatile unsigned int *)16 = 1u;
    }
    *reply_len = 0u;
    return GYRE_ERR_NONE;
}
"#;

#[test]
fn a_device_fault_is_noticed_and_a_later_launch_works() {
    // A sticky error may leave the process unable to use CUDA: a process of its own.
    if !gyre_cuda::testing::isolated("a_device_fault_is_noticed_and_a_later_launch_works") {
        return;
    }
    on_device("a_device_fault_is_noticed_and_a_later_launch_works", |b| {
        let r = launch(&b, &spec("faults", None, Some(FAULTS))).unwrap();
        let idx = r.ch.try_publish(Kind::Call, 1, b"boom").unwrap();
        let e =
            r.ch.wait_blocking(idx, &IdleStrategy::default(), None, |_| Ok(()))
                .expect_err("a killed kernel answers nothing");
        match &e {
            gyre_core::Error::KernelLost { code, cause, .. } => {
                assert_eq!(*code, KERNEL_GONE);
                assert!(cause.contains("CUDA_ERROR"), "{cause}");
            }
            other => panic!("expected KernelLost, got {other}"),
        }
        assert!(r.kernel.failure().is_some());
        let joined = r.kernel.join();
        assert!(
            matches!(joined, Err(gyre_core::Error::KernelLost { .. })),
            "{joined:?}"
        );
        let ctx = b.context();
        assert!(
            matches!(ctx, Err(Error::ContextPoisoned { .. })),
            "the region still holds the poisoned context: {ctx:?}"
        );
        drop(r);
        // Nothing holds the old context now: it is reset, and either a new kernel works,
        // or the driver keeps the error (NVIDIA documents sticky errors as needing a new
        // process) and the launch says so, typed. The kit's report shows which.
        match launch(&b, &echo_spec("after-fault")) {
            Ok(again) => {
                round_trips(&again, 100).unwrap();
                stop(again).unwrap();
                eprintln!("after the fault: context reset, a new kernel works");
            }
            Err(e) => {
                assert!(e.to_string().contains("restart the process"), "{e}");
                assert!(
                    e.to_string().contains("CUDA_ERROR_"),
                    "names the fault: {e}"
                );
                eprintln!("after the fault: the driver needs a new process: {e}");
                // Every later use says the same, typed, without a raw driver code.
                let again = b.context().expect_err("the device stays unusable");
                assert!(
                    matches!(again, Error::ProcessRestartRequired { .. }),
                    "{again:?}"
                );
            }
        }
    });
}

#[test]
fn closure_handlers_are_refused_on_the_device() {
    on_device("closure_handlers_are_refused_on_the_device", |b| {
        let e = launch(&b, &spec("closure", None, None)).err().unwrap();
        assert!(
            e.to_string().contains("CUDA kernels need a device handler"),
            "{e}"
        );
    });
}

#[test]
fn memory_pool_serves_every_cuda_memory_kind() {
    use gyre_core::memory::{MemoryKind, MemoryPool, PoolConfig};
    on_device("memory_pool_serves_every_cuda_memory_kind", |backend| {
        let ctx = backend.context().unwrap();
        for kind in [
            MemoryKind::Device,
            MemoryKind::PinnedMapped,
            MemoryKind::Unified,
        ] {
            let alloc = gyre_cuda::CudaAllocator::new(&ctx, kind).unwrap();
            let pool = MemoryPool::new(alloc, PoolConfig::default()).unwrap();
            let a = pool.acquire(1000).unwrap();
            assert_eq!(a.kind(), kind);
            assert_ne!(a.device_addr(), 0);
            assert_eq!(a.host_ptr().is_some(), kind != MemoryKind::Device);
            let addr = a.device_addr();
            drop(a);
            let b = pool.acquire(900).unwrap(); // same bucket: a hit, the same block
            assert_eq!(b.device_addr(), addr);
            let s = pool.stats();
            assert_eq!((s.hits, s.misses), (1, 1), "{kind:?}");
        }
        assert!(gyre_cuda::CudaAllocator::new(&ctx, MemoryKind::Host).is_err());
    });
}

#[test]
fn peers_echo() {
    on_device("peers_echo", |b| {
        let mut p = gyre_cuda::peer::LaunchPeer::new(&b).unwrap();
        for i in 0..100u8 {
            let req = [i; 64];
            assert_eq!(p.launch_echo(&req).unwrap(), req);
            assert_eq!(p.graph_echo(&req).unwrap(), req);
        }
    });
}
