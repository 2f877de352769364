//! [`CudaBackend`]: gyre's `Backend` on a CUDA device.
//!
//! The shared region lives in mapped pinned memory ([`PinnedBuffer<u8>`], zero copy). A
//! launch compiles the ring kernel with the built-in handler for the device's own
//! architecture (cached on disk, [`crate::cache`]), loads the module eagerly (a lazily
//! loaded kernel would need a context-wide synchronisation that a running persistent
//! kernel never allows), and launches one block on its own non-blocking stream, never the
//! default stream. The launch contract is at the top of `cuda/ring_kernel.cu`.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUresult};
use gyre_core::bridge::CopyEngine;
use gyre_core::region::RegionMemory;
use gyre_core::ring::Geometry;
use gyre_core::{KernelInstance, LaunchSpec, SharedRegion};

use crate::cache::{CacheKey, PtxCache};
use crate::context::Context;
use crate::copy::CudaCopyEngine;
use crate::error::{check, Error, Result};
use crate::export::ExportRegistration;
use crate::launch::Resources;
use crate::memory::PinnedBuffer;
use crate::nvrtc::{CompileOptions, Handler, Nvrtc, RING_KERNEL_ENTRY};
use crate::probe::{CudaInfo, CudaProbe};
use crate::toolchain::Toolchain;

/// Threads in the ring kernel's block (at most `GYRE_MAX_LANES` of `cuda/ring_kernel.cu`, 128).
pub const LANES: u32 = 128;

/// The CUDA backend on device 0.
#[derive(Debug)]
pub struct CudaBackend {
    ctx: Arc<Context>,
    nvrtc: Nvrtc,
    toolchain: Toolchain,
    cache: Option<PtxCache>,
}

impl CudaBackend {
    /// Whether the backend can work here: a driver, a device that maps host memory, and
    /// NVRTC. Makes no context.
    pub fn check() -> Result<CudaInfo> {
        let info = CudaProbe::detect()?;
        if !info.device.can_map_host_memory {
            return Err(Error::Unsupported {
                op: "the CUDA backend (rings in mapped pinned memory)",
                capability: "CAN_MAP_HOST_MEMORY",
                device: info.device.name.clone(),
            });
        }
        if info.device.arch() < crate::nvrtc::MIN_ARCH {
            return Err(Error::UnsupportedArch {
                arch: info.device.arch(),
            });
        }
        Nvrtc::discover()?;
        Ok(info)
    }

    /// Probes the driver and device ([`check`](Self::check)), finds NVRTC and retains
    /// device 0's primary context. Every failure is a typed [`Error`] naming what is
    /// missing.
    pub fn new() -> Result<Self> {
        let info = Self::check()?;
        let (nvrtc, toolchain) = Nvrtc::discover()?;
        let ctx = Context::primary(&info)?;
        tracing::info!(
            device = %info.device.name,
            arch = info.device.arch(),
            driver = %info.driver_version_string(),
            nvrtc = ?nvrtc.version(),
            "CUDA backend ready"
        );
        Ok(Self {
            ctx,
            nvrtc,
            toolchain,
            cache: PtxCache::from_env(),
        })
    }

    /// The context (device facts, `bind`).
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The PTX of the ring kernel with `handler` for this device, from the cache or NVRTC.
    pub fn ring_kernel_ptx(&self, handler: &Handler<'_>) -> Result<String> {
        let arch = self.ctx.device().arch();
        let opts = CompileOptions::new(arch, &self.toolchain);
        let compile = || {
            self.nvrtc
                .compile_ring_kernel(handler, &opts)
                .map(|p| p.ptx)
        };
        match &self.cache {
            Some(cache) => {
                let source = crate::nvrtc::ring_kernel_source(handler);
                let key = CacheKey::new(&source, &opts.args()?, arch, self.nvrtc.version());
                cache.get_or_compile(&key, compile)
            }
            None => compile(),
        }
    }

