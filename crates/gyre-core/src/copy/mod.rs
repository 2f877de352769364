//! Copy engines: how host code reaches device memory it cannot address ([`CopyEngine`]),
//! and the CPU backend's emulated device memory ([`HostDeviceMemory`] for a kernel's
//! rings, [`HostDeviceArena`] for a loan pool), reached only by real copies. The bridge
//! (`crate::bridge`) and the loan pool's mirror (`crate::loan::LoanMirror`) drive them.

mod host;

pub use host::{HostDeviceArena, HostDeviceMemory};

use crate::error::Result;
use crate::region::RegionMemory;

/// Checks that a copy of `len` bytes at device offset `offset` lies inside an engine's
/// `total` bytes: [`crate::Error::Transfer`] naming the engine, the operation and the
/// bound otherwise. For [`CopyEngine`] implementations, before they issue anything.
///
/// # Examples
///
/// ```
/// use gyre_core::copy::check_range;
/// assert!(check_range("cuda", "copy host to device", 64, 64, 128).is_ok());
/// assert!(check_range("cuda", "copy host to device", 100, 64, 128).is_err());
/// assert!(check_range("cuda", "copy host to device", usize::MAX, 2, 128).is_err());
/// ```
pub fn check_range(
    engine: &'static str,
    op: &'static str,
    offset: usize,
    len: usize,
    total: usize,
) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > total) {
        return Err(crate::Error::Transfer {
            engine,
            op,
            offset,
            len,
            source: crate::Cause::msg(format!("outside the {total}-byte device region")),
        });
    }
    Ok(())
}

/// A device's copy engine over one block of device memory: a kernel's device region
/// (laid out as [`SharedRegion`](crate::SharedRegion)), or a loan pool's device side.
///
/// Offsets are byte offsets into that memory.
/// Copies of one engine run in the order they were issued (*stream order*): a copy
/// issued after another starts once that one has completed, so it lands after it and
/// reads after it (the telemetry sequence-lock read relies on the second half).
///
/// # Safety
///
/// Implementors guarantee that a copy moves exactly `len` bytes between the given host
/// pointer and the device region, touches nothing else, and, when it returns `Ok` from a
/// synchronous copy or from [`CopyEngine::synchronize`], has completed. Device-side stores
/// must become visible to the kernel no earlier than the engine's earlier copies (release
/// order); device-side loads must observe every kernel store that the kernel ordered
/// before the value they read (acquire order).
pub unsafe trait CopyEngine: Send + Sync + 'static {
    /// Short name for errors (`host`, `cuda`).
    fn name(&self) -> &'static str;

    /// Length of the device region in bytes.
    fn len(&self) -> usize;

    /// Whether the region is empty (never, for a real kernel).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `len` bytes from host `src` to device offset `dst`, blocking until done.
    ///
    /// # Safety
    ///
    /// `src` is valid for `len` reads and nobody writes those bytes until the copy
    /// completes.
    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()>;

    /// Copies `len` bytes from device offset `src` to host `dst`, blocking until done.
    ///
    /// # Safety
    ///
    /// `dst` is valid for `len` writes and nobody else accesses those bytes until the
    /// copy completes.
    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()>;

    /// [`CopyEngine::copy_h2d`] issued on the engine's stream without waiting; complete
    /// after [`CopyEngine::synchronize`]. The default copies synchronously.
    ///
    /// # Safety
    ///
    /// As [`CopyEngine::copy_h2d`], until the next `synchronize` returns.
    unsafe fn copy_h2d_async(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.copy_h2d(dst, src, len) }
    }

    /// [`CopyEngine::copy_d2h`] issued on the engine's stream without waiting.
    ///
    /// # Safety
    ///
    /// As [`CopyEngine::copy_d2h`], until the next `synchronize` returns.
    unsafe fn copy_d2h_async(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.copy_d2h(dst, src, len) }
    }

    /// Whether a copy may read device memory the kernel is writing at the same time, its
    /// bytes used only if what the kernel published says they were complete (a DMA
    /// engine over device memory: yes). The bridge then reads a pull's reply slots ahead,
    /// with the kernel's line, and waits once. The default, and host memory shared with a
    /// kernel under one language memory model (the CPU backend's emulation), say no: such
    /// a read would race with the kernel's plain stores.
    fn reads_ahead(&self) -> bool {
        false
    }

    /// Waits for every copy issued so far (on CUDA: polls the copy stream, with a
    /// deadline).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    /// Host memory the engine copies to and from fastest (pinned for a GPU), zeroed,
    /// 128-aligned. The default is an ordinary host allocation.
    fn alloc_staging(&self, bytes: usize) -> Result<Box<dyn RegionMemory>> {
        Ok(Box::new(crate::region::HostMemory::zeroed(bytes)?))
    }

    /// The engine as `Any`, so the backend that made it can find its own type again.
    fn as_any(&self) -> &dyn core::any::Any;
}
