//! [`Runtime`] and its builder: which backend each kernel runs on, its memory plan, and
//! the launch.

use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::bridge::{BridgeAgent, RingBufferBridge};
use gyre_core::plan::{self, MemoryPlan, Overrides};
use gyre_core::strategy::TransferStrategy;
use gyre_core::visibility::{MemoryVisibility, PlatformProbe};
use gyre_core::{Error, Result, SharedRegion};

use crate::backend::Backend;
use crate::cuda;
use crate::kernel::{Kernel, Started};
use crate::lifecycle::{Place, StageStart};
use crate::opencl;
use crate::spec::KernelSpec;

/// Builds a [`Runtime`].
#[derive(Debug, Clone, Default)]
pub struct RuntimeBuilder {
    backend: Backend,
    auto_device: Option<Backend>,
    cpu_lanes: Option<u32>,
    cost_model: Option<std::time::Duration>,
    memory: Overrides,
}

impl RuntimeBuilder {
    /// Selects the backend (default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Under [`Backend::Auto`], the device backend to use for kernels a device can run
    /// ([`Backend::Cuda`] or [`Backend::OpenCl`], any OpenCL device, CPU devices included),
    /// instead of detecting one. Kernels only the host can run still go to the CPU
    /// backend. Ignored for any other backend.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder()
    ///     .backend(Backend::Auto)
    ///     .auto_device(Backend::OpenCl { platform: 0, device: 0 })
    ///     .build()?;
    /// assert_eq!(rt.backend(), Backend::OpenCl { platform: 0, device: 0 });
    /// let k = rt.launch(KernelSpec::from_fn("inc", |x: u32| x + 1))?;
    /// assert_eq!(k.backend(), Backend::Cpu);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn auto_device(mut self, device: Backend) -> Self {
        self.auto_device = Some(device);
        self
    }

    /// The lanes the CPU backend emulates for built-in kernels and lane-parallel portable
    /// handlers (`#[gyre::handler(lanes)]`), 1..=256 (default: `GYRE_CPU_LANES`, else 1).
    /// Every multi-lane path then runs on the CPU, each phase lane by lane; one lane is
    /// the fastest. An invalid value fails [`Self::build`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).cpu_lanes(32).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.call_blocking(7)?, 7);
    /// assert!(gyre::Runtime::builder().cpu_lanes(0).build().is_err());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn cpu_lanes(mut self, lanes: u32) -> Self {
        self.cpu_lanes = Some(lanes);
        self
    }

    /// Runs the CPU backend's kernels under the cost model of a PCIe GPU: zero-copy
    /// rings become checked rings read in waves (`docs/protocol.md`, "Checked slots"),
    /// each kernel counts its read waves, fences and remote stores
    /// ([`Kernel::device_cost`](crate::Kernel::device_cost)), and every wave and fence
    /// costs `emulate` (a busy wait; zero: count only). `gyre bench --backend cpu
    /// --emulate-remote-ns N` measures with it. For benchmarks and tests of the fast
    /// path: it makes the CPU backend slower, never faster.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = gyre::Runtime::builder()
    ///     .backend(gyre::Backend::Cpu)
    ///     .cost_model(Duration::ZERO)
    ///     .build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// assert_eq!(k.call_blocking(7)?, 7);
    /// let cost = k.device_cost().expect("counted under the cost model");
    /// assert!(cost.batches >= 1 && cost.waves >= cost.batches);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn cost_model(mut self, emulate: std::time::Duration) -> Self {
        self.cost_model = Some(emulate);
        self
    }

    fn cpu_opts(&self) -> CpuOpts {
        CpuOpts {
            lanes: self.cpu_lanes,
            cost: self.cost_model,
        }
    }

    /// Overrides the detected memory visibility (and so the default transfer strategy).
    /// Takes precedence over `GYRE_MEMORY_VISIBILITY`, which is then not read; see
    /// [`Runtime::memory_plan`].
    pub fn memory_visibility(mut self, visibility: MemoryVisibility) -> Self {
        self.memory.visibility = Some(visibility);
        self
    }

    /// Overrides the transfer strategy. Takes precedence over `GYRE_TRANSFER_STRATEGY`
    /// and `GYRE_POLL_INTERVAL_US`, which are then not read at all (an invalid value there
    /// does not fail [`Self::build`]). A strategy the platform cannot honour makes
    /// [`Self::build`] fail with the reason; it is never changed.
    pub fn transfer_strategy(mut self, strategy: TransferStrategy) -> Self {
        self.memory.strategy = Some(strategy);
        self
    }

    /// Resolves the backend and the memory plan (builder > environment > detection) and
    /// returns the runtime.
    ///
    /// # Errors
    ///
    /// [`Error::BackendUnavailable`] (its [`source`](std::error::Error::source) is the
    /// backend's own error); [`Error::InvalidArgument`] for an invalid
    /// `GYRE_MEMORY_VISIBILITY`, `GYRE_TRANSFER_STRATEGY` or `GYRE_POLL_INTERVAL_US`
    /// whose setting the builder leaves open (listing the valid values), an invalid poll
    /// interval, or a strategy the platform cannot honour (with the reason).
    pub fn build(self) -> Result<Runtime> {
        // An invalid lane count fails whatever the backend (it may run no CPU kernel).
        if let Some(l) = self.cpu_lanes {
            gyre_cpu::CpuBackend::with_lanes(l)?;
        }
        let (resolved, imp): (Backend, Arc<dyn gyre_core::Backend>) =
            match (self.backend, self.auto_device) {
                (Backend::Auto, Some(Backend::Auto)) => {
                    return Err(Error::InvalidArgument {
                        name: "auto_device",
                        value: "auto".into(),
                        reason: "must be a backend: cpu, cuda or opencl[:P[:D]]",
                    })
                }
                (Backend::Auto, Some(device)) => (device, open(device, self.cpu_opts())?),
                (Backend::Auto, None) => detect_device(cpu(self.cpu_opts())?),
                (explicit, _) => (explicit, open(explicit, self.cpu_opts())?),
            };
        // Builder > environment: a variable whose setting the builder decides is not even
        // read, so an invalid value there cannot fail this build.
        let env = Overrides::from_env_beneath(&self.memory)?;
        let primary = Target::new(resolved, imp, &env, &self.memory)?;
        // Under Auto with a device backend, the host runs what the device cannot.
        let host = if self.backend == Backend::Auto && resolved != Backend::Cpu {
            Some(Target::new(
                Backend::Cpu,
                cpu(self.cpu_opts())?,
                &env,
                &self.memory,
            )?)
        } else {
            None
        };
        Ok(Runtime {
            requested: self.backend,
            primary,
            host,
        })
    }
}

