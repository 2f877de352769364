//! Taking replies: probing a reply slot, consuming it, waiting for it (blocking or
//! async), receiving `send` replies in order, and abandoning a call whose caller left.

use core::sync::atomic::Ordering::{AcqRel, Acquire};
use core::task::{Context, Poll};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::idle::IdleStrategy;
use crate::region::RingId;
use crate::ring::slot::{SlotMeta, SlotPtr};

use super::{word, Channel, Kind, SEND_BIT, ST_ABANDONED, ST_DONE, ST_IDLE, ST_MASK, ST_WAITING};

/// What a reply slot holds for an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The reply for the index is published.
    Ready,
    /// Not yet.
    Pending,
    /// The slot holds a later index: this index was consumed already.
    Gone,
}

/// A published reply, borrowed from its slot while the consumer owns it.
#[derive(Debug)]
pub struct ReplyView<'a> {
    /// The request's (and reply's) ring index.
    pub index: u64,
    /// Header fields of the reply.
    pub meta: SlotMeta,
    /// The reply payload (`meta.len` bytes).
    pub payload: &'a [u8],
    /// Whether the kernel answered `BAD_LENGTH` for a request whose length was within the
    /// payload: the request was fine, the handler's reply was longer than the reply slot.
    /// (`BAD_LENGTH` for a request beyond the payload — a corrupt header, a tombstone — is
    /// `false`.) Always `false` for other statuses.
    pub reply_overflow: bool,
    /// The request slot of the same index, as the host wrote it ([`ReplyView::request`]).
    request: SlotPtr<'a>,
    /// The channel that made the view, and the index and payload it made it for: what a
    /// loan pool's claim trusts (the public fields above may be rewritten by the holder
    /// of the view; these cannot).
    pub(crate) channel: &'a Channel,
    pub(crate) published_index: u64,
    pub(crate) published_payload: &'a [u8],
}

impl<'a> ReplyView<'a> {
    /// The payload of the request this reply answers, as the host wrote it (its header's
    /// length, at most the payload capacity): a loan kernel finds the request's handle
    /// here. Read on demand; the slot is not reused before the reply is released.
    pub fn request(&self) -> &'a [u8] {
        // SAFETY: request slot `index` is reused only by index + capacity, which no
        // producer can claim before reply `index` is released (flow control on
        // k2h_tail); the reply is unreleased while the view lives, and the kernel never
        // writes request slots.
        unsafe { request_payload(&self.request) }
    }
}

/// The payload of a request slot whose writer finished, clamped to the capacity.
///
/// # Safety
///
/// Nobody writes the slot while the returned slice lives.
pub(crate) unsafe fn request_payload<'a>(slot: &SlotPtr<'a>) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe {
        let len = (slot.read_meta().len as usize).min(slot.payload_capacity());
        slot.payload(len)
    }
}

/// One step of `recv`.
enum RecvStep<R> {
    /// A `send` reply, or the error of a `send` that will never be answered.
    Item(Result<R>),
    /// Nothing ready yet.
    Empty,
    /// The kernel stopped and every accepted request is accounted for.
    End(Error),
}

/// Outcome of a waiter's slow-path check.
enum Slow {
    Wait,
    Take,
    Fail(Error),
}

/// How often (in polls) a blocking waiter checks the slow-path conditions.
const SLOW_CHECK_EVERY: u32 = 256;
/// How often (in polls) a blocking waiter with a deadline reads the clock.
const DEADLINE_CHECK_EVERY: u32 = 16;

impl Channel {
    /// H1: where the reply of `index` stands (its slot's sequence, acquire).
    #[inline(always)]
    pub fn probe(&self, index: u64) -> Probe {
        let slot = self.region.slot(RingId::Reply, index);
        let seq = slot.sequence();
        let mut s = seq.load(Acquire);
        if s < index + 1 && self.refresh() {
            // Copy strategies: bring new replies up, then look again.
            s = seq.load(Acquire);
        }
        if s == index + 1 {
            // A checked ring's reply is whole only when its check word holds: the kernel
            // stores its words with no fence, so the sequence may land first.
            // SAFETY: reply `index` is in flight (its slot is reused only after it is
            // released); its words may still be landing, hence volatile reads.
            if self.checked && unsafe { slot.check_with(s, true) != slot.check_word_volatile() } {
                return Probe::Pending;
            }
            Probe::Ready
        } else if s > index + 1 {
            Probe::Gone
        } else {
            Probe::Pending
        }
    }

