//! Unit tests of the memory module, and the counting allocator the tests share.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use parking_lot::Mutex;

use super::*;
use crate::Error;

/// A [`HostAllocator`] that counts allocations and frees, checks every free against the
/// set of live blocks (catching double and foreign frees), and can fail on demand.
#[derive(Default)]
pub(super) struct Counting {
    pub allocs: AtomicU64,
    pub frees: AtomicU64,
    /// The next this-many allocations fail.
    pub fail_next: AtomicUsize,
    live: Mutex<HashSet<u64>>,
}

impl Counting {
    pub fn new() -> Arc<Self> {
        Arc::new(Counting::default())
    }
    pub fn outstanding(&self) -> u64 {
        self.allocs.load(SeqCst) - self.frees.load(SeqCst)
    }
}

// SAFETY: blocks come from and go back to `HostAllocator` unchanged.
unsafe impl RawAllocator for Counting {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Host
    }
    fn alloc(&self, bytes: usize, align: usize) -> Result<RawBlock> {
        let failing = self
            .fail_next
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(Error::Alloc { size: bytes, align });
        }
        let block = HostAllocator.alloc(bytes, align)?;
        assert!(
            self.live.lock().insert(block.device_addr()),
            "address reused while live"
        );
        self.allocs.fetch_add(1, SeqCst);
        Ok(block)
    }
    unsafe fn free(&self, block: RawBlock) {
        assert!(
            self.live.lock().remove(&block.device_addr()),
            "free of a block not live"
        );
        self.frees.fetch_add(1, SeqCst);
        // SAFETY: the block came from `HostAllocator::alloc` in `alloc` above.
        unsafe { HostAllocator.free(block) }
    }
}

pub(super) fn small_config() -> PoolConfig {
    PoolConfig::default().with_buckets(256, 4096)
}

#[test]
fn bucket_rounding() {
    let pool = MemoryPool::new(HostAllocator, PoolConfig::default()).unwrap();
    for (bytes, bucket) in [
        (0, 256),
        (1, 256),
        (255, 256),
        (256, 256),
        (257, 512),
        (1024, 1024),
        (1025, 2048),
        ((1 << 20) - 1, 1 << 20),
        (1 << 30, 1 << 30),
    ] {
        assert_eq!(pool.bucket_size(bytes).unwrap(), bucket, "bytes {bytes}");
    }
    for bytes in [(1 << 30) + 1, usize::MAX] {
        match pool.bucket_size(bytes) {
            Err(Error::InvalidArgument {
                name: "bytes",
                value,
                ..
            }) => {
                assert!(value.starts_with(&bytes.to_string()), "{value}")
            }
            other => panic!("{bytes}: {other:?}"),
        }
        assert!(pool.acquire(bytes).is_err());
    }
    assert_eq!(
        pool.stats(),
        PoolStats::default(),
        "rejected requests count nothing"
    );
}

#[test]
fn small_pool_edges_and_zero_length() {
    let pool = MemoryPool::new(HostAllocator, small_config()).unwrap();
    assert_eq!(pool.bucket_size(4096).unwrap(), 4096);
    assert!(pool.bucket_size(4097).is_err());
    let empty = pool.acquire(0).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.capacity(), 256);
    assert_eq!(empty.as_slice(), Some(&[][..]));
    let single = MemoryPool::new(HostAllocator, PoolConfig::default().with_buckets(64, 64));
    assert_eq!(single.unwrap().bucket_size(64).unwrap(), 64);
}

#[test]
fn config_validation() {
    let bad = [
        PoolConfig::default().with_buckets(0, 1024),
        PoolConfig::default().with_buckets(300, 1024),
        PoolConfig::default().with_buckets(256, 1000),
        PoolConfig::default().with_buckets(1024, 256),
        PoolConfig::default().with_buckets(256, 1 << (usize::BITS - 1)),
        PoolConfig::default().with_align(0),
        PoolConfig::default().with_align(48),
    ];
    for config in bad {
        let err = MemoryPool::new(HostAllocator, config).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { .. }),
            "{config:?}: {err}"
        );
    }
}