/// What the builder says of the CPU backend.
#[derive(Debug, Clone, Copy)]
struct CpuOpts {
    lanes: Option<u32>,
    cost: Option<std::time::Duration>,
}

/// The CPU backend, with `lanes` emulated lanes if given, under the cost model if asked.
fn cpu(o: CpuOpts) -> Result<Arc<dyn gyre_core::Backend>> {
    let b = match o.lanes {
        Some(l) => gyre_cpu::CpuBackend::with_lanes(l)?,
        None => gyre_cpu::CpuBackend::new(),
    };
    Ok(Arc::new(match o.cost {
        Some(e) => b.cost_model(e),
        None => b,
    }))
}

/// Opens an explicitly named backend.
fn open(backend: Backend, lanes: CpuOpts) -> Result<Arc<dyn gyre_core::Backend>> {
    Ok(match backend {
        Backend::Auto => return Ok(detect_device(cpu(lanes)?).1),
        Backend::Cpu => cpu(lanes)?,
        Backend::Cuda { device } => {
            cuda::backend(device).map_err(|source| Error::BackendUnavailable {
                backend: "cuda",
                source,
            })?
        }
        Backend::OpenCl { platform, device } => {
            opencl::backend(platform, device).map_err(|source| Error::BackendUnavailable {
                backend: "opencl",
                source,
            })?
        }
    })
}

/// Auto's device backend: CUDA, else an OpenCL GPU, else `cpu`.
fn detect_device(cpu: Arc<dyn gyre_core::Backend>) -> (Backend, Arc<dyn gyre_core::Backend>) {
    match cuda::backend(0) {
        Ok(b) => {
            tracing::info!(
                backend = "cuda",
                device = 0,
                "Backend::Auto: device kernels run on cuda"
            );
            (Backend::Cuda { device: 0 }, b)
        }
        Err(no_cuda) => match opencl::auto_gpu() {
            Ok((platform, device, b)) => {
                tracing::info!(backend = "opencl", platform, device, cuda = %no_cuda, "Backend::Auto: cuda unavailable, device kernels run on an OpenCL GPU");
                (Backend::OpenCl { platform, device }, b)
            }
            Err(no_gpu) => {
                tracing::info!(backend = "cpu", cuda = %no_cuda, opencl = %no_gpu, "Backend::Auto: no GPU backend, every kernel runs on cpu");
                (Backend::Cpu, cpu)
            }
        },
    }
}

