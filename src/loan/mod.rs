//! Loan kernels: messages larger than a slot, lent from a pool instead of copied
//! (`docs/loans.md`).
//!
//! A [`LoanKernel`] owns a pool of blocks in the memory its kernel reads. The host takes
//! a [`Loan`] from it, writes the message, and sends it: the slot carries a 16-byte
//! [`LoanHandle`] and the block becomes the kernel's. The kernel's handler resolves the
//! handle (checked: offset, length, and the slot the block was sent in), works on the
//! bytes in place ([`LoanBuf`]), and answers with the handle of the same block; the host
//! claims it back as the reply `Loan`. A block no one claims (an error reply, a dropped
//! call, a kernel that ended) is freed when the host releases its reply slot, never
//! earlier. The futures of a loan kernel are in [`crate::future`].
//!
//! # Examples
//!
//! ```
//! use gyre::loan::LoanBuf;
//!
//! let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
//! let k = rt.launch(gyre::KernelSpec::loans("reverse", |b: &mut LoanBuf<'_>| {
//!     b.reverse();
//!     Ok(())
//! }))?;
//! let reply = k.call_bytes_blocking(b"abc")?;
//! assert_eq!(&reply[..], b"cba");
//! # Ok::<(), gyre::Error>(())
//! ```

mod batch;
mod block;
mod buf;
pub(crate) mod future;

use std::sync::Arc;

use gyre_abi::error;
use gyre_core::channel::{Kind, PublishError, ReplyView};
use gyre_core::loan::{LoanArena, LoanMirror};
use gyre_core::{Channel, Error, Result};

pub use block::Loan;
pub use buf::LoanBuf;
use future::{LoanCallFuture, LoanFuture, LoanRecvFuture, LoanSendFuture};
pub use gyre_core::loan::{LoanConfig, LoanHandle, LoanStats};

use crate::decode::decode;
use crate::{Backend, Kernel, KernelSpec, Runtime};

