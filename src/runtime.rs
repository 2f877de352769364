//! [`Runtime`], its builder, and backend selection.

use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::ring::Geometry;
use gyre_core::{Error, LaunchSpec, Result, SharedRegion};

use crate::kernel::Kernel;
use crate::spec::KernelSpec;

/// Where ring kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backend {
    /// The best backend present. Until the GPU backends land this is [`Backend::Cpu`].
    #[default]
    Auto,
    /// A host thread per kernel (always available).
    Cpu,
}

impl Backend {
    /// The name used on the command line and in logs.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Cpu => "cpu",
        }
    }
}

impl core::fmt::Display for Backend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::str::FromStr for Backend {
    type Err = Error;
    /// Parses a backend name, case-insensitively. A known backend that this build does
    /// not include is [`Error::BackendUnavailable`]; anything else is
    /// [`Error::InvalidArgument`] listing the valid names.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "cpu" => Ok(Backend::Cpu),
            other => match backends().into_iter().find(|b| b.name == other) {
                Some(BackendInfo {
                    name,
                    available: Err(reason),
                    ..
                }) => Err(Error::BackendUnavailable {
                    backend: name,
                    reason,
                }),
                _ => Err(Error::InvalidArgument {
                    name: "backend",
                    value: s.to_owned(),
                    reason: "valid backends: auto, cpu",
                }),
            },
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
    vec![
        BackendInfo {
            name: "cpu",
            compiled: true,
            available: Ok(()),
        },
        BackendInfo {
            name: "cuda",
            compiled: false,
            available: Err("not in this build: the CUDA backend is not implemented yet".into()),
        },
        BackendInfo {
            name: "opencl",
            compiled: false,
            available: Err("not in this build: the OpenCL backend is not implemented yet".into()),
        },
    ]
}

/// Builds a [`Runtime`].
#[derive(Debug, Clone, Default)]
pub struct RuntimeBuilder {
    backend: Backend,
}

impl RuntimeBuilder {
    /// Selects the backend (default [`Backend::Auto`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Resolves the backend and returns the runtime.
    pub fn build(self) -> Result<Runtime> {
        let (resolved, imp): (Backend, Arc<dyn gyre_core::Backend>) = match self.backend {
            Backend::Auto => {
                tracing::info!(
                    backend = "cpu",
                    "Backend::Auto: no GPU backend in this build, using cpu"
                );
                (Backend::Cpu, Arc::new(gyre_cpu::CpuBackend::new()))
            }
            Backend::Cpu => (Backend::Cpu, Arc::new(gyre_cpu::CpuBackend::new())),
        };
        Ok(Runtime {
            requested: self.backend,
            resolved,
            imp,
        })
    }
}

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
    resolved: Backend,
    imp: Arc<dyn gyre_core::Backend>,
}

impl core::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Runtime")
            .field("requested", &self.requested)
            .field("resolved", &self.resolved)
            .finish()
    }
}

impl Runtime {
    /// A builder with defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The backend in use (never `Auto`).
    pub fn backend(&self) -> Backend {
        self.resolved
    }

    /// Name of the backend in use.
    pub fn backend_name(&self) -> &'static str {
        self.imp.name()
    }

    /// Validates `spec`, allocates its shared region, launches the kernel and starts its
    /// completion driver.
    ///
    /// Errors name the bad value: capacity, slot size, batch size, a message type larger
    /// than the payload, an idle duration, or what the backend could not do.
    pub fn launch<Req: Pod, Resp: Pod>(
        &self,
        spec: KernelSpec<Req, Resp>,
    ) -> Result<Kernel<Req, Resp>> {
        let batch = spec.batch.unwrap_or(32.min(spec.capacity));
        let g = Geometry::new(spec.capacity, spec.slot_size, batch)?;
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
        if spec.async_spin > std::time::Duration::from_millis(10) {
            return Err(Error::InvalidArgument {
                name: "async_spin",
                value: format!("{:?}", spec.async_spin),
                reason: "must be at most 10ms: it holds a tokio worker",
            });
        }
        let host_timeout_ms =
            u32::try_from(spec.host_timeout.as_millis()).map_err(|_| Error::InvalidArgument {
                name: "host_timeout",
                value: format!("{:?}", spec.host_timeout),
                reason: "must be below 2^32 ms",
            })?;
        let mem = self.imp.alloc_region(SharedRegion::bytes_for(&g))?;
        let region = Arc::new(SharedRegion::new(mem, g, host_timeout_ms)?);
        let _span =
            tracing::info_span!("gyre_launch", kernel = %spec.name, backend = self.imp.name())
                .entered();
        let launch = LaunchSpec {
            name: spec.name.clone(),
            handler: spec.handler.clone(),
            builtin: spec.builtin,
            idle: spec.idle,
        };
        let instance = self.imp.launch(region.clone(), &launch)?;
        tracing::info!(
            capacity = g.capacity(),
            slot_size = g.slot_size(),
            batch = g.batch(),
            "kernel launched"
        );
        Kernel::start(region, instance, &spec)
    }
}
