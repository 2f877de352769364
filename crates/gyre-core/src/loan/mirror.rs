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

/// Byte ranges `(offset, len)` of the arena to move, with the blocks held busy for the
/// copy (their units): each handle's bytes rounded up to 8 (copy engines move words; a
/// block is at least 64 bytes and 64-aligned, so the rounding stays inside it), sorted,
/// adjacent ranges merged. Each handle comes with the index of the slot that carries it;
/// one whose block is not kernel-owned and bound to that slot (or is held already) is
/// skipped.
fn coalesce(
    arena: &LoanArena,
    handles: &mut dyn Iterator<Item = (u64, LoanHandle)>,
) -> (Vec<u32>, Vec<(usize, usize)>) {
    let mut held = Vec::new();
    let mut r: Vec<(usize, usize)> = handles
        .filter_map(|(index, h)| {
            let (unit, cap) = arena.hold_sent(&h, index)?;
            held.push(unit);
            let len = (h.len as usize).div_ceil(8) * 8;
            (len > 0).then_some((h.offset as usize, len.min(cap)))
        })
        .collect();
    r.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(r.len());
    for (off, len) in r {
        match out.last_mut() {
            Some((o, l)) if *o + *l == off => *l += len,
            _ => out.push((off, len)),
        }
    }
    (held, out)
}

impl LoanMirror {
    /// A mirror of `arena` (the host side of a split arena: [`LoanArena::new_split`],
    /// [`LoanArena::new_split_device`]) on `device`, its kernel side, which must be at
    /// least the arena's size.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] when the arena is not split or the device side
    /// is smaller than the pool.
    pub fn new(arena: Arc<LoanArena>, device: Arc<dyn CopyEngine>) -> Result<Self> {
        if !arena.is_split() {
            // Its kernel works on the host side itself: a copy would overwrite live bytes.
            return Err(crate::Error::InvalidArgument {
                name: "loan mirror arena",
                value: format!("{arena:?}"),
                reason: "not split: its kernel reads the host side in place",
            });
        }
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

    /// Copies the bytes of published requests' loans down, before the doorbell that
    /// lets the kernel read them: `(index, handle)` of each request slot. Each block is
    /// held busy for its copy (and the copies synchronised before it is let go), so
    /// nothing else touches it meanwhile; a handle whose block is not kernel-owned and
    /// bound to its slot is skipped: the kernel refuses it.
    ///
    /// # Errors
    ///
    /// The engine's error (the blocks are let go first).
    pub fn down(
        &self,
        handles: &mut dyn Iterator<Item = (u64, LoanHandle)>,
        stream: bool,
    ) -> Result<Moved> {
        self.copy(handles, stream, true)
    }

    /// Copies the bytes of replies' loans up, before the replies are republished (the
    /// kernel published them, so it is done with their blocks). Held and skipped as in
    /// [`LoanMirror::down`]; the host refuses a reply whose block was skipped.
    ///
    /// # Errors
    ///
    /// The engine's error (the blocks are let go first).
    pub fn up(
        &self,
        handles: &mut dyn Iterator<Item = (u64, LoanHandle)>,
        stream: bool,
    ) -> Result<Moved> {
        self.copy(handles, stream, false)
    }

    fn copy(
        &self,
        handles: &mut dyn Iterator<Item = (u64, LoanHandle)>,
        stream: bool,
        down: bool,
    ) -> Result<Moved> {
        let (held, ranges) = coalesce(&self.arena, handles);
        let r = self.copy_held(&ranges, stream, down);
        for unit in &held {
            self.arena.unhold(*unit);
        }
        let (copies, bytes) = r?;
        Ok(Moved {
            loans: held.len() as u64,
            copies,
            bytes,
        })
    }

    fn copy_held(&self, ranges: &[(usize, usize)], stream: bool, down: bool) -> Result<(u64, u64)> {
        let (mut copies, mut bytes) = (0, 0);
        for &(off, len) in ranges {
            let host = self.arena.host_ptr_at(off);
            // SAFETY: [off, off + len) lies inside blocks this mirror holds busy
            // (`coalesce`), which no other party reads or writes until they are let go,
            // after the copies completed (synchronised below); the device side is at
            // least the arena's size.
            unsafe {
                match (down, stream) {
                    (true, true) => self.device.copy_h2d_async(off, host, len)?,
                    (true, false) => self.device.copy_h2d(off, host, len)?,
                    (false, true) => self.device.copy_d2h_async(host, off, len)?,
                    (false, false) => self.device.copy_d2h(host, off, len)?,
                }
            }
            copies += 1;
            bytes += len as u64;
        }
        if stream && copies > 0 {
            self.device.synchronize()?;
        }
        Ok((copies, bytes))
    }
}
