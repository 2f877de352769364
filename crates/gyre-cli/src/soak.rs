//! `gyre demo --soak <duration>`: a long run under mixed load that counts every message.
//!
//! Several producers (half of them calling, half sending to a receiver thread) publish
//! messages of random sizes, 0 up to the slot payload, each filled with a pattern derived
//! from its producer, sequence number and length, so every reply is checked byte for
//! byte. A controller pauses and resumes the kernel every [`PAUSE_EVERY`]. At the end the
//! kernel is shut down (draining what is in flight) and the run reports:
//!
//! ```text
//! sent: <accepted requests>
//! replied: <replies that matched their request>
//! errored: <typed errors>
//! lost: <sent - replied - errored>        (must be 0)
//! rss start: <KiB after warm-up>  rss end: <KiB>  growth: <KiB> (tolerance ...)
//! ```
//!
//! It fails (non-zero exit) when anything was lost, a reply did not match, or the
//! resident set grew by more than [`RSS_TOLERANCE_KIB`] between the end of the warm-up
//! (the first pause cycle: threads, rings and allocator pools exist by then) and the end.

use std::io::Write;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use gyre::{Backend, IdleStrategy, Kernel, KernelSpec, Runtime};
use gyre_core::channel::{Channel, Kind, PublishError};
use gyre_core::kernels::ids;

use crate::args::DemoArgs;
use crate::config::{DemoConfig, MAX_PRODUCERS};
use crate::error::{CliError, Result};

/// The soak's message type: a 256-byte slot (192-byte payload); sizes vary below it.
type Wire = [u8; 192];
/// How often the kernel is paused, and for how long.
pub const PAUSE_EVERY: Duration = Duration::from_millis(250);
const PAUSE_FOR: Duration = Duration::from_millis(25);
/// Allowed resident-set growth between warm-up and end: allocator and thread-stack
/// noise, far below what a leak of one allocation per message would show.
pub const RSS_TOLERANCE_KIB: u64 = 4096;
/// Longest wait for one reply before it counts as an error (a hang guard).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Producers when `--producers` is left at 1.
const DEFAULT_PRODUCERS: usize = 4;

/// Parses `20s`, `1500ms`, `2m`, or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let bad = || {
        CliError::Soak(format!(
            "invalid --soak {s:?}: expected e.g. 20s, 1500ms or 2m"
        ))
    };
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n = u64::from_str(num).map_err(|_| bad())?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.checked_mul(60).ok_or_else(bad)?),
        _ => return Err(bad()),
    };
    if d.is_zero() {
        return Err(bad());
    }
    Ok(d)
}

/// The resident set size of this process in KiB (`VmRSS` of /proc/self/status), if the
/// platform has it.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The bytes of message `seq` of producer `p` with length `len`: producer and sequence
/// first (when they fit), then a pattern, so any wrong byte is noticed.
fn fill(p: u64, seq: u64, len: usize, out: &mut [u8]) {
    let mix = p.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq ^ ((len as u64) << 48);
    for (i, b) in out[..len].iter_mut().enumerate() {
        *b = (mix.rotate_left(i as u32 % 64) as u8) ^ (i as u8);
    }
    if len >= 16 {
        out[..8].copy_from_slice(&p.to_le_bytes());
        out[8..16].copy_from_slice(&seq.to_le_bytes());
    }
}

/// A small generator (xorshift) per producer.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Counters shared by the soak's threads.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    replied: AtomicU64,
    errored: AtomicU64,
    mismatched: AtomicU64,
    full: AtomicU64,
    pauses: AtomicU64,
}

/// Publishes, retrying while the ring is full (back-pressure) until `stop`.
fn publish(ch: &Channel, kind: Kind, bytes: &[u8], c: &Counts, stop: &AtomicBool) -> Option<u64> {
    loop {
        match ch.try_publish(kind, ids::ECHO, bytes) {
            Ok(i) => {
                c.sent.fetch_add(1, Relaxed);
                return Some(i);
            }
            Err(PublishError::Full) => {
                c.full.fetch_add(1, Relaxed);
                if stop.load(Relaxed) {
                    return None;
                }
                thread::yield_now();
            }
            Err(_) => return None,
        }
    }
}

