//! [`Loan`]: a host-owned block of a loan pool, returned to the pool on drop.

use core::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::{LoanArena, LoanHandle};
use crate::{Error, Result};

/// A writable buffer lent by a kernel's loan pool: `len()` bytes of a block of
/// `capacity()` bytes, in the memory kind the kernel reads. Sending it moves it to the
/// kernel (no copy); a reply may come back as a `Loan` of the same block. Dropping a loan
/// returns its block to the pool.
///
/// Its bytes are initialised but not cleared: a recycled block holds what its last user
/// left (zeros the first time). They start at least 64-byte aligned (a block is aligned
/// to its size up to a page), so a message of any `bytemuck::Pod` type can be written
/// and read in place, e.g. with `bytemuck::cast_slice_mut`.
///
/// # Examples
///
/// ```
/// use gyre_core::loan::{LoanArena, LoanConfig};
/// use gyre_core::memory::HostAllocator;
/// let arena = LoanArena::new(HostAllocator, LoanConfig::default())?;
/// let mut loan = arena.try_loan(4 * 1000)?; // a feature vector of 1000 f32
/// let v: &mut [f32] = bytemuck::cast_slice_mut(&mut loan[..]);
/// v.fill(0.5);
/// assert_eq!(bytemuck::cast_slice::<u8, f32>(&loan[..])[999], 0.5);
/// # Ok::<(), gyre_core::Error>(())
/// ```
///
/// ```
/// use gyre_core::loan::{LoanArena, LoanConfig};
/// use gyre_core::memory::HostAllocator;
/// let arena = LoanArena::new(HostAllocator, LoanConfig::default())?;
/// let mut loan = arena.try_loan(5)?;
/// loan.copy_from_slice(b"bytes");
/// loan.set_len(2)?;
/// assert_eq!(&loan[..], b"by");
/// assert!(loan.set_len(loan.capacity() + 1).is_err());
/// # Ok::<(), gyre_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Loan {
    arena: Arc<LoanArena>,
    /// Invariant: the block at `unit` is host-owned, by this value alone, until it is
    /// sent or dropped.
    unit: u32,
    order: u8,
    /// Invariant: `len <= capacity()`.
    len: usize,
}

impl Loan {
    pub(crate) fn new(arena: Arc<LoanArena>, unit: u32, order: u8, len: usize) -> Self {
        debug_assert!(len <= arena.block_bytes(order));
        Self {
            arena,
            unit,
            order,
            len,
        }
    }

    /// Bytes of the block (the most `set_len` allows).
    pub fn capacity(&self) -> usize {
        self.arena.block_bytes(self.order)
    }

    /// Sets the message length.
    ///
    /// # Errors
    ///
    /// [`Error::LoanTooLarge`] beyond [`capacity`](Self::capacity); the length is
    /// unchanged then.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::LoanTooLarge {
                len,
                max: self.capacity(),
            });
        }
        self.len = len;
        Ok(())
    }

    /// The pool the loan came from.
    pub fn arena(&self) -> &Arc<LoanArena> {
        &self.arena
    }

    /// Sends the loan in request slot `index`: the block becomes the kernel's, bound to
    /// that slot ([`slot_tag`](super::slot_tag)), and the handle the slot must carry is
    /// returned. Call it with slot `index` claimed and not yet published (the word's
    /// store is ordered before the publication), then publish the handle there. The block
    /// is no longer reachable from the host until that slot's reply claims it
    /// ([`LoanArena::claim`]) or the channel releases the slot
    /// ([`LoanArena::release_sent`]); a handle published in any other slot is refused.
    pub fn send(self, index: u64) -> LoanHandle {
        let me = core::mem::ManuallyDrop::new(self);
        let h = me.arena.send_at(me.unit, me.len, index);
        // SAFETY: `me` is never used or dropped again; this moves its one owned field that
        // needs dropping (the other fields are Copy), so the Arc's count is released
        // exactly once.
        drop(unsafe { core::ptr::read(&me.arena) });
        h
    }
}

impl Deref for Loan {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the block is host-owned by this Loan alone (type invariant), lies inside
        // the arena, and holds initialised bytes; len <= capacity.
        unsafe { core::slice::from_raw_parts(self.arena.host_ptr(self.unit), self.len) }
    }
}

impl DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only view.
        unsafe { core::slice::from_raw_parts_mut(self.arena.host_ptr(self.unit), self.len) }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.arena.drop_loan(self.unit, self.order);
    }
}
