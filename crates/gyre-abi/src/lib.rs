//! The shared-memory ABI of gyre: every byte that both the host and a ring kernel touch.
//!
//! This crate is the single source of truth for the layout. Its C mirror is
//! `cuda/include/gyre/abi.h`; both sides assert every size and alignment at compile time,
//! and the `c_probe` test compiles the header with the host C compiler and compares
//! `sizeof` / `alignof` / `offsetof` of every field with [`core::mem::offset_of!`].
//!
//! # The three structures
//!
//! * [`ControlBlock`] — 128 bytes, two 64-byte cache lines. Line 0 is written **only by
//!   the host**, line 1 **only by the kernel**. No field is written by both sides, which
//!   is what lets the protocol work across PCIe without read-modify-write atomics between
//!   host and device.
//! * [`SlotHeader`] — the first [`SLOT_HEADER_SIZE`] bytes of every message slot; the
//!   payload follows it. A slot is `slot_size` bytes, a multiple of [`SLOT_ALIGN`].
//! * [`TelemetryBuffer`] — 64 bytes, one cache line, written only by the kernel under a
//!   sequence lock, read by any number of consumers.
//!
//! Fields that the other side reads concurrently are atomics; `AtomicU32` / `AtomicU64`
//! have the size and alignment of `u32` / `u64` (asserted below), so the layout is the
//! plain C layout of the header.
//!
//! # Examples
//!
//! ```
//! use gyre_abi::{ControlBlock, SlotHeader, TelemetryBuffer};
//! assert_eq!(core::mem::size_of::<ControlBlock>(), 128);
//! assert_eq!(core::mem::align_of::<ControlBlock>(), 128);
//! assert_eq!(core::mem::size_of::<SlotHeader>(), 64);
//! assert_eq!(core::mem::size_of::<TelemetryBuffer>(), 64);
//! ```
#![no_std]
#![warn(missing_docs)]

use core::sync::atomic::{AtomicU32, AtomicU64};

use static_assertions::{const_assert, const_assert_eq};

/// `"GYRE"` in little-endian ASCII; the first word of every [`ControlBlock`].
pub const MAGIC: u32 = u32::from_le_bytes(*b"GYRE");
/// Version of this ABI. Bumped on any layout or protocol change; checked at launch.
pub const ABI_VERSION: u32 = 6;

/// Alignment (and size granularity) of a message slot, in bytes.
pub const SLOT_ALIGN: usize = 128;
/// Size of [`SlotHeader`]; the payload of a slot starts at this offset.
pub const SLOT_HEADER_SIZE: usize = 64;
/// Smallest legal slot size.
pub const MIN_SLOT_SIZE: usize = SLOT_ALIGN;
/// Largest legal slot size (1 MiB). Larger messages belong in buffers, not rings.
pub const MAX_SLOT_SIZE: usize = 1 << 20;
/// Smallest legal ring capacity.
pub const MIN_CAPACITY: u32 = 2;
/// Largest legal ring capacity (2^24 slots).
pub const MAX_CAPACITY: u32 = 1 << 24;

/// Host commands, written to [`ControlBlock::command`] (host line).
pub mod command {
    /// Process requests (the initial command).
    pub const RUN: u32 = 1;
    /// Stop consuming requests until [`RUN`] is written again.
    pub const PAUSE: u32 = 2;
    /// Drain every published request, then terminate.
    pub const TERMINATE: u32 = 3;
    /// Stop at the next batch boundary for a successor: the kernel answers nothing more,
    /// writes [`HANDED_OVER`](crate::state::HANDED_OVER) and exits; the host then writes
    /// the command the successor must follow and launches it on the same region, which
    /// continues from `h2k_tail` (`docs/protocol.md`, handover).
    pub const HANDOVER: u32 = 4;
}

