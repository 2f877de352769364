//! The checked layer's module and function calls (`cuModuleLoadDataEx`, `cuLaunchKernel`, ...).

use std::ffi::{c_int, c_uint, c_void, CStr};

use super::{api, check, none};
use crate::error::Result;
use crate::sys;

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
    shared_bytes: u32,
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
            shared_bytes,
            stream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    check("cuLaunchKernel", r, || {
        format!(
            ", grid {blocks}x1x1, block {threads}x1x1, {shared_bytes} B of dynamic shared memory"
        )
    })
}