/// The handler of a loan kernel (see [`KernelSpec::loans`]).
type LoanFn = dyn Fn(&mut LoanBuf<'_>) -> core::result::Result<(), u32> + Send + Sync;

/// A loan kernel's pool shape and handler, carried by its spec until launch.
#[derive(Clone)]
pub(crate) struct LoanSetup {
    config: LoanConfig,
    handler: Arc<LoanFn>,
}

impl LoanSetup {
    /// The pool's shape.
    pub(crate) fn config(&self) -> LoanConfig {
        self.config
    }
}

/// The CPU backend's handler of a loan kernel whose pool is `arena`: [`Adapter`] over the
/// spec's closure (the launch, and a reload's successor).
pub(crate) fn adapter(arena: Arc<LoanArena>, setup: &LoanSetup) -> Arc<dyn gyre_core::Handler> {
    Arc::new(Adapter {
        arena,
        user: setup.handler.clone(),
    })
}

impl KernelSpec<Loan, Loan> {
    /// A loan kernel: each request is a [`Loan`] of up to the pool's size, which
    /// `handler` reads and answers in place (see [`LoanBuf`]); launch it with
    /// [`Runtime::launch`]. `Err(status)` reaches the caller as
    /// [`Error::Handler`] under the rules of [`KernelSpec::try_from_fn`]. The pool is
    /// 16 MiB in blocks of 1 KiB and up unless [`KernelSpec::loan_pool`] says otherwise.
    ///
    /// **Where it runs:** the CPU backend (this closure), under every transfer strategy
    /// (zero copy: the kernel reads the pool's host memory; a copy strategy: the bridge
    /// moves each loan's bytes with its slot); OpenCL when the spec also has device code
    /// ([`KernelSpec::device_handler`] or [`KernelSpec::opencl_handler`]: a handler over
    /// the block in place, `req == reply`, see `docs/loans.md`), with the pool in
    /// fine-grained SVM and each handle resolved by the ring kernel; CUDA likewise with
    /// device code ([`KernelSpec::cuda_handler`] or [`KernelSpec::device_handler`]), the
    /// pool in mapped pinned memory (zero copy) or device memory the bridge fills (copy
    /// strategies). The closure alone is [`Error::HandlerUnsupported`] on a device;
    /// [`Backend::Auto`] runs it on the CPU backend instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, loan::LoanBuf};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::loans("sum", |b: &mut LoanBuf<'_>| {
    ///     let s: u64 = b.iter().map(|&x| u64::from(x)).sum();
    ///     b.set_len(8).map_err(|_| gyre::codes::HANDLER_REJECTED)?;
    ///     b.copy_from_slice(&s.to_le_bytes());
    ///     Ok(())
    /// }))?;
    /// let reply = k.call_bytes_blocking(&[1u8; 10_000])?;
    /// assert_eq!(reply[..], 10_000u64.to_le_bytes());
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn loans<F>(name: impl Into<String>, handler: F) -> Self
    where
        F: Fn(&mut LoanBuf<'_>) -> core::result::Result<(), u32> + Send + Sync + 'static,
    {
        // The raw handler is built at launch, around the pool the launch allocates.
        let mut spec: Self =
            KernelSpec::<LoanHandle, LoanHandle>::raw(name, |_: u32, _: &[u8], _: &mut [u8]| {
                Err(error::HANDLER_REJECTED)
            })
            .retyped();
        spec.loan = Some(LoanSetup {
            config: LoanConfig::default(),
            handler: Arc::new(handler),
        });
        spec
    }

    /// The loan pool's size and smallest block (see [`LoanConfig`]); checked at launch.
    /// No effect on a spec that is not a loan kernel.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{KernelSpec, loan::{LoanBuf, LoanConfig}};
    /// let spec = KernelSpec::loans("echo", |_: &mut LoanBuf<'_>| Ok(()))
    ///     .loan_pool(LoanConfig::new(64 << 20, 4096));
    /// # let _ = spec;
    /// ```
    pub fn loan_pool(mut self, config: LoanConfig) -> Self {
        if let Some(l) = &mut self.loan {
            l.config = config;
        }
        self
    }
}

/// The kernel's side of a loan: resolve the request's handle in its slot, run the user's
/// handler on the block, answer with the handle of the same block.
struct Adapter {
    arena: Arc<LoanArena>,
    user: Arc<LoanFn>,
}

impl gyre_core::Handler for Adapter {
    /// Never called by the kernel loop, which passes the slot's tag
    /// ([`Adapter::handle_at`]): without it no handle resolves.
    fn handle(&self, _ty: u32, _req: &[u8], _reply: &mut [u8]) -> core::result::Result<usize, u32> {
        Err(error::BAD_LOAN)
    }

    fn handle_at(
        &self,
        tag: u32,
        _ty: u32,
        req: &[u8],
        reply: &mut [u8],
    ) -> core::result::Result<usize, u32> {
        let h = LoanHandle::decode(req).ok_or(error::BAD_LOAN)?;
        // The tag is the slot index's low 32 bits, all the resolver compares.
        let mut block = self
            .arena
            .resolve(&h, u64::from(tag))
            .map_err(|_| error::BAD_LOAN)?;
        // Busy until `block` drops, which is before the reply is published.
        let mut buf = LoanBuf::new(&mut block, h.len as usize);
        // BAD_LOAN is the resolver's answer alone; a handler that held the block and
        // says BAD_LOAN is refused instead (the caller learns the handler refused it).
        (self.user)(&mut buf).map_err(|s| {
            if s == error::BAD_LOAN {
                error::HANDLER_REJECTED
            } else {
                s
            }
        })?;
        let out = LoanHandle {
            len: buf.len() as u32,
            ..h
        };
        drop(block);
        let dst = reply
            .get_mut(..LoanHandle::SIZE)
            .ok_or(error::HANDLER_REJECTED)?;
        dst.copy_from_slice(bytemuck::bytes_of(&out));
        Ok(LoanHandle::SIZE)
    }
}

/// Refuses a loan from another pool than `arena` (another kernel's): its block would be
/// bound to a slot of a ring its pool never sees, and never return.
pub(crate) fn check_pool(arena: &Arc<LoanArena>, loan: &Loan) -> Result<()> {
    if Arc::ptr_eq(loan.0.arena(), arena) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            name: "loan",
            value: format!("a loan of {:?}", loan.0.arena()),
            reason: "a loan is sent to the kernel whose pool lent it",
        })
    }
}

