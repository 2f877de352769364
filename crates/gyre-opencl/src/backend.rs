//! [`OpenClBackend`]: gyre's `Backend` on an OpenCL device.
//!
//! The shared region lives in fine-grained SVM with atomics ([`SvmRegion`], zero copy). A
//! launch builds the ring kernel with the built-in handler for the device (once per
//! process and handler: programs are cached with the device), makes an in-order queue of
//! its own, enqueues ONE work-group and flushes the queue, so the kernel starts while the
//! host polls. The launch contract is at the top of `cuda/ring_kernel.cl`.
//!
//! A persistent work-group holds a compute unit until it returns, and OpenCL promises no
//! forward progress to a group that is not resident: PoCL runs as many groups at once as
//! it has worker threads (one per core). So a device runs at most as many ring kernels
//! from this process as it has compute units; one more is [`Error::DeviceFull`], not a
//! kernel that never starts.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use gyre_core::chain::LinkTarget;
use gyre_core::region::RegionMemory;
use gyre_core::{KernelInstance, LaunchSpec, SharedRegion};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::event::{Event, CL_COMPLETE};
use opencl3::kernel::Kernel;
use opencl3::program::Program;

use crate::clock;
use crate::error::{check, Error, Result};
use crate::memory::{SvmAllocator, SvmRegion, SvmRegistry};
use crate::probe::{self, DeviceInfo, DeviceKind};
use crate::program::{self as prog, BuildOptions, Handler, RING_KERNEL_ENTRY};

/// Work-items in the ring kernel's group on a GPU or accelerator.
pub const GPU_LANES: u32 = 64;
/// Work-items on a CPU device: one. PoCL runs a group's work-items as loops on one
/// thread, which it builds by static analysis of the barriers; the persistent loop's
/// barriers sit in loops whose trip count is read from `__local` memory (uniform at run
/// time, not provably so), and with more than one work-item PoCL 3.1 miscompiles it (the
/// poller never sees a published request under `loopvec` and `cbs`, `repl` crashes).
/// So on PoCL the multi-lane paths (barriers between requests, cooperative handlers) are
/// not exercised; see docs/opencl.md. `GYRE_OPENCL_LANES` overrides, for experiments.
pub const CPU_LANES: u32 = 1;
/// Environment variable overriding the work-group size (1..=256).
pub const ENV_LANES: &str = "GYRE_OPENCL_LANES";

/// What one device needs once per process: context, clock rate, built programs, and the
/// count of ring kernels running on it.
#[derive(Debug)]
struct DeviceState {
    key: (usize, usize),
    info: DeviceInfo,
    ctx: Arc<Context>,
    registry: Arc<SvmRegistry>,
    options: BuildOptions,
    /// Built ring kernels, by handler name and source.
    programs: Mutex<HashMap<(String, String), Arc<Program>>>,
    running: AtomicUsize,
}

/// Every device opened by this process, so runtimes share contexts, clock calibration and
/// compiled programs. Never emptied: contexts live as long as the process.
fn devices() -> &'static Mutex<Vec<Arc<DeviceState>>> {
    static DEVICES: OnceLock<Mutex<Vec<Arc<DeviceState>>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(Vec::new()))
}

impl DeviceState {
    fn open(platform: usize, device: usize) -> Result<Arc<Self>> {
        let mut all = devices().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = all.iter().find(|d| d.key == (platform, device)) {
            return Ok(d.clone());
        }
        // Discovery, context and the first kernel under the discovery lock (see
        // `probe::serialized`).
        let (dev, info, ctx, registry, scale) = probe::serialized(|| -> Result<_> {
            let (dev, info) = probe::select_unlocked(platform, device)?;
            if let Some(why) = info.unusable() {
                return Err(why);
            }
            let ctx = Arc::new(check(
                "clCreateContext",
                Context::from_device(&dev),
                || format!(", device {}", info.name),
            )?);
            let registry = Arc::new(SvmRegistry::default());
            let scale = clock::calibrate(&ctx, &registry, &info)?;
            Ok((dev, info, ctx, registry, scale))
        })?;
        let lanes = lanes_for(&info, &dev);
        let state = Arc::new(Self {
            key: (platform, device),
            options: BuildOptions::new(&info, lanes, scale),
            info,
            ctx,
            registry,
            programs: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
        });
        tracing::info!(
            platform,
            device,
            name = %state.info.name,
            lanes,
            ns_per_tick = scale.ns_per_tick(),
            atomic_scope = state.options.atomic_scope.cl_name(),
            fence_scope = state.options.fence_scope.cl_name(),
            "OpenCL device opened"
        );
        all.push(state.clone());
        Ok(state)
    }