    /// The device address of a zero-copy region: its mapping of mapped pinned memory.
    fn mapped_ptr(&self, region: &SharedRegion) -> Result<sys::CUdeviceptr> {
        self.ctx.bind()?;
        let host = region.base().as_ptr().cast::<c_void>();
        let mut dptr: sys::CUdeviceptr = 0;
        // SAFETY: queries the mapping of a host address; fails (typed) if it is not mapped
        // pinned memory.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dptr, host, 0) };
        check("cuMemHostGetDevicePointer", r, || {
            format!(
                ", region at {host:p} is not mapped pinned memory (use CudaBackend::alloc_region)"
            )
        })?;
        Ok(dptr)
    }

    /// Launches the ring kernel over the region at device address `dptr`; `keep` owns the
    /// memory behind it and lives until the kernel has finished.
    fn launch_inner(
        &self,
        mut dptr: sys::CUdeviceptr,
        keep: Keep,
        spec: &LaunchSpec,
    ) -> Result<CudaKernel> {
        // A user's CUDA source wins over a built-in id (the spec names one or the other).
        let handler = spec
            .cuda_source
            .as_deref()
            .map(|s| Handler::Custom {
                name: &s.name,
                source: &s.source,
            })
            .or_else(|| spec.builtin.and_then(Handler::builtin))
            .ok_or_else(|| Error::NeedsDeviceHandler {
                kernel: spec.name.clone(),
            })?;
        let (major, minor) = self.nvrtc.version();
        let need = major * 1000 + minor * 10;
        let found = self.ctx.info().driver_version;
        if found < need {
            return Err(Error::DriverTooOld {
                found,
                need,
                why: "loading PTX made by this NVRTC",
            });
        }
        let res = Resources::load(
            &self.ctx,
            self.ring_kernel_ptx(&handler)?,
            RING_KERNEL_ENTRY,
        )?;
        // The export file's telemetry line, registered so K8 writes it directly; without
        // a registration (no export, or the driver refused) the host copies it instead.
        let export = spec.export.clone().and_then(|file| {
            ExportRegistration::new(&self.ctx, file)
                .map_err(|e| {
                    tracing::warn!(error = %e, "telemetry export: the device cannot write the file; the host copies it");
                })
                .ok()
        });
        let mut export_dptr: sys::CUdeviceptr =
            export.as_ref().map_or(0, ExportRegistration::telemetry_ptr);
        let mut params = [
            std::ptr::addr_of_mut!(dptr).cast::<c_void>(),
            std::ptr::addr_of_mut!(export_dptr).cast::<c_void>(),
        ];
        // SAFETY: the ring kernel's two parameters are pointers, passed as the addresses
        // of `dptr` and `export_dptr` (read by the driver during the call); the region and
        // the registered export file stay alive as long as the CudaKernel holds them.
        unsafe { res.launch(LANES, &mut params)? };
        let writes_export = export.is_some();
        let keep: Keep = Box::new((keep, export));
        Ok(CudaKernel {
            ctx: self.ctx.clone(),
            state: Mutex::new(Some((res, keep))),
            writes_export,
        })
    }
}

fn to_core(kernel: &str, e: Error) -> gyre_core::Error {
    gyre_core::Error::Launch {
        backend: "cuda",
        kernel: kernel.to_owned(),
        source: gyre_core::Cause::new(e),
    }
}