/// One backend a runtime launches on, with its memory plan.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) backend: Backend,
    pub(crate) imp: Arc<dyn gyre_core::Backend>,
    pub(crate) plan: Arc<MemoryPlan>,
}

impl Target {
    /// Resolves the memory plan of `backend` (builder > environment > detection).
    fn new(
        backend: Backend,
        imp: Arc<dyn gyre_core::Backend>,
        env: &Overrides,
        builder: &Overrides,
    ) -> Result<Self> {
        let mut probe = PlatformProbe::from_host();
        match backend {
            Backend::Cuda { device } => probe.device = cuda::device_attributes(device),
            Backend::OpenCl { platform, device } => {
                probe.device = opencl::device_attributes(platform, device);
            }
            _ => {}
        }
        let mut plan = plan::plan(probe, env, builder)?;
        if backend != Backend::Cpu && plan.needs_confirmation() {
            // Device attributes claim coherent mapped memory: confirm it with a running
            // kernel before trusting it with zero-copy rings (WSL2-like setups fail here).
            plan = match imp.confirm_system_scope(VISIBILITY_CHECK_TIMEOUT) {
                Ok(Ok(rtt)) => {
                    plan.reasons.push(format!(
                        "confirmed by a mapped-memory round trip with a running kernel ({rtt:?})"
                    ));
                    plan
                }
                Ok(Err(why)) => {
                    tracing::warn!(reason = %why, "mapped memory failed the empirical check: downgrading to device-scope");
                    plan.downgrade(&why)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the mapped-memory check could not run: downgrading to device-scope");
                    plan.downgrade(&format!("the check could not run ({e})"))
                }
            };
        }
        tracing::info!(
            backend = backend.name(),
            visibility = %plan.visibility,
            visibility_source = %plan.visibility_source,
            strategy = %format_args!("{:#}", plan.strategy),
            strategy_source = %plan.source,
            reasons = ?plan.reasons,
            "memory plan"
        );
        Ok(Self {
            backend,
            imp,
            plan: Arc::new(plan),
        })
    }
}

/// How long the empirical mapped-memory check waits for a running kernel's answer.
const VISIBILITY_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Launches ring kernels on one backend.
///
/// # Examples
///
/// ```
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// assert_eq!(rt.backend_name(), "cpu");
/// # Ok::<(), gyre::Error>(())
/// ```
#[derive(Clone)]
pub struct Runtime {
    requested: Backend,
    /// The explicit backend, or Auto's device backend (the CPU one when none was found).
    primary: Target,
    /// Under Auto with a device backend: the CPU backend, for kernels only it can run.
    host: Option<Target>,
}

