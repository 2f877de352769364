//! `RingBufferBridge`: keeps the host rings and a kernel's device-resident rings in step
//! under the copy strategies ([`TransferStrategy::Sync`], [`TransferStrategy::Async`],
//! [`TransferStrategy::DmaPolling`]).
//!
//! Under those strategies the kernel does not see the host's memory. It runs over a
//! *device region* (same layout as [`SharedRegion`]: control block, telemetry line,
//! request ring, reply ring) that only a [`CopyEngine`] can reach, and the host's
//! [`Channel`](crate::Channel) works on a *mirror* region. The bridge moves bytes:
//!
//! **push** (host -> device), one snapshot of control-block line 0 at a time:
//! 1. load the mirror's `h2k_head` (acquire) and the rest of line 0 into a staging line;
//! 2. copy the request slots `[pushed, h2k_head)` down, one copy per contiguous range
//!    (two at the wrap);
//! 3. copy the staged line 0 down, after the slots in stream order, so the kernel never
//!    sees a head before the slots it covers (the *doorbell*). A line identical to the
//!    last one pushed is not copied again.
//!
//! **pull** (device -> host):
//! 1. copy the kernel's line 1 up into staging (its `k2h_head` says which replies exist);
//! 2. copy the reply slots `[pulled, k2h_head)` up into a staging ring (one copy per
//!    contiguous range, two at the wrap);
//! 3. publish each reply into the mirror like the kernel would: header and payload, then
//!    the slot's sequence last with release (a DMA write lands in no particular order, so
//!    it never targets a slot a host consumer may be probing);
//! 4. at most once a millisecond (or when asked, [`RingBufferBridge::pull_telemetry`]),
//!    copy the telemetry line up with a sequence-lock read across the copy engine and
//!    republish it under the mirror's own sequence lock;
//! 5. store line 1 into the mirror (release): `k2h_head` after the slots it covers, the
//!    kernel state after its last replies.
//!
//! The bridge counts every copy and its bytes in each direction ([`TransferStats`]).
//! When to push and pull is the strategy's business ([`agent`]).
//!
//! Why this is safe without locks between host and kernel: a request slot is copied only
//! below the mirror's published head (its producers are done), and is reused by a
//! producer only after the reply of its previous lap was released, which needs the
//! kernel to have answered it, which needs it to have been copied. A reply slot is copied
//! only below the device's published `k2h_head`; the kernel reuses it only after the host
//! released the previous lap, which the host does only after the bridge published it.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use gyre_core::bridge::{HostDeviceMemory, RingBufferBridge};
//! use gyre_core::ring::Geometry;
//! use gyre_core::{Channel, Kind, SharedRegion};
//!
//! let g = Geometry::new(8, 128, 4)?;
//! let device = Arc::new(HostDeviceMemory::new(g, 0)?);
//! let mirror = Arc::new(SharedRegion::new_host(g, 0)?);
//! let bridge = RingBufferBridge::new(mirror.clone(), device.clone())?;
//! let ch = Channel::new(mirror, "doc");
//! ch.try_publish(Kind::Send, 1, b"down").unwrap();
//! bridge.push()?;
//! let dev = device.region().control();
//! assert_eq!(dev.h2k_head.load(std::sync::atomic::Ordering::Acquire), 1);
//! assert_eq!(bridge.stats().h2d_copies, 2); // one slot range, then the doorbell line
//! # Ok::<(), gyre_core::Error>(())
//! ```

pub mod agent;
mod lines;

use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use gyre_abi::{state, TelemetrySnapshot, SLOT_HEADER_SIZE};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::loan::{LoanHandle, LoanMirror};
use crate::region::{RegionMemory, RingId, SharedRegion, RINGS_OFFSET, TELEMETRY_OFFSET};
use crate::ring::Geometry;
use crate::telemetry::TelemetryWriter;

pub use crate::copy::{CopyEngine, HostDeviceArena, HostDeviceMemory};
pub use agent::BridgeAgent;
use lines::{HostLine, KernelLine, LINE};

#[allow(unused_imports)] // rustdoc links
use crate::strategy::TransferStrategy;

