//! [`SendFuture`]: a request whose reply goes to `recv`.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use bytemuck::Pod;
use gyre_core::channel::Kind;
use gyre_core::Result;

use super::publish::poll_publish;
use crate::keep_alive::KeepAlive;

/// Future of [`Kernel::send`](crate::Kernel::send): waits for a free slot and sends.
///
/// It borrows the [`Kernel`](crate::Kernel) it was made from, which therefore lives
/// (and the kernel with it) while the future is pending; see
/// [`CallFuture`](crate::future::CallFuture) for why, and for a task that must own it.
///
/// # Cancel safety
///
/// Cancel safe: the request is either sent when the future completes with `Ok`, or not
/// at all (dropping it while it waits for space sends nothing).
#[must_use = "futures do nothing unless polled"]
pub struct SendFuture<'a, Req> {
    keep: &'a KeepAlive,
    req: Req,
    id: u64,
    done: bool,
}

impl<'a, Req: Pod> SendFuture<'a, Req> {
    pub(crate) fn new(keep: &'a KeepAlive, req: Req) -> Self {
        let id = crate::inner::next_waiter_id();
        Self {
            keep,
            req,
            id,
            done: false,
        }
    }
}

// As for `CallFuture`: the request is never pinned.
impl<Req> Unpin for SendFuture<'_, Req> {}

impl<Req: Pod> Future for SendFuture<'_, Req> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Ok(()));
        }
        match poll_publish(&this.keep.inner, Kind::Send, &this.req, this.id, cx) {
            Poll::Ready(r) => {
                this.done = true;
                Poll::Ready(r.map(|_| ()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<Req> Drop for SendFuture<'_, Req> {
    fn drop(&mut self) {
        let ch = &self.keep.inner.ch;
        ch.space_waiters().remove(ch, self.id);
    }
}
