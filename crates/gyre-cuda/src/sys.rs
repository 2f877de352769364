//! The raw FFI layer: the CUDA driver functions gyre calls, resolved from the library
//! cudarc loads, with their results typed as plain integers.
//!
//! cudarc's own function wrappers return its `CUresult` enum, generated from one CUDA
//! version's header (12.8 here). A newer driver can return codes that enum does not have
//! (CUDA 13.0 added several), and receiving a value that is not one of an enum's variants
//! is undefined behaviour in Rust. So gyre resolves each symbol itself from the library
//! that cudarc found ([`cudarc::driver::sys::culib`]), declared with an `int` result
//! ([`CUresult`] here), and converts only in the checked layer ([`crate::result`]). Types
//! passed *into* the driver (device attributes, advice, memory locations) are cudarc's
//! bindgen types: a value gyre picks is always valid.
//!
//! Symbols are the ABI names a CUDA 12 or 13 driver exports (`cuMemAlloc_v2`, ...): a
//! driver keeps every older symbol so that applications built against older toolkits run.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

pub use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdevice_P2PAttribute, CUdevice_attribute, CUdeviceptr, CUevent,
    CUfunction, CUfunction_attribute, CUgraph, CUgraphExec, CUmemLocation, CUmemLocationType,
    CUmem_advise, CUmodule, CUstream, CUstreamCaptureMode,
};

/// A driver result as the driver returns it: `0` is success (`CUDA_SUCCESS`).
pub type CUresult = c_int;

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_NOT_READY`: a stream or event query found work still running.
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
/// `CUDA_ERROR_NO_DEVICE`.
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`: `cuCtxEnablePeerAccess` found it done.
pub const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;

/// `cuStreamCreate` flag: no implicit synchronisation with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `cuEventCreate` flag: no timing (cheaper record/synchronise).
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `cuMemHostAlloc` flags: mapped into the device, usable by every context.
pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
/// See [`CU_MEMHOSTALLOC_PORTABLE`].
pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
/// `cuMemHostRegister` flags, same meaning.
pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
/// See [`CU_MEMHOSTREGISTER_PORTABLE`].
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;
/// `cuMemAllocManaged` flag: accessible from any stream.
pub const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
/// `CU_JIT_ERROR_LOG_BUFFER` (a `CUjit_option`): where the JIT writes its errors.
pub const CU_JIT_ERROR_LOG_BUFFER: c_int = 5;
/// `CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES`: that buffer's size (in), bytes used (out).
pub const CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

/// Declares the driver table: one field per symbol, typed with an `int` result.
macro_rules! driver_table {
    (
        required { $( $name:ident ( $($ty:ty),* $(,)? ); )* }
        optional { $( $oname:ident ( $($oty:ty),* $(,)? ); )* }
    ) => {
        /// The driver functions gyre calls; see the module docs.
        #[allow(non_snake_case)]
        pub struct Driver {
            $( pub $name: unsafe extern "C" fn($($ty),*) -> CUresult, )*
            $( pub $oname: Option<unsafe extern "C" fn($($oty),*) -> CUresult>, )*
        }

        impl Driver {
            /// Resolves every symbol from `lib`; a missing required one is an error
            /// naming it.
            ///
            /// # Safety
            ///
            /// `lib` is the CUDA driver library: each symbol has the declared signature.
            unsafe fn resolve(lib: &'static libloading::Library) -> Result<Self, String> {
                Ok(Self {
                    $( $name: {
                        // SAFETY: the caller's contract: the symbol has this type.
                        let s = unsafe {
                            lib.get::<unsafe extern "C" fn($($ty),*) -> CUresult>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        };
                        *s.map_err(|e| format!("{}: {e}", stringify!($name)))?
                    }, )*
                    $( $oname: {
                        // SAFETY: as above.
                        let s = unsafe {
                            lib.get::<unsafe extern "C" fn($($oty),*) -> CUresult>(
                                concat!(stringify!($oname), "\0").as_bytes(),
                            )
                        };
                        s.ok().map(|s| *s)
                    }, )*
                })
            }
        }
    };
}

