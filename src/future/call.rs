//! [`CallFuture`]: a request and its reply.

use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::channel::Kind;
use gyre_core::{Error, Result};

use super::publish::poll_publish;
use crate::decode::decode;
use crate::keep_alive::KeepAlive;

enum CallState {
    Start,
    Wait { index: u64, spun: bool },
    Done,
}

/// Future of [`Kernel::call`](crate::Kernel::call): sends a request, resolves to its reply.
///
/// It borrows the [`Kernel`](crate::Kernel) it was made from, which therefore lives (and
/// the kernel with it) while the future is pending. Borrowing, not holding a clone of the
/// handle, spares each call two read-modify-writes of the reference count that every
/// caller of the kernel shares (6-7% of the samples of 64 tasks calling from two tokio
/// workers, docs/benchmarks.md). A task that must own its call moves a clone of the
/// handle in: `let k = k.clone(); tokio::spawn(async move { k.call(x).await })`.
///
/// # Cancel safety
///
/// Dropping it before the request was accepted (while it waits for a free slot) sends
/// nothing. Dropping it after the request was accepted does not lose, corrupt or leak
/// the slot: the kernel still answers it, and the completion driver discards the reply
/// and releases the slot. The request itself is not retracted.
#[must_use = "futures do nothing unless polled"]
pub struct CallFuture<'a, Req, Resp> {
    keep: Keep<'a>,
    req: Req,
    id: u64,
    state: CallState,
    registered: bool,
    _resp: PhantomData<fn() -> Resp>,
}

/// What keeps the kernel of a [`CallFuture`] alive: the handle it borrows
/// ([`Kernel::call`](crate::Kernel::call)), or a reference of its own (a pool's member
/// call, which outlives the borrow of the pool's member list).
pub(crate) enum Keep<'a> {
    Borrowed(&'a KeepAlive),
    Owned(Arc<KeepAlive>),
}

impl core::ops::Deref for Keep<'_> {
    type Target = KeepAlive;

    #[inline]
    fn deref(&self) -> &KeepAlive {
        match self {
            Keep::Borrowed(k) => k,
            Keep::Owned(k) => k,
        }
    }
}

impl<'a, Req: Pod, Resp: Pod> CallFuture<'a, Req, Resp> {
    pub(crate) fn new(keep: Keep<'a>, req: Req) -> Self {
        let id = crate::inner::next_waiter_id();
        Self {
            keep,
            req,
            id,
            state: CallState::Start,
            registered: false,
            _resp: PhantomData,
        }
    }

    /// A call whose request was already published at ring index `index`: the future
    /// only waits for the reply ([`Kernel::try_call`](crate::Kernel::try_call)).
    pub(crate) fn accepted(keep: Keep<'a>, req: Req, index: u64) -> Self {
        let id = crate::inner::next_waiter_id();
        Self {
            keep,
            req,
            id,
            state: CallState::Wait { index, spun: false },
            registered: false,
            _resp: PhantomData,
        }
    }
}

// The request is only ever read through `&`, never pinned: moving the future is fine.
impl<Req, Resp> Unpin for CallFuture<'_, Req, Resp> {}

impl<Req: Pod, Resp: Pod> Future for CallFuture<'_, Req, Resp> {
    type Output = Result<Resp>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let inner = &this.keep.inner;
        loop {
            match this.state {
                CallState::Start => match poll_publish(inner, Kind::Call, &this.req, this.id, cx) {
                    Poll::Ready(Ok(index)) => this.state = CallState::Wait { index, spun: false },
                    Poll::Ready(Err(e)) => {
                        this.state = CallState::Done;
                        return Poll::Ready(Err(e));
                    }
                    Poll::Pending => return Poll::Pending,
                },
                CallState::Wait {
                    index,
                    ref mut spun,
                } => {
                    let spin = inner.polling.async_spin;
                    let ch = &inner.ch;
                    let r = ch.poll_reply(index, cx, &mut this.registered, spun, spin, |v| {
                        decode::<Resp>(ch, v)
                    });
                    if r.is_ready() {
                        this.state = CallState::Done;
                    }
                    return r;
                }
                CallState::Done => {
                    return Poll::Ready(Err(Error::InvalidArgument {
                        name: "future",
                        value: "CallFuture".into(),
                        reason: "polled after completion",
                    }))
                }
            }
        }
    }
}

impl<Req, Resp> Drop for CallFuture<'_, Req, Resp> {
    fn drop(&mut self) {
        let ch = &self.keep.inner.ch;
        match self.state {
            CallState::Start => ch.space_waiters().remove(ch, self.id),
            CallState::Wait { index, .. } => ch.abandon(index, self.registered),
            CallState::Done => {}
        }
    }
}
