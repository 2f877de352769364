//! [`HostAllocator`]: aligned, zeroed host memory from `std::alloc`.

use std::alloc::Layout;
use std::ptr::NonNull;

use super::{MemoryKind, RawAllocator, RawBlock};
use crate::{Error, Result};

/// Aligned, zeroed host memory from the global allocator: the CPU backend's memory, and
/// the allocator tests use. The device address of a block is its host address.
///
/// # Examples
///
/// ```
/// use gyre_core::memory::{HostAllocator, RawAllocator};
///
/// let block = HostAllocator.alloc(4096, 4096)?;
/// let ptr = block.host_ptr().expect("host memory has a host pointer");
/// assert_eq!(ptr.as_ptr() as usize % 4096, 0);
/// // SAFETY: the block is valid for 4096 initialized bytes until freed below.
/// assert!(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), 4096) }.iter().all(|&b| b == 0));
/// // SAFETY: from `HostAllocator::alloc`, freed once.
/// unsafe { HostAllocator.free(block) };
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HostAllocator;

impl HostAllocator {
    fn layout(bytes: usize, align: usize) -> Result<Layout> {
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument {
                name: "align",
                value: align.to_string(),
                reason: "must be a power of two",
            });
        }
        if bytes == 0 {
            return Err(Error::InvalidArgument {
                name: "bytes",
                value: bytes.to_string(),
                reason: "must be at least 1",
            });
        }
        Layout::from_size_align(bytes, align).map_err(|_| Error::Alloc { size: bytes, align })
    }
}

// SAFETY: blocks come from `alloc_zeroed` with a layout of exactly `size` bytes aligned to
// `align` (1: size and alignment; 2: zeroed host memory with `Some` host pointer; 3: owned
// until `dealloc`); the global allocator is thread-safe (4).
unsafe impl RawAllocator for HostAllocator {
    fn kind(&self) -> MemoryKind {
        MemoryKind::Host
    }

    fn alloc(&self, bytes: usize, align: usize) -> Result<RawBlock> {
        let layout = Self::layout(bytes, align)?;
        // SAFETY: `layout` has a non-zero size (checked in `layout`).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(Error::Alloc { size: bytes, align })?;
        Ok(RawBlock::new(Some(ptr), raw as u64, bytes, align))
    }

    unsafe fn free(&self, block: RawBlock) {
        // A block from `alloc` always has a host pointer and a valid layout; anything else
        // breaks the caller's contract and is leaked rather than risking a bad dealloc.
        let (Some(ptr), Ok(layout)) = (
            block.host_ptr(),
            Layout::from_size_align(block.size(), block.align()),
        ) else {
            debug_assert!(false, "HostAllocator::free of a foreign block {block:?}");
            return;
        };
        // SAFETY: the caller guarantees `block` came from `alloc`, which allocated `ptr`
        // with exactly this layout, and that it is freed once.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
    }
}
