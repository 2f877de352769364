//! Where ring kernels run ([`Backend`]), what this machine offers ([`backends`]), and the
//! CUDA driver's environment ([`prepare_cuda_environment`]).

use gyre_core::{Cause, Error, Result};

use crate::cuda;
use crate::features::not_built;
use crate::opencl;
use crate::spec::Device;
#[allow(unused_imports)] // rustdoc links
use crate::{Kernel, KernelSpec, Runtime, RuntimeBuilder};

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
    /// several runtimes ([`Runtime::launch_across`]) spreads one service over devices.
    ///
    /// [`KernelPool`]: crate::pool::KernelPool
    /// [`Runtime::launch_across`]: crate::Runtime::launch_across
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

#[cfg(test)]
mod cuda_selection_tests {
    use super::*;
    use crate::Runtime;

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
