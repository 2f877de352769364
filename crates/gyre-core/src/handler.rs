//! The handler of a CPU ring kernel: what the kernel loop runs for each request, and the
//! rule that keeps a handler's error statuses apart from the protocol's.

use gyre_abi::error::{BAD_LOAN, HANDLER_REJECTED, UNKNOWN_TYPE, USER_BASE};

/// Processes one request.
///
/// Called by the kernel loop with the request's message type and payload, and the reply
/// slot's payload buffer (`slot_size - 64` bytes). Returns the reply length, or an error
/// status that is sent back to the requester as a typed error; the kernel keeps serving.
/// A reply length larger than the buffer is refused (the caller gets
/// `Error::ReplyTooLong`). A panic faults the kernel.
///
/// # Error statuses
///
/// Codes below [`USER_BASE`] belong to gyre's protocol. A handler may return
/// [`HANDLER_REJECTED`] (bad arguments), [`UNKNOWN_TYPE`] (a message type it does not
/// serve), [`BAD_LOAN`] (a loan handle naming no block it holds; gyre's loan adapter
/// answers it) or a code of its own from [`USER_BASE`] up (`USER_BASE + n`). Any other code
/// below `USER_BASE` — `0`, and the protocol's own codes such as `HANDLER_PANIC` or
/// `BAD_SEQUENCE` — is answered as [`HANDLER_REJECTED`], so a handler's answer is never
/// mistaken for a panic, a protocol error or a fault ([`reply_status`]).
///
/// # Examples
///
/// ```
/// use gyre_core::Handler;
/// let upper = |_ty: u32, req: &[u8], reply: &mut [u8]| -> Result<usize, u32> {
///     for (o, i) in reply.iter_mut().zip(req) { *o = i.to_ascii_uppercase(); }
///     Ok(req.len())
/// };
/// let mut out = [0u8; 64];
/// assert_eq!(upper.handle(0, b"abc", &mut out), Ok(3));
/// assert_eq!(&out[..3], b"ABC");
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Handles one request; see the trait documentation.
    fn handle(&self, msg_type: u32, request: &[u8], reply: &mut [u8]) -> Result<usize, u32>;

    /// Handles the request of the slot whose [`slot_tag`](gyre_abi::loan::slot_tag) is
    /// `tag` (the low 32 bits of its ring index). The kernel loop calls this one
    /// (through the hidden `handle_word`, which packs its answer with [`answer_word`]);
    /// the default ignores the tag and calls [`Handler::handle`]. gyre's loan adapter needs it:
    /// a loan handle resolves only in the slot it was sent in.
    ///
    /// # Examples
    ///
    /// ```
    /// use gyre_core::Handler;
    /// let echo = |_ty: u32, req: &[u8], reply: &mut [u8]| -> Result<usize, u32> {
    ///     reply[..req.len()].copy_from_slice(req);
    ///     Ok(req.len())
    /// };
    /// let mut out = [0u8; 64];
    /// assert_eq!(echo.handle_at(7, 0, b"ab", &mut out), Ok(2));
    /// ```
    #[inline]
    fn handle_at(
        &self,
        tag: u32,
        msg_type: u32,
        request: &[u8],
        reply: &mut [u8],
    ) -> Result<usize, u32> {
        let _ = tag;
        self.handle(msg_type, request, reply)
    }

    /// [`Handler::handle_at`]'s answer as one word ([`answer_word`]): what the CPU
    /// backend's kernel loop calls through `dyn Handler`. Internal (hidden from the
    /// docs): not meant to be called or overridden; the default is the only right body
    /// (an override would bypass `handle_at` on the CPU backend; K5 still checks what it
    /// returns, so the protocol holds either way).
    ///
    /// Why a word: a `Result<usize, u32>` returned through a `dyn` call travels in memory,
    /// and the caller's load of it, wider than the callee's store of the discriminant,
    /// cannot be forwarded from the store buffer; it waited for every older store to
    /// drain, among them the handler's reply stores to lines the host's core holds, on
    /// every message (half of the kernel thread's time in `perf record` of the batch
    /// throughput bench). A `u64` comes back in a register.
    #[doc(hidden)]
    #[inline]
    fn handle_word(&self, tag: u32, msg_type: u32, request: &[u8], reply: &mut [u8]) -> u64 {
        answer_word(self.handle_at(tag, msg_type, request, reply))
    }
}

impl<F> Handler for F
where
    F: Fn(u32, &[u8], &mut [u8]) -> Result<usize, u32> + Send + Sync + 'static,
{
    #[inline]
    fn handle(&self, msg_type: u32, request: &[u8], reply: &mut [u8]) -> Result<usize, u32> {
        self(msg_type, request, reply)
    }
}

/// A handler's answer as one word, the kernel loop's form of it
/// ([`Handler::handle_word`]): the reply status in the high 32 bits (`0` for `Ok`,
/// [`reply_status`]`(code)` for `Err(code)`, never `0`) and the reply length in the low
/// 32 (`u32::MAX` for any length beyond it, which K5 refuses like any length beyond the
/// slot; `0` for an error).
///
/// # Examples
///
/// ```
/// use gyre_abi::error::{HANDLER_REJECTED, USER_BASE};
/// use gyre_core::handler::answer_word;
/// assert_eq!(answer_word(Ok(64)), 64);
/// assert_eq!(answer_word(Ok(usize::MAX)), u64::from(u32::MAX));
/// // Clamped, not truncated: a length beyond u32 is never mistaken for a short one.
/// # #[cfg(target_pointer_width = "64")]
/// assert_eq!(answer_word(Ok((1 << 32) + 3)), u64::from(u32::MAX));
/// assert_eq!(answer_word(Err(USER_BASE + 7)) >> 32, u64::from(USER_BASE + 7));
/// assert_eq!(answer_word(Err(0)), u64::from(HANDLER_REJECTED) << 32);
/// ```
#[inline]
pub fn answer_word(answer: Result<usize, u32>) -> u64 {
    match answer {
        Ok(len) => u64::from(u32::try_from(len).unwrap_or(u32::MAX)),
        Err(code) => u64::from(reply_status(code)) << 32,
    }
}

/// The reply status the kernel sends for a handler's `Err(code)` (see [`Handler`], "Error
/// statuses"): `code` itself when it is [`HANDLER_REJECTED`], [`UNKNOWN_TYPE`],
/// [`BAD_LOAN`] or at least [`USER_BASE`]; [`HANDLER_REJECTED`] for every other code below `USER_BASE`.
///
/// # Examples
///
/// ```
/// use gyre_abi::error::{BAD_SEQUENCE, HANDLER_PANIC, HANDLER_REJECTED, USER_BASE};
/// use gyre_core::handler::reply_status;
/// assert_eq!(reply_status(USER_BASE + 7), USER_BASE + 7);
/// assert_eq!(reply_status(HANDLER_REJECTED), HANDLER_REJECTED);
/// for reserved in [0, HANDLER_PANIC, BAD_SEQUENCE, USER_BASE - 1] {
///     assert_eq!(reply_status(reserved), HANDLER_REJECTED);
/// }
/// ```
pub const fn reply_status(code: u32) -> u32 {
    if code >= USER_BASE || code == HANDLER_REJECTED || code == UNKNOWN_TYPE || code == BAD_LOAN {
        code
    } else {
        HANDLER_REJECTED
    }
}
