//! The telemetry line: the kernel's single writer under the sequence lock of
//! [`crate::seqlock`], and consistent readers. Other processes read an export file
//! ([`crate::shm::TelemetryReader`]).

use core::sync::atomic::Ordering::Relaxed;

use gyre_abi::{TelemetryBuffer, TelemetrySnapshot};

use crate::seqlock;

mod rates;

pub use rates::{rates, Rates};

/// The kernel-side accumulator; published to the buffer with [`TelemetryWriter::publish`].
#[derive(Debug, Default, Clone)]
pub struct TelemetryWriter {
    /// The values to publish next.
    pub acc: TelemetrySnapshot,
}

impl TelemetryWriter {
    /// Publishes `self.acc` to `buf` under the sequence lock. Single writer only.
    #[inline]
    pub fn publish(&mut self, buf: &TelemetryBuffer) {
        let a = &self.acc;
        self.acc.seq = seqlock::write(&buf.seq, || {
            buf.state.store(a.state, Relaxed);
            buf.messages_in.store(a.messages_in, Relaxed);
            buf.messages_out.store(a.messages_out, Relaxed);
            buf.errors.store(a.errors, Relaxed);
            buf.busy_polls.store(a.busy_polls, Relaxed);
            buf.idle_polls.store(a.idle_polls, Relaxed);
            buf.handler_ns_total.store(a.handler_ns_total, Relaxed);
            buf.handler_ns_max.store(a.handler_ns_max, Relaxed);
            buf.heartbeat_ms.store(a.heartbeat_ms, Relaxed);
        });
    }
}

/// Why a telemetry read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no stable telemetry read after {attempts} attempts (writer busy or stopped mid-write)")]
pub struct TornRead {
    /// How many reads were tried.
    pub attempts: u32,
}

/// Takes a consistent snapshot of `buf`, retrying up to `attempts` times on a torn read
/// (spinning for the first 64, then yielding the CPU before each further attempt).
///
/// # Examples
///
/// ```
/// use gyre_core::telemetry::{read_consistent, TelemetryWriter};
/// let buf: gyre_abi::TelemetryBuffer = unsafe { core::mem::zeroed() };
/// let mut w = TelemetryWriter::default();
/// w.acc.messages_in = 7;
/// w.publish(&buf);
/// assert_eq!(read_consistent(&buf, 16).unwrap().messages_in, 7);
/// ```
pub fn read_consistent(
    buf: &TelemetryBuffer,
    attempts: u32,
) -> Result<TelemetrySnapshot, TornRead> {
    seqlock::read(&buf.seq, attempts, |seq| TelemetrySnapshot {
        seq,
        state: buf.state.load(Relaxed),
        messages_in: buf.messages_in.load(Relaxed),
        messages_out: buf.messages_out.load(Relaxed),
        errors: buf.errors.load(Relaxed),
        busy_polls: buf.busy_polls.load(Relaxed),
        idle_polls: buf.idle_polls.load(Relaxed),
        handler_ns_total: buf.handler_ns_total.load(Relaxed),
        handler_ns_max: buf.handler_ns_max.load(Relaxed),
        heartbeat_ms: buf.heartbeat_ms.load(Relaxed),
    })
    .ok_or(TornRead {
        attempts: attempts.max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Buf(TelemetryBuffer);
    // SAFETY: TelemetryBuffer is all atomics.
    unsafe impl Sync for Buf {}

    /// A reader racing a writer never sees a torn snapshot: every field of a snapshot is
    /// derived from one counter by the writer, so any mix of two writes is detectable.
    #[test]
    fn racing_reader_never_sees_torn_snapshot() {
        // SAFETY: all-zero is a valid TelemetryBuffer (atomics).
        let buf = Arc::new(Buf(unsafe { core::mem::zeroed() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (b2, s2) = (buf.clone(), stop.clone());
        let writer = std::thread::spawn(move || {
            let mut w = TelemetryWriter::default();
            let mut k: u64 = 0;
            while !s2.load(Relaxed) {
                k += 1;
                w.acc.messages_in = k;
                w.acc.messages_out = k * 2;
                w.acc.errors = k * 3;
                w.acc.busy_polls = k * 5;
                w.acc.idle_polls = !k;
                w.acc.handler_ns_total = k.rotate_left(17);
                w.acc.handler_ns_max = k as u32;
                w.acc.heartbeat_ms = (k as u32).wrapping_mul(7);
                w.publish(&b2.0);
            }
        });
        let mut ok = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while std::time::Instant::now() < deadline {
            if let Ok(s) = read_consistent(&buf.0, 64) {
                let k = s.messages_in;
                assert_eq!(s.messages_out, k * 2);
                assert_eq!(s.errors, k * 3);
                assert_eq!(s.busy_polls, k * 5);
                assert_eq!(s.idle_polls, if k == 0 { 0 } else { !k });
                assert_eq!(s.handler_ns_total, k.rotate_left(17));
                assert_eq!(s.handler_ns_max, k as u32);
                assert_eq!(s.heartbeat_ms, (k as u32).wrapping_mul(7));
                assert_eq!(s.seq & 1, 0);
                ok += 1;
            }
        }
        stop.store(true, Relaxed);
        writer.join().unwrap();
        assert!(ok > 100, "too few consistent reads: {ok}");
    }
}
