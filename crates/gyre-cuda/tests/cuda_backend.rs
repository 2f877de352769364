//! The CUDA backend: typed errors without a driver (here), and a real echo round trip
//! where a driver, a device and NVRTC are present (skipped otherwise).

use std::sync::Arc;

use gyre_core::ring::Geometry;
use gyre_core::{Backend, Channel, IdleStrategy, Kind, LaunchSpec, SharedRegion};
use gyre_cuda::{CudaBackend, CudaProbe, Error};

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

fn backend_or_skip(test: &str) -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!("SKIP {test}: {e}");
            None
        }
    }
}

fn spec(builtin: Option<u32>) -> LaunchSpec {
    LaunchSpec {
        name: "echo".into(),
        handler: Arc::new(gyre_core::kernels::echo),
        builtin,
        idle: IdleStrategy::default(),
        telemetry: true,
        cuda_source: None,
        export: None,
    }
}

#[test]
fn echo_round_trip_on_the_device() {
    let Some(backend) = backend_or_skip("echo_round_trip_on_the_device") else {
        return;
    };
    let g = Geometry::new(8, 128, 4).unwrap();
    let mem = backend.alloc_region(SharedRegion::bytes_for(&g)).unwrap();
    let region = Arc::new(SharedRegion::new(mem, g, 0).unwrap());
    let kernel = backend
        .launch(region.clone(), &spec(Some(gyre_core::kernels::ids::ECHO)))
        .unwrap();
    let ch = Channel::new(region, "echo");
    for n in 0..100u32 {
        let msg = n.to_le_bytes();
        let i = ch.try_publish(Kind::Call, 1, &msg).unwrap();
        let reply = ch
            .wait_blocking(i, &IdleStrategy::default(), None, |r| {
                Ok(r.payload.to_vec())
            })
            .unwrap();
        assert_eq!(reply, msg);
    }
    ch.close();
    ch.command(gyre_abi::command::TERMINATE);
    while !kernel.is_finished() {
        std::thread::yield_now();
    }
    kernel.join().unwrap();
}

#[test]
fn closure_handlers_are_refused_on_the_device() {
    let Some(backend) = backend_or_skip("closure_handlers_are_refused_on_the_device") else {
        return;
    };
    let g = Geometry::new(8, 128, 4).unwrap();
    let mem = backend.alloc_region(SharedRegion::bytes_for(&g)).unwrap();
    let region = Arc::new(SharedRegion::new(mem, g, 0).unwrap());
    let e = backend.launch(region, &spec(None)).err().unwrap();
    assert!(
        e.to_string().contains("CUDA kernels need a device handler"),
        "{e}"
    );
}

#[test]
fn memory_pool_serves_every_cuda_memory_kind() {
    use gyre_core::memory::{MemoryKind, MemoryPool, PoolConfig};
    let Some(backend) = backend_or_skip("memory_pool_serves_every_cuda_memory_kind") else {
        return;
    };
    for kind in [
        MemoryKind::Device,
        MemoryKind::PinnedMapped,
        MemoryKind::Unified,
    ] {
        let alloc = gyre_cuda::CudaAllocator::new(&backend.context().unwrap(), kind).unwrap();
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
    assert!(gyre_cuda::CudaAllocator::new(&backend.context().unwrap(), MemoryKind::Host).is_err());
}