#[test]
fn host_allocator_contract() {
    for align in [1, 8, 256, 4096] {
        let block = HostAllocator.alloc(1000, align).unwrap();
        let ptr = block.host_ptr().unwrap();
        assert_eq!(ptr.as_ptr() as u64, block.device_addr());
        assert_eq!(block.device_addr() % align as u64, 0);
        assert_eq!((block.size(), block.align()), (1000, align));
        // SAFETY: valid for 1000 initialized bytes until freed below.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), 1000) };
        assert!(bytes.iter().all(|&b| b == 0));
        // SAFETY: from `alloc`, freed once.
        unsafe { HostAllocator.free(block) };
    }
    assert!(matches!(
        HostAllocator.alloc(64, 3),
        Err(Error::InvalidArgument { name: "align", .. })
    ));
    assert!(matches!(
        HostAllocator.alloc(0, 8),
        Err(Error::InvalidArgument { name: "bytes", .. })
    ));
    assert!(matches!(
        HostAllocator.alloc(usize::MAX - 8, 8),
        Err(Error::Alloc { .. })
    ));
}

#[test]
fn hit_miss_return_peak_accounting() {
    let counting = Counting::new();
    let pool = MemoryPool::new(Arc::clone(&counting), small_config()).unwrap();
    let a = pool.acquire(100).unwrap(); // 256
    let b = pool.acquire(300).unwrap(); // 512
    let c = pool.acquire(3000).unwrap(); // 4096
    let s = pool.stats();
    assert_eq!((s.hits, s.misses, s.returns), (0, 3, 0));
    assert_eq!(
        (s.live_buffers, s.live_bytes, s.peak_live_bytes),
        (3, 4864, 4864)
    );
    drop(b);
    drop(c);
    let s = pool.stats();
    assert_eq!(
        (s.returns, s.kept, s.live_bytes, s.peak_live_bytes),
        (2, 2, 256, 4864)
    );
    assert_eq!((s.retained_blocks, s.retained_bytes), (2, 4608));
    let d = pool.acquire(512).unwrap(); // hit in the 512 bucket
    let e = pool.acquire(400).unwrap(); // miss: the 512 list is empty again
    let s = pool.stats();
    assert_eq!((s.hits, s.misses), (1, 4));
    assert_eq!(
        (s.retained_blocks, s.retained_bytes, s.live_bytes),
        (1, 4096, 1280)
    );
    assert_eq!(counting.outstanding(), 4);
    drop((a, d, e));
    let s = pool.stats();
    assert_eq!(s.hits + s.misses, s.returns + s.live_buffers);
    assert_eq!(
        (s.live_bytes, s.retained_bytes, s.peak_live_bytes),
        (0, 4096 + 1280, 4864)
    );
    drop(pool);
    assert_eq!(counting.outstanding(), 0, "pool drop frees what it retains");
}

#[test]
fn per_bucket_cap() {
    let counting = Counting::new();
    let pool = MemoryPool::new(
        Arc::clone(&counting),
        small_config().with_retention(2, 1 << 20),
    );
    let pool = pool.unwrap();
    let bufs: Vec<_> = (0..4).map(|_| pool.acquire(1000).unwrap()).collect();
    drop(bufs);
    let s = pool.stats();
    assert_eq!(
        (s.returns, s.kept, s.discarded, s.retained_blocks),
        (4, 2, 2, 2)
    );
    assert_eq!(counting.frees.load(SeqCst), 2);
    // Another bucket has its own cap.
    let other: Vec<_> = (0..3).map(|_| pool.acquire(4000).unwrap()).collect();
    drop(other);
    assert_eq!(pool.stats().retained_blocks, 4);
}

