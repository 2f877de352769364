//! [`CudaBackend`]: gyre's `Backend` on a CUDA device.
//!
//! Under zero copy the shared region lives in mapped pinned memory ([`PinnedBuffer<u8>`]);
//! under the copy strategies in device memory behind a [`CudaCopyEngine`]. A launch
//! builds the ring kernel with its handler for the device's own architecture
//! (`CudaBackend::load_program`: a CUBIN first, PTX as the fallback, cached on disk),
//! loads it into the context once (`crate::module`), and launches one block on a stream
//! held from the context's fixed set (`crate::stream`), never the default stream. The
//! launch contract is at the top of `cuda/ring_kernel.cu`.
//!
//! Before the first persistent launch on a context, every module gyre may need later is
//! loaded (the built-in handlers and the visibility probe), so that no module load has to
//! happen next to a running ring kernel unless a new user handler asks for one.

use std::sync::Arc;

use gyre_core::bridge::CopyEngine;
use gyre_core::loan::{LoanDevice, LoanPoolView};
use gyre_core::memory::{MemoryKind, RawAllocator};
use gyre_core::region::RegionMemory;
use gyre_core::ring::Geometry;
use gyre_core::{KernelInstance, LaunchSpec, SharedRegion};
use parking_lot::Mutex;

use crate::alloc::CudaAllocator;
use crate::cache::{CacheKey, KernelCache};
use crate::context::Context;
use crate::copy::CudaCopyEngine;
use crate::error::{Error, Result};
use crate::export::ExportRegistration;
use crate::kernel::Scratch;
use crate::kernel::{CudaKernel, Keep};
use crate::memory::{DeviceBuffer, PinnedBuffer};
use crate::module::{Module, Modules};
use crate::nvrtc::{CompileOptions, Nvrtc, Target};
use crate::probe::{CudaInfo, CudaProbe};
use crate::source::{ring_kernel_source, Handler, MIN_ARCH, RING_KERNEL_ENTRY};
use crate::stream::StreamPool;
use crate::toolchain::Toolchain;

/// Threads in the ring kernel's block (at most `GYRE_MAX_LANES` of `gyre/port_cuda.h`, 128).
pub const LANES: u32 = 128;

/// The ring kernel's resources on a device ([`CudaBackend::ring_kernel_info`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingKernelInfo {
    /// Registers per thread.
    pub registers: i32,
    /// Blocks of [`LANES`] threads resident on one SM at once.
    pub blocks_per_sm: i32,
    /// Ring kernels that may run at once on the device.
    pub max_ring_kernels: usize,
}

/// The CUDA backend on device 0.
#[derive(Debug)]
pub struct CudaBackend {
    info: CudaInfo,
    /// The device's primary context; `None` only while a poisoned one is being reset.
    ctx: Mutex<Option<Arc<Context>>>,
    nvrtc: Nvrtc,
    toolchain: Toolchain,
    cache: Option<KernelCache>,
}

impl CudaBackend {
    /// Whether the backend can work here on device 0: a driver, a device that maps host
    /// memory and is sm_70 or newer, and NVRTC. Makes no context.
    ///
    /// # Errors
    ///
    /// What is missing, as a typed [`Error`].
    pub fn check() -> Result<CudaInfo> {
        Self::check_device(0)
    }

    /// [`check`](Self::check) for device `ordinal` (as `gyre doctor` lists them).
    ///
    /// # Errors
    ///
    /// What is missing, as a typed [`Error`]; [`Error::DeviceOutOfRange`] for an ordinal
    /// the driver does not report.
    pub fn check_device(ordinal: usize) -> Result<CudaInfo> {
        let info = CudaProbe::detect()?.on_device(ordinal)?;
        if !info.device.can_map_host_memory {
            return Err(Error::Unsupported {
                op: "the CUDA backend (rings in mapped pinned memory)",
                capability: "CAN_MAP_HOST_MEMORY",
                device: info.device.name.clone(),
            });
        }
        if info.device.arch() < MIN_ARCH {
            return Err(Error::UnsupportedArch {
                arch: info.device.arch(),
                why: format!("gyre's ring kernel needs sm_{MIN_ARCH} or newer"),
            });
        }
        Nvrtc::discover()?;
        Ok(info)
    }

