//! The checked layer between the raw driver table ([`crate::sys`]) and gyre's safe types:
//! one function per driver call gyre makes, each returning a [`Result`] whose error names
//! the call, the CUDA error (name and raw code) and what was asked for.
//!
//! As in cudarc's `result` module, the functions are thin and mostly `unsafe`: their
//! contracts are the driver's (a live handle, a current context). The safe types
//! ([`crate::context`], [`crate::memory`], `crate::stream`, ...) uphold them and make no
//! driver call of their own.
//!
//! Error names come from the running driver (`cuGetErrorName` takes the raw code), so a
//! code newer than this crate still gets its name; gyre's own table is the fallback.

use std::ffi::{c_char, c_int, CStr};

use crate::error::{Error, Result};
use crate::sys::{self, CUresult, CUDA_SUCCESS};

/// The driver table, or [`Error::LibraryMissing`] / [`Error::DriverSymbol`].
pub(crate) fn api() -> Result<&'static sys::Driver> {
    sys::driver().map_err(|e| match e {
        sys::LoadError::Missing => Error::LibraryMissing {
            searched: crate::probe::CudaProbe::library_names(),
        },
        sys::LoadError::Symbol(s) => Error::DriverSymbol { symbol: s },
    })
}

/// The name of driver error `code` (`CUDA_ERROR_ILLEGAL_ADDRESS`), from the driver when
/// it knows it, else from gyre's table, else `CUDA_ERROR_<code>`.
pub fn error_name(code: CUresult) -> String {
    if let Ok(d) = sys::driver() {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string (or fails for an
        // unknown code); it needs no cuInit.
        if unsafe { (d.cuGetErrorName)(code, &mut p) } == CUDA_SUCCESS && !p.is_null() {
            // SAFETY: a NUL-terminated static string owned by the driver.
            return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        }
    }
    known_name(code).map_or_else(|| format!("CUDA_ERROR_{code}"), str::to_owned)
}

/// gyre's table of the driver errors it reasons about.
fn known_name(code: CUresult) -> Option<&'static str> {
    Some(match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        4 => "CUDA_ERROR_DEINITIALIZED",
        35 => "CUDA_ERROR_INSUFFICIENT_DRIVER",
        100 => "CUDA_ERROR_NO_DEVICE",
        101 => "CUDA_ERROR_INVALID_DEVICE",
        200 => "CUDA_ERROR_INVALID_IMAGE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
        214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
        218 => "CUDA_ERROR_INVALID_PTX",
        220 => "CUDA_ERROR_NVLINK_UNCORRECTABLE",
        226 => "CUDA_ERROR_CONTAINED",
        221 => "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
        222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        500 => "CUDA_ERROR_NOT_FOUND",
        600 => "CUDA_ERROR_NOT_READY",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
        709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        710 => "CUDA_ERROR_ASSERT",
        714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
        715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
        717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        718 => "CUDA_ERROR_INVALID_PC",
        719 => "CUDA_ERROR_LAUNCH_FAILED",
        720 => "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        721 => "CUDA_ERROR_TENSOR_MEMORY_LEAK",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => return None,
    })
}

/// Whether `code` is a *sticky* error: the context is corrupt and every later call on it
/// fails the same way (a kernel fault, a watchdog kill, an uncorrectable memory error, a
/// contained error, a tensor-memory leak). NVIDIA documents these as needing a new
/// process; gyre resets the primary context and checks whether that sufficed
/// (`registry`).
pub fn is_sticky(code: CUresult) -> bool {
    matches!(code, 214 | 220 | 226 | 700 | 702 | 710 | 714..=719 | 721)
}

/// `Ok` on `CUDA_SUCCESS`, else [`Error::Driver`] naming `op`, the error and `detail`
/// (built only on failure, starting with `", "` or empty).
pub(crate) fn check(op: &'static str, r: CUresult, detail: impl FnOnce() -> String) -> Result<()> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::driver(op, r, detail()))
    }
}

fn none() -> String {
    String::new()
}

// ---- initialisation and devices -------------------------------------------------------

