//! The state words of a [`LoanArena`](super::LoanArena): one 64-bit word per smallest
//! block (unit), each on its own cache line, in memory of the pool's kind, with the
//! owner, the generation (while kernel-owned: the tag of the slot the block was sent in)
//! and the order of the block that starts there (`gyre_abi::loan`).

use core::ptr::NonNull;
#[cfg(not(gyre_loom))]
use core::sync::atomic::AtomicU64;
#[cfg(gyre_loom)]
use loom::sync::atomic::AtomicU64;

use crate::memory::{RawAllocator, RawBlock};
use crate::{Error, Result};

/// Owner values of a state word (bits 32..34): `gyre_abi::loan::OWNER_*`, which the
/// kernel's resolver (`cuda/include/gyre/loan.h`) reads too.
pub(crate) mod owner {
    pub(crate) const FREE: u64 = gyre_abi::loan::OWNER_FREE;
    pub(crate) const HOST: u64 = gyre_abi::loan::OWNER_HOST;
    pub(crate) const KERNEL: u64 = gyre_abi::loan::OWNER_KERNEL;
    pub(crate) const BUSY: u64 = gyre_abi::loan::OWNER_BUSY;
}

const OWNER_SHIFT: u32 = gyre_abi::loan::OWNER_SHIFT;
const ORDER_SHIFT: u32 = gyre_abi::loan::ORDER_SHIFT;
/// Bytes from one state word to the next: one cache line each (the loom build keeps its
/// words in a boxed slice instead).
#[cfg_attr(gyre_loom, allow(dead_code))]
const WORD_STRIDE: usize = gyre_abi::loan::WORD_STRIDE as usize;

/// A state word: generation (bits 0..32), owner (32..34), order (40..46)
/// (`gyre_abi::loan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) generation: u32,
    pub(crate) owner: u64,
    pub(crate) order: u8,
}

impl Word {
    pub(super) fn pack(self) -> u64 {
        u64::from(self.generation)
            | (self.owner << OWNER_SHIFT)
            | (u64::from(self.order) << ORDER_SHIFT)
    }
    /// The same block, generation and order under a new owner.
    pub(super) fn moved(self, owner: u64) -> Self {
        Self { owner, ..self }
    }

    pub(super) fn unpack(w: u64) -> Self {
        Self {
            generation: w as u32,
            owner: (w >> OWNER_SHIFT) & 3,
            order: ((w >> ORDER_SHIFT) & 0x3f) as u8,
        }
    }
}

/// A state word alone on its cache line (the loom build's words: loom's atomics cannot
/// live in raw memory).
#[cfg(gyre_loom)]
#[repr(align(64))]
struct Line(AtomicU64);

/// The state words, one per unit, [`WORD_STRIDE`] bytes apart: in memory of the pool's
/// kind, from its allocator, because a device kernel reads them too
/// (`cuda/include/gyre/loan.h`). One cache line each: the kernel and the host work on
/// neighbouring blocks at once, and words sharing a line would bounce it between them on
/// every transition.
pub(super) struct Words {
    /// `units * WORD_STRIDE` bytes from the arena's allocator, zeroed at creation; `None`
    /// only while dropping.
    #[cfg(not(gyre_loom))]
    pub(super) block: Option<RawBlock>,
    #[cfg(not(gyre_loom))]
    base: NonNull<u8>,
    #[cfg(gyre_loom)]
    lines: Box<[Line]>,
    units: usize,
}

impl Words {
    #[cfg(not(gyre_loom))]
    pub(super) fn new(alloc: &dyn RawAllocator, units: usize) -> Result<Self> {
        let bytes = units * WORD_STRIDE;
        let (block, base) = alloc_host(alloc, bytes, WORD_STRIDE)?;
        if base.as_ptr() as usize % WORD_STRIDE != 0 {
            // SAFETY: `block` came from `alloc` just now and nothing uses it.
            unsafe { alloc.free(block) };
            return Err(Error::Alloc {
                size: bytes,
                align: WORD_STRIDE,
            });
        }
        // SAFETY: `bytes` host-writable bytes just allocated, not shared yet.
        unsafe { core::ptr::write_bytes(base.as_ptr(), 0, bytes) };
        Ok(Self {
            block: Some(block),
            base,
            units,
        })
    }

    #[cfg(gyre_loom)]
    pub(super) fn new(_alloc: &dyn RawAllocator, units: usize) -> Result<Self> {
        Ok(Self {
            lines: (0..units).map(|_| Line(AtomicU64::new(0))).collect(),
            units,
        })
    }

    /// The word of `unit`, if it is one of the pool's.
    pub(super) fn get(&self, unit: usize) -> Option<&AtomicU64> {
        if unit >= self.units {
            return None;
        }
        #[cfg(not(gyre_loom))]
        // SAFETY: unit < units, so the word lies inside the block (units * WORD_STRIDE
        // bytes), WORD_STRIDE-aligned (checked in `new`), initialised (zeroed), and it lives
        // as long as `self`. `AtomicU64` has u64's size and alignment; every access to the
        // word, the host's and the kernel's, is atomic.
        return Some(unsafe {
            &*self
                .base
                .as_ptr()
                .add(unit * WORD_STRIDE)
                .cast::<AtomicU64>()
        });
        #[cfg(gyre_loom)]
        return Some(&self.lines[unit].0);
    }

    /// The word of a unit the arena produced itself (a buddy block, a checked handle).
    pub(super) fn at(&self, unit: u32) -> &AtomicU64 {
        match self.get(unit as usize) {
            Some(w) => w,
            None => panic!("loan unit {unit} outside a pool of {} units", self.units),
        }
    }

    /// Address of the first word as a kernel reads it (the allocation's device address).
    pub(super) fn device_addr(&self) -> u64 {
        #[cfg(not(gyre_loom))]
        return self
            .block
            .as_ref()
            .map_or(self.base.as_ptr() as u64, RawBlock::device_addr);
        #[cfg(gyre_loom)]
        return self.lines.as_ptr() as u64;
    }
}

/// `bytes` from `alloc` and their host address (every memory kind a loan pool uses has
/// one); a block without one is given back and refused.
pub(super) fn alloc_host(
    alloc: &dyn RawAllocator,
    bytes: usize,
    align: usize,
) -> Result<(RawBlock, NonNull<u8>)> {
    let block = alloc.alloc(bytes, align)?;
    match block.host_ptr() {
        Some(base) => Ok((block, base)),
        None => {
            // SAFETY: `block` came from `alloc` just now and nothing uses it.
            unsafe { alloc.free(block) };
            Err(Error::InvalidArgument {
                name: "loan pool memory",
                value: alloc.kind().name().into(),
                reason: "the allocator returned no host pointer",
            })
        }
    }
}
