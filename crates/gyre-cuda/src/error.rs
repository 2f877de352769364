//! The errors of the CUDA backend.

/// What went wrong in the CUDA backend. Every variant names what failed and carries what
/// a user needs to act on it (paths searched, raw CUDA error codes, NVRTC's log, sizes).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The NVRTC library could not be loaded (no CUDA toolkit, no wheel, wrong path).
    #[error(
        "NVRTC not found: {detail}; install a CUDA 12 or 13 toolkit (CUDA_HOME) or the \
         PyPI wheel (scripts/setup-cuda-venv.sh, then GYRE_CUDA_VENV=<venv>)"
    )]
    NvrtcNotFound {
        /// What was tried.
        detail: String,
    },
    /// A part of the CUDA compile toolchain (libnvrtc, its builtins, ptxas) is missing.
    #[error("{what} not found; looked in: {searched}")]
    ToolchainNotFound {
        /// The missing part.
        what: &'static str,
        /// Where it was looked for.
        searched: String,
    },
    /// An NVRTC call other than the compilation itself failed.
    #[error("NVRTC {op} failed: {name} (code {code})")]
    Nvrtc {
        /// The NVRTC function.
        op: &'static str,
        /// NVRTC's name for the result (`NVRTC_ERROR_INVALID_OPTION`).
        name: String,
        /// The raw `nvrtcResult`.
        code: i32,
    },
    /// NVRTC rejected a program: `log` is NVRTC's log (errors with file and line).
    #[error("NVRTC {nvrtc} failed to compile {name} for {target} ({result}):\n{log}")]
    Compile {
        /// The program name (for a ring kernel, it names the handler).
        name: String,
        /// The target (`sm_90` for a CUBIN, `compute_90` for PTX).
        target: String,
        /// NVRTC's version, `12.8`.
        nvrtc: String,
        /// NVRTC's result name.
        result: String,
        /// NVRTC's log.
        log: String,
    },
    /// Work on the device did not finish within its deadline (a stream that was to be
    /// idle, a kernel that was to answer): nothing waits past it.
    #[error("{what} did not finish within {after:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The deadline.
        after: std::time::Duration,
    },
    /// An input cannot be passed to NVRTC or the driver (a NUL byte, a path that is not
    /// UTF-8, memory of another backend).
    #[error("invalid input {what}: {reason}")]
    InvalidInput {
        /// Which input.
        what: String,
        /// Why.
        reason: &'static str,
    },
    /// The ring kernel needs sm_70 or newer, and NVRTC must support the architecture.
    #[error("unsupported GPU architecture sm_{arch}: {why}")]
    UnsupportedArch {
        /// The architecture (`80` for sm_80).
        arch: u32,
        /// Why (too old for the ring kernel, or unknown to this NVRTC).
        why: String,
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
    /// The driver library lacks a function gyre needs (a driver older than gyre's minimum).
    #[error("the CUDA driver library lacks {symbol}: gyre needs a 12.2 or newer driver")]
    DriverSymbol {
        /// The symbol and the loader's message.
        symbol: String,
    },
    /// `cuInit` failed for a reason other than "no device".
    #[error("cuInit failed: {name} (code {code})")]
    InitFailed {
        /// The raw CUDA error code.
        code: i32,
        /// The CUDA error name (`CUDA_ERROR_...`).
        name: String,
    },
    /// A device ordinal beyond the devices the driver reports.
    #[error("no CUDA device {ordinal}: the driver reports {count} (ordinals 0..{count})")]
    DeviceOutOfRange {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
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
    /// Neither a CUBIN nor PTX from this NVRTC loads on this driver.
    #[error(
        "the driver (CUDA {driver}) cannot load code from NVRTC {nvrtc} for sm_{arch}: \
         CUBIN: {cubin}; PTX: {ptx}. Use an NVRTC no newer than the driver (e.g. the \
         toolkit that came with it, or pip install 'nvidia-cuda-nvrtc=={driver}.*')"
    )]
    CodeNotLoadable {
        /// The driver's CUDA version, `13.0`.
        driver: String,
        /// NVRTC's version, `13.5`.
        nvrtc: String,
        /// The device's architecture.
        arch: u32,
        /// Why the CUBIN route failed.
        cubin: String,
        /// Why the PTX route failed.
        ptx: String,
    },
    /// A CUDA driver call failed.
    #[error("{op} failed: {name} (code {code}){detail}")]
    Driver {
        /// The driver function (`cuMemHostAlloc`).
        op: &'static str,
        /// The CUDA error name (`CUDA_ERROR_OUT_OF_MEMORY`).
        name: String,
        /// The raw CUDA error code, as the driver returned it.
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
    /// A kernel was launched with a host (closure) handler, which the device cannot run.
    #[error(
        "CUDA kernels need a device handler: kernel '{kernel}' has a Rust closure handler; \
         use a built-in kernel (echo, vec_scale, reduce_sum), KernelSpec::cuda_handler, or \
         the cpu backend"
    )]
    NeedsDeviceHandler {
        /// The kernel's name.
        kernel: String,
    },
    /// Every stream gyre may hold on this context is held: a persistent kernel on a
    /// stream that shares a hardware queue with other work would starve that work.
    #[error(
        "no CUDA stream left for {purpose}: {held} of {limit} held (CUDA_DEVICE_MAX_CONNECTIONS \
         = {connections}; each ring kernel holds one, each kernel under a copy strategy a \
         second); shut a kernel down, or raise CUDA_DEVICE_MAX_CONNECTIONS before the \
         process first uses CUDA"
    )]
    StreamsExhausted {
        /// What needed a stream.
        purpose: &'static str,
        /// Streams held.
        held: usize,
        /// Streams gyre may hold.
        limit: usize,
        /// The hardware queue count in effect.
        connections: u32,
    },
    /// More ring kernels than the device can keep resident at once.
    #[error(
        "cannot launch another ring kernel on {device}: {running} running, at most {limit} \
         ({why})"
    )]
    TooManyKernels {
        /// The device.
        device: String,
        /// Ring kernels running on it.
        running: usize,
        /// The most that can run at once.
        limit: usize,
        /// What bounds it.
        why: String,
    },
    /// A driver call that can wait for every kernel of its context to finish (a module
    /// load, a host registration) was refused because persistent ring kernels run on
    /// it: they never finish, so the call could wait forever.
    #[error(
        "{op} for {what} refused: {running} ring kernel(s) run on this context, and it can \
         wait for them to finish, which they never do; load handlers before the first \
         launch (launch or prepare them first) or while no ring kernel runs"
    )]
    WouldWait {
        /// The driver call (`cuModuleLoadDataEx`).
        op: &'static str,
        /// What it was for.
        what: String,
        /// Ring kernels running on the context.
        running: usize,
    },
    /// A kernel fault left the context unusable (a sticky error) and it cannot be reset
    /// while something still holds it.
    #[error(
        "the CUDA context of device {ordinal} is unusable after {name} (code {code}); it is \
         reset once every kernel and buffer of it is dropped ({holders} holders remain)"
    )]
    ContextPoisoned {
        /// The device.
        ordinal: i32,
        /// The sticky error's name.
        name: String,
        /// Its raw code.
        code: i32,
        /// Other holders of the context (kernels, buffers, runtimes).
        holders: usize,
    },
    /// A sticky error left the device unusable in this process: its primary context was
    /// reset and still fails. NVIDIA documents that a sticky error needs a new process.
    #[error(
        "CUDA device {ordinal} cannot be used again in this process after {name} (code \
         {code}): a reset of its primary context did not clear the error; restart the \
         process"
    )]
    ProcessRestartRequired {
        /// The device.
        ordinal: i32,
        /// The sticky error's raw code.
        code: i32,
        /// Its name.
        name: String,
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
    /// A failed driver call: `op`, the raw code with its name, and `detail` (sizes).
    pub fn driver(op: &'static str, code: i32, detail: String) -> Self {
        Error::Driver {
            op,
            name: crate::result::error_name(code),
            code,
            detail,
        }
    }

    /// The raw CUDA driver error code, when this is a driver call's failure.
    pub fn cuda_code(&self) -> Option<i32> {
        match self {
            Error::Driver { code, .. } | Error::InitFailed { code, .. } => Some(*code),
            Error::ContextPoisoned { code, .. } | Error::ProcessRestartRequired { code, .. } => {
                Some(*code)
            }
            _ => None,
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
