//! What a backend provides: somewhere to put a kernel's shared region, and a way to run
//! the device loop over it.

use std::sync::Arc;

use crate::bridge::CopyEngine;
use crate::error::{Error, Result};
use crate::handler::Handler;
use crate::idle::IdleStrategy;
use crate::region::{HostMemory, RegionMemory, RingMemory, SharedRegion};
use crate::ring::Geometry;

/// Everything a backend needs to launch one ring kernel.
#[derive(Clone)]
pub struct LaunchSpec {
    /// Kernel name (for logs, telemetry and thread names).
    pub name: String,
    /// The request handler (the CPU backend's, for a kernel that is not a built-in) —
    /// every backend runs a built-in's device code (`cuda/handlers/`) instead.
    pub handler: Arc<dyn Handler>,
    /// Built-in kernel id (`crate::kernels::ids`), if the handler is a built-in.
    pub builtin: Option<u32>,
    /// What the kernel loop does when idle.
    pub idle: IdleStrategy,
    /// Whether the kernel writes its telemetry line (K8) per batch and when idle. When
    /// false it writes it only when its state changes (start, pause, resume, stop: state and
    /// heartbeat, counters left at zero). Device backends may ignore it (CUDA does).
    pub telemetry: bool,
    /// A user's CUDA C++ handler source (defining `gyre_handler`, see `docs/cuda.md`),
    /// compiled into the ring kernel by the CUDA backend; the CPU backend runs `handler`.
    pub cuda_source: Option<Arc<DeviceSource>>,
    /// A user's OpenCL C handler source (a phase function over `gyre/handler.h`, or
    /// `gyre_handler`, see `docs/opencl.md`), built into the ring kernel by the OpenCL
    /// backend; the CPU backend runs `handler`.
    pub opencl_source: Option<Arc<DeviceSource>>,
    /// A lane-parallel handler (`#[gyre::handler(lanes)]`): the CPU backend runs the
    /// handler this gives for the lanes it emulates, instead of `handler` (which is the
    /// one-lane form).
    pub lane_handler: Option<Arc<dyn LaneHandler>>,
    /// The kernel's telemetry export file, when the spec exports one. A backend whose
    /// kernel can write the file's telemetry line itself (CUDA: registered host memory)
    /// does so and says so through [`KernelInstance::writes_export_telemetry`]; the file
    /// must then outlive the kernel (the instance keeps this `Arc`).
    pub export: Option<Arc<crate::shm::ExportWriter>>,
    /// The doorbell a kernel that parks when idle (the CPU backend) parks on. The host
    /// passes the same one to every launch on one region, so a successor (a reload, an
    /// epoch's handover, a restart) is rung by the channel and bridge that rang its
    /// predecessor. `None`: the backend makes one (see [`KernelInstance::doorbell`]).
    pub doorbell: Option<Arc<crate::doorbell::Doorbell>>,
    /// The reply bell of a lone kernel's rings ([`crate::channel::bell`]), shared by its
    /// successors as the doorbell is: a backend whose kernel runs on a host thread over
    /// these very rings (the CPU backend's zero copy) rings it after each batch and
    /// returns it from [`KernelInstance::reply_bell`]. `None`: nobody rings (the driver
    /// serves every waiter).
    pub reply_bell: Option<Arc<crate::channel::bell::ReplyBell>>,
    /// The loan pool of a loan kernel (`docs/loans.md`), allocated with the backend's
    /// [`Backend::loan_allocator`]. A device backend passes its
    /// [`view`](crate::loan::LoanArena::view) to the ring kernel, whose block loop resolves
    /// each request's handle (`cuda/include/gyre/loan.h`), and keeps this `Arc` until the
    /// kernel has finished. The CPU backend ignores it: its loan kernels' handlers are
    /// Rust closures that resolve handles themselves.
    pub loans: Option<Arc<crate::loan::LoanArena>>,
    /// Where a pipeline stage's replies go ([`crate::chain`]): the next stage's request
    /// ring, or the chain head's reply ring. `None` (a kernel that is not chained): its own
    /// reply ring. A backend passes it to its ring kernel (`gyre_link` of
    /// `cuda/include/gyre/ring.h`) and keeps the next region alive while the kernel runs.
    pub link: Option<crate::chain::StageLink>,
}

