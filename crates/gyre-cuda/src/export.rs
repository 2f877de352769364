//! The telemetry export file registered with the device, so the ring kernel's K8 writes
//! the file's telemetry line itself (issue 5: no host copy loop on CUDA).
//!
//! [`ExportRegistration`] page-locks the file's mapping (`cuMemHostRegister` with
//! `DEVICEMAP | PORTABLE`), finds the device address of its telemetry line, and keeps the
//! file (`Arc<ExportWriter>`) alive; dropping it unregisters the memory. It must outlive
//! the kernel, which `CudaKernel` guarantees by holding it with the kernel's memory.
//!
//! **Not validated on a GPU** (none was available when this was written).

use std::ffi::c_void;
use std::sync::Arc;

use gyre_core::shm::{ExportWriter, TelemetryExport};

use crate::context::{Context, Release};
use crate::error::Result;
use crate::result;
use crate::sys;

/// A registered export file; see the module docs.
pub struct ExportRegistration {
    ctx: Arc<Context>,
    host: *mut c_void,
    telemetry: sys::CUdeviceptr,
    /// The file, kept mapped until the registration is released (which the context may
    /// defer while ring kernels run: the mapping must outlive it).
    file: Option<Arc<ExportWriter>>,
}

// SAFETY: the pointer is the file's mapping, owned (through `file`) for the value's
// lifetime; the driver calls bind the context first and are thread-safe.
unsafe impl Send for ExportRegistration {}
// SAFETY: as above; `&self` exposes only the device address.
unsafe impl Sync for ExportRegistration {}

impl core::fmt::Debug for ExportRegistration {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ExportRegistration")
            .field("host", &self.host)
            .field("telemetry", &self.telemetry)
            .finish()
    }
}

impl ExportRegistration {
    /// Registers `file`'s mapping with the device.
    ///
    /// # Errors
    ///
    /// [`crate::Error::WouldWait`] while a ring kernel runs on `ctx`; the driver's error
    /// (e.g. a device without `CAN_MAP_HOST_MEMORY`), naming the call.
    pub fn new(ctx: &Arc<Context>, file: Arc<ExportWriter>) -> Result<Self> {
        let export: *const TelemetryExport = file.export();
        let host = export.cast_mut().cast::<c_void>();
        // SAFETY: `export` points into the live mapping `file` owns; only the field's
        // address is taken.
        let line = unsafe { core::ptr::addr_of!((*export).telemetry) }
            .cast_mut()
            .cast::<c_void>();
        let bytes = core::mem::size_of::<TelemetryExport>();
        ctx.bind()?;
        // A registration can wait for the context to idle: only while no ring kernel
        // runs (`Context::while_idle`).
        ctx.while_idle("cuMemHostRegister", "the telemetry export file", || {
            // SAFETY: the context is current; `host` is the start of a live, page-aligned
            // shared mapping of `bytes` bytes owned by `file`, which this value keeps
            // alive until the registration is released.
            unsafe { result::host_register_mapped(host, bytes) }
        })?;
        let mut reg = Self {
            ctx: ctx.clone(),
            host,
            telemetry: 0,
            file: Some(file),
        };
        // SAFETY: `line` lies inside the range registered above (DEVICEMAP).
        reg.telemetry = unsafe { result::host_device_pointer(line)? };
        Ok(reg)
    }

    /// The device address of the file's telemetry line (the ring kernel's second
    /// argument).
    pub fn telemetry_ptr(&self) -> sys::CUdeviceptr {
        self.telemetry
    }
}

impl Drop for ExportRegistration {
    fn drop(&mut self) {
        // Unregistering may wait for running kernels: the context frees it now or once
        // none runs, keeping the file mapped until then.
        let owner: Option<Box<dyn core::any::Any + Send + Sync>> = self
            .file
            .take()
            .map(|f| Box::new(f) as Box<dyn core::any::Any + Send + Sync>);
        self.ctx.release(Release::Unregister(self.host, owner));
    }
}
