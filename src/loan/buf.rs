//! [`LoanBuf`]: what a loan kernel's Rust handler sees — the request's bytes, and the
//! reply written over them in place.

use core::ops::{Deref, DerefMut};

/// A loaned request as the kernel's handler sees it: `len()` bytes of a block of
/// `capacity()` bytes. The handler reads the request, writes its reply over it (resizing
/// with [`set_len`](Self::set_len) up to the capacity), and returns `Ok(())`: the reply
/// goes back to the caller as a [`Loan`](crate::loan::Loan) of the same block, with no copy.
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, Runtime, loan::LoanBuf};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let k = rt.launch(KernelSpec::loans("upper", |b: &mut LoanBuf<'_>| {
///     b.make_ascii_uppercase();
///     Ok(())
/// }))?;
/// assert_eq!(&k.call_bytes_blocking(b"loaned")?[..], b"LOANED");
/// # Ok::<(), gyre::Error>(())
/// ```
#[derive(Debug)]
pub struct LoanBuf<'a> {
    /// The whole block. Invariant: `len <= block.len()`.
    block: &'a mut [u8],
    len: usize,
}

impl<'a> LoanBuf<'a> {
    pub(crate) fn new(block: &'a mut [u8], len: usize) -> Self {
        debug_assert!(len <= block.len());
        Self { block, len }
    }

    /// Bytes of the block: the longest reply.
    pub fn capacity(&self) -> usize {
        self.block.len()
    }

    /// The whole block, the request's bytes first (for the portable loan adapter).
    pub(crate) fn block_mut(&mut self) -> &mut [u8] {
        self.block
    }

    /// Sets the reply's length; bytes beyond the request's hold what the block held
    /// (initialised, not cleared).
    ///
    /// # Errors
    ///
    /// The capacity, when `len` exceeds it (the length is unchanged).
    pub fn set_len(&mut self, len: usize) -> Result<(), usize> {
        if len > self.block.len() {
            return Err(self.block.len());
        }
        self.len = len;
        Ok(())
    }
}

impl Deref for LoanBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.block[..self.len]
    }
}

impl DerefMut for LoanBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.block[..self.len]
    }
}
