//! The primary context of a device, retained for as long as anything uses it.
//!
//! The driver API's current context is per thread. Every method in this crate that calls
//! the driver first calls [`Context::bind`], so any thread may use any buffer or kernel
//! handle (including the thread that drops it).

use std::sync::Arc;

use cudarc::driver::sys;

use crate::error::{check, Result};
use crate::probe::{CudaInfo, DeviceInfo};

/// A retained primary context. Buffers and kernels hold an `Arc<Context>`, so the context
/// outlives them.
#[derive(Debug)]
pub struct Context {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    info: CudaInfo,
}

// SAFETY: a CUcontext is a driver handle usable from any thread once made current there
// (which `bind` does); the primary context is reference-counted by the driver.
unsafe impl Send for Context {}
// SAFETY: as above; `&Context` only binds the context or reads immutable facts.
unsafe impl Sync for Context {}

impl Context {
    /// Retains the primary context of the device `info` describes (device 0) and makes it
    /// current on this thread. `info` proves that the driver is loaded and initialised.
    pub fn primary(info: &CudaInfo) -> Result<Arc<Self>> {
        let ordinal = info.device.ordinal;
        let mut dev: sys::CUdevice = 0;
        // SAFETY: the driver is loaded and initialised (`info` exists); one int written
        // through a valid pointer.
        check(
            "cuDeviceGet",
            unsafe { sys::cuDeviceGet(&mut dev, ordinal) },
            || format!(", ordinal {ordinal}"),
        )?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: valid device handle; one pointer written through a valid pointer. The
        // matching release is in Drop.
        check(
            "cuDevicePrimaryCtxRetain",
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) },
            || format!(", device {ordinal}"),
        )?;
        let c = Arc::new(Self {
            dev,
            ctx,
            info: info.clone(),
        });
        c.bind()?;
        Ok(c)
    }

    /// Makes this context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: `ctx` is a retained primary context (released only in Drop).
        check(
            "cuCtxSetCurrent",
            unsafe { sys::cuCtxSetCurrent(self.ctx) },
            String::new,
        )
    }

    /// What the probe found (driver version, device attributes).
    pub fn info(&self) -> &CudaInfo {
        &self.info
    }

    /// The device.
    pub fn device(&self) -> &DeviceInfo {
        &self.info.device
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained in `primary`, released once here; nothing uses the context any
        // more (every user holds an Arc).
        let r = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.dev) };
        if let Err(e) = check("cuDevicePrimaryCtxRelease", r, String::new) {
            tracing::warn!(error = %e, "releasing the CUDA primary context");
        }
    }
}
