//! [`PoolCallFuture`]: a member's [`CallFuture`] and its place in the member's count.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use bytemuck::Pod;
use gyre_core::{Error, Result};

use super::{Member, Outstanding};
use crate::CallFuture;

/// The future of [`KernelPool::call`](super::KernelPool::call) and
/// [`call_keyed`](super::KernelPool::call_keyed): the chosen member's [`CallFuture`],
/// counted outstanding on that member until it completes or is dropped.
///
/// # Cancel safety
///
/// As [`CallFuture`]'s: dropped before the request was accepted, nothing was sent;
/// dropped after, the member still answers it and its reply is discarded.
#[must_use = "futures do nothing unless polled"]
pub struct PoolCallFuture<Req, Resp> {
    state: State<Req, Resp>,
}

enum State<Req, Resp> {
    /// The pool had no member to take it.
    Failed(Option<Error>),
    Calling {
        call: CallFuture<Req, Resp>,
        _held: Outstanding<Req, Resp>,
    },
}

impl<Req: Pod, Resp: Pod> PoolCallFuture<Req, Resp> {
    pub(crate) fn new(member: Result<Arc<Member<Req, Resp>>>, req: Req) -> Self {
        let state = match member {
            Ok(m) => State::Calling {
                call: m.kernel.call(req),
                _held: Outstanding::new(m),
            },
            Err(e) => State::Failed(Some(e)),
        };
        Self { state }
    }
}

impl<Req: Pod, Resp: Pod> Future for PoolCallFuture<Req, Resp> {
    type Output = Result<Resp>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Every field is Unpin (a CallFuture holds Arcs and a Pod request).
        let this = self.get_mut();
        match &mut this.state {
            State::Failed(e) => Poll::Ready(Err(e.take().unwrap_or(Error::Closed {
                kernel: "(pool)".into(),
            }))),
            State::Calling { call, .. } => Pin::new(call).poll(cx),
        }
    }
}
