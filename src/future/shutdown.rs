//! [`ShutdownFuture`]: close, drain, Terminate, join.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};

use gyre_abi::command;
use gyre_core::Result;

use crate::keep_alive::KeepAlive;

/// Future of [`Kernel::shutdown`](crate::Kernel::shutdown). It borrows the handle it was
/// made from, as [`CallFuture`](crate::future::CallFuture) does.
///
/// Closes the kernel to new requests, waits until requests being written are published,
/// commands Terminate, waits for the kernel to answer everything published and stop,
/// then joins it and removes its telemetry export file. Resolves to
/// `Err(KernelFaulted)` if the kernel had faulted.
///
/// # Cancel safety
///
/// Dropping it does not undo the shutdown: once polled, the kernel is closed to new
/// requests, and once Terminate was written the kernel still drains and stops. Awaiting
/// a new `shutdown()` finishes the job.
#[must_use = "futures do nothing unless polled"]
pub struct ShutdownFuture<'a> {
    keep: &'a KeepAlive,
    id: u64,
    phase: u8,
}

impl<'a> ShutdownFuture<'a> {
    pub(crate) fn new(keep: &'a KeepAlive) -> Self {
        let id = crate::inner::next_waiter_id();
        Self { keep, id, phase: 0 }
    }
}

impl Future for ShutdownFuture<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let inner = &this.keep.inner;
        let ch = &inner.ch;
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
            inner.life.command(command::TERMINATE);
            this.phase = 2;
        }
        if this.phase == 2 {
            if !inner.is_final() {
                ch.state_waiters().register(ch, this.id, cx.waker());
                if !inner.is_final() {
                    return Poll::Pending;
                }
            }
            ch.state_waiters().remove(ch, this.id);
            this.phase = 3;
            return Poll::Ready(inner.complete_shutdown());
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for ShutdownFuture<'_> {
    fn drop(&mut self) {
        let ch = &self.keep.inner.ch;
        ch.state_waiters().remove(ch, self.id);
    }
}