/// A handler whose work is split over the lanes of a block; the CPU backend emulates
/// the lanes it is configured with (`gyre_cpu::CpuBackend::with_lanes`, `GYRE_CPU_LANES`).
pub trait LaneHandler: Send + Sync + 'static {
    /// The handler that runs the work of `lanes` lanes (1..=256) and combines it.
    fn for_lanes(&self, lanes: u32) -> Arc<dyn Handler>;
}

/// Device-code source of a user handler, for a device backend to compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSource {
    /// A name for compiler messages (NVRTC's log names it) and the cache key.
    pub name: String,
    /// The source text.
    pub source: String,
}

impl core::fmt::Debug for LaunchSpec {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LaunchSpec")
            .field("name", &self.name)
            .field("builtin", &self.builtin)
            .field("idle", &self.idle)
            .field("telemetry", &self.telemetry)
            .field("cuda_source", &self.cuda_source.as_ref().map(|s| &s.name))
            .field(
                "opencl_source",
                &self.opencl_source.as_ref().map(|s| &s.name),
            )
            .finish_non_exhaustive()
    }
}

/// A running ring kernel.
pub trait KernelInstance: Send + Sync {
    /// Whether the kernel loop has exited.
    fn is_finished(&self) -> bool;
    /// Waits for the loop to exit (call after it reached a final state) and releases its
    /// resources. Idempotent. An execution that the device ended with an error (see
    /// [`KernelInstance::failure`]) is reported as [`Error::KernelLost`].
    fn join(&self) -> Result<()>;

    /// Whether the kernel's execution failed on the device (a fault in device code, a
    /// watchdog kill): `Some(cause)` naming what the backend saw, once it has. The
    /// channel consults it (at most once a millisecond) while the kernel's own line says
    /// it is running, so that waiters of a kernel that died without writing a final state
    /// fail with [`Error::KernelLost`] instead of waiting forever. The default: never
    /// (a host thread's loop always writes its final state).
    fn failure(&self) -> Option<String> {
        None
    }

    /// The doorbell of a kernel that parks when idle (see [`crate::doorbell`]): the host
    /// rings it after every publication, command and bridge push. The default: none (the
    /// kernel polls without parking, as a GPU kernel does).
    fn doorbell(&self) -> Option<Arc<crate::doorbell::Doorbell>> {
        None
    }

    /// The [`LaunchSpec::reply_bell`] this kernel rings after each batch, if it rings one
    /// (the host then attaches it to the rings' channel). The default: none.
    fn reply_bell(&self) -> Option<Arc<crate::channel::bell::ReplyBell>> {
        None
    }

    /// Whether the kernel writes the telemetry line of [`LaunchSpec::export`] itself, so
    /// the host must not copy into it. The default: no.
    fn writes_export_telemetry(&self) -> bool {
        false
    }

    /// What the kernel's loop has paid for so far in the terms of the cost model
    /// ([`crate::cost`]): read waves, fences, remote loads and stores. The default: not
    /// counted (`None`; a GPU does not count them).
    fn cost(&self) -> Option<crate::cost::DeviceCost> {
        None
    }
}

impl<T: KernelInstance + ?Sized> crate::channel::liveness::Liveness for T {
    fn failure(&self) -> Option<String> {
        KernelInstance::failure(self)
    }
}

/// A kernel watched without being kept alive: no failure once it is gone.
impl crate::channel::liveness::Liveness for std::sync::Weak<dyn KernelInstance> {
    fn failure(&self) -> Option<String> {
        self.upgrade()?.failure()
    }
}

/// A place where ring kernels run.
pub trait Backend: Send + Sync {
    /// Short name (`cpu`, `cuda`, `opencl`).
    fn name(&self) -> &'static str;

