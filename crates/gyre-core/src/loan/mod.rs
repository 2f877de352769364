//! Loans: messages larger than a slot. The bytes live in a block of the kernel's loan
//! pool, a [`LoanArena`] in the memory kind the kernel reads; the slot carries a
//! 16-byte [`LoanHandle`] (offset, length, generation). Nothing is copied between the
//! host's buffer and the kernel's: the host writes a [`Loan`], sends it, and gets the
//! reply back as a `Loan` of the same block.
//!
//! * [`LoanArena`] — one allocation carved by a buddy allocator, with a per-block owner
//!   and generation that every handle is checked against (`arena.rs`, `buddy.rs`).
//! * [`Loan`] — the RAII host-owned block (`block.rs`).
//! * [`LoanHandle`] — the slot's view (`handle.rs`).
//! * [`LoanStats`] — hits, misses, returns, in use, peak, fragmentation.
//! * [`LoanMirror`] — under a copy strategy, the pool's host and device sides and the
//!   coalesced copies the bridge makes between them (`mirror.rs`).
//!
//! # Ownership
//!
//! Each block start has one atomic *state word* on its own cache line: its owner (free,
//! the host, the kernel, busy), its generation and its order. A sent block is **bound to
//! the request slot that carries it**: [`Loan::send`] runs once that slot is claimed and
//! before it is published, and sets the generation to the slot's [`slot_tag`] (the low 32
//! bits of its ring index). Every later step checks the slot too:
//!
//! ```text
//!   free --loan--> host --send in slot i (generation = tag(i))--> kernel --reply i claimed--> host
//!                   |                                              |    ^
//!                   +--drop--> free <--slot i released-------------+    | handler done
//!                                                                  v    |
//!                                                  busy (host-side holds only)
//! ```
//!
//! * The kernel resolves a handle read from slot `i` only if the handle's generation and
//!   the word's are `tag(i)`, the block is kernel-owned and the length fits. A handle in
//!   any other slot (a duplicate, a replay, a forged copy) is refused without touching
//!   the block, and the host moves the word again only after slot `i`'s reply is
//!   published (claim, release) or the kernel has stopped. So the request of slot `i`
//!   is the only one that reaches the block while the kernel holds it, and **a device
//!   kernel needs only to read the word** (`cuda/include/gyre/loan.h`): nothing the
//!   device does must be atomic with the host's atomics, which a GPU over PCIe cannot
//!   promise.
//! * Host-side parties that can run while the kernel's request is in flight — the CPU
//!   backend's Rust handlers ([`LoanArena::resolve`] and its [`KernelBlock`]) and the
//!   bridge's copies ([`LoanMirror`]) — also hold the block *busy* by compare-and-swap
//!   while they touch it, so no safe call, however misused, gives two of them the bytes.
//! * The host touches a block only while it is host-owned, through the one [`Loan`] that
//!   owns it, and frees a sent block only from kernel-owned and bound to the slot being
//!   released. Because a device kernel holds nothing, each of the host's moves of a
//!   kernel-owned block comes with proof that the kernel is done with its slot
//!   ([`LoanArena::claim`] takes the view of a reply its own channel published; the
//!   release hook, installed once on that channel by an `unsafe fn` whose contract names
//!   it, is called for published replies only), or is an `unsafe fn` with that contract ([`LoanArena::claim_handles`],
//!   [`LoanArena::release_sent`], [`LoanArena::release_unanswered`]); and host code
//!   cannot resolve the handles of a pool a device kernel serves
//!   ([`LoanArena::serve_on_device`]).
//!
//! A wrong handle costs at most a refused request, never a read or write outside its
//! owner, and never a leak: the release of a slot frees exactly the block bound to it,
//! whatever the reply's status.
//!
//! `docs/loans.md` describes the protocol, the checks and the memory kinds for users.

mod arena;
mod block;
mod buddy;
mod handle;
mod mirror;
mod serve;
#[cfg(test)]
mod tests;
mod wait;
mod words;

pub use arena::{KernelBlock, LoanArena, LoanPoolView};
pub use block::Loan;
pub use gyre_abi::loan::slot_tag;
pub use handle::LoanHandle;
pub use mirror::{LoanMirror, Moved};

use crate::{Error, Result};

/// The kernel's side of a loan pool under a copy strategy ([`crate::Backend::loan_device`]).
#[derive(Clone)]
pub enum LoanDevice {
    /// The CPU backend's emulated device memory: its kernel's Rust handlers work on it
    /// in place ([`LoanArena::new_split`]).
    Emulated(std::sync::Arc<crate::copy::HostDeviceArena>),
    /// Device memory behind a copy engine, at device address `addr` (offset 0 of the
    /// engine): only a device kernel reads it ([`LoanArena::new_split_device`]).
    Device {
        /// The engine the bridge copies through.
        engine: std::sync::Arc<dyn crate::copy::CopyEngine>,
        /// Where the kernel reads offset 0.
        addr: u64,
    },
}