/// Kernel states, written to [`ControlBlock::state`] (kernel line).
///
/// `Launching -> Active <-> Paused -> Draining -> Terminated`, and `Faulted` from any
/// state; `HandedOver` from any non-final state, after which a successor launched on the
/// same region writes `Launching` again. Zeroed memory reads as
/// [`UNINIT`](state::UNINIT): the kernel has not started.
pub mod state {
    /// The kernel has not written its state yet.
    pub const UNINIT: u32 = 0;
    /// The kernel is validating the control block.
    pub const LAUNCHING: u32 = 1;
    /// The kernel is polling for and processing requests.
    pub const ACTIVE: u32 = 2;
    /// The kernel is alive but consumes no requests.
    pub const PAUSED: u32 = 3;
    /// Terminate was commanded; the kernel is answering the requests already published.
    pub const DRAINING: u32 = 4;
    /// The kernel loop has exited normally (or because the host heartbeat went stale;
    /// see [`ControlBlock::error_code`](crate::ControlBlock::error_code)).
    pub const TERMINATED: u32 = 5;
    /// The kernel loop has exited because of the error in
    /// [`ControlBlock::error_code`](crate::ControlBlock::error_code).
    pub const FAULTED: u32 = 6;
    /// The kernel stopped at a batch boundary for a successor (the host commanded
    /// [`HANDOVER`](crate::command::HANDOVER), or its epoch ran out): everything below
    /// `h2k_tail` is answered, nothing above it was touched, and its loop has exited. Not
    /// final: the host launches a successor on the same region.
    pub const HANDED_OVER: u32 = 7;

    /// Whether `s` is a state the kernel never leaves.
    pub const fn is_final(s: u32) -> bool {
        s == TERMINATED || s == FAULTED
    }

    /// Whether the kernel's loop has stopped in state `s`: a final state, or
    /// [`HANDED_OVER`].
    pub const fn is_stopped(s: u32) -> bool {
        is_final(s) || s == HANDED_OVER
    }
}

/// Error codes in [`ControlBlock::error_code`] (kernel line) and reply statuses in
/// [`SlotHeader::status`].
pub mod error {
    /// No error / the reply is a success.
    pub const NONE: u32 = 0;
    /// The handler panicked (CPU) or trapped (device) while processing a request.
    pub const HANDLER_PANIC: u32 = 1;
    /// A request slot's sequence number did not match its index.
    pub const BAD_SEQUENCE: u32 = 2;
    /// A request slot's payload length exceeded the slot's payload capacity.
    pub const BAD_LENGTH: u32 = 3;
    /// The control block's magic did not match [`MAGIC`](crate::MAGIC).
    pub const BAD_MAGIC: u32 = 4;
    /// The control block's ABI version did not match [`ABI_VERSION`](crate::ABI_VERSION).
    pub const BAD_ABI_VERSION: u32 = 5;
    /// The control block's ring geometry is invalid.
    pub const BAD_GEOMETRY: u32 = 6;
    /// The kernel stopped because the host heartbeat went stale.
    pub const HOST_HEARTBEAT_STALE: u32 = 7;
    /// The handler rejected the request (bad arguments); the kernel keeps serving.
    pub const HANDLER_REJECTED: u32 = 8;
    /// The handler does not know the message type; the kernel keeps serving.
    pub const UNKNOWN_TYPE: u32 = 9;
    /// The kernel failed before answering (reported by the host for requests that
    /// never received a reply).
    pub const KERNEL_GONE: u32 = 10;
    /// A host <-> device copy of the bridge failed (reported by the host in its mirror of
    /// the control block; the kernel itself never writes it).
    pub const TRANSFER_FAILED: u32 = 11;
    /// A loan handle named no block the kernel holds: an offset outside the pool or not
    /// at a block's start, a length beyond the block, or a stale generation (the block
    /// was returned or sent again). Answered instead of touching the bytes; the kernel
    /// keeps serving.
    pub const BAD_LOAN: u32 = 12;
    /// A pipeline stage stopped because the stage after it stopped for good: what it
    /// held could never be passed on (`docs/pipelines.md`). Its final state is
    /// `TERMINATED` with this code; the stage that stopped first says why.
    pub const STAGE_STOPPED: u32 = 13;
    /// First code available to user handlers.
    pub const USER_BASE: u32 = 0x1000;