    /// Probes the driver and device ([`check`](Self::check)), finds NVRTC and retains
    /// device 0's primary context.
    ///
    /// # Errors
    ///
    /// A typed [`Error`] naming what is missing.
    pub fn new() -> Result<Self> {
        Self::on_device(0)
    }

    /// [`new`](Self::new) on device `ordinal`: its primary context, its kernels, its
    /// mapped memory. One backend per device; backends of different devices are
    /// independent (their kernel limits and module caches are per context).
    ///
    /// # Errors
    ///
    /// A typed [`Error`] naming what is missing; [`Error::DeviceOutOfRange`] for an
    /// ordinal the driver does not report.
    pub fn on_device(ordinal: usize) -> Result<Self> {
        let info = Self::check_device(ordinal)?;
        let (nvrtc, toolchain) = Nvrtc::discover()?;
        let ctx = Context::primary(&info)?;
        tracing::info!(
            ordinal = info.device.ordinal,
            device = %info.device.name,
            arch = info.device.arch(),
            driver = %info.driver_version_string(),
            nvrtc = %nvrtc.version_string(),
            nvrtc_lib = nvrtc.path(),
            connections = info.env.max_connections,
            module_loading = %info.env.module_loading,
            "CUDA backend ready"
        );
        Ok(Self {
            info,
            ctx: Mutex::new(Some(ctx)),
            nvrtc,
            toolchain,
            cache: KernelCache::from_env(),
        })
    }

    /// The context, reset first if a sticky error poisoned it and nothing else holds it.
    ///
    /// # Errors
    ///
    /// [`Error::ContextPoisoned`] while the poisoned context is still held elsewhere; the
    /// driver's error.
    pub fn context(&self) -> Result<Arc<Context>> {
        let mut g = self.ctx.lock();
        let current = match g.take() {
            Some(c) => c,
            None => Context::primary(&self.info)?,
        };
        let healthy = Context::recover(current)?;
        *g = Some(healthy.clone());
        Ok(healthy)
    }

    /// The NVRTC in use.
    pub fn nvrtc(&self) -> &Nvrtc {
        &self.nvrtc
    }

    /// The toolchain NVRTC came from.
    pub fn toolchain(&self) -> &Toolchain {
        &self.toolchain
    }

    /// What the probe found.
    pub fn info(&self) -> &CudaInfo {
        &self.info
    }

