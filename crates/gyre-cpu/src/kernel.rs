//! The device loop, run on a host thread. Steps are named as in `docs/protocol.md`.

use core::sync::atomic::Ordering::{Acquire, Release};
use std::panic::{catch_unwind, AssertUnwindSafe};

use gyre_abi::{command, error, state, ControlBlock};
use gyre_core::clock;
use gyre_core::region::RingId;
use gyre_core::ring::slot::SlotMeta;
use gyre_core::telemetry::TelemetryWriter;
use gyre_core::{Handler, IdleStrategy, SharedRegion};

/// Loop iterations between slow-path checks (command, host heartbeat, telemetry
/// heartbeat, protocol errors under the head).
const SLOW_EVERY: u32 = 128;

/// Longest gap between telemetry writes while no batch is processed (1 ms): bounds the
/// write rate when idle or paused, so readers are not starved by a writer that is
/// always mid-write.
const IDLE_TELEMETRY_NS: u64 = 1_000_000;

/// Runs the ring-kernel loop over `region` until it terminates or faults. With
/// `telemetry` false, K8 is skipped except on state changes (see
/// `gyre_core::LaunchSpec::telemetry`).
///
/// Never panics: a handler panic faults the kernel with [`error::HANDLER_PANIC`], and
/// anything else escaping the loop faults it too.
pub fn kernel_loop(
    region: &SharedRegion,
    handler: &dyn Handler,
    idle: IdleStrategy,
    telemetry: bool,
) {
    let cb = region.control();
    let r = catch_unwind(AssertUnwindSafe(|| {
        Loop::start(region, handler, idle, telemetry).map(|mut l| l.run())
    }));
    if r.is_err() {
        fault(cb, error::HANDLER_PANIC);
    }
}

/// The kernel loop driven one step at a time on the caller's thread: deterministic
/// tests, property tests against a model, fault injection.
pub struct Stepper<'a> {
    l: Loop<'a>,
    st: u32,
}

impl<'a> Stepper<'a> {
    /// Runs step K0 (validation). `None` if the kernel faulted there (see the control
    /// block's error code).
    pub fn new(region: &'a SharedRegion, handler: &'a dyn Handler) -> Option<Self> {
        let l = Loop::start(region, handler, IdleStrategy::BusySpin, true)?;
        Some(Self {
            l,
            st: state::ACTIVE,
        })
    }

    /// One loop iteration: commands and heartbeats (K1, K9), then at most one batch
    /// (K2..K8), checking for protocol errors under the head. Returns the requests
    /// answered, or `None` once the kernel stopped (terminated or faulted).
    pub fn step(&mut self) -> Option<u64> {
        if state::is_final(self.st) {
            return None;
        }
        if let Flow::Stop = self.l.slow_tick(&mut self.st) {
            // Terminated (host heartbeat stale) or faulted (corrupt control block).
            self.st = self.l.cb.state.load(Acquire);
            return None;
        }
        if self.st == state::PAUSED {
            return Some(0);
        }
        match self.l.take_batch(true) {
            Ok(0)
                if self.st == state::DRAINING
                    && self.l.cb.h2k_head.load(Acquire) <= self.l.tail =>
            {
                self.l.publish_state(state::TERMINATED);
                self.l.cb.state.store(state::TERMINATED, Release);
                self.st = state::TERMINATED;
                None
            }
            Ok(n) => {
                self.l.publish_telemetry(self.st);
                Some(n)
            }
            Err(()) => {
                self.st = state::FAULTED;
                None
            }
        }
    }
}

fn fault(cb: &ControlBlock, code: u32) {
    cb.error_code.store(code, Release);
    cb.state.store(state::FAULTED, Release);
}

struct Loop<'a> {
    region: &'a SharedRegion,
    cb: &'a ControlBlock,
    handler: &'a dyn Handler,
    idle: IdleStrategy,
    cap: u64,
    batch: u64,
    payload: usize,
    /// Next request index to consume (our copy of `h2k_tail`).
    tail: u64,
    /// Reply slots released by the host, as last read.
    k2h_tail: u64,
    /// Under `host_flags::DOORBELL` (a copy engine fills the ring; requests exist only
    /// below `h2k_head`): the head as last read. Otherwise `u64::MAX`, so K2 never reads
    /// the head on its fast path.
    head: u64,
    tel: TelemetryWriter,
    /// Whether K8 runs per batch and when idle (else only on state changes).
    telemetry: bool,
    /// `clock::ticks()` at start.
    epoch: u64,
    host_hb: u64,
    /// Ticks when `host_hb` last changed.
    host_hb_changed: u64,
    host_timeout_ns: u64,
    processed: u64,
    /// The last tick reading (one per batch or slow tick; the hot path reads no more).
    last_now: u64,
    /// `last_now` at the last telemetry write.
    last_published: u64,
}

