//! The futures of the async API. None of them blocks a tokio worker: a call spins for its
//! reply for at most the kernel's `async_spin` budget on its first poll, then registers
//! its waker with the kernel's completion driver and returns `Pending`.

use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use bytemuck::Pod;
use gyre_abi::command;
use gyre_core::channel::{Kind, PublishError};
use gyre_core::{Error, Result};

use crate::kernel::{decode, Inner};

/// Publishes `req`, or registers `cx` to be woken when space frees up.
fn poll_publish<Req: Pod>(
    inner: &Inner,
    kind: Kind,
    req: &Req,
    id: u64,
    cx: &mut Context<'_>,
) -> Poll<Result<u64>> {
    let ch = &inner.ch;
    let bytes = bytemuck::bytes_of(req);
    for attempt in 0..2 {
        match ch.try_publish(kind, inner.msg_type, bytes) {
            Ok(i) => {
                ch.space_waiters().remove(ch, id);
                return Poll::Ready(Ok(i));
            }
            Err(PublishError::Full) => {
                if let Some(e) = ch.check_stopped() {
                    ch.space_waiters().remove(ch, id);
                    return Poll::Ready(Err(e));
                }
                if attempt == 0 {
                    // Register, then try once more: space may have freed in between.
                    ch.space_waiters().register(ch, id, cx.waker());
                }
            }
            Err(PublishError::Closed) => {
                ch.space_waiters().remove(ch, id);
                return Poll::Ready(Err(ch.closed_error()));
            }
            Err(PublishError::TooLarge { len, payload }) => {
                return Poll::Ready(Err(Error::MessageTooLarge { len, payload }))
            }
            Err(PublishError::BatchTooLarge { len, capacity }) => {
                return Poll::Ready(Err(Error::InvalidArgument {
                    name: "batch length",
                    value: format!("{len} (capacity {capacity})"),
                    reason: "a batch must fit the ring",
                }))
            }
        }
    }
    Poll::Pending
}

enum CallState {
    Start,
    Wait { index: u64, spun: bool },
    Done,
}

/// Future of [`Kernel::call`](crate::Kernel::call): sends a request, resolves to its reply.
///
/// # Cancel safety
///
/// Dropping it before the request was accepted (while it waits for a free slot) sends
/// nothing. Dropping it after the request was accepted does not lose, corrupt or leak
/// the slot: the kernel still answers it, and the completion driver discards the reply
/// and releases the slot. The request itself is not retracted.
#[must_use = "futures do nothing unless polled"]
pub struct Call<Req, Resp> {
    inner: Arc<Inner>,
    req: Req,
    id: u64,
    state: CallState,
    registered: bool,
    _resp: PhantomData<fn() -> Resp>,
}

impl<Req: Pod, Resp: Pod> Call<Req, Resp> {
    pub(crate) fn new(inner: Arc<Inner>, req: Req) -> Self {
        let id = inner.next_id();
        Self {
            inner,
            req,
            id,
            state: CallState::Start,
            registered: false,
            _resp: PhantomData,
        }
    }
}

// The request is only ever read through `&`, never pinned: moving the future is fine.
impl<Req, Resp> Unpin for Call<Req, Resp> {}

impl<Req: Pod, Resp: Pod> Future for Call<Req, Resp> {
    type Output = Result<Resp>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match this.state {
                CallState::Start => {
                    match poll_publish(&this.inner, Kind::Call, &this.req, this.id, cx) {
                        Poll::Ready(Ok(index)) => {
                            this.state = CallState::Wait { index, spun: false }
                        }
                        Poll::Ready(Err(e)) => {
                            this.state = CallState::Done;
                            return Poll::Ready(Err(e));
                        }
                        Poll::Pending => return Poll::Pending,
                    }
                }
                CallState::Wait { index, spun } => {
                    let spin = if spun {
                        Default::default()
                    } else {
                        this.inner.async_spin
                    };
                    this.state = CallState::Wait { index, spun: true };
                    let ch = &this.inner.ch;
                    let name = ch.name();
                    let r = ch.poll_reply(index, cx, &mut this.registered, spin, |v| {
                        decode::<Resp>(name, v)
                    });
                    if r.is_ready() {
                        this.state = CallState::Done;
                    }
                    return r;
                }
                CallState::Done => {
                    return Poll::Ready(Err(Error::InvalidArgument {
                        name: "future",
                        value: "Call".into(),
                        reason: "polled after completion",
                    }))
                }
            }
        }
    }
}

impl<Req, Resp> Drop for Call<Req, Resp> {
    fn drop(&mut self) {
        let ch = &self.inner.ch;
        match self.state {
            CallState::Start => ch.space_waiters().remove(ch, self.id),
            CallState::Wait { index, .. } => ch.abandon(index, self.registered),
            CallState::Done => {}
        }
    }
}

