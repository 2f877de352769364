//! Memory: the memory kinds, the allocator trait each backend implements, and a bucketed
//! [`MemoryPool`] over it.
//!
//! * [`MemoryKind`] — where a block lives (device, pinned-and-mapped, unified, plain host).
//! * [`RawAllocator`] — the `unsafe` trait a backend implements; it hands out [`RawBlock`]s.
//! * [`HostAllocator`] — aligned, zeroed host memory (the CPU backend, and tests).
//! * [`MemoryPool`] — power-of-two buckets with RAII [`PooledBuffer`]s and
//!   hit / miss / return / peak statistics ([`PoolStats`]).
//!
//! # Examples
//!
//! ```
//! use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
//!
//! let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
//! let buf = pool.acquire(1000)?; // served from the 1024-byte bucket
//! assert_eq!((buf.len(), buf.capacity()), (1000, 1024));
//! drop(buf); // back to the pool
//! let again = pool.acquire(600)?; // a hit: same bucket, no allocation
//! assert_eq!(pool.stats().hits, 1);
//! # drop(again);
//! # Ok::<(), gyre_core::Error>(())
//! ```

mod buffer;
mod config;
mod host;
mod pool;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_concurrent;

use std::ptr::NonNull;
use std::sync::Arc;

use crate::Result;

pub use buffer::PooledBuffer;
pub use config::PoolConfig;
pub use host::HostAllocator;
pub use pool::{MemoryPool, PoolStats};

/// Where a block of memory lives, and so who can address it.
///
/// # Examples
///
/// ```
/// use gyre_core::memory::MemoryKind;
///
/// assert!(MemoryKind::PinnedMapped.is_host_accessible());
/// assert!(!MemoryKind::Device.is_host_accessible());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// Device memory: only a device address, no host pointer.
    Device,
    /// Page-locked host memory mapped into the device's address space (zero copy).
    PinnedMapped,
    /// Unified (managed) memory: one address valid on host and device.
    Unified,
    /// Ordinary host memory (the CPU backend; tests).
    Host,
}

impl MemoryKind {
    /// Whether blocks of this kind carry a host pointer ([`RawBlock::host_ptr`] is `Some`).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::MemoryKind;
    ///
    /// assert!(MemoryKind::Host.is_host_accessible());
    /// ```
    pub const fn is_host_accessible(self) -> bool {
        !matches!(self, MemoryKind::Device)
    }

    /// A short lower-case name, for logs and `gyre doctor`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::MemoryKind;
    ///
    /// assert_eq!(MemoryKind::PinnedMapped.name(), "pinned-mapped");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device",
            MemoryKind::PinnedMapped => "pinned-mapped",
            MemoryKind::Unified => "unified",
            MemoryKind::Host => "host",
        }
    }
}

/// One allocation handed out by a [`RawAllocator`]: host pointer (if host-addressable),
/// device address, size and alignment.
///
/// A `RawBlock` is an inert handle: it is neither `Copy` nor `Clone` (so safe code cannot
/// duplicate it into a double free), it frees nothing when dropped (dropping one leaks the
/// memory), and reading or writing through its pointer or address needs `unsafe` code that
/// upholds the allocator's contract.
///
/// # Examples
///
/// ```
/// use gyre_core::memory::{HostAllocator, RawAllocator};
///
/// let block = HostAllocator.alloc(64, 16)?;
/// assert_eq!(block.size(), 64);
/// assert_eq!(block.device_addr() % 16, 0);
/// // SAFETY: `block` came from `HostAllocator::alloc` and is freed once.
/// unsafe { HostAllocator.free(block) };
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct RawBlock {
    host_ptr: Option<NonNull<u8>>,
    device_addr: u64,
    size: usize,
    align: usize,
}

// SAFETY: a RawBlock is an address plus sizes; it grants no access by itself (every access
// goes through `unsafe` code bound by the `RawAllocator` contract), and `RawAllocator`
// requires that `free` be callable from any thread. Moving or sharing the handle across
// threads is therefore sound.
unsafe impl Send for RawBlock {}
// SAFETY: `&RawBlock` only exposes plain values (see the `Send` impl above).
unsafe impl Sync for RawBlock {}