enum Flow {
    Continue,
    Stop,
}

impl<'a> Loop<'a> {
    /// K0: validate the control block and become Active.
    fn start(
        region: &'a SharedRegion,
        handler: &'a dyn Handler,
        idle: IdleStrategy,
        telemetry: bool,
    ) -> Option<Self> {
        let cb = region.control();
        cb.state.store(state::LAUNCHING, Release);
        if cb.magic.load(Acquire) != gyre_abi::MAGIC {
            fault(cb, error::BAD_MAGIC);
            return None;
        }
        if cb.abi_version.load(Acquire) != gyre_abi::ABI_VERSION {
            fault(cb, error::BAD_ABI_VERSION);
            return None;
        }
        let g = region.geometry();
        let (cap, slot, batch) = (
            cb.capacity.load(Acquire),
            cb.slot_size.load(Acquire),
            cb.batch_size.load(Acquire),
        );
        if gyre_abi::check_geometry(cap, slot, batch).is_err()
            || (cap, slot) != (g.capacity(), g.slot_size())
        {
            fault(cb, error::BAD_GEOMETRY);
            return None;
        }
        clock::calibrate();
        let now = clock::ticks();
        let l = Self {
            region,
            cb,
            handler,
            idle,
            cap: u64::from(cap),
            batch: u64::from(batch),
            payload: g.payload(),
            tail: cb.h2k_tail.load(Acquire),
            k2h_tail: cb.k2h_tail.load(Acquire),
            head: if cb.host_flags.load(Acquire) & gyre_abi::host_flags::DOORBELL != 0 {
                cb.h2k_tail.load(Acquire)
            } else {
                u64::MAX
            },
            tel: TelemetryWriter::default(),
            telemetry,
            epoch: now,
            host_hb: cb.host_heartbeat.load(Acquire),
            host_hb_changed: now,
            host_timeout_ns: u64::from(cb.host_timeout_ms.load(Acquire)) * 1_000_000,
            processed: cb.processed.load(Acquire),
            last_now: now,
            last_published: now,
        };
        cb.state.store(state::ACTIVE, Release);
        Some(l)
    }

    fn run(&mut self) {
        let mut idler = self.idle.idler();
        let mut st = state::ACTIVE;
        let mut iter: u32 = 0;
        self.publish_state(st);
        loop {
            iter = iter.wrapping_add(1);
            // K1: commands and heartbeats, on the slow path; also on every idle
            // iteration once the idler parks or sleeps (a park costs far more), so the
            // kernel heartbeat (the host watchdog's sign of life) never waits 128 parks.
            if iter % SLOW_EVERY == 0 || st != state::ACTIVE || idler.is_parking() {
                match self.slow_tick(&mut st) {
                    Flow::Stop => return,
                    Flow::Continue => {}
                }
                if st == state::PAUSED {
                    idler.idle(false);
                    continue;
                }
            }
            // K2..K7: take and answer a batch.
            let n = match self.take_batch(iter % SLOW_EVERY == 0) {
                Ok(n) => n,
                Err(()) => return,
            };
            if n > 0 {
                self.tel.acc.busy_polls += 1;
                self.publish_telemetry(st);
            } else {
                self.tel.acc.idle_polls += 1;
                if st == state::DRAINING && self.cb.h2k_head.load(Acquire) <= self.tail {
                    // Everything published before Terminate is answered.
                    self.cb.processed.store(self.processed, Release);
                    self.publish_state(state::TERMINATED);
                    self.cb.state.store(state::TERMINATED, Release);
                    return;
                }
            }
            idler.idle(n > 0);
        }
    }