    /// The ring kernel program with `handler`, built once.
    fn program(&self, handler: Handler<'_>) -> Result<Arc<Program>> {
        let key = (handler.name().to_owned(), handler.source().to_owned());
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = programs.get(&key) {
            return Ok(p.clone());
        }
        let p = Arc::new(prog::build(
            &self.ctx,
            &self.info,
            handler.name(),
            &prog::ring_kernel_source(handler),
            &self.options.to_cl_options(),
        )?);
        programs.insert(key, p.clone());
        Ok(p)
    }
}

/// The group size for `info`: [`CPU_LANES`] or [`GPU_LANES`], bounded by the device.
fn lanes_for(info: &DeviceInfo, dev: &Device) -> u32 {
    let default = if info.kind == DeviceKind::Cpu {
        CPU_LANES
    } else {
        GPU_LANES
    };
    let want = std::env::var(ENV_LANES)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| (1..=256).contains(n))
        .unwrap_or(default);
    let max = dev.max_work_group_size().unwrap_or(1).max(1);
    want.min(u32::try_from(max).unwrap_or(u32::MAX))
}

/// The OpenCL backend on one device.
///
/// # Examples
///
/// ```no_run
/// use gyre_core::Backend as _;
/// let b = gyre_opencl::OpenClBackend::new(0, 0)?;
/// println!("{} on {}", b.name(), b.device().name);
/// # Ok::<(), gyre_opencl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct OpenClBackend {
    dev: Arc<DeviceState>,
}

