//! [`MemoryPool`]: power-of-two buckets of blocks from one [`RawAllocator`].

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{PoolConfig, PooledBuffer, RawAllocator, RawBlock};
use crate::{Error, Result};

/// Counters of a [`MemoryPool`], from [`MemoryPool::stats`].
///
/// Each field is read atomically but not all together: while other threads use the pool
/// the fields may be from slightly different instants. Once the pool is quiescent they
/// satisfy `hits + misses == returns + live_buffers` and
/// `returns == kept + discarded`. Byte figures count bucket sizes, not requested sizes.
///
/// # Examples
///
/// ```
/// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
///
/// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
/// drop(pool.acquire(300)?);
/// let s = pool.stats();
/// assert_eq!((s.misses, s.returns, s.peak_live_bytes, s.retained_bytes), (1, 1, 512, 512));
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Acquires served from a free list.
    pub hits: u64,
    /// Acquires served by a fresh allocation.
    pub misses: u64,
    /// Acquires that failed (the allocator failed even after a trim).
    pub alloc_failures: u64,
    /// Buffers given back (dropped).
    pub returns: u64,
    /// Returns kept in a free list.
    pub kept: u64,
    /// Returns freed at once because a retention cap was reached.
    pub discarded: u64,
    /// Blocks freed by [`MemoryPool::trim`] (including the trim before an allocation retry).
    pub trimmed: u64,
    /// Buffers currently out.
    pub live_buffers: u64,
    /// Bytes currently out.
    pub live_bytes: u64,
    /// Highest `live_bytes` so far.
    pub peak_live_bytes: u64,
    /// Blocks in the free lists.
    pub retained_blocks: u64,
    /// Bytes in the free lists.
    pub retained_bytes: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    alloc_failures: AtomicU64,
    returns: AtomicU64,
    kept: AtomicU64,
    discarded: AtomicU64,
    trimmed: AtomicU64,
    live_buffers: AtomicU64,
    live_bytes: AtomicU64,
    peak_live_bytes: AtomicU64,
    retained_blocks: AtomicU64,
    retained_bytes: AtomicU64,
}

/// A pool of blocks from one allocator, in power-of-two buckets from
/// [`PoolConfig::min_bucket`] to [`PoolConfig::max_bucket`], each with a mutex-guarded
/// free list. Shared as `Arc<MemoryPool<A>>`: every [`PooledBuffer`] holds the `Arc`, so a
/// buffer may be dropped (returned) on any thread, and the pool outlives its buffers.
/// Dropping the pool frees every retained block.
///
/// # Examples
///
/// ```
/// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
///
/// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
/// let mut buf = pool.acquire(100)?;
/// buf.as_mut_slice().expect("host memory")[0] = 7;
/// std::thread::spawn(move || drop(buf)).join().expect("thread"); // returned elsewhere
/// assert_eq!(pool.stats().retained_blocks, 1);
/// assert_eq!(pool.trim(), 256);
/// # Ok::<(), gyre_core::Error>(())
/// ```
pub struct MemoryPool<A: RawAllocator> {
    alloc: A,
    config: PoolConfig,
    /// `free[i]` holds blocks of `min_bucket << i` bytes.
    free: Box<[Mutex<Vec<RawBlock>>]>,
    counters: Counters,
}

impl<A: RawAllocator> MemoryPool<A> {
    /// A pool over `alloc`; fails with [`Error::InvalidArgument`] on a bad `config`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    ///
    /// assert!(MemoryPool::new(HostAllocator, PoolConfig::default().with_align(3)).is_err());
    /// ```
    pub fn new(alloc: A, config: PoolConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let buckets =
            (config.max_bucket.trailing_zeros() - config.min_bucket.trailing_zeros()) as usize + 1;
        Ok(Arc::new(MemoryPool {
            alloc,
            config,
            free: (0..buckets).map(|_| Mutex::new(Vec::new())).collect(),
            counters: Counters::default(),
        }))
    }

    /// The bucket size a request of `bytes` is served from: the next power of two, at
    /// least `min_bucket`. Fails with [`Error::InvalidArgument`] above `max_bucket`.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    ///
    /// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.bucket_size(0)?, 256);
    /// assert_eq!(pool.bucket_size(257)?, 512);
    /// assert!(pool.bucket_size((1 << 30) + 1).is_err());
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn bucket_size(&self, bytes: usize) -> Result<usize> {
        self.bucket_of(bytes).map(|(_, size)| size)
    }

    fn bucket_of(&self, bytes: usize) -> Result<(usize, usize)> {
        if bytes > self.config.max_bucket {
            return Err(Error::InvalidArgument {
                name: "bytes",
                value: format!("{bytes} (largest bucket {})", self.config.max_bucket),
                reason: "a pooled buffer must fit the pool's largest bucket",
            });
        }
        // `bytes <= max_bucket <= 2^62`, so this cannot overflow.
        let size = bytes.max(self.config.min_bucket).next_power_of_two();
        let index = (size.trailing_zeros() - self.config.min_bucket.trailing_zeros()) as usize;
        Ok((index, size))
    }