    /// Whether this backend's kernels read zero-copy rings as remote memory, in waves of
    /// independent loads (`gyre_abi::host_flags::CHECKED`, `docs/protocol.md` "Checked
    /// slots"): the host then sets the flag before launch and its channel writes and
    /// checks every slot's check word. CUDA's zero copy over PCIe does; the CPU backend
    /// does under its cost model. The default: no (the rings are coherent memory).
    fn checked_slots(&self) -> bool {
        false
    }

    /// Memory for a shared region of `bytes` bytes, zeroed, 128-aligned, that both the
    /// host and the kernel address. The default is a host allocation.
    fn alloc_region(&self, bytes: usize) -> Result<Box<dyn RegionMemory>> {
        Ok(Box::new(HostMemory::zeroed(bytes)?))
    }

    /// Memory for a request ring of `bytes` bytes that only this backend's kernels touch,
    /// apart from its region ([`SharedRegion::place_request_ring`]): a pipeline's inner
    /// ring, when the stages writing it and the stage reading it all run on this backend
    /// (this very instance). Zeroed, 128-aligned. `Ok(None)`, the default, keeps the ring
    /// inline in its region.
    ///
    /// CUDA gives device memory, so an inner ring's slots never cross the bus; the CPU
    /// backend gives a host allocation of its own (the same kind of memory: it keeps the
    /// path that every GPU chain takes under test).
    ///
    /// # Errors
    ///
    /// The allocation's.
    fn alloc_kernel_ring(&self, bytes: usize) -> Result<Option<Box<dyn RingMemory>>> {
        let _ = bytes;
        Ok(None)
    }

    /// Lets this backend's kernels write memory that `owner`'s
    /// [`Backend::alloc_kernel_ring`] gives: a pipeline's inner ring read by a stage on
    /// `owner` and written by one here (a GPU writing the next GPU's ring through a peer
    /// mapping, `cuCtxEnablePeerAccess`). `Ok(true)` when they can from now on, for as
    /// long as both devices' contexts live; `Ok(false)` when they cannot, and the ring
    /// then stays inline in its region, in memory both reach. The default: they cannot.
    ///
    /// # Errors
    ///
    /// The backend's, when asking or enabling failed.
    fn enable_peer_writes(&self, owner: &dyn Backend) -> Result<bool> {
        let _ = owner;
        Ok(false)
    }

    /// This backend as [`core::any::Any`], for a backend of the same kind to recognise
    /// ([`Backend::enable_peer_writes`]). `None` by default.
    fn as_any(&self) -> Option<&dyn core::any::Any> {
        None
    }

    /// The address a kernel of this backend uses for the host address `host`, which lies
    /// in memory from [`Backend::alloc_region`] (a pipeline's link tables name regions by
    /// it). The default is `host` itself (host memory, shared virtual memory).
    ///
    /// # Errors
    ///
    /// The backend's, when `host` is not memory its kernels can address.
    fn device_address(&self, host: core::ptr::NonNull<u8>) -> Result<u64> {
        Ok(host.as_ptr() as u64)
    }

    /// Whether this backend's kernels' atomic read-modify-writes (compare-and-swap) on
    /// memory they share with the host are atomic with the host's own, and so with
    /// those of every other backend for which this holds. A pipeline needs it to let
    /// stages on different devices advance one ring by compare-and-swap (branches of a
    /// fan-out on several devices writing one join: `docs/pipelines.md`, "Across
    /// devices"). The CPU backend holds (host threads on host memory); OpenCL holds for
    /// its fine-grained SVM with atomics and fences of the all-SVM-devices scope; CUDA
    /// only on a device that reports `HOST_NATIVE_ATOMIC_SUPPORTED` (NVLink-C2C systems,
    /// not PCIe GPUs). The default: it does not (a backend says so only when it knows).
    fn host_atomics(&self) -> bool {
        false
    }

    /// Checks empirically that a running kernel and the host see each other's writes
    /// through the memory [`Backend::alloc_region`] returns, within `timeout` — the claim
    /// behind `system-scope` visibility. `Ok(Ok(rtt))` confirms it; `Ok(Err(why))` says
    /// it does not hold (the runtime downgrades to `device-scope`); `Err` means the check
    /// itself could not run. The default (host memory, host threads) holds trivially.
    fn confirm_system_scope(
        &self,
        timeout: std::time::Duration,
    ) -> Result<std::result::Result<std::time::Duration, String>> {
        let _ = timeout;
        Ok(Ok(std::time::Duration::ZERO))
    }