    /// H2 + H3: consumes the published reply of `index`, which the caller owns, passes it
    /// to `f`, and releases the slot. A reply failing the protocol checks is counted and
    /// reported instead.
    #[inline]
    pub(crate) fn take<R>(
        &self,
        index: u64,
        f: impl FnOnce(ReplyView<'_>) -> Result<R>,
    ) -> Result<R> {
        let out = self.read_reply(index, f);
        self.free(index);
        out
    }

    /// H2 alone: reads and checks the published reply of `index` (owned by the caller)
    /// without releasing it.
    #[inline]
    fn read_reply<R>(&self, index: u64, f: impl FnOnce(ReplyView<'_>) -> Result<R>) -> Result<R> {
        let slot = self.region.slot(RingId::Reply, index);
        // SAFETY: probe(index) was Ready and the caller owns `index` (its own call, or won
        // through the recv cursor / abandon CAS), so nobody writes the slot until it is
        // released.
        let meta = unsafe { slot.read_meta() };
        if meta.len as usize > self.payload {
            Err(self.protocol_error(
                index,
                "reply length",
                self.payload as u64,
                u64::from(meta.len),
            ))
        } else if meta.correlation_id != index {
            Err(self.protocol_error(index, "reply correlation id", index, meta.correlation_id))
        } else {
            // SAFETY: as above; len <= payload checked.
            let payload = unsafe { slot.payload(meta.len as usize) };
            let reply_overflow = meta.status == gyre_abi::error::BAD_LENGTH && {
                // Which length was bad: the request's (as the host wrote it) or the reply's.
                // SAFETY: request slot `index` is reused only by index + capacity, which no
                // producer can claim before reply `index` is released (flow control on
                // k2h_tail), and the caller has not released it; the kernel never writes
                // request slots. So the header is the one written for `index`.
                let req = unsafe { self.region.slot(RingId::Request, index).read_meta() };
                req.len as usize <= self.payload
            };
            f(ReplyView {
                index,
                meta,
                payload,
                reply_overflow,
                request: self.region.slot(RingId::Request, index),
                channel: self,
                published_index: index,
                published_payload: payload,
            })
        }
    }

    /// Takes up to `max` ready `send` replies in order with one cursor update and one
    /// `k2h_tail` update, appending `f(reply)` for each to `out`. Returns how many were
    /// taken; when none of the next replies is a ready `send` reply, behaves like
    /// [`Channel::try_recv`] for one.
    pub fn try_recv_batch<R>(
        &self,
        max: usize,
        out: &mut Vec<Result<R>>,
        mut f: impl FnMut(ReplyView<'_>) -> Result<R>,
    ) -> Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let tail = self.region.control().k2h_tail.load(Acquire);
        let cursor = self.recv_cursor.load(Acquire);
        let r = cursor.max(tail);
        let claimed = self.claimed();
        let mut n = 0u64;
        while (n as usize) < max && r + n < claimed && self.probe(r + n) == Probe::Ready {
            let w = self.cell(r + n).word.load(Acquire);
            if w >> 3 != r + n || w & SEND_BIT == 0 {
                break;
            }
            n += 1;
        }
        // Owning [r, r + n) takes one CAS of the cursor from the value the scan started at.
        if n > 0
            && self
                .recv_cursor
                .compare_exchange(cursor, r + n, AcqRel, Acquire)
                .is_ok()
        {
            out.reserve(n as usize);
            for i in r..r + n {
                out.push(self.read_reply(i, &mut f));
            }
            self.free_run(r, n);
            return Ok(n as usize);
        }
        match self.try_recv(f)? {
            Some(v) => {
                out.push(Ok(v));
                Ok(1)
            }
            None => Ok(0),
        }
    }

    fn protocol_error(&self, index: u64, what: &'static str, expected: u64, found: u64) -> Error {
        self.protocol_errors.fetch_add(1, AcqRel);
        tracing::warn!(kernel = %self.name, index, what, expected, found, "reply protocol error");
        Error::Protocol {
            ring: "reply",
            index,
            what,
            expected,
            found,
        }
    }

    /// Whether the reply slot of `index` is corrupt: the kernel published the index
    /// (`k2h_head > index`, acquire, then the slot re-read) but the slot's sequence is not
    /// `index + 1`, and the index was not released (a released slot may legitimately hold
    /// a later lap). Returns the sequence found.
    pub(crate) fn reply_corrupt(&self, index: u64) -> Option<u64> {
        let cb = self.region.control();
        if cb.k2h_head.load(Acquire) <= index {
            return None;
        }
        let seq = self
            .region
            .slot(RingId::Reply, index)
            .sequence()
            .load(Acquire);
        if seq == index + 1 || cb.k2h_tail.load(Acquire) > index {
            return None;
        }
        Some(seq)
    }

    /// The slow-path conditions of a waiter on `index` (owned by the caller): a reply slot
    /// that is corrupt under the published head, or a kernel that stopped. On `Fail` the
    /// index has been released.
    fn slow_check(&self, index: u64) -> Slow {
        let head = self.region.control().k2h_head.load(Acquire);
        if head > index {
            // The kernel published it: the slot must say so by now.
            if self.probe(index) == Probe::Ready {
                return Slow::Take;
            }
            let seq = self
                .region
                .slot(RingId::Reply, index)
                .sequence()
                .load(Acquire);
            let e = self.protocol_error(index, "reply sequence", index + 1, seq);
            self.free(index);
            return Slow::Fail(e);
        }
        let Some(err) = self.check_stopped() else {
            return Slow::Wait;
        };
        // The kernel publishes its last replies before its final state: look once more.
        if self.probe(index) == Probe::Ready {
            return Slow::Take;
        }
        self.free(index);
        Slow::Fail(err)
    }

    /// Waits on the calling thread for the reply of `index` (owned by the caller), for at
    /// most `timeout` (`None`: until the reply or the kernel's end).
    ///
    /// The waiter polls under its idle strategy. Once that strategy parks, it registers
    /// with the completion driver, which unparks it when the reply lands, and checks its
    /// deadline at every poll: a park ends [`crate::idle::WAKE_MARGIN`] ahead of the
    /// deadline and the waiter yields from there on ([`crate::idle::Idler::idle_until`]),
    /// so the call returns close to its deadline even when a park wakes late.
    ///
    /// On timeout the call is abandoned: its reply is discarded when it arrives.
    pub fn wait_blocking<R>(
        &self,
        index: u64,
        idle: &IdleStrategy,
        timeout: Option<Duration>,
        f: impl FnOnce(ReplyView<'_>) -> Result<R>,
    ) -> Result<R> {
        let mut idler = idle.idler();
        let mut polls: u32 = 0;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut registered = false;
        let mut waker: Option<core::task::Waker> = None;
        loop {
            if self.probe(index) == Probe::Ready {
                self.unregister(index, &mut registered);
                return self.take(index, f);
            }
            polls = polls.wrapping_add(1);
            let parking = idler.is_parking();
            if parking || polls % SLOW_CHECK_EVERY == 0 {
                match self.slow_check(index) {
                    Slow::Wait => {}
                    Slow::Take => {
                        self.unregister(index, &mut registered);
                        return self.take(index, f);
                    }
                    Slow::Fail(e) => {
                        self.unregister(index, &mut registered);
                        return Err(e);
                    }
                }
            }
            // A deadline is checked at every poll once the idler parks (a park can be
            // 100 us), every few polls while it spins.
            if let (Some(d), Some(t)) = (deadline, timeout) {
                if (parking || polls % DEADLINE_CHECK_EVERY == 0) && Instant::now() >= d {
                    // The registration, if any, goes with the abandoned cell.
                    self.abandon(index, registered);
                    return Err(Error::Timeout {
                        op: "call",
                        after: t,
                    });
                }
            }
            if parking && !registered {
                // From here on this thread parks: the driver unparks it when the reply
                // lands. Registered, then probed again before the first park.
                let w = waker.get_or_insert_with(|| {
                    core::task::Waker::from(Arc::new(ThreadWaker(std::thread::current())))
                });
                self.register(index, w, &mut registered);
                continue;
            }
            idler.idle_until(deadline);
        }
    }

    /// Registers `waker` as the waiter of `index` (owned by the caller) with the
    /// completion driver: the cell's waker, its state `WAITING`, one unit of interest.
    fn register(&self, index: u64, waker: &core::task::Waker, registered: &mut bool) {
        let cell = self.cell(index);
        {
            let mut w = cell.waker.lock();
            match w.as_ref() {
                Some(old) if old.will_wake(waker) => {}
                _ => *w = Some(waker.clone()),
            }
        }
        let _ = cell.word.compare_exchange(
            word(index, Kind::Call, ST_IDLE),
            word(index, Kind::Call, ST_WAITING),
            AcqRel,
            Acquire,
        );
        if !*registered {
            *registered = true;
            // The waiter's half of the reply bell's pair (`bell`): the caller probes
            // its reply after this.
            self.add_call_interest();
        }
    }

    /// Polls for the reply of `index` (owned by the caller) from an async task.
    ///
    /// `registered` and `spun` must start `false`, both kept by the future:
    /// `registered` records whether the future holds a registration with the completion
    /// driver, which [`Channel::abandon`] and completion hand back; `spun` whether the
    /// first poll has spun already. On the first poll the task spins up to
    /// `spin` for the reply; then it registers its waker with the completion driver.
    pub fn poll_reply<R>(
        &self,
        index: u64,
        cx: &mut Context<'_>,
        registered: &mut bool,
        spun: &mut bool,
        spin: Duration,
        f: impl FnOnce(ReplyView<'_>) -> Result<R>,
    ) -> Poll<Result<R>> {
        if self.probe(index) == Probe::Ready {
            self.unregister(index, registered);
            return Poll::Ready(self.take(index, f));
        }
        if !*spun {
            // The first poll spins on the worker for up to `spin` (the reply is usually a
            // round trip away). Under a reply bell (a kernel on a host thread) only a
            // call alone in flight spins: with others in flight the spin takes the CPU
            // the kernel's thread needs, and the bell wakes the task when its reply is
            // out. Measured on two cores against tokio's mpsc + oneshot
            // (benches/waiters.rs, docs/benchmarks.md "Waiters").
            *spun = true;
            if (!self.has_reply_bell() || self.alone_in_flight()) && self.spin_for(index, spin) {
                return Poll::Ready(self.take(index, f));
            }
        }
        match self.slow_check(index) {
            Slow::Wait => {}
            Slow::Take => {
                self.unregister(index, registered);
                return Poll::Ready(self.take(index, f));
            }
            Slow::Fail(e) => {
                self.unregister(index, registered);
                return Poll::Ready(Err(e));
            }
        }
        self.register(index, cx.waker(), registered);
        // Re-check after registering: the driver may have looked before we registered.
        if self.probe(index) == Probe::Ready {
            self.unregister(index, registered);
            return Poll::Ready(self.take(index, f));
        }
        Poll::Pending
    }

    /// Whether at most one request is claimed and its reply not yet released.
    fn alone_in_flight(&self) -> bool {
        let tail = self.region.control().k2h_tail.load(Acquire);
        self.claimed().wrapping_sub(tail) <= 1
    }

    fn spin_for(&self, index: u64, spin: Duration) -> bool {
        if spin.is_zero() {
            return false;
        }
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.probe(index) == Probe::Ready {
                    return true;
                }
                core::hint::spin_loop();
            }
            if start.elapsed() >= spin {
                return false;
            }
        }
    }

    fn unregister(&self, index: u64, registered: &mut bool) {
        if *registered {
            *registered = false;
            self.cell(index).waker.lock().take();
            self.remove_interest(1);
        }
    }

    /// Gives up waiting for the reply of `index` (a dropped future, a timed-out call).
    ///
    /// The index stays accepted: the kernel still answers it, and the reply is discarded
    /// and its slot released by whoever sees it first (this call, or the completion
    /// driver). `registered` is the waiter's registration state (see
    /// [`Channel::poll_reply`]).
    pub fn abandon(&self, index: u64, registered: bool) {
        let cell = self.cell(index);
        let to = word(index, Kind::Call, ST_ABANDONED);
        for from in [ST_IDLE, ST_WAITING] {
            if cell
                .word
                .compare_exchange(word(index, Kind::Call, from), to, AcqRel, Acquire)
                .is_ok()
            {
                break;
            }
        }
        cell.waker.lock().take();
        // The abandoned cell now holds one unit of driver interest until finalised. As in
        // `register`, a read-modify-write of the interest after the cell says so: the
        // scan of a bell that follows sees the abandoned cell, or `try_finalize` below
        // sees the reply (a registered waiter's unit is already counted: `+0`).
        if registered {
            self.interest.fetch_add(0, AcqRel);
        } else {
            self.add_call_interest();
        }
        self.try_finalize(index);
    }

    /// Discards the reply of abandoned `index` if it has arrived (or never will).
    pub(crate) fn try_finalize(&self, index: u64) -> bool {
        let mut corrupt = None;
        let ready = match self.probe(index) {
            Probe::Ready => true,
            Probe::Gone | Probe::Pending => {
                // A corrupt reply slot would never turn Ready: release it as an error.
                corrupt = self.reply_corrupt(index);
                if corrupt.is_none() && self.check_stopped().is_none() {
                    return false;
                }
                corrupt.is_none() && self.probe(index) == Probe::Ready
            }
        };
        let cell = self.cell(index);
        if cell
            .word
            .compare_exchange(
                word(index, Kind::Call, ST_ABANDONED),
                word(index, Kind::Call, ST_DONE),
                AcqRel,
                Acquire,
            )
            .is_err()
        {
            return false;
        }
        if ready {
            // Validate and discard; a protocol error is counted by `take`.
            let _ = self.take(index, |_| Ok(()));
        } else if let Some(seq) = corrupt {
            let _ = self.protocol_error(index, "reply sequence", index + 1, seq);
            self.free(index);
        } else {
            self.free(index);
        }
        self.remove_interest(1);
        true
    }

    /// Takes the next `send` reply if one is ready, in request order.
    ///
    /// `Ok(None)`: nothing ready now. An error is returned for a `send` request the
    /// kernel will never answer (it stopped), and once the kernel stopped and nothing is
    /// outstanding.
    pub fn try_recv<R>(&self, f: impl FnOnce(ReplyView<'_>) -> Result<R>) -> Result<Option<R>> {
        match self.recv_step(f) {
            RecvStep::Item(r) => r.map(Some),
            RecvStep::Empty => Ok(None),
            RecvStep::End(e) => Err(e),
        }
    }

    /// One step of `recv`: an item (a reply or the error of an unanswered send), nothing
    /// yet, or the end (the kernel stopped and every accepted request is accounted for).
    fn recv_step<R>(&self, f: impl FnOnce(ReplyView<'_>) -> Result<R>) -> RecvStep<R> {
        let tail_of = || self.region.control().k2h_tail.load(Acquire);
        loop {
            let r = self.recv_cursor.load(Acquire);
            // Every index below the released prefix was consumed; sends only by recv.
            let tail = tail_of();
            if r < tail {
                let _ = self.recv_cursor.compare_exchange(r, tail, AcqRel, Acquire);
                continue;
            }
            if r >= self.claimed() {
                return match self.poll_stopped() {
                    Some(e) if r >= self.claimed() => RecvStep::End(e),
                    _ => RecvStep::Empty,
                };
            }
            let advance = |to: u64| {
                self.recv_cursor
                    .compare_exchange(r, to, AcqRel, Acquire)
                    .is_ok()
            };
            // A reply slot the kernel published that does not say so: a send gets a
            // protocol error, a call's owner reports its own.
            let corrupt = |seq: u64| -> Option<RecvStep<R>> {
                let w = self.cell(r).word.load(Acquire);
                if w >> 3 == r && w & SEND_BIT != 0 && advance(r + 1) {
                    let e = self.protocol_error(r, "reply sequence", r + 1, seq);
                    self.free(r);
                    return Some(RecvStep::Item(Err(e)));
                }
                if w >> 3 != r {
                    // Not this lap's cell (a corrupt head beyond the claims): wait.
                    return Some(RecvStep::Empty);
                }
                if w & SEND_BIT == 0 {
                    advance(r + 1);
                }
                None
            };
            match self.probe(r) {
                Probe::Gone => match self.reply_corrupt(r) {
                    Some(seq) => {
                        if let Some(item) = corrupt(seq) {
                            return item;
                        }
                    }
                    None => {
                        advance(r + 1);
                    }
                },
                Probe::Ready => {
                    let w = self.cell(r).word.load(Acquire);
                    if w >> 3 == r && w & SEND_BIT != 0 {
                        if advance(r + 1) {
                            return RecvStep::Item(self.take(r, f));
                        }
                    } else {
                        advance(r + 1);
                    }
                }
                Probe::Pending => {
                    // Every 64th poll, as `poll_stopped` below: the kernel's line.
                    if self.stop_polls.load(core::sync::atomic::Ordering::Relaxed) % 64 == 0 {
                        if let Some(seq) = self.reply_corrupt(r) {
                            if let Some(item) = corrupt(seq) {
                                return item;
                            }
                            continue;
                        }
                    }
                    let Some(err) = self.poll_stopped() else {
                        return RecvStep::Empty;
                    };
                    if self.probe(r) != Probe::Pending {
                        continue;
                    }
                    let w = self.cell(r).word.load(Acquire);
                    if w >> 3 != r {
                        // Claimed but its producer has not written the cell yet: it will
                        // in nanoseconds (then publish). Look again rather than skip an
                        // accepted send.
                        return RecvStep::Empty;
                    }
                    // Never answered. A send gets its error here; a call's owner gets its own.
                    if advance(r + 1) && w & SEND_BIT != 0 {
                        self.free(r);
                        return RecvStep::Item(Err(err));
                    }
                }
            }
        }
    }

    /// Whether `recv` can never return another reply: the kernel stopped and every
    /// accepted request is accounted for.
    pub fn recv_exhausted(&self) -> bool {
        if self.check_stopped().is_none() {
            return false;
        }
        let tail = self.region.control().k2h_tail.load(Acquire);
        self.recv_cursor.load(Acquire).max(tail) >= self.claimed()
    }

    /// Async form of [`Channel::try_recv`]: registers `cx` with the driver when nothing is
    /// ready. `id` identifies the waiting future (see [`super::WakerSet`]). `Ready(None)`
    /// is the end: the kernel stopped and every accepted `send` was delivered or failed.
    pub fn poll_recv<R>(
        &self,
        cx: &mut Context<'_>,
        id: u64,
        mut f: impl FnMut(ReplyView<'_>) -> Result<R>,
    ) -> Poll<Option<Result<R>>> {
        let mut step = self.recv_step(&mut f);
        if matches!(step, RecvStep::Empty) {
            self.recv_waiters.register(self, id, cx.waker());
            step = self.recv_step(&mut f);
        }
        match step {
            RecvStep::Item(r) => Poll::Ready(Some(r)),
            RecvStep::Empty => Poll::Pending,
            RecvStep::End(_) => Poll::Ready(None),
        }
    }

    /// Whether the state word of `index` says it is owned by an abandoned call or is
    /// waiting, for the driver. Returns `(owned_by_index, state)`.
    pub(crate) fn cell_state(&self, index: u64) -> (bool, u64) {
        let w = self.cell(index).word.load(Acquire);
        (w >> 3 == index, w & ST_MASK)
    }

    /// Wakes the async waiter of `index`, if one is registered; returns whether it did.
    pub(crate) fn wake_index(&self, index: u64) -> bool {
        // Woken with the cell's lock released: a waker may poll or drop its future
        // (`abandon` takes the same lock), on the driver's or a kernel's thread.
        let taken = self.cell(index).waker.lock().take();
        match taken {
            Some(w) => {
                w.wake();
                true
            }
            None => false,
        }
    }
}

/// Unparks a blocking waiter's thread: its waker, for the completion driver.
struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}