    /// A short, stable name for an error code.
    pub const fn name(code: u32) -> &'static str {
        match code {
            NONE => "none",
            HANDLER_PANIC => "handler panic",
            BAD_SEQUENCE => "bad slot sequence",
            BAD_LENGTH => "payload length beyond slot",
            BAD_MAGIC => "bad control-block magic",
            BAD_ABI_VERSION => "ABI version mismatch",
            BAD_GEOMETRY => "bad ring geometry",
            HOST_HEARTBEAT_STALE => "host heartbeat stale",
            HANDLER_REJECTED => "handler rejected request",
            UNKNOWN_TYPE => "unknown message type",
            KERNEL_GONE => "kernel stopped before replying",
            TRANSFER_FAILED => "host-device transfer failed",
            BAD_LOAN => "bad loan handle",
            STAGE_STOPPED => "next pipeline stage stopped",
            c if c >= USER_BASE => "user error",
            _ => "unknown error",
        }
    }
}

/// Loans (`docs/loans.md`): the handle a loan kernel's slot carries, and the state
/// word each smallest block (unit) of its pool has. Host-side parties change a word by
/// compare-and-swap; a device kernel only reads it. A word: generation in bits 0..32,
/// owner in bits 32..34, order (the block is 2^order units) in bits 40..46; only a
/// block's first unit's word counts. A sent block is bound to the request slot that
/// carries it: its generation is that slot's [`slot_tag`](loan::slot_tag).
pub mod loan {
    /// Bytes of a handle `{ offset: u64, len: u32, generation: u32 }` in a payload.
    pub const HANDLE_SIZE: u32 = 16;
    /// Bytes from one state word to the next (one cache line each).
    pub const WORD_STRIDE: u32 = 64;
    /// First bit of the owner in a state word.
    pub const OWNER_SHIFT: u32 = 32;
    /// First bit of the order in a state word.
    pub const ORDER_SHIFT: u32 = 40;
    /// Owner: in the allocator.
    pub const OWNER_FREE: u64 = 0;
    /// Owner: the host (one `Loan`).
    pub const OWNER_HOST: u64 = 1;
    /// Owner: the kernel (sent, not being worked on).
    pub const OWNER_KERNEL: u64 = 2;
    /// Owner: the kernel, held by a host-side party (a CPU kernel's Rust handler, or the
    /// bridge copying it). Device kernels never write a word, so never this.
    pub const OWNER_BUSY: u64 = 3;

    /// The generation of a block sent in request slot `index`, and of the handle that
    /// slot carries: the low 32 bits of the slot's ring index (`GYRE_LOAN_SLOT_TAG`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(gyre_abi::loan::slot_tag((1 << 32) + 7), 7);
    /// ```
    pub const fn slot_tag(index: u64) -> u32 {
        index as u32
    }
}

/// Flags of a pipeline stage's link (`docs/pipelines.md`): a kernel argument, not a field
/// of shared memory. A stage's replies go to the next stage's request ring, and the last
/// stage's to the reply ring of the first (the chain's *head*, which the host reads).
pub mod link {
    /// The next region is the chain's head: write its reply ring, publish to its
    /// `k2h_head`, wait on its `k2h_tail`.
    pub const TO_HEAD: u32 = 1 << 0;
    /// This stage's requests are an earlier stage's replies: a non-zero status in one is
    /// passed on without running the handler.
    pub const FROM_STAGE: u32 = 1 << 1;
    /// The link argument is a [`JoinTable`](crate::JoinTable), not a region: the reply to
    /// a request is written at the index its **correlation id** names in the ring of the
    /// table's target (a join stage's request ring, or with [`TO_HEAD`] the head's reply
    /// ring), and the target's head is advanced over the written prefix by whichever of
    /// its producers completes it. Several stages may write one target this way.
    pub const BY_ID: u32 = 1 << 2;
    /// The link argument is a [`RouteTable`](crate::RouteTable), not a region: each reply
    /// goes to one of the table's branches (round-robin or by a key in the reply).
    pub const FAN_OUT: u32 = 1 << 3;
    /// The stage answers each request with its own request index as correlation id (the
    /// head of a pipeline whose later stages write by id: the host's index, whatever a
    /// request's header said).
    pub const OWN_ID: u32 = 1 << 4;
    /// The stage is in a fan-out's branch: its request indices are the branch's own, not
    /// the host's, so it answers no protocol error (a wrong sequence under its published
    /// head): such a reply could not name its request. It waits instead.
    pub const BRANCH: u32 = 1 << 5;
    /// The host relaunches this stage after its handler faults (the stage's spec has a
    /// restart policy with restarts left): on a fault the stage hands over (state
    /// `HANDED_OVER`, the fault's code in `error_code`) instead of faulting, and tells no
    /// stage it writes to terminate; the stages around it wait for its successor. If the
    /// host gives up, it writes `FAULTED` itself once the stage's execution ended.
    pub const RESTARTS: u32 = 1 << 6;
}