/// Copies and bytes moved by a bridge since it was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransferStats {
    /// Host -> device copies (slot ranges and control lines).
    pub h2d_copies: u64,
    /// Bytes copied host -> device.
    pub h2d_bytes: u64,
    /// Device -> host copies (control lines, slot ranges, telemetry).
    pub d2h_copies: u64,
    /// Bytes copied device -> host.
    pub d2h_bytes: u64,
    /// Request slots moved down.
    pub slots_down: u64,
    /// Reply slots moved up.
    pub slots_up: u64,
    /// Pushes that moved something.
    pub pushes: u64,
    /// Pulls that ran (a pull always copies the kernel's line).
    pub pulls: u64,
    /// Telemetry line reads (three device -> host copies each: the sequence word, the
    /// line, the sequence word again).
    pub telemetry_reads: u64,
    /// Waits for copies to complete: each blocking copy, and each synchronisation of the
    /// engine's stream. A push or a pull waits at most once, but for a pull that finds
    /// more replies ready than one batch, or moves loans.
    pub syncs: u64,
    /// Loans whose bytes were moved down with their requests (a loan kernel under a
    /// copy strategy); their copies and bytes are in `h2d_copies` and `h2d_bytes`.
    pub loans_down: u64,
    /// Loans whose bytes were moved up with their replies; copies and bytes in
    /// `d2h_copies` and `d2h_bytes`.
    pub loans_up: u64,
}

#[derive(Debug, Default)]
struct Counters {
    h2d_copies: AtomicU64,
    h2d_bytes: AtomicU64,
    d2h_copies: AtomicU64,
    d2h_bytes: AtomicU64,
    slots_down: AtomicU64,
    slots_up: AtomicU64,
    pushes: AtomicU64,
    pulls: AtomicU64,
    telemetry_reads: AtomicU64,
    syncs: AtomicU64,
    loans_down: AtomicU64,
    loans_up: AtomicU64,
}

/// Whether copies wait one by one or are issued on the stream and synchronised once per
/// step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMode {
    /// Every copy blocks until done.
    Blocking,
    /// Copies are issued asynchronously in stream order; each step synchronises once.
    Stream,
}

/// Staging layout: line 0 out, line 1 in, telemetry in, the two telemetry sequence reads
/// (at `ST_TEL_SEQ` and `ST_TEL_SEQ + 8`), then a reply ring.
const ST_LINE0: usize = 0;
const ST_LINE1: usize = 64;
const ST_TEL: usize = 128;
const ST_TEL_SEQ: usize = 192;
const ST_RING: usize = 256;

/// How often a pull refreshes the telemetry line on its own.
const TELEMETRY_EVERY: Duration = Duration::from_millis(1);

#[derive(Debug)]
struct PushState {
    /// Request slots below this index are on the device.
    pushed: u64,
    /// The last line 0 copied down (`None` before the first).
    last: Option<HostLine>,
}

#[derive(Debug)]
struct PullState {
    /// Reply slots below this index are in the mirror.
    pulled: u64,
    last_line: KernelLine,
    last_telemetry: Instant,
    /// The last device snapshot republished (its own `seq`).
    last_snapshot: TelemetrySnapshot,
    telemetry: TelemetryWriter,
    /// A telemetry read was issued and not yet taken.
    telemetry_issued: bool,
}

/// The host end of one kernel's device-resident rings. See the [module documentation](self).
pub struct RingBufferBridge {
    mirror: Arc<SharedRegion>,
    engine: Arc<dyn CopyEngine>,
    geometry: Geometry,
    /// Host memory the engine copies through; see the `ST_*` offsets. Line 0 staging is
    /// used under `push`, the rest under `pull`.
    staging: Box<dyn RegionMemory>,
    push: Mutex<PushState>,
    /// `PushState::pushed`, readable by a pull without the push lock: the requests on
    /// the device, so the replies a pull may find.
    pushed: AtomicU64,
    pull: Mutex<PullState>,
    mode: AtomicU8,
    counters: Counters,
    failed: OnceLock<Error>,
    /// The doorbell of a kernel that parks (the CPU backend), rung after each push that
    /// moved line 0.
    doorbell: OnceLock<Arc<crate::doorbell::Doorbell>>,
    /// A loan kernel's pool: every request and reply slot carries a loan handle whose
    /// bytes move with it.
    loans: OnceLock<Arc<LoanMirror>>,
}

