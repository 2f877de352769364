//! The host side of one ring kernel: many producers publishing requests, and the
//! delivery of each reply to whoever waits for it.
//!
//! A [`Channel`] owns the host-only state that goes with a [`SharedRegion`]: the claim
//! word of the multi-producer request ring, one `Cell` per slot that records who waits
//! for the reply of that index, the receive cursor for `send`/`recv`, and the waker sets
//! used by the completion driver ([`driver`]).
//!
//! Request index `i` is answered by reply index `i` (the kernel replies once per request,
//! in order), so a caller waits on the reply slot of its own index and no demultiplexing
//! thread is needed on the blocking path. Reply slots are released out of order by
//! whoever consumed them and `k2h_tail` advances over the released prefix
//! ([`prefix::advance_prefix`]). A producer may claim index `i + capacity` only once
//! reply `i` was released, which bounds everything in flight (requests queued, being
//! processed, replies unread) by the capacity: back-pressure reaches producers and
//! nothing is ever overwritten.

pub mod bell;
mod claim;
pub mod driver;
pub mod liveness;
mod reply;
#[cfg(test)]
mod tests;
mod wakers;
pub mod watchdog;

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;
use gyre_abi::{flags, state, SLOT_HEADER_SIZE};
use parking_lot::Mutex;

use crate::error::Error;
use crate::region::{RingId, SharedRegion};
use crate::ring::prefix::{self, ClaimError};
use crate::ring::slot::SlotMeta;

pub use claim::TOMBSTONE_LEN;
pub use reply::{Probe, ReplyView};
pub use wakers::WakerSet;

/// What a channel calls when its rings are not the ones the kernel reads (the copy
/// strategies of [`crate::bridge`]): the bridge moves bytes between the host rings this
/// channel works on and the kernel's device-resident rings.
///
/// Both calls are hints that must be cheap when there is nothing to do; neither may call
/// back into the channel's waiting paths.
pub trait Transfer: Send + Sync {
    /// The host line changed (requests published, a command, the host heartbeat): move
    /// new request slots, then the host line, towards the kernel.
    fn flush(&self);
    /// A waiter wants fresher kernel-side data (replies, state, telemetry): bring them
    /// up (and push the host line first, so released reply slots reach the kernel).
    fn refresh(&self);
}

/// Whether a request's reply completes a caller or goes to `recv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// From `call`: a caller waits on this index.
    Call,
    /// From `send`: the reply is delivered by `recv`, in order.
    Send,
}

/// Why a publish did not happen. Nothing was written in any case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishError {
    /// No free slot.
    Full,
    /// Closed to new requests.
    Closed,
    /// A message exceeds the payload.
    TooLarge {
        /// Message length.
        len: usize,
        /// Payload capacity.
        payload: usize,
    },
    /// More messages in one batch than the ring holds.
    BatchTooLarge {
        /// Messages in the batch.
        len: usize,
        /// Ring capacity.
        capacity: u64,
    },
}

// Cell word: (index << 3) | (is_send << 2) | state.
const ST_IDLE: u64 = 0;
const ST_WAITING: u64 = 1;
const ST_ABANDONED: u64 = 2;
const ST_DONE: u64 = 3;
const ST_MASK: u64 = 3;
const SEND_BIT: u64 = 4;

#[inline(always)]
const fn word(index: u64, kind: Kind, st: u64) -> u64 {
    (index << 3)
        | match kind {
            Kind::Send => SEND_BIT,
            Kind::Call => 0,
        }
        | st
}

/// Host-only bookkeeping for one slot index.
///
/// Invariant: `word` names the index that currently owns the cell; every transition is a
/// compare-and-swap on the whole word, so a cell reused by a later lap is never mistaken
/// for the earlier one.
#[derive(Debug, Default)]
pub(crate) struct Cell {
    /// `(index << 3) | send bit | state`, written by the producer before it publishes.
    word: AtomicU64,
    /// `index + 1` once the reply slot of `index` is released (the `k2h_tail` marker).
    freed: AtomicU64,
    /// The waker of an async waiter, if one registered.
    waker: Mutex<Option<core::task::Waker>>,
}

