//! The errors of the CUDA backend.

/// What went wrong in the CUDA backend. Every variant names what failed and carries what
/// a user needs to act on it (paths searched, the NVRTC log).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The NVRTC library could not be loaded (no CUDA toolkit, no venv, wrong path).
    #[error(
        "NVRTC not found: {detail}; run scripts/setup-cuda-venv.sh (and set GYRE_CUDA_VENV \
         if the venv is elsewhere) or install a CUDA 12 toolkit"
    )]
    NvrtcNotFound {
        /// What was tried.
        detail: String,
    },
    /// A part of the CUDA compile toolchain (CCCL headers, libnvrtc, ptxas) is missing.
    #[error("{what} not found; looked in: {searched}")]
    ToolchainNotFound {
        /// The missing part.
        what: &'static str,
        /// Where it was looked for.
        searched: String,
    },
    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC {op} failed: {result}")]
    Nvrtc {
        /// The NVRTC function.
        op: &'static str,
        /// NVRTC's result code.
        result: String,
    },
    /// NVRTC rejected a program: `log` is NVRTC's log (errors with file and line).
    #[error("NVRTC failed to compile {name} for compute_{arch} ({result}):\n{log}")]
    Compile {
        /// The program name (for a ring kernel, it names the handler).
        name: String,
        /// The virtual architecture it was compiled for.
        arch: u32,
        /// NVRTC's result code.
        result: String,
        /// NVRTC's log.
        log: String,
    },
    /// An input cannot be passed to NVRTC (a NUL byte, a path that is not UTF-8).
    #[error("invalid NVRTC input {what}: {reason}")]
    InvalidInput {
        /// Which input.
        what: String,
        /// Why.
        reason: &'static str,
    },
    /// The ring kernel needs sm_70 or newer (system-scope acquire/release, `__nanosleep`).
    #[error("unsupported GPU architecture sm_{arch}: gyre's ring kernel needs sm_70 or newer")]
    UnsupportedArch {
        /// The requested architecture (`80` for sm_80).
        arch: u32,
    },
    /// The CUDA driver library (`libcuda`) could not be loaded: no NVIDIA driver here.
    #[error(
        "CUDA driver library not found (tried {}): no NVIDIA driver is installed, or \
         libcuda is not on the loader's search path", searched.join(", ")
    )]
    LibraryMissing {
        /// The library names tried.
        searched: Vec<String>,
    },
    /// `cuInit` failed for a reason other than "no device".
    #[error("cuInit failed: {name} (code {code})")]
    InitFailed {
        /// The CUDA error code.
        code: i32,
        /// The CUDA error name (`CUDA_ERROR_...`).
        name: String,
    },
    /// The driver loads but reports no CUDA device.
    #[error("no CUDA device: the driver (version {driver}) reports none")]
    NoDevice {
        /// The driver's version (`12080` for 12.8), 0 when unknown.
        driver: i32,
    },
    /// The driver is older than gyre needs.
    #[error(
        "CUDA driver {}.{} is too old: gyre needs {}.{} or newer ({why})",
        found / 1000, found % 1000 / 10, need / 1000, need % 1000 / 10
    )]
    DriverTooOld {
        /// The driver's version (`12020` for 12.2).
        found: i32,
        /// The oldest version that works.
        need: i32,
        /// What needs it.
        why: &'static str,
    },
    /// A CUDA driver call failed.
    #[error("{op} failed: {name} (code {code}){detail}")]
    Driver {
        /// The driver function (`cuMemHostAlloc`).
        op: &'static str,
        /// The CUDA error name (`CUDA_ERROR_OUT_OF_MEMORY`).
        name: String,
        /// The CUDA error code.
        code: i32,
        /// What it was asked for (sizes), starting with `", "`, or empty.
        detail: String,
    },
    /// The device lacks a capability an operation needs.
    #[error("{op} needs {capability}, which device {device} does not have")]
    Unsupported {
        /// What was attempted.
        op: &'static str,
        /// The missing capability (a device attribute).
        capability: &'static str,
        /// The device's name.
        device: String,
    },
    /// A kernel was launched with a host (closure) handler: CUDA kernels need a device
    /// handler (a built-in; user CUDA handler source is a later feature).
    #[error(
        "CUDA kernels need a device handler: kernel '{kernel}' has a CPU closure handler; \
         use a built-in kernel (echo, vec_scale, reduce_sum) or the cpu backend"
    )]
    NeedsDeviceHandler {
        /// The kernel's name.
        kernel: String,
    },
    /// A copy between a buffer and a host slice of another length.
    #[error("{op}: buffer of {buffer} values, host slice of {host}")]
    LengthMismatch {
        /// The copy.
        op: &'static str,
        /// The buffer's length.
        buffer: usize,
        /// The host slice's length.
        host: usize,
    },
    /// A size computation overflowed (`len * size_of::<T>()`).
    #[error("{op}: {len} elements of {elem} bytes overflow usize")]
    SizeOverflow {
        /// What was attempted.
        op: &'static str,
        /// Requested element count.
        len: usize,
        /// Element size.
        elem: usize,
    },
}

impl Error {
    /// A failed driver call: `op`, the error's name and code, and `detail` (sizes).
    pub fn driver(op: &'static str, r: cudarc::driver::sys::CUresult, detail: String) -> Self {
        Error::Driver {
            op,
            name: format!("{r:?}"),
            code: r as i32,
            detail,
        }
    }
}

/// Checks a raw driver result: `Ok` on `CUDA_SUCCESS`, else [`Error::Driver`] naming `op`
/// and `detail` (built only on failure).
pub(crate) fn check(
    op: &'static str,
    r: cudarc::driver::sys::CUresult,
    detail: impl FnOnce() -> String,
) -> Result<()> {
    match r {
        cudarc::driver::sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(Error::driver(op, e, detail())),
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
