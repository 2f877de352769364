//! [`Loan`]: a block of a loan kernel's pool, as its user holds it. A type of this crate
//! (over `gyre_core`'s block) so that a loan kernel's spec, `KernelSpec<Loan, Loan>`,
//! is a type the compiler tells apart from every spec of plain messages: `Loan` is not
//! `Pod` and, being local, never can be ([`crate::Launch`]).

use core::ops::{Deref, DerefMut};

use gyre_core::Result;

/// A writable buffer lent by a loan kernel's pool: `len()` bytes of a block of
/// `capacity()` bytes, in the memory the kernel reads. Sending it moves it to the kernel
/// (no copy); a reply comes back as a `Loan` of the same block. Dropping a loan returns
/// its block to the pool.
///
/// Its bytes are initialised but not cleared: a recycled block holds what its last user
/// left (zeros the first time). They start at least 64-byte aligned (a block is aligned
/// to its size up to a page), so a message of any `bytemuck::Pod` type can be written
/// and read in place, e.g. with `bytemuck::cast_slice_mut`.
///
/// # Examples
///
/// ```
/// use gyre::loan::LoanBuf;
/// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
/// let k = rt.launch(gyre::KernelSpec::loans("id", |_: &mut LoanBuf<'_>| Ok(())))?;
/// let mut loan = k.try_loan(4 * 1000)?; // a feature vector of 1000 f32
/// let v: &mut [f32] = bytemuck::cast_slice_mut(&mut loan[..]);
/// v.fill(0.5);
/// loan.set_len(8)?;
/// assert!(loan.set_len(loan.capacity() + 1).is_err());
/// let reply = k.call_blocking(loan)?;
/// assert_eq!(bytemuck::cast_slice::<u8, f32>(&reply[..]), [0.5, 0.5]);
/// # Ok::<(), gyre::Error>(())
/// ```
#[derive(Debug)]
pub struct Loan(pub(crate) gyre_core::loan::Loan);

impl Loan {
    /// Bytes of the block (the most `set_len` allows).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::loan::LoanBuf;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::loans("id", |_: &mut LoanBuf<'_>| Ok(())))?;
    /// assert!(k.try_loan(1000)?.capacity() >= 1000);
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Sets the message length.
    ///
    /// # Errors
    ///
    /// [`Error::LoanTooLarge`](crate::Error::LoanTooLarge) beyond
    /// [`capacity`](Self::capacity); the length is unchanged then.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::loan::LoanBuf;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::loans("id", |_: &mut LoanBuf<'_>| Ok(())))?;
    /// let mut loan = k.try_loan(5)?;
    /// loan.copy_from_slice(b"bytes");
    /// loan.set_len(2)?;
    /// assert_eq!(&loan[..], b"by");
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        self.0.set_len(len)
    }
}

impl Deref for Loan {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}
