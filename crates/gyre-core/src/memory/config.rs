//! [`PoolConfig`]: bucket sizes, alignment and retention caps of a [`MemoryPool`](super::MemoryPool).

use crate::{Error, Result};

/// The largest bucket a pool accepts (`2^62` on 64-bit targets), so rounding up never
/// overflows.
const MAX_BUCKET_LIMIT: usize = 1 << (usize::BITS - 2);

/// Sizes and caps of a [`MemoryPool`](super::MemoryPool). Checked by [`MemoryPool::new`](super::MemoryPool::new).
///
/// # Examples
///
/// ```
/// use gyre_core::memory::PoolConfig;
///
/// let config = PoolConfig::default()
///     .with_buckets(4096, 1 << 20)
///     .with_retention(16, 64 << 20);
/// assert_eq!(config.min_bucket, 4096);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Smallest bucket in bytes (a power of two); smaller requests round up to it.
    pub min_bucket: usize,
    /// Largest bucket in bytes (a power of two, at most `2^62`); a larger request fails
    /// with [`Error::InvalidArgument`] naming `bytes` (it does not bypass the pool).
    pub max_bucket: usize,
    /// Alignment of every block (a power of two).
    pub align: usize,
    /// Most free blocks kept per bucket; returns beyond it are freed.
    pub max_retained_per_bucket: usize,
    /// Most bytes kept in all free lists together; returns beyond it are freed.
    pub max_retained_bytes: usize,
}

impl Default for PoolConfig {
    /// 256 B ..= 1 GiB buckets, 256-byte alignment, at most 64 blocks per bucket and
    /// 256 MiB retained in all.
    fn default() -> Self {
        PoolConfig {
            min_bucket: 256,
            max_bucket: 1 << 30,
            align: 256,
            max_retained_per_bucket: 64,
            max_retained_bytes: 256 << 20,
        }
    }
}

impl PoolConfig {
    /// Sets the smallest and largest bucket.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::PoolConfig;
    /// assert_eq!(PoolConfig::default().with_buckets(512, 4096).max_bucket, 4096);
    /// ```
    pub const fn with_buckets(mut self, min_bucket: usize, max_bucket: usize) -> Self {
        self.min_bucket = min_bucket;
        self.max_bucket = max_bucket;
        self
    }

    /// Sets the block alignment.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::PoolConfig;
    /// assert_eq!(PoolConfig::default().with_align(4096).align, 4096);
    /// ```
    pub const fn with_align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// Sets the retention caps (per bucket, in blocks; in total, in bytes).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::memory::PoolConfig;
    /// assert_eq!(PoolConfig::default().with_retention(0, 0).max_retained_per_bucket, 0);
    /// ```
    pub const fn with_retention(mut self, per_bucket: usize, total_bytes: usize) -> Self {
        self.max_retained_per_bucket = per_bucket;
        self.max_retained_bytes = total_bytes;
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        let bad = |name, value: usize, reason| {
            Err(Error::InvalidArgument {
                name,
                value: value.to_string(),
                reason,
            })
        };
        if !self.min_bucket.is_power_of_two() {
            return bad("min_bucket", self.min_bucket, "must be a power of two");
        }
        if !self.max_bucket.is_power_of_two() || self.max_bucket > MAX_BUCKET_LIMIT {
            return bad(
                "max_bucket",
                self.max_bucket,
                "must be a power of two <= 2^62",
            );
        }
        if self.max_bucket < self.min_bucket {
            return bad("max_bucket", self.max_bucket, "must be >= min_bucket");
        }
        if !self.align.is_power_of_two() {
            return bad("align", self.align, "must be a power of two");
        }
        Ok(())
    }
}
