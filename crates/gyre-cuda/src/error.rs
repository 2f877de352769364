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
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