    /// How long one launch of a kernel may run before the device kills it (a display
    /// watchdog: Windows WDDM, WSL2), if the device reports such a limit; kernels then
    /// run in epochs well under it (`KernelSpec::epoch`). The default: no limit.
    fn kernel_time_limit(&self) -> Option<std::time::Duration> {
        None
    }

    /// Builds everything [`Backend::launch`] needs for `spec` that can fail for reasons
    /// of the spec itself (compiling and loading a device handler; cached, so the launch
    /// that follows finds it built), without launching anything. A reload calls it before
    /// it stops the running kernel, so a handler that does not build leaves the old one
    /// serving. The default: nothing to build.
    ///
    /// # Errors
    ///
    /// What the build reported ([`Error::Launch`] with the compiler's log as its source),
    /// or [`Error::HandlerUnsupported`]-like refusals of the spec.
    fn prepare(&self, spec: &LaunchSpec) -> Result<()> {
        let _ = spec;
        Ok(())
    }

    /// Starts the device loop over `region`, which the host has initialised.
    fn launch(
        &self,
        region: Arc<SharedRegion>,
        spec: &LaunchSpec,
    ) -> Result<Box<dyn KernelInstance>>;

    /// The memory a loan pool of this backend's kernels lives in (its bytes under zero
    /// copy, the host side under a copy strategy, and always the state words, which the
    /// host writes and a device kernel reads): host memory by default (the CPU backend);
    /// a device backend gives memory its kernels read where the host writes it
    /// (fine-grained SVM, mapped pinned memory), or refuses.
    ///
    /// # Errors
    ///
    /// [`Error::StrategyUnsupported`] when the backend cannot hold loans, naming why.
    fn loan_allocator(&self) -> Result<Arc<dyn crate::memory::RawAllocator>> {
        Ok(Arc::new(crate::memory::HostAllocator))
    }

    /// The kernel's side of a loan pool of `bytes` under a copy strategy: where the
    /// kernel reads loaned bytes, which the bridge fills from the pool's host side
    /// ([`crate::loan::LoanMirror`]). The state words stay in
    /// [`Backend::loan_allocator`]'s memory, where the kernel reads them.
    ///
    /// The default refuses, as [`Backend::alloc_resident`] does.
    ///
    /// # Errors
    ///
    /// [`Error::StrategyUnsupported`], or the allocation's error.
    fn loan_device(&self, bytes: usize) -> Result<crate::loan::LoanDevice> {
        let _ = bytes;
        Err(Error::StrategyUnsupported {
            backend: self.name(),
            strategy: "a copy strategy",
            reason: "this backend keeps loan pools only where its kernels read host memory".into(),
        })
    }

    /// Device-resident memory for a kernel of geometry `g` under a copy strategy
    /// ([`crate::bridge`]): zeroed, laid out as a [`SharedRegion`], reachable from the host
    /// only through the returned engine's copies. The bridge writes its control block
    /// before [`Backend::launch_resident`].
    ///
    /// The default refuses: a backend that cannot keep rings on the device supports only
    /// the zero-copy strategy.
    fn alloc_resident(&self, g: &Geometry, host_timeout_ms: u32) -> Result<Arc<dyn CopyEngine>> {
        let _ = (g, host_timeout_ms);
        Err(Error::StrategyUnsupported {
            backend: self.name(),
            strategy: "copy",
            reason: "this backend keeps its rings only in shared memory (use unified)".into(),
        })
    }

    /// Starts the device loop over memory from [`Backend::alloc_resident`] of this backend.
    fn launch_resident(
        &self,
        mem: Arc<dyn CopyEngine>,
        spec: &LaunchSpec,
    ) -> Result<Box<dyn KernelInstance>> {
        let _ = (mem, spec);
        Err(Error::StrategyUnsupported {
            backend: self.name(),
            strategy: "copy",
            reason: "this backend keeps its rings only in shared memory (use unified)".into(),
        })
    }
}