/// Publishes `loan` as one request: the loan is taken (its block bound to the claimed
/// slot) only once the slot is claimed, so on any error it is still in
/// `loan`, unsent. The caller has checked its pool ([`check_pool`]).
pub(crate) fn try_publish_loan(
    ch: &Channel,
    kind: Kind,
    msg_type: u32,
    loan: &mut Option<Loan>,
) -> core::result::Result<u64, PublishError> {
    ch.try_publish_with(kind, msg_type, 1, LoanHandle::SIZE, |_, index, dst| {
        write_handle(loan.take(), index, dst)
    })
}

/// Sends `loan` in slot `index` and writes its handle to `dst` (16 bytes); zeros, which
/// no slot's tag but slot 0's matches and no sent block has, when there is none (never
/// reached: callers pass one loan per claimed slot).
pub(crate) fn write_handle(loan: Option<Loan>, index: u64, dst: &mut [u8]) {
    match loan {
        Some(l) => dst.copy_from_slice(bytemuck::bytes_of(&l.0.send(index))),
        None => dst.fill(0),
    }
}

/// Turns a loan kernel's reply into the caller's [`Loan`]: the reply's handle must name
/// its request's block.
pub(crate) fn claim(arena: &Arc<LoanArena>, ch: &Channel, v: ReplyView<'_>) -> Result<Loan> {
    let request = LoanHandle::decode(v.request());
    if v.meta.status == error::BAD_LOAN {
        let h = request.unwrap_or(LoanHandle {
            offset: 0,
            len: 0,
            generation: 0,
        });
        return Err(Error::BadLoan {
            side: "from the host",
            offset: h.offset,
            len: h.len,
            generation: h.generation,
            why: "the kernel holds no block under this handle",
        });
    }
    if v.meta.status != error::NONE || v.payload.len() != LoanHandle::SIZE {
        // Error statuses, and a reply of the wrong size, as for any typed kernel.
        return match decode::<LoanHandle>(ch, v) {
            Err(e) => Err(e),
            Ok(h) => Err(Error::BadLoan {
                side: "from the kernel",
                offset: h.offset,
                len: h.len,
                generation: h.generation,
                why: "a reply the channel could not check",
            }),
        };
    }
    arena.claim(&v).map(Loan)
}

/// A kernel whose messages are [`Loan`]s (see [`KernelSpec::loans`]): messages of up to
/// its pool's size, moved by handle, not copied. A name for `Kernel<Loan, Loan>`, the
/// handle [`Runtime::launch`] returns for a loan kernel's spec: its calls read as every
/// kernel's (`call`, `send`, `recv`, `*_blocking`, batches), over loans; the methods that
/// do not depend on the payload (state, telemetry, pause, relaunches, ...) are
/// [`Kernel`]'s own. Clone it to share it.
///
/// # Examples
///
/// ```
/// use gyre::{Backend, KernelSpec, Runtime, loan::LoanBuf};
/// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
/// let k = rt.launch(KernelSpec::loans("rev", |b: &mut LoanBuf<'_>| {
///     b.reverse();
///     Ok(())
/// }))?;
/// let mut loan = k.loan_blocking(64 * 1024)?; // far beyond a slot
/// for (i, b) in loan.iter_mut().enumerate() { *b = i as u8; }
/// let reply = k.call_blocking(loan)?; // the same block, reversed in place
/// assert_eq!(reply[0], ((64 * 1024 - 1) % 256) as u8);
/// drop(reply); // back to the pool
/// assert_eq!(k.loan_stats().in_use_blocks, 0);
/// k.shutdown_blocking()?;
/// # Ok::<(), gyre::Error>(())
/// ```
pub type LoanKernel = Kernel<Loan, Loan>;

