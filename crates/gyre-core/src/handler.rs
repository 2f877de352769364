//! The handler of a CPU ring kernel: what the kernel loop runs for each request.

/// Processes one request.
///
/// Called by the kernel loop with the request's message type and payload, and the reply
/// slot's payload buffer (`slot_size - 64` bytes). Returns the reply length, or an error
/// status from [`gyre_abi::error`] (for example [`HANDLER_REJECTED`]) that is sent back
/// to the requester as a typed error; the kernel keeps serving. A reply length larger
/// than the buffer is answered with [`BAD_LENGTH`]. A panic faults the kernel.
///
/// [`HANDLER_REJECTED`]: gyre_abi::error::HANDLER_REJECTED
/// [`BAD_LENGTH`]: gyre_abi::error::BAD_LENGTH
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
