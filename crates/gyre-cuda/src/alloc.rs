//! [`CudaAllocator`]: the `RawAllocator` of gyre-core's `MemoryPool` over the CUDA memory
//! types, so the pool (power-of-two buckets, RAII `PooledBuffer`, hit / miss / return /
//! peak statistics) serves device, mapped pinned and managed memory.
//!
//! Each block is one of this crate's RAII buffers ([`DeviceBuffer`], [`PinnedBuffer`],
//! [`UnifiedBuffer`]) kept in a table by device address until `free` drops it, so the
//! driver calls, zeroing and error reporting are those of the typed buffers.
//!
//! # Examples
//!
//! ```no_run
//! use std::sync::Arc;
//! use gyre_core::memory::{MemoryKind, MemoryPool, PoolConfig};
//! use gyre_cuda::{CudaAllocator, CudaBackend};
//!
//! let backend = CudaBackend::new()?;
//! let alloc = CudaAllocator::new(&backend.context()?, MemoryKind::Device)?;
//! let pool = MemoryPool::new(alloc, PoolConfig::default())?;
//! let buf = pool.acquire(4096)?; // cuMemAlloc on a miss, a bucket hit afterwards
//! assert!(buf.device_addr() != 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Arc;

use gyre_core::memory::{MemoryKind, RawAllocator, RawBlock};
use parking_lot::Mutex;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::memory::{DeviceBuffer, PinnedBuffer, UnifiedBuffer};

/// Alignment every device and managed allocation has (the driver guarantees 256 bytes).
const DEVICE_ALIGN: usize = 256;
/// Alignment of `cuMemHostAlloc` memory (pages).
const PINNED_ALIGN: usize = 4096;

/// The buffer owning a live block; held only to be dropped (freed) in `free`.
#[allow(dead_code)] // the fields are owners, never read
enum Live {
    Device(DeviceBuffer<u8>),
    Pinned(PinnedBuffer<u8>),
    Unified(UnifiedBuffer<u8>),
}

/// A CUDA [`RawAllocator`] of one [`MemoryKind`] (not [`MemoryKind::Host`]).
pub struct CudaAllocator {
    ctx: Arc<Context>,
    kind: MemoryKind,
    live: Mutex<HashMap<u64, Live>>,
}

impl core::fmt::Debug for CudaAllocator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudaAllocator")
            .field("kind", &self.kind)
            .field("live", &self.live.lock().len())
            .finish()
    }
}

impl CudaAllocator {
    /// An allocator of `kind` memory on `ctx`'s device.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for [`MemoryKind::Host`] (use gyre-core's `HostAllocator`).
    pub fn new(ctx: &Arc<Context>, kind: MemoryKind) -> Result<Self> {
        if kind == MemoryKind::Host {
            return Err(Error::InvalidInput {
                what: "CudaAllocator kind Host".into(),
                reason: "host memory comes from gyre_core::memory::HostAllocator",
            });
        }
        Ok(Self {
            ctx: ctx.clone(),
            kind,
            live: Mutex::new(HashMap::new()),
        })
    }

    /// Blocks handed out and not yet freed.
    pub fn live_blocks(&self) -> usize {
        self.live.lock().len()
    }

    fn alloc_inner(&self, bytes: usize, align: usize) -> Result<(RawBlock, Live)> {
        let max_align = match self.kind {
            MemoryKind::PinnedMapped => PINNED_ALIGN,
            _ => DEVICE_ALIGN,
        };
        if bytes == 0 || !align.is_power_of_two() || align > max_align {
            return Err(Error::InvalidInput {
                what: format!("allocation of {bytes} bytes aligned to {align}"),
                reason: "needs bytes > 0 and a power-of-two alignment the driver guarantees \
                         (256 device/managed, 4096 pinned)",
            });
        }
        Ok(match self.kind {
            MemoryKind::Device => {
                let b = DeviceBuffer::<u8>::zeroed(&self.ctx, bytes)?;
                (
                    RawBlock::new(None, b.device_ptr(), bytes, align),
                    Live::Device(b),
                )
            }
            MemoryKind::PinnedMapped => {
                let b = PinnedBuffer::<u8>::zeroed(&self.ctx, bytes)?;
                let host = Some(b.host_ptr());
                (
                    RawBlock::new(host, b.device_ptr(), bytes, align),
                    Live::Pinned(b),
                )
            }
            MemoryKind::Unified | MemoryKind::Host => {
                let b = UnifiedBuffer::<u8>::zeroed(&self.ctx, bytes)?;
                let host = NonNull::new(b.device_ptr() as usize as *mut u8);
                (
                    RawBlock::new(host, b.device_ptr(), bytes, align),
                    Live::Unified(b),
                )
            }
        })
    }
}

// SAFETY: (1) sizes are exact and the driver's alignment (256 device/managed, 4096 pinned)
// covers every accepted `align`; (2) pinned and managed blocks carry their host pointer
// (managed memory is one address on both sides), device blocks none; all are zeroed by
// the typed buffers; (3) each block is owned by its buffer in `live` until `free` drops
// it; (4) the table is behind a mutex and the driver API is thread-safe (the buffers bind
// the context on every call).
unsafe impl RawAllocator for CudaAllocator {
    fn kind(&self) -> MemoryKind {
        self.kind
    }

    fn alloc(&self, bytes: usize, align: usize) -> gyre_core::Result<RawBlock> {
        let (block, live) = self.alloc_inner(bytes, align).map_err(|e| {
            tracing::debug!(error = %e, bytes, align, "CUDA pool allocation failed");
            gyre_core::Error::Alloc { size: bytes, align }
        })?;
        self.live.lock().insert(block.device_addr(), live);
        Ok(block)
    }

    unsafe fn free(&self, block: RawBlock) {
        // Dropping the buffer frees it (cuMemFree / cuMemFreeHost) with the context bound.
        if self.live.lock().remove(&block.device_addr()).is_none() {
            tracing::error!(
                addr = block.device_addr(),
                "CudaAllocator::free of a block it did not allocate (ignored)"
            );
        }
    }
}
