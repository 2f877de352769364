//! [`OpenClBackend`]: gyre's `Backend` on an OpenCL device.
//!
//! Two placements of a kernel's rings:
//!
//! * **zero copy** (`Unified`): the shared region lives in fine-grained SVM with atomics
//!   ([`SvmRegion`]), which host and kernel address in place;
//! * **device buffers** (`Sync`, `Async`, `DmaPolling`): the region is an OpenCL buffer that
//!   the bridge keeps in step with the host's mirror by copies ([`ClCopyEngine`]): every
//!   device that runs the ring kernel at all, also one without fine-grained SVM (NVIDIA's,
//!   many AMD and Intel GPUs: coarse-grained SVM only), or with zero copy turned off
//!   ([`crate::probe::ENV_SVM`]).
//!
//! A launch builds the ring kernel with the handler for the device (once per process and
//! handler: programs are cached with the device), makes an in-order queue of its own,
//! enqueues ONE work-group and flushes the queue, so the kernel starts while the host
//! polls. The launch contract is at the top of `cuda/ring_kernel.cl`. How many kernels a
//! device runs at once: `kernel.rs` (one compute unit per kernel, and one more for the
//! copies on a CPU device).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use gyre_core::bridge::CopyEngine;
use gyre_core::chain::LinkTarget;
use gyre_core::region::RegionMemory;
use gyre_core::ring::Geometry;
use gyre_core::{KernelInstance, LaunchSpec, SharedRegion};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::kernel::Kernel;
use opencl3::program::Program;
use opencl3::types::cl_mem;