    /// K1 + K9: read the command, write the heartbeat, check the host heartbeat.
    fn slow_tick(&mut self, st: &mut u32) -> Flow {
        let now = clock::ticks();
        self.last_now = now;
        self.cb.processed.store(self.processed, Release);
        self.cb.kernel_heartbeat.store(
            clock::ticks_to_ns(now.wrapping_sub(self.epoch)) + 1,
            Release,
        );
        let hb = self.cb.host_heartbeat.load(Acquire);
        if hb != self.host_hb {
            self.host_hb = hb;
            self.host_hb_changed = now;
        } else if self.host_timeout_ns != 0
            && clock::ticks_to_ns(now.wrapping_sub(self.host_hb_changed)) > self.host_timeout_ns
        {
            tracing::warn!(
                timeout_ns = self.host_timeout_ns,
                "host heartbeat stale: terminating"
            );
            self.cb
                .error_code
                .store(error::HOST_HEARTBEAT_STALE, Release);
            self.publish_state(state::TERMINATED);
            self.cb.state.store(state::TERMINATED, Release);
            return Flow::Stop;
        }
        // K1: the host line's identity. A corrupt control block faults the kernel (the
        // host reports the code to every waiter) instead of being trusted.
        if !self.cb.identity_ok() {
            tracing::warn!("control block magic or ABI version corrupted: faulting");
            // As ring.h: error code, final telemetry, then the final state.
            self.cb.processed.store(self.processed, Release);
            self.cb.error_code.store(error::BAD_MAGIC, Release);
            self.publish_state(state::FAULTED);
            self.cb.state.store(state::FAULTED, Release);
            return Flow::Stop;
        }
        let cmd = self.cb.command.load(Acquire);
        let next = match (cmd, *st) {
            (command::TERMINATE, _) => state::DRAINING,
            (command::PAUSE, state::ACTIVE) => state::PAUSED,
            (command::RUN, state::PAUSED) => state::ACTIVE,
            (_, s) => s,
        };
        if next != *st {
            *st = next;
            self.cb.state.store(next, Release);
            self.publish_state(next);
        } else if clock::ticks_to_ns(now.wrapping_sub(self.last_published)) >= IDLE_TELEMETRY_NS {
            // Idle or paused: refresh the telemetry heartbeat at a bounded rate.
            self.publish_telemetry(*st);
        }
        Flow::Continue
    }

    /// K2..K7. Returns how many requests were answered; `Err` after a fault.
    fn take_batch(&mut self, check_head: bool) -> Result<u64, ()> {
        let region = self.region;
        // K2/K3: the contiguous run of published requests, bounded by the batch size and
        // by the reply slots the host has released.
        let mut n = 0;
        while n < self.batch {
            let idx = self.tail + n;
            if idx >= self.head {
                // Doorbell mode: only slots below the published head are complete.
                self.head = self.cb.h2k_head.load(Acquire);
                if idx >= self.head {
                    break;
                }
            }
            if region.slot(RingId::Request, idx).sequence().load(Acquire) != idx + 1 {
                break;
            }
            // Wrapping, as ring.h's unsigned arithmetic: a corrupt `k2h_tail` beyond `idx`
            // reads as "no free reply slot" (never overwrite), not as an overflow.
            if idx.wrapping_sub(self.k2h_tail) >= self.cap {
                self.k2h_tail = self.cb.k2h_tail.load(Acquire);
                if idx.wrapping_sub(self.k2h_tail) >= self.cap {
                    break;
                }
            }
            n += 1;
        }
        let mut bad_seq = false;
        if n == 0 {
            if !check_head {
                return Ok(0);
            }
            // K4 (slow path): a published head beyond a slot whose sequence is wrong.
            let head = self.cb.h2k_head.load(Acquire);
            if head <= self.tail {
                return Ok(0);
            }
            if self.tail.wrapping_sub(self.k2h_tail) >= self.cap {
                // The cached release index may be a lap behind: re-read it (K3).
                self.k2h_tail = self.cb.k2h_tail.load(Acquire);
                if self.tail.wrapping_sub(self.k2h_tail) >= self.cap {
                    return Ok(0);
                }
            }
            // Re-read after the head: the first read may predate the publication.
            let seq = region
                .slot(RingId::Request, self.tail)
                .sequence()
                .load(Acquire);
            if seq == self.tail + 1 {
                return Ok(0);
            }
            n = 1;
            bad_seq = true;
        }
        let t0 = clock::ticks();
        for k in 0..n {
            let idx = self.tail + k;
            if let Err(code) = self.answer(idx, bad_seq) {
                // K6/K7 for what was answered, including the failed request's error reply.
                self.publish_indices(k + 1);
                self.cb.processed.store(self.processed, Release);
                self.publish_state(state::FAULTED);
                fault(self.cb, code);
                return Err(());
            }
        }
        self.last_now = clock::ticks();
        let dt = clock::ticks_to_ns(self.last_now.wrapping_sub(t0));
        self.tel.acc.handler_ns_total += dt;
        self.tel.acc.handler_ns_max = self
            .tel
            .acc
            .handler_ns_max
            .max(dt.min(u64::from(u32::MAX)) as u32);
        self.publish_indices(n);
        Ok(n)
    }

