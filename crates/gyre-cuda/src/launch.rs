//! One loaded kernel and the non-blocking stream it runs on: what the ring kernel and the
//! visibility probe both need, written once.
//!
//! The module is loaded eagerly (`cuModuleLoadData`, then `cuFuncLoad` where the driver
//! has it): a lazily loaded kernel would need a context-wide synchronisation that a
//! running persistent kernel never allows. The stream is `CU_STREAM_NON_BLOCKING`, never
//! the default stream. Dropping the value destroys the stream and unloads the module, so
//! drop it only once its kernel has finished.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::error::{check, Error, Result};
use crate::probe;

/// A loaded module, one of its kernels, and a non-blocking stream; see the module docs.
pub(crate) struct Resources {
    ctx: Arc<Context>,
    module: sys::CUmodule,
    stream: sys::CUstream,
    func: sys::CUfunction,
}

impl Resources {
    /// Loads `ptx`, finds `entry` in it and creates the stream.
    ///
    /// # Errors
    ///
    /// The driver's error naming the call; [`Error::InvalidInput`] for a NUL byte.
    pub(crate) fn load(ctx: &Arc<Context>, ptx: String, entry: &str) -> Result<Self> {
        let image = CString::new(ptx).map_err(|_| Error::InvalidInput {
            what: "PTX".into(),
            reason: "contains a NUL byte",
        })?;
        let name = CString::new(entry).map_err(|_| Error::InvalidInput {
            what: "entry name".into(),
            reason: "contains a NUL byte",
        })?;
        ctx.bind()?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: context current; `image` is NUL-terminated PTX text.
        let r = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        check("cuModuleLoadData", r, || {
            format!(", {} bytes of PTX", image.as_bytes().len())
        })?;
        // Owned from here: Drop unloads the module on every error path below.
        let mut res = Self {
            ctx: ctx.clone(),
            module,
            stream: std::ptr::null_mut(),
            func: std::ptr::null_mut(),
        };
        // SAFETY: `module` is loaded; `name` is NUL-terminated.
        let r = unsafe { sys::cuModuleGetFunction(&mut res.func, module, name.as_ptr()) };
        check("cuModuleGetFunction", r, || format!(", {entry}"))?;
        if ctx.info().driver_version >= probe::FUNC_LOAD_DRIVER_VERSION {
            // SAFETY: `func` comes from a loaded module; the symbol exists from 12.4 on.
            check(
                "cuFuncLoad",
                unsafe { sys::cuFuncLoad(res.func) },
                String::new,
            )?;
        }
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: context current; one handle written through a valid pointer.
        check(
            "cuStreamCreate",
            unsafe { sys::cuStreamCreate(&mut res.stream, flags) },
            || ", CU_STREAM_NON_BLOCKING".into(),
        )?;
        Ok(res)
    }

    /// The stream.
    pub(crate) fn stream(&self) -> sys::CUstream {
        self.stream
    }

    /// Launches the kernel on the stream: one block of `lanes` threads, no dynamic shared
    /// memory.
    ///
    /// # Safety
    ///
    /// `params` holds, in order, the address of a value of each of the kernel's parameter
    /// types, and whatever memory those values point to stays valid until the kernel has
    /// finished.
    pub(crate) unsafe fn launch(&self, lanes: u32, params: &mut [*mut c_void]) -> Result<()> {
        self.ctx.bind()?;
        // SAFETY: `func` is a loaded kernel, `stream` a live stream in the bound context;
        // the parameters are the caller's contract.
        let r = unsafe {
            sys::cuLaunchKernel(
                self.func,
                1,
                1,
                1,
                lanes,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check("cuLaunchKernel", r, || {
            format!(", grid 1x1x1, block {lanes}x1x1")
        })
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        if let Err(e) = self.ctx.bind() {
            tracing::error!(error = %e, "leaking a CUDA stream and module");
            return;
        }
        if !self.stream.is_null() {
            // SAFETY: created by cuStreamCreate, destroyed once; its work has finished
            // (Resources are dropped only then, or before the launch).
            let r = unsafe { sys::cuStreamDestroy_v2(self.stream) };
            if let Err(e) = check("cuStreamDestroy", r, String::new) {
                tracing::error!(error = %e, "destroying a kernel stream");
            }
        }
        // SAFETY: loaded by cuModuleLoadData, unloaded once; no kernel of it runs.
        let r = unsafe { sys::cuModuleUnload(self.module) };
        if let Err(e) = check("cuModuleUnload", r, String::new) {
            tracing::error!(error = %e, "unloading a kernel module");
        }
    }
}