fn caller(k: &Kernel<Wire, Wire>, p: u64, c: &Counts, stop: &AtomicBool) {
    let ch = k.raw_channel();
    let payload = ch.payload();
    let idle = IdleStrategy::default();
    let mut rng = Rng(0x5EED ^ (p + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut buf = vec![0u8; payload];
    let mut seq = 0u64;
    while !stop.load(Relaxed) {
        let len = rng.below(payload as u64 + 1) as usize;
        fill(p, seq, len, &mut buf);
        let Some(idx) = publish(ch, Kind::Call, &buf[..len], c, stop) else {
            break;
        };
        match ch.wait_blocking(idx, &idle, Some(REPLY_TIMEOUT), |v| {
            Ok(v.payload == &buf[..len])
        }) {
            Ok(true) => c.replied.fetch_add(1, Relaxed),
            Ok(false) => c.mismatched.fetch_add(1, Relaxed),
            Err(_) => c.errored.fetch_add(1, Relaxed),
        };
        seq += 1;
    }
}

fn sender(k: &Kernel<Wire, Wire>, p: u64, c: &Counts, stop: &AtomicBool) {
    let ch = k.raw_channel();
    let payload = ch.payload();
    let mut rng = Rng(0xF00D ^ (p + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut buf = vec![0u8; payload];
    let mut seq = 0u64;
    while !stop.load(Relaxed) {
        let len = 16 + rng.below(payload as u64 - 15) as usize;
        fill(p, seq, len, &mut buf);
        if publish(ch, Kind::Send, &buf[..len], c, stop).is_none() {
            break;
        }
        seq += 1;
    }
}

/// Takes `send` replies until the kernel stopped and every accepted send is accounted
/// for, checking each against its producer's next expected message.
fn receiver(k: &Kernel<Wire, Wire>, producers: usize, c: &Counts) {
    let ch = k.raw_channel();
    let mut next = vec![0u64; producers];
    let mut expect = vec![0u8; ch.payload()];
    loop {
        match ch.try_recv(|v| Ok(v.payload.to_vec())) {
            Ok(Some(bytes)) => {
                let p = bytes.get(..8).map_or(u64::MAX, |b| {
                    u64::from_le_bytes(b.try_into().unwrap_or_default())
                });
                let ok = (p as usize) < producers && {
                    let seq = next[p as usize];
                    fill(p, seq, bytes.len(), &mut expect);
                    next[p as usize] += 1;
                    bytes == expect[..bytes.len()]
                };
                let counter = if ok { &c.replied } else { &c.mismatched };
                counter.fetch_add(1, Relaxed);
            }
            Ok(None) => thread::yield_now(),
            Err(_) if ch.recv_exhausted() => return,
            Err(_) => {
                c.errored.fetch_add(1, Relaxed);
            }
        }
    }
}

/// `gyre demo --soak <duration>`.
pub fn run(args: &DemoArgs, duration: &str, out: &mut dyn Write) -> Result<()> {
    let duration = parse_duration(duration)?;
    let backend = Backend::from_str(&args.backend)?;
    let producers = match args.producers {
        1 => DEFAULT_PRODUCERS,
        n => n.clamp(2, MAX_PRODUCERS),
    };
    let mut builder = Runtime::builder().backend(backend);
    if let Some(s) = DemoConfig::from_args(args)?.strategy {
        builder = builder.transfer_strategy(s);
    }
    let rt = builder.build()?;
    let mut spec = KernelSpec::<Wire, Wire>::echo().slot_size(256);
    if let Some(c) = args.capacity {
        spec = spec.capacity(c);
    }
    let k = rt.launch(spec)?;
    writeln!(
        out,
        "soak: {duration:?} on {} ({:#} transfer; {} producers: {} calling, {} sending; payload up to {} B; pause every {PAUSE_EVERY:?})",
        rt.backend_name(),
        k.transfer_strategy(),
        producers,
        producers.div_ceil(2),
        producers / 2,
        k.payload()
    )?;
    out.flush()?;
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for p in 0..producers {
        let (k, c, s) = (k.clone(), counts.clone(), stop.clone());
        let t = thread::Builder::new()
            .name(format!("soak-producer-{p}"))
            .spawn(move || {
                if p % 2 == 0 {
                    caller(&k, p as u64, &c, &s);
                } else {
                    sender(&k, p as u64, &c, &s);
                }
            })
            .map_err(|source| CliError::Spawn {
                producer: p,
                source,
            })?;
        threads.push(t);
    }
    let recv = {
        let (k, c) = (k.clone(), counts.clone());
        thread::Builder::new()
            .name("soak-receiver".into())
            .spawn(move || receiver(&k, producers, &c))
            .map_err(|source| CliError::Spawn {
                producer: producers,
                source,
            })?
    };

    let start = Instant::now();
    let mut rss_start = None;
    while start.elapsed() < duration {
        thread::sleep(PAUSE_EVERY.min(duration.saturating_sub(start.elapsed())));
        k.pause();
        thread::sleep(PAUSE_FOR);
        k.resume();
        counts.pauses.fetch_add(1, Relaxed);
        // Warm-up is one pause cycle: everything long-lived exists by then.
        if rss_start.is_none() {
            rss_start = rss_kib();
        }
    }
    stop.store(true, Relaxed);
    let mut panicked = None;
    for (p, t) in threads.into_iter().enumerate() {
        if t.join().is_err() {
            panicked = Some(p);
        }
    }
    let down = k.shutdown_blocking();
    if recv.join().is_err() {
        panicked = Some(producers);
    }
    let rss_end = rss_kib();
    if let Some(p) = panicked {
        return Err(CliError::ProducerPanicked(p));
    }
    down?;

    let c = &*counts;
    let (sent, replied, errored, mismatched) = (
        c.sent.load(Relaxed),
        c.replied.load(Relaxed),
        c.errored.load(Relaxed),
        c.mismatched.load(Relaxed),
    );
    let lost = sent.saturating_sub(replied + errored + mismatched);
    let duplicated = (replied + errored + mismatched).saturating_sub(sent);
    writeln!(out, "sent: {sent}")?;
    writeln!(out, "replied: {replied}")?;
    writeln!(out, "errored: {errored}")?;
    writeln!(out, "mismatched: {mismatched}")?;
    writeln!(out, "duplicated: {duplicated}")?;
    writeln!(out, "lost: {lost}")?;
    writeln!(
        out,
        "back-pressure: {} refused publishes (ring full), {} pauses",
        c.full.load(Relaxed),
        c.pauses.load(Relaxed)
    )?;
    let growth = match (rss_start, rss_end) {
        (Some(a), Some(b)) => {
            let g = b.saturating_sub(a);
            writeln!(
                out,
                "rss start: {a} KiB  rss end: {b} KiB  growth: {g} KiB (tolerance {RSS_TOLERANCE_KIB} KiB)"
            )?;
            g
        }
        _ => {
            writeln!(out, "rss: unavailable (no /proc/self/status)")?;
            0
        }
    };
    out.flush()?;
    if lost > 0 || duplicated > 0 || mismatched > 0 {
        return Err(CliError::Soak(format!(
            "{lost} lost, {duplicated} duplicated, {mismatched} mismatched of {sent} sent"
        )));
    }
    if growth > RSS_TOLERANCE_KIB {
        return Err(CliError::Soak(format!(
            "resident set grew by {growth} KiB (tolerance {RSS_TOLERANCE_KIB} KiB)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_bad_ones_are_named() {
        assert_eq!(parse_duration("20s").unwrap(), Duration::from_secs(20));
        assert_eq!(
            parse_duration("1500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        for bad in ["", "0s", "abc", "5h", "-1s"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains("--soak"), "{e}");
        }
    }

    #[test]
    fn patterns_differ_by_producer_sequence_and_length() {
        let (mut a, mut b) = ([0u8; 64], [0u8; 64]);
        fill(1, 2, 64, &mut a);
        fill(1, 3, 64, &mut b);
        assert_ne!(a, b);
        fill(2, 2, 64, &mut b);
        assert_ne!(a, b);
        assert_eq!(u64::from_le_bytes(a[..8].try_into().unwrap()), 1);
    }

    #[test]
    fn rss_is_read_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(rss_kib().is_some_and(|k| k > 0));
        }
    }
}