    /// Compiles `source` (program `name`) and loads it into `ctx`, with entry point
    /// `entry`, for this device (see the module docs):
    ///
    /// 1. a CUBIN for the device's architecture, when NVRTC supports it: a driver loads a
    ///    CUBIN of its own major version even from a newer NVRTC;
    /// 2. otherwise, or if the driver refuses that CUBIN, PTX for the newest architecture
    ///    NVRTC supports up to the device's, JIT-compiled by the driver (which needs a
    ///    driver at least as new as NVRTC).
    ///
    /// A compile error (bad source) is returned as is; when neither image loads, the
    /// error names both versions and both failures.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`], [`Error::CodeNotLoadable`], [`Error::UnsupportedArch`], or the
    /// driver's error.
    pub(crate) fn load_program(
        &self,
        ctx: &Arc<Context>,
        name: &str,
        source: &str,
        entry: &str,
    ) -> Result<Arc<Module>> {
        let arch = ctx.device().arch();
        let supported = self.nvrtc.ring_kernel_archs()?;
        let load = |target: Target| -> Result<Arc<Module>> {
            let (key, what) = self.image_key(name, source, target)?;
            Modules::get_or_load(ctx, key, entry, &what, || self.image(name, source, target))
        };
        let cubin = if supported.contains(&arch) {
            match load(Target::Cubin(arch)) {
                Ok(m) => return Ok(m),
                Err(
                    e @ (Error::Compile { .. }
                    | Error::InvalidInput { .. }
                    | Error::WouldWait { .. }),
                ) => return Err(e),
                Err(e) => e.to_string(),
            }
        } else {
            format!(
                "NVRTC {} cannot compile for sm_{arch} (it supports {supported:?})",
                self.nvrtc.version_string()
            )
        };
        let Some(&ptx_arch) = supported.iter().rev().find(|&&a| a <= arch) else {
            return Err(Error::UnsupportedArch {
                arch,
                why: format!(
                    "NVRTC {} supports no architecture from sm_{MIN_ARCH} up to it ({supported:?})",
                    self.nvrtc.version_string()
                ),
            });
        };
        match load(Target::Ptx(ptx_arch)) {
            Ok(m) => {
                tracing::warn!(%cubin, ptx_arch, "CUBIN route failed; running PTX JIT-compiled by the driver");
                Ok(m)
            }
            Err(e @ (Error::Compile { .. } | Error::WouldWait { .. })) => Err(e),
            Err(e) => Err(Error::CodeNotLoadable {
                driver: self.info.driver_version_string(),
                nvrtc: self.nvrtc.version_string(),
                arch,
                cubin,
                ptx: e.to_string(),
            }),
        }
    }

    /// The module key of `source` compiled for `target`, and a description of the image
    /// for errors.
    fn image_key(&self, name: &str, source: &str, target: Target) -> Result<(u128, String)> {
        let opts = CompileOptions::new(target);
        let key = CacheKey::new(source, &opts.args()?, target, self.nvrtc.version());
        let what = format!(
            "{} of {name} from NVRTC {}",
            target.name(),
            self.nvrtc.version_string()
        );
        Ok((key.source_hash, what))
    }

    /// `source` compiled for `target`: from the disk cache, or by NVRTC (and cached).
    fn image(&self, name: &str, source: &str, target: Target) -> Result<Vec<u8>> {
        let opts = CompileOptions::new(target);
        let key = CacheKey::new(source, &opts.args()?, target, self.nvrtc.version());
        let compile = || {
            self.nvrtc
                .compile(name, source, &opts)
                .map(|c| c.loadable())
        };
        match &self.cache {
            Some(c) => c.get_or_compile(&key, compile),
            None => compile(),
        }
    }