/// `cuInit(0)`. [`Error::NoDevice`] for `CUDA_ERROR_NO_DEVICE`, [`Error::InitFailed`]
/// for any other failure.
pub(crate) fn init() -> Result<()> {
    let d = api()?;
    // SAFETY: cuInit(0) has no preconditions and may be called more than once.
    match unsafe { (d.cuInit)(0) } {
        CUDA_SUCCESS => Ok(()),
        sys::CUDA_ERROR_NO_DEVICE => Err(Error::NoDevice { driver: 0 }),
        code => Err(Error::InitFailed {
            code,
            name: error_name(code),
        }),
    }
}

/// `cuDriverGetVersion` (`13000` for 13.0).
pub(crate) fn driver_version() -> Result<i32> {
    let d = api()?;
    let mut v: c_int = 0;
    // SAFETY: one int written through a valid pointer.
    check(
        "cuDriverGetVersion",
        unsafe { (d.cuDriverGetVersion)(&mut v) },
        none,
    )?;
    Ok(v)
}

/// `cuDeviceGetCount`. Needs `cuInit`.
pub(crate) fn device_count() -> Result<i32> {
    let d = api()?;
    let mut n: c_int = 0;
    // SAFETY: one int written through a valid pointer.
    check(
        "cuDeviceGetCount",
        unsafe { (d.cuDeviceGetCount)(&mut n) },
        none,
    )?;
    Ok(n)
}

/// `cuDeviceGet`. Needs `cuInit`.
pub(crate) fn device_get(ordinal: i32) -> Result<sys::CUdevice> {
    let d = api()?;
    let mut dev: sys::CUdevice = 0;
    // SAFETY: one int written through a valid pointer.
    let r = unsafe { (d.cuDeviceGet)(&mut dev, ordinal) };
    check("cuDeviceGet", r, || format!(", ordinal {ordinal}"))?;
    Ok(dev)
}

/// `cuDeviceGetName`.
pub(crate) fn device_name(dev: sys::CUdevice) -> Result<String> {
    let d = api()?;
    let mut buf = [0u8; 256];
    // SAFETY: the buffer holds 256 bytes; the length passed is 255, leaving a NUL.
    let r = unsafe { (d.cuDeviceGetName)(buf.as_mut_ptr().cast(), 255, dev) };
    check("cuDeviceGetName", r, none)?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// `cuDeviceTotalMem`.
pub(crate) fn device_total_mem(dev: sys::CUdevice) -> Result<usize> {
    let d = api()?;
    let mut b = 0usize;
    // SAFETY: one usize written through a valid pointer.
    check(
        "cuDeviceTotalMem",
        unsafe { (d.cuDeviceTotalMem_v2)(&mut b, dev) },
        none,
    )?;
    Ok(b)
}

/// `cuDeviceGetAttribute`.
pub(crate) fn device_attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32> {
    let d = api()?;
    let mut v: c_int = 0;
    // SAFETY: one int written through a valid pointer; `a` is a valid attribute.
    let r = unsafe { (d.cuDeviceGetAttribute)(&mut v, a, dev) };
    check("cuDeviceGetAttribute", r, || format!(", attribute {a:?}"))?;
    Ok(v)
}

/// `cuDeviceCanAccessPeer`: whether contexts on `dev` may map memory of `peer` (the
/// driver's answer; `cuCtxEnablePeerAccess` would make it so).
pub(crate) fn device_can_access_peer(dev: sys::CUdevice, peer: sys::CUdevice) -> Result<bool> {
    let d = api()?;
    let mut v: c_int = 0;
    // SAFETY: one int written through a valid pointer.
    let r = unsafe { (d.cuDeviceCanAccessPeer)(&mut v, dev, peer) };
    check("cuDeviceCanAccessPeer", r, || {
        format!(", device {dev} to {peer}")
    })?;
    Ok(v != 0)
}

/// `cuDeviceGetP2PAttribute` of the link from `src` to `dst`.
pub(crate) fn device_p2p_attribute(
    a: sys::CUdevice_P2PAttribute,
    src: sys::CUdevice,
    dst: sys::CUdevice,
) -> Result<i32> {
    let d = api()?;
    let mut v: c_int = 0;
    // SAFETY: one int written through a valid pointer; `a` is a valid attribute.
    let r = unsafe { (d.cuDeviceGetP2PAttribute)(&mut v, a, src, dst) };
    check("cuDeviceGetP2PAttribute", r, || {
        format!(", attribute {a:?}, device {src} to {dst}")
    })?;
    Ok(v)
}

// ---- contexts ---------------------------------------------------------------------------

/// `cuDevicePrimaryCtxRetain`.
pub(crate) fn primary_ctx_retain(dev: sys::CUdevice) -> Result<sys::CUcontext> {
    let d = api()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: one pointer written through a valid pointer.
    let r = unsafe { (d.cuDevicePrimaryCtxRetain)(&mut ctx, dev) };
    check("cuDevicePrimaryCtxRetain", r, || format!(", device {dev}"))?;
    Ok(ctx)
}

/// `cuDevicePrimaryCtxRelease`.
///
/// # Safety
///
/// Balances one successful [`primary_ctx_retain`]; nothing uses that reference after.
pub(crate) unsafe fn primary_ctx_release(dev: sys::CUdevice) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuDevicePrimaryCtxRelease_v2)(dev) };
    check("cuDevicePrimaryCtxRelease", r, || format!(", device {dev}"))
}

