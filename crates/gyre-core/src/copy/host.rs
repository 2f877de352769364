//! The CPU backend's emulated copy engine: "device" memory that is a separate host
//! allocation, reached only by real copies.
//!
//! The CPU kernel thread runs over [`HostDeviceMemory::region`] exactly as a GPU kernel
//! runs over device memory, while the host works on the bridge's mirror. Copies move 8-byte
//! words: device-side stores are atomic with release and device-side loads atomic with
//! acquire, the way a PCIe DMA engine delivers aligned 8-byte writes untorn and in order
//! behind earlier ones. That makes the engine's stores to lines the kernel polls
//! race-free, and gives the stream-order guarantee of [`CopyEngine`]: a copy issued after
//! another is seen after it (the release store of a later doorbell orders every earlier
//! copy before it).

use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::region::SharedRegion;
use crate::ring::Geometry;

use super::CopyEngine;

/// Emulated device memory for one kernel: a [`SharedRegion`] in its own allocation,
/// reachable from the host side of the bridge only through [`CopyEngine`] copies.
///
/// # Examples
///
/// ```
/// use gyre_core::bridge::{CopyEngine, HostDeviceMemory};
/// use gyre_core::ring::Geometry;
///
/// let dev = HostDeviceMemory::new(Geometry::new(4, 128, 1)?, 0)?;
/// let word = 7u64.to_ne_bytes();
/// // SAFETY: `word` is 8 readable bytes that nobody writes.
/// unsafe { dev.copy_h2d(256 + 8, word.as_ptr(), 8)? };
/// let mut back = [0u8; 8];
/// // SAFETY: `back` is 8 writable bytes we own.
/// unsafe { dev.copy_d2h(back.as_mut_ptr(), 256 + 8, 8)? };
/// assert_eq!(u64::from_ne_bytes(back), 7);
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug)]
pub struct HostDeviceMemory {
    region: Arc<SharedRegion>,
}

impl HostDeviceMemory {
    /// Allocates zeroed device memory for `g` and initialises its control block the way
    /// the host initialises a shared region (the bridge's first push writes the same line).
    ///
    /// # Errors
    ///
    /// [`Error::Alloc`] when the memory cannot be allocated.
    pub fn new(g: Geometry, host_timeout_ms: u32) -> Result<Self> {
        Ok(Self {
            region: Arc::new(SharedRegion::new_host(g, host_timeout_ms)?),
        })
    }

    /// The device region, for the kernel loop only: host code must go through copies.
    pub fn region(&self) -> &Arc<SharedRegion> {
        &self.region
    }
}

/// Emulated device memory: `base..base + len`, reached by 8-byte atomic words (see the
/// module documentation). Shared by [`HostDeviceMemory`] and [`HostDeviceArena`].
struct Words {
    base: core::ptr::NonNull<u8>,
    len: usize,
}

impl Words {
    fn check(&self, op: &'static str, off: usize, host: usize, len: usize) -> Result<()> {
        let end = off.checked_add(len);
        if end.is_none_or(|e| e > self.len) || off % 8 != 0 || len % 8 != 0 || host % 8 != 0 {
            return Err(Error::Transfer {
                engine: "host",
                op,
                offset: off,
                len,
                source: crate::Cause::msg(format!(
                    "outside the {}-byte device memory or not 8-byte aligned (host address {host:#x})",
                    self.len
                )),
            });
        }
        Ok(())
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: `off` was bounds- and alignment-checked by `check`; the memory is live
        // while its owner is, and every access to device memory by a copy is atomic.
        unsafe { &*self.base.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// # Safety
    ///
    /// As [`CopyEngine::copy_h2d`].
    unsafe fn h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        self.check("copy host to device", dst, src as usize, len)?;
        for k in (0..len).step_by(8) {
            // SAFETY: caller contract: `src` is valid for `len` reads and not written
            // meanwhile; 8-aligned (checked).
            let v = unsafe { core::ptr::read(src.add(k).cast::<u64>()) };
            self.word(dst + k).store(v, Release);
        }
        Ok(())
    }

    /// # Safety
    ///
    /// As [`CopyEngine::copy_d2h`].
    unsafe fn d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        self.check("copy device to host", src, dst as usize, len)?;
        for k in (0..len).step_by(8) {
            let v = self.word(src + k).load(Acquire);
            // SAFETY: caller contract: `dst` is valid for `len` writes and ours alone;
            // 8-aligned (checked).
            unsafe { core::ptr::write(dst.add(k).cast::<u64>(), v) };
        }
        Ok(())
    }
}

impl HostDeviceMemory {
    fn words(&self) -> Words {
        Words {
            base: self.region.base(),
            len: SharedRegion::bytes_for(self.region.geometry()),
        }
    }
}

// SAFETY: copies move exactly `len` bytes within the checked bounds; device stores are
// release and device loads acquire (see the module docs), and both complete before
// returning, so the synchronous and (default) asynchronous forms complete in order.
unsafe impl CopyEngine for HostDeviceMemory {
    fn name(&self) -> &'static str {
        "host"
    }

    fn len(&self) -> usize {
        SharedRegion::bytes_for(self.region.geometry())
    }

    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.words().h2d(dst, src, len) }
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.words().d2h(dst, src, len) }
    }

    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

/// Emulated device memory for a loan pool under a copy strategy: a separate zeroed host
/// allocation the CPU kernel reads and writes in place ([`HostDeviceArena::kernel_ptr`]),
/// reached from the host side only through [`CopyEngine`] copies (a `LoanMirror`).
#[derive(Debug)]
pub struct HostDeviceArena {
    mem: crate::region::HostMemory,
    len: usize,
}

impl HostDeviceArena {
    /// `len` zeroed bytes.
    ///
    /// # Errors
    ///
    /// [`Error::Alloc`].
    pub fn new(len: usize) -> Result<Self> {
        Ok(Self {
            mem: crate::region::HostMemory::zeroed(len)?,
            len,
        })
    }

    /// The memory as the kernel addresses it (for the CPU kernel only: host code must go
    /// through copies).
    pub fn kernel_ptr(&self) -> core::ptr::NonNull<u8> {
        crate::region::RegionMemory::base(&self.mem)
    }

    fn words(&self) -> Words {
        Words {
            base: self.kernel_ptr(),
            len: self.len,
        }
    }
}

// SAFETY: as for HostDeviceMemory: checked bounds, release stores, acquire loads, each
// copy complete on return.
unsafe impl CopyEngine for HostDeviceArena {
    fn name(&self) -> &'static str {
        "host"
    }

    fn len(&self) -> usize {
        self.len
    }

    unsafe fn copy_h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.words().h2d(dst, src, len) }
    }

    unsafe fn copy_d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        // SAFETY: forwarded caller contract.
        unsafe { self.words().d2h(dst, src, len) }
    }

    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}