    /// Compiles `source` for this device without loading it (ring kernels run, and a
    /// load could wait for them, see `crate::context`), staged for the load that
    /// follows once none runs: the CUBIN where NVRTC can make one, else the PTX route of
    /// [`CudaBackend::load_program`].
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] and the other errors of compiling.
    fn stage_program(&self, ctx: &Context, name: &str, source: &str) -> Result<()> {
        let arch = ctx.device().arch();
        let supported = self.nvrtc.ring_kernel_archs()?;
        let target = if supported.contains(&arch) {
            Target::Cubin(arch)
        } else {
            match supported.iter().rev().find(|&&a| a <= arch) {
                Some(&a) => Target::Ptx(a),
                None => {
                    return Err(Error::UnsupportedArch {
                        arch,
                        why: format!(
                            "NVRTC {} supports no architecture from sm_{MIN_ARCH} up to it \
                             ({supported:?})",
                            self.nvrtc.version_string()
                        ),
                    })
                }
            }
        };
        let (key, _) = self.image_key(name, source, target)?;
        Modules::stage(ctx, key, || self.image(name, source, target))
    }

    /// Loads the ring kernel with `handler` and reports its resources on this device.
    ///
    /// # Errors
    ///
    /// As a launch's compile and load.
    pub fn ring_kernel_info(&self, handler: &Handler<'_>) -> Result<RingKernelInfo> {
        let ctx = self.context()?;
        let m = self.ring_module(&ctx, handler)?;
        let per_sm = m.occupancy(&ctx, LANES)?;
        Ok(RingKernelInfo {
            registers: m.registers(&ctx)?,
            blocks_per_sm: per_sm,
            max_ring_kernels: self.kernel_limit(&ctx, per_sm),
        })
    }

    /// How many ring kernels may run at once on `ctx` when one SM holds `per_sm` of
    /// them: all resident at once, one SM's worth of room left for short kernels (the
    /// visibility probe), and one held stream each.
    fn kernel_limit(&self, ctx: &Context, per_sm: i32) -> usize {
        let per_sm = per_sm.max(1) as usize;
        let sms = ctx.device().multiprocessors.max(1) as usize;
        let resident = (sms * per_sm).saturating_sub(per_sm).max(1);
        resident.min(ctx.streams.limit())
    }

    /// The ring kernel with `handler`, loaded into `ctx`.
    fn ring_module(&self, ctx: &Arc<Context>, handler: &Handler<'_>) -> Result<Arc<Module>> {
        let name = format!("gyre_ring_kernel[{}]", handler.name());
        self.load_program(ctx, &name, &ring_kernel_source(handler), RING_KERNEL_ENTRY)
    }

    /// Loads every module gyre may need into `ctx` before its first persistent launch.
    fn preload(&self, ctx: &Arc<Context>) {
        for h in Handler::BUILTIN {
            if let Err(e) = self.ring_module(ctx, &h) {
                tracing::warn!(handler = h.name(), error = %e, "preloading a built-in ring kernel");
            }
        }
        if let Err(e) = crate::visibility_probe::module(self, ctx) {
            tracing::warn!(error = %e, "preloading the visibility probe");
        }
    }

    /// Launches the ring kernel over the region at device address `region`, a pipeline
    /// stage's replies going to `link` (the next region's device address, the link flags
    /// and the next stage's message type; 0: not chained); `keep` owns the memory behind both and lives until the
    /// kernel has finished.
    fn launch_on(
        &self,
        ctx: &Arc<Context>,
        region: u64,
        link: (u64, u32, u32),
        checked: Option<&Geometry>,
        keep: Keep,
        spec: &LaunchSpec,
    ) -> Result<CudaKernel> {
        let handler = handler_of(spec)?;
        if ctx.running_kernels() == 0 {
            self.preload(ctx);
        }
        let module = self.ring_module(ctx, &handler)?;
        let per_sm = module.occupancy(ctx, LANES)?;
        // The export file's telemetry line, registered so K8 writes it directly. A
        // registration can wait for the context to idle, so it is made only while no
        // ring kernel runs; without one (no export, other kernels run, or the driver
        // refused) the host copies the line instead.
        let export = spec.export.clone().and_then(|file| {
            ExportRegistration::new(ctx, file)
            .map_err(|e| {
                tracing::info!(error = %e, "telemetry export: the device does not write the file; the host copies it");
            })
            .ok()
        });
        let guard = ctx.begin_kernel(
            self.kernel_limit(ctx, per_sm),
            &format!(
                "{} SMs x {per_sm} resident blocks of {LANES} threads, less one SM; {} \
                 streams",
                ctx.device().multiprocessors,
                ctx.streams.limit()
            ),
        )?;
        let stream = StreamPool::lease(ctx, "a ring kernel")?;
        let export_tel = export.as_ref().map_or(0, ExportRegistration::telemetry_ptr);
        if let Some(a) = &spec.loans {
            // The ring kernel resolves handles by reading the words only: from now on
            // host code must not resolve them (whoever launched it).
            a.serve_on_device();
        }
        // A loan kernel's pool: its view is in device addresses (the allocations' own:
        // `loan_allocator`'s mapped pinned memory, `loan_device`'s device memory).
        let loans = spec.loans.as_ref().map_or(
            LoanPoolView {
                base: 0,
                words: 0,
                bytes: 0,
                min_shift: 0,
            },
            |a| a.view(),
        );
        // A checked ring's waves land in the block's shared memory when a window of at
        // least one slot fits there (a handler's reads of its staged request then cost
        // tens of cycles, not an L2 round trip), else in device memory of its own, sized
        // for its batch (gyre_core::cost::scratch_bytes) and freed after the kernel ends.
        let (scratch, scratch_arg) = match checked {
            None => (None, Scratch::None),
            Some(g) => match shared_scratch(g) {
                Some(bytes) => (None, Scratch::Shared(bytes)),
                None => {
                    let b = DeviceBuffer::<u8>::zeroed(
                        ctx,
                        gyre_core::cost::scratch_bytes(g.batch(), g.slot_size() as usize),
                    )?;
                    let arg = Scratch::Device(b.device_ptr(), b.len() as u64);
                    (Some(b), arg)
                }
            },
        };
        let keep: Keep = Box::new((keep, export, spec.loans.clone(), scratch));
        // SAFETY: `region` is the device address of an initialised shared region (mapped
        // pinned memory or the copy engine's device buffer), `export_tel` a registered
        // telemetry line or 0, `link.0` another initialised region's device address or 0,
        // `loans` the device addresses of a loan pool's bytes and state words (or a size
        // of 0); `keep` owns all of them until the kernel has finished.
        let k = unsafe {
            CudaKernel::launch(
                ctx,
                &spec.name,
                module,
                stream,
                guard,
                LANES,
                region,
                export_tel,
                link,
                loans,
                scratch_arg,
                keep,
            )?
        };
        tracing::info!(
            kernel = %spec.name,
            handler = handler.name(),
            lanes = LANES,
            running = ctx.running_kernels(),
            "CUDA ring kernel launched"
        );
        Ok(k)
    }
}