driver_table! {
    required {
        cuInit(c_uint);
        cuDriverGetVersion(*mut c_int);
        cuGetErrorName(CUresult, *mut *const c_char);
        cuGetErrorString(CUresult, *mut *const c_char);
        cuDeviceGetCount(*mut c_int);
        cuDeviceGet(*mut CUdevice, c_int);
        cuDeviceGetName(*mut c_char, c_int, CUdevice);
        cuDeviceTotalMem_v2(*mut usize, CUdevice);
        cuDeviceGetAttribute(*mut c_int, CUdevice_attribute, CUdevice);
        cuDeviceCanAccessPeer(*mut c_int, CUdevice, CUdevice);
        cuDeviceGetP2PAttribute(*mut c_int, CUdevice_P2PAttribute, CUdevice, CUdevice);
        cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
        cuDevicePrimaryCtxRelease_v2(CUdevice);
        cuDevicePrimaryCtxReset_v2(CUdevice);
        cuCtxSetCurrent(CUcontext);
        cuCtxEnablePeerAccess(CUcontext, c_uint);
        cuModuleLoadDataEx(*mut CUmodule, *const c_void, c_uint, *mut c_int, *mut *mut c_void);
        cuModuleGetFunction(*mut CUfunction, CUmodule, *const c_char);
        cuModuleUnload(CUmodule);
        cuFuncGetAttribute(*mut c_int, CUfunction_attribute, CUfunction);
        cuOccupancyMaxActiveBlocksPerMultiprocessor(*mut c_int, CUfunction, c_int, usize);
        cuStreamCreate(*mut CUstream, c_uint);
        cuStreamDestroy_v2(CUstream);
        cuStreamQuery(CUstream);
        cuStreamSynchronize(CUstream);
        cuLaunchKernel(
            CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream,
            *mut *mut c_void, *mut *mut c_void,
        );
        cuMemAlloc_v2(*mut CUdeviceptr, usize);
        cuMemFree_v2(CUdeviceptr);
        cuMemsetD8Async(CUdeviceptr, u8, usize, CUstream);
        cuMemHostAlloc(*mut *mut c_void, usize, c_uint);
        cuMemFreeHost(*mut c_void);
        cuMemHostGetDevicePointer_v2(*mut CUdeviceptr, *mut c_void, c_uint);
        cuMemHostRegister_v2(*mut c_void, usize, c_uint);
        cuMemHostUnregister(*mut c_void);
        cuMemAllocManaged(*mut CUdeviceptr, usize, c_uint);
        cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
        cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
        cuEventCreate(*mut CUevent, c_uint);
        cuEventRecord(CUevent, CUstream);
        cuEventSynchronize(CUevent);
        cuEventDestroy_v2(CUevent);
        cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode);
        cuStreamEndCapture(CUstream, *mut CUgraph);
        cuGraphInstantiateWithFlags(*mut CUgraphExec, CUgraph, c_ulonglong);
        cuGraphLaunch(CUgraphExec, CUstream);
        cuGraphExecDestroy(CUgraphExec);
        cuGraphDestroy(CUgraph);
    }
    optional {
        // 12.4 and newer: loads a function's code now (eager loading per function).
        cuFuncLoad(CUfunction);
        // 12.2 and newer (optional here so an older driver is told DriverTooOld by the
        // probe's version check rather than a missing symbol).
        cuMemAdvise_v2(CUdeviceptr, usize, CUmem_advise, CUmemLocation);
        cuMemPrefetchAsync_v2(CUdeviceptr, usize, CUmemLocation, c_uint, CUstream);
    }
}

/// Why the driver table is unavailable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// No library of cudarc's candidate names loads.
    Missing,
    /// The library loads but lacks a symbol gyre needs (a driver older than 12.0).
    Symbol(String),
}

/// The driver table, resolved once per process. Never panics: cudarc's loader is only
/// asked for the library after [`cudarc::driver::sys::is_culib_present`] said it loads.
pub fn driver() -> Result<&'static Driver, LoadError> {
    static TABLE: OnceLock<Result<Driver, LoadError>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            // SAFETY: only dlopens the candidate names and closes them again; loading
            // libcuda runs no initialiser with preconditions.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(LoadError::Missing);
            }
            // SAFETY: the library is present (checked above), so `culib` does not panic;
            // it is the CUDA driver, whose symbols have the declared signatures.
            unsafe { Driver::resolve(cudarc::driver::sys::culib()) }.map_err(LoadError::Symbol)
        })
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_or_says_why_never_panics() {
        match driver() {
            Ok(d) => {
                let mut v = 0;
                // SAFETY: one int written through a valid pointer; needs no cuInit.
                assert_eq!(unsafe { (d.cuDriverGetVersion)(&mut v) }, CUDA_SUCCESS);
                assert!(v >= 12000, "{v}");
            }
            // SAFETY: only dlopens candidate names.
            Err(LoadError::Missing) => assert!(!unsafe { cudarc::driver::sys::is_culib_present() }),
            Err(LoadError::Symbol(s)) => assert!(!s.is_empty()),
        }
    }
}
