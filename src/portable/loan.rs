//! The loan form of a handler written once in Rust, `#[gyre::handler(loan)]`: a function
//! over a loan's block ([`Bytes`]) that answers in place and returns the reply's length,
//! run natively on the CPU backend and as generated C by the ring kernel's block loop on
//! OpenCL and CUDA (`docs/handlers.md`, "Over a loan"; `docs/loans.md`); its lane-parallel
//! form (`fn f(b: Bytes, lane: Lane) -> u32`) runs on every lane of the block.

use core::cell::Cell;
use core::ops::Deref;

use gyre_abi::error;

use super::{Lane, Source};
use crate::loan::LoanBuf;
use crate::spec::KernelSpec;

/// A loan's block as a `#[gyre::handler(loan)]` handler sees it: the request's bytes at
/// the start, the whole block writable (the reply is written over the request, in place).
/// Indices are `u32`; one past the block panics, on every backend (on a device the
/// request is answered `HANDLER_PANIC` and the kernel faults, as a Rust panic does on the
/// CPU backend).
///
/// # Examples
///
/// ```
/// #[gyre::handler(loan)]
/// fn upper(b: gyre::portable::Bytes) -> u32 {
///     for i in 0..b.len() {
///         let c: u8 = b.get(i);
///         if c >= 97 && c <= 122 {
///             b.set(i, c - 32);
///         }
///     }
///     b.len()
/// }
///
/// let mut block = *b"hello, loan\0\0\0\0\0";
/// let n = upper(gyre::portable::Bytes::new(&mut block, 11));
/// assert_eq!(&block[..n as usize], b"HELLO, LOAN");
/// ```
#[derive(Clone, Copy)]
pub struct Bytes<'a> {
    /// The whole block. Invariant: `len <= cells.len() <= u32::MAX`.
    cells: &'a [Cell<u8>],
    len: u32,
}

impl core::fmt::Debug for Bytes<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Bytes")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<'a> Bytes<'a> {
    /// A view of `block` whose request is its first `len` bytes (both clamped: to the
    /// block, and to `u32::MAX` bytes). The runtime makes one per request; this is for
    /// calling the Rust function directly (tests, a CPU path of your own).
    pub fn new(block: &'a mut [u8], len: usize) -> Self {
        let cap = block.len().min(u32::MAX as usize);
        let cells = Cell::from_mut(&mut block[..cap]).as_slice_of_cells();
        Self {
            cells,
            len: len.min(cap) as u32,
        }
    }

    /// The request's length in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// The block's bytes: the longest reply.
    pub fn capacity(&self) -> u32 {
        self.cells.len() as u32
    }

    /// Byte `i` of the block.
    ///
    /// # Panics
    ///
    /// When `i >= capacity()` (on a device: the request is answered `HANDLER_PANIC`).
    pub fn get(&self, i: u32) -> u8 {
        match self.cells.get(i as usize) {
            Some(c) => c.get(),
            None => panic!("Bytes::get({i}) past the block of {}", self.capacity()),
        }
    }

    /// Sets byte `i` of the block to `v`.
    ///
    /// # Panics
    ///
    /// When `i >= capacity()` (on a device: the request is answered `HANDLER_PANIC`;
    /// nothing is written).
    pub fn set(&self, i: u32, v: u8) {
        match self.cells.get(i as usize) {
            Some(c) => c.set(v),
            None => panic!("Bytes::set({i}) past the block of {}", self.capacity()),
        }
    }
}

/// A handler over a loan's block written once in Rust (`#[gyre::handler(loan)]`):
/// callable as the Rust function (`name(bytes)`, through `Deref`), launched with
/// [`KernelSpec::portable_loans`] and [`Runtime::launch`](crate::Runtime::launch).
#[derive(Clone, Copy)]
pub struct PortableLoan {
    f: for<'a> fn(Bytes<'a>) -> u32,
    source: Source,
}

impl core::fmt::Debug for PortableLoan {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortableLoan")
            .field("name", &self.source.name)
            .finish_non_exhaustive()
    }
}

impl Deref for PortableLoan {
    type Target = for<'a> fn(Bytes<'a>) -> u32;
    fn deref(&self) -> &Self::Target {
        &self.f
    }
}

