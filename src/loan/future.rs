//! The futures of [`LoanKernel`]: waiting for a block, calling and sending with a loan,
//! receiving a loaned reply.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::sync::Arc;

use gyre_core::channel::Kind;
use gyre_core::loan::LoanArena;
use gyre_core::{Error, Result};

use super::{check_pool, claim, try_publish_loan, Loan, LoanKernel};
use crate::future::poll_publish_by;
use crate::inner::Inner;
use crate::keep_alive::KeepAlive;

/// Future of [`LoanKernel::loan`]: a loan, once a block fits.
///
/// # Cancel safety
///
/// Cancel safe: a block is taken only in the poll that returns it.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct LoanFuture {
    arena: Arc<LoanArena>,
    len: usize,
}

impl LoanFuture {
    pub(crate) fn new(arena: Arc<LoanArena>, len: usize) -> Self {
        Self { arena, len }
    }
}

impl Future for LoanFuture {
    type Output = Result<Loan>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Loan>> {
        self.arena.poll_loan(self.len, cx).map(|r| r.map(Loan))
    }
}

/// What a call or send with a loan holds until it is published: the kernel (borrowed
/// from its handle, which therefore lives), its pool, the loan, and the future's waiter
/// id. Dropping it drops its space-waiter registration (and an unsent loan, which
/// returns to the pool).
struct Outgoing<'a> {
    keep: &'a KeepAlive,
    arena: &'a Arc<LoanArena>,
    loan: Option<Loan>,
    id: u64,
}

impl<'a> Outgoing<'a> {
    fn new(k: &'a LoanKernel, loan: Loan) -> Self {
        let keep: &'a KeepAlive = &k.keep;
        let id = crate::inner::next_waiter_id();
        Self {
            keep,
            arena: k.pool(),
            loan: Some(loan),
            id,
        }
    }

    /// Publishes the loan (moving its block to the kernel, bound to its slot), or keeps
    /// it and registers to be woken when the ring has space. A refusal returns the block
    /// to the pool.
    fn poll_publish(&mut self, kind: Kind, cx: &mut Context<'_>) -> Poll<Result<u64>> {
        match &self.loan {
            None => return Poll::Ready(Err(polled_after_completion())),
            Some(l) => {
                if let Err(e) = check_pool(self.arena, l) {
                    // Refused: the loan goes back to its own pool.
                    self.loan = None;
                    return Poll::Ready(Err(e));
                }
            }
        }
        let inner = &self.keep.inner;
        let loan = &mut self.loan;
        let r = poll_publish_by(inner, self.id, cx, || {
            try_publish_loan(&inner.ch, kind, inner.polling.msg_type, loan)
        });
        if r.is_ready() {
            // Published (the loan was taken), or refused: the loan goes back to the pool.
            self.loan = None;
        }
        r
    }
}

impl Drop for Outgoing<'_> {
    fn drop(&mut self) {
        let ch = &self.keep.inner.ch;
        ch.space_waiters().remove(ch, self.id);
    }
}

fn polled_after_completion() -> Error {
    Error::InvalidArgument {
        name: "future",
        value: "loan future".into(),
        reason: "polled after completion",
    }
}

enum CallState {
    Start,
    Wait { index: u64, spun: bool },
    Done,
}

/// Future of [`LoanKernel::call`]: sends a loan, resolves to the reply loan (the
/// same block).
///
/// It borrows the handle it was made from, as a [`CallFuture`](crate::future::CallFuture)
/// does.
///
/// # Cancel safety
///
/// Dropped before the request was accepted (waiting for a slot), it sent nothing and the
/// loan returns to the pool. Dropped after, the kernel still answers; the reply is
/// discarded and the block returns to the pool when its reply slot is released — never
/// while the kernel may still use it.
#[must_use = "futures do nothing unless polled"]
pub struct LoanCallFuture<'a> {
    out: Outgoing<'a>,
    state: CallState,
    registered: bool,
}

impl<'a> LoanCallFuture<'a> {
    pub(crate) fn new(k: &'a LoanKernel, loan: Loan) -> Self {
        Self {
            out: Outgoing::new(k, loan),
            state: CallState::Start,
            registered: false,
        }
    }
}

impl Future for LoanCallFuture<'_> {
    type Output = Result<Loan>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Loan>> {
        let this = self.get_mut();
        loop {
            match this.state {
                CallState::Start => match this.out.poll_publish(Kind::Call, cx) {
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
                    let inner = &this.out.keep.inner;
                    let spin = inner.polling.async_spin;
                    let ch = &inner.ch;
                    let arena = &this.out.arena;
                    let r = ch.poll_reply(index, cx, &mut this.registered, spun, spin, |v| {
                        claim(arena, ch, v)
                    });
                    if r.is_ready() {
                        this.state = CallState::Done;
                    }
                    return r;
                }
                CallState::Done => return Poll::Ready(Err(polled_after_completion())),
            }
        }
    }
}

impl Drop for LoanCallFuture<'_> {
    fn drop(&mut self) {
        // Waiting for a slot: `Outgoing` leaves the space waiters. Accepted: the release of
        // its reply slot frees the block (the channel's release hook).
        if let CallState::Wait { index, .. } = self.state {
            self.out.keep.inner.ch.abandon(index, self.registered);
        }
    }
}

/// Future of [`LoanKernel::send`]: waits for a free slot and sends the loan. It borrows
/// the handle it was made from, as a [`CallFuture`](crate::future::CallFuture) does.
///
/// # Cancel safety
///
/// Cancel safe: the loan is sent when the future completes with `Ok`, or not at all
/// (dropped while waiting for space, it returns to the pool).
#[must_use = "futures do nothing unless polled"]
pub struct LoanSendFuture<'a> {
    out: Outgoing<'a>,
    done: bool,
}

impl<'a> LoanSendFuture<'a> {
    pub(crate) fn new(k: &'a LoanKernel, loan: Loan) -> Self {
        Self {
            out: Outgoing::new(k, loan),
            done: false,
        }
    }
}

impl Future for LoanSendFuture<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        match this.out.poll_publish(Kind::Send, cx) {
            Poll::Ready(r) => {
                this.done = true;
                Poll::Ready(r.map(|_| ()))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Future of [`LoanKernel::recv`]: the next `send` reply, in order.
///
/// Like [`RecvFuture`](crate::future::RecvFuture), it does not keep the kernel alive.
///
/// # Cancel safety
///
/// Cancel safe: a reply is taken only in the poll that returns it.
#[must_use = "futures do nothing unless polled"]
pub struct LoanRecvFuture {
    inner: Arc<Inner>,
    arena: Arc<LoanArena>,
    id: u64,
}

impl LoanRecvFuture {
    pub(crate) fn new(k: &LoanKernel) -> Self {
        let inner = k.inner().clone();
        let id = crate::inner::next_waiter_id();
        Self {
            inner,
            arena: k.pool().clone(),
            id,
        }
    }
}

impl Future for LoanRecvFuture {
    type Output = Result<Loan>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Loan>> {
        let this = self.get_mut();
        let ch = &this.inner.ch;
        let arena = &this.arena;
        match ch.poll_recv(cx, this.id, |v| claim(arena, ch, v)) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                ch.recv_waiters().remove(ch, this.id);
                Poll::Ready(r.unwrap_or_else(|| Err(ch.closed_error())))
            }
        }
    }
}

impl Drop for LoanRecvFuture {
    fn drop(&mut self) {
        let ch = &self.inner.ch;
        ch.recv_waiters().remove(ch, self.id);
    }
}
