//! Publishing a request from a future: publish now, or register to be woken when space
//! frees up.

use core::task::{Context, Poll};

use bytemuck::Pod;
use gyre_core::channel::{Kind, PublishError};
use gyre_core::{Error, Result};

use crate::decode::refused;
use crate::inner::Inner;

/// Publishes `req`, or registers `cx` (as waiter `id`) to be woken when space frees up. A
/// refusal — the ring is closed, or full behind a kernel that stopped — is
/// [`Error::Closed`]: nothing was sent.
pub(crate) fn poll_publish<Req: Pod>(
    inner: &Inner,
    kind: Kind,
    req: &Req,
    id: u64,
    cx: &mut Context<'_>,
) -> Poll<Result<u64>> {
    let bytes = bytemuck::bytes_of(req);
    poll_publish_by(inner, id, cx, || {
        inner.ch.try_publish(kind, inner.polling.msg_type, bytes)
    })
}

/// [`poll_publish`] of whatever `try_once` publishes (one attempt each call, all or
/// nothing).
pub(crate) fn poll_publish_by(
    inner: &Inner,
    id: u64,
    cx: &mut Context<'_>,
    mut try_once: impl FnMut() -> core::result::Result<u64, PublishError>,
) -> Poll<Result<u64>> {
    let ch = &inner.ch;
    for attempt in 0..2 {
        match try_once() {
            Ok(i) => {
                ch.space_waiters().remove(ch, id);
                return Poll::Ready(Ok(i));
            }
            Err(PublishError::Full) => {
                if ch.check_stopped().is_some() {
                    ch.space_waiters().remove(ch, id);
                    return Poll::Ready(Err(refused(ch)));
                }
                if attempt == 0 {
                    // Register, then try once more: space may have freed in between.
                    ch.space_waiters().register(ch, id, cx.waker());
                }
            }
            Err(PublishError::Closed) => {
                ch.space_waiters().remove(ch, id);
                return Poll::Ready(Err(refused(ch)));
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
