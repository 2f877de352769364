//! [`Runtime`], its builder, and backend selection.

use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::bridge::{BridgeAgent, RingBufferBridge};
use gyre_core::plan::{self, MemoryPlan, Overrides};
use gyre_core::strategy::TransferStrategy;
use gyre_core::visibility::{MemoryVisibility, PlatformProbe};
use gyre_core::{Cause, Error, Result, SharedRegion};

use crate::features::not_built;
use crate::kernel::{Kernel, Started};
use crate::lifecycle::Place;
use crate::opencl;
use crate::spec::{Device, KernelSpec};

/// Where ring kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backend {
    /// Decided per kernel, at launch. The runtime looks for a GPU when it is built: CUDA
    /// where a driver, a device and a context are available (and the `cuda` feature is
    /// on), else the first OpenCL **GPU** that offers fine-grained SVM with atomics (the
    /// `opencl` feature; never an OpenCL CPU device, which would only be a slower
    /// [`Backend::Cpu`]); the reasons are logged with `tracing`. Each launch then picks
    /// the best backend that can run that spec: the GPU for built-ins and for specs with
    /// device code for it ([`KernelSpec::cuda_handler`], [`KernelSpec::opencl_handler`],
    /// [`KernelSpec::device_handler`]), the CPU backend for Rust handlers
    /// ([`KernelSpec::from_fn`], `try_from_fn`, `raw`) and everything when no GPU was
    /// found. [`Kernel::backend`] says where a kernel went;
    /// [`RuntimeBuilder::auto_device`] names the device backend instead of detecting one.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    /// let rt = Runtime::builder().backend(Backend::Auto).build()?;
    /// // A Rust closure runs on the CPU backend on every machine...
    /// let k = rt.launch(KernelSpec::from_fn("inc", |x: u32| x + 1))?;
    /// assert_eq!(k.backend(), Backend::Cpu);
    /// // ...a built-in on the GPU when there is one.
    /// let e = rt.launch(KernelSpec::<u32, u32>::echo())?;
    /// assert_eq!(e.backend(), rt.backend());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    #[default]
    Auto,
    /// A host thread per kernel (always available); runs every [`KernelSpec`].
    Cpu,
    /// A persistent kernel on CUDA device `device`, the driver's ordinal as `gyre doctor`
    /// lists them (the `cuda` feature). Building a runtime on a machine without a usable
    /// driver and device (or with no device of that ordinal) is
    /// [`Error::BackendUnavailable`] naming what is missing. Runs built-ins and specs with
    /// a CUDA source; launching a Rust handler without one is
    /// [`Error::HandlerUnsupported`]. One runtime per device; a [`KernelPool`] over
    /// several runtimes ([`KernelPool::launch_across`]) spreads one service over devices.
    ///
    /// [`KernelPool`]: crate::KernelPool
    /// [`KernelPool::launch_across`]: crate::KernelPool::launch_across
    ///
    /// # Examples
    ///
    /// ```
    /// # if cfg!(feature = "cuda") {
    /// let b: gyre::Backend = "cuda:1".parse()?;
    /// assert_eq!(b, gyre::Backend::Cuda { device: 1 });
    /// assert_eq!("cuda".parse::<gyre::Backend>()?, gyre::Backend::Cuda { device: 0 });
    /// assert_eq!(b.to_string(), "cuda:1");
    /// # }
    /// # Ok::<(), gyre::Error>(())
    /// ```
    Cuda {
        /// Device ordinal (`cuDeviceGet`).
        device: usize,
    },
    /// A persistent work-group on OpenCL device `device` of platform `platform`, indices
    /// as `gyre doctor` lists them (the `opencl` feature). The rings live in fine-grained
    /// SVM with atomics. A missing OpenCL library, platform or device, or a device without
    /// fine-grained SVM, is [`Error::BackendUnavailable`] naming what is missing. Runs
    /// built-ins and specs with an OpenCL C source; launching a Rust handler without one
    /// is [`Error::HandlerUnsupported`].
    ///
    /// # Examples
    ///
    /// ```
    /// let b: gyre::Backend = "opencl:0:1".parse()?;
    /// assert_eq!(b, gyre::Backend::OpenCl { platform: 0, device: 1 });
    /// assert_eq!(b.to_string(), "opencl:0:1");
    /// # Ok::<(), gyre::Error>(())
    /// ```
    OpenCl {
        /// Platform index (the ICD loader's order).
        platform: usize,
        /// Device index within the platform.
        device: usize,
    },
}