impl core::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runtime")
            .field("requested", &self.requested)
            .field("resolved", &self.primary.backend)
            .field("host", &self.host.as_ref().map(|h| h.backend))
            .field("visibility", &self.primary.plan.visibility)
            .field("strategy", &self.primary.plan.strategy)
            .finish()
    }
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The backend in use (never `Auto`): the explicit one, or under [`Backend::Auto`]
    /// the device backend found (the CPU backend when there is none). Under Auto a kernel
    /// with a Rust handler runs on the CPU backend even when this is a GPU: see
    /// [`Runtime::backend_for`] and [`Kernel::backend`].
    pub fn backend(&self) -> Backend {
        self.primary.backend
    }

    /// Name of the backend in use ([`Runtime::backend`]).
    pub fn backend_name(&self) -> &'static str {
        self.primary.imp.name()
    }

    /// The backend [`Runtime::launch`] would run `spec` on: under [`Backend::Auto`] the
    /// device backend found if it can run the spec's handler, else the CPU backend; with
    /// an explicit backend, that backend.
    ///
    /// # Errors
    ///
    /// [`Error::HandlerUnsupported`] when the explicit backend cannot run the spec's
    /// handler (a Rust handler on CUDA or OpenCL without device code for it), naming the
    /// kernel, the backend and the constructors that would run it.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Auto).build()?;
    /// assert_eq!(rt.backend_for(&KernelSpec::from_fn("inc", |x: u8| x + 1))?, Backend::Cpu);
    /// assert_eq!(rt.backend_for(&KernelSpec::<u8, u8>::echo())?, rt.backend());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn backend_for<Req, Resp>(&self, spec: &KernelSpec<Req, Resp>) -> Result<Backend> {
        self.target_for(spec).map(|t| t.backend)
    }

    /// Where loan kernel `spec` runs: its backend, strategy and backend implementation.
    /// CUDA runs a loan kernel's device handler; under [`Backend::Auto`] a spec with no
    /// CUDA source that would go to CUDA runs its Rust closure on the CPU backend instead.
    pub(crate) fn loan_target<Req, Resp>(
        &self,
        spec: &KernelSpec<Req, Resp>,
    ) -> Result<(Backend, TransferStrategy, Arc<dyn gyre_core::Backend>)> {
        let mut t = self.target_for(spec)?;
        // CUDA runs a loan kernel's device handler; a closure alone runs on the host.
        if matches!(t.backend, Backend::Cuda { .. }) && spec.cuda_source.is_none() {
            if let Some(host) = &self.host {
                t = host;
            }
        }
        Ok((t.backend, t.plan.strategy, t.imp.clone()))
    }

    /// Where every one of `specs` runs: the primary backend if it runs them all, else the
    /// CPU backend under [`Backend::Auto`] (it runs every handler), else the first refusal.
    pub(crate) fn target_for_all<Req, Resp>(
        &self,
        specs: &[KernelSpec<Req, Resp>],
    ) -> Result<&Target> {
        let device = self.primary.backend.device();
        match (specs.iter().try_for_each(|s| s.runs_on(device)), &self.host) {
            (Ok(()), _) => Ok(&self.primary),
            (Err(_), Some(host)) => Ok(host),
            (Err(e), None) => Err(e),
        }
    }

    fn target_for<Req, Resp>(&self, spec: &KernelSpec<Req, Resp>) -> Result<&Target> {
        match (spec.runs_on(self.primary.backend.device()), &self.host) {
            (Ok(()), _) => Ok(&self.primary),
            (Err(_), Some(host)) => Ok(host),
            (Err(e), None) => Err(e),
        }
    }

    /// The epoch a kernel on [`Runtime::backend`] runs by default (see
    /// [`KernelSpec::epoch`]): a quarter of the device's kernel execution timeout where it
    /// reports one (a GPU driving a display under Windows or WSL2), `None` (one launch for
    /// the kernel's whole life) elsewhere. `gyre doctor` shows it.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// assert_eq!(rt.default_epoch(), None);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn default_epoch(&self) -> Option<std::time::Duration> {
        self.primary.imp.kernel_time_limit().map(|l| l / 4)
    }

    /// The memory visibility and transfer strategy chosen at build, what detection looked
    /// at, who decided (detection, environment or builder) and why.
    ///
    /// This is the plan of [`Runtime::backend`]. Under [`Backend::Auto`] with a GPU, a
    /// kernel that runs on the CPU backend instead (a Rust handler) uses the CPU
    /// backend's own plan; [`Kernel::transfer_strategy`] says what each kernel uses.
    ///
    /// Every kernel on this backend uses the plan's strategy: `unified` shares the
    /// rings with the kernel; `sync`, `async` and `dma-polling` keep them device-resident
    /// behind a bridge (on the CPU backend, a separate allocation and an emulated copy
    /// engine). A backend that cannot place rings that way fails the launch with
    /// [`Error::StrategyUnsupported`].
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let plan = rt.memory_plan();
    /// assert!(plan.probe.device.is_none());
    /// assert!(!plan.reasons.is_empty());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.primary.plan
    }

    /// Validates `spec` and builds its program (compiles a device handler, and on CUDA
    /// loads it into the device's context) without launching anything, so that a later
    /// [`Runtime::launch`] of it builds nothing.
    ///
    /// On CUDA a module load next to a running ring kernel can wait for that kernel to
    /// end, which it never does, so gyre refuses it (`gyre_cuda::Error::WouldWait`,
    /// inside [`Error::Launch`]). To run kernels with *different* device handlers side by
    /// side, prepare each before launching the first. On other backends this builds what
    /// the backend builds, or nothing.
    ///
    /// # Errors
    ///
    /// As [`Runtime::launch`]'s checks of the spec, and the build's errors
    /// ([`Error::Launch`] with the compiler's log).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let spec = gyre::KernelSpec::<u64, u64>::echo().capacity(64);
    /// rt.prepare(&spec)?;
    /// let k = rt.launch(spec)?;
    /// assert_eq!(k.call_blocking(7)?, 7);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn prepare<Req: Pod, Resp: Pod>(&self, spec: &KernelSpec<Req, Resp>) -> Result<()> {
        let target = self.target_for(spec)?;
        Checked::of(spec, target)?;
        target.imp.prepare(&spec.launch_spec())
    }
    /// A kernel's launch ([`Runtime::launch`] of a [`KernelSpec`]).
    ///
    /// `loans`: a loan kernel's pool (`crate::loan`), which every launch on its rings
    /// serves; the runtime's state, never the spec's.
    pub(crate) fn launch_kernel<Req: Pod, Resp: Pod>(
        &self,
        spec: KernelSpec<Req, Resp>,
        loans: Option<Arc<gyre_core::loan::LoanArena>>,
    ) -> Result<Kernel<Req, Resp>> {
        let ends = crate::keep_alive::ends_completed();
        match self.launch_once(spec.clone(), loans.clone()) {
            Err(Error::Launch { ref source, .. })
                if (cuda::no_room(source) || opencl::no_room(source))
                    && crate::keep_alive::wait_for_ending(ends, crate::inner::UNATTENDED_STOP) =>
            {
                tracing::debug!(kernel = %spec.name, "launch refused while kernels were ending: trying again");
                self.launch_once(spec, loans)
            }
            r => r,
        }
    }

    fn launch_once<Req: Pod, Resp: Pod>(
        &self,
        spec: KernelSpec<Req, Resp>,
        loans: Option<Arc<gyre_core::loan::LoanArena>>,
    ) -> Result<Kernel<Req, Resp>> {
        let target = self.target_for(&spec)?;
        let Checked {
            geometry: g,
            epoch_us,
            host_timeout_ms,
        } = Checked::of(&spec, target)?;
        let strategy = target.plan.strategy;
        let imp = &target.imp;
        let _span = tracing::info_span!(
            "gyre_launch",
            kernel = %spec.name,
            backend = imp.name(),
            strategy = strategy.name()
        )
        .entered();
        let mut launch = spec.launch_spec();
        launch.loans = loans;
        launch.export = spec.export_writer()?;
        // One doorbell for every launch on these rings (a parking kernel's successors).
        launch.doorbell = Some(Arc::new(gyre_core::doorbell::Doorbell::new()));
        // One reply bell likewise: a kernel on a host thread over these very rings wakes
        // their waiters itself (`gyre_core::channel::bell`); under a copy strategy the
        // bridge brings its replies, and nobody rings.
        if !strategy.copies() {
            launch.reply_bell = Some(Arc::new(gyre_core::channel::bell::ReplyBell::new()));
        }
        // The host's rings: shared with the kernel (zero copy), or the mirror of its
        // device-resident rings that the bridge keeps in step.
        let mem = imp.alloc_region(SharedRegion::bytes_for(&g))?;
        let region = Arc::new(SharedRegion::new(mem, g, host_timeout_ms)?);
        region
            .control()
            .epoch_us
            .store(epoch_us, std::sync::atomic::Ordering::Release);
        if !strategy.copies() && imp.checked_slots() {
            // The kernel reads these rings as remote memory, in waves: checked slots
            // (before the channel exists, which reads the flag, and before the launch).
            region.control().host_flags.fetch_or(
                gyre_abi::host_flags::CHECKED,
                std::sync::atomic::Ordering::Release,
            );
        }
        let (instance, transfer, place) = if strategy.copies() {
            let device = imp.alloc_resident(&g, host_timeout_ms)?;
            let bridge = Arc::new(RingBufferBridge::new(region.clone(), device.clone())?);
            // Starting the agent writes the device's control block (the first push).
            let agent = BridgeAgent::start(bridge, strategy, &spec.name)?;
            (
                imp.launch_resident(device.clone(), &launch)?,
                Some(agent),
                Place::Resident(device),
            )
        } else {
            (
                imp.launch(region.clone(), &launch)?,
                None,
                Place::Shared(region.clone()),
            )
        };
        tracing::info!(
            capacity = g.capacity(),
            slot_size = g.slot_size(),
            batch = g.batch(),
            epoch_us,
            "kernel launched"
        );
        Kernel::start(
            Started {
                region: region.clone(),
                stages: vec![StageStart {
                    name: spec.name.clone(),
                    imp: imp.clone(),
                    place,
                    region,
                    instance: Arc::from(instance),
                    launched: launch,
                    epoch_us,
                    restart: spec.restart,
                    counts: Arc::default(),
                }],
                transfer,
                backend: target.backend,
                chain: None,
            },
            &spec,
        )
    }
}

