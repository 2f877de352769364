//! The demo's workload: producer threads doing verified, timed round trips.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread;
use std::time::{Duration, Instant};

use gyre::Kernel;
use hdrhistogram::Histogram;

use crate::config::{DemoConfig, Msg};
use crate::error::{CliError, Result};
use crate::progress::Progress;

/// Producers publish their progress in batches of this many messages.
const PROGRESS_BATCH: u64 = 1024;
/// Largest round trip the histograms resolve (longer ones are clamped): 60 s.
const MAX_TRACKED_NS: u64 = 60_000_000_000;

/// Request `seq` of producer `producer`: both numbers, then a pattern derived from them,
/// so that any byte the kernel gets wrong is noticed.
pub fn message(producer: u64, seq: u64) -> Msg {
    let mut m = [0u8; 64];
    m[..8].copy_from_slice(&producer.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    let mix = producer.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq;
    for (i, b) in m.iter_mut().enumerate().skip(16) {
        *b = (mix.rotate_left(i as u32) as u8) ^ (i as u8);
    }
    m
}

/// An error naming the first byte where `got` differs from `sent`.
pub fn check_echo(producer: u64, seq: u64, sent: &Msg, got: &Msg) -> Result<()> {
    match sent.iter().zip(got).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(byte) => Err(CliError::Mismatch {
            producer,
            seq,
            byte,
            sent: sent[byte],
            got: got[byte],
        }),
    }
}

/// A histogram of nanoseconds with three significant digits.
pub fn new_histogram() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3).map_err(|e| CliError::Histogram(e.to_string()))
}

/// A duration in whole nanoseconds, saturating.
pub fn as_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What the producers measured.
pub struct Measured {
    /// Round-trip times of every call, ns.
    pub rtt: Histogram<u64>,
    /// Wall time from starting the producers to the last one finishing.
    pub elapsed: Duration,
}

/// Runs the producers (and the progress bar) to completion.
pub fn drive(kernel: &Kernel<Msg, Msg>, cfg: &DemoConfig) -> Result<Measured> {
    let progress = &Progress::default();
    let abort = &AtomicBool::new(false);
    let start = Instant::now();
    let (results, elapsed) = thread::scope(|s| {
        let drawer = if Progress::wanted() {
            thread::Builder::new()
                .name("gyre-progress".into())
                .spawn_scoped(s, move || progress.draw_until_finished(cfg.messages, start))
                .ok()
        } else {
            None
        };
        let mut results = Vec::with_capacity(cfg.producers);
        let mut handles = Vec::with_capacity(cfg.producers);
        for p in 0..cfg.producers {
            let n = cfg.share(p);
            let spawned = thread::Builder::new()
                .name(format!("gyre-producer-{p}"))
                .spawn_scoped(s, move || producer(kernel, p as u64, n, progress, abort));
            match spawned {
                Ok(h) => handles.push((p, h)),
                Err(source) => {
                    abort.store(true, Relaxed);
                    results.push(Err(CliError::Spawn {
                        producer: p,
                        source,
                    }));
                    break;
                }
            }
        }
        for (p, h) in handles {
            results.push(h.join().unwrap_or(Err(CliError::ProducerPanicked(p))));
        }
        let elapsed = start.elapsed();
        progress.finished.store(true, Relaxed);
        if let Some(d) = drawer {
            d.thread().unpark();
            let _ = d.join();
        }
        (results, elapsed)
    });
    let mut rtt = new_histogram()?;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(h) => rtt
                .add(&h)
                .map_err(|e| CliError::Histogram(e.to_string()))?,
            Err(CliError::Aborted) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None if abort.load(Relaxed) => Err(CliError::Aborted),
        None => Ok(Measured { rtt, elapsed }),
    }
}

/// One producer: `n` verified round trips, each timed. Sets `abort` when it fails and
/// stops early when another producer did.
fn producer(
    kernel: &Kernel<Msg, Msg>,
    id: u64,
    n: u64,
    progress: &Progress,
    abort: &AtomicBool,
) -> Result<Histogram<u64>> {
    let r = produce(kernel, id, n, progress, abort);
    if matches!(r, Err(ref e) if !matches!(e, CliError::Aborted)) {
        abort.store(true, Relaxed);
    }
    r
}

fn produce(
    kernel: &Kernel<Msg, Msg>,
    id: u64,
    n: u64,
    progress: &Progress,
    abort: &AtomicBool,
) -> Result<Histogram<u64>> {
    let mut hist = new_histogram()?;
    let mut unreported = 0;
    for seq in 0..n {
        if abort.load(Relaxed) {
            return Err(CliError::Aborted);
        }
        let req = message(id, seq);
        let t0 = Instant::now();
        let reply = kernel.call_blocking(req);
        let rtt = t0.elapsed();
        let reply = reply?;
        hist.saturating_record(as_nanos(rtt));
        check_echo(id, seq, &req, &reply)?;
        unreported += 1;
        if unreported == PROGRESS_BATCH {
            progress.done.fetch_add(unreported, Relaxed);
            unreported = 0;
        }
    }
    progress.done.fetch_add(unreported, Relaxed);
    Ok(hist)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_differ_and_verify() {
        let a = message(0, 0);
        let b = message(0, 1);
        let c = message(1, 0);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert!(check_echo(0, 0, &a, &a).is_ok());
        let mut bad = a;
        bad[40] ^= 1;
        match check_echo(0, 0, &a, &bad) {
            Err(CliError::Mismatch { byte: 40, .. }) => {}
            other => panic!("expected a mismatch at byte 40, got {other:?}"),
        }
    }
}