/// How a fan-out stage picks a branch ([`RouteTable::mode`]).
pub mod route {
    /// Most branches of one fan-out.
    pub const MAX_BRANCHES: u32 = 8;
    /// Branch `i mod count` for the stage's i-th reply.
    pub const ROUND_ROBIN: u32 = 0;
    /// Branch `splitmix64(key) mod count`, `key` the little-endian `u64` at
    /// [`RouteTable::key_offset`](crate::RouteTable::key_offset) of the reply payload (0
    /// for a reply too short to hold it, an error reply among them).
    pub const KEY: u32 = 1;
}

/// Slot header flags ([`SlotHeader::flags`]).
pub mod flags {
    /// The request came from `call` (its reply completes a waiting caller) rather than
    /// `send` (its reply goes to `recv`). The kernel copies it into the reply.
    pub const CALL: u32 = 1 << 0;
}

/// Flags of [`ControlBlock::host_flags`], set by the host before launch.
pub mod host_flags {
    /// Requests exist only below `h2k_head`: the kernel bounds every batch by the
    /// published head (the doorbell) instead of trusting a slot's sequence alone. Set
    /// when a copy engine fills the request ring: a DMA copy writes a slot's words in no
    /// particular order, so its sequence may land before its payload. Without it (zero
    /// copy) the host's producers write the sequence last, and the kernel polls slot
    /// sequences directly.
    pub const DOORBELL: u32 = 1 << 0;
    /// Checked slots (docs/protocol.md, "Checked slots"): the rings are remote memory the
    /// kernel reads in waves of independent loads (zero copy over PCIe), where a slot's
    /// words may arrive in any order. A slot is taken only when its sequence is the
    /// index's **and** its [`SlotHeader::check`](crate::SlotHeader::check) is the [`check`](crate::check) of its
    /// words; replies are written the same way, with no fence per message, and the host
    /// accepts a reply only when its check holds. Set by the host before launch.
    pub const CHECKED: u32 = 1 << 1;
}

/// The 128-byte control block of one ring kernel.
///
/// Line 0 (bytes 0..64) is written only by the host; line 1 (bytes 64..128) only by the
/// kernel. Ring indices are free-running `u64` counters; the slot of index `i` is
/// `i & (capacity - 1)`. Request index `i` is answered by reply index `i`: the kernel
/// consumes requests in order and publishes exactly one reply per request, in order.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct ControlBlock {
    // ---- line 0: host-written ----
    /// [`MAGIC`]; written by the host before launch.
    pub magic: AtomicU32,
    /// [`ABI_VERSION`]; written by the host before launch.
    pub abi_version: AtomicU32,
    /// The current [`command`]; host-written, kernel-read.
    pub command: AtomicU32,
    /// Capacity of both rings, in slots: a power of two in
    /// [`MIN_CAPACITY`]..=[`MAX_CAPACITY`].
    pub capacity: AtomicU32,
    /// Slot size of both rings, in bytes: a multiple of [`SLOT_ALIGN`] in
    /// [`MIN_SLOT_SIZE`]..=[`MAX_SLOT_SIZE`].
    pub slot_size: AtomicU32,
    /// Most requests the kernel takes in one batch (>= 1).
    pub batch_size: AtomicU32,
    /// The kernel terminates itself when the host heartbeat has not changed for this
    /// many milliseconds (0 = never).
    pub host_timeout_ms: AtomicU32,
    /// [`host_flags`]: how the kernel learns of new requests; written before launch.
    pub host_flags: AtomicU32,
    /// Requests published: every request index below it is fully written.
    pub h2k_head: AtomicU64,
    /// Replies consumed: every reply slot below it may be reused by the kernel.
    pub k2h_tail: AtomicU64,
    /// Host heartbeat: any value that changes while the host is alive (host clock, ns).
    pub host_heartbeat: AtomicU64,
    /// The kernel hands over to a successor once it has run this many microseconds
    /// (checked after every batch and on its slow path; 0 = never): bounded epochs for
    /// devices whose display watchdog kills long kernels. Written before each launch.
    pub epoch_us: AtomicU32,
    /// Launches on this region so far (1 for the first kernel; the host increments it
    /// before each successor's launch). Informational: the kernel only reads it.
    pub generation: AtomicU32,
    // ---- line 1: kernel-written ----
    /// The kernel's [`state`].
    pub state: AtomicU32,
    /// The kernel's [`error`] code when it faulted or terminated itself, else 0.
    pub error_code: AtomicU32,
    /// Requests consumed: every request index below it has been read by the kernel.
    pub h2k_tail: AtomicU64,
    /// Replies published: every reply index below it is fully written.
    pub k2h_head: AtomicU64,
    /// Kernel heartbeat: changes while the kernel loop runs (kernel clock, ns).
    pub kernel_heartbeat: AtomicU64,
    /// Requests processed (successfully or with an error reply). Refreshed on the
    /// kernel's slow path and when it stops, not per batch (`h2k_tail` is exact).
    pub processed: AtomicU64,
    /// Reserved, zero.
    pub _reserved2: [u64; 3],
}