    /// K4..K6 for one request: validate, handle, write and stamp the reply. `Err(code)`
    /// when the handler panicked (its error reply is written and stamped).
    fn answer(&mut self, idx: u64, bad_seq: bool) -> Result<(), u32> {
        let rq = self.region.slot(RingId::Request, idx);
        let rs = self.region.slot(RingId::Reply, idx);
        // SAFETY: the request is published (sequence == idx + 1, or we only read it to
        // report an error) and not yet released: the host does not write it. The reply
        // slot idx is free (idx - k2h_tail < capacity) and unpublished: we own it.
        let meta = unsafe { rq.read_meta() };
        let mut out = SlotMeta {
            correlation_id: meta.correlation_id,
            enqueue_ns: meta.enqueue_ns,
            msg_type: meta.msg_type,
            len: 0,
            flags: meta.flags,
            status: error::NONE,
        };
        let mut panicked = false;
        if bad_seq {
            out.correlation_id = idx;
            out.status = error::BAD_SEQUENCE;
        } else if meta.len as usize > self.payload {
            out.status = error::BAD_LENGTH;
        } else {
            // SAFETY: see above; len <= payload checked.
            let (req, reply) = unsafe { (rq.payload(meta.len as usize), rs.payload_mut()) };
            // K5: the handler.
            match catch_unwind(AssertUnwindSafe(|| {
                self.handler.handle(meta.msg_type, req, reply)
            })) {
                Ok(Ok(len)) if len <= self.payload => out.len = len as u32,
                // A reply longer than the slot: refused (the host reports ReplyTooLong).
                Ok(Ok(_)) => out.status = error::BAD_LENGTH,
                // Codes below USER_BASE are the protocol's: only two of them pass.
                Ok(Err(code)) => out.status = gyre_core::handler::reply_status(code),
                Err(_) => {
                    out.status = error::HANDLER_PANIC;
                    panicked = true;
                }
            }
        }
        if out.status != error::NONE {
            self.tel.acc.errors += 1;
        }
        // SAFETY: we own the unpublished reply slot (see above).
        unsafe { rs.write_meta(&out) };
        // K6: the reply's sequence last, with release.
        rs.sequence().store(idx + 1, Release);
        if panicked {
            Err(error::HANDLER_PANIC)
        } else {
            Ok(())
        }
    }

    /// K7: release `n` requests and publish `n` replies (one store per index per batch).
    /// `processed` is stored on the slow path and at exit, not per batch.
    fn publish_indices(&mut self, n: u64) {
        self.tail += n;
        self.processed += n;
        self.tel.acc.messages_in += n;
        self.tel.acc.messages_out += n;
        self.cb.h2k_tail.store(self.tail, Release);
        self.cb.k2h_head.store(self.tail, Release);
    }

    /// K8 after a batch or on the idle refresh: skipped when telemetry is off.
    #[inline]
    fn publish_telemetry(&mut self, st: u32) {
        if self.telemetry {
            self.write_telemetry(st);
        }
    }

    /// K8 on a state change: always written. With telemetry off only the state and the
    /// heartbeat are written; the counters stay at zero.
    fn publish_state(&mut self, st: u32) {
        if self.telemetry {
            self.write_telemetry(st);
        } else {
            let mut w = TelemetryWriter::default();
            w.acc.state = st;
            w.acc.heartbeat_ms = self.heartbeat_ms();
            w.publish(self.region.telemetry());
            self.last_published = self.last_now;
        }
    }

    fn heartbeat_ms(&self) -> u32 {
        (clock::ticks_to_ns(self.last_now.wrapping_sub(self.epoch)) / 1_000_000) as u32
    }

    /// K8: telemetry under the seqlock, stamped with the last clock reading.
    fn write_telemetry(&mut self, st: u32) {
        self.tel.acc.state = st;
        self.tel.acc.heartbeat_ms = self.heartbeat_ms();
        self.tel.publish(self.region.telemetry());
        self.last_published = self.last_now;
    }
}