    /// A buffer of `bytes` bytes from the matching bucket: a retained block if there is one
    /// (a hit), else a fresh allocation (a miss). If the allocator fails while blocks are
    /// retained, the pool trims itself and retries once.
    ///
    /// The contents are unspecified: a fresh block is what the allocator gives
    /// ([`super::HostAllocator`] zeroes it), a reused one holds what its last user left.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    ///
    /// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// let buf = pool.acquire(5000)?;
    /// assert_eq!((buf.len(), buf.capacity()), (5000, 8192));
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn acquire(self: &Arc<Self>, bytes: usize) -> Result<PooledBuffer<A>> {
        let (index, size) = self.bucket_of(bytes)?;
        let c = &self.counters;
        let popped = self.free[index].lock().pop();
        let block = match popped {
            Some(block) => {
                c.retained_blocks.fetch_sub(1, Relaxed);
                c.retained_bytes.fetch_sub(size as u64, Relaxed);
                c.hits.fetch_add(1, Relaxed);
                block
            }
            None => {
                let block = self.alloc_fresh(size)?;
                c.misses.fetch_add(1, Relaxed);
                block
            }
        };
        c.live_buffers.fetch_add(1, Relaxed);
        let live = c.live_bytes.fetch_add(size as u64, Relaxed) + size as u64;
        c.peak_live_bytes.fetch_max(live, Relaxed);
        Ok(PooledBuffer::new(Arc::clone(self), block, bytes, index))
    }

    fn alloc_fresh(&self, size: usize) -> Result<RawBlock> {
        match self.alloc.alloc(size, self.config.align) {
            Ok(block) => Ok(block),
            Err(_) if self.counters.retained_blocks.load(Relaxed) > 0 => {
                self.trim();
                self.alloc.alloc(size, self.config.align).inspect_err(|_| {
                    self.counters.alloc_failures.fetch_add(1, Relaxed);
                })
            }
            Err(e) => {
                self.counters.alloc_failures.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }

    /// Takes back the block of a dropped [`PooledBuffer`] from bucket `index`.
    pub(super) fn give_back(&self, block: RawBlock, index: usize) {
        let c = &self.counters;
        let size = (self.config.min_bucket << index) as u64;
        c.returns.fetch_add(1, Relaxed);
        c.live_buffers.fetch_sub(1, Relaxed);
        c.live_bytes.fetch_sub(size, Relaxed);
        // Reserve room under the total cap first, so it is never exceeded.
        let cap = self.config.max_retained_bytes as u64;
        let reserved = c
            .retained_bytes
            .fetch_update(Relaxed, Relaxed, |cur| {
                cur.checked_add(size).filter(|&n| n <= cap)
            })
            .is_ok();
        if reserved {
            let mut list = self.free[index].lock();
            if list.len() < self.config.max_retained_per_bucket {
                list.push(block);
                drop(list);
                c.retained_blocks.fetch_add(1, Relaxed);
                c.kept.fetch_add(1, Relaxed);
                return;
            }
            drop(list);
            c.retained_bytes.fetch_sub(size, Relaxed);
        }
        c.discarded.fetch_add(1, Relaxed);
        // SAFETY: the block came from `self.alloc.alloc` (in `alloc_fresh`), was owned by
        // exactly one `PooledBuffer`, which is being dropped, and is now in no free list.
        unsafe { self.alloc.free(block) }
    }

    /// Frees every retained block; returns the bytes freed. Buffers that are out are
    /// untouched.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    ///
    /// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// drop(pool.acquire(1024)?);
    /// assert_eq!(pool.trim(), 1024);
    /// assert_eq!(pool.stats().retained_bytes, 0);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn trim(&self) -> usize {
        let mut freed = 0;
        for (index, list) in self.free.iter().enumerate() {
            let size = self.config.min_bucket << index;
            let blocks = std::mem::take(&mut *list.lock());
            for block in blocks {
                self.counters.retained_blocks.fetch_sub(1, Relaxed);
                self.counters.retained_bytes.fetch_sub(size as u64, Relaxed);
                self.counters.trimmed.fetch_add(1, Relaxed);
                freed += size;
                // SAFETY: blocks in a free list came from `self.alloc.alloc`, are owned by
                // the list alone, and were just removed from it.
                unsafe { self.alloc.free(block) }
            }
        }
        freed
    }

    /// A snapshot of the counters (see [`PoolStats`] for how consistent it is).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    ///
    /// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// let _buf = pool.acquire(1)?;
    /// assert_eq!(pool.stats().live_bytes, 256);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn stats(&self) -> PoolStats {
        let c = &self.counters;
        PoolStats {
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            alloc_failures: c.alloc_failures.load(Relaxed),
            returns: c.returns.load(Relaxed),
            kept: c.kept.load(Relaxed),
            discarded: c.discarded.load(Relaxed),
            trimmed: c.trimmed.load(Relaxed),
            live_buffers: c.live_buffers.load(Relaxed),
            live_bytes: c.live_bytes.load(Relaxed),
            peak_live_bytes: c.peak_live_bytes.load(Relaxed),
            retained_blocks: c.retained_blocks.load(Relaxed),
            retained_bytes: c.retained_bytes.load(Relaxed),
        }
    }

    /// The configuration the pool was built with.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryPool, PoolConfig};
    /// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.config().min_bucket, 256);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The allocator underneath.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::{HostAllocator, MemoryKind, MemoryPool, PoolConfig, RawAllocator};
    /// let pool = MemoryPool::new(HostAllocator, PoolConfig::default())?;
    /// assert_eq!(pool.allocator().kind(), MemoryKind::Host);
    /// # Ok::<(), gyre_core::Error>(())
    /// ```
    pub fn allocator(&self) -> &A {
        &self.alloc
    }
}

impl<A: RawAllocator> Drop for MemoryPool<A> {
    fn drop(&mut self) {
        // No buffer is out (each holds an `Arc` of the pool), so the lists own every block.
        self.trim();
    }
}

impl<A: RawAllocator> fmt::Debug for MemoryPool<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryPool")
            .field("kind", &self.alloc.kind())
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}