#[test]
fn total_retained_bytes_cap() {
    let counting = Counting::new();
    let pool = MemoryPool::new(
        Arc::clone(&counting),
        small_config().with_retention(100, 1024),
    );
    let pool = pool.unwrap();
    let bufs: Vec<_> = (0..3).map(|_| pool.acquire(512).unwrap()).collect();
    drop(bufs);
    let s = pool.stats();
    assert_eq!((s.kept, s.discarded, s.retained_bytes), (2, 1, 1024));
    drop(pool.acquire(4096).unwrap()); // cannot fit at all
    assert_eq!(pool.stats().discarded, 2);
    let none = MemoryPool::new(HostAllocator, small_config().with_retention(0, 1 << 20)).unwrap();
    drop(none.acquire(1).unwrap());
    assert_eq!(
        (none.stats().discarded, none.stats().retained_bytes),
        (1, 0)
    );
}

#[test]
fn trim_frees_retained_only() {
    let counting = Counting::new();
    let pool = MemoryPool::new(Arc::clone(&counting), small_config()).unwrap();
    let held = pool.acquire(2000).unwrap();
    drop((pool.acquire(10).unwrap(), pool.acquire(600).unwrap()));
    assert_eq!(pool.trim(), 256 + 1024);
    let s = pool.stats();
    assert_eq!((s.trimmed, s.retained_blocks, s.retained_bytes), (2, 0, 0));
    assert_eq!(counting.outstanding(), 1);
    assert_eq!(pool.trim(), 0);
    drop(held);
    assert_eq!(
        counting.outstanding(),
        1,
        "returned after the trim: retained again"
    );
}

#[test]
fn alloc_failure_and_trim_retry() {
    let counting = Counting::new();
    let pool = MemoryPool::new(Arc::clone(&counting), small_config()).unwrap();
    counting.fail_next.store(1, SeqCst);
    assert_eq!(
        pool.acquire(100).unwrap_err(),
        Error::Alloc {
            size: 256,
            align: 256
        }
    );
    assert_eq!(pool.stats().alloc_failures, 1);
    drop(pool.acquire(4000).unwrap());
    counting.fail_next.store(1, SeqCst); // fails once, then the trim frees the 4096 block
    let buf = pool.acquire(100).unwrap();
    let s = pool.stats();
    assert_eq!(
        (s.alloc_failures, s.trimmed, s.misses, s.retained_bytes),
        (1, 1, 2, 0)
    );
    counting.fail_next.store(2, SeqCst);
    drop(pool.acquire(1000).unwrap_err());
    assert_eq!(pool.stats().alloc_failures, 2);
    drop(buf);
    drop(pool);
    assert_eq!(counting.outstanding(), 0);
}

#[test]
fn buffer_outlives_pool_handle_and_crosses_threads() {
    let counting = Counting::new();
    let pool = MemoryPool::new(Arc::clone(&counting), small_config()).unwrap();
    let mut buf = pool.acquire(16).unwrap();
    buf.as_mut_slice().unwrap().copy_from_slice(&[7; 16]);
    let weak = Arc::downgrade(&pool);
    drop(pool);
    assert_eq!(counting.outstanding(), 1);
    std::thread::spawn(move || {
        assert_eq!(buf.as_slice().unwrap(), &[7; 16]);
        drop(buf);
    })
    .join()
    .unwrap();
    assert!(weak.upgrade().is_none(), "last buffer dropped the pool");
    assert_eq!(counting.outstanding(), 0);
}

#[test]
fn reused_block_keeps_contents_and_address() {
    let pool = MemoryPool::new(HostAllocator, small_config()).unwrap();
    let mut a = pool.acquire(8).unwrap();
    a.as_mut_slice().unwrap().copy_from_slice(b"gyre-mem");
    let addr = a.device_addr();
    drop(a);
    let b = pool.acquire(200).unwrap();
    assert_eq!(b.device_addr(), addr);
    assert_eq!(&b.as_slice().unwrap()[..8], b"gyre-mem");
    assert_eq!(b.kind(), MemoryKind::Host);
    assert!(format!("{b:?} {pool:?}").contains("PooledBuffer"));
}

#[test]
fn memory_kinds() {
    use MemoryKind::*;
    assert_eq!(
        [Device, PinnedMapped, Unified, Host].map(MemoryKind::is_host_accessible),
        [false, true, true, true]
    );
    assert_eq!(Unified.name(), "unified");
}