/// Future of [`Kernel::send`](crate::Kernel::send): waits for a free slot and sends.
///
/// # Cancel safety
///
/// Cancel safe: the request is either sent when the future completes with `Ok`, or not
/// at all (dropping it while it waits for space sends nothing).
#[must_use = "futures do nothing unless polled"]
pub struct Send<Req> {
    inner: Arc<Inner>,
    req: Req,
    id: u64,
    done: bool,
}

impl<Req: Pod> Send<Req> {
    pub(crate) fn new(inner: Arc<Inner>, req: Req) -> Self {
        let id = inner.next_id();
        Self {
            inner,
            req,
            id,
            done: false,
        }
    }
}

// As for `Call`: the request is never pinned.
impl<Req> Unpin for Send<Req> {}

impl<Req: Pod> Future for Send<Req> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Ok(()));
        }
        match poll_publish(&this.inner, Kind::Send, &this.req, this.id, cx) {
            Poll::Ready(r) => {
                this.done = true;
                Poll::Ready(r.map(|_| ()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<Req> Drop for Send<Req> {
    fn drop(&mut self) {
        let ch = &self.inner.ch;
        ch.space_waiters().remove(ch, self.id);
    }
}

/// Future of [`Kernel::recv`](crate::Kernel::recv): the next `send` reply, in order.
///
/// # Cancel safety
///
/// Cancel safe: a reply is taken from the ring only in the poll that returns it, so
/// dropping the future loses nothing; the next `recv` gets that reply.
#[must_use = "futures do nothing unless polled"]
pub struct Recv<Resp> {
    inner: Arc<Inner>,
    id: u64,
    _resp: PhantomData<fn() -> Resp>,
}

impl<Resp: Pod> Recv<Resp> {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let id = inner.next_id();
        Self {
            inner,
            id,
            _resp: PhantomData,
        }
    }
}

impl<Resp: Pod> Recv<Resp> {
    /// The next item (a reply, or the error of a `send` never answered), or `None` at
    /// the end: the kernel stopped and every accepted `send` was delivered or failed.
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Resp>>> {
        let ch = &self.inner.ch;
        let name = ch.name();
        let r = ch.poll_recv(cx, self.id, |v| decode::<Resp>(name, v));
        if r.is_ready() {
            ch.recv_waiters().remove(ch, self.id);
        }
        r
    }
}

impl<Resp: Pod> Future for Recv<Resp> {
    type Output = Result<Resp>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this.poll_item(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(r)) => Poll::Ready(r),
            Poll::Ready(None) => Poll::Ready(Err(this.inner.ch.closed_error())),
        }
    }
}

impl<Resp> Drop for Recv<Resp> {
    fn drop(&mut self) {
        let ch = &self.inner.ch;
        ch.recv_waiters().remove(ch, self.id);
    }
}

/// Stream of `send` replies from [`Kernel::replies`](crate::Kernel::replies).
///
/// Yields `Ok(reply)` or `Err(e)` for each `send`, in order, and ends after the kernel
/// stopped and every accepted `send` was answered or failed.
///
/// # Cancel safety
///
/// Cancel safe, like [`Recv`]: dropping it between items loses nothing.
#[must_use = "streams do nothing unless polled"]
pub struct Replies<Resp>(Recv<Resp>);

impl<Resp: Pod> Replies<Resp> {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self(Recv::new(inner))
    }
}

impl<Resp: Pod> futures_core::Stream for Replies<Resp> {
    type Item = Result<Resp>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The end is decided before anything is taken, so the last `send`'s error is
        // yielded as an item, never mistaken for the end of the stream.
        self.get_mut().0.poll_item(cx)
    }
}

/// Future of [`Kernel::shutdown`](crate::Kernel::shutdown).
///
/// Closes the kernel to new requests, waits until requests being written are published,
/// commands Terminate, waits for the kernel to answer everything published and stop,
/// then joins it. Resolves to `Err(KernelFaulted)` if the kernel had faulted.
///
/// # Cancel safety
///
/// Dropping it does not undo the shutdown: once polled, the kernel is closed to new
/// requests, and once Terminate was written the kernel still drains and stops. Awaiting
/// a new `shutdown()` finishes the job.
#[must_use = "futures do nothing unless polled"]
pub struct Shutdown {
    inner: Arc<Inner>,
    id: u64,
    phase: u8,
}

impl Shutdown {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let id = inner.next_id();
        Self {
            inner,
            id,
            phase: 0,
        }
    }
}

impl Future for Shutdown {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let ch = &this.inner.ch;
        if this.phase == 0 {
            ch.close();
            this.phase = 1;
        }
        if this.phase == 1 {
            if !ch.all_published() {
                // A producer is between its claim and its publication: nanoseconds.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ch.command(command::TERMINATE);
            this.phase = 2;
        }
        if this.phase == 2 {
            if !this.inner.is_final() {
                ch.state_waiters().register(ch, this.id, cx.waker());
                if !this.inner.is_final() {
                    return Poll::Pending;
                }
            }
            ch.state_waiters().remove(ch, this.id);
            this.phase = 3;
            return Poll::Ready(this.inner.finish());
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        let ch = &self.inner.ch;
        ch.state_waiters().remove(ch, self.id);
    }
}
