//! [`PoolCallFuture`]: a pool call, which picks its member when first polled and then is
//! that member's [`CallFuture`], counted outstanding on it until it completes.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::{Error, Result};

use super::{Outstanding, Shared};
use crate::future::CallFuture;

/// The future of [`KernelPool::call`](super::KernelPool::call) and
/// [`call_keyed`](super::KernelPool::call_keyed). Its first poll picks the member (the
/// least outstanding, or the key's) and sends the request, as a [`CallFuture`]'s first
/// poll does; it counts outstanding on that member until it completes or is dropped.
///
/// # Cancel safety
///
/// As [`CallFuture`]'s: dropped before its first poll, it picked nothing and sent
/// nothing; dropped before the request was accepted, nothing was sent; dropped after, the
/// member still answers it and its reply is discarded.
#[must_use = "futures do nothing unless polled"]
pub struct PoolCallFuture<Req, Resp> {
    state: State<Req, Resp>,
}

enum State<Req, Resp> {
    /// Not polled yet.
    Unpicked {
        shared: Arc<Shared<Req, Resp>>,
        key: Option<u64>,
        req: Req,
    },
    Calling {
        call: CallFuture<'static, Req, Resp>,
        held: Outstanding<Req, Resp>,
    },
    /// Completed (a poll after this is answered `Closed`).
    Done,
}

// Nothing in it is ever pinned in place: the call future is moved in and out of `state`
// (a CallFuture is Unpin as well).
impl<Req, Resp> Unpin for PoolCallFuture<Req, Resp> {}

impl<Req: Pod, Resp: Pod> PoolCallFuture<Req, Resp> {
    pub(crate) fn new(shared: Arc<Shared<Req, Resp>>, key: Option<u64>, req: Req) -> Self {
        Self {
            state: State::Unpicked { shared, key, req },
        }
    }
}

impl<Req: Pod, Resp: Pod> Future for PoolCallFuture<Req, Resp> {
    type Output = Result<Resp>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match core::mem::replace(&mut this.state, State::Done) {
                State::Unpicked { shared, key, req } => match shared.pick(key) {
                    Ok(m) => {
                        this.state = State::Calling {
                            call: m.kernel.call_owned(req),
                            held: Outstanding::new(m),
                        }
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                },
                State::Calling { mut call, held } => {
                    return match Pin::new(&mut call).poll(cx) {
                        // Done: `held` drops here, so the member's count ends with the
                        // call, not with the future.
                        Poll::Ready(r) => Poll::Ready(r),
                        Poll::Pending => {
                            this.state = State::Calling { call, held };
                            Poll::Pending
                        }
                    };
                }
                State::Done => {
                    return Poll::Ready(Err(Error::Closed {
                        kernel: "(a completed pool call)".into(),
                    }))
                }
            }
        }
    }
}