impl RawBlock {
    /// Describes a block. Allocators call this in [`RawAllocator::alloc`]; building a block
    /// is safe, but only a block from `alloc` may be passed to [`RawAllocator::free`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::RawBlock;
    ///
    /// let block = RawBlock::new(None, 0x7000_0000, 4096, 256); // a device-only block
    /// assert!(block.host_ptr().is_none());
    /// ```
    pub const fn new(
        host_ptr: Option<NonNull<u8>>,
        device_addr: u64,
        size: usize,
        align: usize,
    ) -> Self {
        RawBlock {
            host_ptr,
            device_addr,
            size,
            align,
        }
    }

    /// The host pointer, `None` for device-only memory.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::RawBlock;
    /// assert!(RawBlock::new(None, 0, 1, 1).host_ptr().is_none());
    /// ```
    pub const fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.host_ptr
    }

    /// The address the device uses (for host memory on the CPU backend, the host address).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::RawBlock;
    /// assert_eq!(RawBlock::new(None, 42, 1, 1).device_addr(), 42);
    /// ```
    pub const fn device_addr(&self) -> u64 {
        self.device_addr
    }

    /// Usable bytes (at least what was requested).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::RawBlock;
    /// assert_eq!(RawBlock::new(None, 0, 128, 1).size(), 128);
    /// ```
    pub const fn size(&self) -> usize {
        self.size
    }

    /// The alignment the block was allocated with (a power of two).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::RawBlock;
    /// assert_eq!(RawBlock::new(None, 0, 128, 64).align(), 64);
    /// ```
    pub const fn align(&self) -> usize {
        self.align
    }
}

/// The allocator a backend implements for each [`MemoryKind`] it offers.
///
/// # Safety
///
/// Implementors promise, for every `Ok(block)` returned by `alloc(bytes, align)`:
///
/// 1. `block.size() >= bytes` and `block.align() == align`; the device address (and the
///    host pointer, if any) is a multiple of `align`.
/// 2. `block.host_ptr()` is `Some` exactly when `self.kind().is_host_accessible()`; when it
///    is, the pointer is valid for host reads and writes of `block.size()` bytes, and those
///    bytes are *initialized* (zeroing them is enough), so they may be viewed as `[u8]`.
/// 3. The memory stays valid, and overlaps no other live block, until the block is passed
///    to `free`.
/// 4. `alloc` and `free` may be called from any thread, concurrently.
///
/// `alloc` rejects `bytes == 0` or an `align` that is not a power of two with an error
/// (it must not panic), and reports exhaustion as [`crate::Error::Alloc`].
///
/// # Examples
///
/// ```
/// use gyre_core::memory::{HostAllocator, MemoryKind, RawAllocator, RawBlock};
/// use gyre_core::Result;
///
/// /// Counts allocations, delegating to the host allocator.
/// struct Counting(std::sync::atomic::AtomicUsize);
///
/// // SAFETY: every block comes from, and goes back to, `HostAllocator` unchanged.
/// unsafe impl RawAllocator for Counting {
///     fn kind(&self) -> MemoryKind { MemoryKind::Host }
///     fn alloc(&self, bytes: usize, align: usize) -> Result<RawBlock> {
///         self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
///         HostAllocator.alloc(bytes, align)
///     }
///     unsafe fn free(&self, block: RawBlock) {
///         // SAFETY: the caller passes a block from our `alloc`, i.e. from HostAllocator.
///         unsafe { HostAllocator.free(block) }
///     }
/// }
/// ```
pub unsafe trait RawAllocator: Send + Sync {
    /// The kind of memory this allocator hands out.
    fn kind(&self) -> MemoryKind;

    /// Allocates at least `bytes` bytes aligned to `align` (a power of two).
    fn alloc(&self, bytes: usize, align: usize) -> Result<RawBlock>;

    /// Gives a block back.
    ///
    /// # Safety
    ///
    /// `block` was returned by `alloc` on this allocator (or one sharing its underlying
    /// context, such as a clone of the same `Arc`), has not been freed since, and nothing
    /// (host or device) still accesses its memory.
    unsafe fn free(&self, block: RawBlock);
}

// SAFETY: delegates every call to the shared allocator, so its guarantees carry over; a
// block from one clone of the `Arc` is a block of the same underlying allocator.
unsafe impl<A: RawAllocator + ?Sized> RawAllocator for Arc<A> {
    fn kind(&self) -> MemoryKind {
        (**self).kind()
    }
    fn alloc(&self, bytes: usize, align: usize) -> Result<RawBlock> {
        (**self).alloc(bytes, align)
    }
    unsafe fn free(&self, block: RawBlock) {
        // SAFETY: forwarded verbatim; the caller upholds `free`'s contract for `A`.
        unsafe { (**self).free(block) }
    }
}
