//! [`LoanHandle`]: what a slot carries for a loaned message (16 bytes), and its decoding.

use bytemuck::{Pod, Zeroable};

/// A loaned message as a slot carries it: where its bytes are in the kernel's loan pool,
/// how many there are, and the generation of the block when it was sent.
///
/// The kernel resolves a handle against its pool before touching a byte: an offset
/// outside the pool or not at the start of a block, a length beyond the block, or a
/// generation other than the block's (the block was returned, or sent again since) is
/// answered [`BAD_LOAN`](gyre_abi::error::BAD_LOAN), never read. The host checks a reply's
/// handle the same way.
///
/// # Examples
///
/// ```
/// use gyre_core::loan::LoanHandle;
/// let h = LoanHandle { offset: 4096, len: 100, generation: 3 };
/// let bytes = bytemuck::bytes_of(&h);
/// assert_eq!(bytes.len(), 16);
/// assert_eq!(LoanHandle::decode(bytes), Some(h));
/// assert_eq!(LoanHandle::decode(&bytes[..15]), None);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct LoanHandle {
    /// Byte offset of the block in the pool.
    pub offset: u64,
    /// Bytes of the message (at most the block's capacity).
    pub len: u32,
    /// The block's generation when the handle was made.
    pub generation: u32,
}

static_assertions::assert_eq_size!(LoanHandle, [u8; 16]);

impl LoanHandle {
    /// Size of a handle in a slot payload.
    pub const SIZE: usize = 16;

    /// Reads a handle from the first 16 bytes of a payload; `None` if it is shorter.
    /// Any 16 bytes decode: whether they name a block is the pool's question
    /// ([`LoanArena::resolve`](super::LoanArena::resolve)).
    pub fn decode(payload: &[u8]) -> Option<Self> {
        let b = payload.get(..Self::SIZE)?;
        Some(bytemuck::pod_read_unaligned(b))
    }
}