impl OpenClBackend {
    /// Opens device `device` of platform `platform` (indices as [`probe()`](fn@crate::probe)
    /// lists them): checks that it offers fine-grained SVM with atomics and OpenCL C 3.0,
    /// makes a context and calibrates the device clock (once per process and device).
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`], [`Error::NoPlatform`], [`Error::PlatformIndex`],
    /// [`Error::DeviceIndex`], [`Error::NeedsCopyStrategy`], [`Error::Unsupported`],
    /// [`Error::Build`] / [`Error::Clock`] (the clock probe), [`Error::Cl`].
    pub fn new(platform: usize, device: usize) -> Result<Self> {
        Ok(Self {
            dev: DeviceState::open(platform, device)?,
        })
    }

    /// The context, SVM registry, facts and build options of this device (for
    /// [`crate::phase_check`]).
    pub(crate) fn parts(&self) -> (&Arc<Context>, &Arc<SvmRegistry>, &DeviceInfo, BuildOptions) {
        (
            &self.dev.ctx,
            &self.dev.registry,
            &self.dev.info,
            self.dev.options,
        )
    }

    /// The device's facts.
    pub fn device(&self) -> &DeviceInfo {
        &self.dev.info
    }

    /// The build options of this device's ring kernels (lanes, scopes, clock rate).
    pub fn build_options(&self) -> BuildOptions {
        self.dev.options
    }

    /// Builds the ring kernel with `handler` (or returns the cached build): a compile
    /// check that needs no region.
    ///
    /// # Errors
    ///
    /// [`Error::Build`] with the compiler's log; [`Error::Cl`].
    pub fn build(&self, handler: Handler<'_>) -> Result<()> {
        self.dev.program(handler).map(|_| ())
    }

    /// The handler `spec` runs here: a user's OpenCL C source wins over a built-in id (a
    /// spec names one or the other).
    fn handler_of(spec: &LaunchSpec) -> Result<Handler<'_>> {
        spec.opencl_source
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

    fn launch_inner(&self, region: &Arc<SharedRegion>, spec: &LaunchSpec) -> Result<OpenClKernel> {
        let handler = Self::handler_of(spec)?;
        let base = region.base().as_ptr();
        if !self.dev.registry.contains(base as usize) {
            return Err(Error::Unsupported {
                device: self.dev.info.name.clone(),
                reason: format!(
                    "the region at {base:p} is not SVM of this device's context \
                     (allocate it with OpenClBackend::alloc_region)"
                ),
            });
        }
        // A pipeline stage writes into the next stage's region, or reads an entry of a
        // link table: SVM of this context too (the allocation's base is what the registry
        // knows; the argument may lie inside it). Not chained: the region itself
        // (cuda/ring_kernel.cl reads it as no link), since an SVM argument is never null
        // here.
        let (next, link_base, link_flags, next_type) = match &spec.link {
            Some(l) => {
                let (b, offset) = l.argument();
                let p = b.as_ptr();
                (p.wrapping_add(offset), p, l.flags, l.next_msg_type)
            }
            None => (base, base, 0u32, 0u32),
        };
        if link_base != base && !self.dev.registry.contains(link_base as usize) {
            return Err(Error::Unsupported {
                device: self.dev.info.name.clone(),
                reason: format!(
                    "the pipeline link at {link_base:p} (a region or link tables) is not SVM \
                     of this device's context"
                ),
            });
        }
        let program = self.dev.program(handler)?;
        let kernel = check(
            "clCreateKernel",
            Kernel::create(&program, RING_KERNEL_ENTRY),
            || format!(", {RING_KERNEL_ENTRY} with {}", handler.name()),
        )?;
        let queue = check(
            "clCreateCommandQueueWithProperties",
            CommandQueue::create_default_with_properties(&self.dev.ctx, 0, 0),
            || ", in-order, for one ring kernel".into(),
        )?;
        // Reserve a compute unit (see the module docs).
        let cus = self.dev.info.compute_units.max(1) as usize;
        let running = self.dev.running.fetch_add(1, Ordering::AcqRel);
        if running >= cus {
            self.dev.running.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::DeviceFull {
                device: self.dev.info.name.clone(),
                running,
                compute_units: self.dev.info.compute_units,
            });
        }
        let reservation = Reservation(self.dev.clone());
        let lanes = [self.dev.options.lanes as usize];
        // The loan pool (cuda/ring_kernel.cl's launch contract): its bytes and state words
        // in SVM of this context (`loan_allocator`), or the region twice and a size of 0.
        // The regions a link table names (a fan-out's branches, a join's target) are
        // reached through pointers stored in the table, not kernel arguments: OpenCL
        // requires such SVM buffers to be declared (CL_KERNEL_EXEC_INFO_SVM_PTRS).
        let indirect: Vec<*mut c_void> = match spec.link.as_ref().map(|l| &l.next) {
            Some(LinkTarget::Table { regions, .. }) => regions
                .iter()
                .map(|r| r.base().as_ptr().cast::<c_void>())
                .collect(),
            _ => Vec::new(),
        };
        if let Some(p) = indirect
            .iter()
            .find(|p| !self.dev.registry.contains(**p as usize))
        {
            return Err(Error::Unsupported {
                device: self.dev.info.name.clone(),
                reason: format!(
                    "a region at {p:p} that a pipeline link table names is not SVM of this \
                     device's context"
                ),
            });
        }
        let loans = spec.loans.as_ref().map(|a| a.view());
        if let Some(v) = loans {
            // The kernel dereferences both, all of them: they must be SVM of this context
            // (this backend's `loan_allocator`), not another context's or host memory,
            // and as large as the pool says (an arena's kernel-side address is any value
            // `LoanArena::new_split_device` was given).
            let words =
                (v.bytes >> v.min_shift).saturating_mul(u64::from(gyre_abi::loan::WORD_STRIDE));
            if let Some((p, _)) =
                [(v.base, v.bytes), (v.words, words)]
                    .into_iter()
                    .find(|&(p, n)| {
                        !usize::try_from(n).is_ok_and(|n| self.dev.registry.holds(p as usize, n))
                    })
            {
                return Err(Error::Unsupported {
                    device: self.dev.info.name.clone(),
                    reason: format!(
                        "a loan pool at {p:#x} that is not SVM of this device's context, \
                         or smaller than the pool (allocate it with this backend's \
                         loan_allocator)"
                    ),
                });
            }
        }
        if let Some(a) = &spec.loans {
            // The ring kernel resolves handles by reading the words only: from now on
            // host code must not resolve them (whoever launched it).
            a.serve_on_device();
        }
        let (loan_base, loan_words, loan_bytes, loan_shift) = match loans {
            Some(v) => (v.base as *mut u8, v.words as *mut u8, v.bytes, v.min_shift),
            None => (base, base, 0u64, 0u32),
        };
        // SAFETY: the ring kernel's arguments are the region, an SVM pointer of this
        // context (checked above), the loan pool's two SVM pointers (from this backend's
        // `loan_allocator`) with its size and shift, and a pipeline stage's next region
        // (SVM of this context, checked above, or the region itself) with its link flags
        // and message type; the exec info lists `indirect.len()` SVM pointers of this
        // context (checked above) read from a live Vec; the regions
        // and the pool outlive the kernel (OpenClKernel keeps their Arcs and leaks them if
        // the kernel never finishes). One group: global == local.
        let event = unsafe {
            check(
                "clSetKernelArgSVMPointer",
                kernel.set_arg_svm_pointer(0, base.cast()),
                || ", the shared region".into(),
            )?;
            check(
                "clSetKernelArgSVMPointer",
                kernel.set_arg_svm_pointer(1, loan_base.cast()),
                || ", the loan pool".into(),
            )?;
            check(
                "clSetKernelArgSVMPointer",
                kernel.set_arg_svm_pointer(2, loan_words.cast()),
                || ", the loan pool's state words".into(),
            )?;
            check("clSetKernelArg", kernel.set_arg(3, &loan_bytes), || {
                ", the loan pool's size".into()
            })?;
            check("clSetKernelArg", kernel.set_arg(4, &loan_shift), || {
                ", the loan pool's block shift".into()
            })?;
            check(
                "clSetKernelArgSVMPointer",
                kernel.set_arg_svm_pointer(5, next.cast()),
                || ", the next pipeline stage's region".into(),
            )?;
            check("clSetKernelArg", kernel.set_arg(6, &link_flags), || {
                ", the pipeline link's flags".into()
            })?;
            check("clSetKernelArg", kernel.set_arg(7, &next_type), || {
                ", the next pipeline stage's message type".into()
            })?;
            if !indirect.is_empty() {
                check(
                    "clSetKernelExecInfo",
                    opencl3::kernel::set_kernel_exec_info(
                        kernel.get(),
                        opencl3::kernel::CL_KERNEL_EXEC_INFO_SVM_PTRS,
                        core::mem::size_of_val(indirect.as_slice()),
                        indirect.as_ptr().cast::<c_void>(),
                    )
                    .map_err(opencl3::error_codes::ClError),
                    || format!(", the {} regions a link table names", indirect.len()),
                )?;
            }
            check(
                "clEnqueueNDRangeKernel",
                queue.enqueue_nd_range_kernel(
                    kernel.get(),
                    1,
                    std::ptr::null(),
                    lanes.as_ptr(),
                    lanes.as_ptr(),
                    &[],
                ),
                || format!(", one work-group of {} work-items", lanes[0]),
            )?
        };
        // Start it now: the host polls for its state instead of waiting on the queue.
        check("clFlush", queue.flush(), || {
            ", the ring kernel's queue".into()
        })?;
        Ok(OpenClKernel {
            device: self.dev.info.name.clone(),
            state: Mutex::new(Some(Running {
                event,
                _queue: queue,
                _kernel: kernel,
                _region: region.clone(),
                _loans: spec.loans.clone(),
                _link: spec.link.clone(),
                _reservation: reservation,
            })),
        })
    }
}

fn to_core(kernel: &str, e: Error) -> gyre_core::Error {
    gyre_core::Error::Launch {
        backend: "opencl",
        kernel: kernel.to_owned(),
        source: gyre_core::Cause::new(e),
    }
}

impl gyre_core::Backend for OpenClBackend {
    fn name(&self) -> &'static str {
        "opencl"
    }

    /// Fine-grained SVM with atomics ([`SvmAllocator`]): the kernel reads loaned bytes in
    /// place and its compare-and-swaps of the state words are atomic with the host's.
    fn loan_allocator(&self) -> gyre_core::Result<Arc<dyn gyre_core::memory::RawAllocator>> {
        Ok(Arc::new(SvmAllocator::new(
            &self.dev.ctx,
            &self.dev.registry,
        )))
    }

    fn alloc_region(&self, bytes: usize) -> gyre_core::Result<Box<dyn RegionMemory>> {
        let mem = SvmRegion::zeroed(&self.dev.ctx, &self.dev.registry, bytes)
            .map_err(|e| to_core("(shared region)", e))?;
        Ok(Box::new(mem))
    }

    /// Its kernels address only its fine-grained SVM allocated with `CL_MEM_SVM_ATOMICS`.
    /// Their compare-and-swaps and fences must also reach the host's: a CPU device's do
    /// (the host's cores), another device's only with the all-SVM-devices scope for
    /// both atomics and fences (`GYRE_CL_FENCE_SCOPE`; a by-id target's prefix advance
    /// is a store, a fence, then a scan of the other producers' slots).
    fn host_atomics(&self) -> bool {
        let i = &self.dev.info;
        i.kind == crate::DeviceKind::Cpu
            || (i.atomic_scope == crate::Scope::AllSvmDevices
                && i.fence_scope == crate::Scope::AllSvmDevices)
    }

    /// `host` itself (SVM is one address for host and device), if it is the base of SVM
    /// of this device's context; otherwise refused (host memory of another backend, SVM
    /// of another context).
    fn device_address(&self, host: core::ptr::NonNull<u8>) -> gyre_core::Result<u64> {
        if self.dev.registry.contains(host.as_ptr() as usize) {
            return Ok(host.as_ptr() as u64);
        }
        Err(to_core(
            "(pipeline link)",
            Error::Unsupported {
                device: self.dev.info.name.clone(),
                reason: format!(
                    "{host:p} is not SVM of this device's context (allocate it with \
                     OpenClBackend::alloc_region)"
                ),
            },
        ))
    }

    /// Builds the ring kernel with the spec's handler (cached with the device), so the
    /// launch that follows cannot fail on the build.
    fn prepare(&self, spec: &LaunchSpec) -> gyre_core::Result<()> {
        spec.idle.validate()?;
        Self::handler_of(spec)
            .and_then(|h| self.dev.program(h))
            .map(|_| ())
            .map_err(|e| to_core(&spec.name, e))
    }

    fn launch(
        &self,
        region: Arc<SharedRegion>,
        spec: &LaunchSpec,
    ) -> gyre_core::Result<Box<dyn KernelInstance>> {
        spec.idle.validate()?;
        let k = self
            .launch_inner(&region, spec)
            .map_err(|e| to_core(&spec.name, e))?;
        tracing::info!(
            kernel = %spec.name,
            device = %self.dev.info.name,
            lanes = self.dev.options.lanes,
            "OpenCL ring kernel launched"
        );
        Ok(Box::new(k))
    }
}

/// A compute unit held by a running ring kernel; released on drop.
#[derive(Debug)]
struct Reservation(Arc<DeviceState>);

impl Drop for Reservation {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Everything a running kernel needs kept alive (dropped in this order once it is over).
struct Running {
    event: Event,
    _queue: CommandQueue,
    _kernel: Kernel,
    _region: Arc<SharedRegion>,
    _loans: Option<Arc<gyre_core::loan::LoanArena>>,
    /// A pipeline stage's link: the next stage's region, which the kernel writes.
    _link: Option<gyre_core::chain::StageLink>,
    _reservation: Reservation,
}

/// A ring kernel running on an OpenCL device.
struct OpenClKernel {
    device: String,
    /// `None` once joined.
    state: Mutex<Option<Running>>,
}

/// The execution status of the kernel command: `CL_COMPLETE` (0), a state (> 0) or an
/// error (< 0).
fn status(event: &Event) -> i32 {
    match event.command_execution_status() {
        Ok(s) => s.0,
        Err(e) => e.0,
    }
}

impl KernelInstance for OpenClKernel {
    fn is_finished(&self) -> bool {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_ref() {
            None => true,
            // Complete, or failed: `join` reports which.
            Some(r) => status(&r.event) <= CL_COMPLETE,
        }
    }

    fn join(&self) -> gyre_core::Result<()> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = g.as_ref() else {
            return Ok(());
        };
        let waited = check("clWaitForEvents", r.event.wait(), || {
            format!(", the ring kernel on {}", self.device)
        });
        let st = status(&r.event);
        // The command is over (or the queue is broken): release everything.
        *g = None;
        waited.map_err(|e| to_core("(join)", e))?;
        if st < CL_COMPLETE {
            return Err(to_core(
                "(join)",
                crate::error::cl_error(
                    "the ring kernel command",
                    st,
                    format!(", on {}", self.device),
                ),
            ));
        }
        Ok(())
    }
}

impl Drop for OpenClKernel {
    fn drop(&mut self) {
        let state = match self.state.get_mut() {
            Ok(s) => s.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(r) = state {
            if status(&r.event) <= CL_COMPLETE {
                drop(r);
            } else {
                // Freeing the region under a running kernel would let it write freed
                // memory: leak the region, queue and kernel (and keep the compute unit
                // reserved: the group still occupies it).
                tracing::error!(
                    device = %self.device,
                    "OpenCL ring kernel dropped while running: leaking its region and queue"
                );
                std::mem::forget(r);
            }
        }
    }
}
