//! [`RecvFuture`] and [`RepliesStream`]: the replies of `send`, in order. Neither keeps
//! the kernel alive (they hold its shared state, not a [`KeepAlive`](crate::keep_alive)).

use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::Result;

use crate::decode::decode;
use crate::inner::Inner;

/// Future of [`Kernel::recv`](crate::Kernel::recv): the next `send` reply, in order.
///
/// It does not keep the kernel alive: once the last [`Kernel`](crate::Kernel) handle is
/// dropped, it still resolves to replies the kernel produces for accepted `send`s, and to
/// the end's error after the last one.
///
/// # Cancel safety
///
/// Cancel safe: a reply is taken from the ring only in the poll that returns it, so
/// dropping the future loses nothing; the next `recv` gets that reply.
#[must_use = "futures do nothing unless polled"]
pub struct RecvFuture<Resp> {
    inner: Arc<Inner>,
    id: u64,
    _resp: PhantomData<fn() -> Resp>,
}

impl<Resp: Pod> RecvFuture<Resp> {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        let id = crate::inner::next_waiter_id();
        Self {
            inner,
            id,
            _resp: PhantomData,
        }
    }

    /// The next item (a reply, or the error of a `send` never answered), or `None` at
    /// the end: the kernel stopped and every accepted `send` was delivered or failed.
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Resp>>> {
        let ch = &self.inner.ch;
        let r = ch.poll_recv(cx, self.id, |v| decode::<Resp>(ch, v));
        if r.is_ready() {
            ch.recv_waiters().remove(ch, self.id);
        }
        r
    }
}

impl<Resp: Pod> Future for RecvFuture<Resp> {
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

impl<Resp> Drop for RecvFuture<Resp> {
    fn drop(&mut self) {
        let ch = &self.inner.ch;
        ch.recv_waiters().remove(ch, self.id);
    }
}

/// Stream of `send` replies from [`Kernel::replies`](crate::Kernel::replies).
///
/// Yields `Ok(reply)` or `Err(e)` for each `send`, in order, and ends after the kernel
/// stopped and every accepted `send` was answered or failed. It does not keep the kernel
/// alive: dropping the last [`Kernel`](crate::Kernel) handle ends the kernel, and the
/// stream then ends after the replies the kernel still produced.
///
/// # Cancel safety
///
/// Cancel safe, like [`RecvFuture`]: dropping it between items loses nothing.
#[must_use = "streams do nothing unless polled"]
pub struct RepliesStream<Resp>(RecvFuture<Resp>);

impl<Resp: Pod> RepliesStream<Resp> {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Self(RecvFuture::new(inner))
    }
}

impl<Resp: Pod> futures_core::Stream for RepliesStream<Resp> {
    type Item = Result<Resp>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The end is decided before anything is taken, so the last `send`'s error is
        // yielded as an item, never mistaken for the end of the stream.
        self.get_mut().0.poll_item(cx)
    }
}