impl Backend {
    /// The kind of device that runs this backend's handlers.
    pub(crate) fn device(&self) -> Device {
        match self {
            Backend::Cuda { .. } => Device::Cuda,
            Backend::OpenCl { .. } => Device::OpenCl,
            Backend::Auto | Backend::Cpu => Device::Cpu,
        }
    }

    /// The name used on the command line and in logs (`opencl` for every OpenCL device;
    /// `Display` adds the indices).
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
            Backend::Cuda { .. } => "cuda",
            Backend::OpenCl { .. } => "opencl",
        }
    }
}

impl core::fmt::Display for Backend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Backend::OpenCl { platform, device } => write!(f, "opencl:{platform}:{device}"),
            Backend::Cuda { device } => write!(f, "cuda:{device}"),
            _ => f.write_str(self.name()),
        }
    }
}

/// Parses the ordinal of `cuda` or `cuda:D` (missing: 0).
fn parse_cuda(s: &str) -> Option<Backend> {
    let rest = s.strip_prefix("cuda")?;
    let device = match rest {
        "" => 0,
        r => r.strip_prefix(':')?.parse().ok()?,
    };
    Some(Backend::Cuda { device })
}

/// Parses the indices of `opencl`, `opencl:P` or `opencl:P:D` (missing ones are 0).
fn parse_opencl(s: &str) -> Option<Backend> {
    let rest = s.strip_prefix("opencl")?;
    let mut idx = [0usize; 2];
    if !rest.is_empty() {
        let parts: Vec<&str> = rest.strip_prefix(':')?.split(':').collect();
        if parts.len() > 2 {
            return None;
        }
        for (slot, p) in idx.iter_mut().zip(&parts) {
            *slot = p.parse().ok()?;
        }
    }
    Some(Backend::OpenCl {
        platform: idx[0],
        device: idx[1],
    })
}

impl core::str::FromStr for Backend {
    type Err = Error;
    /// Parses a backend name, case-insensitively. Parsing never looks at the machine: a
    /// backend that this build includes parses whether or not this machine can run it
    /// (building the runtime says why not). A known backend that this build does not
    /// include is [`Error::BackendUnavailable`]; anything else is
    /// [`Error::InvalidArgument`] listing the valid names.
    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason| Error::InvalidArgument {
            name: "backend",
            value: s.to_owned(),
            reason,
        };
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "cpu" => Ok(Backend::Cpu),
            o if o == "cuda" || o.starts_with("cuda:") => {
                if !cfg!(feature = "cuda") {
                    return Err(Error::BackendUnavailable {
                        backend: "cuda",
                        source: Cause::msg(not_built("cuda")),
                    });
                }
                parse_cuda(o).ok_or_else(|| invalid("expected cuda or cuda:D"))
            }
            o if o == "opencl" || o.starts_with("opencl:") => {
                if !cfg!(feature = "opencl") {
                    return Err(Error::BackendUnavailable {
                        backend: "opencl",
                        source: Cause::msg(not_built("opencl")),
                    });
                }
                parse_opencl(o).ok_or_else(|| invalid("expected opencl, opencl:P or opencl:P:D"))
            }
            _ => Err(invalid(
                "valid backends: auto, cpu, cuda[:D], opencl[:P[:D]]",
            )),
        }
    }
}

/// What `gyre doctor` reports for one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// Backend name.
    pub name: &'static str,
    /// Whether support is compiled into this build.
    pub compiled: bool,
    /// `Ok` when usable here, else why not.
    pub available: std::result::Result<(), String>,
    /// What the backend found on this machine (for CUDA: the NVRTC toolchain, and where
    /// a driver is, its version, the device, its attributes and the driver environment),
    /// as label / value pairs; possibly non-empty when unavailable.
    pub details: Vec<(&'static str, String)>,
}

/// Every backend gyre knows, with whether it is compiled in and usable on this machine.
///
/// # Examples
///
/// ```
/// let b = gyre::backends();
/// assert!(b.iter().any(|i| i.name == "cpu" && i.available.is_ok()));
/// ```
pub fn backends() -> Vec<BackendInfo> {
    let (cuda_available, cuda_details) = cuda::facts();
    let opencl_facts = opencl::facts();
    vec![
        BackendInfo {
            name: "cpu",
            compiled: true,
            available: Ok(()),
            details: Vec::new(),
        },
        BackendInfo {
            name: "cuda",
            compiled: cfg!(feature = "cuda"),
            available: cuda_available,
            details: cuda_details,
        },
        BackendInfo {
            name: "opencl",
            compiled: cfg!(feature = "opencl"),
            available: opencl_facts.as_ref().map(|_| ()).map_err(Clone::clone),
            details: opencl_facts.unwrap_or_default(),
        },
    ]
}