/// The header at the start of every slot; the payload follows at [`SLOT_HEADER_SIZE`].
///
/// The producer writes every field, then the payload, then `sequence` **last** with
/// release semantics. A consumer expecting index `i` accepts the slot only when
/// `sequence == i + 1` (so zeroed memory is never a message); any other value under a
/// published head is a protocol error.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct SlotHeader {
    /// `index + 1` of the message in this slot; written last, with release.
    pub sequence: AtomicU64,
    /// Correlation id chosen by the requester; the kernel copies it into the reply.
    pub correlation_id: u64,
    /// When the request was enqueued (host clock, ns) if the kernel was launched with
    /// timestamps on, else 0; copied into the reply.
    pub enqueue_ns: u64,
    /// Message type; for built-in kernels, the kernel's id (see `gyre_core::kernels`).
    pub msg_type: u32,
    /// Payload length in bytes (<= `slot_size - SLOT_HEADER_SIZE`).
    pub len: u32,
    /// [`flags`].
    pub flags: u32,
    /// Reply status: [`error::NONE`] or an [`error`] code. Zero in requests.
    pub status: u32,
    /// The slot's check word on rings with [`host_flags::CHECKED`]: [`check::slot`] of
    /// the header (this word taken out) and the payload's first `len` bytes, rounded up
    /// to whole 8-byte words. Written before `sequence`; unused (any value) elsewhere.
    pub check: u64,
    /// Reserved, zero.
    pub _reserved: [u64; 2],
}

/// Where a fan-out stage's replies go (a pipeline's link argument with
/// [`link::FAN_OUT`]): 256 bytes of the memory the stages share, written by the host
/// before launch; `rr`, `head` and `released` are the fan-out stage's own scratch words
/// afterwards (it is their only writer).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RouteTable {
    /// [`route`] mode.
    pub mode: AtomicU32,
    /// Branches, `2..=route::MAX_BRANCHES`.
    pub count: AtomicU32,
    /// [`route::KEY`]: byte offset of the `u64` key in the reply payload.
    pub key_offset: AtomicU32,
    /// Scratch: replies routed round-robin so far.
    pub rr: AtomicU32,
    /// The message type of each branch's first stage, written into its requests.
    pub msg_type: [AtomicU32; 8],
    /// Reserved, zero.
    pub _reserved: [u64; 2],
    /// The device address of each branch's first stage's region.
    pub target: [AtomicU64; 8],
    /// Scratch: requests written into each branch (its next request index).
    pub head: [AtomicU64; 8],
    /// Scratch: each branch's `h2k_tail` as last read.
    pub released: [AtomicU64; 8],
    /// Scratch: the device address of each branch's first stage's request ring, read
    /// from its [`RingPlacement`] once at start (the ring may be apart from the region).
    pub ring: [AtomicU64; 8],
}

