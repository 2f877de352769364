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

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

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

// ---- modules and functions ---------------------------------------------------------------

/// `cuModuleLoadDataEx` of `image` (a CUBIN, or NUL-terminated PTX) with the JIT's error
/// log captured into the error's detail.
///
/// # Safety
///
/// A context is current; `image` is a CUBIN or NUL-terminated PTX.
pub(crate) unsafe fn module_load(image: &[u8], what: &str) -> Result<sys::CUmodule> {
    let d = api()?;
    let mut log = vec![0u8; 8192];
    let mut opts = [
        sys::CU_JIT_ERROR_LOG_BUFFER,
        sys::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut vals: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut m: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: the caller's contract for the image; the option arrays have two entries
    // each, the log buffer is as large as declared and outlives the call.
    let r = unsafe {
        (d.cuModuleLoadDataEx)(
            &mut m,
            image.as_ptr().cast(),
            opts.len() as c_uint,
            opts.as_mut_ptr(),
            vals.as_mut_ptr(),
        )
    };
    check("cuModuleLoadDataEx", r, || {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let jit = String::from_utf8_lossy(&log[..end]);
        let jit = jit.trim();
        format!(
            ", {what} ({} bytes){}",
            image.len(),
            if jit.is_empty() {
                String::new()
            } else {
                format!("; JIT log: {jit}")
            }
        )
    })?;
    Ok(m)
}

/// `cuModuleGetFunction`, then `cuFuncLoad` where the driver has it (12.4+), so the
/// function's code is resident before anything persistent runs.
///
/// # Safety
///
/// `m` is a loaded module in the current context.
pub(crate) unsafe fn module_function(m: sys::CUmodule, name: &CStr) -> Result<sys::CUfunction> {
    let d = api()?;
    let mut f: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the caller's contract; `name` is NUL-terminated.
    let r = unsafe { (d.cuModuleGetFunction)(&mut f, m, name.as_ptr()) };
    check("cuModuleGetFunction", r, || format!(", {name:?}"))?;
    if let Some(load) = d.cuFuncLoad {
        // SAFETY: `f` comes from a loaded module.
        check("cuFuncLoad", unsafe { load(f) }, || format!(", {name:?}"))?;
    }
    Ok(f)
}

/// `cuModuleUnload`.
///
/// # Safety
///
/// `m` is loaded, unloaded once, and none of its kernels runs or will run.
pub(crate) unsafe fn module_unload(m: sys::CUmodule) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuModuleUnload", unsafe { (d.cuModuleUnload)(m) }, none)
}

/// `cuFuncGetAttribute`.
///
/// # Safety
///
/// `f` is a function of a loaded module.
pub(crate) unsafe fn func_attribute(
    f: sys::CUfunction,
    a: sys::CUfunction_attribute,
) -> Result<i32> {
    let d = api()?;
    let mut v: c_int = 0;
    // SAFETY: the caller's contract; one int written through a valid pointer.
    let r = unsafe { (d.cuFuncGetAttribute)(&mut v, a, f) };
    check("cuFuncGetAttribute", r, || format!(", {a:?}"))?;
    Ok(v)
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor` for blocks of `threads`.
///
/// # Safety
///
/// `f` is a function of a loaded module.
pub(crate) unsafe fn occupancy(f: sys::CUfunction, threads: u32) -> Result<i32> {
    let d = api()?;
    let mut v: c_int = 0;
    // SAFETY: the caller's contract; one int written through a valid pointer.
    let r =
        unsafe { (d.cuOccupancyMaxActiveBlocksPerMultiprocessor)(&mut v, f, threads as c_int, 0) };
    check("cuOccupancyMaxActiveBlocksPerMultiprocessor", r, || {
        format!(", {threads} threads per block")
    })?;
    Ok(v)
}

/// `cuLaunchKernel`: a 1-D grid of `blocks` blocks of `threads` threads, no dynamic
/// shared memory, on `stream`.
///
/// # Safety
///
/// `f` is a loaded kernel and `stream` a live stream of the current context; `params`
/// holds the address of a value of each of the kernel's parameter types, in order; what
/// those values point to stays valid until the kernel has finished.
pub(crate) unsafe fn launch(
    f: sys::CUfunction,
    blocks: u32,
    threads: u32,
    stream: sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe {
        (d.cuLaunchKernel)(
            f,
            blocks,
            1,
            1,
            threads,
            1,
            1,
            0,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check("cuLaunchKernel", r, || {
        format!(", grid {blocks}x1x1, block {threads}x1x1")
    })
}

// ---- streams and events -------------------------------------------------------------------

/// `cuStreamCreate(CU_STREAM_NON_BLOCKING)`: never synchronises with the legacy stream.
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn stream_create() -> Result<sys::CUstream> {
    let d = api()?;
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: the caller's contract; one handle written through a valid pointer.
    let r = unsafe { (d.cuStreamCreate)(&mut s, sys::CU_STREAM_NON_BLOCKING) };
    check("cuStreamCreate", r, || ", CU_STREAM_NON_BLOCKING".into())?;
    Ok(s)
}

/// `cuStreamDestroy` (returns at once; the driver releases it when its work is done).
///
/// # Safety
///
/// `s` is live and destroyed once.
pub(crate) unsafe fn stream_destroy(s: sys::CUstream) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check(
        "cuStreamDestroy",
        unsafe { (d.cuStreamDestroy_v2)(s) },
        none,
    )
}

/// `cuStreamQuery`: `Ok(true)` when all its work completed, `Ok(false)` while some runs,
/// `Err` with the error that ended it (e.g. a kernel fault).
///
/// # Safety
///
/// `s` is a live stream of the current context.
pub(crate) unsafe fn stream_query(s: sys::CUstream) -> Result<bool> {
    let d = api()?;
    // SAFETY: the caller's contract.
    match unsafe { (d.cuStreamQuery)(s) } {
        CUDA_SUCCESS => Ok(true),
        sys::CUDA_ERROR_NOT_READY => Ok(false),
        r => Err(Error::driver("cuStreamQuery", r, String::new())),
    }
}

/// `cuStreamSynchronize`.
///
/// # Safety
///
/// `s` is a live stream of the current context.
pub(crate) unsafe fn stream_synchronize(s: sys::CUstream, what: &str) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    let r = unsafe { (d.cuStreamSynchronize)(s) };
    check("cuStreamSynchronize", r, || format!(", {what}"))
}

/// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`.
///
/// # Safety
///
/// A context is current.
pub(crate) unsafe fn event_create() -> Result<sys::CUevent> {
    let d = api()?;
    let mut e: sys::CUevent = std::ptr::null_mut();
    // SAFETY: the caller's contract; one handle written through a valid pointer.
    let r = unsafe { (d.cuEventCreate)(&mut e, sys::CU_EVENT_DISABLE_TIMING) };
    check("cuEventCreate", r, none)?;
    Ok(e)
}

/// `cuEventRecord` then `cuEventSynchronize`: waits for everything issued on `s` so far.
///
/// # Safety
///
/// `e` and `s` are live, in the current context.
pub(crate) unsafe fn event_wait_behind(e: sys::CUevent, s: sys::CUstream) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuEventRecord", unsafe { (d.cuEventRecord)(e, s) }, none)?;
    // SAFETY: as above.
    check(
        "cuEventSynchronize",
        unsafe { (d.cuEventSynchronize)(e) },
        none,
    )
}