impl core::fmt::Debug for RingBufferBridge {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RingBufferBridge")
            .field("engine", &self.engine.name())
            .field("geometry", &self.geometry)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl RingBufferBridge {
    /// A bridge between `mirror` (the host rings a [`Channel`](crate::Channel) works on)
    /// and `engine`'s device region of the same geometry.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the device region is smaller than the mirror's
    /// layout needs; the engine's error when staging memory cannot be allocated.
    pub fn new(mirror: Arc<SharedRegion>, engine: Arc<dyn CopyEngine>) -> Result<Self> {
        let geometry = *mirror.geometry();
        let need = SharedRegion::bytes_for(&geometry);
        if engine.len() < need {
            return Err(Error::InvalidArgument {
                name: "device region",
                value: format!("{} bytes (need {need})", engine.len()),
                reason: "smaller than the ring geometry's layout",
            });
        }
        let staging = engine.alloc_staging(ST_RING + geometry.ring_bytes())?;
        // The kernel must trust only the doorbell: the engine's slot copies land in no
        // particular order (gyre_abi::host_flags::DOORBELL).
        mirror
            .control()
            .host_flags
            .fetch_or(gyre_abi::host_flags::DOORBELL, Release);
        Ok(Self {
            mirror,
            engine,
            geometry,
            staging,
            push: Mutex::new(PushState {
                pushed: 0,
                last: None,
            }),
            pushed: AtomicU64::new(0),
            pull: Mutex::new(PullState {
                pulled: 0,
                last_line: KernelLine::default(),
                last_telemetry: Instant::now(),
                last_snapshot: TelemetrySnapshot::default(),
                telemetry: TelemetryWriter::default(),
                telemetry_issued: false,
            }),
            mode: AtomicU8::new(CopyMode::Blocking as u8),
            counters: Counters::default(),
            failed: OnceLock::new(),
            doorbell: OnceLock::new(),
            loans: OnceLock::new(),
        })
    }

    /// Lets the bridge wake a parked kernel after each push (see `crate::doorbell`). Set
    /// once; later calls are ignored.
    pub fn set_doorbell(&self, d: Arc<crate::doorbell::Doorbell>) {
        let _ = self.doorbell.set(d);
    }

    /// Makes the bridge move loans: from now on each request's loan bytes go down before
    /// its doorbell, and each reply's come up before it is republished (see
    /// [`LoanMirror`]). Set once, before the first request; later calls are ignored.
    pub fn set_loans(&self, mirror: Arc<LoanMirror>) {
        let _ = self.loans.set(mirror);
    }

    /// Sets whether copies block one by one or go on the engine's stream.
    pub fn set_copy_mode(&self, mode: CopyMode) {
        self.mode.store(mode as u8, Relaxed);
    }

    fn stream(&self) -> bool {
        self.mode.load(Relaxed) == CopyMode::Stream as u8
    }

    /// The mirror region the host works on.
    pub fn mirror(&self) -> &Arc<SharedRegion> {
        &self.mirror
    }

    /// The copy engine.
    pub fn engine(&self) -> &Arc<dyn CopyEngine> {
        &self.engine
    }

    /// Copies and bytes so far.
    pub fn stats(&self) -> TransferStats {
        let c = &self.counters;
        TransferStats {
            h2d_copies: c.h2d_copies.load(Relaxed),
            h2d_bytes: c.h2d_bytes.load(Relaxed),
            d2h_copies: c.d2h_copies.load(Relaxed),
            d2h_bytes: c.d2h_bytes.load(Relaxed),
            slots_down: c.slots_down.load(Relaxed),
            slots_up: c.slots_up.load(Relaxed),
            pushes: c.pushes.load(Relaxed),
            pulls: c.pulls.load(Relaxed),
            telemetry_reads: c.telemetry_reads.load(Relaxed),
            syncs: c.syncs.load(Relaxed),
            loans_down: c.loans_down.load(Relaxed),
            loans_up: c.loans_up.load(Relaxed),
        }
    }

    /// The first transfer error, after which the bridge refuses to move anything.
    pub fn failure(&self) -> Option<&Error> {
        self.failed.get()
    }

    fn staging_ptr(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.staging.len());
        // SAFETY: `off` is inside the staging allocation (the ST_* offsets and ring
        // offsets are bounded by its size, ST_RING + ring_bytes).
        unsafe { self.staging.base().as_ptr().add(off) }
    }