/// Where the stages writing one target by correlation id ([`link::BY_ID`]) stand: 64
/// bytes of the memory the stages share, one per join (or per fan-in into the head).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct JoinTable {
    /// The device address of the target region: a join stage's, or the head's with
    /// [`link::TO_HEAD`].
    pub target: AtomicU64,
    /// Stages writing the target.
    pub producers: AtomicU32,
    /// Reserved, zero.
    pub _reserved0: u32,
    /// Producers that stopped for good (incremented by each, compare-and-swap); the one
    /// that makes it `producers` tells a join stage to terminate.
    pub stopped: AtomicU64,
    /// Reserved, zero.
    pub _reserved: [u64; 5],
}

/// Where a region's request ring lives: the 64 bytes after the telemetry line (offset
/// [`PLACEMENT_OFFSET`]), written by the host before the region's first launch and never
/// after.
///
/// A request ring that only kernels touch (the inner ring of a pipeline, between two
/// stages of one device) may live apart from its region, in memory the host does not
/// address (device memory on CUDA): the kernels read its address here. Zero, as in a
/// freshly zeroed region, means the ring is where the region layout puts it (offset 256).
///
/// # Examples
///
/// ```
/// use gyre_abi::{RingPlacement, PLACEMENT_OFFSET};
/// assert_eq!(PLACEMENT_OFFSET, 192);
/// assert_eq!(core::mem::size_of::<RingPlacement>(), 64);
/// ```
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RingPlacement {
    /// The device address of the request ring (`capacity x slot_size` bytes, 128-aligned),
    /// or 0: inline.
    pub request_ring: AtomicU64,
    /// Reserved, zero.
    pub _reserved: [u64; 7],
}

/// Offset of the [`RingPlacement`] line in a region.
pub const PLACEMENT_OFFSET: usize = 192;

/// The 64-byte telemetry line, written only by the kernel under a sequence lock.
///
/// Writer: `seq += 1` (odd), write fields, `seq += 1` (even) with release. Reader: load
/// `seq` (acquire); if odd, retry; read the fields; acquire fence; reload `seq`; if it
/// changed, retry. Counters are cumulative since launch.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct TelemetryBuffer {
    /// Sequence lock: odd while a write is in progress.
    pub seq: AtomicU32,
    /// The kernel [`state`] at the time of the write.
    pub state: AtomicU32,
    /// Requests taken from the request ring.
    pub messages_in: AtomicU64,
    /// Replies published to the reply ring.
    pub messages_out: AtomicU64,
    /// Error replies (handler errors, protocol errors).
    pub errors: AtomicU64,
    /// Polls that found work.
    pub busy_polls: AtomicU64,
    /// Polls that found no work.
    pub idle_polls: AtomicU64,
    /// Total handler time, ns.
    pub handler_ns_total: AtomicU64,
    /// Longest handler time of one batch (all its requests), ns, saturating at
    /// `u32::MAX`. With a batch size of 1 this is the longest single invocation.
    pub handler_ns_max: AtomicU32,
    /// Kernel clock at the last write, in ms (wrapping); compare for change, not value.
    pub heartbeat_ms: AtomicU32,
}

/// A plain copy of a [`TelemetryBuffer`] taken by a consistent read.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TelemetrySnapshot {
    /// The writer's sequence number of this snapshot (even).
    pub seq: u32,
    /// Kernel [`state`].
    pub state: u32,
    /// Requests taken.
    pub messages_in: u64,
    /// Replies published.
    pub messages_out: u64,
    /// Error replies.
    pub errors: u64,
    /// Polls that found work.
    pub busy_polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// Total handler time, ns.
    pub handler_ns_total: u64,
    /// Longest handler time of one batch, ns.
    pub handler_ns_max: u32,
    /// Kernel clock at the write, ms (wrapping).
    pub heartbeat_ms: u32,
}

// ---- compile-time layout checks (mirrored by static_assert in abi.h) ----
const_assert_eq!(core::mem::size_of::<AtomicU32>(), 4);
const_assert_eq!(core::mem::align_of::<AtomicU32>(), 4);
const_assert_eq!(core::mem::size_of::<AtomicU64>(), 8);
const_assert_eq!(core::mem::align_of::<AtomicU64>(), 8);