impl Runtime {
    /// A loan kernel's launch ([`Runtime::launch`] of a `KernelSpec<Loan, Loan>`):
    /// allocates its pool where the kernel reads it (on the CPU backend, host memory
    /// shared with the kernel under zero copy, or host memory plus emulated device
    /// memory, kept in step by the bridge, under a copy strategy; on OpenCL, fine-grained
    /// SVM or device memory; on CUDA, mapped pinned or device memory), then launches the
    /// kernel over it.
    pub(crate) fn launch_loans(&self, spec: KernelSpec<Loan, Loan>) -> Result<LoanKernel> {
        let Some(setup) = spec.loan.clone() else {
            return Err(Error::InvalidArgument {
                name: "spec",
                value: spec.name().to_owned(),
                reason: "a loan kernel's launch takes a loan kernel's spec (KernelSpec::loans)",
            });
        };
        let (backend, strategy, imp) = self.loan_target(&spec)?;
        match backend {
            Backend::Cpu => {}
            Backend::OpenCl { .. } if spec.opencl_source.is_some() => {}
            Backend::OpenCl { .. } => {
                return Err(Error::HandlerUnsupported {
                    kernel: spec.name().to_owned(),
                    backend: backend.name(),
                    handler: "a loan kernel's Rust closure (KernelSpec::loans) with no OpenCL C \
                              source",
                    remedy: "add KernelSpec::opencl_handler or device_handler (a handler over the \
                             loaned bytes, in place: docs/loans.md), or launch it on Backend::Cpu",
                });
            }
            Backend::Cuda { .. } if spec.cuda_source.is_some() => {}
            _ => {
                return Err(Error::HandlerUnsupported {
                    kernel: spec.name().to_owned(),
                    backend: backend.name(),
                    handler: "a loan kernel's Rust closure (KernelSpec::loans) with no CUDA \
                              source",
                    remedy: "add KernelSpec::cuda_handler or device_handler (a handler over the \
                             loaned bytes, in place: docs/loans.md), or launch it on Backend::Cpu \
                             or Backend::Auto",
                });
            }
        }
        // Zero copy: the kernel reads the pool where the backend put it (host memory on
        // the CPU backend, fine-grained SVM on OpenCL, mapped pinned memory on CUDA). A
        // copy strategy: the kernel works on the backend's device side (emulated device
        // memory on the CPU backend, device memory on CUDA), the host on the pool's host
        // side (the staging the bridge copies from), and the bridge moves each loan's
        // bytes with its slot (a `LoanMirror`). The state words are always in the
        // backend's loan memory, where the kernel reads them.
        let device = if strategy.copies() {
            Some(imp.loan_device(setup.config.pool_bytes)?)
        } else {
            None
        };
        let arena = match &device {
            Some(d) => d.arena(imp.loan_allocator()?, setup.config)?,
            None => LoanArena::new(imp.loan_allocator()?, setup.config)?,
        };
        if backend != Backend::Cpu {
            // A device kernel resolves handles by reading the words only: host code must
            // not resolve them too (no one else holds the arena yet).
            arena.serve_on_device();
        }
        let mut launch: KernelSpec<LoanHandle, LoanHandle> = spec.retyped();
        launch.loan = None;
        if backend == Backend::Cpu {
            // Its Rust closure runs; device sources would send `launch` elsewhere.
            launch.cuda_source = None;
            launch.opencl_source = None;
        }
        launch.handler = adapter(arena.clone(), &setup);
        let kernel = self.launch_kernel(launch, Some(arena.clone()))?;
        let inner = kernel.inner();
        // SAFETY: `inner.ch` is the channel of the ring this kernel serves; nobody else
        // has reached the arena yet, so this binding is the first.
        #[allow(unsafe_code)] // one of the loan kernel's two: its contract is checked here
        let bound = unsafe { arena.install_release_hook(&inner.ch) };
        if !bound {
            return Err(Error::InvalidArgument {
                name: "loan kernel channel",
                value: kernel.name().to_owned(),
                reason: "its channel has a release hook already",
            });
        }
        let _ = inner.loans.set(arena.clone());
        if let (Some(d), Some(t)) = (device, &inner.transfer) {
            t.bridge()
                .set_loans(Arc::new(LoanMirror::new(arena.clone(), d.engine())?));
        }
        tracing::info!(
            kernel = %kernel.name(),
            pool_bytes = arena.pool_bytes(),
            min_block = arena.min_block(),
            kind = arena.kind().name(),
            "loan pool allocated"
        );
        Ok(kernel.retyped())
    }
}

impl Kernel<Loan, Loan> {
    /// The kernel's pool. Invariant: a `Kernel<Loan, Loan>` is made only by a loan
    /// kernel's launch ([`Runtime::launch_loans`]), which sets the pool first, and the
    /// pool is never unset.
    pub(crate) fn pool(&self) -> &Arc<LoanArena> {
        match self.inner().loans.get() {
            Some(a) => a,
            None => unreachable!("a loan kernel's pool is set at its launch"),
        }
    }

