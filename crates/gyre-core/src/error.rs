//! The error type of gyre's host side.

use std::time::Duration;

use crate::cause::Cause;

/// Everything that can fail on the host side of a ring kernel.
///
/// Each variant names the operation or value that failed, so a caller can act on it.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The ring capacity is not a power of two in the legal range.
    #[error("invalid ring capacity {capacity}: must be a power of two in {min}..={max}")]
    InvalidCapacity {
        /// The value given.
        capacity: usize,
        /// Smallest legal value.
        min: usize,
        /// Largest legal value.
        max: usize,
    },
    /// The slot size is not a multiple of 128 in the legal range.
    #[error("invalid slot size {slot_size} bytes: must be a multiple of {align} in {min}..={max}")]
    InvalidSlotSize {
        /// The value given.
        slot_size: usize,
        /// Required multiple.
        align: usize,
        /// Smallest legal value.
        min: usize,
        /// Largest legal value.
        max: usize,
    },
    /// The batch size is 0 or larger than the capacity.
    #[error("invalid batch size {batch}: must be in 1..={capacity} (the ring capacity)")]
    InvalidBatchSize {
        /// The value given.
        batch: usize,
        /// The ring capacity.
        capacity: usize,
    },
    /// A configuration value is out of range.
    #[error("invalid {name} {value}: {reason}")]
    InvalidArgument {
        /// Which setting.
        name: &'static str,
        /// The value given, formatted.
        value: String,
        /// What a legal value looks like.
        reason: &'static str,
    },
    /// A message does not fit the slot payload; nothing was written.
    #[error("message of {len} bytes exceeds the slot payload of {payload} bytes")]
    MessageTooLarge {
        /// Size of the message.
        len: usize,
        /// Payload capacity of a slot (`slot_size - 64`).
        payload: usize,
    },
    /// A message type of a typed kernel does not fit the slot payload.
    #[error("{role} type {type_name} is {size} bytes, more than the slot payload of {payload} bytes (raise slot_size)")]
    TypeTooLarge {
        /// `request` or `reply`.
        role: &'static str,
        /// `core::any::type_name` of the type.
        type_name: &'static str,
        /// Its size.
        size: usize,
        /// Payload capacity of a slot.
        payload: usize,
    },
    /// The kernel stopped because of an error; requests it did not answer fail with this.
    #[error("kernel '{kernel}' faulted: {name} (code {code})")]
    KernelFaulted {
        /// Kernel name.
        kernel: String,
        /// Error code from the control block.
        code: u32,
        /// `gyre_abi::error::name(code)`.
        name: &'static str,
    },
    /// The kernel's execution ended without it reaching a final state: the device killed
    /// it (a fault in device code, a watchdog, a reset). Requests it did not answer fail
    /// with this. `code` is `gyre_abi::error::KERNEL_GONE`; `cause` is what the backend
    /// reported (for CUDA, the call and the CUDA error name and code).
    #[error("kernel '{kernel}' is gone ({}, code {code}): {cause}", gyre_abi::error::name(*.code))]
    KernelLost {
        /// Kernel name.
        kernel: String,
        /// `gyre_abi::error::KERNEL_GONE`.
        code: u32,
        /// What the backend reported.
        cause: String,
    },
    /// The kernel has terminated; no more requests are accepted or answered.
    #[error("kernel '{kernel}' has terminated{}", if *.code != 0 { format!(" ({})", gyre_abi::error::name(*.code)) } else { String::new() })]
    KernelTerminated {
        /// Kernel name.
        kernel: String,
        /// Error code (0 for a commanded shutdown).
        code: u32,
    },
    /// The handler answered with an error status.
    #[error("handler of kernel '{kernel}' failed: {name} (status {status})")]
    Handler {
        /// Kernel name.
        kernel: String,
        /// Reply status.
        status: u32,
        /// `gyre_abi::error::name(status)`.
        name: &'static str,
    },
    /// A slot failed the protocol checks (sequence, length, correlation).
    #[error("protocol error on {ring} ring at index {index}: {what} (expected {expected}, found {found})")]
    Protocol {
        /// `request` or `reply`.
        ring: &'static str,
        /// The ring index.
        index: u64,
        /// What was wrong.
        what: &'static str,
        /// The expected value.
        expected: u64,
        /// The value found.
        found: u64,
    },
    /// A reply's length does not match the reply type.
    #[error("reply of {actual} bytes where {expected} were expected")]
    ReplySize {
        /// `size_of` the reply type.
        expected: usize,
        /// Payload length of the reply slot.
        actual: usize,
    },
    /// The handler answered with a reply longer than the reply slot's payload (the kernel
    /// refused it; a raw or device handler only: a typed reply is checked at launch).
    #[error("handler of kernel '{kernel}' returned a reply longer than the slot payload of {payload} bytes")]
    ReplyTooLong {
        /// Kernel name.
        kernel: String,
        /// Payload capacity of a slot (`slot_size - 64`).
        payload: usize,
    },
    /// Memory for the shared region could not be allocated.
    #[error("allocation of {size} bytes aligned to {align} failed")]
    Alloc {
        /// Bytes requested.
        size: usize,
        /// Alignment requested.
        align: usize,
    },
    /// A backend could not launch the kernel. The message ends with the cause's; the
    /// cause itself is the error's [`source`](std::error::Error::source).
    #[error("{backend} backend could not launch kernel '{kernel}': {source}")]
    Launch {
        /// Backend name (`cpu`, `cuda`, `opencl`; `host` or `bridge` for a host thread,
        /// `telemetry export` for the export file).
        backend: &'static str,
        /// Kernel name.
        kernel: String,
        /// Why: the backend's own error ([`Cause::downcast_ref`] recovers it).
        source: Cause,
    },
    /// The requested backend is not available on this machine (or in this build). The
    /// message ends with the cause's; the cause itself is the error's
    /// [`source`](std::error::Error::source).
    #[error("{backend} backend unavailable: {source}")]
    BackendUnavailable {
        /// Backend name.
        backend: &'static str,
        /// What is missing: the backend's own error, or a message.
        source: Cause,
    },
    /// An operation did not complete in time.
    #[error("{op} timed out after {after:?}")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The limit that was reached.
        after: Duration,
    },
    /// No consistent telemetry snapshot could be read (the writer stopped mid-write or
    /// writes faster than the reader can follow).
    #[error("no consistent telemetry snapshot after {attempts} attempts")]
    TornTelemetry {
        /// Reads tried.
        attempts: u32,
    },
    /// The host-side watchdog saw neither a kernel heartbeat nor any progress for longer
    /// than its bound (a handler that never returns, a hung device): the kernel was marked
    /// unresponsive and told to terminate. Requests it did not answer fail with this; a
    /// request failed this way may still have been executed.
    #[error("kernel '{kernel}' is unresponsive: no heartbeat or progress for {silent_for:?} (watchdog bound {bound:?})")]
    Unresponsive {
        /// Kernel name.
        kernel: String,
        /// How long the kernel had been silent when the watchdog fired.
        silent_for: Duration,
        /// The configured watchdog bound.
        bound: Duration,
    },
    /// The kernel accepts no more requests (shutdown started).
    #[error("kernel '{kernel}' is closed to new requests")]
    Closed {
        /// Kernel name.
        kernel: String,
    },
    /// A copy between host and device memory failed (the copy strategies' bridge).
    #[error(
        "{engine} copy engine: {op} of {len} bytes at device offset {offset} failed: {source}"
    )]
    Transfer {
        /// Engine name (`host`, `cuda`).
        engine: &'static str,
        /// The operation (`copy host to device`, ...).
        op: &'static str,
        /// Byte offset in the device region.
        offset: usize,
        /// Bytes to copy.
        len: usize,
        /// Why: the engine's error (for CUDA, the driver's, with its name and code), or a
        /// message naming the violated bound.
        #[source]
        source: crate::Cause,
    },
    /// The backend cannot run the kernel's handler: a Rust closure on a device backend,
    /// or a device backend without device code for it. Nothing was allocated or launched.
    #[error(
        "kernel '{kernel}' cannot run on the {backend} backend: its handler is {handler}; \
         {remedy}"
    )]
    HandlerUnsupported {
        /// Kernel name.
        kernel: String,
        /// Backend name (`cuda`, `opencl`).
        backend: &'static str,
        /// What the spec's handler is (and how it was made).
        handler: &'static str,
        /// The constructors or backends that would run it.
        remedy: &'static str,
    },
    /// A reload's spec does not fit the running kernel: its rings (capacity, slot size,
    /// batch size), message type or backend differ. Nothing was stopped; the running
    /// kernel keeps serving.
    #[error(
        "kernel '{kernel}' cannot be reloaded with this spec: its {field} is {reload}, the \
         running kernel's is {running}"
    )]
    ReloadMismatch {
        /// Kernel name.
        kernel: String,
        /// What differs: `capacity`, `slot_size`, `batch_size`, `message type`, `backend`,
        /// `loans` (a loan spec for a kernel without a pool, or the reverse), `loan pool`.
        field: &'static str,
        /// The running kernel's value.
        running: String,
        /// The reload spec's value.
        reload: String,
    },
    /// A pipeline the runtime cannot build as asked (`docs/pipelines.md`): stages whose
    /// rings differ, an option a stage cannot have, a shape that is not supported, or an
    /// operation a pipeline refuses. Nothing was launched (or, for an operation, changed).
    #[error("pipeline '{pipeline}', stage {stage}: {reason}")]
    Pipeline {
        /// Pipeline name.
        pipeline: String,
        /// The stage concerned (0 is the first).
        stage: usize,
        /// What is wrong, with the values involved.
        reason: String,
    },
    /// A loan longer than the largest block of the kernel's loan pool.
    #[error("loan of {len} bytes is larger than the loan pool's largest block of {max} bytes")]
    LoanTooLarge {
        /// Bytes asked for.
        len: usize,
        /// The largest block (the pool's size).
        max: usize,
    },
    /// No free block of the loan pool fits the loan now (`try_loan`); the async and
    /// blocking forms wait instead.
    #[error("loan pool exhausted: no free block fits {len} bytes ({free} bytes free, largest free block {largest_free})")]
    PoolExhausted {
        /// Bytes asked for.
        len: usize,
        /// Bytes in free blocks.
        free: u64,
        /// The largest free block.
        largest_free: u64,
    },
    /// A loan handle named no block its receiver holds: the kernel answered `BAD_LOAN`
    /// for a request's handle, or a reply's handle failed the host's check. Nothing was
    /// read outside the pool.
    #[error("bad loan handle (offset {offset}, len {len}, generation {generation}) {side}: {why}")]
    BadLoan {
        /// `from the host` (the kernel refused it) or `from the kernel` (the host did).
        side: &'static str,
        /// The handle's offset.
        offset: u64,
        /// The handle's length.
        len: u32,
        /// The handle's generation.
        generation: u32,
        /// What was wrong.
        why: &'static str,
    },
    /// The backend cannot place a kernel's rings the way a transfer strategy needs.
    #[error("{backend} backend cannot run the {strategy} transfer strategy: {reason}")]
    StrategyUnsupported {
        /// Backend name.
        backend: &'static str,
        /// Strategy name.
        strategy: &'static str,
        /// Why.
        reason: String,
    },
}

/// Result alias for [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why `try_send` did not accept a message. The message is handed back unharmed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrySendError<T> {
    /// The ring has no free slot (back-pressure): retry later.
    #[error("ring full")]
    Full(T),
    /// The kernel accepts no more requests.
    #[error("ring closed")]
    Closed(T),
}

impl<T> TrySendError<T> {
    /// The message that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(t) | TrySendError::Closed(t) => t,
        }
    }
}