/// `cuEventDestroy`.
///
/// # Safety
///
/// `e` is live and destroyed once.
pub(crate) unsafe fn event_destroy(e: sys::CUevent) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuEventDestroy", unsafe { (d.cuEventDestroy_v2)(e) }, none)
}

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

// ---- graphs (the benchmark's graph-replay peer) --------------------------------------------

/// `cuStreamBeginCapture` in thread-local mode.
///
/// # Safety
///
/// `s` is a live stream of the current context, not capturing.
pub(crate) unsafe fn stream_begin_capture(s: sys::CUstream) -> Result<()> {
    let d = api()?;
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: the caller's contract.
    check(
        "cuStreamBeginCapture",
        unsafe { (d.cuStreamBeginCapture_v2)(s, mode) },
        none,
    )
}

/// `cuStreamEndCapture`, then `cuGraphInstantiateWithFlags`; the graph itself is
/// destroyed once instantiated.
///
/// # Safety
///
/// `s` is capturing (see [`stream_begin_capture`]) on this thread.
pub(crate) unsafe fn stream_end_capture_instantiate(s: sys::CUstream) -> Result<sys::CUgraphExec> {
    let d = api()?;
    let mut g: sys::CUgraph = std::ptr::null_mut();
    // SAFETY: the caller's contract.
    check(
        "cuStreamEndCapture",
        unsafe { (d.cuStreamEndCapture)(s, &mut g) },
        none,
    )?;
    let mut exec: sys::CUgraphExec = std::ptr::null_mut();
    // SAFETY: `g` is the graph just captured.
    let r = unsafe { (d.cuGraphInstantiateWithFlags)(&mut exec, g, 0) };
    // SAFETY: the executable graph does not need its source graph.
    let destroyed = unsafe { (d.cuGraphDestroy)(g) };
    check("cuGraphInstantiateWithFlags", r, none)?;
    check("cuGraphDestroy", destroyed, none)?;
    Ok(exec)
}

/// `cuGraphLaunch`.
///
/// # Safety
///
/// `exec` is a live executable graph; `s` a live stream of the current context.
pub(crate) unsafe fn graph_launch(exec: sys::CUgraphExec, s: sys::CUstream) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check("cuGraphLaunch", unsafe { (d.cuGraphLaunch)(exec, s) }, none)
}

/// `cuGraphExecDestroy`.
///
/// # Safety
///
/// `exec` is live, destroyed once, and not running.
pub(crate) unsafe fn graph_exec_destroy(exec: sys::CUgraphExec) -> Result<()> {
    let d = api()?;
    // SAFETY: the caller's contract.
    check(
        "cuGraphExecDestroy",
        unsafe { (d.cuGraphExecDestroy)(exec) },
        none,
    )
}

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