/// Sets the CUDA driver's environment for gyre's persistent kernels, if it is not set
/// already: `CUDA_MODULE_LOADING=EAGER` (a kernel loaded lazily, at its first launch,
/// waits for the device to be idle, which never happens while a ring kernel runs) and
/// `CUDA_DEVICE_MAX_CONNECTIONS=32` (work that shares a hardware queue with a ring kernel
/// never runs). The driver reads both once, at its initialisation, and changing the
/// environment is only sound while the process has one thread: call this first thing in
/// `main`. gyre tries again at its first CUDA probe, and leaves the environment alone
/// (saying so in `gyre doctor`) if the process has more threads by then. Does nothing
/// without a CUDA driver, or without the `cuda` feature.
///
/// # Examples
///
/// ```
/// // First thing in `main`, before anything starts a thread:
/// gyre::prepare_cuda_environment();
/// let rt = gyre::Runtime::builder().build()?;
/// # Ok::<(), gyre::Error>(())
/// ```
pub fn prepare_cuda_environment() {
    #[cfg(feature = "cuda")]
    {
        let _ = gyre_cuda::probe::prepare_environment();
    }
}

/// The CUDA backend, or why not, in this build.
mod cuda {
    use std::sync::Arc;

    /// Whether CUDA is usable here (no context is made), and what was found: the
    /// compile toolchain (even without a driver) and the driver and device.
    #[cfg(feature = "cuda")]
    pub(super) fn facts() -> (Result<(), String>, Vec<(&'static str, String)>) {
        let mut facts = Vec::new();
        match gyre_cuda::Nvrtc::discover() {
            Ok((n, tc)) => {
                facts.push(("NVRTC", format!("{} ({})", n.version_string(), n.path())));
                facts.push(("toolchain", tc.origin.clone()));
                match n.ring_kernel_archs() {
                    Ok(a) => facts.push(("NVRTC archs (sm_70+)", format!("{a:?}"))),
                    Err(e) => facts.push(("NVRTC archs (sm_70+)", e.to_string())),
                }
            }
            Err(e) => facts.push(("NVRTC", e.to_string())),
        }
        let i = match gyre_cuda::CudaBackend::check() {
            Ok(i) => i,
            Err(e) => return (Err(e.to_string()), facts),
        };
        let d = &i.device;
        let yes = |b: bool| if b { "yes" } else { "no" }.to_owned();
        facts.extend([
            ("driver", i.driver_version_string()),
            ("devices", i.device_count.to_string()),
        ]);
        // Every device, as `Backend::Cuda { device }` names them, and whether gyre can use
        // it; then device 0's attributes (the device `Backend::Auto` uses).
        for dev in &i.devices {
            let ordinal = usize::try_from(dev.ordinal).unwrap_or(usize::MAX);
            let verdict = match gyre_cuda::CudaBackend::check_device(ordinal) {
                Ok(_) => "usable".to_owned(),
                Err(e) => format!("not usable: {e}"),
            };
            facts.push((
                "device",
                format!(
                    "{} {} (sm_{}, {} SMs, {} MiB); {verdict}",
                    dev.ordinal,
                    dev.name,
                    dev.arch(),
                    dev.multiprocessors,
                    dev.total_mem >> 20
                ),
            ));
        }
        // Peer-to-peer between every ordered pair (with two GPUs or more): what a chain
        // across devices could use; it runs through mapped pinned host memory today.
        match gyre_cuda::p2p::links() {
            Ok(links) => facts.extend(links.into_iter().map(|l| {
                (
                    "peer",
                    format!(
                        "{} -> {}: peer access {}, native atomics {}, rank {}",
                        l.from,
                        l.to,
                        yes(l.can_access_peer && l.access_supported),
                        yes(l.native_atomics),
                        l.performance_rank
                    ),
                )
            })),
            Err(e) => facts.push(("peer", e.to_string())),
        }
        facts.extend([
            ("attributes of", format!("device 0 ({})", d.name)),
            (
                "compute capability",
                format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
            ),
            ("multiprocessors", d.multiprocessors.to_string()),
            ("memory", format!("{} MiB", d.total_mem >> 20)),
            ("kernel exec timeout", yes(d.kernel_exec_timeout)),
            ("can map host memory", yes(d.can_map_host_memory)),
            ("unified addressing", yes(d.unified_addressing)),
            (
                "concurrent managed access",
                yes(d.concurrent_managed_access),
            ),
            ("pageable memory access", yes(d.pageable_memory_access)),
            ("host native atomics", yes(d.host_native_atomic_supported)),
            ("CUDA_MODULE_LOADING", i.env.module_loading.clone()),
            (
                "CUDA_DEVICE_MAX_CONNECTIONS",
                i.env.max_connections.to_string(),
            ),
            (
                "set by gyre",
                match (&i.env.not_set, i.env.set_by_gyre.is_empty()) {
                    (Some(why), _) => format!("nothing: {why}"),
                    (None, true) => "nothing (already set)".to_owned(),
                    (None, false) => i.env.set_by_gyre.join(", "),
                },
            ),
        ]);
        if i.env.initialized_before_gyre {
            facts.push((
                "note",
                "CUDA was initialised before gyre: the variables above may not be in effect"
                    .to_owned(),
            ));
        }
        (Ok(()), facts)
    }

    /// Device `ordinal`'s memory attributes, where the CUDA backend is usable on it.
    #[cfg(feature = "cuda")]
    pub(super) fn device_attributes(
        ordinal: usize,
    ) -> Option<gyre_core::visibility::DeviceAttributes> {
        let d = gyre_cuda::CudaBackend::check_device(ordinal).ok()?.device;
        Some(gyre_core::visibility::DeviceAttributes {
            can_map_host_memory: d.can_map_host_memory,
            unified_addressing: d.unified_addressing,
            concurrent_managed_access: d.concurrent_managed_access,
            pageable_memory_access: d.pageable_memory_access,
            host_native_atomics: d.host_native_atomic_supported,
        })
    }

    #[cfg(not(feature = "cuda"))]
    pub(super) fn device_attributes(
        _ordinal: usize,
    ) -> Option<gyre_core::visibility::DeviceAttributes> {
        None
    }

    /// A CUDA backend on device `ordinal`, or why not.
    #[cfg(feature = "cuda")]
    pub(super) fn backend(ordinal: usize) -> Result<Arc<dyn gyre_core::Backend>, gyre_core::Cause> {
        match gyre_cuda::CudaBackend::on_device(ordinal) {
            Ok(b) => Ok(Arc::new(b)),
            Err(e) => Err(gyre_core::Cause::new(e)),
        }
    }

    #[cfg(not(feature = "cuda"))]
    pub(super) fn facts() -> (Result<(), String>, Vec<(&'static str, String)>) {
        (Err(crate::features::not_built("cuda")), Vec::new())
    }

    #[cfg(not(feature = "cuda"))]
    pub(super) fn backend(
        _ordinal: usize,
    ) -> Result<Arc<dyn gyre_core::Backend>, gyre_core::Cause> {
        Err(gyre_core::Cause::msg(crate::features::not_built("cuda")))
    }
}

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

    /// Validates `spec`, allocates its shared region, launches the kernel and starts its
    /// completion driver.
    ///
    /// # Errors
    ///
    /// [`Error::HandlerUnsupported`] when the backend cannot run the spec's handler (see
    /// [`Runtime::backend_for`]). Each of the others names the bad value:
    /// [`Error::InvalidCapacity`], [`Error::InvalidSlotSize`],
    /// [`Error::InvalidBatchSize`], [`Error::TypeTooLarge`] (a message type larger than
    /// the payload), [`Error::InvalidArgument`] (an idle duration, `async_spin`,
    /// `host_timeout`, `watchdog`, `export_interval`), or what the backend could not do
    /// ([`Error::Launch`], [`Error::Alloc`], [`Error::StrategyUnsupported`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(64))?;
    /// assert_eq!(k.capacity(), 64);
    /// let e = rt.launch(gyre::KernelSpec::<u64, u64>::echo().capacity(100)).unwrap_err();
    /// assert!(matches!(e, gyre::Error::InvalidCapacity { capacity: 100, .. }));
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn launch<Req: Pod, Resp: Pod>(
        &self,
        spec: KernelSpec<Req, Resp>,
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
        launch.export = spec.export_writer()?;
        // One doorbell for every launch on these rings (a parking kernel's successors).
        launch.doorbell = Some(Arc::new(gyre_core::doorbell::Doorbell::new()));
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
                region,
                place,
                imp: imp.clone(),
                instance,
                transfer,
                launched: launch,
                epoch_us,
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
mod cuda_selection_tests {
    use super::*;

    fn cuda_info() -> BackendInfo {
        backends()
            .into_iter()
            .find(|b| b.name == "cuda")
            .expect("cuda is listed")
    }

    #[test]
    fn an_invalid_cpu_lane_count_fails_every_build() {
        for b in [Backend::Cpu, Backend::Auto, Backend::Cuda { device: 0 }] {
            let e = Runtime::builder()
                .backend(b)
                .cpu_lanes(0)
                .build()
                .unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{b}: {e}");
        }
    }

    #[test]
    fn cuda_parses_and_displays() {
        assert_eq!(Backend::Cuda { device: 0 }.to_string(), "cuda:0");
        assert_eq!(Backend::Cuda { device: 3 }.to_string(), "cuda:3");
        if cfg!(feature = "cuda") {
            for (s, device) in [("CUDA", 0), ("cuda:0", 0), ("cuda:7", 7)] {
                assert_eq!(
                    s.parse::<Backend>().ok(),
                    Some(Backend::Cuda { device }),
                    "{s}"
                );
            }
            let b = Backend::Cuda { device: 2 };
            assert_eq!(b.to_string().parse::<Backend>().ok(), Some(b));
            for bad in ["cuda:", "cuda:x", "cuda:1:2", "cuda:-1"] {
                assert!(
                    matches!(bad.parse::<Backend>(), Err(Error::InvalidArgument { .. })),
                    "{bad}"
                );
            }
        } else {
            for s in ["cuda", "cuda:1"] {
                assert!(matches!(
                    s.parse::<Backend>(),
                    Err(Error::BackendUnavailable {
                        backend: "cuda",
                        ..
                    })
                ));
            }
        }
    }

    /// A device ordinal the machine does not have: unavailable, naming it (with or
    /// without a driver here).
    #[test]
    fn a_cuda_device_that_is_not_there_is_unavailable() {
        match Runtime::builder()
            .backend(Backend::Cuda { device: 999 })
            .build()
        {
            Err(Error::BackendUnavailable { backend, source }) => {
                assert_eq!(backend, "cuda");
                if cuda_info().available.is_ok() {
                    let why = source.to_string();
                    assert!(why.contains("no CUDA device 999"), "{why}");
                }
            }
            other => panic!("{other:?}"),
        }
    }

    /// Parsing depends on the build only, never on what this machine has.
    #[test]
    fn unknown_backend_names_are_invalid_arguments() {
        for bad in ["", "gpu", "cudax", "cpu:1", "opencl-1"] {
            assert!(
                matches!(
                    bad.parse::<Backend>(),
                    Err(Error::InvalidArgument {
                        name: "backend",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        assert_eq!("Auto".parse::<Backend>().ok(), Some(Backend::Auto));
        assert_eq!("CPU".parse::<Backend>().ok(), Some(Backend::Cpu));
    }

    #[test]
    fn cuda_build_error_names_what_is_missing() {
        let info = cuda_info();
        assert_eq!(info.compiled, cfg!(feature = "cuda"));
        match (
            Runtime::builder()
                .backend(Backend::Cuda { device: 0 })
                .build(),
            info.available,
        ) {
            (Ok(rt), Ok(())) => assert_eq!(rt.backend_name(), "cuda"),
            (Err(Error::BackendUnavailable { backend, source }), Err(why)) => {
                let reason = source.to_string();
                assert_eq!(backend, "cuda");
                assert_eq!(reason, why);
                assert!(
                    [
                        "library",
                        "device",
                        "driver",
                        "NVRTC",
                        "cuInit",
                        "not in this build"
                    ]
                    .iter()
                    .any(|w| reason.contains(w)),
                    "{reason}"
                );
            }
            (r, a) => panic!("build and backends() disagree: {r:?} vs {a:?}"),
        }
    }

    #[test]
    fn auto_falls_back_to_cpu_without_cuda() {
        let rt = Runtime::builder().backend(Backend::Auto).build().unwrap();
        match cuda_info().available {
            Ok(()) => assert_eq!(rt.backend(), Backend::Cuda { device: 0 }),
            // Without CUDA: an OpenCL GPU if there is one (src/opencl.rs tests that it is
            // never a CPU device), else the CPU backend.
            Err(_) => match rt.backend() {
                Backend::Cpu => assert_eq!(rt.backend_name(), "cpu"),
                Backend::OpenCl { .. } => assert_eq!(rt.backend_name(), "opencl"),
                other => panic!("Backend::Auto resolved to {other}"),
            },
        }
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
