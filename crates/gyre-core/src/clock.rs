//! The host clock used for enqueue timestamps and heartbeats.

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds on a monotonic process-wide clock (never 0 after the first call).
#[inline]
pub fn now_ns() -> u64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    // 2^64 ns is 584 years: the cast cannot truncate in practice.
    (epoch.elapsed().as_nanos() as u64).wrapping_add(1)
}
