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
/// It holds the kernel like a [`Kernel`](crate::Kernel) clone: the kernel does not end
/// while it is pending.
///
/// # Cancel safety
///
/// Dropping it before the request was accepted (while it waits for a free slot) sends
/// nothing. Dropping it after the request was accepted does not lose, corrupt or leak
/// the slot: the kernel still answers it, and the completion driver discards the reply
/// and releases the slot. The request itself is not retracted.
#[must_use = "futures do nothing unless polled"]
pub struct CallFuture<Req, Resp> {
    keep: Arc<KeepAlive>,
    req: Req,
    id: u64,
    state: CallState,
    registered: bool,
    _resp: PhantomData<fn() -> Resp>,
}

impl<Req: Pod, Resp: Pod> CallFuture<Req, Resp> {
    pub(crate) fn new(keep: Arc<KeepAlive>, req: Req) -> Self {
        let id = keep.inner.next_id();
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
    pub(crate) fn accepted(keep: Arc<KeepAlive>, req: Req, index: u64) -> Self {
        let id = keep.inner.next_id();
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
impl<Req, Resp> Unpin for CallFuture<Req, Resp> {}

impl<Req: Pod, Resp: Pod> Future for CallFuture<Req, Resp> {
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

impl<Req, Resp> Drop for CallFuture<Req, Resp> {
    fn drop(&mut self) {
        let ch = &self.keep.inner.ch;
        match self.state {
            CallState::Start => ch.space_waiters().remove(ch, self.id),
            CallState::Wait { index, .. } => ch.abandon(index, self.registered),
            CallState::Done => {}
        }
    }
}