/// What [`Runtime::launch`] checks of a spec before it allocates anything, and what it
/// derives: every value named in its `# Errors`.
pub(crate) struct Checked {
    pub(crate) geometry: gyre_core::ring::Geometry,
    pub(crate) epoch_us: u32,
    pub(crate) host_timeout_ms: u32,
}

impl Checked {
    /// Checks `spec` for a launch on `target`.
    pub(crate) fn of<Req, Resp>(spec: &KernelSpec<Req, Resp>, target: &Target) -> Result<Self> {
        let g = spec.geometry()?;
        for (role, type_name, size) in [
            (
                "request",
                core::any::type_name::<Req>(),
                core::mem::size_of::<Req>(),
            ),
            (
                "reply",
                core::any::type_name::<Resp>(),
                core::mem::size_of::<Resp>(),
            ),
        ] {
            if size > g.payload() {
                return Err(Error::TypeTooLarge {
                    role,
                    type_name,
                    size,
                    payload: g.payload(),
                });
            }
        }
        spec.idle.validate()?;
        spec.host_idle.validate()?;
        spec.validate_watchdog()?;
        spec.validate_restart()?;
        let epoch_us = spec.epoch_us(target.imp.kernel_time_limit())?;
        if spec.async_spin > std::time::Duration::from_millis(10) {
            return Err(Error::InvalidArgument {
                name: "async_spin",
                value: format!("{:?}", spec.async_spin),
                reason: "must be at most 10ms: it holds a tokio worker",
            });
        }
        if spec.export_interval < std::time::Duration::from_millis(1) {
            return Err(Error::InvalidArgument {
                name: "export_interval",
                value: format!("{:?}", spec.export_interval),
                reason: "must be at least 1ms",
            });
        }
        let host_timeout_ms =
            u32::try_from(spec.host_timeout.as_millis()).map_err(|_| Error::InvalidArgument {
                name: "host_timeout",
                value: format!("{:?}", spec.host_timeout),
                reason: "must be below 2^32 ms",
            })?;
        Ok(Self {
            geometry: g,
            epoch_us,
            host_timeout_ms,
        })
    }
}