/// Dynamic shared memory a checked ring may stage its waves in: under the 48 KiB a launch
/// may ask for without opting in, beside the loop's own block-shared state.
const SHARED_STAGE_LIMIT: usize = 40 << 10;

/// The shared-memory scratch of a checked ring of geometry `g`: the bytes for as many
/// slots as `gyre_core::cost::scratch_slots` stages, at most what
/// [`SHARED_STAGE_LIMIT`] holds; `None` when not even one slot fits (device memory then).
fn shared_scratch(g: &Geometry) -> Option<u32> {
    let slot = g.slot_size() as usize;
    let fit = (SHARED_STAGE_LIMIT - gyre_core::cost::SCRATCH_STAGES) / (2 * slot);
    let slots = (gyre_core::cost::scratch_slots(g.batch(), slot) as usize).min(fit);
    (slots >= 1).then(|| (gyre_core::cost::SCRATCH_STAGES + 2 * slots * slot) as u32)
}

/// The handler `spec` runs here: a user's CUDA source wins over a built-in id (a spec
/// names one or the other).
fn handler_of(spec: &LaunchSpec) -> Result<Handler<'_>> {
    spec.cuda_source
        .as_deref()
        .map(|s| Handler::Custom {
            name: &s.name,
            source: &s.source,
        })
        .or_else(|| spec.builtin.and_then(Handler::builtin))
        .ok_or_else(|| Error::NeedsDeviceHandler {
            kernel: spec.name.clone(),
        })
}

fn to_core(kernel: &str, e: Error) -> gyre_core::Error {
    gyre_core::Error::Launch {
        backend: "cuda",
        kernel: kernel.to_owned(),
        source: gyre_core::Cause::new(e),
    }
}

