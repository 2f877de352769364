//! [`PooledBuffer`]: a block lent by a [`MemoryPool`], returned on drop.

use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use super::{MemoryKind, MemoryPool, RawAllocator, RawBlock};

/// A block lent by a [`MemoryPool`]; dropping it gives the block back (on any thread).
///
/// [`len`](Self::len) is the size requested, [`capacity`](Self::capacity) the bucket size.
/// Host-accessible kinds can be viewed as bytes ([`as_slice`](Self::as_slice)); every kind
/// has a [`device_addr`](Self::device_addr) to hand to a kernel. Do not hold a slice while
/// a device may write the same memory.
///
/// # Examples
///
/// ```
/// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
///
/// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
/// let mut buf = pool.acquire(3)?;
/// buf.as_mut_slice().expect("host memory").copy_from_slice(b"abc");
/// assert_eq!(buf.as_slice(), Some(&b"abc"[..]));
/// # Ok::<(), gyre_core::Error>(())
/// ```
pub struct PooledBuffer<A: RawAllocator> {
    /// Taken only in `drop`.
    block: ManuallyDrop<RawBlock>,
    len: usize,
    bucket: usize,
    pool: Arc<MemoryPool<A>>,
}

impl<A: RawAllocator> PooledBuffer<A> {
    pub(super) fn new(
        pool: Arc<MemoryPool<A>>,
        block: RawBlock,
        len: usize,
        bucket: usize,
    ) -> Self {
        PooledBuffer {
            block: ManuallyDrop::new(block),
            len,
            bucket,
            pool,
        }
    }

    /// The bytes requested.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.acquire(10)?.len(), 10);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether zero bytes were requested.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert!(pool.acquire(0)?.is_empty());
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bucket size: bytes usable through the raw pointer or device address.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.acquire(10)?.capacity(), 256);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.pool.config().min_bucket << self.bucket
    }

    /// The memory kind of the pool's allocator.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryKind, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.acquire(10)?.kind(), MemoryKind::Host);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn kind(&self) -> MemoryKind {
        self.pool.allocator().kind()
    }

    /// The address the device uses.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.acquire(10)?.device_addr() % 256, 0);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn device_addr(&self) -> u64 {
        self.block.device_addr()
    }

    /// The host pointer (valid for [`capacity`](Self::capacity) bytes), `None` for device
    /// memory.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert!(pool.acquire(10)?.host_ptr().is_some());
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn host_ptr(&self) -> Option<NonNull<u8>> {
        self.block.host_ptr()
    }

    /// The first [`len`](Self::len) bytes, `None` for device memory.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.acquire(4)?.as_slice(), Some(&[0u8; 4][..])); // fresh host memory
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn as_slice(&self) -> Option<&[u8]> {
        let ptr = self.block.host_ptr()?;
        // SAFETY: by the `RawAllocator` contract the host pointer is valid for
        // `block.size() >= capacity >= len` initialized bytes until freed; this buffer owns
        // the block exclusively, and the borrow of `self` keeps it from being freed.
        Some(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), self.len) })
    }

    /// The first [`len`](Self::len) bytes, writable; `None` for device memory.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// let mut buf = pool.acquire(4)?;
    /// buf.as_mut_slice().expect("host").fill(9);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        let ptr = self.block.host_ptr()?;
        // SAFETY: as in `as_slice`; `&mut self` makes this the only host view.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len) })
    }

    /// The underlying block (to build typed views or to pass to a backend).
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.acquire(10)?.raw().align(), 256);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn raw(&self) -> &RawBlock {
        &self.block
    }

    /// The pool this buffer goes back to.
    ///
    /// # Examples
    ///
    /// ```
    /// # use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// # let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// let buf = pool.acquire(10)?;
    /// assert!(std::sync::Arc::ptr_eq(buf.pool(), &pool));
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn pool(&self) -> &Arc<MemoryPool<A>> {
        &self.pool
    }
}

impl<A: RawAllocator> Drop for PooledBuffer<A> {
    fn drop(&mut self) {
        // SAFETY: `block` is taken exactly once, here, and never used afterwards.
        let block = unsafe { ManuallyDrop::take(&mut self.block) };
        self.pool.give_back(block, self.bucket);
    }
}

impl<A: RawAllocator> fmt::Debug for PooledBuffer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("kind", &self.kind())
            .field("device_addr", &format_args!("{:#x}", self.device_addr()))
            .finish()
    }
}
