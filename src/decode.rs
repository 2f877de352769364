//! Turning a reply slot into the caller's `Resp`, or into the typed error its status says.

use bytemuck::Pod;
use gyre_abi::error;
use gyre_core::channel::ReplyView;
use gyre_core::{Channel, Error, Result};

/// Decodes a reply of `ch`'s kernel into `Resp`, turning an error status into a typed
/// error. A reply shorter than `Resp` is zero-extended; a longer one is
/// [`Error::ReplySize`].
pub(crate) fn decode<Resp: Pod>(ch: &Channel, v: ReplyView<'_>) -> Result<Resp> {
    match v.meta.status {
        error::NONE => {}
        // The request was fine; the handler's reply did not fit the slot.
        error::BAD_LENGTH if v.reply_overflow => {
            return Err(Error::ReplyTooLong {
                kernel: ch.name().to_owned(),
                payload: ch.payload(),
            })
        }
        s @ (error::BAD_SEQUENCE | error::BAD_LENGTH | error::UNKNOWN_TYPE) => {
            return Err(Error::Protocol {
                ring: "request",
                index: v.meta.correlation_id,
                what: error::name(s),
                expected: 0,
                found: u64::from(s),
            })
        }
        s => {
            return Err(Error::Handler {
                kernel: ch.name().to_owned(),
                status: s,
                name: error::name(s),
            })
        }
    }
    let size = core::mem::size_of::<Resp>();
    if v.payload.len() > size {
        return Err(Error::ReplySize {
            expected: size,
            actual: v.payload.len(),
        });
    }
    // A shorter reply (a built-in answering only the used prefix) is zero-extended.
    let mut out = Resp::zeroed();
    bytemuck::bytes_of_mut(&mut out)[..v.payload.len()].copy_from_slice(v.payload);
    Ok(out)
}

/// The error for a request the kernel refused (never accepted): the ring is closed
/// because of a shutdown, a dropped last handle, a fault or the watchdog. A refused
/// request is never [`Error::KernelTerminated`] or [`Error::KernelFaulted`]: those
/// report what happened to accepted ones; [`Kernel::state`](crate::Kernel::state) says
/// why the kernel closed.
pub(crate) fn refused(ch: &Channel) -> Error {
    Error::Closed {
        kernel: ch.name().to_owned(),
    }
}