impl PortableLoan {
    #[doc(hidden)]
    pub const fn __new(f: for<'a> fn(Bytes<'a>) -> u32, source: Source) -> Self {
        Self { f, source }
    }

    /// The handler's name (the Rust function's).
    pub fn name(&self) -> &'static str {
        self.source.name
    }

    /// The whole device source: `gyre/portable.h`, the helpers, the translated function
    /// and the phase function the block loop calls. Lane 0 runs the function over the
    /// block (`c->reply`, which is `c->req` in a loan kernel) and answers with the length
    /// it returns; a length beyond the block is answered `HANDLER_REJECTED`, as on the
    /// CPU backend. The message type is not looked at (a loan kernel's never is).
    ///
    /// # Examples
    ///
    /// ```
    /// #[gyre::handler(loan)]
    /// fn zero(b: gyre::portable::Bytes) -> u32 { 0 }
    /// let c = zero.c_source();
    /// assert!(c.contains("gyre_h(c->reply, c->req_len, c->reply_cap, &p)"));
    /// ```
    pub fn c_source(&self) -> String {
        // Scalars declare nothing: the prelude has only what the body uses.
        let prelude = super::prelude::<u8, u32>(&self.source);
        let body = "\
             \x20   (void)phase;\n\
             \x20   (void)l;\n\
             \x20   if (c->lane == 0u) {\n\
             \x20       uint32_t p = 0u;\n\
             \x20       uint32_t n = gyre_h(c->reply, c->req_len, c->reply_cap, &p);\n\
             \x20       b->reply_len = 0u;\n\
             \x20       if (p != 0u) {\n\
             \x20           b->panicked = 1u;\n\
             \x20       } else if (n > c->reply_cap) {\n\
             \x20           b->status = GYRE_ERR_HANDLER_REJECTED;\n\
             \x20       } else {\n\
             \x20           b->status = GYRE_ERR_NONE;\n\
             \x20           b->reply_len = n;\n\
             \x20       }\n\
             \x20   }\n\
             \x20   return GYRE_PHASE_DONE;\n";
        super::program(&prelude, body)
    }
}

/// The lane-parallel form of a loan handler (`#[gyre::handler(loan)]` over
/// `fn f(b: Bytes, lane: Lane) -> u32`): on a device every lane of the block runs the
/// function over the same block at once, each taking its part (a CUDA block's threads,
/// an OpenCL work-group's work-items), so a large loan is worked on by the whole block
/// instead of one lane. The reply's length is lane 0's return value; a panic on any lane
/// answers `HANDLER_PANIC`. The CPU backend calls the Rust function once, as lane 0 of
/// one ([`Lane::single`]).
///
/// Lanes run at the same time and share the block: a byte one lane writes must be read
/// or written by no other lane (the usual strided loop, `i = lane.id(); i += lane.count()`,
/// keeps to that), and the result must not depend on the lane count.
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, Runtime, portable::{Bytes, Lane}};
///
/// #[gyre::handler(loan)]
/// fn double(b: Bytes, lane: Lane) -> u32 {
///     let mut i: u32 = lane.id();
///     while i < b.len() {
///         b.set(i, b.get(i).wrapping_mul(2));
///         i += lane.count();
///     }
///     b.len()
/// }
///
/// let mut block = [1u8, 2, 3, 0];
/// assert_eq!(double(Bytes::new(&mut block, 3), Lane::single()), 3);
/// assert_eq!(block, [2, 4, 6, 0]);
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let k = rt.launch(KernelSpec::portable_loans(double))?;
/// assert_eq!(&k.call_bytes_blocking(&[5, 6])?[..], &[10, 12]);
/// # Ok::<(), gyre::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct PortableLoanLanes {
    f: for<'a> fn(Bytes<'a>, Lane) -> u32,
    source: Source,
}

impl core::fmt::Debug for PortableLoanLanes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PortableLoanLanes")
            .field("name", &self.source.name)
            .finish_non_exhaustive()
    }
}

impl Deref for PortableLoanLanes {
    type Target = for<'a> fn(Bytes<'a>, Lane) -> u32;
    fn deref(&self) -> &Self::Target {
        &self.f
    }
}