const_assert_eq!(core::mem::size_of::<ControlBlock>(), 128);
const_assert_eq!(core::mem::align_of::<ControlBlock>(), 128);
const_assert_eq!(core::mem::offset_of!(ControlBlock, h2k_head), 32);
const_assert_eq!(core::mem::offset_of!(ControlBlock, host_heartbeat), 48);
const_assert_eq!(core::mem::offset_of!(ControlBlock, epoch_us), 56);
const_assert_eq!(core::mem::offset_of!(ControlBlock, generation), 60);
// Line 1 starts exactly at byte 64: nothing host-written shares a line with the kernel.
const_assert_eq!(core::mem::offset_of!(ControlBlock, state), 64);
const_assert_eq!(core::mem::offset_of!(ControlBlock, processed), 96);

const_assert_eq!(core::mem::size_of::<SlotHeader>(), SLOT_HEADER_SIZE);
const_assert_eq!(core::mem::align_of::<SlotHeader>(), 64);
const_assert_eq!(core::mem::offset_of!(SlotHeader, sequence), 0);
const_assert_eq!(core::mem::offset_of!(SlotHeader, status), 36);
const_assert_eq!(core::mem::offset_of!(SlotHeader, check), 40);
const_assert_eq!(
    core::mem::offset_of!(SlotHeader, check),
    check::CHECK_WORD * 8
);

const_assert_eq!(core::mem::size_of::<TelemetryBuffer>(), 64);
const_assert_eq!(core::mem::align_of::<TelemetryBuffer>(), 64);
const_assert_eq!(core::mem::offset_of!(TelemetryBuffer, heartbeat_ms), 60);
const_assert_eq!(core::mem::size_of::<TelemetrySnapshot>(), 64);

const_assert_eq!(core::mem::size_of::<RingPlacement>(), 64);
const_assert_eq!(core::mem::align_of::<RingPlacement>(), 64);
const_assert_eq!(PLACEMENT_OFFSET % 64, 0);

const_assert_eq!(core::mem::size_of::<RouteTable>(), 320);
const_assert_eq!(core::mem::align_of::<RouteTable>(), 64);
const_assert_eq!(core::mem::offset_of!(RouteTable, msg_type), 16);
const_assert_eq!(core::mem::offset_of!(RouteTable, target), 64);
const_assert_eq!(core::mem::offset_of!(RouteTable, head), 128);
const_assert_eq!(core::mem::offset_of!(RouteTable, released), 192);
const_assert_eq!(core::mem::offset_of!(RouteTable, ring), 256);
const_assert_eq!(route::MAX_BRANCHES, 8);

const_assert_eq!(core::mem::size_of::<JoinTable>(), 64);
const_assert_eq!(core::mem::align_of::<JoinTable>(), 64);
const_assert_eq!(core::mem::offset_of!(JoinTable, stopped), 16);

const_assert!(SLOT_HEADER_SIZE < MIN_SLOT_SIZE);
const_assert!(MAX_SLOT_SIZE % SLOT_ALIGN == 0);
const_assert!(MAX_CAPACITY.is_power_of_two());

/// The check word of a slot on a ring with [`host_flags::CHECKED`].
///
/// A kernel reading remote memory (mapped host memory over PCIe) issues its loads of a
/// slot together, as one *read wave*, and they may be served in any order: a load issued
/// after the host's last store can return new data while another returns the previous
/// lap's. The sequence alone cannot tell, so the producer also writes a check word over
/// every other word it wrote, and the consumer takes the slot only when the words it read
/// hash to the check word it read. A stale word changes the sum by the difference of two
/// distinct values of a bijective mix, so one stale word is always caught; several stale
/// words are missed only if their differences cancel, about one chance in 2^64 (measured
/// need: docs/protocol.md, "Checked slots").
///
/// The sum runs over 8-byte words `j` of the slot (little-endian): the header words 0..8
/// except [`CHECK_WORD`](check::CHECK_WORD), then payload words 8.. up to the slot's
/// `len` rounded up to a whole word (at most the payload). Each word contributes
/// [`check::term`]`(word, j)`; the sum wraps. The C twin is `gyre_check_term` in
/// `cuda/include/gyre/ring.h`.
///
/// # Examples
///
/// ```
/// use gyre_abi::check;
/// let mut words = [0u64; 16];
/// words[0] = 1; // sequence of index 0
/// words[3] = 8 << 32; // len = 8 in the high half of word 3
/// words[8] = 42;
/// let c = check::slot(&words, 64);
/// words[check::CHECK_WORD] = c; // the check word itself is not summed
/// assert_eq!(check::slot(&words, 64), c);
/// words[8] = 43;
/// assert_ne!(check::slot(&words, 64), c);
/// ```
pub mod check {
    /// The header word that holds the check (byte offset 40).
    pub const CHECK_WORD: usize = 5;
    /// The header's words (64 bytes).
    pub const HEADER_WORDS: usize = 8;
    /// The per-position key: word `j` is mixed with `(j + 1) * KEY` before the mix.
    pub const KEY: u64 = 0x9e37_79b9_7f4a_7c15;

