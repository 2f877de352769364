//! The async API of [`Kernel`] and its futures. None of them blocks a tokio worker: a
//! call spins for its reply for at most the kernel's `async_spin` budget on its first
//! poll, then registers its waker with the kernel's completion driver and returns
//! `Pending`.
//!
//! The types end in `Future` (and `Stream`), so `use gyre::*` never shadows
//! `std::marker::Send` or another prelude name.

mod call;
mod publish;
pub(crate) use publish::poll_publish_by;
mod recv;
mod send;
mod shutdown;

use bytemuck::Pod;
use gyre_core::channel::{Kind, PublishError};

pub use call::CallFuture;
use call::Keep;
pub use recv::{RecvFuture, RepliesStream};
pub use send::SendFuture;
pub use shutdown::ShutdownFuture;

pub use crate::lifecycle::ReloadFuture;
pub use crate::loan::future::{LoanCallFuture, LoanFuture, LoanRecvFuture, LoanSendFuture};
pub use crate::pool::device::AcquireDevice;
pub use crate::pool::future::PoolCallFuture;

use crate::kernel::Kernel;

impl<Req: Pod, Resp: Pod> Kernel<Req, Resp> {
    /// Sends `req` and resolves to its reply. Waits (without blocking the thread) for a
    /// free slot first when the ring is full.
    ///
    /// The future borrows this handle, so the kernel lives while it is pending; a task
    /// that owns its call moves a clone of the handle in (`let k = k.clone();
    /// tokio::spawn(async move { k.call(x).await })`).
    ///
    /// # Errors
    ///
    /// As [`Kernel::call_blocking`]: refused (nothing was sent) is [`Error::Closed`];
    /// accepted, the reply's error or the kernel's end ([`Error::Handler`],
    /// [`Error::Protocol`], [`Error::ReplyTooLong`], [`Error::ReplySize`],
    /// [`Error::KernelFaulted`], [`Error::KernelTerminated`], [`Error::Unresponsive`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before the request was accepted sends nothing. Dropping it
    /// after loses, corrupts and leaks nothing: the kernel still answers the request, and
    /// the completion driver discards the reply and releases its slot. (The request
    /// itself is not retracted: it may still run.) See [`CallFuture`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("double", |x: u64| x * 2))?;
    /// assert_eq!(k.call(21).await?, 42);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    ///
    /// [`Error::Closed`]: crate::Error::Closed
    /// [`Error::Handler`]: crate::Error::Handler
    /// [`Error::Protocol`]: crate::Error::Protocol
    /// [`Error::ReplyTooLong`]: crate::Error::ReplyTooLong
    /// [`Error::ReplySize`]: crate::Error::ReplySize
    /// [`Error::KernelFaulted`]: crate::Error::KernelFaulted
    /// [`Error::KernelTerminated`]: crate::Error::KernelTerminated
    /// [`Error::Unresponsive`]: crate::Error::Unresponsive
    pub fn call(&self, req: Req) -> CallFuture<'_, Req, Resp> {
        CallFuture::new(Keep::Borrowed(&self.keep), req)
    }

    /// [`Kernel::call`] whose future holds a reference to the kernel of its own instead
    /// of borrowing this handle (a pool's member call).
    pub(crate) fn call_owned(&self, req: Req) -> CallFuture<'static, Req, Resp> {
        CallFuture::new(Keep::Owned(self.keep.clone()), req)
    }

    /// Sends `req` now if a slot is free, and returns the future of its reply; never
    /// waits for space. This is the call a service makes to shed load: a full ring is an
    /// answer (`503`, retry later), not a queue that grows.
    ///
    /// The future borrows this handle, as [`Kernel::call`]'s does.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] when the ring has no free slot, [`TrySendError::Closed`]
    /// when the kernel refuses requests (shutdown started, the last handle dropped, a
    /// fault or the watchdog); either way the request is handed back and nothing was
    /// sent. Once accepted, the future resolves as [`Kernel::call`]'s.
    ///
    /// # Cancel safety
    ///
    /// The request is accepted when this method returns `Ok`. Dropping the returned
    /// future then loses, corrupts and leaks nothing, as for [`Kernel::call`]: the kernel
    /// still answers the request, and the completion driver discards the reply and
    /// releases its slot.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// use gyre::TrySendError;
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("double", |x: u64| x * 2))?;
    /// let reply = k.try_call(21).expect("an idle ring has room");
    /// assert_eq!(reply.await?, 42);
    /// k.shutdown().await?;
    /// assert!(matches!(k.try_call(1), Err(TrySendError::Closed(1))));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    ///
    /// [`TrySendError::Full`]: crate::TrySendError::Full
    /// [`TrySendError::Closed`]: crate::TrySendError::Closed
    pub fn try_call(
        &self,
        req: Req,
    ) -> core::result::Result<CallFuture<'_, Req, Resp>, crate::TrySendError<Req>> {
        let inner = self.inner();
        match inner
            .ch
            .try_publish(Kind::Call, inner.polling.msg_type, bytemuck::bytes_of(&req))
        {
            Ok(index) => Ok(CallFuture::accepted(Keep::Borrowed(&self.keep), req, index)),
            // Full behind a kernel that stopped frees no more space: that is a refusal.
            Err(PublishError::Full) if inner.ch.check_stopped().is_none() => {
                Err(crate::TrySendError::Full(req))
            }
            // TooLarge / BatchTooLarge cannot happen: sizes were checked at launch.
            Err(_) => Err(crate::TrySendError::Closed(req)),
        }
    }

    /// Sends `req`, waiting (without blocking the thread) for a free slot. Its reply is
    /// delivered by [`Kernel::recv`] / [`Kernel::replies`], in order.
    ///
    /// The future borrows this handle, as [`Kernel::call`]'s does.
    ///
    /// # Errors
    ///
    /// [`Error::Closed`](crate::Error::Closed) when the kernel refuses requests (shutdown
    /// started, the last handle dropped, or it stopped while this future waited): nothing
    /// was sent.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the request is sent exactly when the future completes with `Ok`;
    /// dropping it while it waits for space sends nothing. See [`SendFuture`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::from_fn("inc", |x: u64| x + 1))?;
    /// k.send(1).await?;
    /// assert_eq!(k.recv().await?, 2);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn send(&self, req: Req) -> SendFuture<'_, Req> {
        SendFuture::new(&self.keep, req)
    }

    /// Resolves to the next `send` reply, in order.
    ///
    /// The future does not keep the kernel alive: after the last handle is dropped it
    /// still gets the replies the kernel produces for accepted `send`s.
    ///
    /// # Errors
    ///
    /// As [`Kernel::try_recv`]: the reply is an error (the `send` it answers failed), or
    /// the end — the kernel stopped and every accepted `send` was delivered
    /// ([`Error::KernelTerminated`](crate::Error::KernelTerminated),
    /// [`Error::KernelFaulted`](crate::Error::KernelFaulted) or
    /// [`Error::Unresponsive`](crate::Error::Unresponsive), saying how it stopped).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a reply is taken from the ring only in the poll that returns it, so
    /// dropping the future (in a `select!`, a timeout) loses nothing; the next `recv`
    /// gets that reply. See [`RecvFuture`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// // Nothing sent yet: a timed-out recv takes nothing.
    /// assert!(tokio::time::timeout(Duration::from_millis(1), k.recv()).await.is_err());
    /// k.send(8).await?;
    /// assert_eq!(k.recv().await?, 8);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn recv(&self) -> RecvFuture<Resp> {
        RecvFuture::new(self.inner().clone())
    }

    /// A stream of `send` replies, in order; it ends once the kernel stopped and every
    /// reply was delivered. The last `send`'s error, if any, is an item, never the end.
    ///
    /// The stream does not keep the kernel alive: when the last handle is dropped, the
    /// kernel answers what it accepted and stops, and the stream ends after those replies
    /// (see "The end of a kernel" on [`Kernel`]).
    ///
    /// # Errors
    ///
    /// None when it is created; each item is a reply or the error of the `send` it
    /// answers (as [`Kernel::call_blocking`]'s).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`Kernel::recv`]: dropping the stream, or a pending `next()`,
    /// between items loses nothing. See [`RepliesStream`].
    ///
    /// # Examples
    ///
    /// ```
    /// use futures_core::Stream;
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// let mut replies = Box::pin(k.replies());
    /// k.send(1).await?;
    /// k.send(2).await?;
    /// k.shutdown().await?;
    /// let mut got = Vec::new();
    /// while let Some(r) = std::future::poll_fn(|cx| replies.as_mut().poll_next(cx)).await {
    ///     got.push(r?);
    /// }
    /// assert_eq!(got, [1, 2]);
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn replies(&self) -> RepliesStream<Resp> {
        RepliesStream::new(self.inner().clone())
    }

    /// Stops accepting requests, lets the kernel answer everything already accepted,
    /// joins it and removes its telemetry export file (as [`Kernel::shutdown_blocking`],
    /// without blocking the thread). Idempotent.
    ///
    /// # Errors
    ///
    /// [`Error::KernelFaulted`](crate::Error::KernelFaulted) when the kernel had faulted;
    /// [`Error::Unresponsive`](crate::Error::Unresponsive) when the watchdog declared it
    /// unresponsive (it is detached, not joined).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not undo the shutdown: once polled, the kernel refuses new
    /// requests, and once Terminate was written it still drains and stops. Awaiting a new
    /// `shutdown()` finishes the job. See [`ShutdownFuture`].
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn example() -> Result<(), gyre::Error> {
    /// let rt = gyre::Runtime::builder().backend(gyre::Backend::Cpu).build()?;
    /// let k = rt.launch(gyre::KernelSpec::<u64, u64>::echo())?;
    /// k.send(3).await?;
    /// k.shutdown().await?;
    /// assert_eq!(k.recv().await?, 3); // answered before the kernel stopped
    /// assert!(matches!(k.send(4).await, Err(gyre::Error::Closed { .. })));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example()).unwrap();
    /// ```
    pub fn shutdown(&self) -> ShutdownFuture<'_> {
        ShutdownFuture::new(&self.keep)
    }
}