use crate::clock;
use crate::copy::ClCopyEngine;
use crate::error::{check, Error, Result};
use crate::kernel::{Occupancy, OpenClKernel, Reservation, Rings, Running};
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
    /// Why the rings cannot be shared in place (zero copy), if they cannot: the kernels
    /// of this device then run over device buffers only.
    zero_copy_refusal: Option<String>,
    /// Built ring kernels, by handler name and source.
    programs: Mutex<HashMap<(String, String), Arc<Program>>>,
    occupancy: Arc<Mutex<Occupancy>>,
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
            probe::check_env()?;
            let ctx = Arc::new(check(
                "clCreateContext",
                Context::from_device(&dev),
                || format!(", device {}", info.name),
            )?);
            let registry = Arc::new(SvmRegistry::default());
            let scale = clock::calibrate(&ctx, &info)?;
            Ok((dev, info, ctx, registry, scale))
        })?;
        let lanes = lanes_for(&info, &dev);
        let zero_copy_refusal = info.zero_copy_refusal().map(|e| e.to_string());
        let state = Arc::new(Self {
            key: (platform, device),
            options: BuildOptions::new(&info, lanes, scale),
            info,
            ctx,
            registry,
            zero_copy_refusal,
            programs: Mutex::new(HashMap::new()),
            occupancy: Arc::default(),
        });
        tracing::info!(
            platform,
            device,
            name = %state.info.name,
            lanes,
            ns_per_tick = scale.ns_per_tick(),
            atomic_scope = state.options.atomic_scope.cl_name(),
            fence_scope = state.options.fence_scope.cl_name(),
            zero_copy = state.zero_copy_refusal.is_none(),
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
    /// lists them): checks that it runs the ring kernel (OpenCL C 3.0, atomics; see
    /// [`DeviceInfo::unusable`]) and whether it shares rings in place
    /// ([`DeviceInfo::zero_copy_refusal`]: otherwise its kernels run over device buffers
    /// and the copy strategies), makes a context and calibrates the device clock (once
    /// per process and device).
    ///
    /// # Errors
    ///
    /// [`Error::LibraryMissing`], [`Error::NoPlatform`], [`Error::PlatformIndex`],
    /// [`Error::DeviceIndex`], [`Error::Unsupported`], [`Error::Env`] (a bad
    /// `GYRE_OPENCL_SVM`), [`Error::Build`] / [`Error::Clock`] (the clock probe),
    /// [`Error::Cl`].
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

    /// Why this device's kernels cannot share rings with the host in place (zero copy),
    /// if they cannot: they then run over device buffers and the copy strategies only.
    /// Decided when the device was opened ([`DeviceInfo::zero_copy_refusal`]).
    pub fn zero_copy_refusal(&self) -> Option<&str> {
        self.dev.zero_copy_refusal.as_deref()
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

    /// The zero-copy launch: the region and everything the kernel reaches through it are
    /// SVM of this context.
    fn launch_inner(&self, region: &Arc<SharedRegion>, spec: &LaunchSpec) -> Result<OpenClKernel> {
        let handler = Self::handler_of(spec)?;
        if let Some(why) = &self.dev.zero_copy_refusal {
            return Err(self.unsupported(format!("zero copy: {why}")));
        }
        let base = region.base().as_ptr();
        if !self.dev.registry.contains(base as usize) {
            return Err(self.unsupported(format!(
                "the region at {base:p} is not SVM of this device's context (allocate it \
                 with OpenClBackend::alloc_region)"
            )));
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
            return Err(self.unsupported(format!(
                "the pipeline link at {link_base:p} (a region or link tables) is not SVM of \
                 this device's context"
            )));
        }
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
            return Err(self.unsupported(format!(
                "a region at {p:p} that a pipeline link table names is not SVM of this \
                 device's context"
            )));
        }
        // The loan pool (cuda/ring_kernel.cl's launch contract): its bytes and state words
        // in SVM of this context (`loan_allocator`), or the region twice and a size of 0.
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
                return Err(self.unsupported(format!(
                    "a loan pool at {p:#x} that is not SVM of this device's context, or \
                     smaller than the pool (allocate it with this backend's loan_allocator)"
                )));
            }
        }
        let (loan_base, loan_words, loan_bytes, loan_shift) = match loans {
            Some(v) => (v.base as *mut u8, v.words as *mut u8, v.bytes, v.min_shift),
            None => (base, base, 0u64, 0u32),
        };
        let reservation = self.reserve(false)?;
        if let Some(a) = &spec.loans {
            // The ring kernel resolves handles by reading the words only: from now on
            // host code must not resolve them (whoever launched it).
            a.serve_on_device();
        }
        let args = Args {
            region: Ptr::Svm(base.cast()),
            loan_base: Ptr::Svm(loan_base.cast()),
            loan_words: Ptr::Svm(loan_words.cast()),
            loan_bytes,
            loan_shift,
            next: Ptr::Svm(next.cast()),
            link_flags,
            next_type,
            indirect,
        };
        // SAFETY: every pointer was checked above to be SVM of this context (the region,
        // the loan pool from `loan_allocator`, a stage's next region, the regions a link
        // table names); they outlive the kernel: `Running` keeps their Arcs and is leaked
        // if the kernel never finishes.
        let (event, queue, kernel) = unsafe { self.enqueue(handler, &args)? };
        OpenClKernel::start(OpenClKernel {
            device: self.dev.info.name.clone(),
            state: Mutex::new(Some(Running {
                event,
                queue,
                _kernel: kernel,
                _rings: Rings::Shared(region.clone()),
                _loans: spec.loans.clone(),
                _link: spec.link.clone(),
                _reservation: reservation,
            })),
        })
    }

    /// The launch over device buffers (a copy strategy): the region is `engine`'s buffer.
    fn launch_resident_inner(
        &self,
        engine: &Arc<dyn CopyEngine>,
        spec: &LaunchSpec,
    ) -> Result<OpenClKernel> {
        let handler = Self::handler_of(spec)?;
        let Some(mem) = engine
            .as_any()
            .downcast_ref::<ClCopyEngine>()
            .filter(|e| Arc::ptr_eq(e.context(), &self.dev.ctx))
            .map(ClCopyEngine::mem)
        else {
            return Err(self.unsupported(format!(
                "device memory from the '{}' copy engine: not allocated by this OpenCL \
                 device's backend (alloc_resident)",
                engine.name()
            )));
        };
        if spec.loans.is_some() {
            return Err(self.unsupported(
                "a loan kernel over device buffers: on OpenCL a loan pool's state words \
                 need fine-grained SVM, which the kernel reads in place (use unified)"
                    .into(),
            ));
        }
        if spec.link.is_some() {
            return Err(self.unsupported(
                "a pipeline stage over device buffers: stages hand replies on in shared \
                 memory (use unified)"
                    .into(),
            ));
        }
        let reservation = self.reserve(true)?;
        // Not chained and without loans: the region stands for the loan pool and the
        // next stage (cuda/ring_kernel.cl's launch contract).
        let args = Args {
            region: Ptr::Mem(mem),
            loan_base: Ptr::Mem(mem),
            loan_words: Ptr::Mem(mem),
            loan_bytes: 0,
            loan_shift: 0,
            next: Ptr::Mem(mem),
            link_flags: 0,
            next_type: 0,
            indirect: Vec::new(),
        };
        // SAFETY: `mem` is a live buffer of this context (the engine downcast above),
        // kept until the kernel has finished (`Rings::Resident`, leaked if it never does).
        let (event, queue, kernel) = unsafe { self.enqueue(handler, &args)? };
        OpenClKernel::start(OpenClKernel {
            device: self.dev.info.name.clone(),
            state: Mutex::new(Some(Running {
                event,
                queue,
                _kernel: kernel,
                _rings: Rings::Resident(engine.clone()),
                _loans: None,
                _link: None,
                _reservation: reservation,
            })),
        })
    }

    /// A launch's result as the runtime takes it, logged once it runs.
    fn launched(
        &self,
        spec: &LaunchSpec,
        placement: &'static str,
        k: Result<OpenClKernel>,
    ) -> gyre_core::Result<Box<dyn KernelInstance>> {
        let k = k.map_err(|e| to_core(&spec.name, e))?;
        tracing::info!(
            kernel = %spec.name,
            device = %self.dev.info.name,
            lanes = self.dev.options.lanes,
            placement,
            "OpenCL ring kernel launched"
        );
        Ok(Box::new(k))
    }

    fn unsupported(&self, reason: String) -> Error {
        Error::Unsupported {
            device: self.dev.info.name.clone(),
            reason,
        }
    }

    /// A compute unit for one more ring kernel (`kernel.rs`).
    fn reserve(&self, copying: bool) -> Result<Reservation> {
        Reservation::take(
            &self.dev.occupancy,
            &self.dev.info.name,
            self.dev.info.compute_units,
            self.dev.info.kind == DeviceKind::Cpu,
            copying,
        )
    }

    /// Builds (or finds) the ring kernel with `handler`, sets `args` and enqueues one
    /// work-group on a queue of its own; [`OpenClKernel::start`] flushes it.
    ///
    /// # Safety
    ///
    /// Every pointer of `args` is memory of this device's context that the kernel may
    /// read and write (SVM or a buffer) and that outlives the kernel.
    unsafe fn enqueue(
        &self,
        handler: Handler<'_>,
        args: &Args,
    ) -> Result<(opencl3::event::Event, CommandQueue, Kernel)> {
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
        let lanes = [self.dev.options.lanes as usize];
        // SAFETY: the caller's contract for the pointers; the scalars are plain values of
        // the kernel's parameter types (ulong, uint); the exec info lists
        // `indirect.len()` SVM pointers read from a live Vec. One group: global == local.
        let event = unsafe {
            args.region.set(&kernel, 0, "the shared region")?;
            args.loan_base.set(&kernel, 1, "the loan pool")?;
            args.loan_words
                .set(&kernel, 2, "the loan pool's state words")?;
            check(
                "clSetKernelArg",
                kernel.set_arg(3, &args.loan_bytes),
                || ", the loan pool's size".into(),
            )?;
            check(
                "clSetKernelArg",
                kernel.set_arg(4, &args.loan_shift),
                || ", the loan pool's block shift".into(),
            )?;
            args.next
                .set(&kernel, 5, "the next pipeline stage's region")?;
            check(
                "clSetKernelArg",
                kernel.set_arg(6, &args.link_flags),
                || ", the pipeline link's flags".into(),
            )?;
            check("clSetKernelArg", kernel.set_arg(7, &args.next_type), || {
                ", the next pipeline stage's message type".into()
            })?;
            if !args.indirect.is_empty() {
                check(
                    "clSetKernelExecInfo",
                    opencl3::kernel::set_kernel_exec_info(
                        kernel.get(),
                        opencl3::kernel::CL_KERNEL_EXEC_INFO_SVM_PTRS,
                        core::mem::size_of_val(args.indirect.as_slice()),
                        args.indirect.as_ptr().cast::<c_void>(),
                    )
                    .map_err(opencl3::error_codes::ClError),
                    || format!(", the {} regions a link table names", args.indirect.len()),
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
        Ok((event, queue, kernel))
    }
}

/// A pointer argument of the ring kernel: SVM, or a buffer.
#[derive(Clone, Copy)]
enum Ptr {
    Svm(*const c_void),
    Mem(cl_mem),
}

impl Ptr {
    /// Sets kernel argument `index` (`what` names it in the error).
    ///
    /// # Safety
    ///
    /// As [`OpenClBackend::enqueue`]'s: memory of the kernel's context.
    unsafe fn set(self, kernel: &Kernel, index: u32, what: &'static str) -> Result<()> {
        // SAFETY: the caller's contract; a buffer argument is the cl_mem handle by value.
        unsafe {
            match self {
                Ptr::Svm(p) => check(
                    "clSetKernelArgSVMPointer",
                    kernel.set_arg_svm_pointer(index, p),
                    || format!(", {what}"),
                ),
                Ptr::Mem(m) => check("clSetKernelArg", kernel.set_arg(index, &m), || {
                    format!(", {what} (a buffer)")
                }),
            }
        }
    }
}

/// The ring kernel's arguments (`cuda/ring_kernel.cl`'s launch contract).
struct Args {
    region: Ptr,
    loan_base: Ptr,
    loan_words: Ptr,
    loan_bytes: u64,
    loan_shift: u32,
    next: Ptr,
    link_flags: u32,
    next_type: u32,
    /// SVM pointers the kernel reaches through a link table.
    indirect: Vec<*mut c_void>,
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
    /// Refused on a device without zero copy.
    fn loan_allocator(&self) -> gyre_core::Result<Arc<dyn gyre_core::memory::RawAllocator>> {
        if let Some(why) = &self.dev.zero_copy_refusal {
            return Err(gyre_core::Error::StrategyUnsupported {
                backend: "opencl",
                strategy: "a loan pool",
                reason: format!(
                    "its state words need fine-grained SVM with atomics, which the kernel \
                     reads in place: {why}"
                ),
            });
        }
        Ok(Arc::new(SvmAllocator::new(
            &self.dev.ctx,
            &self.dev.registry,
        )))
    }

    /// Fine-grained SVM with atomics ([`SvmRegion`]) where zero copy works. On a device
    /// without it, host memory: the host's mirror under a copy strategy (the only
    /// strategy such a device runs; a zero-copy launch over it is refused).
    fn alloc_region(&self, bytes: usize) -> gyre_core::Result<Box<dyn RegionMemory>> {
        if self.dev.zero_copy_refusal.is_some() {
            return Ok(Box::new(gyre_core::region::HostMemory::zeroed(bytes)?));
        }
        let mem = SvmRegion::zeroed(&self.dev.ctx, &self.dev.registry, bytes)
            .map_err(|e| to_core("(shared region)", e))?;
        Ok(Box::new(mem))
    }

    /// An OpenCL buffer of the region's size behind a [`ClCopyEngine`] (zeroed, with an
    /// in-order copy queue of its own), for every device the ring kernel runs on.
    fn alloc_resident(
        &self,
        g: &Geometry,
        _host_timeout_ms: u32,
    ) -> gyre_core::Result<Arc<dyn CopyEngine>> {
        let engine = ClCopyEngine::new(
            &self.dev.ctx,
            &self.dev.info.name,
            self.dev.info.kind != DeviceKind::Cpu,
            SharedRegion::bytes_for(g),
        )
        .map_err(|e| to_core("(device-resident region)", e))?;
        Ok(Arc::new(engine))
    }

    fn launch_resident(
        &self,
        mem: Arc<dyn CopyEngine>,
        spec: &LaunchSpec,
    ) -> gyre_core::Result<Box<dyn KernelInstance>> {
        spec.idle.validate()?;
        self.launched(
            spec,
            "device buffers",
            self.launch_resident_inner(&mem, spec),
        )
    }

    /// Its kernels address only its fine-grained SVM allocated with `CL_MEM_SVM_ATOMICS`.
    /// Their compare-and-swaps and fences must also reach the host's: a CPU device's do
    /// (the host's cores), another device's only with the all-SVM-devices scope for
    /// both atomics and fences (`GYRE_CL_FENCE_SCOPE`; a by-id target's prefix advance
    /// is a store, a fence, then a scan of the other producers' slots).
    fn host_atomics(&self) -> bool {
        let i = &self.dev.info;
        if self.dev.zero_copy_refusal.is_some() {
            return false;
        }
        i.kind == crate::DeviceKind::Cpu
            || (i.atomic_scope == crate::Scope::AllSvmDevices
                && i.fence_scope == crate::Scope::AllSvmDevices)
    }

    /// `host` itself (SVM is one address for host and device), if it is the base of SVM
    /// of this device's context; otherwise refused (host memory of another backend, SVM
    /// of another context).
    fn device_address(&self, host: core::ptr::NonNull<u8>) -> gyre_core::Result<u64> {
        if self.dev.zero_copy_refusal.is_none()
            && self.dev.registry.contains(host.as_ptr() as usize)
        {
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
        self.launched(spec, "zero copy", self.launch_inner(&region, spec))
    }
}