    /// The kernel over raw handles, for tests that play the protocol by hand: its `call`
    /// and `send` take raw [`LoanHandle`]s; a handle that names no block sent to the
    /// kernel under its generation is refused (`BAD_LOAN`) and can never reach another
    /// owner's bytes.
    #[doc(hidden)]
    pub fn raw_for_tests(&self) -> Kernel<LoanHandle, LoanHandle> {
        self.retyped()
    }

    /// Replaces the kernel's handler with `spec`'s over the same rings and the same
    /// pool, as [`Kernel::reload_blocking`] does for a kernel of plain messages: loans
    /// held by the host, and requests queued, are the new handler's. `spec` must be a
    /// loan kernel's of the same pool shape.
    ///
    /// # Errors
    ///
    /// Those of [`Kernel::reload_blocking`]; [`Error::ReloadMismatch`] with `field:
    /// "loan pool"` for another pool shape ([`KernelSpec::loan_pool`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, loan::LoanBuf};
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::loans("id", |_: &mut LoanBuf<'_>| Ok(())))?;
    /// k.reload_blocking(KernelSpec::loans("rev", |b: &mut LoanBuf<'_>| {
    ///     b.reverse();
    ///     Ok(())
    /// }))?;
    /// assert_eq!(&k.call_bytes_blocking(b"abc")?[..], b"cba");
    /// # Ok::<(), gyre::Error>(())
    /// ```
    pub fn reload_blocking(&self, spec: KernelSpec<Loan, Loan>) -> Result<()> {
        self.retyped::<LoanHandle, LoanHandle>()
            .reload_blocking(spec.retyped())
    }

    /// [`LoanKernel::reload_blocking`] as a future ([`Kernel::reload`]).
    ///
    /// # Cancel safety
    ///
    /// As [`Kernel::reload`]: once started, the reload runs to completion; dropping the
    /// future loses only its result.
    ///
    /// # Errors
    ///
    /// As [`LoanKernel::reload_blocking`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre::{Backend, KernelSpec, Runtime, loan::LoanBuf};
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = Runtime::builder().backend(Backend::Cpu).build()?;
    /// let k = rt.launch(KernelSpec::loans("id", |_: &mut LoanBuf<'_>| Ok(())))?;
    /// k.reload(KernelSpec::loans("rev", |b: &mut LoanBuf<'_>| {
    ///     b.reverse();
    ///     Ok(())
    /// }))
    /// .await?;
    /// let mut loan = k.loan(3).await?;
    /// loan.copy_from_slice(b"abc");
    /// assert_eq!(&k.call(loan).await?[..], b"cba");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn reload(&self, spec: KernelSpec<Loan, Loan>) -> crate::future::ReloadFuture {
        self.retyped::<LoanHandle, LoanHandle>()
            .reload(spec.retyped())
    }

    /// The pool's counters: hits, misses, returns, blocks and bytes in use, peak, free
    /// bytes and fragmentation ([`LoanStats::fragmentation`]).
    pub fn loan_stats(&self) -> LoanStats {
        self.pool().stats()
    }

    /// The largest loan (the pool's size).
    pub fn max_loan(&self) -> usize {
        self.pool().pool_bytes()
    }

    /// A loan of `len` bytes if a block is free now.
    ///
    /// # Errors
    ///
    /// [`Error::PoolExhausted`] (nothing was taken), [`Error::LoanTooLarge`].
    pub fn try_loan(&self, len: usize) -> Result<Loan> {
        self.pool().try_loan(len).map(Loan)
    }

    /// A loan of `len` bytes, waiting on this thread while the pool is exhausted.
    ///
    /// # Errors
    ///
    /// [`Error::LoanTooLarge`] (at once, never waits for the impossible).
    pub fn loan_blocking(&self, len: usize) -> Result<Loan> {
        self.pool().loan_blocking(len, None).map(Loan)
    }

    /// A loan of `len` bytes, waiting (without blocking the thread) while the pool is
    /// exhausted. Cancel safe: a dropped future took nothing.
    pub fn loan(&self, len: usize) -> LoanFuture {
        LoanFuture::new(self.pool().clone(), len)
    }

