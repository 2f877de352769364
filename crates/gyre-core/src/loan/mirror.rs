//! [`LoanMirror`]: a loan pool split between host and device under the copy strategies.
//! The host writes and reads its blocks in the arena's host memory (the staging side);
//! the kernel works on the same offsets in device memory; the bridge moves a request's
//! bytes down before the request's doorbell and a reply's bytes up before the reply is
//! republished in the mirror ring, coalescing adjacent blocks into one copy.

use std::sync::Arc;

use super::{LoanArena, LoanHandle};
use crate::copy::CopyEngine;
use crate::error::Result;

/// Copies and bytes one move issued.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Loans moved.
    pub loans: u64,
    /// Copies issued (after coalescing).
    pub copies: u64,
    /// Bytes copied.
    pub bytes: u64,
}

/// A loan pool split between host and device under the copy strategies: the host writes
/// and reads blocks in the arena's host memory, the kernel works on the same offsets on
/// the device side, and the bridge moves a request's bytes down before its doorbell and
/// a reply's bytes up before the reply is republished, adjacent blocks in one copy.
pub struct LoanMirror {
    arena: Arc<LoanArena>,
    /// The device side of the pool: offset `o` of the arena is offset `o` here.
    device: Arc<dyn CopyEngine>,
}

impl core::fmt::Debug for LoanMirror {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LoanMirror")
            .field("arena", &self.arena)
            .field("device", &self.device.name())
            .finish()
    }
}

/// Byte ranges `(offset, len)` of the arena to move: each handle's bytes rounded up to 8
/// (copy engines move words; a block is at least 64 bytes and 64-aligned, so the
/// rounding stays inside it), sorted, adjacent ranges merged.
fn coalesce(
    arena: &LoanArena,
    handles: &mut dyn Iterator<Item = LoanHandle>,
) -> (u64, Vec<(usize, usize)>) {
    let mut r: Vec<(usize, usize)> = handles
        .filter_map(|h| {
            let cap = arena.sent_capacity(&h)?;
            let len = (h.len as usize).div_ceil(8) * 8;
            (len > 0).then_some((h.offset as usize, len.min(cap)))
        })
        .collect();
    let loans = r.len() as u64;
    r.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(r.len());
    for (off, len) in r {
        match out.last_mut() {
            Some((o, l)) if *o + *l == off => *l += len,
            _ => out.push((off, len)),
        }
    }
    (loans, out)
}

impl LoanMirror {
    /// A mirror of `arena` (the host side) on `device`, which must be at least the
    /// arena's size.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] when the device side is smaller than the pool.
    pub fn new(arena: Arc<LoanArena>, device: Arc<dyn CopyEngine>) -> Result<Self> {
        if device.len() < arena.pool_bytes() {
            return Err(crate::Error::InvalidArgument {
                name: "loan pool device memory",
                value: format!("{} bytes", device.len()),
                reason: "smaller than the pool",
            });
        }
        Ok(Self { arena, device })
    }

    /// The host side.
    pub fn arena(&self) -> &Arc<LoanArena> {
        &self.arena
    }

    /// Copies the bytes of published requests' loans down (their blocks are
    /// kernel-owned: nobody on the host writes them, and the kernel reads them only after
    /// the doorbell that follows in stream order). Handles that name no kernel-owned
    /// block are skipped: the kernel will refuse them.
    ///
    /// # Errors
    ///
    /// The engine's error.
    pub fn down(
        &self,
        handles: &mut dyn Iterator<Item = LoanHandle>,
        stream: bool,
    ) -> Result<Moved> {
        let (loans, ranges) = coalesce(&self.arena, handles);
        let mut m = Moved {
            loans,
            ..Moved::default()
        };
        for (off, len) in ranges {
            let src = self.arena.host_ptr_at(off);
            // SAFETY: [off, off + len) lies inside kernel-owned blocks of the arena (checked
            // by `coalesce`), which no host party writes until the kernel answers; the
            // device side is at least the arena's size.
            unsafe {
                if stream {
                    self.device.copy_h2d_async(off, src, len)?;
                } else {
                    self.device.copy_h2d(off, src, len)?;
                }
            }
            m.copies += 1;
            m.bytes += len as u64;
        }
        Ok(m)
    }

    /// Copies the bytes of replies' loans up (the kernel published them, so it is done
    /// with their blocks; the host reads them only after the reply is republished).
    /// Handles that name no kernel-owned block are skipped: the host will refuse them.
    ///
    /// # Errors
    ///
    /// The engine's error.
    pub fn up(&self, handles: &mut dyn Iterator<Item = LoanHandle>, stream: bool) -> Result<Moved> {
        let (loans, ranges) = coalesce(&self.arena, handles);
        let mut m = Moved {
            loans,
            ..Moved::default()
        };
        for (off, len) in ranges {
            let dst = self.arena.host_ptr_at(off);
            // SAFETY: as in `down`: kernel-owned blocks, which no host party reads or
            // writes before the reply that returns them is republished, after this copy.
            unsafe {
                if stream {
                    self.device.copy_d2h_async(dst, off, len)?;
                } else {
                    self.device.copy_d2h(dst, off, len)?;
                }
            }
            m.copies += 1;
            m.bytes += len as u64;
        }
        Ok(m)
    }
}