    fn h2d(&self, dst: usize, src: *const u8, len: usize) -> Result<()> {
        // SAFETY: callers pass staging or published request slots, which nobody writes
        // until the copy completes (module docs); `dst..dst+len` is inside the region.
        unsafe {
            if self.stream() {
                self.engine.copy_h2d_async(dst, src, len)?;
            } else {
                self.engine.copy_h2d(dst, src, len)?;
                self.counters.syncs.fetch_add(1, Relaxed);
            }
        }
        self.counters.h2d_copies.fetch_add(1, Relaxed);
        self.counters.h2d_bytes.fetch_add(len as u64, Relaxed);
        Ok(())
    }

    fn d2h(&self, dst: *mut u8, src: usize, len: usize) -> Result<()> {
        // SAFETY: `dst` is staging owned by the caller's pull (under the pull lock).
        unsafe {
            if self.stream() {
                self.engine.copy_d2h_async(dst, src, len)?;
            } else {
                self.engine.copy_d2h(dst, src, len)?;
                self.counters.syncs.fetch_add(1, Relaxed);
            }
        }
        self.counters.d2h_copies.fetch_add(1, Relaxed);
        self.counters.d2h_bytes.fetch_add(len as u64, Relaxed);
        Ok(())
    }

    fn count_loans(&self, m: crate::loan::Moved, down: bool) {
        let c = &self.counters;
        let (copies, bytes, loans) = if down {
            (&c.h2d_copies, &c.h2d_bytes, &c.loans_down)
        } else {
            (&c.d2h_copies, &c.d2h_bytes, &c.loans_up)
        };
        copies.fetch_add(m.copies, Relaxed);
        bytes.fetch_add(m.bytes, Relaxed);
        loans.fetch_add(m.loans, Relaxed);
    }