impl gyre_core::Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn alloc_region(&self, bytes: usize) -> gyre_core::Result<Box<dyn RegionMemory>> {
        let mem = PinnedBuffer::<u8>::region_zeroed(&self.ctx, bytes)
            .map_err(|e| to_core("(shared region)", e))?;
        Ok(Box::new(mem))
    }

    fn launch(
        &self,
        region: Arc<SharedRegion>,
        spec: &LaunchSpec,
    ) -> gyre_core::Result<Box<dyn KernelInstance>> {
        spec.idle.validate()?;
        let k = self
            .mapped_ptr(&region)
            .and_then(|dptr| self.launch_inner(dptr, Box::new(region), spec))
            .map_err(|e| to_core(&spec.name, e))?;
        tracing::info!(kernel = %spec.name, lanes = LANES, "CUDA ring kernel launched");
        Ok(Box::new(k))
    }

    /// One round trip through mapped pinned memory with a running probe kernel
    /// ([`crate::visibility_probe`]).
    fn confirm_system_scope(
        &self,
        timeout: std::time::Duration,
    ) -> gyre_core::Result<std::result::Result<std::time::Duration, String>> {
        crate::visibility_probe::mapped_round_trip(&self.ctx, &self.nvrtc, &self.toolchain, timeout)
            .map_err(|e| to_core("(visibility probe)", e))
    }

    /// Device memory (`cuMemAlloc`) behind a [`CudaCopyEngine`] on its own copy stream.
    fn alloc_resident(
        &self,
        g: &Geometry,
        _host_timeout_ms: u32,
    ) -> gyre_core::Result<Arc<dyn CopyEngine>> {
        let engine = CudaCopyEngine::new(&self.ctx, SharedRegion::bytes_for(g))
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
            .launch_inner(dptr, Box::new(mem), spec)
            .map_err(|e| to_core(&spec.name, e))?;
        tracing::info!(kernel = %spec.name, lanes = LANES, "CUDA ring kernel launched over device-resident rings");
        Ok(Box::new(k))
    }
}

/// What a running kernel's memory is owned by (the shared region, or the copy engine's
/// device buffer).
type Keep = Box<dyn core::any::Any + Send + Sync>;

/// A ring kernel running on the device.
struct CudaKernel {
    ctx: Arc<Context>,
    /// `None` once joined. The region is kept alive while the kernel may touch it.
    state: Mutex<Option<(Resources, Keep)>>,
    /// Whether K8 also writes the registered telemetry export file.
    writes_export: bool,
}

// SAFETY: the raw handles are driver objects usable from any thread with the context
// bound (every method binds it); the Mutex serialises access.
unsafe impl Send for CudaKernel {}
// SAFETY: as above.
unsafe impl Sync for CudaKernel {}

impl KernelInstance for CudaKernel {
    fn writes_export_telemetry(&self) -> bool {
        self.writes_export
    }

    fn is_finished(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((res, _)) = g.as_ref() else {
            return true;
        };
        if self.ctx.bind().is_err() {
            return true;
        }
        // SAFETY: a live stream in the bound context.
        match unsafe { sys::cuStreamQuery(res.stream()) } {
            CUresult::CUDA_ERROR_NOT_READY => false,
            // Done, or failed: `join` reports which.
            _ => true,
        }
    }

    fn join(&self) -> gyre_core::Result<()> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((res, _region)) = g.as_ref() else {
            return Ok(());
        };
        let fail = |e: Error| to_core("(join)", e);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: a live stream in the bound context.
        let r = unsafe { sys::cuStreamSynchronize(res.stream()) };
        let result = check("cuStreamSynchronize", r, || {
            ", the ring kernel's stream".into()
        });
        // The stream is idle (or the context is broken): release everything.
        *g = None;
        result.map_err(fail)
    }
}

impl Drop for CudaKernel {
    fn drop(&mut self) {
        let state = match self.state.get_mut() {
            Ok(s) => s.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(pair) = state {
            if self.is_finished_now(&pair.0) {
                drop(pair);
            } else {
                // Freeing the region or unloading the module under a running kernel would
                // fault the device: leak them instead.
                tracing::error!(
                    "CUDA ring kernel dropped while running: leaking its region and module"
                );
                std::mem::forget(pair);
            }
        }
    }
}

impl CudaKernel {
    fn is_finished_now(&self, res: &Resources) -> bool {
        // SAFETY: a live stream; the context is bound first.
        self.ctx.bind().is_ok()
            && unsafe { sys::cuStreamQuery(res.stream()) } != CUresult::CUDA_ERROR_NOT_READY
    }
}