    /// MurmurHash3's 64-bit finaliser: a bijection of `u64` with full avalanche.
    #[inline(always)]
    pub const fn fmix64(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x
    }

    /// The contribution of `word` at word position `j` of a slot.
    #[inline(always)]
    pub const fn term(word: u64, j: u32) -> u64 {
        fmix64(word ^ KEY.wrapping_mul(j as u64 + 1))
    }

    /// Words of a slot the check covers: the header's, and the payload's first `len`
    /// bytes rounded up to a whole word, at most `payload` bytes.
    #[inline(always)]
    pub const fn words(len: u32, payload: usize) -> usize {
        let len = if (len as usize) < payload {
            len as usize
        } else {
            payload
        };
        HEADER_WORDS + len.div_ceil(8)
    }

    /// The check of a slot given as its words (header first): the wrapping sum of
    /// [`term`] over [`words`]`(len, payload)` words, the check word excepted, where
    /// `len` is the header's (the high half of word 3). `words` must hold at least that
    /// many; extra words are ignored.
    pub fn slot(words: &[u64], payload: usize) -> u64 {
        let len = (words[3] >> 32) as u32;
        let n = self::words(len, payload).min(words.len());
        let mut sum = 0u64;
        let mut j = 0;
        while j < n {
            if j != CHECK_WORD {
                sum = sum.wrapping_add(term(words[j], j as u32));
            }
            j += 1;
        }
        sum
    }
}

impl ControlBlock {
    /// Whether the magic and ABI version match this build.
    pub fn identity_ok(&self) -> bool {
        use core::sync::atomic::Ordering::Acquire;
        self.magic.load(Acquire) == MAGIC && self.abi_version.load(Acquire) == ABI_VERSION
    }
}

/// Validates a ring geometry as the host does at launch and the kernel does at start.
///
/// Returns the first offending field and value.
///
/// # Examples
///
/// ```
/// use gyre_abi::{check_geometry, GeometryFault};
/// assert_eq!(check_geometry(1024, 128, 32), Ok(()));
/// assert_eq!(check_geometry(1000, 128, 32), Err(GeometryFault::Capacity(1000)));
/// assert_eq!(check_geometry(1024, 100, 32), Err(GeometryFault::SlotSize(100)));
/// ```
pub const fn check_geometry(
    capacity: u32,
    slot_size: u32,
    batch: u32,
) -> Result<(), GeometryFault> {
    if capacity < MIN_CAPACITY || capacity > MAX_CAPACITY || !capacity.is_power_of_two() {
        return Err(GeometryFault::Capacity(capacity));
    }
    let s = slot_size as usize;
    if s < MIN_SLOT_SIZE || s > MAX_SLOT_SIZE || s % SLOT_ALIGN != 0 {
        return Err(GeometryFault::SlotSize(slot_size));
    }
    if batch == 0 || batch > capacity {
        return Err(GeometryFault::BatchSize(batch));
    }
    Ok(())
}

/// Which geometry field is invalid, with its value. See [`check_geometry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeometryFault {
    /// Capacity is not a power of two in `MIN_CAPACITY..=MAX_CAPACITY`.
    Capacity(u32),
    /// Slot size is not a multiple of `SLOT_ALIGN` in `MIN_SLOT_SIZE..=MAX_SLOT_SIZE`.
    SlotSize(u32),
    /// Batch size is 0 or larger than the capacity.
    BatchSize(u32),
}