    fn sync_stream(&self) -> Result<()> {
        if self.stream() {
            self.engine.synchronize()?;
            self.counters.syncs.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    /// The contiguous pieces of slots `[from, to)` of one ring: `(byte offset in the
    /// ring, bytes)`, at most two (split at the wrap).
    fn ranges(&self, from: u64, to: u64) -> [(usize, usize); 2] {
        let g = &self.geometry;
        let cap = u64::from(g.capacity());
        let ss = g.slot_size() as usize;
        debug_assert!(to >= from && to - from <= cap);
        let start = (from & g.mask()) as usize;
        let n = (to - from) as usize;
        let first = n.min(cap as usize - start);
        [(start * ss, first * ss), (0, (n - first) * ss)]
    }

    /// How far a head moved from `done` (slots to move), or a protocol error when it went
    /// backwards or more than the capacity ahead (a corrupt line is never trusted).
    fn advance(&self, ring: &'static str, what: &'static str, done: u64, head: u64) -> Result<u64> {
        let cap = u64::from(self.geometry.capacity());
        match head.checked_sub(done) {
            Some(n) if n <= cap => Ok(n),
            _ => Err(Error::Protocol {
                ring,
                index: done,
                what,
                expected: done + cap,
                found: head,
            }),
        }
    }

    /// Writes the mirror's initial control block and telemetry line to the device, before
    /// the kernel is launched.
    pub fn init(&self) -> Result<()> {
        let _span = tracing::debug_span!("gyre_bridge_init", engine = self.engine.name()).entered();
        self.push()?;
        self.sync_stream()
    }

    /// Moves new request slots and then control-block line 0 down. See the
    /// [module documentation](self).
    ///
    /// # Errors
    ///
    /// The engine's error ([`Error::Transfer`]), or [`Error::Protocol`] if the mirror's
    /// head went backwards or beyond the capacity. The first error is kept and makes
    /// every later push and pull fail with it.
    pub fn push(&self) -> Result<()> {
        self.check_failed()?;
        let mut st = self.push.lock();
        let r = self.push_locked(&mut st);
        self.record(r)
    }

    fn push_locked(&self, st: &mut PushState) -> Result<()> {
        let line = HostLine::load(self.mirror.control());
        let head = line.h2k_head;
        let new_slots = self.advance("request", "mirror h2k_head out of range", st.pushed, head)?;
        if new_slots == 0 && st.last == Some(line) {
            return Ok(());
        }
        if new_slots > 0 {
            if let Some(m) = self.loans.get() {
                // The loans' bytes first: the kernel reads them once line 0 lands.
                let mut handles = (st.pushed..head).filter_map(|i| {
                    let slot = self.mirror.slot(RingId::Request, i);
                    // SAFETY: request `i` is below the mirror's published head: its
                    // producer is done, and the slot is not reused before the kernel
                    // answered it (module docs).
                    unsafe { loan_of(&slot) }.map(|h| (i, h))
                });
                let moved = m.down(&mut handles, self.stream())?;
                self.count_loans(moved, true);
            }
            let ring = RINGS_OFFSET;
            for (off, len) in self.ranges(st.pushed, head) {
                if len > 0 {
                    let src = self.mirror.slot(RingId::Request, 0).header_ptr();
                    // SAFETY: `off + len` is within the request ring (ranges splits at
                    // the wrap), which starts at `src`.
                    let src = unsafe { src.add(off) };
                    self.h2d(ring + off, src, len)?;
                }
            }
            self.counters.slots_down.fetch_add(new_slots, Relaxed);
        }
        // The doorbell: line 0 after the slots it covers, in stream order.
        let p = self.staging_ptr(ST_LINE0);
        // SAFETY: ST_LINE0..+64 is staging used only under the push lock, which we hold;
        // the previous push synchronised before it released the lock.
        unsafe { line.store_to(p) };
        self.h2d(0, p, LINE)?;
        self.sync_stream()?;
        st.pushed = head;
        self.pushed.store(head, Release);
        st.last = Some(line);
        self.counters.pushes.fetch_add(1, Relaxed);
        // The device's line 0 (head, command) has landed: wake a parked kernel.
        if let Some(d) = self.doorbell.get() {
            d.ring();
        }
        Ok(())
    }

    /// Moves the kernel's line, new reply slots and (at a bounded rate) the telemetry line
    /// up into the mirror. Returns whether anything changed; `Ok(false)` without copying
    /// when another thread is pulling (its pull covers this one's purpose).
    ///
    /// # Errors
    ///
    /// As [`RingBufferBridge::push`]; a device `k2h_head` that went backwards or beyond
    /// the capacity is [`Error::Protocol`].
    pub fn pull(&self) -> Result<bool> {
        self.check_failed()?;
        let Some(mut st) = self.pull.try_lock() else {
            return Ok(false);
        };
        let r = self.pull_locked(&mut st, false);
        self.record(r)
    }

    /// A pull that always refreshes the telemetry line (for a caller about to read it).
    /// Waits for a concurrent pull instead of skipping.
    pub fn pull_telemetry(&self) -> Result<bool> {
        self.check_failed()?;
        let mut st = self.pull.lock();
        let r = self.pull_locked(&mut st, true);
        self.record(r)
    }

    fn pull_locked(&self, st: &mut PullState, telemetry: bool) -> Result<bool> {
        self.counters.pulls.fetch_add(1, Relaxed);
        // One wait per pull: the kernel's line, then (on an engine that reads ahead,
        // `CopyEngine::reads_ahead`) the reply slots of the requests on the device, up to
        // one batch, and the telemetry line when due, all issued before a single
        // synchronisation. Stream order makes the speculation safe: the slots are read
        // after the line, so every slot below the line's `k2h_head` is complete in
        // staging (the kernel publishes slots, then the head); the slots above it are
        // ignored. Another engine copies the ready slots after the wait, and waits again.
        let l1 = self.staging_ptr(ST_LINE1);
        self.d2h(l1, LINE, LINE)?;
        let g = self.geometry;
        let ahead = if self.engine.reads_ahead() {
            let in_flight = self.pushed.load(Acquire).saturating_sub(st.pulled);
            st.pulled + in_flight.min(u64::from(g.batch()))
        } else {
            st.pulled
        };
        let ring = RINGS_OFFSET + g.ring_bytes();
        self.copy_replies(ring, st.pulled, ahead)?;
        let tel = telemetry || st.last_telemetry.elapsed() >= TELEMETRY_EVERY;
        if tel {
            self.issue_telemetry_read(st)?;
        }
        self.sync_stream()?;
        // SAFETY: staging written by the completed copy above, under the pull lock.
        let line = unsafe { KernelLine::load_from(l1) };
        let head = line.k2h_head;
        let new = self.advance("reply", "device k2h_head out of range", st.pulled, head)?;
        if head > ahead {
            // More than one batch ready (or the pushes outran `pushed`): the rest now.
            self.copy_replies(ring, ahead, head)?;
            self.sync_stream()?;
        }
        if new > 0 {
            if let Some(m) = self.loans.get() {
                // The replies' loan bytes, before the replies are republished.
                let mut handles = (st.pulled..head).filter_map(|i| {
                    let at = ST_RING + (i & g.mask()) as usize * g.slot_size() as usize;
                    // SAFETY: staging slot `at` was filled by the completed copy above,
                    // under the pull lock; `at + slot_size` is inside staging.
                    unsafe { staged_loan(self.staging_ptr(at), g.payload()) }.map(|h| (i, h))
                });
                let moved = m.up(&mut handles, self.stream())?;
                self.sync_stream()?;
                self.count_loans(moved, false);
            }
            for i in st.pulled..head {
                self.publish_reply(i);
            }
            self.counters.slots_up.fetch_add(new, Relaxed);
            st.pulled = head;
        }
        if tel {
            self.take_telemetry_read(st);
        }
        let changed = new > 0 || line != st.last_line;
        if changed {
            line.store_into(self.mirror.control());
            st.last_line = line;
        }
        Ok(changed)
    }

    /// Issues the copies of reply slots `[from, to)` into the staging ring (one per
    /// contiguous range, two at the wrap).
    fn copy_replies(&self, ring: usize, from: u64, to: u64) -> Result<()> {
        if to <= from {
            return Ok(());
        }
        for (off, len) in self.ranges(from, to) {
            if len > 0 {
                self.d2h(self.staging_ptr(ST_RING + off), ring + off, len)?;
            }
        }
        Ok(())
    }

    /// Publishes reply `i` from the staging ring into the mirror: header and payload,
    /// then the sequence last (release), as the kernel does in K6.
    fn publish_reply(&self, i: u64) {
        let g = &self.geometry;
        let ss = g.slot_size() as usize;
        let at = ST_RING + (i & g.mask()) as usize * ss;
        let src = self.staging_ptr(at);
        let dst = self.mirror.slot(RingId::Reply, i);
        // SAFETY: staging slot `at..at+ss` was filled by the completed copy; the mirror
        // slot of `i` is not read by the host before its sequence says `i + 1` and not
        // written by anyone else (module docs). The header's `len` is untrusted: at most
        // the payload is copied, and the host's reply checks (H2) reject a bad length.
        unsafe {
            let len = core::ptr::read_unaligned(src.add(LEN_OFFSET).cast::<u32>()) as usize;
            let body = SLOT_HEADER_SIZE - 8 + len.min(g.payload());
            core::ptr::copy_nonoverlapping(src.add(8), dst.header_ptr().add(8), body);
            let seq = core::ptr::read(src.cast::<u64>());
            dst.sequence().store(seq, Release);
        }
    }

    /// Issues a sequence-lock read of the device's telemetry line through the engine:
    /// its sequence word, then the line, then the sequence word again, three copies in
    /// stream order (each starts once the one before has completed, so they read in that
    /// order). [`Self::take_telemetry_read`] takes it once they completed.
    fn issue_telemetry_read(&self, st: &mut PullState) -> Result<()> {
        st.last_telemetry = Instant::now();
        let t = self.staging_ptr(ST_TEL);
        let s1 = self.staging_ptr(ST_TEL_SEQ);
        let s2 = self.staging_ptr(ST_TEL_SEQ + 8);
        self.d2h(s1, TELEMETRY_OFFSET, 8)?;
        self.d2h(t, TELEMETRY_OFFSET, 64)?;
        self.d2h(s2, TELEMETRY_OFFSET, 8)?;
        st.telemetry_issued = true;
        Ok(())
    }

    /// Republishes the telemetry line read by [`Self::issue_telemetry_read`] (its copies
    /// completed) under the mirror's own sequence lock. The line is taken only when both
    /// sequence reads agree on an even value: no write overlapped the copy of the line
    /// (the kernel makes the sequence odd before it writes and even after). A torn copy is
    /// skipped: the next pull tries again.
    fn take_telemetry_read(&self, st: &mut PullState) {
        if !std::mem::replace(&mut st.telemetry_issued, false) {
            return;
        }
        let t = self.staging_ptr(ST_TEL);
        let s1 = self.staging_ptr(ST_TEL_SEQ);
        let s2 = self.staging_ptr(ST_TEL_SEQ + 8);
        // SAFETY: the staging areas were filled by the completed copies, under the lock.
        let (seq1, snap, seq2) = unsafe {
            (
                core::ptr::read(s1.cast::<u32>()),
                core::ptr::read(t.cast::<TelemetrySnapshot>()),
                core::ptr::read(s2.cast::<u32>()),
            )
        };
        self.counters.telemetry_reads.fetch_add(1, Relaxed);
        if seq1 % 2 == 0 && seq1 == seq2 && snap.seq == seq1 && snap != st.last_snapshot {
            st.last_snapshot = snap;
            st.telemetry.acc = snap;
            st.telemetry.publish(self.mirror.telemetry());
        }
    }

    fn check_failed(&self) -> Result<()> {
        match self.failed.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Keeps the first error and turns it into a faulted kernel in the mirror, so every
    /// waiter fails with it instead of waiting for bytes that will never move.
    fn record<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if self.failed.set(e.clone()).is_ok() {
                tracing::error!(engine = self.engine.name(), error = %e, "bridge transfer failed");
                let cb = self.mirror.control();
                cb.error_code
                    .store(gyre_abi::error::TRANSFER_FAILED, Release);
                cb.state.store(state::FAULTED, Release);
            }
        }
        r
    }
}

/// Offset of `len` in a slot header.
const LEN_OFFSET: usize = core::mem::offset_of!(gyre_abi::SlotHeader, len);
/// Offset of `status` in a slot header.
const STATUS_OFFSET: usize = core::mem::offset_of!(gyre_abi::SlotHeader, status);

/// The loan handle a request slot carries, if its length is a handle's.
///
/// # Safety
///
/// Nobody writes the slot while this reads it.
unsafe fn loan_of(slot: &crate::ring::slot::SlotPtr<'_>) -> Option<LoanHandle> {
    // SAFETY: the caller's contract.
    let meta = unsafe { slot.read_meta() };
    if meta.len as usize != LoanHandle::SIZE || slot.payload_capacity() < LoanHandle::SIZE {
        return None;
    }
    // SAFETY: as above; 16 <= payload capacity.
    LoanHandle::decode(unsafe { slot.payload(LoanHandle::SIZE) })
}

/// The loan handle of a successful reply staged at `slot` (a raw copy of a reply slot),
/// if its length is a handle's.
///
/// # Safety
///
/// `slot` points to a staged slot of `SLOT_HEADER_SIZE + payload` bytes nobody writes
/// meanwhile.
unsafe fn staged_loan(slot: *const u8, payload: usize) -> Option<LoanHandle> {
    // SAFETY: the caller's contract: header fields inside the staged slot.
    let (len, status) = unsafe {
        (
            core::ptr::read_unaligned(slot.add(LEN_OFFSET).cast::<u32>()) as usize,
            core::ptr::read_unaligned(slot.add(STATUS_OFFSET).cast::<u32>()),
        )
    };
    if status != gyre_abi::error::NONE || len != LoanHandle::SIZE || payload < LoanHandle::SIZE {
        return None;
    }
    // SAFETY: the payload follows the header inside the staged slot; 16 <= payload.
    let bytes =
        unsafe { core::slice::from_raw_parts(slot.add(SLOT_HEADER_SIZE), LoanHandle::SIZE) };
    LoanHandle::decode(bytes)
}

#[cfg(test)]
mod tests;