/// Host side of one kernel's rings. See the [module documentation](self).
pub struct Channel {
    region: Arc<SharedRegion>,
    name: String,
    capacity: u64,
    mask: u64,
    payload: usize,
    /// Claim word of the request ring: indices claimed, plus [`prefix::CLOSED`].
    claim: CachePadded<AtomicU64>,
    /// Next index `recv` examines.
    recv_cursor: CachePadded<AtomicU64>,
    cells: Box<[Cell]>,
    /// Async waiters, abandoned calls and waker-set entries the driver must serve.
    interest: CachePadded<AtomicUsize>,
    /// A kernel thread serves the call waiters after each batch ([`bell`]).
    bell_attached: AtomicBool,
    /// Final kernel state seen by the host (0 while running), and its error code.
    stopped: AtomicU32,
    stopped_code: AtomicU32,
    /// Calls of `poll_stopped` (it reads the kernel's line every 64th).
    stop_polls: AtomicU32,
    /// Replies that failed the protocol checks.
    protocol_errors: AtomicU64,
    space_waiters: WakerSet,
    recv_waiters: WakerSet,
    state_waiters: WakerSet,
    driver: OnceLock<std::thread::Thread>,
    driver_stop: AtomicBool,
    /// Whether producers stamp `enqueue_ns` (a clock read per publish).
    timestamps: bool,
    /// Checked slots (`gyre_abi::host_flags::CHECKED`, set before the channel exists):
    /// producers write each request's check word, and a reply is ready only when its
    /// check word holds (the kernel writes replies with no fence).
    checked: bool,
    /// The bridge to device-resident rings, for the copy strategies; `None` when the
    /// kernel reads these very rings (zero copy).
    transfer: Option<Arc<dyn Transfer>>,
    /// `h2k_head` is lazy: the kernel finds requests by their sequences (K2), so
    /// producers only stamp them and [`Channel::sync_head`] moves the head when
    /// something needs it. Eager (every publication moves the head, P4) where the kernel
    /// trusts only the head: `gyre_abi::host_flags::DOORBELL`, set by a bridge before
    /// the channel exists.
    lazy_head: bool,
    /// The watchdog's verdict (silent for, bound), once it fired (see [`watchdog`]).
    unresponsive: OnceLock<(std::time::Duration, std::time::Duration)>,
    /// The backend's view of the kernel's execution (see [`liveness`]).
    liveness: OnceLock<Arc<dyn liveness::Liveness>>,
    /// When `liveness` was last consulted (`clock::now_ns`).
    liveness_at: AtomicU64,
    /// Why the kernel is gone, once `liveness` reported a failure.
    lost: OnceLock<String>,
    /// The doorbell of a kernel that parks when idle (the CPU backend): rung after every
    /// publication and command.
    doorbell: OnceLock<Arc<crate::doorbell::Doorbell>>,
    /// Whether a `Faulted` state is followed by a restart ([`Channel::arm_restart`]).
    restart_armed: AtomicBool,
    /// Told about every request whose reply slot the host releases (loans).
    release_hook: OnceLock<Arc<dyn ReleaseHook>>,
    /// The pipeline this channel is the head of: its state is the chain's.
    chain: OnceLock<Arc<crate::chain::ChainView>>,
}

/// Told by the host side of a channel about each answered request it is done with: the
/// reply slot of `index` holds its reply and is about to be released (the reply was
/// consumed or discarded). Requests never answered are not reported (see
/// [`Channel::for_each_unanswered`]). The loan pool frees the block of a request nobody
/// claimed.
pub trait ReleaseHook: Send + Sync {
    /// `request` is the request's payload as the host wrote it, `status` the reply's
    /// status. Called before the slot can be reused, on whichever host thread releases
    /// it; must not block.
    fn released(&self, ch: &Channel, index: u64, request: &[u8], status: u32);
}

