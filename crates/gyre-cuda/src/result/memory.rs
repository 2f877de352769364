//! The checked layer's memory calls: allocations, copies, host registration, advice.

use std::ffi::c_void;

use super::{api, check, none};
use crate::error::{Error, Result};
use crate::sys;

// ---- memory ---------------------------------------------------------------------------------

fn sized(bytes: usize) -> impl FnOnce() -> String {
    move || format!(", {bytes} bytes")
}

/// `cuMemAlloc` of `bytes` (at least 1).
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn mem_alloc(bytes: usize) -> Result<sys::CUdeviceptr> {
    let d = api()?;
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the caller's contract; one pointer written through a valid pointer.
    check(
        "cuMemAlloc",
        unsafe { (d.cuMemAlloc_v2)(&mut p, bytes.max(1)) },
        sized(bytes),
    )?;
    Ok(p)
}

/// `cuMemFree`. May wait for running kernels: see [`crate::context`].
///
/// # Safety
///
/// `p` came from [`mem_alloc`] or [`mem_alloc_managed`] and is freed once.
pub(crate) unsafe fn mem_free(p: sys::CUdeviceptr) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuMemFree", unsafe { (d.cuMemFree_v2)(p) }, none)
}

/// `cuMemsetD8Async` of `bytes` bytes at `p` to `v`, on `s`.
///
/// # Safety
///
/// `p` is `bytes` bytes of device memory; `s` a live stream of the current context.
pub(crate) unsafe fn memset_d8_async(
    p: sys::CUdeviceptr,
    v: u8,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuMemsetD8Async)(p, v, bytes, s) };
    check("cuMemsetD8Async", r, sized(bytes))
}

/// `cuMemHostAlloc(DEVICEMAP | PORTABLE)` of `bytes` (at least 1): page-locked host
/// memory, cached (not write-combined), mapped into every context.
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn mem_host_alloc_mapped(bytes: usize) -> Result<*mut c_void> {
    let d = api()?;
    let mut p: *mut c_void = std::ptr::null_mut();
    let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
    // SAFETY: the caller's contract; one pointer written through a valid pointer.
    let r = unsafe { (d.cuMemHostAlloc)(&mut p, bytes.max(1), flags) };
    check("cuMemHostAlloc", r, sized(bytes))?;
    if p.is_null() {
        return Err(Error::Driver {
            op: "cuMemHostAlloc",
            name: "a null pointer with CUDA_SUCCESS".into(),
            code: 0,
            detail: format!(", {bytes} bytes"),
        });
    }
    Ok(p)
}

/// `cuMemFreeHost`. May wait for running kernels.
///
/// # Safety
///
/// `p` came from [`mem_host_alloc_mapped`] and is freed once.
pub(crate) unsafe fn mem_free_host(p: *mut c_void) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuMemFreeHost", unsafe { (d.cuMemFreeHost)(p) }, none)
}

/// `cuMemHostGetDevicePointer`: the device address of mapped host memory.
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn host_device_pointer(p: *mut c_void) -> Result<sys::CUdeviceptr> {
    let d = api()?;
    let mut dp: sys::CUdeviceptr = 0;
    // SAFETY: the caller's contract; flags must be 0; fails (typed) for unmapped memory.
    let r = unsafe { (d.cuMemHostGetDevicePointer_v2)(&mut dp, p, 0) };
    check("cuMemHostGetDevicePointer", r, || {
        format!(", host address {p:p}")
    })?;
    Ok(dp)
}

/// `cuMemHostRegister(DEVICEMAP | PORTABLE)` of `bytes` at `p`.
///
/// # Safety
///
/// A context is current; `p` is `bytes` bytes of live, page-aligned host memory that
/// stays allocated until [`host_unregister`].
pub(crate) unsafe fn host_register_mapped(p: *mut c_void, bytes: usize) -> Result<()> {
    let d = api()?;
    let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuMemHostRegister_v2)(p, bytes, flags) };
    check("cuMemHostRegister", r, sized(bytes))
}

/// `cuMemHostUnregister`. May wait for running kernels.
///
/// # Safety
///
/// `p` was registered by [`host_register_mapped`] and is unregistered once.
pub(crate) unsafe fn host_unregister(p: *mut c_void) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check(
        "cuMemHostUnregister",
        unsafe { (d.cuMemHostUnregister)(p) },
        none,
    )
}

/// `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)` of `bytes` (at least 1).
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn mem_alloc_managed(bytes: usize) -> Result<sys::CUdeviceptr> {
    let d = api()?;
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the caller's contract; one pointer written through a valid pointer.
    let r = unsafe { (d.cuMemAllocManaged)(&mut p, bytes.max(1), sys::CU_MEM_ATTACH_GLOBAL) };
    check("cuMemAllocManaged", r, sized(bytes))?;
    Ok(p)
}

/// `cuMemAdvise` over `bytes` at `p`.
///
/// # Safety
///
/// `p..p + bytes` is managed memory of the current context.
pub(crate) unsafe fn mem_advise(
    p: sys::CUdeviceptr,
    bytes: usize,
    advice: sys::CUmem_advise,
    at: sys::CUmemLocation,
) -> Result<()> {
    let f = api()?.cuMemAdvise_v2.ok_or_else(|| Error::DriverSymbol {
        symbol: "cuMemAdvise_v2".into(),
    })?;
    // SAFETY: the caller's contract.
    let r = unsafe { f(p, bytes, advice, at) };
    check("cuMemAdvise", r, || format!(", {advice:?}, {bytes} bytes"))
}

/// `cuMemPrefetchAsync` of `bytes` at `p` to `to`, on `s`.
///
/// # Safety
///
/// `p..p + bytes` is managed memory; `s` a live stream of the current context.
pub(crate) unsafe fn mem_prefetch_async(
    p: sys::CUdeviceptr,
    bytes: usize,
    to: sys::CUmemLocation,
    s: sys::CUstream,
) -> Result<()> {
    let f = api()?
        .cuMemPrefetchAsync_v2
        .ok_or_else(|| Error::DriverSymbol {
            symbol: "cuMemPrefetchAsync_v2".into(),
        })?;
    // SAFETY: the caller's contract.
    let r = unsafe { f(p, bytes, to, 0, s) };
    check("cuMemPrefetchAsync", r, sized(bytes))
}

/// `cuMemcpyHtoDAsync` of `bytes` from host `src` to device `dst`, on `s`.
///
/// # Safety
///
/// `src` is readable for `bytes` bytes and unwritten until the copy completes; `dst` is
/// `bytes` bytes of device memory; `s` a live stream of the current context.
pub(crate) unsafe fn memcpy_htod_async(
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuMemcpyHtoDAsync_v2)(dst, src, bytes, s) };
    check("cuMemcpyHtoDAsync", r, sized(bytes))
}

/// `cuMemcpyDtoHAsync` of `bytes` from device `src` to host `dst`, on `s`.
///
/// # Safety
///
/// `dst` is writable for `bytes` bytes and untouched until the copy completes; `src` is
/// `bytes` bytes of device memory; `s` a live stream of the current context.
pub(crate) unsafe fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
    s: sys::CUstream,
) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuMemcpyDtoHAsync_v2)(dst, src, bytes, s) };
    check("cuMemcpyDtoHAsync", r, sized(bytes))
}