/// `cuDevicePrimaryCtxReset`: destroys every allocation, module and stream of the
/// device's primary context in this process and clears a sticky error.
///
/// # Safety
///
/// No handle of that context is used again.
pub(crate) unsafe fn primary_ctx_reset(dev: sys::CUdevice) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuDevicePrimaryCtxReset_v2)(dev) };
    check("cuDevicePrimaryCtxReset", r, || format!(", device {dev}"))
}

/// `cuCtxSetCurrent`.
///
/// # Safety
///
/// `ctx` is a live (retained) context.
pub(crate) unsafe fn ctx_set_current(ctx: sys::CUcontext) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuCtxSetCurrent", unsafe { (d.cuCtxSetCurrent)(ctx) }, none)
}

/// `cuCtxEnablePeerAccess`: lets kernels of the current context address device memory of
/// the context `peer` (one direction only). Already enabled counts as done.
///
/// # Safety
///
/// `peer` is a live (retained) context; a context is current on this thread.
pub(crate) unsafe fn ctx_enable_peer_access(peer: sys::CUcontext) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract; the flags must be 0.
    let r = unsafe { (d.cuCtxEnablePeerAccess)(peer, 0) };
    if r == sys::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
        return Ok(());
    }
    check("cuCtxEnablePeerAccess", r, none)
}

mod memory;
mod module;
mod stream;

pub(crate) use memory::*;
pub(crate) use module::*;
pub(crate) use stream::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_driver_or_the_table_or_the_code() {
        assert_eq!(error_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
        assert_eq!(error_name(222), "CUDA_ERROR_UNSUPPORTED_PTX_VERSION");
        // A code no table has: still a name, with the raw number.
        let odd = error_name(123_456);
        assert!(
            odd.contains("123456") || odd.starts_with("CUDA_ERROR"),
            "{odd}"
        );
    }

    #[test]
    fn sticky_errors_are_the_context_corrupting_ones() {
        for c in [
            700, 702, 710, 714, 715, 716, 717, 718, 719, 214, 220, 226, 721,
        ] {
            assert!(is_sticky(c), "{c}");
        }
        for c in [0, 1, 2, 600, 701, 720, 999] {
            assert!(!is_sticky(c), "{c}");
        }
    }

    #[test]
    fn check_keeps_the_raw_code() {
        let e = check("cuFoo", 917, || ", 8 bytes".into()).unwrap_err();
        match e {
            Error::Driver {
                op, code, detail, ..
            } => {
                assert_eq!((op, code, detail.as_str()), ("cuFoo", 917, ", 8 bytes"));
            }
            other => panic!("{other}"),
        }
    }
}