/// Why a ring in `owner`'s memory cannot be written from `writer` (two distinct
/// devices), or `None` when it can: peer access (`cuDeviceCanAccessPeer`, the access
/// attribute), native peer-to-peer atomics (see `enable_peer_writes`), unified addressing
/// on both (one pointer value in both contexts) and one major compute capability (the
/// driver's condition for peer access).
fn peer_ring_link(
    writer: &crate::probe::DeviceInfo,
    owner: &crate::probe::DeviceInfo,
) -> Result<Option<&'static str>> {
    let ordinal = |d: &crate::probe::DeviceInfo| usize::try_from(d.ordinal).unwrap_or(0);
    let link = crate::p2p::link(ordinal(writer), ordinal(owner))?;
    Ok(if !(link.can_access_peer && link.access_supported) {
        Some("no peer access between them")
    } else if !link.native_atomics {
        Some(
            "no native peer-to-peer atomics (a PCIe link): loads and stores of one GPU's \
             memory by two GPUs are not atomic",
        )
    } else if !(writer.unified_addressing && owner.unified_addressing) {
        Some("no unified addressing")
    } else if writer.compute_capability.0 != owner.compute_capability.0 {
        Some("different major compute capabilities")
    } else {
        None
    })
}

impl gyre_core::Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    /// Zero copy is mapped host memory the kernel reads over PCIe (or a coherent link):
    /// checked slots, read in waves (`docs/protocol.md`, "Checked slots").
    fn checked_slots(&self) -> bool {
        true
    }

    fn alloc_region(&self, bytes: usize) -> gyre_core::Result<Box<dyn RegionMemory>> {
        let mem = self
            .context()
            .and_then(|ctx| PinnedBuffer::<u8>::region_zeroed(&ctx, bytes))
            .map_err(|e| to_core("(shared region)", e))?;
        Ok(Box::new(mem))
    }

    /// Device memory (`cuMemAlloc`, zeroed): a chain's inner ring, which only this
    /// device's kernels touch, so its slots (and the reader's polling of them) stay on
    /// the device; the control block and telemetry line stay in mapped pinned memory,
    /// where the host reads them.
    fn alloc_kernel_ring(
        &self,
        bytes: usize,
    ) -> gyre_core::Result<Option<Box<dyn gyre_core::region::RingMemory>>> {
        let ring = self
            .context()
            .and_then(|ctx| DeviceBuffer::<u8>::zeroed(&ctx, bytes))
            .map_err(|e| to_core("(a pipeline's inner ring)", e))?;
        Ok(Some(Box::new(ring)))
    }

    /// Another CUDA backend's device: enables peer access from this device's context to
    /// that one's (`cuCtxEnablePeerAccess`) where the link allows what a ring needs (the
    /// same device: nothing to enable; one context per device). Any other backend: no.
    ///
    /// What a ring needs of the link (`peer_ring_link`): peer access, and native
    /// peer-to-peer atomics. The CUDA memory model makes even a naturally aligned load or
    /// store of an object in one GPU's memory atomic, while threads of two GPUs access
    /// it, only where `CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED` holds between
    /// them (NVLink; not PCIe peer-to-peer): the writer's `sequence` release and the
    /// reader's polling of it are such accesses. Elsewhere the ring stays in mapped pinned
    /// memory, where aligned loads and stores are atomic on any device.
    fn enable_peer_writes(&self, owner: &dyn gyre_core::Backend) -> gyre_core::Result<bool> {
        let Some(owner) = owner.as_any().and_then(|a| a.downcast_ref::<CudaBackend>()) else {
            return Ok(false);
        };
        let (me, them) = (&self.info.device, &owner.info.device);
        if me.ordinal != them.ordinal {
            let why = peer_ring_link(me, them).map_err(|e| to_core("(peer link)", e))?;
            if let Some(why) = why {
                tracing::info!(
                    from = me.ordinal,
                    to = them.ordinal,
                    why,
                    "an inner ring between these GPUs stays in mapped pinned memory"
                );
                return Ok(false);
            }
        }
        self.context()
            .and_then(|mine| {
                let theirs = owner.context()?;
                let ok = mine.enable_peer_access(&theirs)?;
                tracing::info!(
                    from = me.ordinal,
                    to = them.ordinal,
                    enabled = ok,
                    "peer access for a pipeline's inner ring"
                );
                Ok(ok)
            })
            .map_err(|e| to_core("(peer access for a pipeline's inner ring)", e))
    }

    fn as_any(&self) -> Option<&dyn core::any::Any> {
        Some(self)
    }

    /// The device address of mapped pinned memory from `alloc_region`
    /// (`cuMemHostGetDevicePointer`).
    fn device_address(&self, host: core::ptr::NonNull<u8>) -> gyre_core::Result<u64> {
        self.context()
            .and_then(|ctx| {
                ctx.bind()?;
                device_pointer(host, "a pipeline's region")
            })
            .map_err(|e| to_core("(pipeline link)", e))
    }

    /// Mapped pinned memory (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`, a [`CudaAllocator`]):
    /// the kernel reads a zero-copy pool's bytes, and every pool's state words, where the
    /// host writes them. A device kernel only reads state words (`docs/loans.md`), so no
    /// atomic has to be shared with the host: any CUDA device, PCIe included.
    fn loan_allocator(&self) -> gyre_core::Result<Arc<dyn RawAllocator>> {
        let alloc = self
            .context()
            .and_then(|ctx| CudaAllocator::new(&ctx, MemoryKind::PinnedMapped))
            .map_err(|e| to_core("(loan pool)", e))?;
        Ok(Arc::new(alloc))
    }

    /// Device memory (`cuMemAlloc`) behind a [`CudaCopyEngine`] on a stream of its own:
    /// the kernel's side of a loan pool under a copy strategy.
    fn loan_device(&self, bytes: usize) -> gyre_core::Result<LoanDevice> {
        let engine = self
            .context()
            .and_then(|ctx| CudaCopyEngine::new(&ctx, bytes))
            .map_err(|e| to_core("(loan pool device memory)", e))?;
        let addr = engine.device_ptr();
        Ok(LoanDevice::Device {
            engine: Arc::new(engine),
            addr,
        })
    }

    /// Device atomics on mapped pinned host memory are atomic with the CPU's only where
    /// the device reports `HOST_NATIVE_ATOMIC_SUPPORTED`; over PCIe they are not.
    fn host_atomics(&self) -> bool {
        self.info().device.host_native_atomic_supported
    }

    /// A device with a kernel execution timeout (a display watchdog, WDDM's default
    /// 2 s) kills any kernel that runs longer: kernels there run in epochs.
    fn kernel_time_limit(&self) -> Option<std::time::Duration> {
        self.info()
            .device
            .kernel_exec_timeout
            .then_some(crate::DISPLAY_WATCHDOG)
    }

    /// Compiles the ring kernel with the spec's handler and, while no ring kernel runs
    /// on the context, loads it (both cached), so the launch that follows loads nothing.
    /// While one runs (a reload, a second kernel) a load could wait for it forever
    /// (`crate::context`): the image is compiled and staged, and the launch loads it,
    /// which succeeds once no ring kernel runs (a reload's launch comes after its R3
    /// join) and is refused with [`Error::WouldWait`] otherwise.
    fn prepare(&self, spec: &LaunchSpec) -> gyre_core::Result<()> {
        spec.idle.validate()?;
        self.context()
            .and_then(|ctx| {
                ctx.bind()?;
                let handler = handler_of(spec)?;
                if ctx.running_kernels() == 0 {
                    self.preload(&ctx);
                    match self.ring_module(&ctx, &handler) {
                        Err(Error::WouldWait { .. }) => {}
                        r => return r.map(|_| ()),
                    }
                }
                let name = format!("gyre_ring_kernel[{}]", handler.name());
                self.stage_program(&ctx, &name, &ring_kernel_source(&handler))
            })
            .map_err(|e| to_core(&spec.name, e))
    }

    fn launch(
        &self,
        region: Arc<SharedRegion>,
        spec: &LaunchSpec,
    ) -> gyre_core::Result<Box<dyn KernelInstance>> {
        spec.idle.validate()?;
        let k = self
            .context()
            .and_then(|ctx| {
                ctx.bind()?;
                let dptr = device_pointer(region.base(), "region")?;
                // A pipeline stage writes into the next stage's region (or reads a link
                // table naming regions): mapped pinned too.
                let link = match &spec.link {
                    Some(l) => {
                        let (base, offset) = l.argument();
                        let d = device_pointer(base, "a pipeline stage's link")?;
                        (d + offset as u64, l.flags, l.next_msg_type)
                    }
                    None => (0, 0, 0),
                };
                let checked = region
                    .control()
                    .host_flags
                    .load(std::sync::atomic::Ordering::Acquire)
                    & gyre_abi::host_flags::CHECKED
                    != 0;
                let g = *region.geometry();
                self.launch_on(
                    &ctx,
                    dptr,
                    link,
                    checked.then_some(&g),
                    Box::new((region, spec.link.clone())),
                    spec,
                )
            })
            .map_err(|e| to_core(&spec.name, e))?;
        Ok(Box::new(k))
    }

    /// One round trip through mapped pinned memory with a running probe kernel
    /// ([`crate::visibility_probe`]).
    fn confirm_system_scope(
        &self,
        timeout: std::time::Duration,
    ) -> gyre_core::Result<std::result::Result<std::time::Duration, String>> {
        self.context()
            .and_then(|ctx| crate::visibility_probe::mapped_round_trip(self, &ctx, timeout))
            .map_err(|e| to_core("(visibility probe)", e))
    }

    /// Device memory (`cuMemAlloc`) behind a [`CudaCopyEngine`] on a stream of its own.
    fn alloc_resident(
        &self,
        g: &Geometry,
        _host_timeout_ms: u32,
    ) -> gyre_core::Result<Arc<dyn CopyEngine>> {
        let engine = self
            .context()
            .and_then(|ctx| CudaCopyEngine::new(&ctx, SharedRegion::bytes_for(g)))
            .map_err(|e| to_core("(device-resident region)", e))?;
        Ok(Arc::new(engine))
    }

    fn launch_resident(
        &self,
        mem: Arc<dyn CopyEngine>,
        spec: &LaunchSpec,
    ) -> gyre_core::Result<Box<dyn KernelInstance>> {
        spec.idle.validate()?;
        let Some(dptr) = mem
            .as_any()
            .downcast_ref::<CudaCopyEngine>()
            .map(CudaCopyEngine::device_ptr)
        else {
            return Err(to_core(
                &spec.name,
                Error::InvalidInput {
                    what: format!("device memory from the '{}' engine", mem.name()),
                    reason: "not allocated by this CUDA backend",
                },
            ));
        };
        let k = self
            .context()
            .and_then(|ctx| self.launch_on(&ctx, dptr, (0, 0, 0), None, Box::new(mem), spec))
            .map_err(|e| to_core(&spec.name, e))?;
        Ok(Box::new(k))
    }
}

/// The device address of mapped pinned memory at `host` (`what` names it in the error).
/// The caller has bound a context.
fn device_pointer(host: core::ptr::NonNull<u8>, what: &str) -> Result<u64> {
    let p = host.as_ptr().cast::<std::ffi::c_void>();
    // SAFETY: the caller bound the context; fails (typed) if `p` is not mapped pinned
    // memory of it.
    unsafe { crate::result::host_device_pointer(p) }.map_err(|e| Error::InvalidInput {
        what: format!("{what} at {p:p} ({e})"),
        reason: "not mapped pinned memory: allocate it with CudaBackend::alloc_region",
    })
}
