//! The errors of the OpenCL backend.

use opencl3::error_codes::ClError;

/// What went wrong in the OpenCL backend. Every variant names what failed and carries what
/// a user needs to act on it: the OpenCL call, the error name and code, the sizes, the
/// compiler's log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The OpenCL ICD loader (`libOpenCL.so.1`) could not be loaded.
    #[error(
        "OpenCL library not found: libOpenCL.so.1 (the ICD loader) could not be loaded; \
         install an ICD loader and a driver (Debian: ocl-icd-libopencl1 and \
         pocl-opencl-icd for the CPU), or set OPENCL_DYLIB_PATH"
    )]
    LibraryMissing,
    /// The loader works but no OpenCL platform (driver) is installed.
    #[error(
        "no OpenCL platform: the ICD loader found no driver (check /etc/OpenCL/vendors; \
         Debian: pocl-opencl-icd for the CPU)"
    )]
    NoPlatform,
    /// The requested platform index does not exist.
    #[error("no OpenCL platform {index}: {count} platform(s) present")]
    PlatformIndex {
        /// The index asked for.
        index: usize,
        /// How many platforms there are.
        count: usize,
    },
    /// The requested device index does not exist on the platform.
    #[error("no OpenCL device {index} on platform {platform} ({name}): it has {count} device(s)")]
    DeviceIndex {
        /// The platform index.
        platform: usize,
        /// The platform's name.
        name: String,
        /// The device index asked for.
        index: usize,
        /// How many devices the platform has.
        count: usize,
    },
    /// An OpenCL call failed.
    #[error("{op} failed: {name} (code {code}){detail}")]
    Cl {
        /// The OpenCL function (`clSVMAlloc`).
        op: &'static str,
        /// The error name (`CL_OUT_OF_RESOURCES`).
        name: &'static str,
        /// The error code.
        code: i32,
        /// What it was asked for (sizes), starting with `", "`, or empty.
        detail: String,
    },
    /// The device cannot share the rings with the kernel in place (zero copy, the
    /// `Unified` strategy): its kernels run over device buffers and the bridge's copy
    /// strategies instead. Returned where zero copy was asked for.
    #[error(
        "OpenCL device {device} cannot share rings with its kernels (zero copy, the unified \
         strategy): no {missing}; use a copy strategy (sync, async, dma-polling), which \
         keeps the rings in device buffers"
    )]
    NeedsCopyStrategy {
        /// The device's name.
        device: String,
        /// What it lacks (`fine-grained buffer SVM`, `SVM atomics`, ...).
        missing: &'static str,
    },
    /// An environment variable has a value this backend does not understand.
    #[error("{name}={value:?}: expected {expected}")]
    Env {
        /// The variable (`GYRE_OPENCL_SVM`).
        name: &'static str,
        /// Its value.
        value: String,
        /// What it may be.
        expected: &'static str,
    },
    /// The device lacks something else the ring kernel needs.
    #[error("OpenCL device {device} cannot run gyre's ring kernel: {reason}")]
    Unsupported {
        /// The device's name.
        device: String,
        /// What is missing.
        reason: String,
    },
    /// The OpenCL compiler rejected the ring kernel: `log` is the build log.
    #[error("building the OpenCL ring kernel with {handler} for {device} failed: {name} (code {code}); options `{options}`; build log:\n{log}")]
    Build {
        /// The handler's name (`handlers/echo.h`).
        handler: String,
        /// The device's name.
        device: String,
        /// The error name (`CL_BUILD_PROGRAM_FAILURE`).
        name: &'static str,
        /// The error code.
        code: i32,
        /// The build options.
        options: String,
        /// The compiler's log.
        log: String,
    },
    /// A kernel was launched with a host (closure) handler.
    #[error(
        "OpenCL kernels need a device handler: kernel '{kernel}' has a Rust closure handler; \
         use a built-in kernel (echo, vec_scale, reduce_sum), KernelSpec::opencl_handler, or \
         the cpu backend"
    )]
    NeedsDeviceHandler {
        /// The kernel's name.
        kernel: String,
    },
    /// Every compute unit already runs a persistent work-group: another would never start.
    #[error(
        "OpenCL device {device} already runs {running} persistent ring kernel(s) on its \
         {compute_units} compute unit(s){}: another would wait for a free unit forever; \
         shut one down first",
        if *kept_for_copies { ", one of them kept free for the copies of kernels over device buffers" } else { "" }
    )]
    DeviceFull {
        /// The device's name.
        device: String,
        /// Ring kernels running on it from this process.
        running: usize,
        /// Its compute units.
        compute_units: u32,
        /// Whether one unit is kept free for copies (a CPU device while a kernel over
        /// device buffers runs or would run): a 1-unit CPU device runs none.
        kept_for_copies: bool,
    },
    /// The device clock could not be calibrated.
    #[error("calibrating the OpenCL device clock of {device} failed: {reason}")]
    Clock {
        /// The device's name.
        device: String,
        /// Why.
        reason: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The name of an OpenCL error code (`CL_OUT_OF_RESOURCES`), `UNKNOWN_ERROR` when unknown.
///
/// # Examples
///
/// ```
/// assert_eq!(gyre_opencl::error::cl_error_name(-5), "CL_OUT_OF_RESOURCES");
/// ```
pub fn cl_error_name(code: i32) -> &'static str {
    opencl3::error_codes::error_text(code)
}

/// Maps an OpenCL result to [`Error::Cl`] naming `op`, with `detail` (evaluated only on
/// failure) describing what was asked for. The dynamic loader's own codes become
/// [`Error::LibraryMissing`].
pub(crate) fn check<T>(
    op: &'static str,
    r: std::result::Result<T, ClError>,
    detail: impl FnOnce() -> String,
) -> Result<T> {
    r.map_err(|e| cl_error(op, e.0, detail()))
}

/// [`Error::Cl`] for code `code` of `op` (or [`Error::LibraryMissing`]).
pub(crate) fn cl_error(op: &'static str, code: i32, detail: String) -> Error {
    if code == opencl3::error_codes::DLOPEN_RUNTIME_LOAD_FAILED {
        return Error::LibraryMissing;
    }
    Error::Cl {
        op,
        name: cl_error_name(code),
        code,
        detail,
    }
}