impl PortableLoanLanes {
    #[doc(hidden)]
    pub const fn __new(f: for<'a> fn(Bytes<'a>, Lane) -> u32, source: Source) -> Self {
        Self { f, source }
    }

    /// The handler's name (the Rust function's).
    pub fn name(&self) -> &'static str {
        self.source.name
    }

    /// The whole device source: `gyre/portable.h`, the helpers, the translated function
    /// and the phase function the block loop calls: every lane runs the function over
    /// the block (phase 0), the lanes agree on a panic (phase 1), and lane 0 answers with
    /// its own return value as the reply's length (phase 3), or `HANDLER_PANIC` (phase
    /// 2).
    ///
    /// # Examples
    ///
    /// ```
    /// #[gyre::handler(loan)]
    /// fn zero(b: gyre::portable::Bytes, lane: gyre::portable::Lane) -> u32 { 0 }
    /// assert!(zero.c_source().contains("gyre_h(c->reply, c->req_len, c->reply_cap, c->lane, c->lanes, &p)"));
    /// ```
    pub fn c_source(&self) -> String {
        let prelude = super::prelude::<u8, u32>(&self.source);
        let body = "                 uint32_t k;
                 if (phase == 0u) { /* every lane: its part of the block */
                     uint32_t p = 0u;
                     l->u32 = gyre_h(c->reply, c->req_len, c->reply_cap, c->lane, c->lanes, &p);
                     b->words[c->lane] = p;
                     return 1u;
                 }
                 if (phase == 1u) { /* every lane: did any panic? (the same answer on each) */
                     uint32_t any = 0u;
                     for (k = 0u; k < c->lanes; ++k) {
                         any |= b->words[k];
                     }
                     return any != 0u ? 2u : 3u;
                 }
                 if (c->lane == 0u) {
                     b->reply_len = 0u;
                     if (phase == 2u) { /* a lane panicked: HANDLER_PANIC */
                         b->panicked = 1u;
                     } else if (l->u32 > c->reply_cap) {
                         b->status = GYRE_ERR_HANDLER_REJECTED;
                     } else {
                         b->status = GYRE_ERR_NONE;
                         b->reply_len = l->u32;
                     }
                 }
                 return GYRE_PHASE_DONE;
";
        super::program(&prelude, body)
    }
}

/// A handler over a loan's block written once in Rust: [`PortableLoan`] or its
/// lane-parallel form [`PortableLoanLanes`], for
/// [`KernelSpec::portable_loans`].
pub trait PortableLoanHandler: Copy + sealed::Sealed {
    /// The handler's name.
    fn handler_name(&self) -> &'static str;
    /// The whole device source.
    fn device_source(&self) -> String;
    /// Runs the Rust function over `b` on the CPU backend (a lane-parallel one as lane 0
    /// of one) and returns the reply's length.
    #[doc(hidden)]
    fn run(&self, b: Bytes<'_>) -> u32;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::PortableLoan {}
    impl Sealed for super::PortableLoanLanes {}
}

impl PortableLoanHandler for PortableLoan {
    fn handler_name(&self) -> &'static str {
        self.name()
    }
    fn device_source(&self) -> String {
        self.c_source()
    }
    fn run(&self, b: Bytes<'_>) -> u32 {
        (self.f)(b)
    }
}

impl PortableLoanHandler for PortableLoanLanes {
    fn handler_name(&self) -> &'static str {
        self.name()
    }
    fn device_source(&self) -> String {
        self.c_source()
    }
    fn run(&self, b: Bytes<'_>) -> u32 {
        (self.f)(b, Lane::single())
    }
}

impl KernelSpec<crate::loan::Loan, crate::loan::Loan> {
    /// A loan kernel whose handler is written once in Rust (`#[gyre::handler(loan)]`,
    /// one lane: [`PortableLoan`], or every lane: [`PortableLoanLanes`]): the CPU backend
    /// calls the Rust function over the block; OpenCL and CUDA run the generated C (the
    /// same meaning, `docs/handlers.md`). Otherwise as [`KernelSpec::loans`]: a reply
    /// length beyond the block is answered `HANDLER_REJECTED`, a panic `HANDLER_PANIC`
    /// (and the kernel faults).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime};
    ///
    /// #[gyre::handler(loan)]
    /// fn reverse(b: gyre::portable::Bytes) -> u32 {
    ///     let n: u32 = b.len();
    ///     let mut i: u32 = 0;
    ///     while i < n / 2 {
    ///         let a: u8 = b.get(i);
    ///         b.set(i, b.get(n - 1 - i));
    ///         b.set(n - 1 - i, a);
    ///         i += 1;
    ///     }
    ///     n
    /// }
    ///
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::portable_loans(reverse))?;
    /// assert_eq!(&k.call_bytes_blocking(b"abc")?[..], b"cba");
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn portable_loans(handler: impl PortableLoanHandler + Send + Sync + 'static) -> Self {
        let name = handler.handler_name();
        let source = handler.device_source();
        Self::loans(name, move |buf: &mut LoanBuf<'_>| {
            let len = buf.len();
            let n = handler.run(Bytes::new(buf.block_mut(), len));
            buf.set_len(n as usize).map_err(|_| error::HANDLER_REJECTED)
        })
        .device_handler(format!("{name}.rs.h"), source)
    }
}