impl core::fmt::Debug for Channel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("claimed", &self.claimed())
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// A channel over `region`, which must be freshly initialised (all indices 0, the
    /// slots zeroed as `RegionMemory` promises: a lazy head reads a slot that is neither
    /// zero nor its own lap as written).
    pub fn new(region: Arc<SharedRegion>, name: impl Into<String>) -> Self {
        let g = *region.geometry();
        let host_flags = region.control().host_flags.load(Acquire);
        let checked = host_flags & gyre_abi::host_flags::CHECKED != 0;
        Self {
            checked,
            lazy_head: host_flags & gyre_abi::host_flags::DOORBELL == 0,
            name: name.into(),
            capacity: u64::from(g.capacity()),
            mask: g.mask(),
            payload: g.payload(),
            claim: CachePadded::new(AtomicU64::new(0)),
            recv_cursor: CachePadded::new(AtomicU64::new(0)),
            cells: (0..g.capacity()).map(|_| Cell::default()).collect(),
            interest: CachePadded::new(AtomicUsize::new(0)),
            bell_attached: AtomicBool::new(false),
            stopped: AtomicU32::new(0),
            stopped_code: AtomicU32::new(0),
            stop_polls: AtomicU32::new(0),
            protocol_errors: AtomicU64::new(0),
            space_waiters: WakerSet::default(),
            recv_waiters: WakerSet::default(),
            state_waiters: WakerSet::default(),
            driver: OnceLock::new(),
            driver_stop: AtomicBool::new(false),
            timestamps: false,
            transfer: None,
            unresponsive: OnceLock::new(),
            liveness: OnceLock::new(),
            liveness_at: AtomicU64::new(0),
            lost: OnceLock::new(),
            doorbell: OnceLock::new(),
            restart_armed: AtomicBool::new(false),
            release_hook: OnceLock::new(),
            chain: OnceLock::new(),
            region,
        }
    }

    /// Connects the channel to a bridge: it calls [`Transfer::flush`] after it changes
    /// the host line and [`Transfer::refresh`] while a waiter finds nothing new.
    pub fn with_transfer(mut self, t: Arc<dyn Transfer>) -> Self {
        self.transfer = Some(t);
        self
    }

    /// The bridge hook after a host-line change.
    #[inline(always)]
    fn flushed(&self) {
        if let Some(t) = &self.transfer {
            t.flush();
        }
    }

    /// Rings the kernel's doorbell (a parked kernel wakes up) after producers published an
    /// eager head, relying on the SeqCst fence of `prefix::advance_prefix` (see
    /// `doorbell`).
    #[inline(always)]
    pub(crate) fn ring_published(&self) {
        if let Some(d) = self.doorbell.get() {
            d.ring_fenced();
        }
    }

    /// Lets the channel wake a parked kernel: rung after every publication and command.
    /// Set once; later calls are ignored.
    pub fn set_doorbell(&self, d: Arc<crate::doorbell::Doorbell>) {
        let _ = self.doorbell.set(d);
    }

    /// The bridge hook before looking again at kernel-written data.
    #[inline(always)]
    pub(crate) fn refresh(&self) -> bool {
        match &self.transfer {
            Some(t) => {
                t.refresh();
                true
            }
            None => false,
        }
    }

    /// Stamps each request's `enqueue_ns` with the host clock (`clock::now_ns`). Off by
    /// default: it puts a clock read (30-40 ns here) on every publish; when off the
    /// field is 0.
    pub fn with_timestamps(mut self, on: bool) -> Self {
        self.timestamps = on;
        self
    }

    /// The kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The shared region.
    pub fn region(&self) -> &Arc<SharedRegion> {
        &self.region
    }
    /// Slots per ring.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    /// Payload bytes per slot.
    pub fn payload(&self) -> usize {
        self.payload
    }
    /// Indices claimed so far (accepted requests, including ones being written).
    pub fn claimed(&self) -> u64 {
        prefix::claimed(&*self.claim)
    }
    /// Futures waiting for a free slot.
    pub fn space_waiters(&self) -> &WakerSet {
        &self.space_waiters
    }
    /// Futures waiting for a `send` reply.
    pub fn recv_waiters(&self) -> &WakerSet {
        &self.recv_waiters
    }
    /// Futures waiting for the kernel's end.
    pub fn state_waiters(&self) -> &WakerSet {
        &self.state_waiters
    }
    /// Replies that failed the host's protocol checks.
    pub fn protocol_errors(&self) -> u64 {
        self.protocol_errors.load(Acquire)
    }

    #[inline(always)]
    fn cell(&self, index: u64) -> &Cell {
        let i = (index & self.mask) as usize;
        debug_assert!(i < self.cells.len());
        // SAFETY: i <= mask = cells.len() - 1.
        unsafe { self.cells.get_unchecked(i) }
    }

    /// Publishes one request with payload `bytes`; returns its index.
    #[inline]
    pub fn try_publish(
        &self,
        kind: Kind,
        msg_type: u32,
        bytes: &[u8],
    ) -> Result<u64, PublishError> {
        self.try_publish_batch(kind, msg_type, core::slice::from_ref(&bytes))
    }

    /// Publishes `msgs` as consecutive requests with one claim and one head store; returns
    /// the first index. All or nothing: on error nothing was written.
    pub fn try_publish_batch<B: AsRef<[u8]>>(
        &self,
        kind: Kind,
        msg_type: u32,
        msgs: &[B],
    ) -> Result<u64, PublishError> {
        self.publish_n(
            kind,
            msg_type,
            msgs.len(),
            |k| msgs[k].as_ref().len(),
            |k, _, dst| {
                // One read per message after the size check, whose length is the one
                // published: an `AsRef` that grew since is TooLarge, never truncated; one
                // that shrank is published at its new length, never with stale bytes.
                let m = msgs[k].as_ref();
                let to = dst.get_mut(..m.len()).ok_or(m.len())?;
                to.copy_from_slice(m);
                Ok(m.len())
            },
        )
    }

    /// Publishes `bytes.len() / size` requests of `size` bytes each, cut from `bytes`,
    /// with one claim and one head store (no allocation). `size == 0` publishes nothing.
    pub fn try_publish_uniform(
        &self,
        kind: Kind,
        msg_type: u32,
        bytes: &[u8],
        size: usize,
    ) -> Result<u64, PublishError> {
        let n = bytes.len().checked_div(size).unwrap_or(0);
        self.publish_n(
            kind,
            msg_type,
            n,
            |_| size,
            |k, _, dst| {
                dst[..size].copy_from_slice(&bytes[k * size..(k + 1) * size]);
                Ok(size)
            },
        )
    }

    /// Publishes `count` consecutive requests of `len` bytes each with one claim and one
    /// head store, each payload written by `write(k, index, payload)` once its slot
    /// `index` is claimed and before it is published: for payloads that depend on their
    /// slot, such as a loan's handle ([`crate::loan::Loan::send`]). All or nothing:
    /// `write` is called for every request, in order, or (on error) for none.
    ///
    /// # Errors
    ///
    /// As [`Channel::try_publish_batch`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use gyre_core::channel::{Channel, Kind};
    /// use gyre_core::region::SharedRegion;
    /// use gyre_core::ring::Geometry;
    /// let region = Arc::new(SharedRegion::new_host(Geometry::new(8, 128, 1)?, 0)?);
    /// let ch = Channel::new(region, "doc");
    /// let first = ch
    ///     .try_publish_with(Kind::Send, 0, 2, 8, |k, index, payload| {
    ///         payload.copy_from_slice(&(index * 10 + k as u64).to_le_bytes())
    ///     })
    ///     .map_err(|e| format!("{e:?}"))?;
    /// assert_eq!(first, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_publish_with(
        &self,
        kind: Kind,
        msg_type: u32,
        count: usize,
        len: usize,
        mut write: impl FnMut(usize, u64, &mut [u8]),
    ) -> Result<u64, PublishError> {
        self.publish_n(
            kind,
            msg_type,
            count,
            |_| len,
            |k, index, dst| {
                write(k, index, &mut dst[..len]);
                Ok(len)
            },
        )
    }

    /// `len_of(k)`: message `k`'s length for the all-or-nothing size check before the
    /// claim; `write(k, index, payload)`: writes message `k` into the whole payload of
    /// its claimed slot `index` and returns its length (the one published), or
    /// `Err(len)` when it no longer fits (the claim is then published with tombstones).
    fn publish_n(
        &self,
        kind: Kind,
        msg_type: u32,
        count: usize,
        len_of: impl Fn(usize) -> usize,
        mut write: impl FnMut(usize, u64, &mut [u8]) -> Result<usize, usize>,
    ) -> Result<u64, PublishError> {
        let n = count as u64;
        if n == 0 {
            return Ok(self.claimed());
        }
        if n > self.capacity {
            return Err(PublishError::BatchTooLarge {
                len: count,
                capacity: self.capacity,
            });
        }
        if let Some(len) = (0..count).map(&len_of).find(|&l| l > self.payload) {
            return Err(PublishError::TooLarge {
                len,
                payload: self.payload,
            });
        }
        let cb = self.region.control();
        // P1: claim n consecutive indices (bounded by an eager head too).
        let head = (!self.lazy_head).then_some(&cb.h2k_head);
        let first = match prefix::try_claim(&*self.claim, &cb.k2h_tail, head, self.capacity, n) {
            Ok(i) => i,
            Err(ClaimError::Full) => return Err(PublishError::Full),
            Err(ClaimError::Closed) => return Err(PublishError::Closed),
        };
        let now = if self.timestamps {
            crate::clock::now_ns()
        } else {
            0
        };
        let fl = if kind == Kind::Call { flags::CALL } else { 0 };
        // Unwind safety: a panic below (in `write`) still publishes the claim (claim.rs).
        let mut guard = claim::ClaimGuard {
            ch: self,
            first,
            n,
            kind,
            written: 0,
            armed: true,
        };
        for k in 0..count {
            let idx = first + k as u64;
            self.cell(idx).word.store(word(idx, kind, ST_IDLE), Release);
            // P2: write payload and header.
            let slot = self.region.slot(RingId::Request, idx);
            // SAFETY: we claimed `idx` and have not published it, so we own the slot, and
            // nothing else reaches its payload until P3; the payload is `payload` bytes of
            // initialised memory of the region.
            let dst = unsafe { core::slice::from_raw_parts_mut(slot.payload_ptr(), self.payload) };
            let len = match write(k, idx, dst) {
                Ok(len) => len,
                Err(len) => {
                    // An `AsRef` that grew since the size check: nothing was copied. The
                    // armed guard publishes this claim with tombstones (claim.rs).
                    return Err(PublishError::TooLarge {
                        len,
                        payload: self.payload,
                    });
                }
            };
            debug_assert!(len <= self.payload);
            // SAFETY: as above.
            unsafe {
                slot.write_meta(&SlotMeta {
                    correlation_id: idx,
                    enqueue_ns: now,
                    msg_type,
                    len: len as u32,
                    flags: fl,
                    status: 0,
                });
            }
            if self.checked {
                // P3 of a checked ring: the check word over what was written, before the
                // sequence. SAFETY: as above (owned, unpublished).
                unsafe { slot.write_check(slot.check_with(idx + 1, false)) };
            }
            guard.written = k as u64 + 1;
        }
        // P3: the sequences last, with release, in a pass of their own once every slot of
        // the batch is written, and from the last slot back to the first: the kernel
        // polls the first slot's sequence, so it finds the batch only once all of it is
        // published and reads it whole, instead of chasing the stores slot by slot (each
        // a cache line taken back and forth between the two cores).
        for k in (0..n).rev() {
            let idx = first + k;
            self.region
                .slot(RingId::Request, idx)
                .sequence()
                .store(idx + 1, Release);
        }
        guard.armed = false;
        self.publish_stamped(first..first + n);
        Ok(first)
    }

    /// P4 for `owned`, a claim whose sequences this thread stored. With a lazy head the
    /// sequences are the publication: only a kernel that may park is told (the
    /// doorbell's fence and load). With an eager head: publishes the written prefix (one
    /// head store for the batch), then tells the bridge and the doorbell.
    #[inline]
    fn publish_stamped(&self, owned: core::ops::Range<u64>) {
        if self.lazy_head {
            if let Some(d) = self.doorbell.get() {
                d.ring();
            }
            return;
        }
        prefix::advance_prefix(
            &self.region.control().h2k_head,
            Some(&*self.claim),
            owned,
            self.capacity,
            |i| self.region.slot(RingId::Request, i).sequence(),
        );
        self.flushed();
        self.ring_published();
    }

    /// Moves a lazy `h2k_head` over every request whose producer finished
    /// ([`prefix::sync_published`]), and returns the head. An eager head is only read.
    ///
    /// Called where the head must be current: before every command (Terminate's drain
    /// ends at the head), by [`all_published`](Self::all_published), by the completion
    /// driver (about every millisecond while a waiter is registered with it, and at
    /// each heartbeat), so that monitors reading the control block and the kernel's
    /// check of a slot against the head (K4) see it move. A head that moved rings the
    /// doorbell: a parked kernel wakes to that check instead of at its park's end.
    pub fn sync_head(&self) -> u64 {
        let cb = self.region.control();
        if !self.lazy_head {
            return cb.h2k_head.load(Acquire);
        }
        // The scan may start past what the kernel answered and the host released:
        // those requests were written. Not past `k2h_tail` alone: once the kernel
        // stopped for good, `recv` releases sends it never answered, whose producers
        // may still be writing them.
        let answered = cb.k2h_tail.load(Acquire).min(cb.k2h_head.load(Acquire));
        let before = cb.h2k_head.load(Relaxed);
        let head =
            prefix::sync_published(&cb.h2k_head, &*self.claim, answered, self.capacity, |i| {
                self.region.slot(RingId::Request, i).sequence()
            });
        if head != before {
            if let Some(d) = self.doorbell.get() {
                d.ring();
            }
        }
        head
    }

    /// H3: releases the reply slot of `index` (its reply was consumed or discarded).
    #[inline]
    pub(crate) fn free(&self, index: u64) {
        self.free_run(index, 1);
    }

    /// H3 for `n` consecutive indices from `first`, with one `k2h_tail` update.
    #[inline]
    pub(crate) fn free_run(&self, first: u64, n: u64) {
        if let Some(hook) = self.release_hook.get() {
            for i in first..first + n {
                // Only requests the kernel answered: an unanswered one (the kernel
                // stopped) may still be being written by its producer, whose cell word
                // names it before the payload is written; `for_each_unanswered` covers
                // those once the ring is settled.
                let seq = self.region.slot(RingId::Reply, i).sequence().load(Acquire);
                if seq != i + 1 {
                    continue;
                }
                let slot = self.region.slot(RingId::Request, i);
                // SAFETY: reply `i` is published, so request `i` was published before it
                // (the kernel answers only published requests) and its producer is done;
                // neither slot is reused before reply `i` is released, below, and the
                // kernel does not write a reply slot it published.
                let (request, status) = unsafe {
                    (
                        reply::request_payload(&slot),
                        self.region.slot(RingId::Reply, i).read_meta().status,
                    )
                };
                hook.released(self, i, request, status);
            }
        }
        for i in first..first + n {
            self.cell(i).freed.store(i + 1, Release);
        }
        let cb = self.region.control();
        prefix::advance_prefix(&cb.k2h_tail, None, first..first + n, self.capacity, |i| {
            &self.cell(i).freed
        });
    }

    /// Whether a `Faulted` state is not final because the host relaunches the kernel
    /// after it (a restart policy with restarts left). While armed, [`check_stopped`]
    /// reads a fault as "running": nothing is failed or closed, and the requests the
    /// faulted kernel left unanswered wait for its successor. Disarm when giving up
    /// (then call [`check_stopped`], which fails and wakes the waiters if the kernel is
    /// faulted) and when the kernel's end is handled; never between a fault and its
    /// successor's K0, which would make the fault final.
    ///
    /// [`check_stopped`]: Channel::check_stopped
    pub fn arm_restart(&self, armed: bool) {
        // SeqCst: a waiter that reads the successor's fault (acquire, after the launch
        // that follows this store) reads this store too.
        self.restart_armed.store(armed, SeqCst);
    }

    /// Calls `f` with the index and payload of each published request the kernel never
    /// answered (from the last published reply to the last published request): what a
    /// kernel that ended still held. Does nothing (returns `false`) while the kernel has
    /// not stopped for good: its replies, and with them the reuse of those slots, could
    /// still move.
    pub fn for_each_unanswered(&self, mut f: impl FnMut(u64, &[u8])) -> bool {
        if self.check_stopped().is_none() {
            return false;
        }
        self.refresh();
        let to = self.sync_head();
        let from = self.region.control().k2h_head.load(Acquire);
        for i in from..to.max(from) {
            let slot = self.region.slot(RingId::Request, i);
            // SAFETY: request slot `i` is published, so its producer is done with it; it
            // is reused only by index i + capacity, whose claim waits for reply `i` to be
            // released, and reply `i` will never be published (the kernel stopped for
            // good, k2h_head <= i). The kernel never writes request slots.
            f(i, unsafe { reply::request_payload(&slot) });
        }
        true
    }

    /// Installs the [`ReleaseHook`] (once; `false` if one is installed already). Install
    /// it before the first request is published.
    pub fn set_release_hook(&self, hook: Arc<dyn ReleaseHook>) -> bool {
        self.release_hook.set(hook).is_ok()
    }

    /// Whether a fault is followed by a restart (see [`Channel::arm_restart`]).
    pub fn restart_armed(&self) -> bool {
        self.restart_armed.load(SeqCst)
    }

    /// Writes a host command into the control block, after moving a lazy head
    /// ([`sync_head`](Self::sync_head)): a kernel that reads the command reads a head
    /// that covers every request published before it.
    pub fn command(&self, cmd: u32) {
        self.sync_head();
        self.region.control().command.store(cmd, Release);
        self.flushed();
        if let Some(d) = self.doorbell.get() {
            d.ring();
        }
    }

    /// The kernel's state and error code, as written in the control block; for the head
    /// of a pipeline, the chain's ([`ChainView::state`](crate::chain::ChainView::state)).
    pub fn kernel_state(&self) -> (u32, u32) {
        self.refresh();
        if let Some(chain) = self.chain.get() {
            return chain.state();
        }
        let cb = self.region.control();
        let s = cb.state.load(Acquire);
        (s, cb.error_code.load(Acquire))
    }

    /// Makes this channel the host side of a pipeline whose head is its region: its
    /// kernel state becomes the chain's, and its heartbeat goes to every stage. Set once,
    /// before the first request; later calls are ignored.
    pub fn set_chain(&self, chain: Arc<crate::chain::ChainView>) {
        let _ = self.chain.set(chain);
    }

    /// The pipeline this channel is the head of, if any.
    pub fn chain(&self) -> Option<&Arc<crate::chain::ChainView>> {
        self.chain.get()
    }

    /// Writes the host heartbeat (of every stage, for a pipeline's head).
    pub fn heartbeat(&self) {
        self.sync_head();
        let now = crate::clock::now_ns();
        self.region.control().host_heartbeat.store(now, Release);
        if let Some(chain) = self.chain.get() {
            chain.heartbeat(now);
        }
        self.flushed();
    }

    /// Closes the request ring to new claims and returns how many were ever accepted.
    pub fn close(&self) -> u64 {
        prefix::close(&*self.claim)
    }

    /// Whether the request ring is closed.
    pub fn is_closed(&self) -> bool {
        self.claim.load(Acquire) & prefix::CLOSED != 0
    }

    /// Whether every claimed request has been published (no producer is mid-write).
    /// Moves a lazy head ([`sync_head`](Self::sync_head)).
    pub fn all_published(&self) -> bool {
        self.sync_head() >= self.claimed()
    }

    /// If the kernel reached a final state, records it, closes the ring and wakes every
    /// async waiter so it can observe the end. Returns the error to report for requests
    /// that will never be answered.
    pub fn check_stopped(&self) -> Option<Error> {
        let s = self.stopped.load(Acquire);
        if s != 0 {
            return Some(self.stopped_error(s, self.stopped_code.load(Acquire)));
        }
        let (st, code) = self.kernel_state();
        // A fault the host will restart after is not the end: its waiters keep waiting
        // for the successor (see `arm_restart`).
        if !state::is_final(st) || (st == state::FAULTED && self.restart_armed.load(SeqCst)) {
            return self.check_lost();
        }
        self.stopped_code.store(code, Release);
        self.stopped.store(st, Release);
        self.close();
        tracing::debug!(kernel = %self.name, state = st, code, "kernel stopped");
        self.wake_all();
        Some(self.stopped_error(st, code))
    }

    fn stopped_error(&self, st: u32, code: u32) -> Error {
        if st == liveness::LOST {
            return self.lost_error();
        }
        if st == watchdog::UNRESPONSIVE {
            if let Some(e) = self.unresponsive() {
                return e;
            }
        }
        if st == state::FAULTED {
            Error::KernelFaulted {
                kernel: self.name.clone(),
                code,
                name: gyre_abi::error::name(code),
            }
        } else {
            Error::KernelTerminated {
                kernel: self.name.clone(),
                code,
            }
        }
    }

    /// [`Channel::check_stopped`] for polling loops: reads the kernel's line only every
    /// 64th call (a cross-core transfer that would slow the kernel's own stores), and the
    /// host-side flag otherwise.
    pub(crate) fn poll_stopped(&self) -> Option<Error> {
        if self.stopped.load(Acquire) == 0 && self.stop_polls.fetch_add(1, Relaxed) % 64 != 0 {
            return None;
        }
        self.check_stopped()
    }

    /// The error for a request refused because the ring is closed.
    pub fn closed_error(&self) -> Error {
        self.check_stopped().unwrap_or_else(|| Error::Closed {
            kernel: self.name.clone(),
        })
    }

    /// Registers interest in the completion driver and wakes it.
    pub(crate) fn add_interest(&self) {
        self.interest.fetch_add(1, Release);
        self.unpark_driver();
    }

    pub(crate) fn remove_interest(&self, n: usize) {
        if n > 0 {
            self.interest.fetch_sub(n, Release);
        }
    }

    fn wake_all(&self) {
        self.space_waiters.wake_all(self);
        self.recv_waiters.wake_all(self);
        self.state_waiters.wake_all(self);
        for c in self.cells.iter() {
            // Woken with the cell's lock released: a waker may poll or drop its future.
            let taken = c.waker.lock().take();
            if let Some(w) = taken {
                w.wake();
            }
        }
    }

    /// Whether the rings are checked ([`gyre_abi::host_flags::CHECKED`]).
    pub fn is_checked(&self) -> bool {
        self.checked
    }

    /// Bytes of header plus payload of one slot.
    pub fn slot_size(&self) -> usize {
        self.payload + SLOT_HEADER_SIZE
    }
}
