//! [`CudaCopyEngine`]: device-resident rings for the copy strategies (`sync`, `async`,
//! `dma-polling`), reached through the driver's copy calls on a stream of their own.
//!
//! The kernel's region is a [`DeviceBuffer<u8>`] (`cuMemAlloc`). Every copy is issued with
//! `cuMemcpyHtoDAsync` / `cuMemcpyDtoHAsync` on the engine's non-blocking copy stream, so
//! copies complete in issue order (the stream order the bridge's doorbell relies on) and
//! never wait on the persistent kernel's stream. A synchronous copy waits for its stream,
//! and so does [`CopyEngine::synchronize`] (once per bridge step): by polling
//! `cuStreamQuery` with a deadline (`crate::stream`), never a wait without end. Staging memory is mapped pinned memory (not write-combined: the bridge
//! reads it back on the CPU), so async copies are true DMA.
//!
//! **Not validated on a GPU** (none was available while this was written): it compiles,
//! and the same bridge runs the conformance suite over the CPU backend's emulated engine.

use std::ffi::c_void;
use std::sync::Arc;

use gyre_core::bridge::CopyEngine;
use gyre_core::region::RegionMemory;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, PinnedBuffer};
use crate::result;
use crate::stream::{StreamLease, StreamPool};
use crate::sys;

/// A kernel's device-resident region and the stream its copies run on.
#[derive(Debug)]
pub struct CudaCopyEngine {
    ctx: Arc<Context>,
    buf: DeviceBuffer<u8>,
    stream: StreamLease,
}

impl CudaCopyEngine {
    /// Allocates `bytes` of zeroed device memory (zeroed before this returns, so before
    /// any copy or launch) and holds a stream of the context's pool for the copies.
    ///
    /// # Errors
    ///
    /// The driver's error naming the call and the size; [`Error::StreamsExhausted`].
    pub fn new(ctx: &Arc<Context>, bytes: usize) -> Result<Self> {
        let stream = StreamPool::lease(ctx, "a bridge's copies")?;
        let buf = DeviceBuffer::<u8>::zeroed(ctx, bytes)?;
        Ok(Self {
            ctx: ctx.clone(),
            buf,
            stream,
        })
    }

    /// The device address of the region (the ring kernel's argument).
    pub fn device_ptr(&self) -> sys::CUdeviceptr {
        self.buf.device_ptr()
    }

    fn transfer_error(op: &'static str, offset: usize, len: usize, e: Error) -> gyre_core::Error {
        gyre_core::Error::Transfer {
            engine: "cuda",
            op,
            offset,
            len,
            source: gyre_core::Cause::new(e),
        }
    }

    fn bounds(&self, op: &'static str, offset: usize, len: usize) -> gyre_core::Result<()> {
        gyre_core::copy::check_range("cuda", op, offset, len, self.buf.len())?;
        self.ctx
            .bind()
            .map_err(|e| Self::transfer_error(op, offset, len, e))
    }

    fn wait_stream(&self, op: &'static str, offset: usize, len: usize) -> gyre_core::Result<()> {
        self.stream
            .synchronize("the bridge's copy stream")
            .map_err(|e| Self::transfer_error(op, offset, len, e))
    }
}

// SAFETY: every copy is bounds-checked against the device buffer and moves exactly `len`
// bytes; all copies go on one stream, so they complete in issue order, and the synchronous
// forms and `synchronize` return only once the stream (or an event behind everything
// issued) completed. Device-side visibility to the kernel follows DMA completion order.
unsafe impl CopyEngine for CudaCopyEngine {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn len(&self) -> usize {
        self.buf.len()
    }

    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> gyre_core::Result<()> {
        // SAFETY: forwarded caller contract; completed by the wait below.
        unsafe { self.copy_h2d_async(dst, src, len)? };
        self.wait_stream("copy host to device", dst, len)
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> gyre_core::Result<()> {
        // SAFETY: forwarded caller contract; completed by the wait below.
        unsafe { self.copy_d2h_async(dst, src, len)? };
        self.wait_stream("copy device to host", src, len)
    }

    unsafe fn copy_h2d_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
    ) -> gyre_core::Result<()> {
        const OP: &str = "copy host to device";
        self.bounds(OP, dst, len)?;
        // SAFETY: bounds checked; the caller keeps `src` valid and unwritten until the
        // stream completes; context bound by `bounds`.
        unsafe {
            result::memcpy_htod_async(
                self.buf.device_ptr() + dst as u64,
                src.cast::<c_void>(),
                len,
                self.stream.get(),
            )
        }
        .map_err(|e| Self::transfer_error(OP, dst, len, e))
    }

    unsafe fn copy_d2h_async(&self, dst: *mut u8, src: usize, len: usize) -> gyre_core::Result<()> {
        const OP: &str = "copy device to host";
        self.bounds(OP, src, len)?;
        // SAFETY: bounds checked; the caller keeps `dst` valid and untouched until the
        // stream completes; context bound by `bounds`.
        unsafe {
            result::memcpy_dtoh_async(
                dst.cast::<c_void>(),
                self.buf.device_ptr() + src as u64,
                len,
                self.stream.get(),
            )
        }
        .map_err(|e| Self::transfer_error(OP, src, len, e))
    }

    /// DMA reads of device memory: bytes the kernel is still writing land in staging and
    /// are used only below the `k2h_head` the same step's earlier copy read.
    fn reads_ahead(&self) -> bool {
        true
    }

    fn synchronize(&self) -> gyre_core::Result<()> {
        self.wait_stream("synchronize the copy stream", 0, 0)
    }

    fn alloc_staging(&self, bytes: usize) -> gyre_core::Result<Box<dyn RegionMemory>> {
        let mem = PinnedBuffer::<u8>::region_zeroed(&self.ctx, bytes)
            .map_err(|e| Self::transfer_error("allocate pinned staging", 0, bytes, e))?;
        Ok(Box::new(mem))
    }

    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

impl Drop for CudaCopyEngine {
    fn drop(&mut self) {
        // Copies still in flight must land before the stream goes back to the pool and
        // the buffer is released (by their own drops, after this).
        if let Err(e) = self.stream.synchronize("the bridge's copy stream") {
            if self.ctx.poisoned().is_none() {
                tracing::warn!(error = %e, "releasing a bridge's copy stream");
            }
        }
    }
}