#[cfg(test)]
mod memory_plan_tests {
    use super::*;
    use gyre_core::plan::Source;

    fn env_is_clean() -> bool {
        [
            plan::ENV_MEMORY_VISIBILITY,
            plan::ENV_TRANSFER_STRATEGY,
            plan::ENV_POLL_INTERVAL_US,
        ]
        .iter()
        .all(|v| std::env::var_os(v).is_none())
    }

    #[test]
    fn cpu_backend_detects_system_scope_and_unified() {
        if !env_is_clean() {
            return; // a GYRE_* override is set for this run; other tests cover it
        }
        let rt = Runtime::builder().backend(Backend::Cpu).build().unwrap();
        let p = rt.memory_plan();
        assert_eq!(p.probe.device, None);
        assert_eq!(p.detected, MemoryVisibility::SystemScope);
        assert_eq!(p.strategy, TransferStrategy::Unified);
        assert_eq!(
            (p.visibility_source, p.source),
            (Source::Detected, Source::Detected)
        );
    }

    #[test]
    fn builder_overrides_win() {
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .memory_visibility(MemoryVisibility::ExplicitDma)
            .build()
            .unwrap();
        let p = rt.memory_plan();
        assert_eq!(p.visibility, MemoryVisibility::ExplicitDma);
        assert_eq!(p.visibility_source, Source::Builder);
        if p.source == Source::Builder {
            assert_eq!(p.strategy, TransferStrategy::Async);
        }
        let s = TransferStrategy::dma_polling(std::time::Duration::from_micros(100)).unwrap();
        let rt = Runtime::builder()
            .backend(Backend::Cpu)
            .transfer_strategy(s)
            .build()
            .unwrap();
        assert_eq!(rt.memory_plan().strategy, s);
        assert_eq!(rt.memory_plan().source, Source::Builder);
    }

    #[test]
    fn invalid_builder_strategy_is_refused() {
        let bad = TransferStrategy::DmaPolling {
            poll_interval: std::time::Duration::ZERO,
        };
        assert!(matches!(
            Runtime::builder()
                .backend(Backend::Cpu)
                .transfer_strategy(bad)
                .build(),
            Err(Error::InvalidArgument {
                name: "poll_interval",
                ..
            })
        ));
    }
}