    /// Sends `loan` and waits for its reply, which comes back as a loan of the same
    /// block. See [`LoanCallFuture`] for cancel safety.
    ///
    /// # Errors
    ///
    /// As [`LoanKernel::call_blocking`].
    pub fn call(&self, loan: Loan) -> LoanCallFuture<'_> {
        LoanCallFuture::new(self, loan)
    }

    /// Sends `loan`; its reply goes to [`recv`](Self::recv), in order.
    ///
    /// # Errors
    ///
    /// As [`LoanKernel::send_blocking`].
    pub fn send(&self, loan: Loan) -> LoanSendFuture<'_> {
        LoanSendFuture::new(self, loan)
    }

    /// The next `send` reply, in order.
    pub fn recv(&self) -> LoanRecvFuture {
        LoanRecvFuture::new(self)
    }

    /// Copies `bytes` into a loan (waiting for a block) and calls with it: for callers
    /// who do not need zero copy.
    ///
    /// # Errors
    ///
    /// Those of [`LoanKernel::loan`] and [`LoanKernel::call`].
    pub async fn call_bytes(&self, bytes: &[u8]) -> Result<Loan> {
        let mut loan = self.loan(bytes.len()).await?;
        loan.copy_from_slice(bytes);
        self.call(loan).await
    }

    /// Copies `bytes` into a loan and sends it.
    ///
    /// # Errors
    ///
    /// Those of [`LoanKernel::loan`] and [`LoanKernel::send`].
    pub async fn send_bytes(&self, bytes: &[u8]) -> Result<()> {
        let mut loan = self.loan(bytes.len()).await?;
        loan.copy_from_slice(bytes);
        self.send(loan).await
    }

    /// [`call`](Self::call) on this thread.
    ///
    /// # Errors
    ///
    /// Refused (nothing was sent; the loan is returned to the pool): [`Error::Closed`],
    /// and [`Error::InvalidArgument`] for a loan of another kernel's pool.
    /// Accepted: [`Error::Handler`] (the handler's status), [`Error::BadLoan`],
    /// [`Error::Protocol`], or the kernel's end ([`Error::KernelFaulted`], ...), as for
    /// [`Kernel::call_blocking`]. The block returns to the pool in every error case.
    pub fn call_blocking(&self, loan: Loan) -> Result<Loan> {
        check_pool(self.pool(), &loan)?;
        let inner = self.inner();
        let ch = &inner.ch;
        let mut loan = Some(loan);
        // Refused: the loan was never sent, and drops back into the pool.
        let idx = self.publish_blocking_by(Kind::Call, None, || {
            try_publish_loan(ch, Kind::Call, inner.polling.msg_type, &mut loan)
        })?;
        ch.wait_blocking(idx, &inner.polling.host_idle, None, |v| {
            claim(self.pool(), ch, v)
        })
    }

    /// [`send`](Self::send) on this thread.
    ///
    /// # Errors
    ///
    /// Nothing was sent, and the loan is returned to its pool: [`Error::Closed`], and
    /// [`Error::InvalidArgument`] for a loan of another kernel's pool.
    pub fn send_blocking(&self, loan: Loan) -> Result<()> {
        check_pool(self.pool(), &loan)?;
        let inner = self.inner();
        let mut loan = Some(loan);
        // Refused: the loan was never sent, and drops back into the pool.
        self.publish_blocking_by(Kind::Send, None, || {
            try_publish_loan(&inner.ch, Kind::Send, inner.polling.msg_type, &mut loan)
        })?;
        Ok(())
    }

    /// [`recv`](Self::recv) on this thread.
    ///
    /// # Errors
    ///
    /// As [`Kernel::recv_blocking`], and [`Error::BadLoan`].
    pub fn recv_blocking(&self) -> Result<Loan> {
        let inner = self.inner();
        let ch = &inner.ch;
        let mut idler = inner.polling.host_idle.idler();
        loop {
            if let Some(l) = ch.try_recv(|v| claim(self.pool(), ch, v))? {
                return Ok(l);
            }
            idler.idle(false);
        }
    }

    /// [`call_bytes`](Self::call_bytes) on this thread.
    ///
    /// # Errors
    ///
    /// Those of [`LoanKernel::loan_blocking`] and [`LoanKernel::call_blocking`].
    pub fn call_bytes_blocking(&self, bytes: &[u8]) -> Result<Loan> {
        let mut loan = self.loan_blocking(bytes.len())?;
        loan.copy_from_slice(bytes);
        self.call_blocking(loan)
    }

    /// [`send_bytes`](Self::send_bytes) on this thread.
    ///
    /// # Errors
    ///
    /// Those of [`LoanKernel::loan_blocking`] and [`LoanKernel::send_blocking`].
    pub fn send_bytes_blocking(&self, bytes: &[u8]) -> Result<()> {
        let mut loan = self.loan_blocking(bytes.len())?;
        loan.copy_from_slice(bytes);
        self.send_blocking(loan)
    }

    /// Calls with a raw handle, as a corrupt or forged slot would carry it: for tests of
    /// the kernel's checks. A handle naming no block the kernel holds is answered
    /// [`Error::BadLoan`].
    ///
    /// Even a handle that names a block in flight cannot give two parties the same bytes
    /// (see `gyre_core::loan`): at worst that request, or the one it copies, is refused.
    ///
    /// # Errors
    ///
    /// As [`LoanKernel::call_blocking`].
    #[doc(hidden)]
    pub fn call_handle_blocking(&self, h: LoanHandle) -> Result<Loan> {
        let inner = self.inner();
        let idx =
            self.retyped::<LoanHandle, LoanHandle>()
                .publish_blocking(Kind::Call, &h, None)?;
        let ch = &inner.ch;
        ch.wait_blocking(idx, &inner.polling.host_idle, None, |v| {
            claim(self.pool(), ch, v)
        })
    }

    /// The kernel's pool, for tests that resolve handles by hand.
    #[doc(hidden)]
    pub fn pool_for_tests(&self) -> &Arc<LoanArena> {
        self.pool()
    }

    /// Sends `loan` bound to the request slot `ahead` places after the last one claimed,
    /// and returns its handle without publishing anything: for tests that then publish
    /// raw handles through [`Kernel::raw_for_tests`] from one thread (the slot is theirs only
    /// if no one else publishes meanwhile). A handle published in any other slot is
    /// refused; the block returns when the slot it is bound to is released.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a loan of another kernel's pool (nothing is bound).
    #[doc(hidden)]
    pub fn bind_loan_for_tests(&self, loan: Loan, ahead: u64) -> Result<LoanHandle> {
        check_pool(self.pool(), &loan)?;
        Ok(loan.0.send(self.inner().ch.claimed() + ahead))
    }

    /// Shuts the kernel down ([`Kernel::shutdown_blocking`]), then returns to the pool
    /// every block the kernel still held (requests it never answered). Loans the host
    /// holds stay valid.
    ///
    /// # Errors
    ///
    /// As [`Kernel::shutdown_blocking`]. After [`Error::Unresponsive`] the kernel is not
    /// joined and keeps its blocks.
    pub fn shutdown_blocking(&self) -> Result<()> {
        let r = self.retyped::<LoanHandle, LoanHandle>().shutdown_blocking();
        self.reclaim(&r);
        r
    }

    /// [`shutdown_blocking`](Self::shutdown_blocking) without blocking the thread.
    ///
    /// # Errors
    ///
    /// As [`Kernel::shutdown`].
    pub async fn shutdown(&self) -> Result<()> {
        let r = self.retyped::<LoanHandle, LoanHandle>().shutdown().await;
        self.reclaim(&r);
        r
    }

    /// Returns the blocks of the requests the kernel never answered, after a shutdown.
    #[allow(unsafe_code)] // the one call below; its contract is checked here
    fn reclaim(&self, r: &Result<()>) {
        let ch = &self.inner().ch;
        if matches!(r, Err(Error::Unresponsive { .. })) || ch.unresponsive().is_some() {
            return;
        }
        // SAFETY: the shutdown returned, and not as unresponsive: the kernel's last
        // execution has ended and been joined, and after a shutdown no restart, epoch or
        // reload launches a successor on its region, so no kernel touches a slot again.
        let n = unsafe { self.pool().release_unanswered(ch) };
        if n > 0 {
            tracing::info!(kernel = %self.name(), blocks = n, "loan blocks of unanswered requests returned to the pool");
        }
    }
}