impl core::fmt::Debug for LoanDevice {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LoanDevice::Emulated(d) => f
                .debug_tuple("Emulated")
                .field(&crate::copy::CopyEngine::len(&**d))
                .finish(),
            LoanDevice::Device { engine, addr } => f
                .debug_struct("Device")
                .field("engine", &engine.name())
                .field("addr", addr)
                .finish(),
        }
    }
}

impl LoanDevice {
    /// The engine the bridge copies loan bytes through.
    pub fn engine(&self) -> std::sync::Arc<dyn crate::copy::CopyEngine> {
        match self {
            LoanDevice::Emulated(d) => d.clone(),
            LoanDevice::Device { engine, .. } => engine.clone(),
        }
    }

    /// The arena over this kernel side, with host side and state words from `alloc`.
    ///
    /// # Errors
    ///
    /// As [`LoanArena::new_split`].
    pub fn arena(
        &self,
        alloc: impl crate::memory::RawAllocator + 'static,
        config: LoanConfig,
    ) -> Result<std::sync::Arc<LoanArena>> {
        match self {
            LoanDevice::Emulated(d) => LoanArena::new_split(alloc, config, d.clone()),
            LoanDevice::Device { engine, addr } => {
                LoanArena::new_split_device(alloc, config, engine.clone(), *addr)
            }
        }
    }
}

/// The shape of a loan pool: its size and smallest block (both powers of two).
///
/// # Examples
///
/// ```
/// use gyre_core::loan::LoanConfig;
/// let c = LoanConfig::default();
/// assert_eq!((c.pool_bytes, c.min_block), (16 << 20, 1024));
/// assert!(LoanConfig::new(1000, 64).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoanConfig {
    /// Bytes of the pool: a power of two, at least `min_block`, at most 2 GiB and at most
    /// [`MAX_UNITS`] times `min_block`. Also the largest loan.
    pub pool_bytes: usize,
    /// The smallest block: a power of two from 64 bytes up. A loan takes the smallest
    /// power-of-two multiple of it that fits.
    pub min_block: usize,
}

/// The most smallest blocks a pool may hold (each has a 64-byte state word).
pub const MAX_UNITS: usize = 1 << 20;

impl Default for LoanConfig {
    /// 16 MiB in blocks of 1 KiB and up.
    fn default() -> Self {
        Self::new(16 << 20, 1024)
    }
}

impl LoanConfig {
    /// A pool of `pool_bytes` in blocks of `min_block` bytes and up.
    pub const fn new(pool_bytes: usize, min_block: usize) -> Self {
        Self {
            pool_bytes,
            min_block,
        }
    }

    /// Checks the sizes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] naming the bad field.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, value: usize, reason| Error::InvalidArgument {
            name,
            value: value.to_string(),
            reason,
        };
        if !self.min_block.is_power_of_two() || self.min_block < 64 {
            return Err(bad(
                "loan min_block",
                self.min_block,
                "must be a power of two of at least 64 bytes",
            ));
        }
        if !self.pool_bytes.is_power_of_two()
            || self.pool_bytes < self.min_block
            || self.pool_bytes > 1 << 31
        {
            return Err(bad(
                "loan pool_bytes",
                self.pool_bytes,
                "must be a power of two from min_block up to 2 GiB",
            ));
        }
        // One 64-byte state word per smallest block: bounded to 64 MiB of them.
        if self.pool_bytes / self.min_block > MAX_UNITS {
            return Err(bad(
                "loan pool_bytes",
                self.pool_bytes,
                "holds more than 2^20 smallest blocks: raise min_block",
            ));
        }
        Ok(())
    }
}

/// Counters of a loan pool ([`LoanArena::stats`]), taken together. Byte figures count
/// blocks, not message lengths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoanStats {
    /// Bytes of the pool.
    pub pool_bytes: u64,
    /// Loans served by a free block of exactly their size.
    pub hits: u64,
    /// Loans that had to split a larger block.
    pub misses: u64,
    /// `try_loan` attempts that found no block (waits are not counted).
    pub exhausted: u64,
    /// Blocks returned to the pool.
    pub returns: u64,
    /// Blocks out (host- or kernel-owned).
    pub in_use_blocks: u64,
    /// Bytes out.
    pub in_use_bytes: u64,
    /// Highest `in_use_bytes` so far.
    pub peak_in_use_bytes: u64,
    /// Bytes in free blocks.
    pub free_bytes: u64,
    /// The largest free block.
    pub largest_free_bytes: u64,
}

impl LoanStats {
    /// External fragmentation: the share of free bytes outside the largest free block,
    /// `1 - largest_free / free` (0 when nothing or everything is free in one block).
    ///
    /// # Examples
    ///
    /// ```
    /// let s = gyre_core::loan::LoanStats { free_bytes: 4096, largest_free_bytes: 1024, ..Default::default() };
    /// assert_eq!(s.fragmentation(), 0.75);
    /// ```
    pub fn fragmentation(&self) -> f64 {
        if self.free_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free_bytes as f64 / self.free_bytes as f64
        }
    }
}
